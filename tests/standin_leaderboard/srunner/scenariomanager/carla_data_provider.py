"""Stand-in of scenario_runner's CarlaDataProvider (v0.9.16): the getters our agent calls, answering what the test
put in the class attributes; its random source as the real one keeps it (`_random_seed`, 2000; `_rng`, a numpy
RandomState made from it at import and again by cleanup()); and what building a scenario class against a world
uses (tools.collect.carla.scenario_build): set_client / set_world (the world's map and blueprint library),
request_new_actor (a blueprint of the model, its role name set, spawned with world.try_spawn_actor, kept in
`_carla_actor_pool`), remove_actor_by_id, cleanup. Written here from their description."""

from numpy import random


class CarlaDataProvider:
    world = None
    map = None
    hero = None
    _client = None
    _blueprint_library = None
    _carla_actor_pool: dict = {}
    _traffic_manager_port = 8000
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
    def set_client(client):
        CarlaDataProvider._client = client

    @staticmethod
    def get_client():
        return CarlaDataProvider._client

    @staticmethod
    def set_world(world):
        CarlaDataProvider.world = world
        CarlaDataProvider.map = world.get_map()
        CarlaDataProvider._blueprint_library = world.get_blueprint_library()

    @staticmethod
    def set_traffic_manager_port(port):
        CarlaDataProvider._traffic_manager_port = port

    @staticmethod
    def request_new_actor(model, spawn_point=None, rolename="scenario", autopilot=False, random_location=False,
                          color=None, actor_category="car", attribute_filter=None, tick=True):
        blueprint = CarlaDataProvider._rng.choice(CarlaDataProvider._blueprint_library.filter(model))
        if blueprint.has_attribute("role_name"):
            blueprint.set_attribute("role_name", rolename)
        actor = CarlaDataProvider.world.try_spawn_actor(blueprint, spawn_point)
        if actor is not None:
            CarlaDataProvider._carla_actor_pool[actor.id] = actor
        return actor

    @staticmethod
    def remove_actor_by_id(actor_id):
        if actor_id in CarlaDataProvider._carla_actor_pool:
            return CarlaDataProvider._carla_actor_pool.pop(actor_id).destroy()
        return None

    @staticmethod
    def cleanup():
        CarlaDataProvider._carla_actor_pool = {}
        CarlaDataProvider.world = CarlaDataProvider.map = CarlaDataProvider._client = None
        CarlaDataProvider._rng = random.RandomState(CarlaDataProvider._random_seed)
