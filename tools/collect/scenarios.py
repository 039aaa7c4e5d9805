"""Leaderboard 2.0 scenarios in the embedded world: what a route's `<scenarios>` blocks name happens on the road.

`CATALOGUE` lists every scenario type of the leaderboard 2.0 route files and what the embedded world does
with it (docs/scenarios.md prints it): `executed` (its actors appear where and when the leaderboard puts
them), `approximated` (actors of the same kind, simplified; the reason says how), or `name only` (the
run is filed under the name, nothing happens on the road; the reason says why).

A scenario starts when the ego comes within `TRIGGER_M` route metres of its trigger point (the
leaderboard's trigger distance) and ends once the ego is END_M past its site. Where its actors go is
computed from the dense route and the town's `carla.Map` lanes, with the block's parameters
(`distance`, `direction`, `speed`, `frequency`, `flow_speed`, `source_dist_interval`, ...) and the
leaderboard's defaults (scenario_runner's srunner/scenarios at the 0.9.16 release):
  - obstacles: standing boxes in the ego's lane `distance` metres beyond the trigger (never inside a
    junction), offset towards `direction`; their TwoWays variants add a SUMO flow in the oncoming lane
    with gaps drawn from `frequency` (metres);
  - junction traffic: SUMO vehicles through the first junction after the trigger, from the side the type
    names (oncoming for left turns, from the left for right turns), at `flow_speed` with gaps drawn from
    `source_dist_interval`; the adversary of OppositeVehicle* ignores lights and right of way (SUMO
    speed mode 7) and is timed to reach the junction with the ego;
  - pedestrians (our own walkers, moved by this module): they cross the ego's lane when the ego is
    `REACTION_S` seconds from their crossing point, from behind a blocker (a prop or a parked car).
The world (tools.collect.world) draws the actors like any other (boxes, semantics, LiDAR, BEV), judges
collisions with them, and tells the expert about them through its snapshot.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tools.collect.planner import DenseRoute, neighbours
from tools.dataset import semantics as sem
from tools.dataset.geometry import wrap_degrees
from tools.expert.expert import PASS_CLEAR_M, PASS_RAMP_M

log = logging.getLogger("collect.scenarios")

OBSTACLE, JUNCTION, PEDESTRIAN = "obstacle", "junction", "pedestrian"
EXECUTED, APPROXIMATED, NAME_ONLY = "executed", "approximated", "name only"

#: A scenario starts when the ego is this many route metres before its trigger point (leaderboard: the
#: route scenario's trigger distance).
TRIGGER_M = 30.0
#: It ends when the ego is this far past its site (its last actor, or the junction's exit), metres.
END_M = 30.0
#: A trigger point farther than this from the route is not on it: the scenario is skipped (logged).
ON_ROUTE_M = 10.0
#: Obstacles stay this far before the next junction of the route, metres.
JUNCTION_CLEARANCE_M = 15.0
#: Beyond an obstacle's last actor, the room the expert needs to get back into its lane (it never passes
#: inside a junction), metres.
PASS_ROOM_M = PASS_CLEAR_M + PASS_RAMP_M + 2.0
#: Before an obstacle, the room (from the last junction) the expert needs to stop behind it and move out, metres.
BEFORE_M = PASS_RAMP_M + 10.0
#: How far an obstacle's actors reach beyond its site (the first of them), metres.
EXTENT_M = {"Accident": 19.0, "AccidentTwoWays": 19.0, "ParkedObstacle": 3.0, "ParkedObstacleTwoWays": 3.0,
            "VehicleOpensDoorTwoWays": 3.0, "ConstructionObstacle": 17.5, "ConstructionObstacleTwoWays": 17.5,
            "HazardAtSideLane": 10.0, "HazardAtSideLaneTwoWays": 10.0}
#: Pedestrians start crossing when the ego would reach their crossing point in this many seconds (at least
#: MIN_TRIGGER_M away), as scenario_runner's reaction time.
REACTION_S = 2.1
MIN_TRIGGER_M = 6.0
#: The oncoming flow of a TwoWays obstacle holds (spawns nothing) from this far before the obstacle until the
#: ego is past it, metres.
HOLD_M = 40.0
#: Junction flows run this long from the scenario's start (the leaderboard runs them until the ego has
#: crossed; a finite flow lets the ego find its gap behind the last vehicle).
FLOW_S = 25.0

#: (length, width, height, class) of the things scenarios place.
POLICE_CAR = (4.9, 2.0, 1.5, sem.CAR)
PARKED_CAR = (4.6, 1.9, 1.5, sem.CAR)
WARNING_PROP = (0.5, 1.1, 1.3, sem.STATIC)  # static.prop.warningaccident / warningconstruction
TRAFFIC_WARNING = (1.6, 2.2, 2.6, sem.STATIC)  # static.prop.trafficwarning (an arrow board on a trailer)
CONE = (0.4, 0.4, 0.7, sem.STATIC)
BICYCLE = (1.8, 0.7, 1.7, sem.BICYCLE)
WALKER = (0.5, 0.6, 1.8, sem.PEDESTRIAN)
BLOCKERS = {  # blocker_model of DynamicObjectCrossing: (along the road, across it, height) of the prop
    "static.prop.vendingmachine": (1.2, 1.0, 2.0),
    "static.prop.advertisement": (2.4, 0.6, 2.6),
    "static.prop.busstop": (4.0, 1.6, 2.7),
    "static.prop.container": (6.0, 2.5, 2.6),
}


@dataclass(frozen=True)
class ScenarioType:
    kind: str | None  # OBSTACLE, JUNCTION, PEDESTRIAN; None for name only
    handling: str  # EXECUTED, APPROXIMATED, NAME_ONLY
    what: str  # what happens on the road
    why: str = ""  # why it is not executed as the leaderboard does (approximated, name only)


_HOLD = (f"the oncoming flow holds once the ego is {HOLD_M:.0f} m before the obstacle, until it is past, so the ego "
         "passes after the last oncoming vehicle (gaps of `frequency` metres are rarely long enough for a pass at the "
         "expert's 6 m/s)")
_NO_BACKGROUND = "needs the leaderboard's background-activity manager, which the embedded world does not have"
CATALOGUE: dict[str, ScenarioType] = {
    "Accident": ScenarioType(OBSTACLE, EXECUTED, "a police car and two crashed cars in the ego's lane, a warning "
                             "prop; the ego changes lanes"),
    "AccidentTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as Accident, with oncoming traffic (gaps `frequency`); "
                                    "the ego passes through the oncoming lane in a gap", _HOLD),
    "ParkedObstacle": ScenarioType(OBSTACLE, EXECUTED, "a parked car sticking into the ego's lane, a warning prop"),
    "ParkedObstacleTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as ParkedObstacle, with oncoming traffic",
                                          _HOLD),
    "ConstructionObstacle": ScenarioType(OBSTACLE, EXECUTED, "an arrow board and a taper of cones in the ego's lane"),
    "ConstructionObstacleTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as ConstructionObstacle, with oncoming "
                                                "traffic", _HOLD),
    "HazardAtSideLane": ScenarioType(OBSTACLE, APPROXIMATED, "two cyclists riding at the right of the ego's lane "
                                     "(`bicycle_speed`, `bicycle_drive_distance`), then standing",
                                     "the cyclists stop after their drive distance instead of riding on"),
    "HazardAtSideLaneTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as HazardAtSideLane, with oncoming traffic",
                                            "as HazardAtSideLane; " + _HOLD),
    "InvadingTurn": ScenarioType(OBSTACLE, APPROXIMATED, "oncoming cars driving `offset` metres over the centre "
                                 "line towards the ego", "our own cars on a fixed path, not SUMO's"),
    "VehicleOpensDoorTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "a parked car whose open door sticks into the "
                                            "ego's lane, oncoming traffic",
                                            "the door is open from the start; " + _HOLD),
    "SignalizedJunctionLeftTurn": ScenarioType(JUNCTION, APPROXIMATED, "oncoming SUMO traffic (`flow_speed`, gaps "
                                               "`source_dist_interval`) while the ego turns left",
                                               "the lights are SUMO's (the leaderboard freezes them green) and the "
                                               f"flow runs {FLOW_S:.0f} s"),
    "SignalizedJunctionRightTurn": ScenarioType(JUNCTION, APPROXIMATED, "SUMO traffic from the left crossing the "
                                                "ego's right turn", "as SignalizedJunctionLeftTurn"),
    "NonSignalizedJunctionLeftTurn": ScenarioType(JUNCTION, EXECUTED, "oncoming SUMO traffic while the ego turns "
                                                  f"left at a junction without lights (the flow runs {FLOW_S:.0f} s)"),
    "NonSignalizedJunctionRightTurn": ScenarioType(JUNCTION, EXECUTED, "SUMO traffic from the left while the ego "
                                                   "turns right"),
    "EnterActorFlow": ScenarioType(JUNCTION, APPROXIMATED, "a SUMO flow from the left at the next junction",
                                   "a junction flow instead of a motorway on-ramp's"),
    "EnterActorFlowV2": ScenarioType(JUNCTION, APPROXIMATED, "as EnterActorFlow", "as EnterActorFlow"),
    "OppositeVehicleRunningRedLight": ScenarioType(JUNCTION, EXECUTED, "a SUMO car from `direction` running its "
                                                   "red light, timed to meet the ego in the junction"),
    "OppositeVehicleTakingPriority": ScenarioType(JUNCTION, EXECUTED, "a SUMO car from `direction` ignoring right "
                                                  "of way at a junction without lights"),
    "DynamicObjectCrossing": ScenarioType(PEDESTRIAN, EXECUTED, "a pedestrian stepping out from behind a blocker "
                                          "(`blocker_model`) across the ego's lane"),
    "ParkingCrossingPedestrian": ScenarioType(PEDESTRIAN, EXECUTED, "a pedestrian crossing from between parked "
                                              "cars"),
    "PedestrianCrossing": ScenarioType(PEDESTRIAN, EXECUTED, "three pedestrians crossing the road just after the "
                                       "next junction"),
    "VehicleTurningRoutePedestrian": ScenarioType(PEDESTRIAN, APPROXIMATED, "a pedestrian crossing the ego's exit "
                                                  "lane after the next junction", "crosses whether or not the "
                                                  "ego turns"),
    "ControlLoss": ScenarioType(None, NAME_ONLY, "", "a loss of control is noise on the ego's own controls, not an "
                                "actor; not modelled"),
    "HardBreakRoute": ScenarioType(None, NAME_ONLY, "", _NO_BACKGROUND + " (a leader braking hard)"),
    "PriorityAtJunction": ScenarioType(None, NAME_ONLY, "", "turns the ego's lights green: " + _NO_BACKGROUND),
    "BlockedIntersection": ScenarioType(None, NAME_ONLY, "", "a car stopping inside the junction after the ego "
                                        "turned: " + _NO_BACKGROUND),
    "StaticCutIn": ScenarioType(None, NAME_ONLY, "", "a cut-in needs lateral control of SUMO vehicles (sublane "
                                "model) that the world does not use"),
    "ParkingCutIn": ScenarioType(None, NAME_ONLY, "", "as StaticCutIn"),
    "HighwayCutIn": ScenarioType(None, NAME_ONLY, "", "as StaticCutIn"),
    "VehicleTurningRoute": ScenarioType(None, NAME_ONLY, "", "a bicycle crossing after a turn: walkers are modelled, "
                                        "crossing cyclists not yet"),
    "CrossingBicycleFlow": ScenarioType(None, NAME_ONLY, "", "bicycle lanes are not in the SUMO networks"),
    "YieldToEmergencyVehicle": ScenarioType(None, NAME_ONLY, "", "the expert does not yield to emergency vehicles"),
    "MergerIntoSlowTraffic": ScenarioType(None, NAME_ONLY, "", "motorway merges: " + _NO_BACKGROUND),
    "MergerIntoSlowTrafficV2": ScenarioType(None, NAME_ONLY, "", "as MergerIntoSlowTraffic"),
    "InterurbanActorFlow": ScenarioType(None, NAME_ONLY, "", "interurban flows: " + _NO_BACKGROUND),
    "InterurbanAdvancedActorFlow": ScenarioType(None, NAME_ONLY, "", "as InterurbanActorFlow"),
    "HighwayExit": ScenarioType(None, NAME_ONLY, "", "as InterurbanActorFlow"),
    "ParkingExit": ScenarioType(None, NAME_ONLY, "", "the ego would start in a parking lane; routes start in a "
                                "driving lane"),
}
#: Types the route generator can place (every type something happens for).
PLACEABLE = tuple(name for name, t in CATALOGUE.items() if t.kind is not None)


# ----------------------------------------------------------------------------- parameters

#: Parameters the embedded world reads, with what they must be: a number (`value`, or `from` and `to`) or a
#: side. Others a route file may hold (blocker_model ...) are read as text or kept for the leaderboard.
NUMBERS = ("distance", "speed", "flow_speed", "frequency", "source_dist_interval", "offset", "bicycle_speed",
           "bicycle_drive_distance", "crossing_angle")


def check_params(params: dict[str, dict[str, str]]) -> str | None:
    """What is wrong with a scenario block's parameters, in words ("distance='abc' is not a number"); None."""
    for name in NUMBERS:
        for key, text in params.get(name, {}).items():
            if key not in ("value", "from", "to"):
                continue
            try:
                if not math.isfinite(float(text)):
                    raise ValueError
            except ValueError:
                return f"parameter <{name} {key}=\"{text}\"> is not a number"
    side = params.get("direction", {}).get("value")
    if side is not None and side not in ("left", "right"):
        return f"parameter <direction value=\"{side}\"> must be left or right"
    return None



