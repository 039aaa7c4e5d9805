"""The route a driver drives: `DenseRoute` (sampled every metre, with commands and junctions), its target points,
the commands through junctions (`turn_option`), a route given point by point (`given_route`: the CARLA
leaderboard's own plan), and the stop signs along it (`stop_signs`). tools.expert.planner makes a DenseRoute from a
route file's waypoints.

Commands use the values of CARLA's agents.navigation RoadOption, as the leaderboard does
(tools.dataset.measurements.RoadOption, the frame contract's numbering).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tools.core.errors import ToolError
from tools.dataset.measurements import RoadOption
from tools.expert.lanes import lane_at

#: Heading change through a junction (degrees) above which it is a turn, not straight on.
TURN_DEGREES = 30.0
#: Distance between target points on straight road, metres (as the leaderboard's downsampling).
TARGET_SPACING = 50.0
#: OpenDRIVE signal type of a stop sign (carla.Map landmark type).
STOP_SIGN = "206"


def _yaw_delta(a: float, b: float) -> float:
    return (b - a + 180.0) % 360.0 - 180.0


def turn_option(entry_yaw: float, exit_yaw: float) -> RoadOption:
    """LEFT, RIGHT or STRAIGHT through a junction. CARLA's yaw grows clockwise seen from above."""
    d = _yaw_delta(entry_yaw, exit_yaw)
    if d > TURN_DEGREES:
        return RoadOption.RIGHT
    if d < -TURN_DEGREES:
        return RoadOption.LEFT
    return RoadOption.STRAIGHT


@dataclass
class DenseRoute:
    """A route sampled every `spacing` metres, in CARLA's frame."""

    xy: np.ndarray  # (M, 2)
    yaw: np.ndarray  # (M,) degrees
    option: np.ndarray  # (M,) RoadOption of each point
    s: np.ndarray  # (M,) distance from the start, metres
    junction: np.ndarray  # (M,) bool, inside a junction

    @property
    def length(self) -> float:
        return float(self.s[-1])

    def advance(self, index: int, x: float, y: float, window: float) -> tuple[int, float]:
        """Progress along the route, never backwards: the nearest point to (x, y) among those from `index`
        to `window` metres beyond it, and the distance to it."""
        hi = int(np.searchsorted(self.s, self.s[index] + window)) + 1
        d = np.hypot(self.xy[index:hi, 0] - x, self.xy[index:hi, 1] - y)
        k = int(d.argmin())
        return index + k, float(d[k])

    def junction_after(self, s: float) -> tuple[int, int] | None:
        """(first, last) index of the first junction the route enters beyond distance s; None: no more."""
        inside = np.flatnonzero(self.junction & (self.s > s))
        if not len(inside):
            return None
        first = last = int(inside[0])
        while last + 1 < len(self.s) and self.junction[last + 1]:
            last += 1
        return first, last

    def target_indices(self) -> np.ndarray:
        """Indices of the coarse route (target points): the first point of every change of command,
        the last point before it, and one point at least every TARGET_SPACING metres."""
        keep = [0]
        for i in range(1, len(self.option)):
            if self.option[i] != self.option[i - 1]:
                if keep[-1] != i - 1:
                    keep.append(i - 1)
                keep.append(i)
            elif self.s[i] - self.s[keep[-1]] >= TARGET_SPACING:
                keep.append(i)
        if keep[-1] != len(self.option) - 1:
            keep.append(len(self.option) - 1)
        return np.array(keep, dtype=np.int64)

    def to_dict(self) -> dict:
        return {
            "xy": np.round(self.xy, 3).tolist(),
            "yaw": np.round(self.yaw, 3).tolist(),
            "option": self.option.astype(int).tolist(),
            "junction": self.junction.astype(bool).tolist(),
        }


class NoRoute(ToolError, ValueError):
    """Route waypoints the lane graph cannot join, or joins only by a detour; the message names them."""


def given_route(xy: np.ndarray, yaw: np.ndarray, option: np.ndarray, cmap) -> DenseRoute:
    """The DenseRoute of a route given point by point, driven as given: the CARLA leaderboard's own plan (the
    samples, about 1 m apart, and RoadOptions of its GlobalRoutePlanner, which set_global_plan hands the agent),
    so that the route the expert drives is the one the leaderboard measures completion and deviation on, at
    every fork. A point that lies behind the last one kept (along its heading) is left out: where one of
    GlobalRoutePlanner's paths ends past its waypoint, the next starts a sample or two back. Whether a point
    is in a junction is asked of `cmap` (carla.Map), as the planner's own samples know it."""
    import carla

    xy, yaw, option = np.asarray(xy, dtype=np.float64), np.asarray(yaw, dtype=np.float64), np.asarray(option)
    if xy.ndim != 2 or len(xy) < 2 or len(yaw) != len(xy) or len(option) != len(xy):
        raise NoRoute(f"a given route needs at least 2 points, each with a yaw and a command (got {len(xy)})")
    items: list[tuple[float, float, float, int, bool]] = []
    for (x, y), w_yaw, o in zip(xy.tolist(), yaw.tolist(), option.tolist(), strict=True):
        if items:
            px, py, p_yaw = items[-1][:3]
            h = math.radians(p_yaw)
            if (x - px) * math.cos(h) + (y - py) * math.sin(h) <= 0.0:
                continue
        wp = cmap.get_waypoint(carla.Location(x, y, 0.0), project_to_road=True, lane_type=carla.LaneType.Driving)
        items.append((x, y, w_yaw, int(o), bool(wp is not None and wp.is_junction)))
    return densify(items)


def stop_signs(route: DenseRoute, cmap) -> np.ndarray:
    """Distances from the route's start (metres) of the stop lines of the stop signs along the route: the
    stop positions carla.Map gives for the stop-sign landmarks ahead of the route's lanes, kept where they
    lie on the route. The expert stops there; the referee judges that it did."""
    found: dict[tuple[int, int, int], float] = {}
    for i in range(0, len(route.s), 5):
        wp = lane_at(cmap, *route.xy[i])
        for mark in wp.get_landmarks_of_type(10.0, STOP_SIGN, False) if wp is not None else []:
            at = mark.waypoint
            key = (mark.id, at.road_id, at.lane_id) if at is not None else None
            if key is None or key in found:
                continue
            d = np.hypot(route.xy[:, 0] - at.transform.location.x, route.xy[:, 1] - at.transform.location.y)
            k = int(d.argmin())
            if d[k] < 2.0:
                found[key] = float(route.s[k])
    return np.array(sorted(set(found.values())), dtype=np.float64)


def densify(items) -> DenseRoute:
    """The DenseRoute of samples (x, y, yaw, option, junction), the joints of two segments (samples less than
    5 cm apart) left out."""
    xy, yaw, opt, junction = [], [], [], []
    for x, y, w_yaw, o, j in items:
        if xy and math.hypot(x - xy[-1][0], y - xy[-1][1]) < 0.05:
            continue  # the joint of two segments
        xy.append((x, y))
        yaw.append(w_yaw)
        opt.append(o)
        junction.append(j)
    xy_a = np.array(xy, dtype=np.float64)
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy_a, axis=0), axis=1))])
    return DenseRoute(xy=xy_a, yaw=np.array(yaw), option=np.array(opt, dtype=np.int64), s=s,
                      junction=np.array(junction, dtype=bool))
