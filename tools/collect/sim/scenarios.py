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
The world (tools.collect.sim.world) draws the actors like any other (boxes, semantics, LiDAR, BEV), judges
collisions with them, and tells the expert about them through its snapshot.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field

import numpy as np

from tools.collect.base.scenario_sites import (
    FLOW_SIDE,
    entry_sides,
    junction_ahead,
    lane_forward,
    sidewalk_before_junction,
    straight_through,
)
from tools.collect.base.scenario_types import (
    BEFORE_M,
    BICYCLE,
    BLOCKERS,
    CATALOGUE,
    CONE,
    DEBRIS,
    END_M,
    EXTENT_M,
    FLOW_S,
    HOLD_M,
    JUNCTION,
    JUNCTION_CLEARANCE_M,
    MIN_TRIGGER_M,
    OBSTACLE,
    ON_ROUTE_M,
    PARKED_CAR,
    PASS_ROOM_M,
    POLICE_CAR,
    REACTION_S,
    TRAFFIC_WARNING,
    TRIGGER_M,
    WALKER,
    WARNING_PROP,
    ScenarioType,
    direction,
    interval,
    value,
)
from tools.dataset import semantics as sem
from tools.dataset.geometry import wrap_degrees
from tools.expert.lanes import lane_at, neighbours
from tools.expert.planner import RoutePlanner
from tools.expert.route import DenseRoute

log = logging.getLogger("collect.scenarios")

#: The types whose scenario_runner class leaves the ego's lane free ahead of it when it starts (route mode:
#: `LeaveSpaceInFront`, the background activity teleporting the vehicles in the ego's lane ahead of it forward; for
#: ConstructionObstacle `RemoveRoadLane` of the ego's lane), and how far beyond the site, metres (the classes'
#: total distance: the obstacle's distance and extent plus 20 m; the crossing's distance plus 10 m or 15 m). Here
#: the background vehicles in the ego's lane between it and there are taken out (and replaced elsewhere): SUMO's
#: drivers never pass through the oncoming lane, and one queued behind the obstacle was an obstacle the ego could not
#: pass (Bench2Drive AccidentTwoWays 25845: blocked; HazardAtSideLaneTwoWays 3436: a pass of the queue met the
#: oncoming traffic head on).
LEAVE_SPACE_M = {"Accident": 20.0, "AccidentTwoWays": 20.0, "ParkedObstacle": 20.0, "ParkedObstacleTwoWays": 20.0,
                 "ConstructionObstacle": 20.0, "ConstructionObstacleTwoWays": 20.0, "HazardAtSideLane": 20.0,
                 "HazardAtSideLaneTwoWays": 20.0, "VehicleOpensDoorTwoWays": 20.0, "DynamicObjectCrossing": 10.0,
                 "ParkingCrossingPedestrian": 15.0}
#: A vehicle whose centre is this close to the route's centreline (and heading its way) is in the ego's lane, metres.
LANE_HALF_M = 1.75
#: TwoWays obstacles: the leaderboard switches the background traffic of the oncoming lane off while the ego passes
#: (`ChangeOppositeBehavior(active=False)`; the scenario's own flow comes instead). Here, every OPPOSITE_CHECK_S
#: while the ego is before the site, the background vehicles standing in the oncoming lane (their centre 1.5 to
#: 5.5 m left of the route, heading against it) from OPPOSITE_BEHIND_M behind the ego to OPPOSITE_BEYOND_M past the
#: site are taken out: SUMO's oncoming traffic, queued from a junction behind the ego, stood beside it for good, and
#: the lane to pass in was never free (Bench2Drive AccidentTwoWays 25845: blocked). Moving ones drive on.
OPPOSITE_CHECK_S = 1.0
OPPOSITE_BEHIND_M = 15.0
OPPOSITE_BEYOND_M = 20.0
OPPOSITE_LATERAL_M = (1.5, 5.5)


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
    #: How its vehicles brake for the ego (tools.collect.sim.world.SumoWorld.add_vehicle): "always" (the BasicAgent
    #: of OppositeActorFlow), "after a collision" (ActorFlow: they ignore other vehicles until one of them hits
    #: one), "never" (the adversary: a ConstantVelocityAgent with ignore_vehicles).
    yields: str = "never"
    hold: tuple[float, float] = (math.inf, math.inf)  # no new vehicle while the ego's route s is in [from, to]
    #: The point the flow is placed around, where its class has one (a TwoWays obstacle's OppositeActorFlow: the
    #: oncoming lane beside the obstacle): what tools.collect.sim.placements compares.
    reference: tuple[float, float] | None = None
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
    opposite_checked: float = -math.inf  # when the oncoming lane was last cleared of standing traffic (TwoWays)

    def actor_ids(self, world) -> list[int]:
        ids = [m.id for m in self.movers] + list(self.statics)
        ids += world.box_ids([v for f in self.flows for v in f.vehicles])
        return ids


