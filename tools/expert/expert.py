"""The privileged expert: a rule-based planner that drives the ego along its route from the world state.

It reads what a privileged driver may know, never the simulator behind it (nothing here imports SUMO, so
the same expert drives in the embedded world and in CARLA):
  - the ego's box and speed, other actors' boxes and speeds (tools.expert.state.Snapshot),
  - traffic-light states at their stop lines (Snapshot.lights), the lane's speed limit,
  - the dense route (tools.expert.route.DenseRoute) and the lanes of the `carla.Map` (for passing).

Each tick (`Expert.step`), in this order (the design follows PDM-Lite's, carla_garage / LEAD):
  1. progress: the ego's place on the route (monotonic);
  2. the path: the route's centreline ahead, shifted into the next lane while passing an obstacle;
  3. the free speed: the speed limit, lowered ahead of curves (lateral acceleration A_LAT);
  4. car following (IDM) behind the nearest actor in the path's corridor, and behind the stop line of a
     red light, or of a yellow one it can still stop for;
  5. a collision check: the ego's boxes along the path at the speeds of that plan against every other
     actor's box forecast HORIZON_S ahead (longer approaching a junction, which is how it yields at a
     junction without lights): at constant velocity, a vehicle with the acceleration and turn rate it
     showed over the last MOTION_BASE_S; a conflict means stop (a car behind going its way is left to
     follow, unless it is in the lane the path changes into within reach) (tools.expert.conflicts);
  6. passing: behind an obstacle that has not moved for PASS_AFTER_S, with no light or queue ahead, it
     moves over into the neighbouring lane (the same direction's, else the oncoming one) once that lane
     is free for the whole pass;
  7. the controllers (tools.expert.control) turn the path and target speed into steer, throttle, brake.
The `Decision` says why (`reason`, `detail`): it goes into every recorded frame's measurements.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tools.dataset.geometry import wrap_degrees
from tools.dataset.semantics import actor_kind
from tools.expert.conflicts import (
    FORECAST_STEP_S,
    HORIZON_S,
    JUNCTION_AHEAD_M,
    JUNCTION_HORIZON_S,
    STANDING_SPEED,
    Motion,
    first_conflict,
)
from tools.expert.control import Control, Controller
from tools.expert.lanes import lane_at, neighbours
from tools.expert.route import DenseRoute, stop_signs
from tools.expert.state import Box, Light, Snapshot

#: Plans per simulated second; the controllers run every tick on the latest plan.
PLAN_HZ = 10.0
# IDM (Treiber's intelligent driver model) parameters.
IDM_ACCEL = 2.0  # maximum acceleration, m/s^2
IDM_DECEL = 3.0  # comfortable deceleration, m/s^2
IDM_HEADWAY_S = 1.2  # desired time gap to the leader, s
IDM_MIN_GAP = 3.0  # standstill gap to a leader, m
#: Standstill gap to a leader that stands (below STANDING_SPEED), m: room to steer out past it should it be an
#: obstacle (3 m behind an 11 m bus queued at an accident, the ego clipped its corner moving out).
STANDING_GAP = 5.0
STOP_LINE_GAP = 1.0  # standstill gap to a stop sign's line, m
#: Standstill gap to a red light's stop line, m: where the camera still sees the light it waits at. A head hangs over
#: its lane 1 m before the line, 4.7 to 5.8 m high (tools.collect.sensors.scene); the rig's camera (2 m high, 1.5 m
#: behind the box centre, 100 x 62 degrees) sees all of it from 5 m before the line (its top 25 degrees up, 8 m
#: ahead), none of it from 1 m. Stopping at 1 m, the expert waited for a green that the policy could not see, and
#: the policy learnt to guess (docs/training.md "Red lights"). LEAD's expert stands off overhead lights the same way
#: (9 m from the light's box: its config_expert.idm_overhead_red_light_minimum_distance).
LIGHT_STOP_GAP = 5.0
#: The target speed is the speed the IDM acceleration reaches after this long (what the controller tracks).
PLAN_S = 0.5
A_LAT = 2.5  # lateral acceleration allowed in curves, m/s^2
PATH_AHEAD_M = 80.0  # how far ahead the expert looks along the route
PROGRESS_WINDOW_M = 20.0  # its place on the route is looked for this far beyond the last one
#: A stop sign is served once the ego stood (below STOPPED_SPEED) with its front this close to the line, metres.
STOP_SIGN_REACH_M = 3.0
STOPPED_SPEED = 0.1  # m/s, as the leaderboard's stop criterion
#: A stop line belongs to the path when this close to it (beyond half the lane width), metres.
STOP_LINE_TOLERANCE_M = 1.5
#: Passing: a leader standing this long, this close, with nothing queued before it, is an obstacle.
PASS_AFTER_S = 6.0
PASS_GAP_M = 15.0
PASS_RAMP_M = 12.0  # length of the moves out and back, metres
PASS_CLEAR_M = 8.0  # back in this far beyond the obstacle, metres
#: Standing actors in the lane less than this apart form one obstacle, passed at once (an accident's cars,
#: a row of cones), metres.
PASS_CLUSTER_M = 15.0
PASS_SPEED = 6.0  # m/s while passing through an oncoming lane
#: Room kept between the ego's side and an actor beside the pass, metres.
PASS_SIDE_GAP_M = 0.5
#: An obstacle this close to its lane's centre (metres) stands on neither side: it may be passed through the oncoming
#: lane (a car queued behind an obstacle stands on the centre, a hair to the left as often as not).
CENTRED_M = 0.3
#: Into a lane of its own direction the ego merges in front of a car this far behind it and this many seconds of
#: that car's speed (metres, seconds).
MERGE_GAP_M = 5.0
MERGE_HEADWAY_S = 2.0
#: A pass that stood this long before reaching the obstacle (traffic came) is given up: back into the lane.
PASS_ABORT_S = 5.0

#: Why the expert drives as it does (Decision.reason); "" is cruising at the free speed.
REASONS = ("", "curve", "leader", "light", "stop_sign", "collision", "junction", "passing")


class WorldView(Protocol):
    """What a driver may ask a world (the embedded one, or CARLA) each tick."""

    time: float  # simulated seconds

    def ego_box(self) -> Box: ...

    def snapshot(self) -> Snapshot: ...

    def speed_limit(self) -> float: ...


@dataclass(frozen=True)
class Decision:
    """One tick's plan, its control and why."""

    control: Control
    target_speed: float  # m/s
    reason: str  # one of REASONS: what limits the speed now
    detail: str = ""  # with what, e.g. "light 12:3 red in 14.2 m", "vehicle 7 at 9.1 m, 0.0 m/s"
    leader: dict[str, Any] | None = None  # {"id", "gap", "speed"}: the actor followed
    light: dict[str, Any] | None = None  # {"id", "distance", "state"}: the next light on the path
    path: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # the path driven, world frame


