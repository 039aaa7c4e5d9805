"""The route planner: a route file's waypoints joined into a DenseRoute (tools.expert.route) on a `carla.Map`'s lane
graph (tools.expert.lanes.LaneGraph).

A route file's waypoints are joined as the leaderboard joins them: its `interpolate_trajectory`
(leaderboard/utils/route_manipulation.py) asks CARLA's GlobalRoutePlanner
(PythonAPI/carla/agents/navigation/global_route_planner.py) for the path between each two consecutive
waypoints. LaneGraph is that planner's graph and RoutePlanner its search (see their docstrings for what is
the same and what is not).
"""

from __future__ import annotations

import math

import numpy as np

from tools.dataset.measurements import RoadOption
from tools.expert.lanes import CHANGE_LEFT, CHANGE_RIGHT, FOLLOW, LaneGraph, lane_at, lane_graph, lane_key
from tools.expert.route import DenseRoute, NoRoute, densify, turn_option

#: Where a lane change lands: this many samples ahead of the nearest one on the new lane (GlobalRoutePlanner).
LANE_CHANGE_AHEAD = 5
#: A lane's width, metres, for the slope of a ramp over to another lane: one lane over LANE_CHANGE_AHEAD samples.
LANE_WIDTH = 3.5
#: The path between two consecutive route waypoints may be at most DETOUR_FACTOR times as long as the straight
#: line between them plus DETOUR_SLACK metres (a turn through a junction is less than 1.6 times its chord);
#: longer is a loop round a block, refused (NoRoute) rather than driven.
DETOUR_FACTOR = 3.0
DETOUR_SLACK = 100.0
#: A route waypoint in a junction, or beside a lane's centre, may be meant for another lane than the nearest
#: (overlapping junction lanes, a waypoint drawn at a corner): lanes within this distance are candidates too.
MATCH_RADIUS = 2.5
#: A candidate lane other than the nearest is taken only where it makes the route this much shorter, metres.
MATCH_PENALTY = 20.0


class _Trace:
    """The dense route being made: its samples, the segment and index of the last one taken from a lane, and the
    ramp the samples are on: where the route moves over to another lane (a lane change; a jump where one had no
    room on its lane), each sample is shifted by what is left of the offset, evenly less each sample."""

    def __init__(self, graph: LaneGraph):
        self.g = graph
        self.items: list[tuple[float, float, float, int, bool]] = []
        self.seg, self.idx = -1, -1
        self.length = 0.0
        self.offset = np.zeros(2)
        self.left = 0  # samples still shifted, by offset * left / steps
        self.steps = 1
        self.option: int | None = None  # the command of the next sample (a lane change's)

    def _ramp(self, offset: np.ndarray, steps: int) -> None:
        self.offset, self.steps, self.left = offset, max(steps, 1), max(steps, 1) - 1

    def _add(self, p: np.ndarray, yaw: float, option: int, junction: bool) -> None:
        if self.left > 0:
            p = p + self.offset * (self.left / self.steps)
            self.left -= 1
        if self.option is not None:
            option, self.option = self.option, None
        x, y = float(p[0]), float(p[1])
        if self.items:
            self.length += math.hypot(x - self.items[-1][0], y - self.items[-1][1])
        self.items.append((x, y, yaw, option, junction))

    def run(self, seg: int, k0: int, k1: int) -> None:
        """Samples k0..k1 of a segment; through a junction they carry the turn's command. Where they start away
        from the last sample (GlobalRoutePlanner's lane change where the lane ends, its jump to another lane of a
        junction), the route ramps over at a lane change's slope."""
        rows = self.g.segment(seg)
        xy, yaw, junction = self.g.xy[rows], self.g.yaw[rows], self.g.junction[rows]
        option = RoadOption.LANEFOLLOW
        if junction[k0]:
            option = turn_option(float(yaw[k0]), float(yaw[k1]))
        if self.items:
            jump = np.array(self.items[-1][:2]) - xy[k0]
            if np.hypot(*jump) > 1.5 * self.g.spacing:
                self._ramp(jump, math.ceil(np.hypot(*jump) / (LANE_WIDTH / LANE_CHANGE_AHEAD)))
        for k in range(k0, k1 + 1):
            self._add(xy[k], float(yaw[k]), int(option), bool(junction[k]))
        self.seg, self.idx = seg, k1

    def lane_change(self, seg: int, k0: int, k1: int, option: int) -> None:
        """Over to the segment's lane, reached at its sample k1 (k0: the nearest to the last sample): a ramp of
        LANE_CHANGE_AHEAD samples that ends there, begun that many samples back where k1 is nearer."""
        rows = self.g.segment(seg)
        xy, yaw = self.g.xy[rows], self.g.yaw[rows]
        self.option = option
        self.seg, self.idx = seg, k1
        if not self.items:
            return
        steps = max(LANE_CHANGE_AHEAD, k1 - k0)
        back = min(steps - (k1 - k0), len(self.items) - 1)
        over = xy[k0] - np.array(self.items[-1][:2])  # from the last sample over to the new lane
        for t in range(1, back + 1):  # the samples already taken, shifted towards the new lane
            i = len(self.items) - 1 - back + t
            x, y, w_yaw, w_option, w_junction = self.items[i]
            shifted = (x + over[0] * t / steps, y + over[1] * t / steps, w_yaw, w_option, w_junction)
            self.length += math.hypot(shifted[0] - self.items[i - 1][0], shifted[1] - self.items[i - 1][1]) \
                - math.hypot(x - self.items[i - 1][0], y - self.items[i - 1][1])
            self.items[i] = shifted
        self._ramp(-over * (steps - back) / steps, steps - back)  # sample k0 + j: (steps - back - j) / steps of it
        for k in range(k0 + 1, k1 + 1):
            self._add(xy[k], float(yaw[k]), int(RoadOption.LANEFOLLOW), False)


