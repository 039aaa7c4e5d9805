"""The real scenario_runner classes of a route's scenario blocks, built without a CARLA server: what each places,
or the error that makes the leaderboard skip it.

The leaderboard builds a route's scenarios in RouteScenario.build_scenarios: for each block, the class of its type
(RouteScenario.get_all_scenario_classes: every class of SCENARIO_RUNNER_ROOT/srunner/scenarios) is called with
(world, [ego], config, timeout=10000), the config as RouteParser.parse_routes_file made it, its `route` the route
interpolate_trajectory traces (here: our planner's trace of it, `planned_route`, unless `exact_route`) and its
`ego_vehicles` the hero's (spawned at the route's start); an exception is "Skipping scenario ... due to setup
error" and the route is driven without it. `build_route` does the same against a stand-in of the server:

- CarlaDataProvider holds a stand-in world and client (set_world, as the leaderboard sets it); the world's map is
  the real carla.Map of the town (its OpenDRIVE), its blueprint library answers every lookup from a table of
  CARLA's blueprints (`_BLUEPRINTS`; sizes from scenario_types), its traffic lights are the OpenDRIVE's signals of
  type 1000001 grouped by the junctions whose controllers name them (scenario_sites.light_junctions; stop
  waypoints: the signal's lanes at its s);
- spawning (world.spawn_actor / try_spawn_actor, which CarlaDataProvider.request_new_actor calls) is recorded and
  returns a stand-in actor that answers transform, location, velocity and bounding-box reads and records the
  set_* calls the classes make while they are built; nothing is simulated; world.tick and wait_for_tick return at
  once, so the construction runs to its end (behaviour tree, criteria) as on a server;
- the flow behaviours (ActorFlow, OppositeActorFlow, InvadingActorFlow, BicycleFlow, WalkerFlow), which spawn only
  once the scenario runs, and ActorTransformSetter (where a behaviour puts an actor when the scenario starts) are
  recorded by wrapping them in the scenario module's namespace while its class is built;
- the GlobalRoutePlanner of CARLA's `agents` (CarlaDataProvider's, which EnterActorFlow's behaviour asks for, and
  interpolate_trajectory's with `exact_route`) is built once per map, when first asked, and kept;
- a call the stand-ins do not model ends the construction (`stopped`: what was called; the record holds what came
  before), an exception raised by the class is the block's `error`.

The record of one block (JSON; tests/data/scenario_placements/README.md keeps it beside recorded data):

    {"file", "route" (the route's id), "name", "type", "town", "trigger": [x, y, z, yaw],
     "error": null | {"type": "ValueError", "message": "..."},     the leaderboard would skip the block
     "stopped": null | "world.get_random_location_from_navigation", an unmodelled call ended the construction
     "ignored": true                                                 only where the trigger is off the route
                                                                     (RouteParser.is_scenario_at_route): not built
     "actors": [{"blueprint", "model" (what the class asked for), "kind" ("vehicle", "walker", "prop"),
                 "base_type" (the attribute filter's, else null), "role", "x", "y", "z", "yaw",
                 "speed" (m/s, set while built, else null), "placed_by" ("spawn" or "ActorTransformSetter")}],
     "flows": [{"behaviour", "source": [x, y, z, yaw], "sink": [x, y, z] | null, "speed" (m/s) | null,
                "interval": [lo, hi] (metres between spawns) | null}]}

Actors are those alive when the construction ends (the hero excluded), in spawn order, at their transform then, or
where an ActorTransformSetter of the scenario's behaviour puts them when it starts (walkers are spawned hidden under
the ego and moved there); z as sent to the server (request_new_actor lifts all but props 0.2 m). Coordinates are
CARLA's (metres, yaw in degrees).
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import importlib
import inspect
import io
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import carla
import numpy as np

from tools.collect.base.scenario_sites import TRAFFIC_LIGHT_TYPE, light_junctions
from tools.collect.base.scenario_types import (
    BICYCLE,
    BLOCKERS,
    CONE,
    PARKED_CAR,
    POLICE_CAR,
    TRAFFIC_WARNING,
    WALKER,
    WARNING_PROP,
)

#: The timeout RouteScenario passes every scenario class (leaderboard/scenarios/route_scenario.py).
ROUTE_TIMEOUT = 10000
#: The hero as RouteScenario._spawn_ego_vehicle spawns it: its model, and how far above the route's start.
EGO_MODEL, EGO_LIFT_M = "vehicle.lincoln.mkz_2020", 0.5
#: Behaviours that spawn their actors only while the scenario runs: their arguments are the record.
FLOWS = ("ActorFlow", "OppositeActorFlow", "InvadingActorFlow", "BicycleFlow", "WalkerFlow")
#: The behaviour that puts an actor in place when the scenario starts.
SETTER = "ActorTransformSetter"


class ServerCall(BaseException):
    """A call the stand-in world does not model: it ends the construction (a BaseException, so the class's own
    `except Exception` cannot take it for a failure of its own)."""


# ----------------------------------------------------------------------------- blueprints

#: The blueprints the stand-in library holds: id -> (kind, attributes). Vehicles carry the attributes scenario
#: classes filter on (base_type, special_type, has_lights, generation); any other id a class names exactly is
#: answered too (a prop, or a vehicle or walker by its prefix). Enough of each filter for CARLA 0.9.15/0.9.16.
_BLUEPRINTS: dict[str, dict[str, Any]] = {
    "vehicle.lincoln.mkz_2020": {"base_type": "car", "special_type": "", "has_lights": True, "generation": 2},
    "vehicle.mercedes.coupe_2020": {"base_type": "car", "special_type": "", "has_lights": True, "generation": 2},
    "vehicle.nissan.patrol_2021": {"base_type": "car", "special_type": "", "has_lights": True, "generation": 2},
    "vehicle.tesla.model3": {"base_type": "car", "special_type": "electric", "has_lights": False, "generation": 1},
    "vehicle.audi.tt": {"base_type": "car", "special_type": "", "has_lights": False, "generation": 1},
    "vehicle.nissan.patrol": {"base_type": "car", "special_type": "", "has_lights": False, "generation": 1},
    "vehicle.dodge.charger_police_2020": {"base_type": "car", "special_type": "emergency", "has_lights": True,
                                          "generation": 2},
    "vehicle.ford.ambulance": {"base_type": "van", "special_type": "emergency", "has_lights": True, "generation": 2},
    "vehicle.carlamotors.firetruck": {"base_type": "truck", "special_type": "emergency", "has_lights": True,
                                      "generation": 2},
    "vehicle.volkswagen.t2_2021": {"base_type": "van", "special_type": "", "has_lights": True, "generation": 2},
    "vehicle.carlamotors.carlacola": {"base_type": "truck", "special_type": "", "has_lights": False, "generation": 1},
    "vehicle.kawasaki.ninja": {"base_type": "motorcycle", "special_type": "", "has_lights": False, "generation": 1},
    "vehicle.diamondback.century": {"base_type": "bicycle", "special_type": "", "has_lights": False, "generation": 1},
    "vehicle.bh.crossbike": {"base_type": "bicycle", "special_type": "", "has_lights": False, "generation": 1},
    "vehicle.gazelle.omafiets": {"base_type": "bicycle", "special_type": "", "has_lights": False, "generation": 1},
    **{f"walker.pedestrian.{i:04d}": {} for i in range(1, 11)},
}
#: (length, width, height) of what scenarios spawn, by blueprint id or prefix (scenario_types' sizes).
_SIZES = {"static.prop.warningaccident": WARNING_PROP, "static.prop.warningconstruction": WARNING_PROP,
          "static.prop.trafficwarning": TRAFFIC_WARNING, "static.prop.constructioncone": CONE,
          **BLOCKERS, "vehicle.dodge.charger_police_2020": POLICE_CAR}
_DEFAULT_PROP = (1.0, 1.0, 1.0)


def kind_of(blueprint_id: str) -> str:
    return "vehicle" if blueprint_id.startswith("vehicle.") else "walker" if blueprint_id.startswith("walker.") \
        else "prop"


def size_of(blueprint_id: str, attributes: Mapping[str, Any]) -> tuple[float, float, float]:
    """(length, width, height) of a blueprint, metres."""
    if blueprint_id in _SIZES:
        return tuple(_SIZES[blueprint_id][:3])
    kind = kind_of(blueprint_id)
    if kind == "walker":
        return tuple(WALKER[:3])
    if kind == "vehicle":
        return tuple((BICYCLE if attributes.get("base_type") in ("bicycle", "motorcycle") else PARKED_CAR)[:3])
    return _DEFAULT_PROP


class _Attribute:
    """carla.ActorAttribute as create_blueprint reads it."""

    def __init__(self, name: str, value: Any, recommended: tuple[str, ...] = ()):
        self.id = name
        self._value = value
        self.recommended_values = list(recommended)
        self.is_modifiable = True
        self.type = (carla.ActorAttributeType.Bool if isinstance(value, bool) else
                     carla.ActorAttributeType.Int if isinstance(value, int) else carla.ActorAttributeType.String)

    def as_bool(self) -> bool:
        return bool(self._value)

    def as_int(self) -> int:
        return int(self._value)

    def as_float(self) -> float:
        return float(self._value)

    def as_str(self) -> str:
        return str(self._value)

    def __str__(self) -> str:
        return str(self._value).lower() if isinstance(self._value, bool) else str(self._value)


class _Blueprint:
    """carla.ActorBlueprint of the stand-in library."""

    def __init__(self, blueprint_id: str, attributes: Mapping[str, Any]):
        self.id = blueprint_id
        self.tags = blueprint_id.split(".")
        self._attributes = {k: _Attribute(k, v) for k, v in attributes.items()}
        self._attributes["role_name"] = _Attribute("role_name", "")
        kind = kind_of(blueprint_id)
        if kind == "vehicle":
            self._attributes["color"] = _Attribute("color", "0,0,0", ("0,0,0", "255,255,255", "200,20,20"))
        elif kind == "walker":
            self.tags.append("walker")
            self._attributes["is_invincible"] = _Attribute("is_invincible", True)
            self._attributes["speed"] = _Attribute("speed", "1.4", ("0.0", "1.4", "2.8"))

    def has_tag(self, tag: str) -> bool:
        return tag in self.tags

    def match_tags(self, pattern: str) -> bool:
        return any(fnmatch.fnmatch(t, pattern) for t in self.tags)

    def has_attribute(self, name: str) -> bool:
        return name in self._attributes

    def get_attribute(self, name: str) -> _Attribute:
        if name not in self._attributes:
            raise IndexError(f"blueprint {self.id!r} has no attribute {name!r}")
        return self._attributes[name]

    def set_attribute(self, name: str, value: Any) -> None:
        if name in self._attributes:
            self._attributes[name] = _Attribute(name, str(value), tuple(self._attributes[name].recommended_values))

    def attributes(self) -> dict[str, str]:
        return {k: str(a) for k, a in self._attributes.items()}

    def __iter__(self):
        return iter(self._attributes.values())

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise ServerCall(f"ActorBlueprint.{name}")


class _Library:
    """carla.BlueprintLibrary: filter by id pattern (or an exact id it does not list: answered as named), find."""

    def __init__(self):
        self._all = [_Blueprint(i, a) for i, a in _BLUEPRINTS.items()]

    def filter(self, pattern: str) -> list[_Blueprint]:
        found = [b for b in self._all if fnmatch.fnmatch(b.id, pattern)]
        if not found and not any(c in pattern for c in "*?["):
            found = [_Blueprint(pattern, {})]
        out = []
        for b in found:  # fresh copies: create_blueprint sets attributes on the one it takes
            copy = _Blueprint(b.id, _BLUEPRINTS.get(b.id, {}))
            copy._requested = pattern
            out.append(copy)
        return out

    def find(self, blueprint_id: str) -> _Blueprint:
        return self.filter(blueprint_id)[0]

    def __iter__(self):
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)


# ----------------------------------------------------------------------------- actors


def _copy(t: carla.Transform) -> carla.Transform:
    loc, rot = t.location, t.rotation
    return carla.Transform(carla.Location(loc.x, loc.y, loc.z), carla.Rotation(rot.pitch, rot.yaw, rot.roll))


class _Actor:
    """A spawned actor: answers reads of its state and records what the class sets; nothing moves by itself."""

    def __init__(self, world: _World, actor_id: int, blueprint: _Blueprint, transform: carla.Transform, model: str):
        self._world = world
        self.id = actor_id
        self.type_id = blueprint.id
        self.attributes = blueprint.attributes()
        self.is_alive = True
        self.parent = None
        self.semantic_tags: list[int] = []
        self._transform = _copy(transform)
        self._velocity = carla.Vector3D()
        self._speed: float | None = None
        self._placed: carla.Transform | None = None
        self._model = model
        self._base_type = _BLUEPRINTS.get(blueprint.id, {}).get("base_type")
        length, width, height = size_of(blueprint.id, {k: a._value for k, a in blueprint._attributes.items()})
        self.bounding_box = carla.BoundingBox(carla.Location(0.0, 0.0, height / 2.0),
                                              carla.Vector3D(length / 2.0, width / 2.0, height / 2.0))

    # reads
    def get_transform(self) -> carla.Transform:
        return _copy(self._transform)

    def get_location(self) -> carla.Location:
        return self.get_transform().location

    def get_velocity(self) -> carla.Vector3D:
        return carla.Vector3D(self._velocity.x, self._velocity.y, self._velocity.z)

    def get_angular_velocity(self) -> carla.Vector3D:
        return carla.Vector3D()

    def get_acceleration(self) -> carla.Vector3D:
        return carla.Vector3D()

    def get_world(self) -> _World:
        return self._world

    def get_control(self):
        return carla.WalkerControl() if self.type_id.startswith("walker.") else carla.VehicleControl()

    def get_light_state(self):
        return carla.VehicleLightState.NONE

    # what the classes set while built
    def set_transform(self, transform: carla.Transform) -> None:
        self._transform = _copy(transform)

    def set_location(self, location: carla.Location) -> None:
        self._transform = carla.Transform(carla.Location(location.x, location.y, location.z),
                                          self._transform.rotation)

    def set_target_velocity(self, velocity: carla.Vector3D) -> None:
        self._velocity = carla.Vector3D(velocity.x, velocity.y, velocity.z)
        self._speed = math.sqrt(velocity.x ** 2 + velocity.y ** 2 + velocity.z ** 2)

    def enable_constant_velocity(self, velocity: carla.Vector3D) -> None:
        self._speed = math.sqrt(velocity.x ** 2 + velocity.y ** 2 + velocity.z ** 2)

    def destroy(self) -> bool:
        self.is_alive = False
        return True

    def _ignore(self, *args, **kwargs) -> None:
        return None

    set_simulate_physics = set_enable_gravity = set_autopilot = set_light_state = apply_control = _ignore
    set_target_angular_velocity = disable_constant_velocity = add_impulse = add_force = _ignore
    set_collisions = set_actor_dormant = close_door = open_door = apply_physics_control = _ignore

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise ServerCall(f"Actor.{name}")

    def record(self) -> dict:
        t = self._placed or self._transform
        return {"blueprint": self.type_id, "model": self._model, "kind": kind_of(self.type_id),
                "base_type": self._base_type, "role": self.attributes.get("role_name", ""),
                "x": round(t.location.x, 3), "y": round(t.location.y, 3), "z": round(t.location.z, 3),
                "yaw": _yaw(t.rotation.yaw), "speed": None if self._speed is None else round(self._speed, 3),
                "placed_by": SETTER if self._placed is not None else "spawn"}


class _TrafficLight:
    """A traffic light of the town: its OpenDRIVE signal, stop waypoints on the lanes it controls."""

    def __init__(self, actor_id: int, signal_id: str, stops: list):
        self.id = actor_id
        self.type_id = "traffic.traffic_light"
        self.attributes: dict[str, str] = {}
        self.is_alive = True
        self.signal_id = signal_id
        self._stops = stops
        self._state = carla.TrafficLightState.Green

    def get_transform(self) -> carla.Transform:
        return _copy(self._stops[0].transform) if self._stops else carla.Transform()

    def get_location(self) -> carla.Location:
        return self.get_transform().location

    def get_stop_waypoints(self) -> list:
        return list(self._stops)

    def get_affected_lane_waypoints(self) -> list:
        return self.get_stop_waypoints()

    def get_state(self):
        return self._state

    def set_state(self, state) -> None:
        self._state = state

    def _ignore(self, *args, **kwargs) -> None:
        return None

    freeze = set_green_time = set_red_time = set_yellow_time = reset_group = _ignore

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise ServerCall(f"TrafficLight.{name}")


class _ActorList(list):
    """carla.ActorList: a list with filter(pattern) and find(id)."""

    def filter(self, pattern: str) -> _ActorList:
        return _ActorList(a for a in self if fnmatch.fnmatch(a.type_id, pattern))

    def find(self, actor_id: int):
        return next((a for a in self if a.id == actor_id), None)


# ----------------------------------------------------------------------------- the world


def light_stops(cmap) -> dict[str, list]:
    """The stop waypoints of every traffic light of a carla.Map, by signal id: the lanes each of its landmarks is
    valid for, at the landmark's s (a landmark's own waypoint is not set on a map read offline). One pass over
    the map's traffic light landmarks (asking by id scans them all, per id)."""
    out: dict[str, list] = {}
    for lm in cmap.get_all_landmarks_of_type(TRAFFIC_LIGHT_TYPE):
        stops = out.setdefault(str(lm.id), [])
        for first, last in lm.get_lane_validities():
            for lane in range(first, last + 1):
                wp = cmap.get_waypoint_xodr(lm.road_id, lane, lm.s) if lane else None
                if wp is not None:
                    stops.append(wp)
    return out


