"""Route semantics from a `carla.Map`: dense route, high-level commands and target points.

Only `carla.Map` and `carla.Waypoint` are used, so the same code serves the embedded world (a map built
offline from OpenDRIVE text) and a CARLA server (`world.get_map()`).

Commands use the values of CARLA's agents.navigation RoadOption, as the leaderboard does
(tools.dataset.measurements.RoadOption, the frame contract's numbering; imported here for this module).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from tools.dataset.measurements import RoadOption

#: Heading change through a junction (degrees) above which it is a turn, not straight on.
TURN_DEGREES = 30.0
#: Distance between target points on straight road, metres (as the leaderboard's downsampling).
TARGET_SPACING = 50.0
#: Extra cost of a lane change in the route search, metres.
LANE_CHANGE_COST = 20.0
#: OpenDRIVE signal type of a stop sign (carla.Map landmark type).
STOP_SIGN = "206"


def _key(loc) -> tuple[int, int]:
    return (round(loc.x * 2), round(loc.y * 2))  # 0.5 m grid: joins segment ends that touch


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


def stop_signs(route: DenseRoute, cmap) -> np.ndarray:
    """Distances from the route's start (metres) of the stop lines of the stop signs along the route: the
    stop positions carla.Map gives for the stop-sign landmarks ahead of the route's lanes, kept where they
    lie on the route. The expert stops there; the referee judges that it did."""
    import carla

    found: dict[tuple[int, int, int], float] = {}
    for i in range(0, len(route.s), 5):
        x, y = route.xy[i]
        wp = cmap.get_waypoint(carla.Location(float(x), float(y), 0.0), project_to_road=True,
                               lane_type=carla.LaneType.Driving)
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


@dataclass(frozen=True)
class Neighbours:
    """The driving lanes beside a carla.Map waypoint's lane (None where there is none)."""

    left: object | None  # of the same direction, on the left
    right: object | None  # of the same direction, on the right
    oncoming: object | None  # of the other direction, on the left


def neighbours(wp) -> Neighbours:
    """The driving lanes beside a waypoint's lane: the one rule for passing an obstacle (tools.expert) and for
    where scenarios may put one (tools.collect.routes, tools.collect.sim.scenarios)."""
    left, right = wp.get_left_lane(), wp.get_right_lane()

    def driving(lane, same: bool) -> bool:
        return lane is not None and str(lane.lane_type) == "Driving" and (lane.lane_id * wp.lane_id > 0) == same

    return Neighbours(left=left if driving(left, True) else None, right=right if driving(right, True) else None,
                      oncoming=left if driving(left, False) else None)


class NoRoute(ValueError):
    pass


