"""Stand-in of scenario_runner's CarlaDataProvider (v0.9.16): the three getters our agent calls, answering
what the test put in the class attributes, and its random source as the real one keeps it (`_random_seed`,
2000; `_rng`, a numpy RandomState made from it at import and again by cleanup())."""

from numpy import random


class CarlaDataProvider:
    world = None
    map = None
    hero = None
    _random_seed = 2000
    _rng = random.RandomState(_random_seed)

    @staticmethod
    def get_world():
        return CarlaDataProvider.world

    @staticmethod
    def get_map(world=None):
        return CarlaDataProvider.map

    @staticmethod
    def get_hero_actor():
        return CarlaDataProvider.hero

    @staticmethod
    def get_random_seed():
        return CarlaDataProvider._rng

    @staticmethod
    def cleanup():
        CarlaDataProvider._rng = random.RandomState(CarlaDataProvider._random_seed)