class _World:
    """carla.World as the scenario classes use it while they are built (see the module docstring)."""

    def __init__(self, cmap, lights: Mapping[int, list[str]], stops: Mapping[str, list]):
        self._map = cmap
        self._library = _Library()
        self._actors: dict[int, _Actor] = {}
        self._next_id = 1000
        self._frame = 0
        self._lights_of = lights
        self._lights = {signal: _TrafficLight(100 + k, signal, list(stops.get(signal, [])))
                        for k, signal in enumerate(dict.fromkeys(s for ss in lights.values() for s in ss))}
        self.recording = True
        self.spawned: list[_Actor] = []
        self.debug = _Ignore()

    def get_map(self):
        return self._map

    def get_settings(self) -> carla.WorldSettings:
        return carla.WorldSettings(synchronous_mode=True, fixed_delta_seconds=0.05)

    def get_blueprint_library(self) -> _Library:
        return self._library

    def get_snapshot(self):
        return _Ignore(frame=self._frame, timestamp=_Ignore(frame=self._frame, elapsed_seconds=0.05 * self._frame,
                                                            delta_seconds=0.05, platform_timestamp=0.0))

    def tick(self, *args, **kwargs) -> int:
        self._frame += 1
        return self._frame

    def wait_for_tick(self, *args, **kwargs):
        self.tick()
        return self.get_snapshot()

    def spawn_actor(self, blueprint, transform, attach_to=None, *args) -> _Actor:
        if attach_to is not None:
            raise ServerCall(f"World.spawn_actor({blueprint.id}, attach_to=...)")
        self._next_id += 1
        actor = _Actor(self, self._next_id, blueprint, transform, getattr(blueprint, "_requested", blueprint.id))
        self._actors[actor.id] = actor
        if self.recording:
            self.spawned.append(actor)
        return actor

    try_spawn_actor = spawn_actor

    def get_actors(self, actor_ids=None) -> _ActorList:
        everything = [*self._actors.values(), *self._all_lights()]
        if actor_ids is not None:
            wanted = set(actor_ids)
            everything = [a for a in everything if a.id in wanted]
        return _ActorList(a for a in everything if a.is_alive)

    def get_actor(self, actor_id: int):
        return self.get_actors([actor_id]).find(actor_id)

    def get_traffic_lights_in_junction(self, junction_id: int) -> list[_TrafficLight]:
        return [self._light(s) for s in self._lights_of.get(int(junction_id), [])]

    def _light(self, signal_id: str) -> _TrafficLight:
        return self._lights[signal_id]

    def _all_lights(self) -> list[_TrafficLight]:
        return list(self._lights.values())

    def get_weather(self) -> carla.WeatherParameters:
        return carla.WeatherParameters()

    def set_weather(self, weather) -> None:
        return None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise ServerCall(f"World.{name}")