def value(params: dict, name: str, default: Any, kind=float) -> Any:
    """A `<name value="..."/>` parameter of a scenario block (its default when absent)."""
    if name not in params or "value" not in params[name]:
        return default
    try:
        return kind(params[name]["value"])
    except ValueError:
        raise ValueError(f"scenario parameter {name}={params[name]['value']!r} is not a {kind.__name__}") from None


def interval(params: dict, name: str, default: tuple[float, float]) -> tuple[float, float]:
    """A `<name from="..." to="..."/>` parameter (a `value` stands for both ends)."""
    p = params.get(name)
    if not p:
        return default
    if "value" in p:
        v = float(p["value"])
        return v, v
    lo, hi = float(p.get("from", default[0])), float(p.get("to", default[1]))
    return min(lo, hi), max(lo, hi)


def direction(params: dict, default: str = "right") -> str:
    d = value(params, "direction", default, str)
    if d not in ("left", "right"):
        raise ValueError(f"scenario parameter direction={d!r}: expected 'left' or 'right'")
    return d


# ----------------------------------------------------------------------------- actors


@dataclass
class Mover:
    """An actor this module moves: along `path` (world xy, (N, 2)) at `speed` once started, standing at its
    start until then and at its end after."""

    id: int
    size: tuple[float, float, float, int]  # length, width, height, class
    path: np.ndarray
    speed: float
    started: float | None = None  # the simulated time it started moving
    yaw_still: float | None = None  # heading while standing at the start (default: along the path)
    s: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(self.path, axis=0).T))])

    def pose(self, t: float) -> tuple[float, float, float, float]:
        """x, y, yaw (degrees), speed at simulated time t."""
        d = 0.0 if self.started is None else min(self.speed * (t - self.started), float(self.s[-1]))
        i = min(int(np.searchsorted(self.s, d, side="right")), len(self.s) - 1)
        a, b = self.path[max(i - 1, 0)], self.path[i]
        yaw = math.degrees(math.atan2(b[1] - a[1], b[0] - a[0]))
        if self.started is None and self.yaw_still is not None:
            yaw = self.yaw_still
        moving = self.started is not None and d < self.s[-1]
        x, y = (float(np.interp(d, self.s, self.path[:, k])) for k in (0, 1))
        return x, y, yaw, (self.speed if moving else 0.0)