# ----------------------------------------------------------------------------- the scenarios of a route


class Scenarios:
    """Runs the scenario blocks of one route in a world (tools.collect.sim.world.SumoWorld): `update` once per tick."""

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

    @classmethod
    def for_route(cls, route, carla_map, seed: int) -> Scenarios:
        """The scenarios of a route file's route (tools.collect.base.routes.Route) on its town's carla.Map, along
        the route as the ego drives it (the planner's dense route through its waypoints: `.route`)."""
        return cls(route.scenarios, RoutePlanner(carla_map).trace(route.waypoints), carla_map, seed)

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
        if (a.type.kind == OBSTACLE and a.block["type"].endswith("TwoWays") and s_ego < a.site_s
                and t - a.opposite_checked >= OPPOSITE_CHECK_S - 1e-6):
            a.opposite_checked = t
            self._clear_opposite(a, world, s_ego)
        for m in a.movers:
            if m.started is None and not math.isnan(a.cross_at):
                to_go = a.cross_at - s_ego - world.ego_box().length / 2
                speed = max(world.ego_box().speed, 1.0)
                if to_go <= max(MIN_TRIGGER_M, speed * (REACTION_S + a.crossing_time)):
                    m.started = t
            elif m.started is None:
                m.started = t
            world.move_static(m.id, *m.pose(t))
        for k, f in enumerate(a.flows):
            if f.hold[0] <= s_ego <= f.hold[1]:
                continue
            if t < f.until and t >= f.next_time:
                vid = world.add_vehicle(f.edges, f.lane, f.pos, f.speed, rules=f.rules, yields=f.yields == "always",
                                        flow=f"{a.block['name']}/{k}" if f.yields == "after a collision" else "")
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
        if name in LEAVE_SPACE_M:
            self._leave_space(a, world, s_ego, a.site_s + LEAVE_SPACE_M[name])
        log.info("scenario %s (%s) started at route %.0f m: site at %.0f m, %d actors, %d SUMO flows",
                 a.block["name"], name, s_ego, a.site_s, len(a.actor_ids(world)), len(a.flows))

    def _leave_space(self, a: Active, world, s_ego: float, until: float) -> None:
        """Take out the background vehicles in the ego's lane ahead of it up to route s `until` (LEAVE_SPACE_M)."""
        r = self.route
        ego = world.ego_box()
        span = np.flatnonzero((r.s >= s_ego) & (r.s <= until))
        boxes = [b for b in world.actors() if b.id != ego.id]
        if len(span) < 2 or not boxes:
            return
        xy, yaw = r.xy[span], r.yaw[span]
        pos = np.array([[b.x, b.y, b.yaw] for b in boxes])
        d = np.hypot(pos[:, None, 0] - xy[None, :, 0], pos[:, None, 1] - xy[None, :, 1])
        k = d.argmin(axis=1)
        in_lane = (d[np.arange(len(boxes)), k] < LANE_HALF_M) & (np.abs(wrap_degrees(pos[:, 2] - yaw[k])) < 45.0)
        ahead = r.s[span][k] > s_ego
        ids = {boxes[i].id for i in np.flatnonzero(in_lane & ahead)}
        if ids:
            n = world.take_out(ids)
            if n:
                log.info("scenario %s: %d background vehicles taken out of the ego's lane ahead, up to route %.0f m",
                         a.block["name"], n, until)

    def _clear_opposite(self, a: Active, world, s_ego: float) -> None:
        """Take out the background vehicles standing in the oncoming lane beside the ego's way to the site
        (OPPOSITE_CHECK_S)."""
        r = self.route
        span = np.flatnonzero((r.s >= s_ego - OPPOSITE_BEHIND_M) & (r.s <= a.site_s + OPPOSITE_BEYOND_M))
        ego = world.ego_box()
        boxes = [b for b in world.actors() if b.id != ego.id and b.speed < 0.3]
        if len(span) < 2 or not boxes:
            return
        xy, yaw = r.xy[span], np.radians(r.yaw[span])
        pos = np.array([[b.x, b.y, b.yaw] for b in boxes])
        d = np.hypot(pos[:, None, 0] - xy[None, :, 0], pos[:, None, 1] - xy[None, :, 1])
        k = d.argmin(axis=1)
        # Left of the heading (CARLA's y points right): (sin, -cos).
        left = (pos[:, 0] - xy[k, 0]) * np.sin(yaw[k]) - (pos[:, 1] - xy[k, 1]) * np.cos(yaw[k])
        against = np.abs(wrap_degrees(pos[:, 2] - np.degrees(yaw[k]))) > 135.0
        inside = (k > 0) & (k < len(span) - 1)  # beside the stretch, not beyond either end
        lo, hi = OPPOSITE_LATERAL_M
        ids = {boxes[i].id for i in np.flatnonzero((left > lo) & (left < hi) & against & inside)}
        if ids:
            n = world.take_out(ids)
            if n:
                log.info("scenario %s: %d background vehicles standing in the oncoming lane taken out",
                         a.block["name"], n)

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
        wp = lane_at(self.map, x, y)
        if wp is None:
            raise ValueError(f"no driving lane at ({x:.1f}, {y:.1f})")
        return wp

    def _trigger_lane(self, a: Active):
        """The lane under the block's trigger point, as the classes take it (carla.Map.get_waypoint of the trigger)."""
        trig = a.block["trigger"]
        wp = lane_at(self.map, float(trig[0]), float(trig[1]), float(trig[2]) if len(trig) > 2 else None)
        return wp if wp is not None else self._lane(*self._point(a.trigger_s)[:2])

    def _route_s(self, wp, near: tuple[float, float]) -> float:
        """Route s of the point of the route nearest a waypoint, among the route's stretch `near` (from, to)."""
        r = self.route
        loc = wp.transform.location
        span = np.flatnonzero((r.s >= near[0]) & (r.s <= near[1]))
        if len(span) < 2:
            span = np.arange(len(r.s))
        xy = r.xy[span]
        k = int(np.argmin(np.hypot(xy[:, 0] - loc.x, xy[:, 1] - loc.y)))
        k = min(max(k, 1), len(span) - 1)  # between samples k-1 and k: projected onto that piece
        a, b = xy[k - 1], xy[k]
        d = b - a
        t = float(np.clip(np.dot([loc.x - a[0], loc.y - a[1]], d) / max(float(d @ d), 1e-9), 0.0, 1.0))
        return float(r.s[span[k - 1]] + t * (r.s[span[k]] - r.s[span[k - 1]]))

    def _class_spacing(self, a: Active, distance: float, gaps: tuple[float, ...] = (),
                       whole: bool = False) -> list[float]:
        """Where an obstacle class puts its obstacles, in route metres: the first `distance` steps along the trigger
        point's lane (scenario_sites.lane_forward; `whole`: one Waypoint.next(distance), as ConstructionObstacle
        walks), each next one `gaps` steps on from the one before; as route s beyond the trigger, the first, then
        each one's beyond the first. CARLA's steps are metres of the road's reference line: on curves the lane's
        own length differs (by 15 % on Town10HD)."""
        wp = self._trigger_lane(a)
        if whole:
            ahead = wp.next(distance) if distance > 0 else [wp]
            wps = [ahead[0] if ahead else wp]
        else:
            wps = [lane_forward(wp, distance)]
        for gap in gaps:
            wps.append(lane_forward(wps[-1], gap))
        near = (a.trigger_s - 5.0, a.trigger_s + 2.0 * (distance + sum(gaps)) + 20.0)
        s = [self._route_s(w, near) for w in wps]
        return [s[0] - a.trigger_s] + [v - s[0] for v in s[1:]]

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
    def _warning(self, world, a: Active, side: str) -> int:
        """The warning prop of an obstacle, as scenario_runner's `_spawn_side_prop` puts it: from the trigger
        point's lane, in the first lane beyond the road's driving and parking lanes on the obstacle's side (a
        sidewalk, a shoulder), 0.3 of the outermost driving or parking lane's width further out than that lane's
        centre, turned 90 degrees to it. Where no lane is beyond (the class then fails), beside the road's edge."""
        import carla

        s = a.trigger_s
        wp = self._trigger_lane(a)
        outer = wp
        while True:
            beyond = outer.get_right_lane() if side == "right" else outer.get_left_lane()
            if beyond is None or beyond.lane_type not in (carla.LaneType.Driving, carla.LaneType.Parking):
                break
            outer = beyond
        if beyond is None:
            return self._place(world, s, WARNING_PROP, self._road_edge(s, side) + WARNING_PROP[0] / 2 + 0.2, side, 90.0)
        out = outer.transform.get_right_vector()
        sign = 0.3 * outer.lane_width * (1.0 if side == "right" else -1.0)
        at = beyond.transform
        length, width, height, cls = WARNING_PROP
        return world.add_static(cls, at.location.x + sign * out.x, at.location.y + sign * out.y,
                                at.rotation.yaw + 90.0, length, width, height)

    def _obstacle(self, a: Active, name: str, p: dict, world) -> None:
        x, y, _ = self._point(a.trigger_s)
        width = self._lane(x, y).lane_width
        if name == "InvadingTurn":
            side = "left"
        elif name.startswith("HazardAtSideLane"):  # its class reads no `direction`: the cyclists ride on the right
            side = "right"
        else:
            side = direction(p)  # the classes' default: right (the generator writes `left` where it takes that)
        ids = a.statics
        if name.startswith("Accident"):
            # The police car `distance` steps along the lane, the cars 10 and 6 steps on (Accident's class).
            at, first, second = self._class_spacing(a, value(p, "distance", 120.0), (10.0, 6.0))
            site = self._site(a.trigger_s, at, EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            off = 0.6 * width / 2
            ids.append(self._warning(world, a, side))
            ids.append(self._place(world, site, POLICE_CAR, off, side, 0.0, block=True))
            ids.append(self._place(world, site + first, PARKED_CAR, off, side, 0.0, block=True))
            ids.append(self._place(world, site + second, PARKED_CAR, off, side, 0.0, block=True))
            a.site_s = site + second
        elif name.startswith("ParkedObstacle") or name == "VehicleOpensDoorTwoWays":
            door = name == "VehicleOpensDoorTwoWays"
            # ParkedObstacle's class walks `distance` steps along the lane, VehicleOpensDoor's one next(distance).
            (at,) = self._class_spacing(a, value(p, "distance", 50.0 if door else 120.0), whole=door)
            site = self._site(a.trigger_s, at, EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            length, w, h, cls = PARKED_CAR
            size = (length, w + 1.0, h, cls) if door else PARKED_CAR  # the open door: a metre more into the lane
            off = width / 2 + 0.7 - w / 2 if door else 0.7 * width / 2  # the car at the lane's edge, its door in
            if not door:
                ids.append(self._warning(world, a, side))
            ids.append(self._place(world, site, size, off, side, 0.0, block=True))
            a.site_s = site
        elif name.startswith("ConstructionObstacle"):
            (at,) = self._class_spacing(a, value(p, "distance", 100.0), whole=True)  # its class: next(distance)
            site = self._site(a.trigger_s, at, EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            ids.append(self._warning(world, a, side))
            # As its class sets it up, on the line of the lane's heading at the site: the arrow board 5 m before
            # it in the lane's centre, turned to face the traffic; debris 2 m past it; cones along the edge the ego
            # passes by (0.85 of the half lane width from the centre) 2 to 8 m past it, and three across the lane at
            # 8 m, a metre apart, towards `direction`.
            x, y, yaw = self._point(site)
            fwd = np.array([math.cos(math.radians(yaw)), math.sin(math.radians(yaw))])
            out = self._side_vector(yaw, side)

            def put(along: float, lateral: float, size: tuple, turn: float, block: bool = False) -> int:
                px, py = np.array([x, y]) + fwd * along + out * lateral
                return world.add_static(size[3], float(px), float(py), yaw + turn, *size[:3], block=block)

            edge = -0.85 * width / 2
            ids.append(put(-5.0, 0.0, TRAFFIC_WARNING, 270.0, block=True))
            ids.append(put(2.0, 0.0, DEBRIS, 90.0))
            ids += [put(along, edge, CONE, 0.0) for along in (2.0, 4.0, 6.0, 8.0)]
            ids += [put(8.0, edge + k, CONE, 90.0 if side == "right" else -90.0) for k in (1.0, 2.0, 3.0)]
            a.site_s = site + EXTENT_M[name]
        elif name.startswith("HazardAtSideLane"):
            at, gap = self._class_spacing(a, value(p, "distance", 100.0), (9.0,))  # the second 9 steps on
            site = self._site(a.trigger_s, at, EXTENT_M[name] + PASS_ROOM_M, BEFORE_M)
            speed = value(p, "bicycle_speed", 10.0) / 3.6
            drive = value(p, "bicycle_drive_distance", 50.0)
            end = max(min(site + gap + drive, self._limit(a.trigger_s) - PASS_ROOM_M), site + EXTENT_M[name])
            for start in (site, site + gap):
                path = self._lane_path(start, end - (site + gap - start), 0.55 * width / 2, side)
                # SUMO's traffic keeps behind them (it used to drive through them, into the ego passing them).
                yaw = math.degrees(math.atan2(*(path[1] - path[0])[::-1]))
                mover = Mover(world.add_static(BICYCLE[3], *path[0], yaw, *BICYCLE[:3], block=True), BICYCLE, path,
                              speed, started=world.time)
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
            self._oncoming_flow(a, p, world, site if name.startswith("ConstructionObstacle") else a.site_s)

    def _oncoming_flow(self, a: Active, p: dict, world, at: float) -> None:
        """TwoWays: SUMO traffic in the oncoming lane beside route s `at` (where the class's OppositeActorFlow takes
        its reference: the last accident car, the parked car, the construction's start), gaps drawn from `frequency`
        (metres), from as far up that lane to as far down it as the class's flow reaches: 1.5 times the ego's speed
        limit in km/h plus 30 m, in metre steps, not into a junction."""
        gaps = interval(p, "frequency", (20.0, 100.0))
        x, y, _ = self._point(at)
        left = neighbours(self._lane(x, y)).oncoming
        if left is None:
            log.info("scenario %s: no oncoming lane at the site; no oncoming flow", a.block["name"])
            return
        reach = 1.5 * world.speed_limit() * 3.6 + 30.0
        src = self._along(left, -reach, step=1.0)  # upstream of the oncoming lane: ahead of the ego
        sink = self._along(left, reach, step=1.0)
        flow = world.flow_route(src, sink)
        if flow is None:
            log.info("scenario %s: SUMO has no route along the oncoming lane; no oncoming flow", a.block["name"])
            return
        edges, lane, pos = flow
        speed = max(8.0, world.lane_speed(edges[0], lane))
        first = a.site_s - EXTENT_M.get(a.block["type"], 0.0)
        a.flows.append(Flow(edges, lane, pos, speed, gaps, until=math.inf, hold=(first - HOLD_M, a.site_s + 5.0),
                            next_time=world.time, reference=self._along(left, 0.0), yields="always"))

    @staticmethod
    def _along(wp, metres: float, step: float = 2.0) -> tuple[float, float]:
        """The point `metres` along a lane from a waypoint (its direction of travel; negative: back) in `step`s, or
        as far as the lane goes before it enters another junction (SUMO starts and ends vehicles on edges only)."""
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
        a.site_s = float(r.s[i1])
        if name.startswith("OppositeVehicle"):
            self._adversary(a, p, world, s_ego, float(r.s[i0]))
            return
        if name.startswith("EnterActorFlow"):
            flow_speed = value(p, "flow_speed", 10.0)
            gaps = interval(p, "source_dist_interval", (20.0, 50.0))
            ends = self._entering_flows(name, p)
        else:
            flow_speed = value(p, "flow_speed", 20.0)
            gaps = interval(p, "source_dist_interval", (25.0, 50.0))
            ends = self._crossing_flows(a, name, flow_speed)
        for src, sink in ends:
            found = world.flow_route(src, sink)
            if found is None:
                continue
            edges, lane, pos = found
            a.flows.append(Flow(edges, lane, pos, flow_speed, gaps, until=world.time + FLOW_S, next_time=world.time,
                                yields="after a collision"))
        if not a.flows:
            raise ValueError("SUMO has no route for the flow")

    def _adversary(self, a: Active, p: dict, world, s_ego: float, entry_s: float) -> None:
        """OppositeVehicle*'s adversary: a SUMO car in the first lane entering the junction from the side
        `direction` as its class finds it (scenario_sites.entry_sides; another side where the junction has none,
        a T-junction), straight across the junction to 10 m past it (scenario_sites.straight_through), ignoring
        lights and right of way, timed to meet the ego: it starts as far up its lane as it drives while the ego gets
        to the junction (15 to 60 m; the class's waits 30 m up, started by the ego's time to arrival)."""
        sides = [value(p, "direction", "right", str)]
        by_side = entry_sides(self._trigger_lane(a))
        sides += [sd for sd in ("opposite", "left", "right") if sd not in sides]
        side = next((sd for sd in sides if by_side.get(sd)), None)
        if side is None:
            raise ValueError(f"no lane enters the junction from the {sides[0]}")
        entry = by_side[side][0]
        speed = 60.0 / 3.6  # scenario_runner's adversary speed
        # Timed to meet the ego: as far from the junction as it drives while the ego gets there.
        ego_time = (entry_s - s_ego) / max(world.ego_box().speed, 6.0)
        src = self._along(entry, -max(min(speed * ego_time, 60.0), 15.0))
        exit_ = straight_through(entry)
        sink = exit_.next(10.0) if exit_ is not None else None
        if not sink:
            raise ValueError(f"no way across the junction from the {side}")
        found = world.flow_route(src, _xy(sink[0]))
        if found is None:
            raise ValueError("SUMO has no route for the adversary")
        edges, lane, pos = found
        a.flows.append(Flow(edges, lane, pos, speed, (1e6, 1e6), until=world.time + 1.0, rules=False,
                            next_time=world.time))
        log.info("scenario %s: its adversary enters the junction from the %s on SUMO edge %s",
                 a.block["name"], side, edges[0])

    def _crossing_flows(self, a: Active, name: str, flow_speed: float) -> list[tuple]:
        """Source and sink points of the junction types' flows, as their scenario_runner classes place them: from
        the lanes entering the junction ahead of the trigger point from the side the type names (oncoming for left
        turns, from the left for right turns; scenario_sites.entry_sides), `flow_speed` times 4 s (left turns) or
        5 s (right turns) up the lane in 5 m steps (not into another junction), to 2.5 s or 3 s of `flow_speed`
        past the junction going straight from there (scenario_sites.straight_through). A right turn's flow comes
        in the rightmost lane of the first entry; a left turn's class draws one entry lane at random: here each
        has a flow."""
        import carla

        left_turn = "LeftTurn" in name
        side = FLOW_SIDE[name]
        source_m, sink_m = (4.0, 2.5) if left_turn else (5.0, 3.0)
        entries = entry_sides(self._trigger_lane(a)).get(side, [])
        if not entries:
            raise ValueError(f"no lane enters the junction from the {side}")
        if not left_turn:
            entry = entries[0]
            while (right := entry.get_right_lane()) is not None and right.lane_type == carla.LaneType.Driving:
                entry = right
            entries = [entry]
        ends = []
        for wp in entries:
            back = 0.0
            while back < source_m * flow_speed:
                before = wp.previous(5.0)
                if not before or before[0].is_junction:
                    break
                wp, back = before[0], back + 5.0
            across = straight_through(wp)
            sink = across.next(sink_m * flow_speed) if across is not None else None
            if sink:
                ends.append((_xy(wp), _xy(sink[0])))
        return ends

    def _entering_flows(self, name: str, p: dict) -> list[tuple]:
        """EnterActorFlow's flows, as its class runs them: from the block's `start_actor_flow` to its
        `end_actor_flow`, one in each lane of the same direction there, paired from the left (EnterActorFlowV2:
        one, in the lanes the points are on)."""
        ends = []
        for key in ("start_actor_flow", "end_actor_flow"):
            loc = p.get(key) or {}
            try:
                x, y, z = (float(loc[k]) for k in ("x", "y", "z"))
            except (KeyError, ValueError):
                raise ValueError(f"no {key} x y z") from None
            wp = lane_at(self.map, x, y, z)
            if wp is None:
                raise ValueError(f"no driving lane at its {key} ({x:.1f}, {y:.1f})")
            ends.append(wp)
        source, sink = ends
        if name == "EnterActorFlowV2":
            return [(_xy(source), _xy(sink))]
        return [(_xy(a), _xy(b)) for a, b in zip(_same_direction(source), _same_direction(sink), strict=False)]

    # ------------------------------------------------------------------ pedestrians
    #: PedestrianCrossing's walkers as its class stands them on the sidewalk: metres forward and to the right of
    #: the sidewalk's waypoint, each turned 270 degrees from it (to walk across the road, leftwards).
    CROSSWALK = ((0.4, 1.5), (1.0, 2.5), (1.6, 0.5))

    def _crosswalk(self, a: Active, world) -> bool:
        """PedestrianCrossing as its class places it: three walkers on the sidewalk right of the trigger point's
        lane where it enters the junction ahead (scenario_sites.sidewalk_before_junction), each crossing the road
        leftwards 2.3 times its distance to the lane's last waypoint before the junction, the crossing point. False
        where the road has no sidewalk there (a generated town): the walkers then cross after the junction."""
        found = junction_ahead(self._trigger_lane(a))
        walk = sidewalk_before_junction(self._trigger_lane(a))
        if found is None or walk is None:
            return False
        collision = found[0].transform.location
        a.cross_at = self._route_s(found[0], (a.trigger_s - 5.0, a.trigger_s + 400.0))
        t = walk.transform
        fwd, right = t.get_forward_vector(), t.get_right_vector()
        yaw = t.rotation.yaw + 270.0
        heading = np.array([math.cos(math.radians(yaw)), math.sin(math.radians(yaw))])
        width = found[0].lane_width
        for k, (ahead, aside) in enumerate(self.CROSSWALK):
            start = np.array([t.location.x + ahead * fwd.x + aside * right.x,
                              t.location.y + ahead * fwd.y + aside * right.y])
            to_lane = math.hypot(start[0] - collision.x, start[1] - collision.y)
            path = np.array([start, start + heading * 2.3 * to_lane])
            speed = 1.3 + 0.1 * k
            mid = world.add_static(WALKER[3], *start, yaw, *WALKER[:3])
            a.movers.append(Mover(mid, WALKER, path, speed, yaw_still=yaw))
            if k == 0:
                a.crossing_time = (to_lane - width / 2) / speed
        a.site_s = a.cross_at
        return True

    def _pedestrian(self, a: Active, name: str, p: dict, world) -> None:
        if name == "PedestrianCrossing" and self._crosswalk(a, world):
            return
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
        if blocker is not None:  # between the ego and the walker: a prop beyond the kerb, a parked car
            bl, bw, bh, bc = blocker
            # The car a lane's width beside the ego's lane centre, as ParkingCrossingPedestrian parks it (in the
            # parking lane, or half out of the road): at the kerb where no parking lane is, it stood 0.3 m into the
            # ego's lane, an obstacle the ego stopped behind and never passed (Bench2Drive route 18252: blocked).
            lateral = out + bw / 2 + 0.1 if bc == sem.STATIC else width
            pos = np.array([x, y]) - across * lateral - fwd * (bl / 2 + 0.8)
            a.statics.append(world.add_static(bc, float(pos[0]), float(pos[1]), yaw, bl, bw, bh))
        a.crossing_time = (start_lateral - width / 2) / speed
        a.site_s = a.cross_at


def _xy(wp) -> tuple[float, float]:
    loc = wp.transform.location
    return loc.x, loc.y


def _same_direction(wp) -> list:
    """The driving lanes of a waypoint's road going its way, from the leftmost to the rightmost."""
    import carla

    lanes = [wp]
    while (right := lanes[-1].get_right_lane()) is not None and right.lane_type == carla.LaneType.Driving:
        lanes.append(right)
    while ((left := lanes[0].get_left_lane()) is not None and left.lane_type == carla.LaneType.Driving
           and left.lane_id * lanes[0].lane_id > 0):
        lanes.insert(0, left)
    return lanes


class _NoSite(Exception):
    """The scenario has no place on this route (logged, skipped)."""