class RoutePlanner:
    """Shortest paths on the lane graph of a carla.Map (like CARLA's GlobalRoutePlanner)."""

    def __init__(self, cmap, spacing: float = 1.0):
        self.map = cmap
        self.spacing = spacing
        self.segments: list[list] = []  # waypoints of each lane segment, entry to exit
        self._by_lane: dict[tuple[int, int, int], list[int]] = {}
        self._out: dict[tuple[int, int], list[tuple[float, int, int | None]]] = {}
        for entry, exit_ in cmap.get_topology():
            path = [entry] + entry.next_until_lane_end(spacing)
            # The walk may run on past a lane-section boundary where the lane is renumbered (CARLA's Town03,
            # Town04, Town06): the exit replaces the walked point nearest to it, and what follows goes, so
            # the path never doubles back.
            end = exit_.transform.location
            nearest = int(np.argmin([math.hypot(w.transform.location.x - end.x, w.transform.location.y - end.y)
                                     for w in path]))
            path = path[: max(nearest, 1)] + [exit_]
            self.segments.append(path)
        lengths = [self._length(path) for path in self.segments]
        for i, path in enumerate(self.segments):
            w = path[0]
            self._by_lane.setdefault((w.road_id, w.section_id, w.lane_id), []).append(i)
            self._out.setdefault(_key(w.transform.location), []).append((lengths[i], i, None))
        # Lane changes: from a segment's entry to the parallel segment's exit, where lines allow it.
        for i, path in enumerate(self.segments):
            w = path[0]
            if w.is_junction:
                continue
            for side, neighbour in (("Left", w.get_left_lane()), ("Right", w.get_right_lane())):
                if neighbour is None or str(neighbour.lane_type) != "Driving" or neighbour.lane_id * w.lane_id <= 0:
                    continue
                if side not in str(w.lane_change) and str(w.lane_change) != "Both":
                    continue
                for j in self._by_lane.get((neighbour.road_id, neighbour.section_id, neighbour.lane_id), []):
                    cost = lengths[i] + LANE_CHANGE_COST
                    self._out[_key(w.transform.location)].append((cost, j, i))

    @staticmethod
    def _length(path) -> float:
        pts = np.array([[w.transform.location.x, w.transform.location.y] for w in path])
        return float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum()) if len(pts) > 1 else 0.0

    def _segment_of(self, wp) -> tuple[int, int]:
        """(segment, index within it) of the waypoint nearest to `wp` on its lane."""
        best = (math.inf, -1, -1)
        loc = wp.transform.location
        for i in self._by_lane.get((wp.road_id, wp.section_id, wp.lane_id), []):
            pts = np.array([[w.transform.location.x, w.transform.location.y] for w in self.segments[i]])
            d = np.hypot(pts[:, 0] - loc.x, pts[:, 1] - loc.y)
            k = int(d.argmin())
            if d[k] < best[0]:
                best = (float(d[k]), i, k)
        if best[1] < 0:
            raise NoRoute(f"no lane segment for road {wp.road_id} lane {wp.lane_id}")
        return best[1], best[2]

    def _search(self, start_seg: int, goal_seg: int) -> list[tuple[int, int | None]]:
        """Segments from the end of start_seg to the start of goal_seg: [(segment, lane-change-from)]."""
        start = _key(self.segments[start_seg][-1].transform.location)
        goal = _key(self.segments[goal_seg][0].transform.location)
        goal_xy = self.segments[goal_seg][0].transform.location
        dist = {start: 0.0}
        prev: dict[tuple[int, int], tuple[tuple[int, int], int, int | None]] = {}
        heap = [(0.0, 0.0, start)]
        while heap:
            _, d, node = heapq.heappop(heap)
            if node == goal:
                break
            if d > dist.get(node, math.inf):
                continue
            for cost, seg, lc in self._out.get(node, []):
                nxt = _key(self.segments[seg][-1].transform.location)
                nd = d + cost
                if nd < dist.get(nxt, math.inf):
                    dist[nxt] = nd
                    prev[nxt] = (node, seg, lc)
                    loc = self.segments[seg][-1].transform.location
                    h = math.hypot(loc.x - goal_xy.x, loc.y - goal_xy.y)
                    heapq.heappush(heap, (nd + h, nd, nxt))
        if goal != start and goal not in prev:
            raise NoRoute("the waypoints are not connected by the lane graph")
        chain = []
        node = goal
        while node != start:
            node, seg, lc = prev[node]
            chain.append((seg, lc))
        return chain[::-1]

    def trace(self, points: np.ndarray) -> DenseRoute:
        """Dense route through the (N, 2|3) route waypoints (CARLA frame), every `spacing` metres."""
        import carla

        wps = []
        for p in np.asarray(points, dtype=float):
            w = self.map.get_waypoint(carla.Location(float(p[0]), float(p[1]), 0.0), project_to_road=True,
                                      lane_type=carla.LaneType.Driving)
            wps.append(w)
        items: list[tuple[float, float, float, int, bool]] = []
        for a, b in zip(wps[:-1], wps[1:], strict=True):
            sa, ka = self._segment_of(a)
            sb, kb = self._segment_of(b)
            if sa == sb and kb >= ka:
                items += self._with_options(self.segments[sa][ka : kb + 1])
                continue
            items += self._with_options(self.segments[sa][ka:])
            for seg, lc in self._search(sa, sb):
                if lc is None:
                    items += self._with_options(self.segments[seg])
                else:
                    items += self._lane_change(self.segments[lc], self.segments[seg])
            items += self._with_options(self.segments[sb][: kb + 1])
        return self._densify(items)

    @staticmethod
    def _change_option(own, other) -> RoadOption:
        left = own.get_left_lane()
        if left is not None and left.lane_id == other.lane_id and left.road_id == other.road_id:
            return RoadOption.CHANGELANELEFT
        return RoadOption.CHANGELANERIGHT

    @staticmethod
    def _point(w, option: RoadOption) -> tuple[float, float, float, int, bool]:
        t = w.transform
        return (t.location.x, t.location.y, t.rotation.yaw, int(option), w.is_junction)

    def _with_options(self, path) -> list[tuple[float, float, float, int, bool]]:
        if not path:
            return []
        opt = RoadOption.LANEFOLLOW
        if path[0].is_junction:
            opt = turn_option(path[0].transform.rotation.yaw, path[-1].transform.rotation.yaw)
        return [self._point(w, opt) for w in path]

    def _lane_change(self, own, other, blend: int = 10) -> list[tuple[float, float, float, int, bool]]:
        """Drive `own` lane, then move over to the parallel `other` lane smoothly over `blend` metres."""
        n = min(len(own), len(other))
        start = max(0, n // 2 - blend // 2)
        option = int(self._change_option(own[0], other[0]))
        out = [self._point(w, RoadOption.LANEFOLLOW) for w in own[:start]]
        for i in range(start, n):
            a = min(1.0, (i - start + 1) / max(blend, 1))
            po, pn = own[i].transform.location, other[i].transform.location
            x, y = (1 - a) * po.x + a * pn.x, (1 - a) * po.y + a * pn.y
            opt = option if i == start else int(RoadOption.LANEFOLLOW)
            out.append((x, y, other[i].transform.rotation.yaw, opt, False))
        out += [self._point(w, RoadOption.LANEFOLLOW) for w in other[n:]]
        return out

    def _densify(self, items) -> DenseRoute:
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