@dataclass
class Flow:
    """SUMO vehicles entering at a source, one every gap (metres drawn from `gaps`) at `speed`, until `until`."""

    edges: list[str]
    lane: int
    pos: float
    speed: float
    gaps: tuple[float, float]
    until: float
    rules: bool = True  # False: the vehicles ignore lights and right of way
    hold: tuple[float, float] = (math.inf, math.inf)  # no new vehicle while the ego's route s is in [from, to]
    next_time: float = 0.0
    vehicles: list[str] = field(default_factory=list)


@dataclass
class Active:
    """A scenario of the route: where it is, what it spawned."""

    block: dict  # the route's scenario block
    type: ScenarioType
    trigger_s: float  # route s of the trigger point
    site_s: float = math.nan  # route s of its site (obstacle, crossing point, junction exit)
    state: str = "waiting"  # waiting, running, done, failed
    movers: list[Mover] = field(default_factory=list)
    statics: list[int] = field(default_factory=list)  # ids of standing boxes (world.add_static)
    flows: list[Flow] = field(default_factory=list)
    cross_at: float = math.nan  # route s of the walkers' crossing point
    crossing_time: float = 0.0  # seconds a walker takes to reach the ego's lane

    def actor_ids(self, world) -> list[int]:
        ids = [m.id for m in self.movers] + list(self.statics)
        ids += world.box_ids([v for f in self.flows for v in f.vehicles])
        return ids