class _Ignore:
    """What answers calls whose effect nothing reads while the classes are built (world.debug's drawings)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _Client:
    """carla.Client as CarlaDataProvider uses it: no command batches while a class is built."""

    def __init__(self, world: _World):
        self._world = world

    def get_world(self) -> _World:
        return self._world

    def get_trafficmanager(self, *args) -> _Ignore:
        return _Ignore()  # what behaviours tell the traffic manager acts once the scenario runs

    def apply_batch_sync(self, batch, *args):
        if batch:
            raise ServerCall("Client.apply_batch_sync")
        return []

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise ServerCall(f"Client.{name}")


# ----------------------------------------------------------------------------- recording behaviours


def _yaw(degrees: float) -> float:
    """A yaw in [-180, 180), to the thousandth of a degree (CARLA's come in any turn: 540 is -180)."""
    return round((degrees + 180.0) % 360.0 - 180.0, 3)


def _point(value) -> list[float] | None:
    """[x, y, z, yaw] of a waypoint or transform, [x, y, z] of a location, rounded to the millimetre."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and value:
        return _point(value[0][0] if isinstance(value[0], (list, tuple)) else value[0])
    t = value.transform if isinstance(value, carla.Waypoint) else value
    if isinstance(t, carla.Transform):
        return [round(t.location.x, 3), round(t.location.y, 3), round(t.location.z, 3), _yaw(t.rotation.yaw)]
    return [round(value.x, 3), round(value.y, 3), round(value.z, 3)]


def _flow_record(behaviour: str, args: Mapping[str, Any]) -> dict:
    """A flow behaviour's source, sink, speed and spawn interval, from its arguments by name."""
    source = next((args[k] for k in ("source_wp", "reference_wp", "plan", "source_location") if k in args), None)
    sink = next((args[k] for k in ("sink_wp", "sink_locations") if k in args), None)
    if "plan" in args and sink is None:
        sink = args["plan"][-1][0] if args["plan"] else None
    interval = args.get("spawn_dist_interval")
    if interval is None and "spawn_dist" in args:
        interval = [args["spawn_dist"], args["spawn_dist"]]
    speed = args.get("actor_speed")
    sink_point = _point(sink)
    return {"behaviour": behaviour, "source": _point(source), "sink": sink_point[:3] if sink_point else None,
            "speed": None if speed is None else round(float(speed), 3),
            "interval": None if interval is None else [round(float(v), 3) for v in list(interval)[:2]]}


@contextlib.contextmanager
def _recording(module, flows: list[dict]) -> Iterator[None]:
    """The flow behaviours and ActorTransformSetter in a scenario module's namespace, wrapped to record."""
    saved = {}
    for name in (*FLOWS, SETTER):
        real = module.__dict__.get(name)
        if not inspect.isclass(real):
            continue
        saved[name] = real
        signature = inspect.signature(real.__init__)

        def init(self, *args, _real=real, _name=name, _sig=signature, **kwargs):
            bound = _sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            a = dict(bound.arguments)
            if _name == SETTER:
                actor, transform = a.get("actor"), a.get("transform")
                if isinstance(actor, _Actor) and isinstance(transform, carla.Transform):
                    actor._placed = _copy(transform)
            else:
                flows.append(_flow_record(_name, a))
            _real.__init__(self, *args, **kwargs)

        module.__dict__[name] = type(name, (real,), {"__init__": init, "__module__": real.__module__})
    try:
        yield
    finally:
        module.__dict__.update(saved)


# ----------------------------------------------------------------------------- building


def planned_route(planner, keypoints) -> list[tuple[carla.Transform, Any]]:
    """The route RouteScenario runs through a route's keypoints (interpolate_trajectory: GlobalRoutePlanner's path
    1 m apart, each point with its RoadOption) as our planner traces it (tools.expert.planner.RoutePlanner follows
    GlobalRoutePlanner's graph and A*; its docstring says where the two differ), z of the nearest keypoint; the
    options as CARLA's `agents` RoadOption where it is importable, else their numbers. Seconds where
    interpolate_trajectory takes minutes (it builds a GlobalRoutePlanner per route: on Town12 a minute, then one
    A* in Python per pair of keypoints)."""
    try:
        option = importlib.import_module("agents.navigation.local_planner").RoadOption
    except ModuleNotFoundError:
        option = int
    points = np.array([[p.x, p.y, p.z] for p in keypoints], dtype=float)
    dense = planner.trace(points)
    nearest = np.hypot(dense.xy[:, None, 0] - points[None, :, 0], dense.xy[:, None, 1] - points[None, :, 1]).argmin(1)
    return [(carla.Transform(carla.Location(float(x), float(y), float(points[k, 2])), carla.Rotation(yaw=float(yaw))),
             option(int(o)))
            for (x, y), yaw, o, k in zip(dense.xy, dense.yaw, dense.option, nearest, strict=True)]


class Builder:
    """Builds the scenario blocks of route configurations (RouteParser.parse_routes_file's) on one town's
    carla.Map with `classes` (all_scenario_classes), the leaderboard and scenario_runner on sys.path; each route as
    our planner traces it (planned_route), or with `exact_route` as the leaderboard's interpolate_trajectory does.
    Keeps the town's route planners and traffic lights between routes."""

    def __init__(self, cmap, classes: Mapping[str, type], exact_route: bool = False):
        self.cmap = cmap
        self.exact_route = exact_route
        self._ours = None
        self._cdp = importlib.import_module("srunner.scenariomanager.carla_data_provider")
        self._config_data = importlib.import_module("srunner.scenarioconfigs.scenario_configuration")
        self._manipulation = importlib.import_module("leaderboard.utils.route_manipulation") if exact_route else None
        self._parser = importlib.import_module("leaderboard.utils.route_parser").RouteParser
        self.classes = dict(classes)
        self._planners: dict[float, Any] = {}
        self._lights: dict[int, list[str]] | None = None
        self._stops: dict[str, list] = {}

    def _planner(self, wmap, resolution: float):
        """CARLA's GlobalRoutePlanner of this map, built once per resolution (interpolate_trajectory builds one per
        route, CarlaDataProvider.set_world one per world; on Town12 each takes minutes)."""
        if wmap is not self.cmap:
            raise ServerCall("GlobalRoutePlanner of another map")
        if resolution not in self._planners:
            real = self._planners_class()
            self._planners[resolution] = _Lazy(lambda: real(wmap, resolution))
        return self._planners[resolution]

    def _planners_class(self):
        return importlib.import_module("agents.navigation.global_route_planner").GlobalRoutePlanner

    @contextlib.contextmanager
    def _provider(self, world: _World) -> Iterator[Any]:
        """CarlaDataProvider set to the stand-in world and client, as the leaderboard sets it; cleaned after."""
        cdp = self._cdp.CarlaDataProvider
        patched = [(self._cdp, "GlobalRoutePlanner"), (self._manipulation, "GlobalRoutePlanner")]
        saved = [(m, n, m.__dict__[n]) for m, n in patched if m is not None and n in m.__dict__]
        for module, name, _ in saved:
            module.__dict__[name] = self._planner
        try:
            cdp.set_client(_Client(world))
            cdp.set_world(world)
            cdp.set_traffic_manager_port(8000)
            yield cdp
        finally:
            cdp._carla_actor_pool = {}  # nothing to destroy on a server
            with contextlib.suppress(Exception, ServerCall):
                cdp.cleanup()
            for module, name, real in saved:
                module.__dict__[name] = real

    def route(self, config) -> list:
        """The route of a configuration as RouteScenario traces it: interpolate_trajectory of its keypoints (with
        exact_route), else planned_route."""
        if not self.exact_route:
            if self._ours is None:
                from tools.expert.planner import RoutePlanner

                self._ours = RoutePlanner(self.cmap)
            return planned_route(self._ours, config.keypoints)
        with self._provider(_World(self.cmap, {}, {})):
            return self._manipulation.interpolate_trajectory(config.keypoints)[1]

    def build_route(self, config, where: Mapping[str, Any] | None = None) -> list[dict]:
        """Every scenario block of one route configuration, built as RouteScenario builds it: its record (the
        module docstring), `where` (file, town ...) first."""
        route = self.route(config)
        out = []
        for number, sc in enumerate(config.scenario_configs):
            trigger = sc.trigger_points[0] if sc.trigger_points else None
            record: dict[str, Any] = {**(where or {}), "route": str(config.name).removeprefix("RouteScenario_"),
                                      "name": sc.name, "type": sc.type, "trigger": _point(trigger)}
            if trigger is None or not self._parser.is_scenario_at_route(trigger, route):
                out.append({**record, "ignored": True})
                continue
            sc.route_var_name = f"ScenarioRouteNumber{number}"
            out.append({**record, **self.build_block(sc, route)})
        return out

    def build_block(self, sc, route) -> dict:
        """One scenario block (a ScenarioConfiguration of the route parser's) on `route`: {"error", "stopped",
        "actors", "flows"}."""
        if self._lights is None:
            self._lights = light_junctions(self.cmap.to_opendrive())
            self._stops = light_stops(self.cmap)
        world = _World(self.cmap, self._lights, self._stops)
        flows: list[dict] = []
        error = stopped = None
        instance = None
        with self._provider(world) as cdp, contextlib.redirect_stdout(io.StringIO()):
            start = _copy(route[0][0])
            start.location.z += EGO_LIFT_M
            world.recording = False
            ego = cdp.request_new_actor(EGO_MODEL, start, rolename="hero")
            world.recording = True
            sc.ego_vehicles = [self._config_data.ActorConfigurationData(ego.type_id, ego.get_transform(), "hero")]
            sc.route = route
            cls = self.classes.get(sc.type)
            try:
                if cls is None:
                    raise KeyError(sc.type)  # what RouteScenario's all_scenario_classes[...] raises
                module = sys.modules.get(cls.__module__)
                with _recording(module, flows) if module is not None else contextlib.nullcontext():
                    instance = cls(world, [ego], sc, timeout=ROUTE_TIMEOUT)
            except ServerCall as e:
                stopped = str(e)
            except Exception as e:  # noqa: BLE001  what the class raises is what the leaderboard skips it for
                error = {"type": type(e).__name__, "message": str(e)}
            actors = [a.record() for a in world.spawned if a.is_alive]
            if instance is not None:
                with contextlib.suppress(Exception, ServerCall):
                    instance.remove_all_actors()  # its __del__ would, later, on another world
        return {"error": error, "stopped": stopped, "actors": actors, "flows": flows}


class _Lazy:
    """An object made on its first use (a GlobalRoutePlanner nobody asks for is never built)."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._made = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._made is None:
            self._made = self._make()
        return getattr(self._made, name)


def all_scenario_classes(runner: str | os.PathLike) -> dict[str, type]:
    """Every class of `runner`/srunner/scenarios (SCENARIO_RUNNER_ROOT) as RouteScenario.get_all_scenario_classes
    finds them:
    each file imported as a top-level module (its folder first on sys.path), in glob's order, a later file's class
    of a name replacing an earlier one's. (Importing route_scenario itself would need what the route's own
    behaviours import: ephem for the weather.)"""
    classes: dict[str, type] = {}
    for path in glob.glob(f"{runner}/srunner/scenarios/*.py"):
        sys.path.insert(0, os.path.dirname(path))
        module = importlib.import_module(os.path.basename(path).split(".")[0])
        classes.update(inspect.getmembers(module, inspect.isclass))
    return classes
