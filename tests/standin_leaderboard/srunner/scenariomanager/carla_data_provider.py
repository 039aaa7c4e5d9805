"""Stand-in of scenario_runner's CarlaDataProvider (v0.9.16): the three getters our agent calls, answering
what the test put in the class attributes."""


class CarlaDataProvider:
    world = None
    map = None
    hero = None

    @staticmethod
    def get_world():
        return CarlaDataProvider.world

    @staticmethod
    def get_map(world=None):
        return CarlaDataProvider.map

    @staticmethod
    def get_hero_actor():
        return CarlaDataProvider.hero
