"""What a frame says besides its sensors: the measurements, the box labels and the command numbering.

Every producer (the embedded world's route run, the CARLA agent) builds a `Measurements` and a list of
`BoxLabel`s per recorded frame; every consumer (buckets, cache, show, export) reads them back with
`Measurements.from_dict` and `BoxLabel.from_dict`, so a key is spelled once: here. Positions are in the
world frame unless the name says `_ego` (tools.dataset.geometry); speeds in m/s, angles in degrees.

Adding a measurement: add a field here (with a default, so frames written before it still read), set
it in the producer, document it in docs/dataset-format.md. See docs/frame-contract.md.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class RoadOption(enum.IntEnum):
    """High-level commands: the values of CARLA's agents.navigation RoadOption, as the leaderboard uses."""

    VOID = -1
    LEFT = 1
    RIGHT = 2
    STRAIGHT = 3
    LANEFOLLOW = 4
    CHANGELANELEFT = 5
    CHANGELANERIGHT = 6


#: Commands a model distinguishes: LEFT .. CHANGELANERIGHT as 0 .. 5 (`command_index`).
NUM_COMMANDS = 6


def command_index(option: int) -> int:
    """A recorded command (RoadOption value) as the model's class 0 .. NUM_COMMANDS-1; unknown or VOID
    reads as LANEFOLLOW."""
    index = int(option) - RoadOption.LEFT
    return index if 0 <= index < NUM_COMMANDS else RoadOption.LANEFOLLOW - RoadOption.LEFT


@dataclass(frozen=True)
class Measurements:
    """One recorded frame's measurements (msgpack map `measurements` of a frame file)."""

    frame: int  # index of the frame in its run (0, 1, ...)
    tick: int  # simulation tick it was recorded at
    time: float  # simulated seconds since the start of the run
    ego: dict[str, Any]  # {"x", "y", "z", "yaw", "speed", "extent": [length, width, height]}, world frame
    speed: float
    acceleration: float  # m/s^2 along the heading
    target_speed: float  # the expert's target speed
    speed_limit: float
    command: int  # RoadOption at the current target point
    next_command: int  # RoadOption at the next target point
    target_point: list[float]  # [x, y] world frame
    target_point_next: list[float]
    route: list[list[float]]  # route points ahead of the ego, 2 m apart, world frame
    junction: bool  # the ego's route point is inside a junction
    light_hazard: bool  # the light ahead holds the ego: red, or yellow it stops for, within 25 m
    vehicle_hazard: bool  # a leader closer than the safety gap
    command_name: str = ""
    target_point_ego: list[float] = field(default_factory=list)  # [x, y] ego frame
    ego_opendrive: dict[str, Any] = field(default_factory=dict)  # {"x", "y", "heading" (radians, CCW)}
    route_index: int = 0  # index of the ego's place on the run's dense route (run.json)
    route_completion: float = 0.0  # percent
    lane: str = ""  # the world's lane id
    light: dict[str, Any] | None = None  # next light on the route: {"id", "distance", "state"}
    leader: dict[str, Any] | None = None  # vehicle ahead on the route: {"id", "gap", "speed"}
    weather: dict[str, Any] = field(default_factory=dict)
    #: Why the driver drives as it does (tools.expert.expert.REASONS): "" cruising, "curve", "leader",
    #: "light", "stop_sign", "collision", "junction", "passing"; "policy" for a trained policy.
    reason: str = ""
    reason_detail: str = ""  # with what: "light 12:3 red in 14.2 m", "vehicle 7 at 9.1 m, 0.0 m/s"
    control: dict[str, float] = field(default_factory=dict)  # {"steer", "throttle", "brake"} applied after it
    #: The route's scenario running now (tools.collect.sim.scenarios): {"name", "type", "kind" ("obstacle",
    #: "junction", "pedestrian"), "actors": [box ids], "distance": route metres from the ego to its site
    #: (negative once past)}; None while none runs.
    scenario: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        # Shallow (the values are plain lists and dicts already): dataclasses.asdict deep-copies each one,
        # a millisecond per frame.
        return {name: getattr(self, name) for name in _ORDER[Measurements]}

    @classmethod
    def from_dict(cls, d: Any) -> Measurements:
        """The measurements of a frame; ValueError naming missing keys (unknown keys are kept out)."""
        if not isinstance(d, dict):
            raise ValueError(f"measurements: expected a map, got {type(d).__name__}")
        names = _FIELDS[cls]
        missing = [name for name in _REQUIRED[cls] if name not in d]
        if missing:
            raise ValueError(f"measurements: missing {', '.join(missing)}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def ego_xy(self) -> tuple[float, float]:
        return float(self.ego["x"]), float(self.ego["y"])


@dataclass(frozen=True)
class BoxLabel:
    """A 3D box label of another actor (never the ego) in a frame (`boxes` of a frame file)."""

    id: int  # stable within the run; 0 is the ego
    cls: int  # semantic class (tools.dataset.semantics); stored as "class"
    center: list[float]  # [x, y, z] world frame
    yaw: float  # degrees, world frame
    extent: list[float]  # [length, width, height], full sizes
    speed: float = 0.0
    center_ego: list[float] = field(default_factory=list)  # [x, y, z] ego frame
    yaw_ego: float = 0.0  # degrees in [-180, 180), ego frame

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in _ORDER[BoxLabel]}
        d["class"] = d.pop("cls")
        return d

    @classmethod
    def from_dict(cls, d: Any) -> BoxLabel:
        if not isinstance(d, dict):
            raise ValueError(f"box: expected a map, got {type(d).__name__}")
        d = {("cls" if k == "class" else k): v for k, v in d.items()}
        missing = [n for n in ("id", "cls", "center", "yaw", "extent") if n not in d]
        if missing:
            raise ValueError(f"box: missing {', '.join(missing)}")
        return cls(**{k: v for k, v in d.items() if k in _FIELDS[cls]})


_ORDER = {c: tuple(f.name for f in dataclasses.fields(c)) for c in (Measurements, BoxLabel)}
_FIELDS = {c: set(names) for c, names in _ORDER.items()}
#: Fields without a default, in order (from_dict names the missing ones; looked up once, not per frame).
_REQUIRED = {c: tuple(f.name for f in dataclasses.fields(c) if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING) for c in (Measurements,)}
