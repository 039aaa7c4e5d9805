"""drivekit's stand-in for scenario_runner's `srunner.scenariomanager.carla_data_provider`, for a leaderboard agent
driving in the embedded world (tools.evaluate.leaderboard.host).

What sensor agents ask of it is here: the map (a real carla.Map of the town), the world and the hero actor as the
embedded world's stand-ins (tools.evaluate.leaderboard.world: transform, location, velocity, bounding box, control),
their cached location, transform and speed, the actor pool. The host fills the same class attributes that
scenario_runner's CarlaDataProvider has, so it can fill the user's own one alike (SCENARIO_RUNNER_ROOT set).
Anything else (spawning actors, the client, traffic lights, the route planner) has no meaning without a CARLA
server: it raises one error naming the call, and the run ends as the leaderboard ends it for an agent error.
"""

import math


class _Refusing(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"CarlaDataProvider.{name}: not available in drivekit's embedded world (no CARLA server); available: "
            "get_map, get_world, get_hero_actor, get_actors, get_actor_by_id, actor_id_exists, get_location, "
            "get_transform, get_velocity, is_sync_mode, get_random_seed")


class CarlaDataProvider(metaclass=_Refusing):
    """Class-level state, as scenario_runner's (the host sets _world, _map, _carla_actor_pool and the maps)."""

    _world = None
    _map = None
    _sync_flag = True
    _carla_actor_pool = {}
    _actor_location_map = {}
    _actor_transform_map = {}
    _actor_velocity_map = {}
    _rng_seed = 2000

    @staticmethod
    def get_world():
        return CarlaDataProvider._world

    @staticmethod
    def get_map(world=None):
        return CarlaDataProvider._map

    @staticmethod
    def is_sync_mode():
        return CarlaDataProvider._sync_flag

    @staticmethod
    def get_random_seed():
        return CarlaDataProvider._rng_seed

    @staticmethod
    def get_actors():
        return list(CarlaDataProvider._carla_actor_pool.items())

    @staticmethod
    def get_all_actors():
        return list(CarlaDataProvider._carla_actor_pool.values())

    @staticmethod
    def actor_id_exists(actor_id):
        return actor_id in CarlaDataProvider._carla_actor_pool

    @staticmethod
    def get_actor_by_id(actor_id):
        return CarlaDataProvider._carla_actor_pool.get(actor_id)

    @staticmethod
    def get_hero_actor():
        for actor in CarlaDataProvider._carla_actor_pool.values():
            if actor.attributes.get("role_name") == "hero":
                return actor
        return None

    @staticmethod
    def get_location(actor):
        return CarlaDataProvider._actor_location_map.get(actor)

    @staticmethod
    def get_transform(actor):
        return CarlaDataProvider._actor_transform_map.get(actor)

    @staticmethod
    def get_velocity(actor):
        """The actor's speed (m/s, the length of its velocity), as scenario_runner's."""
        v = CarlaDataProvider._actor_velocity_map.get(actor)
        return 0.0 if v is None else v

    @staticmethod
    def on_carla_tick():
        for actor in CarlaDataProvider._carla_actor_pool.values():
            v = actor.get_velocity()
            CarlaDataProvider._actor_velocity_map[actor] = math.sqrt(v.x ** 2 + v.y ** 2 + v.z ** 2)
            CarlaDataProvider._actor_location_map[actor] = actor.get_location()
            CarlaDataProvider._actor_transform_map[actor] = actor.get_transform()

    @staticmethod
    def cleanup():
        CarlaDataProvider._world = None
        CarlaDataProvider._map = None
        CarlaDataProvider._carla_actor_pool = {}
        CarlaDataProvider._actor_location_map = {}
        CarlaDataProvider._actor_transform_map = {}
        CarlaDataProvider._actor_velocity_map = {}