# ----------------------------------------------------------------------------- the scenarios of a route


class Scenarios:
    """Runs the scenario blocks of one route in a world (tools.collect.world.SumoWorld): `update` once per tick."""

    def __init__(self, blocks: list[dict], route: DenseRoute, carla_map, seed: int):
        self.route = route
        self.map = carla_map
        self.rng = random.Random(seed)
        self.items: list[Active] = []
        self._skipped: dict[str, str] = {}  # blocks that never run: name -> why
        for block in blocks:
            stype = CATALOGUE.get(block["type"])
            if stype is None or stype.kind is None:
                log.info("scenario %s (%s): recorded by name only", block["name"], block["type"])
                self._skipped[block["name"]] = "name only"
                continue
            trig = block.get("trigger") or []
            if len(trig) < 2:
                log.warning("scenario %s: no trigger point; skipped", block["name"])
                self._skipped[block["name"]] = "no trigger"
                continue
            d = np.hypot(route.xy[:, 0] - trig[0], route.xy[:, 1] - trig[1])
            k = int(d.argmin())
            if d[k] > ON_ROUTE_M:
                log.warning("scenario %s: its trigger point is %.0f m from the route; skipped", block["name"], d[k])
                self._skipped[block["name"]] = "off route"
                continue
            self.items.append(Active(block, stype, float(route.s[k])))

    # ------------------------------------------------------------------ per tick
    def update(self, world, s_ego: float) -> None:
        """Start the scenarios the ego reached, move walkers, feed flows, end the ones it left behind."""
        for a in self.items:
            if a.state == "waiting" and s_ego >= a.trigger_s - TRIGGER_M:
                try:
                    self._start(a, world, s_ego)
                    a.state = "running"
                except _NoSite as e:
                    log.warning("scenario %s (%s): %s; skipped", a.block["name"], a.block["type"], e)
                    a.state = "failed"
                    continue
            if a.state != "running":
                continue
            self._run(a, world, s_ego)
            if s_ego > a.site_s + END_M:
                a.state = "done"
                for f in a.flows:
                    f.until = min(f.until, world.time)

    def states(self) -> dict[str, str]:
        """What became of each scenario block, by name: waiting (never reached), running (still, at the end),
        done, failed (no place for it on this route: logged why), name only, no trigger, off route."""
        return {**self._skipped, **{a.block["name"]: a.state for a in self.items}}

    def summary(self) -> str:
        """states() in words: "Accident_1 done, DynamicObjectCrossing_1 failed" ("" for no block)."""
        return ", ".join(f"{name} {state}" for name, state in self.states().items())

    def active(self, world, s_ego: float) -> dict | None:
        """The running scenario nearest ahead of the ego, for the frame's measurements (None: none)."""
        running = [a for a in self.items if a.state == "running"]
        if not running:
            return None
        a = min(running, key=lambda a: abs(a.site_s - s_ego))
        return {"name": a.block["name"], "type": a.block["type"], "kind": a.type.kind,
                "actors": a.actor_ids(world), "distance": round(float(a.site_s - s_ego), 3)}

    def _run(self, a: Active, world, s_ego: float) -> None:
        t = world.time
        for m in a.movers:
            if m.started is None and not math.isnan(a.cross_at):
                to_go = a.cross_at - s_ego - world.ego_box().length / 2
                speed = max(world.ego_box().speed, 1.0)
                if to_go <= max(MIN_TRIGGER_M, speed * (REACTION_S + a.crossing_time)):
                    m.started = t
            elif m.started is None:
                m.started = t
            world.move_static(m.id, *m.pose(t))
        for f in a.flows:
            if f.hold[0] <= s_ego <= f.hold[1]:
                continue
            if t < f.until and t >= f.next_time:
                vid = world.add_vehicle(f.edges, f.lane, f.pos, f.speed, rules=f.rules)
                if vid is not None:
                    f.vehicles.append(vid)
                f.next_time = t + self.rng.uniform(*f.gaps) / max(f.speed, 1.0)

    # ------------------------------------------------------------------ starting
    def _start(self, a: Active, world, s_ego: float) -> None:
        p = a.block.get("params", {})
        name = a.block["type"]
        try:
            if a.type.kind == OBSTACLE:
                self._obstacle(a, name, p, world)
            elif a.type.kind == JUNCTION:
                self._junction(a, name, p, world, s_ego)
            else:
                self._pedestrian(a, name, p, world)
        except ValueError as e:
            raise _NoSite(str(e)) from None
        log.info("scenario %s (%s) started at route %.0f m: site at %.0f m, %d actors, %d SUMO flows",
                 a.block["name"], name, s_ego, a.site_s, len(a.actor_ids(world)), len(a.flows))

    # ------------------------------------------------------------------ geometry on the route
    def _point(self, s: float) -> tuple[float, float, float]:
        r = self.route
        s = float(np.clip(s, 0.0, r.length))
        x, y = (float(np.interp(s, r.s, r.xy[:, k])) for k in (0, 1))
        return x, y, float(r.yaw[min(int(np.searchsorted(r.s, s)), len(r.s) - 1)])

    def _limit(self, start: float) -> float:
        """The farthest route s after `start` that keeps JUNCTION_CLEARANCE_M before the next junction (and END_M
        before the route's end)."""
        r = self.route
        ahead = r.junction_after(start)
        return float(r.s[ahead[0]]) - JUNCTION_CLEARANCE_M if ahead else r.length - END_M

    def _site(self, start: float, distance: float, span: float, before: float = 0.0) -> float:
        """Route s of a site `distance` beyond `start` with `span` metres after it before the next junction (moved
        back towards `start` where a junction is closer) and `before` metres before it after the last junction
        (moved on where that is closer); ValueError when there is no such room."""
        r = self.route
        behind = np.flatnonzero(r.junction & (r.s <= start + distance))
        earliest = max(start, float(r.s[behind[-1]]) + before if len(behind) else before)
        site = max(min(start + distance, self._limit(start) - span), earliest)
        if site + span > self._limit(start) or site < 5.0:
            raise ValueError(f"no {before + span:.0f} m of lane without a junction after its trigger")
        return site

    def _lane(self, x: float, y: float):
        import carla

        wp = self.map.get_waypoint(carla.Location(x, y, 0.0), project_to_road=True, lane_type=carla.LaneType.Driving)
        if wp is None:
            raise ValueError(f"no driving lane at ({x:.1f}, {y:.1f})")
        return wp

    @staticmethod
    def _side_vector(yaw: float, side: str) -> np.ndarray:
        """Unit vector to the right (side 'right') or left of a heading, world frame (CARLA: y to the right)."""
        rad = math.radians(yaw)
        right = np.array([-math.sin(rad), math.cos(rad)])
        return right if side == "right" else -right

    def _road_edge(self, s: float, side: str) -> float:
        """Lateral metres from the route's centreline at s to the outer edge of the road on `side` (over every
        driving, parking, shoulder or biking lane)."""
        x, y, _ = self._point(s)
        wp = self._lane(x, y)
        outer, total = wp, wp.lane_width / 2
        for _ in range(8):
            nxt = outer.get_right_lane() if side == "right" else outer.get_left_lane()
            if nxt is None or str(nxt.lane_type) not in ("Driving", "Parking", "Shoulder", "Biking"):
                break
            total += nxt.lane_width
            outer = nxt
        return total

    def _lane_path(self, s0: float, s1: float, lateral: float, side: str) -> np.ndarray:
        """Points every metre (at least two) from route s0 to s1 (either way), `lateral` metres to `side`."""
        out = []
        for v in np.linspace(s0, s1, max(int(abs(s1 - s0)) + 1, 2)):
            x, y, yaw = self._point(float(v))
            out.append(np.array([x, y]) + self._side_vector(yaw, side) * lateral)
        return np.array(out)

    def _place(self, world, s: float, size: tuple, lateral: float, side: str, yaw_offset: float = 0.0,
               block: bool = False) -> int:
        """A standing box at route s, `lateral` metres to `side` of the centreline."""
        x, y, yaw = self._point(s)
        v = self._side_vector(yaw, side) * lateral
        length, width, height, cls = size
        return world.add_static(cls, x + v[0], y + v[1], yaw + yaw_offset, length, width, height, block=block)

    # ------------------------------------------------------------------ obstacles
    def _warning(self, world, s: float, side: str) -> int:
        """The warning prop before an obstacle: beside the road on the obstacle's side, facing the traffic."""
        return self._place(world, s, WARNING_PROP, self._road_edge(s, side) + WARNING_PROP[1] / 2 + 0.2, side)

    def _obstacle(self, a: Active, name: str, p: dict, world) -> None:
        x, y, _ = self._point(a.trigger_s)
        width = self._lane(x, y).lane_width
        side = "left" if name == "InvadingTurn" else direction(p) if "direction" in p else self._free_side(a.trigger_s)
        ids = a.statics
        if name.startswith("Accident"):
            site = self._site(a.trigger_s, value(p, "distance", 120.0), EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            off = 0.6 * width / 2
            ids.append(self._warning(world, site - 8.0, side))
            ids.append(self._place(world, site, POLICE_CAR, off, side, 0.0, block=True))
            ids.append(self._place(world, site + 10.0, PARKED_CAR, off, side, 0.0, block=True))
            ids.append(self._place(world, site + 16.0, PARKED_CAR, off, side, 0.0, block=True))
            a.site_s = site + 16.0
        elif name.startswith("ParkedObstacle") or name == "VehicleOpensDoorTwoWays":
            site = self._site(a.trigger_s, value(p, "distance", 120.0 if name != "VehicleOpensDoorTwoWays" else 50.0),
                              EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            door = name == "VehicleOpensDoorTwoWays"
            length, w, h, cls = PARKED_CAR
            size = (length, w + 1.0, h, cls) if door else PARKED_CAR  # the open door: a metre more into the lane
            off = width / 2 + 0.7 - w / 2 if door else 0.7 * width / 2  # the car at the lane's edge, its door in
            if not door:
                ids.append(self._warning(world, site - 8.0, side))
            ids.append(self._place(world, site, size, off, side, 0.0, block=True))
            a.site_s = site
        elif name.startswith("ConstructionObstacle"):
            site = self._site(a.trigger_s, value(p, "distance", 100.0), EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            for k in range(4):  # a taper of cones from the lane's edge in towards its centre, the sign, a row after
                ids.append(self._place(world, site + 2.5 * k, CONE, width / 2 - 0.3 - 0.45 * k, side))
                ids.append(self._place(world, site + 11.5 + 2.0 * k, CONE, width / 2 - 0.3, side))
            ids.append(self._place(world, site + 9.5, TRAFFIC_WARNING, 0.2 * width / 2, side, 0.0, block=True))
            a.site_s = site + EXTENT_M[name]
        elif name.startswith("HazardAtSideLane"):
            site = self._site(a.trigger_s, value(p, "distance", 100.0), EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            speed = value(p, "bicycle_speed", 10.0) / 3.6
            drive = value(p, "bicycle_drive_distance", 50.0)
            end = max(min(site + 9.0 + drive, self._limit(a.trigger_s) - PASS_ROOM_M), site + EXTENT_M[name])
            for start in (site, site + 9.0):
                path = self._lane_path(start, end - (site + 9.0 - start), 0.55 * width / 2, side)
                mover = Mover(world.add_static(BICYCLE[3], *path[0], 0.0, *BICYCLE[:3]), BICYCLE, path, speed,
                              started=world.time)
                a.movers.append(mover)
            a.site_s = end
        elif name == "InvadingTurn":
            site = self._site(a.trigger_s, value(p, "distance", 100.0) / 2, 0.0)
            invade = value(p, "offset", 0.25)
            # Oncoming cars in the lane left of the ego's, shifted `offset` metres over its edge.
            lateral = width / 2 + width / 2 - (invade + width / 2 - 0.7)
            for k in range(3):
                start = min(site + 40.0 + 25.0 * k, self.route.length)
                path = self._lane_path(start, max(a.trigger_s - 40.0, 0.0), lateral, "left")
                car = PARKED_CAR
                mover = Mover(world.add_static(car[3], *path[0], 0.0, *car[:3]), car, path, 8.0, started=world.time)
                a.movers.append(mover)
            a.site_s = site
        if name.endswith("TwoWays"):
            self._oncoming_flow(a, p, world)

    def _free_side(self, s: float) -> str:
        """The side of the ego's lane an obstacle takes when the route file gives no `direction`: away from
        the lane the ego can pass in (a same-direction lane on the left, else the oncoming one, are on the
        left: the obstacle goes right; only a same-direction lane on the right: it goes left)."""
        lanes = neighbours(self._lane(*self._point(s)[:2]))
        return "left" if lanes.left is None and lanes.oncoming is None and lanes.right is not None else "right"

    def _oncoming_flow(self, a: Active, p: dict, world) -> None:
        """TwoWays: SUMO traffic in the oncoming lane next to the site, gaps drawn from `frequency` (metres)."""
        gaps = interval(p, "frequency", (20.0, 100.0))
        x, y, _ = self._point(a.site_s)
        left = neighbours(self._lane(x, y)).oncoming
        if left is None:
            log.info("scenario %s: no oncoming lane at the site; no oncoming flow", a.block["name"])
            return
        src = self._along(left, -120.0)  # upstream of the oncoming lane: ahead of the ego
        sink = self._along(left, 80.0)
        flow = world.flow_route(src, sink)
        if flow is None:
            log.info("scenario %s: SUMO has no route along the oncoming lane; no oncoming flow", a.block["name"])
            return
        edges, lane, pos = flow
        speed = max(8.0, world.lane_speed(edges[0], lane))
        first = a.site_s - EXTENT_M.get(a.block["type"], 0.0)
        a.flows.append(Flow(edges, lane, pos, speed, gaps, until=math.inf, hold=(first - HOLD_M, a.site_s + 5.0),
                            next_time=world.time))

    @staticmethod
    def _along(wp, metres: float) -> tuple[float, float]:
        """The point `metres` along a lane from a waypoint (its direction of travel; negative: back), or as far
        as the lane goes before it enters another junction (SUMO starts and ends vehicles on edges only)."""
        step = 2.0
        for _ in range(int(abs(metres) / step)):
            nxt = wp.next(step) if metres > 0 else wp.previous(step)
            if not nxt or (nxt[0].is_junction and not wp.is_junction):  # out of its own junction, into none
                break
            wp = nxt[0]
        loc = wp.transform.location
        return loc.x, loc.y

    # ------------------------------------------------------------------ junctions
    def _junction_span(self, start: float) -> tuple[int, int]:
        span = self.route.junction_after(start)
        if span is None:
            raise ValueError("no junction on the route after its trigger")
        return span

    def _junction(self, a: Active, name: str, p: dict, world, s_ego: float) -> None:
        r = self.route
        i0, i1 = self._junction_span(a.trigger_s)
        x, y = r.xy[(i0 + i1) // 2]
        wp = self._lane(float(x), float(y))
        if not wp.is_junction:
            raise ValueError("the route's junction is not one of the map")
        junction = wp.get_junction()
        ego_yaw = float(r.yaw[max(i0 - 1, 0)])
        if name.startswith("OppositeVehicle"):
            sides = [value(p, "direction", "right", str)]
        elif "LeftTurn" in name:
            sides = ["opposite"]
        else:
            sides = ["left"]
        import carla

        by_side: dict[str, list] = {}
        for entry, exit_ in junction.get_waypoints(carla.LaneType.Driving):
            rel = wrap_degrees(entry.transform.rotation.yaw - ego_yaw)
            side = "opposite" if abs(rel) > 135 else "left" if 45 < rel < 135 else "right" if -135 < rel < -45 else ""
            turn = abs(wrap_degrees(exit_.transform.rotation.yaw - entry.transform.rotation.yaw))
            by_side.setdefault(side, []).append((turn > 30.0, entry, exit_))
        # The side the type names (an adversary's other side where the junction has none, a T-junction), and
        # its lanes going straight through first (the leaderboard's), else its turning ones.
        sides += [sd for sd in ("opposite", "left", "right") if sd not in sides]
        side = next((sd for sd in sides if by_side.get(sd)), None)
        if side is None:
            raise ValueError(f"no lane enters the junction from the {sides[0]}")
        ranked = sorted(by_side[side], key=lambda p: p[0])
        paths = [(entry, exit_) for turning, entry, exit_ in ranked if turning == ranked[0][0]]
        a.site_s = float(r.s[i1])
        if name.startswith("OppositeVehicle"):
            entry, exit_ = self.rng.choice(paths)
            speed = 60.0 / 3.6  # scenario_runner's adversary speed
            # Timed to meet the ego: as far from the junction as it drives while the ego gets there.
            ego_time = (float(r.s[i0]) - s_ego) / max(world.ego_box().speed, 6.0)
            src = self._along(entry, -max(min(speed * ego_time, 60.0), 15.0))
            found = world.flow_route(src, self._along(exit_, 20.0))
            if found is None:
                raise ValueError("SUMO has no route for the adversary")
            edges, lane, pos = found
            a.flows.append(Flow(edges, lane, pos, speed, (1e6, 1e6), until=world.time + 1.0, rules=False,
                                next_time=world.time))
            return
        flow_speed = value(p, "flow_speed", 20.0)
        gaps = interval(p, "source_dist_interval", (25.0, 50.0))
        for entry, exit_ in paths[:2]:
            src = self._along(entry, -max(4.0 * flow_speed, 30.0))
            found = world.flow_route(src, self._along(exit_, 2.5 * flow_speed))
            if found is None:
                continue
            edges, lane, pos = found
            a.flows.append(Flow(edges, lane, pos, flow_speed, gaps, until=world.time + FLOW_S, next_time=world.time))
        if not a.flows:
            raise ValueError("SUMO has no route for the flow")

    # ------------------------------------------------------------------ pedestrians
    def _pedestrian(self, a: Active, name: str, p: dict, world) -> None:
        side = direction(p)
        if name in ("PedestrianCrossing", "VehicleTurningRoutePedestrian"):
            _, i1 = self._junction_span(a.trigger_s)
            a.cross_at = min(float(self.route.s[i1]) + 4.0, self.route.length - 1.0)
            count, speed, blocker = (3 if name == "PedestrianCrossing" else 1), 1.3, None
        else:
            a.cross_at = self._site(a.trigger_s, value(p, "distance", 12.0), 6.0)
            count, speed = 1, 2.0
            blocker = PARKED_CAR if name == "ParkingCrossingPedestrian" else (
                *BLOCKERS.get(value(p, "blocker_model", "static.prop.vendingmachine", str),
                              BLOCKERS["static.prop.vendingmachine"]), sem.STATIC)
        angle = value(p, "crossing_angle", 0.0)
        x, y, yaw = self._point(a.cross_at)
        out = self._road_edge(a.cross_at, side)
        far = self._road_edge(a.cross_at, "left" if side == "right" else "right")
        across = -self._side_vector(yaw, side)  # from the kerb on `side` towards the other
        rad = math.radians(angle)
        fwd = np.array([math.cos(math.radians(yaw)), math.sin(math.radians(yaw))])
        heading = across * math.cos(rad) + fwd * math.sin(rad)
        start_lateral = out + 1.2
        for k in range(count):
            along = 1.2 * k - 1.2 * (count - 1) / 2
            start = np.array([x, y]) - across * start_lateral + fwd * (along + (1.0 if blocker else 0.0))
            length = (start_lateral + far + 1.0) / max(math.cos(rad), 0.3)
            path = np.array([start, start + heading * length])
            yaw_walk = math.degrees(math.atan2(heading[1], heading[0]))
            mid = world.add_static(WALKER[3], *start, yaw_walk, *WALKER[:3])
            a.movers.append(Mover(mid, WALKER, path, speed + 0.1 * k, yaw_still=yaw_walk))
        width = self._lane(x, y).lane_width
        if blocker is not None:  # between the ego and the walker: a prop beyond the kerb, a car parked at it
            bl, bw, bh, bc = blocker
            lateral = out + bw / 2 + 0.1 if bc == sem.STATIC else max(out - bw / 2 - 0.1, width / 2 + bw / 2 - 0.3)
            pos = np.array([x, y]) - across * lateral - fwd * (bl / 2 + 0.8)
            a.statics.append(world.add_static(bc, float(pos[0]), float(pos[1]), yaw, bl, bw, bh))
        a.crossing_time = (start_lateral - width / 2) / speed
        a.site_s = a.cross_at


class _NoSite(Exception):
    """The scenario has no place on this route (logged, skipped)."""


def catalogue_markdown() -> str:
    """The table of docs/scenarios.md: every leaderboard 2.0 scenario type and what the embedded world does."""
    rows = ["| type | kind | embedded world | what happens on the road | why not as on the leaderboard |",
            "|---|---|---|---|---|"]
    for name, t in CATALOGUE.items():
        rows.append(f"| `{name}` | {t.kind or '-'} | {t.handling} | {t.what or '-'} | {t.why or '-'} |")
    return "\n".join(rows) + "\n"
