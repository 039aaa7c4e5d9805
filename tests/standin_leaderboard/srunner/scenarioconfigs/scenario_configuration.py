"""Stand-in of scenario_runner's srunner/scenarioconfigs/scenario_configuration.py (v0.9.16): ActorConfigurationData,
what RouteScenario makes of the hero for each scenario's config (`ego_vehicles`). Written here from its
description."""


class ActorConfigurationData:
    def __init__(self, model, transform, rolename="other", speed=0, autopilot=False, random=False, color=None,
                 category="car", args=None):
        self.model, self.transform, self.rolename, self.speed = model, transform, rolename, speed
        self.autopilot, self.random_location, self.color, self.category, self.args = \
            autopilot, random, color, category, args
