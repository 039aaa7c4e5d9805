"""The expert's collision check: its planned boxes along the path against every other actor's forecast.

An actor's box is forecast at constant velocity or, for a vehicle, with the acceleration and turn rate it showed
over the last MOTION_BASE_S (`Motion`, `forecast`); `first_conflict` finds the first time one overlaps the ego's box
(grown by FRONT_MARGIN_M and SIDE_MARGIN_M) along the path at the speeds of a plan. tools.expert.expert stops
for a conflict (its step 5).
"""

from __future__ import annotations

import math

import numpy as np

from tools.dataset.geometry import OrientedBoxes, boxes_overlap, oriented_overlap, wrap_degrees
from tools.dataset.measurements import RoadOption
from tools.dataset.semantics import VEHICLES
from tools.expert.state import Box

#: Collision check: forecast horizon and step; longer within JUNCTION_AHEAD_M of a junction.
HORIZON_S = 3.0
JUNCTION_HORIZON_S = 4.5
FORECAST_STEP_S = 0.5
JUNCTION_AHEAD_M = 20.0
#: Below this speed an actor stands (m/s): the collision check spares it the ego's margins.
STANDING_SPEED = 0.3
#: A vehicle's forecast keeps the acceleration and turn rate it showed over the last MOTION_BASE_S (a car pulling
#: away from the edge of a junction turns and speeds up into the ego's lane: a constant-velocity forecast sees it a
#: second late), within these bounds: speeding up only (m/s^2), up to MOTION_MAX_SPEED m/s, turning at most
#: MOTION_MAX_TURN deg/s and MOTION_MAX_HEADING degrees in all, the turn only above MOTION_TURN_SPEED m/s.
MOTION_BASE_S = 0.3
MOTION_MAX_ACCEL = 3.0
MOTION_MAX_SPEED = 14.0
MOTION_MAX_TURN = 40.0
MOTION_MAX_HEADING = 90.0
MOTION_TURN_SPEED = 1.0
#: Margins added to the ego's box in the collision check (ahead, to each side), metres.
FRONT_MARGIN_M = 1.5
SIDE_MARGIN_M = 0.3
#: A car behind the ego whose centre is this far to its side or more is in another lane (half a lane's width).
OWN_LANE_M = 1.5
#: The route's lane changes (the option of the sample where the new lane is reached).
LANE_CHANGES = (int(RoadOption.CHANGELANELEFT), int(RoadOption.CHANGELANERIGHT))


class Motion:
    """The actors' speeds and headings of the recent plans, oldest first: their acceleration and turn rate."""

    def __init__(self) -> None:
        self._seen: list[tuple[float, dict[int, tuple[float, float]]]] = []

    def __call__(self, t: float, near: np.ndarray) -> np.ndarray:
        """(N, 2) acceleration (m/s^2, speeding up only) and turn rate (deg/s) of each actor in `near`, within the
        MOTION_* bounds, from its speed and heading at least MOTION_BASE_S ago (zeros for one not seen then, and
        for all but vehicles: walkers and props move as the world sets them, in steps). Remembers this plan's
        (at simulated second `t`)."""
        self._seen.append((t, {int(a[6]): (float(a[5]), float(a[2])) for a in near}))
        while len(self._seen) > 1 and t - self._seen[1][0] >= MOTION_BASE_S - 1e-6:
            self._seen.pop(0)
        out = np.zeros((len(near), 2))
        t0, before = self._seen[0]
        if t - t0 < MOTION_BASE_S - 1e-6:
            return out
        for i, a in enumerate(near):
            seen = before.get(int(a[6]))
            if seen is None or int(a[7]) not in VEHICLES:
                continue
            out[i, 0] = min(max((a[5] - seen[0]) / (t - t0), 0.0), MOTION_MAX_ACCEL)
            if a[5] > MOTION_TURN_SPEED:
                out[i, 1] = float(np.clip(wrap_degrees(a[2] - seen[1]) / (t - t0), -MOTION_MAX_TURN, MOTION_MAX_TURN))
        return out


def forecast(actors: np.ndarray, motion: np.ndarray | None, times: np.ndarray) -> OrientedBoxes:
    """The actors' boxes at `times` (T,): at constant velocity, or speeding up and turning as `motion` says
    (integrated in steps of FORECAST_STEP_S / 5)."""
    ar = np.radians(actors[:, 2])
    a_cos, a_sin = np.cos(ar), np.sin(ar)
    half = (actors[:, 3] / 2, actors[:, 4] / 2)
    if motion is None or not motion.any():
        return OrientedBoxes(actors[:, 0] + a_cos * actors[:, 5] * times[:, None],
                             actors[:, 1] + a_sin * actors[:, 5] * times[:, None], a_cos, a_sin, *half)
    dt = FORECAST_STEP_S / 5
    fine = np.arange(1, int(round(times[-1] / dt)) + 1) * dt  # (F,)
    speed = np.minimum(actors[:, 5] + motion[:, 0] * fine[:, None], np.maximum(actors[:, 5], MOTION_MAX_SPEED))
    turn = np.clip(motion[:, 1] * fine[:, None], -MOTION_MAX_HEADING, MOTION_MAX_HEADING)
    heading = ar + np.radians(turn)  # (F, A)
    x = actors[:, 0] + np.cumsum(speed * np.cos(heading) * dt, axis=0)
    y = actors[:, 1] + np.cumsum(speed * np.sin(heading) * dt, axis=0)
    k = np.rint(times / dt).astype(int) - 1
    return OrientedBoxes(x[k], y[k], np.cos(heading[k]), np.sin(heading[k]), *half)