def idm(speed: float, free_speed: float, gap: float, closing: float, min_gap: float) -> float:
    """IDM acceleration behind an obstacle `gap` metres ahead approached at `closing` m/s (inf: none)."""
    accel = IDM_ACCEL * (1.0 - (speed / max(free_speed, 0.1)) ** 4)
    if math.isfinite(gap):
        wanted = min_gap + max(0.0, speed * IDM_HEADWAY_S + speed * closing / (2 * math.sqrt(IDM_ACCEL * IDM_DECEL)))
        accel -= IDM_ACCEL * (wanted / max(gap, 0.1)) ** 2
    return accel


def _boxes(boxes: list[Box]) -> np.ndarray:
    """(N, 8) rows of x, y, yaw, length, width, speed, id, class."""
    return np.array([[b.x, b.y, b.yaw, b.length, b.width, b.speed, b.id, b.cls] for b in boxes],
                    dtype=np.float64).reshape(-1, 8)


def _within_reach(path: np.ndarray, points: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """Which of the points (rows of x, y, ...) may lie within `reach` of a path point: those that close to the
    path's bounding box (a metre spare for rounding). A cheap bound that spares the others the distances to
    every path point."""
    (lo_x, lo_y), (hi_x, hi_y), r = path.min(axis=0), path.max(axis=0), reach + 1.0
    x, y = points[:, 0], points[:, 1]
    return (x > lo_x - r) & (x < hi_x + r) & (y > lo_y - r) & (y < hi_y + r)


@dataclass
class _Pass:
    """An obstacle being passed: the path shifts by `offset` metres (left positive) over [start, end]."""

    start: float  # route s where the move out starts
    end: float  # route s where the ego is back in its lane
    offset: float  # metres to the left
    obstacle: int  # the actor id (the first of the obstacle's actors)
    obstacle_s: float  # route s of the obstacle
    clear_s: float = math.inf  # route s where the obstacle's last actor ends
    others: tuple[int, ...] = ()  # the obstacle's other standing actors, passed with it
    kind: int = 0  # the obstacle's class


def stops_for(state: str, distance: float, speed: float) -> bool:
    """Whether the expert stops for a light in `state` whose stop line is `distance` metres ahead of its front at
    `speed` m/s: red, or yellow while it can still stop before the line braking at IDM_DECEL."""
    return state == "red" or (state == "yellow" and distance > speed * speed / (2 * IDM_DECEL) + 1.0)


class Expert:
    """Drives one route. `step` once per tick, with the world state of that tick."""

    def __init__(self, route: DenseRoute, dt: float, carla_map: Any = None):
        self.route = route
        self.dt = dt
        self.map = carla_map
        self.index = 0
        self.controller = Controller(dt)
        self.passing: _Pass | None = None
        self._stopped_behind: tuple[int, float] | None = None  # (actor id, since when)
        self._time = 0.0
        self._plan: Decision | None = None
        self._plan_time = 0.0
        #: Route distances of the stop signs' lines, and how many of them were served (stood at) so far.
        self.stops = stop_signs(route, carla_map) if carla_map is not None else np.zeros(0)
        self._stops_served = 0
        self._pass_stuck_since: float | None = None
        #: The actors' (time, speed, yaw) of recent plans, oldest first: their acceleration and turn rate.
        self._motion = Motion()
        # Curve speed at every route point: sqrt(A_LAT / curvature), curvature over +-3 m.
        yaw = np.unwrap(np.radians(route.yaw))
        ahead = np.minimum(np.arange(len(yaw)) + 3, len(yaw) - 1)
        behind = np.maximum(np.arange(len(yaw)) - 3, 0)
        ds = np.maximum(route.s[ahead] - route.s[behind], 1e-3)
        dyaw = np.abs(yaw[ahead] - yaw[behind])
        self.curve_speed = np.sqrt(A_LAT / np.maximum(dyaw / ds, 1e-4))

    # ------------------------------------------------------------------ the tick
    def step(self, world: WorldView) -> Decision:
        """The decision of this tick: a new plan every 1 / PLAN_HZ seconds (from the world's snapshot), the
        control every tick (from the ego's box)."""
        if self._plan is None or world.time - self._plan_time >= 1.0 / PLAN_HZ - 1e-6:
            self._plan, self._plan_time = self._decide(world.snapshot(), world.speed_limit()), world.time
        ego = world.ego_box()
        control = self.controller(ego.x, ego.y, ego.yaw, max(ego.speed, 0.0), self._plan.path,
                                  self._plan.target_speed)
        return dataclasses.replace(self._plan, control=control)

    def _decide(self, snap: Snapshot, speed_limit: float) -> Decision:
        ego = snap.ego
        v = max(ego.speed, 0.0)
        self._time = snap.time
        self.index, _ = self.route.advance(self.index, ego.x, ego.y, PROGRESS_WINDOW_M)
        path, path_s, path_yaw = self._path()
        s_ego = float(self.route.s[self.index])
        rel = path_s - s_ego  # distance of each path point ahead of the ego's centre

        # Free speed: the limit, and what every curve ahead allows when braking at IDM_DECEL towards it.
        lo = self.index
        curve = self.curve_speed[lo : lo + len(path)]
        reachable = np.sqrt(curve**2 + 2 * IDM_DECEL * np.maximum(rel - ego.length / 2, 0.0))
        free = min(speed_limit, float(reachable.min())) if len(reachable) else speed_limit
        reason, detail = ("curve", f"curve ahead allows {free:.1f} m/s") if free < speed_limit - 0.5 else ("", "")
        if self.passing is not None:
            free = min(free, PASS_SPEED)

        actors = _boxes(snap.actors)
        near = actors[np.hypot(actors[:, 0] - ego.x, actors[:, 1] - ego.y) < PATH_AHEAD_M + 10.0]
        motion = self._motion(self._time, near)
        if self.passing is not None:  # the obstacle being passed is no leader: the path leads around it
            others = ~np.isin(near[:, 6], (self.passing.obstacle, *self.passing.others))
            near, motion = near[others], motion[others]
        accel, leader = self._follow(ego, v, free, near, path, path_s, path_yaw, s_ego)
        if leader is not None and leader["accel"] < idm(v, free, math.inf, 0.0, IDM_MIN_GAP) - 0.05:
            reason, detail = "leader", (f"{actor_kind(leader['cls'])} {leader['id']} at {leader['gap']:.1f} m, "
                                        f"{leader['speed']:.1f} m/s")
        light, stop_gap = self._light(ego, v, snap.lights, path, path_s, path_yaw, s_ego)
        if stop_gap is not None:
            a_light = idm(v, free, stop_gap, v, LIGHT_STOP_GAP)
            if a_light < accel:
                accel = a_light
                reason, detail = "light", f"light {light['id']} {light['state']} in {light['distance']:.1f} m"
        stop_gap = self._stop_sign(ego, v, s_ego)
        if stop_gap is not None:
            a_stop = idm(v, free, stop_gap, v, STOP_LINE_GAP)
            if a_stop < accel:
                accel, reason, detail = a_stop, "stop_sign", f"stop sign in {stop_gap:.1f} m"
        target = max(0.0, min(free, v + accel * PLAN_S))

        # The collision check of the plan against constant-velocity forecasts.
        junction_ahead = bool(self.route.junction[lo : lo + int(JUNCTION_AHEAD_M)].any())
        horizon = JUNCTION_HORIZON_S if junction_ahead else HORIZON_S
        options = self.route.option[self.index : self.index + len(path)]
        conflict = first_conflict(ego, v, max(target, min(free, v + IDM_ACCEL * 1.0)), near, path, path_s, path_yaw,
                                  options, s_ego, horizon, leader["id"] if leader else None, accel=IDM_ACCEL,
                                  decel=IDM_DECEL, motion=motion)
        if conflict is not None:
            other, cls, when = conflict
            target = 0.0
            reason = "junction" if junction_ahead else "collision"
            detail = f"{actor_kind(cls)} {other} would meet the ego in {when:.1f} s"
            p = self.passing
            if p is not None and s_ego - ego.length / 2 > p.clear_s + 1.0:
                # Past the obstacle, and traffic in the way of the ramp back (oncoming cars that stopped for the
                # ego): back into the lane at once, on half a ramp.
                p.end = min(p.end, s_ego + PASS_RAMP_M / 2)

        self._maybe_pass(ego, v, leader, light, near, actors, s_ego)
        if self.passing is not None:
            if v > STOPPED_SPEED or s_ego > self.passing.obstacle_s:
                self._pass_stuck_since = None
            elif self._pass_stuck_since is None:
                self._pass_stuck_since = self._time
            elif self._time - self._pass_stuck_since > PASS_ABORT_S:  # oncoming traffic: back into the lane
                self.passing, self._pass_stuck_since = None, None
            if self.passing is not None and reason == "":
                reason, detail = "passing", f"passing {actor_kind(self.passing.kind)} {self.passing.obstacle}"
        lead = None if leader is None else {k: leader[k] for k in ("id", "gap", "speed")}
        return Decision(control=Control(), target_speed=target, reason=reason, detail=detail, leader=lead,
                        light=light, path=path)

    # ------------------------------------------------------------------ the parts

    def _path(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Route points ahead (xy, s, yaw in degrees), shifted while passing."""
        r = self.route
        hi = int(np.searchsorted(r.s, r.s[self.index] + PATH_AHEAD_M)) + 1
        xy, s, yaw = r.xy[self.index : hi].copy(), r.s[self.index : hi], r.yaw[self.index : hi]
        if self.passing is not None:
            p = self.passing
            if s[0] > p.end:
                self.passing = None
            else:
                ramp_out = np.clip((s - p.start) / PASS_RAMP_M, 0.0, 1.0)
                ramp_in = np.clip((p.end - s) / PASS_RAMP_M, 0.0, 1.0)
                shift = p.offset * np.minimum(ramp_out, ramp_in)
                rad = np.radians(yaw)
                xy[:, 0] += shift * np.sin(rad)  # left of the heading (CARLA's y points right)
                xy[:, 1] -= shift * np.cos(rad)
        return xy, s, yaw

    @staticmethod
    def _on_path(actors: np.ndarray, path: np.ndarray, path_yaw: np.ndarray) -> tuple[np.ndarray, ...]:
        """For each actor: its nearest path point, its lateral distance to it, its heading relative to it, and its
        half extents along and across the path there."""
        d = np.hypot(actors[:, None, 0] - path[None, :, 0], actors[:, None, 1] - path[None, :, 1])
        k = d.argmin(axis=1)
        lateral = d[np.arange(len(actors)), k]
        rel_yaw = np.radians(wrap_degrees(actors[:, 2] - path_yaw[k]))
        cos, sin = np.abs(np.cos(rel_yaw)), np.abs(np.sin(rel_yaw))
        half_along = cos * actors[:, 3] / 2 + sin * actors[:, 4] / 2
        half_across = sin * actors[:, 3] / 2 + cos * actors[:, 4] / 2
        return k, lateral, rel_yaw, half_along, half_across

    def _follow(self, ego: Box, v: float, free: float, near: np.ndarray, path: np.ndarray, path_s: np.ndarray,
                path_yaw: np.ndarray, s_ego: float) -> tuple[float, dict | None]:
        """IDM acceleration behind the nearest actor in the path's corridor (and that actor)."""
        accel = idm(v, free, math.inf, 0.0, IDM_MIN_GAP)
        if len(near) == 0 or len(path) < 2:
            return accel, None
        k, lateral, rel_yaw, half_along, half_across = self._on_path(near, path, path_yaw)
        gap = path_s[k] - s_ego - ego.length / 2 - half_along
        inside = (lateral < ego.width / 2 + half_across + 0.2) & (path_s[k] > s_ego) & (k < len(path) - 1)
        if not inside.any():
            return accel, None
        i = int(np.flatnonzero(inside)[np.argmin(gap[inside])])
        speed = max(float(near[i, 5] * math.cos(rel_yaw[i])), 0.0)
        a = idm(v, free, float(gap[i]), v - speed, STANDING_GAP if speed < STANDING_SPEED else IDM_MIN_GAP)
        return min(accel, a), {"id": int(near[i, 6]), "gap": round(float(gap[i]), 3), "speed": round(speed, 3),
                               "accel": a, "s": float(path_s[k[i]]), "cls": int(near[i, 7])}

    def _light(self, ego: Box, v: float, lights: list[Light], path: np.ndarray, path_s: np.ndarray,
               path_yaw: np.ndarray, s_ego: float) -> tuple[dict | None, float | None]:
        """The next light on the path ({"id", "distance", "state"}) and the gap to stop at, if it must."""
        if not lights or len(path) < 2:
            return None, None
        pos = np.array([[lt.x, lt.y, lt.yaw, lt.width] for lt in lights])
        reach = pos[:, 3] / 2 + STOP_LINE_TOLERANCE_M  # a light's stop line this close to the path is on it
        nearby = _within_reach(path, pos, reach)
        if not nearby.any():
            return None, None
        lights, pos, reach = [lights[i] for i in np.flatnonzero(nearby)], pos[nearby], reach[nearby]
        d = np.hypot(pos[:, None, 0] - path[None, :, 0], pos[:, None, 1] - path[None, :, 1])
        k = d.argmin(axis=1)
        aligned = np.abs(wrap_degrees(pos[:, 2] - path_yaw[k])) < 45.0
        ahead = path_s[k] - s_ego - ego.length / 2  # front bumper to stop line
        on = (d[np.arange(len(lights)), k] < reach) & aligned & (ahead > -0.5)
        if not on.any():
            return None, None
        first = int(np.flatnonzero(on)[np.argmin(ahead[on])])
        same_line = [i for i in np.flatnonzero(on) if abs(ahead[i] - ahead[first]) < 0.5
                     and math.hypot(pos[i, 0] - pos[first, 0], pos[i, 1] - pos[first, 1]) < 0.5]
        chosen = self._link(lights, same_line, path, path_s, float(path_s[k[first]]))
        state = lights[chosen].state
        distance = float(ahead[first])
        light = {"id": lights[chosen].id, "distance": round(distance, 3), "state": state}
        return light, (max(distance, 0.0) if stops_for(state, distance, v) else None)

    def _stop_sign(self, ego: Box, v: float, s_ego: float) -> float | None:
        """The gap to the next stop sign's line while it is still to be stood at (None: none ahead)."""
        while self._stops_served < len(self.stops):
            gap = float(self.stops[self._stops_served]) - s_ego - ego.length / 2
            if gap < -1.0 or (v < STOPPED_SPEED and gap < STOP_SIGN_REACH_M):
                self._stops_served += 1  # stood at it (or already past): on to the next
                continue
            return max(gap, 0.0) if gap < PATH_AHEAD_M else None
        return None

    @staticmethod
    def _link(lights: list[Light], same_line: list[int], path: np.ndarray, path_s: np.ndarray, s_line: float) -> int:
        """Of the links leaving one stop line, the one the path takes: its `via` point nearest the path
        beyond the line (a world that signals every link of a lane alike gives no via: the first)."""
        if len(same_line) == 1:
            return same_line[0]
        beyond = path[(path_s > s_line) & (path_s < s_line + 30.0)]
        best, best_d = same_line[0], math.inf
        for i in same_line:
            via = lights[i].via
            if via is None or len(beyond) == 0:
                continue
            dist = float(np.hypot(beyond[:, 0] - via[0], beyond[:, 1] - via[1]).min())
            if dist < best_d:
                best, best_d = i, dist
        return best

    def _maybe_pass(self, ego: Box, v: float, leader: dict | None, light: dict | None, near: np.ndarray,
                    actors: np.ndarray, s_ego: float) -> None:
        """Start passing a leader that stands still in the way (an obstacle) once the next lane is free: of
        every actor the world shows (`actors`; oncoming traffic far beyond the path's reach comes meanwhile)."""
        if self.passing is not None or leader is None or self.map is None:
            self._stopped_behind = None if leader is None else self._stopped_behind
            return
        if leader["speed"] > 0.3 or leader["gap"] > PASS_GAP_M or v > 0.5:
            self._stopped_behind = None
            return
        t = self._time
        if self._stopped_behind is None or self._stopped_behind[0] != leader["id"]:
            self._stopped_behind = (leader["id"], t)
            return
        if t - self._stopped_behind[1] < PASS_AFTER_S:
            return
        if light is not None and light["state"] in ("red", "yellow") and light["distance"] < leader["gap"] + 30.0:
            return  # a queue at a light, not an obstacle
        s_obst = leader["s"]
        obstacle = near[near[:, 6] == leader["id"]]
        if len(obstacle) == 0:
            return
        others, last = self._cluster(leader, near)
        lo, hi = s_obst - PASS_RAMP_M - 5.0, last + PASS_CLEAR_M + PASS_RAMP_M
        r = self.route
        span = (r.s >= lo) & (r.s <= hi)
        if r.junction[(r.s > s_ego + ego.length / 2) & (r.s <= hi)].any():
            return  # never pass inside a junction (the one the ego stands at the exit of is behind its front)
        found = self._neighbour_offset(float(obstacle[0, 0]), float(obstacle[0, 1]))
        if found is None:
            return
        offset, offset_oncoming = found
        # The neighbouring lane must be empty over the pass and for the oncoming traffic's approach.
        rad = np.radians(r.yaw[span])
        shifted = r.xy[span] + offset * np.stack([np.sin(rad), -np.cos(rad)], axis=-1)
        traffic = actors[~np.isin(actors[:, 6], (leader["id"], *others))]
        duration = (hi - s_ego) / PASS_SPEED
        # An actor keeps off the pass when its centre stays this far from the shifted path: the ego's and its own
        # half widths and PASS_SIDE_GAP_M (a car centred in the ego's own lane, 3 m beside a pass on Town15's 3 m
        # lanes, is no obstacle to it).
        clear = ego.width / 2 + traffic[:, 4] / 2 + PASS_SIDE_GAP_M
        if len(traffic):  # first those that could get there at all: as far as they drive meanwhile
            near_path = np.hypot(traffic[:, None, 0] - shifted[None, :, 0], traffic[:, None, 1] - shifted[None, :, 1])
            keep = near_path.min(axis=1) < traffic[:, 5] * duration + clear
            traffic, clear = traffic[keep], clear[keep]
        if len(traffic):  # who drives its way ahead of it, or far enough behind, may stay
            keep = ~self._merges_behind_or_follows(ego, traffic, s_ego)
            traffic, clear = traffic[keep], clear[keep]
        if len(traffic) and offset_oncoming:
            # Through the oncoming lane, its traffic enters the pass at the far end: a vehicle that can get there
            # during the pass and drives towards it waits the pass out, whatever its heading now (one turning into
            # the lane at the junction beyond drives across it at first: Town10HD's construction sites, blocked).
            end = shifted[-1]
            to_end = end[None, :] - traffic[:, :2]
            rad = np.radians(traffic[:, 2])
            towards = to_end[:, 0] * np.cos(rad) + to_end[:, 1] * np.sin(rad) > 0.0
            reach = np.hypot(to_end[:, 0], to_end[:, 1]) < traffic[:, 5] * duration + PASS_CLEAR_M
            if (towards & reach & (traffic[:, 5] > STANDING_SPEED)).any():
                return
        if len(traffic):
            # Each actor's constant-velocity forecast over the pass (driven at PASS_SPEED) keeps `clear` from it.
            times = np.arange(0.0, duration + 1e-6, FORECAST_STEP_S)
            rad = np.radians(traffic[:, 2])
            fx = traffic[:, None, 0] + (np.cos(rad) * traffic[:, 5])[:, None] * times[None, :]
            fy = traffic[:, None, 1] + (np.sin(rad) * traffic[:, 5])[:, None] * times[None, :]
            d = np.hypot(fx[:, :, None] - shifted[None, None, :, 0], fy[:, :, None] - shifted[None, None, :, 1])
            if (d.min(axis=(1, 2)) < clear).any():
                return
        # The move out starts a little behind the ego: it stands close behind the obstacle, and steers out at once.
        self.passing = _Pass(start=s_ego - PASS_RAMP_M / 3, end=hi, offset=offset, obstacle=leader["id"],
                             obstacle_s=s_obst, clear_s=last, others=others, kind=leader["cls"])

    def _merges_behind_or_follows(self, ego: Box, traffic: np.ndarray, s_ego: float) -> np.ndarray:
        """Which of the actors need not keep off the pass: those driving the ego's way (a lane of its direction)
        ahead of it, whom it follows on the shifted path, and those behind it with MERGE_GAP_M plus MERGE_HEADWAY_S
        of their speed to spare (the ego merges in front of them). Slow traffic beside an obstacle, SUMO's cars
        squeezing past it in the next lane, never left the whole pass free (Town13 Accident: blocked)."""
        r = self.route
        k = np.hypot(traffic[:, None, 0] - r.xy[None, :, 0], traffic[:, None, 1] - r.xy[None, :, 1]).argmin(axis=1)
        same_way = (np.abs(wrap_degrees(traffic[:, 2] - r.yaw[k])) < 45.0) & (traffic[:, 5] > STANDING_SPEED)
        half = traffic[:, 3] / 2
        ahead = r.s[k] - half > s_ego + ego.length / 2
        room_behind = (s_ego - ego.length / 2) - (r.s[k] + half)
        behind = room_behind > MERGE_GAP_M + MERGE_HEADWAY_S * traffic[:, 5]
        return same_way & (ahead | behind)

    def _cluster(self, leader: dict, near: np.ndarray) -> tuple[tuple[int, ...], float]:
        """The standing actors in the route's lane that follow the obstacle with gaps under PASS_CLUSTER_M (their
        ids), and the route s where the last of them ends."""
        path, path_s, path_yaw = self._path()
        standing = near[(near[:, 5] < STANDING_SPEED) & (near[:, 6] != leader["id"])]
        obstacle = near[near[:, 6] == leader["id"]][0]
        end = leader["s"] + obstacle[3] / 2
        if len(standing) == 0 or len(path) < 2:
            return (), end
        k, lateral, _, half_along, half_across = self._on_path(standing, path, path_yaw)
        inside = lateral < 1.2 + half_across  # reaching into the ego's half-lane width of 1.2 m
        # Not one that would keep the ego out of its lane into the next junction (a queue at its light).
        ahead = self.route.junction_after(leader["s"])
        limit = float(self.route.s[ahead[0]]) - PASS_CLEAR_M - PASS_RAMP_M if ahead else math.inf
        ids: list[int] = []
        for i in np.argsort(path_s[k]):
            if not inside[i] or path_s[k[i]] - half_along[i] < leader["s"]:
                continue
            if path_s[k[i]] - half_along[i] - end > PASS_CLUSTER_M or path_s[k[i]] + half_along[i] > limit:
                break
            ids.append(int(standing[i, 6]))
            end = max(end, float(path_s[k[i]] + half_along[i]))
        return tuple(ids), end

    def _neighbour_offset(self, x: float, y: float) -> tuple[float, bool] | None:
        """Metres to the left (negative: right) of the obstacle's lane centre of the lane to pass in, and whether
        it is the oncoming lane: a lane of the same direction on the side away from the obstacle (it stands left or
        right of its lane's centre), else the oncoming lane on the left, else a same-direction lane on the
        obstacle's side; None when there is none."""
        wp = lane_at(self.map, x, y)
        if wp is None:
            return None
        lanes = neighbours(wp)
        centre, rad = wp.transform.location, math.radians(wp.transform.rotation.yaw)
        obstacle_left = (x - centre.x) * math.sin(rad) - (y - centre.y) * math.cos(rad) > CENTRED_M
        away, near = ((lanes.right, -1.0), (lanes.left, 1.0)) if obstacle_left else ((lanes.left, 1.0),
                                                                                     (lanes.right, -1.0))
        oncoming = (None if obstacle_left else lanes.oncoming, 1.0)  # through the oncoming lane
        lane, sign = next(((lane, sign) for lane, sign in (away, oncoming, near) if lane is not None), (None, 0.0))
        if lane is None:
            return None
        a, b = wp.transform.location, lane.transform.location
        return sign * math.hypot(b.x - a.x, b.y - a.y), lane is oncoming[0]
