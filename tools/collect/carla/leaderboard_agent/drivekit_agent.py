"""The file the CARLA leaderboard evaluator loads as our agent (`--agent=<this file>`).

A thin `AutonomousAgent` subclass: the leaderboard calls set_global_plan() (its route, before setup),
setup(), sensors(), run_step() and destroy(); each forwards to tools.collect.carla.agent.AgentCore with what
the leaderboard and scenario_runner give (its route, CarlaDataProvider's world, map and hero, GameTime's
frame). This folder holds nothing else: the evaluator
puts it first on sys.path (tools.collect.carla.agent.AGENT_FILE says why).
"""

import carla
from leaderboard.autoagents.autonomous_agent import AutonomousAgent, Track
from srunner.scenariomanager.carla_data_provider import CarlaDataProvider
from srunner.scenariomanager.timer import GameTime

from tools.collect.carla.agent import ENTRY_POINT, AgentConfig, AgentCore


def get_entry_point():
    return ENTRY_POINT


class DriveKitAgent(AutonomousAgent):
    """Drives with the expert and records the dataset's frames (tools.collect.carla.agent)."""

    plan = None  # the leaderboard's dense route, (carla.Transform, RoadOption) about 1 m apart

    def set_global_plan(self, global_plan_gps, global_plan_world_coord):
        # Called by the evaluator before setup(). The base class keeps a downsampled copy (route_manipulation's
        # downsample_route); the expert drives the whole route, the one the leaderboard judges.
        super().set_global_plan(global_plan_gps, global_plan_world_coord)
        self.plan = list(global_plan_world_coord)

    def setup(self, path_to_conf_file):
        self.track = Track.SENSORS
        self.core = AgentCore(AgentConfig.read(path_to_conf_file))
        self.core.start(CarlaDataProvider.get_world(), CarlaDataProvider.get_map(),
                        CarlaDataProvider.get_hero_actor(), self.plan)

    def sensors(self):
        return self.core.sensors(CarlaDataProvider.get_hero_actor())

    def __call__(self):
        """AutonomousAgent.__call__ without its print: the base class prints a line every tick (megabytes of
        attempt log per route)."""
        control = self.run_step(self.sensor_interface.get_data(GameTime.get_frame()), GameTime.get_time())
        control.manual_gear_shift = False
        return control

    def run_step(self, input_data, timestamp):
        control = self.core.step(input_data, GameTime.get_frame(), timestamp)
        return carla.VehicleControl(throttle=float(control.throttle), steer=float(control.steer),
                                    brake=float(control.brake))

    def destroy(self):
        self.core.destroy()