def first_conflict(ego: Box, v: float, v_plan: float, near: np.ndarray, path: np.ndarray, path_s: np.ndarray,
                   path_yaw: np.ndarray, options: np.ndarray, s_ego: float, horizon: float, skip: int | None, *,
                   accel: float, decel: float, motion: np.ndarray | None = None) -> tuple[int, int, float] | None:
    """(actor id, class, seconds) of the first predicted overlap of the ego's planned boxes with an actor's
    forecast (`forecast`, with `motion`: Motion's of `near`); None when the plan is free. The ego drives along
    `path` (its route options `options` from the ego on), speeding up at `accel` or braking at `decel` from `v`
    towards `v_plan`; `skip`: the leader's id (car following handles it)."""
    if len(near) == 0 or len(path) < 2:
        return None
    # Not the leader (car following handles it), not what the ego overlaps already (a collision in
    # progress is the world's to judge), not a car behind following the ego: one behind in its own lane, or
    # in any lane while the path within reach changes none. Where the route changes lanes (before a turn) a
    # car behind in the other lane comes up beside the ego as it moves over, and is in its way.
    c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
    dx, dy = near[:, 0] - ego.x, near[:, 1] - ego.y
    ego_x, ego_y = dx * c + dy * s, dy * c - dx * s
    same_way = np.abs(wrap_degrees(near[:, 2] - ego.yaw)) < 45.0
    within = path_s[: len(options)] <= s_ego + v_plan * horizon + ego.length
    changes_lane = bool(np.isin(options[within], LANE_CHANGES).any())
    follows = (ego_x < -ego.length / 2) & same_way & ((np.abs(ego_y) < OWN_LANE_M) | (not changes_lane))
    keep = ~follows & (near[:, 6] != (skip if skip is not None else -1))
    # Only what can reach the ego's path within the horizon (a distance bound), and not overlapping now.
    faster = motion[:, 0] * horizon / 2 if motion is not None else 0.0  # a speeding-up actor's extra reach
    keep &= np.hypot(dx, dy) < (near[:, 5] + faster + v_plan) * horizon + ego.length + 10
    if not keep.any():
        return None
    keep[keep] = ~boxes_overlap(np.array([ego.x, ego.y, ego.yaw, ego.length, ego.width]), near[keep, :5])
    actors = near[keep]
    motion = motion[keep] if motion is not None else None
    if len(actors) == 0:
        return None
    times = np.arange(FORECAST_STEP_S, horizon + 1e-6, FORECAST_STEP_S)
    # The ego's distance along the path at each time, accelerating (or braking) towards v_plan.
    rate = accel if v_plan >= v else -decel
    t_reach = abs(v_plan - v) / abs(rate)
    t1 = np.minimum(times, t_reach)
    dist = v * t1 + 0.5 * rate * t1**2 + v_plan * (times - t1)
    s_at = s_ego + dist
    xs = np.interp(s_at, path_s, path[:, 0])[:, None]  # (times, 1): against every actor
    ys = np.interp(s_at, path_s, path[:, 1])[:, None]
    # The headings unwrapped where the path crosses +-180 degrees (elsewhere np.unwrap would change nothing but
    # the sign of a zero, which no overlap below depends on).
    heading = np.radians(path_yaw)
    if not (np.abs(heading[1:] - heading[:-1]) < np.pi).all():
        heading = np.unwrap(heading)
    yaws = np.degrees(np.interp(s_at, path_s, heading))
    rad = np.radians(yaws)[:, None]
    cos, sin = np.cos(rad), np.sin(rad)
    # The box ahead of the centre grows by FRONT_MARGIN_M: shift the centre by half of it.
    ego_boxes = OrientedBoxes(xs + cos * FRONT_MARGIN_M / 2, ys + sin * FRONT_MARGIN_M / 2, cos, sin,
                              (ego.length + FRONT_MARGIN_M) / 2, (ego.width + 2 * SIDE_MARGIN_M) / 2)
    boxes = forecast(actors, motion, times)
    hit = oriented_overlap(ego_boxes, boxes)  # (times, actors)
    # A standing actor conflicts only where the ego's own box (no margins) would touch it: one waiting at
    # the edge of a junction, its nose near the ego's path, yields to the ego, and the ego must go past it.
    standing = actors[:, 5] < STANDING_SPEED
    if standing.any() and hit[:, standing].any():
        plain = OrientedBoxes(xs, ys, cos, sin, ego.length / 2, ego.width / 2)
        hit[:, standing] = oriented_overlap(plain, OrientedBoxes(*(np.broadcast_to(f, hit.shape)[:, standing]
                                                                  for f in boxes)))
    if not hit.any():
        return None
    t, a = np.argwhere(hit)[0]
    return int(actors[a, 6]), int(actors[a, 7]), float(times[t])
