"""The embedded world as a leaderboard agent sees it through CarlaDataProvider: a stand-in of the hero actor and of
the carla.World, in CARLA's own types (carla.Transform, carla.Vector3D, carla.BoundingBox, carla.VehicleControl of
the installed client).

The hero's origin is the ego frame's (tools.dataset.geometry: on the ground under the box centre), as a CARLA car's
is within a few centimetres; its bounding box is the ego box. The embedded world is flat: z is 0 on the ground,
pitch and roll are 0. What has no meaning without a CARLA server (spawning, ticking, other actors, the client)
raises WorldCallRefused naming the call: the agent fails there as it would on any error of its own.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any

import carla

from tools.expert.state import Box

#: The leaderboard's hero (leaderboard/scenarios/route_scenario.py spawns it with role_name "hero").
HERO_TYPE = "vehicle.lincoln.mkz_2020"
HERO_ID = 1


class WorldCallRefused(NotImplementedError):
    """A CARLA call the embedded world cannot answer."""


def _refuse(owner: str, name: str, available: str) -> WorldCallRefused:
    return WorldCallRefused(f"{owner}.{name}: not available in drivekit's embedded world (no CARLA server); "
                            f"available: {available}")


@dataclass
class Timestamp:
    """carla.Timestamp's fields, for GameTime.on_carla_tick."""

    frame: int
    elapsed_seconds: float
    delta_seconds: float
    platform_timestamp: float


@dataclass
class HeroState:
    """The ego's kinematics at one tick (CARLA's frame: x forward east, y south, yaw clockwise from above)."""

    x: float
    y: float
    yaw: float  # degrees
    velocity: tuple[float, float, float]  # m/s, world
    acceleration: tuple[float, float, float]  # m/s^2, world
    yaw_rate: float  # degrees per second (CARLA's get_angular_velocity unit)
    speed: float  # m/s along the heading


class Hero:
    """The hero actor: what agents read of the ego."""

    _AVAILABLE = ("id, type_id, attributes, is_alive, bounding_box, get_transform, get_location, get_velocity, "
                  "get_acceleration, get_angular_velocity, get_control, get_speed_limit, get_world")

    def __init__(self, box: Box, world: EmbeddedWorld):
        self.id = HERO_ID
        self.type_id = HERO_TYPE
        self.attributes = {"role_name": "hero", "base_type": "car", "number_of_wheels": "4"}
        self.is_alive = True
        self.bounding_box = carla.BoundingBox(carla.Location(0.0, 0.0, box.height / 2.0),
                                              carla.Vector3D(box.length / 2.0, box.width / 2.0, box.height / 2.0))
        self.state = HeroState(box.x, box.y, box.yaw, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 0.0, 0.0)
        self.control = carla.VehicleControl()
        self.speed_limit_kmh = 0.0
        self._world = world

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _refuse("hero actor", name, self._AVAILABLE)

    def get_transform(self) -> carla.Transform:
        return carla.Transform(carla.Location(self.state.x, self.state.y, 0.0), carla.Rotation(yaw=self.state.yaw))

    def get_location(self) -> carla.Location:
        return carla.Location(self.state.x, self.state.y, 0.0)

    def get_velocity(self) -> carla.Vector3D:
        return carla.Vector3D(*self.state.velocity)

    def get_acceleration(self) -> carla.Vector3D:
        return carla.Vector3D(*self.state.acceleration)

    def get_angular_velocity(self) -> carla.Vector3D:
        return carla.Vector3D(0.0, 0.0, self.state.yaw_rate)

    def get_control(self) -> carla.VehicleControl:
        return self.control

    def get_speed_limit(self) -> float:
        return self.speed_limit_kmh

    def get_world(self) -> EmbeddedWorld:
        return self._world


class _Settings:
    """carla.WorldSettings' fields an agent reads: synchronous at the leaderboard's 20 Hz."""

    def __init__(self, dt: float):
        self.synchronous_mode = True
        self.fixed_delta_seconds = dt
        self.no_rendering_mode = False


class _Snapshot:
    def __init__(self, timestamp: Timestamp):
        self.timestamp = timestamp
        self.frame = timestamp.frame


class _Debug:
    """world.debug: drawing does nothing (there is no viewer)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("draw_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


class EmbeddedWorld:
    """The carla.World an agent gets from CarlaDataProvider.get_world()."""

    _AVAILABLE = "get_map, get_settings, get_snapshot, get_actor (the hero), get_weather, debug.draw_*"

    def __init__(self, carla_map: Any, dt: float):
        self._map = carla_map
        self._settings = _Settings(dt)
        self.timestamp = Timestamp(0, 0.0, dt, 0.0)
        self.hero: Hero | None = None
        self.debug = _Debug()
        self.id = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _refuse("world", name, self._AVAILABLE)

    def get_map(self) -> Any:
        return self._map

    def get_settings(self) -> _Settings:
        return self._settings

    def get_snapshot(self) -> _Snapshot:
        return _Snapshot(self.timestamp)

    def get_weather(self) -> carla.WeatherParameters:
        return carla.WeatherParameters.ClearNoon

    def get_actor(self, actor_id: int) -> Hero:
        if self.hero is not None and actor_id == self.hero.id:
            return self.hero
        raise _refuse("world", f"get_actor({actor_id})", "the hero's id only")

    def tick_to(self, frame: int, elapsed: float) -> Timestamp:
        """The world's clock at a new tick."""
        self.timestamp = Timestamp(frame, elapsed, self._settings.fixed_delta_seconds,
                                   datetime.datetime.now().timestamp())
        return self.timestamp


def heading(yaw_deg: float) -> tuple[float, float]:
    r = math.radians(yaw_deg)
    return math.cos(r), math.sin(r)