class RoutePlanner:
    """The path between each two consecutive route waypoints, as the leaderboard's interpolate_trajectory finds
    it with CARLA's GlobalRoutePlanner (trace_route), sampled every `spacing` metres.

    The same as GlobalRoutePlanner: a waypoint is put on the lane `carla.Map.get_waypoint` gives; the search is
    its A* on its graph (LaneGraph) from the start of the first waypoint's lane segment to the start of the
    second's, then along that segment; each segment is followed from its sample nearest to where the route is;
    a lane change lands LANE_CHANGE_AHEAD samples ahead on the new lane. Not the same: the path ends at the
    sample nearest to the waypoint (GlobalRoutePlanner stops within two samples of it, and its next path starts
    there again) and never steps back to a sample it has passed; a lane change is a ramp of LANE_CHANGE_AHEAD
    samples that ends where GlobalRoutePlanner lands, or at the waypoint where that comes first (it jumps, then
    steps back to the waypoint). Where GlobalRoutePlanner would loop: a waypoint in a junction or off its lane's
    centre may lie on another lane (MATCH_RADIUS), taken where it makes the route more than MATCH_PENALTY metres
    shorter (a waypoint at a corner, nearer to the crossing lane of the other direction than to its own); a
    waypoint on the lane beside the last one's across a line that forbids the change is reached by changing
    lanes anyway (_change_over). A path still far longer than the straight line between its waypoints
    (DETOUR_FACTOR, DETOUR_SLACK) is refused: NoRoute names the waypoints.

    `graph`: the map's LaneGraph if the caller has it; else the one kept beside the map's town (lane_graph)."""

    def __init__(self, cmap, spacing: float = 1.0, graph: LaneGraph | None = None):
        self.map = cmap
        self.spacing = spacing
        self.graph = graph if graph is not None else lane_graph(cmap, spacing)

    @property
    def segments(self) -> list[np.ndarray]:
        """The samples (x, y) of every lane segment, in carla.Map.get_topology's order."""
        return [self.graph.segment_xy(i) for i in range(self.graph.n_segments)]

    @staticmethod
    def _nearest(xy: np.ndarray, p: np.ndarray) -> int:
        return int(np.argmin((xy[:, 0] - p[0]) ** 2 + (xy[:, 1] - p[1]) ** 2))

    def _candidates(self, p: np.ndarray, i: int) -> list[tuple[int, np.ndarray]]:
        """The lanes route waypoint i may be on, as (edge, point on the lane): first the one GlobalRoutePlanner
        puts it on (its _localize: carla.Map.get_waypoint), then the other lanes of its junction and the lanes
        beside it that pass within MATCH_RADIUS."""
        import carla

        g = self.graph
        w = lane_at(self.map, p[0], p[1], float(p[2]) if len(p) > 2 else None)
        if w is None:
            raise NoRoute(f"route waypoint {i} ({p[0]:.1f}, {p[1]:.1f}) is on no driving lane")
        edge = g.lane_edge(lane_key(w))
        if edge is None or g.edge_kind[edge] != FOLLOW:
            raise NoRoute(f"route waypoint {i} ({p[0]:.1f}, {p[1]:.1f}) is on road {w.road_id} lane {w.lane_id}, "
                          "which no path of the lane graph leaves")
        loc = w.transform.location
        found = [(edge, np.array([loc.x, loc.y]))]
        keys = [lane_key(x) for x in (w.get_left_lane(), w.get_right_lane())
                if x is not None and x.lane_type == carla.LaneType.Driving]
        if w.is_junction:
            keys += [lane_key(start) for start, _ in w.get_junction().get_waypoints(carla.LaneType.Driving)]
        seen = {edge}
        for key in keys:
            e = g.lane_edge(key)
            if e is None or e in seen or g.edge_kind[e] != FOLLOW:
                continue
            seen.add(e)
            xy = g.segment_xy(g.edge_seg[e])
            k = self._nearest(xy, p)
            if math.hypot(xy[k, 0] - p[0], xy[k, 1] - p[1]) <= MATCH_RADIUS:
                found.append((e, xy[k]))
        return found

    def _steps(self, ea: int, wa: np.ndarray, eb: int, wb: np.ndarray) -> list[tuple[int, int, int, int]] | None:
        """GlobalRoutePlanner's trace_route from wa on edge ea to wb on edge eb, as (kind, segment, k0, k1): follow
        the segment from sample k0 to k1, or change lanes over to it, landing at k1; None: no path. Where that
        path is a detour and wb's lane is the one beside wa's, a lane change straight over instead (across a
        line GlobalRoutePlanner changes lanes only where the lane marking allows it)."""
        steps = self._grp_steps(ea, wa, eb, wb)
        straight = math.hypot(*(wb - wa))
        if steps is None or self._length(steps, wa) > DETOUR_FACTOR * straight + DETOUR_SLACK:
            return self._change_over(ea, wa, eb, wb) or steps
        return steps

    def _change_over(self, ea: int, wa: np.ndarray, eb: int, wb: np.ndarray) -> list[tuple[int, int, int, int]] | None:
        """A lane change from wa's lane to wb's where that is the lane beside it (same road section and
        direction); None where it is not."""
        g = self.graph
        la, lb = g.seg_lane[g.edge_seg[ea]], g.seg_lane[g.edge_seg[eb]]
        if la[0] != lb[0] or la[1] != lb[1] or la[2] * lb[2] <= 0 or abs(la[2] - lb[2]) != 1:
            return None
        kind = CHANGE_LEFT if abs(lb[2]) < abs(la[2]) else CHANGE_RIGHT  # lane ids grow outwards from the road's centre
        seg = g.edge_seg[eb]
        xy = g.segment_xy(seg)
        k0 = self._nearest(xy, wa)
        k1 = min(k0 + LANE_CHANGE_AHEAD, len(xy) - 1)
        steps = [(kind, seg, k0, k1)]
        kb = self._nearest(xy, wb)
        if kb > k1:
            steps.append((FOLLOW, seg, k1, kb))
        return steps

    def _grp_steps(self, ea: int, wa: np.ndarray, eb: int, wb: np.ndarray) -> list[tuple[int, int, int, int]] | None:
        g = self.graph
        nodes = g.astar(g.edge_u[ea], g.edge_u[eb])
        if nodes is None:
            return None
        nodes.append(g.edge_v[eb])
        steps = []
        current = wa
        for j in range(len(nodes) - 1):
            e = g.edges[(nodes[j], nodes[j + 1])]
            if g.edge_kind[e] != FOLLOW:
                target = g.lane_edge(g.lane_keys[g.edge_target[e]]) if g.edge_target[e] >= 0 else None
                if target is None or g.edge_kind[target] != FOLLOW:
                    continue
                seg = g.edge_seg[target]
                xy = g.segment_xy(seg)
                if len(xy) > 2:  # the samples between entry and exit: GlobalRoutePlanner's path
                    k0 = 1 + self._nearest(xy[1:-1], current)
                    k1 = min(k0 + LANE_CHANGE_AHEAD, len(xy) - 2)
                else:
                    k0 = k1 = len(xy) - 1
                if j == len(nodes) - 3 and seg == g.edge_seg[eb]:  # the lane of the waypoint: there by then
                    k1 = max(min(k1, self._nearest(xy, wb)), k0)
                steps.append((g.edge_kind[e], seg, k0, k1))
            else:
                seg = g.edge_seg[e]
                xy = g.segment_xy(seg)
                k0 = self._nearest(xy, current)
                k1 = len(xy) - 1 if j < len(nodes) - 2 else max(self._nearest(xy, wb), k0)
                steps.append((FOLLOW, seg, k0, k1))
            current = xy[k1]
        return steps

    def _length(self, steps, wa: np.ndarray) -> float:
        """About how long the steps are from wa (to choose among candidate lanes)."""
        g = self.graph
        total, current = 0.0, wa
        for kind, seg, k0, k1 in steps:
            rows = g.segment(seg)
            xy, s = g.xy[rows], g.s[rows]
            if kind == FOLLOW:
                total += math.hypot(*(xy[k0] - current)) + s[k1] - s[k0]
            else:
                total += math.hypot(*(xy[k1] - current))
            current = xy[k1]
        return total

    def trace(self, points: np.ndarray) -> DenseRoute:
        """Dense route through the (N, 2|3) route waypoints (CARLA frame), every `spacing` metres."""
        pts = np.asarray(points, dtype=float)
        if pts.ndim != 2 or len(pts) < 2:
            raise NoRoute(f"a route needs at least 2 waypoints, got {len(pts)}")
        g = self.graph
        cands = [self._candidates(p, i) for i, p in enumerate(pts)]

        def where(i: int) -> str:
            return f"route waypoints {i} ({pts[i, 0]:.1f}, {pts[i, 1]:.1f}) and {i + 1} ({pts[i + 1, 0]:.1f}, " \
                   f"{pts[i + 1, 1]:.1f})"

        # The candidate lane of each waypoint (the first, GlobalRoutePlanner's, unless another makes the route
        # more than MATCH_PENALTY shorter): the cheapest chain, by dynamic programming over the waypoints.
        cost = [MATCH_PENALTY * (j > 0) for j in range(len(cands[0]))]
        back: list[list[tuple[int, list | None]]] = []
        for i in range(len(pts) - 1):
            new_cost, new_back = [], []
            for jb, (eb, wb) in enumerate(cands[i + 1]):
                best: tuple[float, int, list | None] = (math.inf, 0, None)
                for ja, (ea, wa) in enumerate(cands[i]):
                    if cost[ja] == math.inf:
                        continue
                    steps = self._steps(ea, wa, eb, wb)
                    if steps is not None:
                        c = cost[ja] + self._length(steps, wa) + MATCH_PENALTY * (jb > 0)
                        if c < best[0]:
                            best = (c, ja, steps)
                new_cost.append(best[0])
                new_back.append((best[1], best[2]))
            if min(new_cost) == math.inf:
                raise NoRoute(f"{where(i)}: the lane graph joins them by no path")
            cost = new_cost
            back.append(new_back)
        chosen = [0] * len(pts)
        chosen[-1] = int(np.argmin(cost))
        chain: list[list] = [[] for _ in back]
        for i in range(len(pts) - 2, -1, -1):
            chosen[i], chain[i] = back[i][chosen[i + 1]]

        tr = _Trace(g)
        for i, steps in enumerate(chain):
            before = tr.length
            for kind, seg, k0, k1 in steps:
                if kind != FOLLOW:
                    if not tr.items:  # a route that starts with a lane change: from the first waypoint's lane
                        ea, wa = cands[0][chosen[0]]
                        first = g.edge_seg[ea]
                        k = self._nearest(g.segment_xy(first), wa)
                        tr.run(first, k, k)
                    tr.lane_change(seg, k0, k1, kind)
                    continue
                if seg == tr.seg:
                    k0 = max(k0, tr.idx)  # never back to a sample already passed
                    k1 = max(k1, k0)
                tr.run(seg, k0, k1)
            planned, straight = tr.length - before, float(np.hypot(*(pts[i + 1, :2] - pts[i, :2])))
            if planned > DETOUR_FACTOR * straight + DETOUR_SLACK:
                raise NoRoute(f"{where(i)} are {straight:.0f} m apart, but the lane graph joins them only by a "
                              f"{planned:.0f} m detour (is a waypoint on the wrong lane?)")
        if len(tr.items) < 2 or tr.length < self.spacing / 2:
            raise NoRoute(f"route waypoints 0 ({pts[0, 0]:.1f}, {pts[0, 1]:.1f}) to {len(pts) - 1} ({pts[-1, 0]:.1f}, "
                          f"{pts[-1, 1]:.1f}): the route has no length (its end lies behind its start on their lane?)")
        return densify(tr.items)
