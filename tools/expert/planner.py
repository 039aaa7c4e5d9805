"""Route semantics from a `carla.Map`: dense route, high-level commands and target points.

Only `carla.Map` and `carla.Waypoint` are used, so the same code serves the embedded world (a map built
offline from OpenDRIVE text) and a CARLA server (`world.get_map()`).

A route file's waypoints are joined as the leaderboard joins them: its `interpolate_trajectory`
(leaderboard/utils/route_manipulation.py) asks CARLA's GlobalRoutePlanner
(PythonAPI/carla/agents/navigation/global_route_planner.py) for the path between each two consecutive
waypoints. LaneGraph is that planner's graph and RoutePlanner its search (see their docstrings for what is
the same and what is not). The lanes are walked with `Waypoint.next` only: `Waypoint.next_until_lane_end`
dies with SIGSEGV inside the carla 0.9.16 client on Town12, Town13 and Town15.

Commands use the values of CARLA's agents.navigation RoadOption, as the leaderboard does
(tools.dataset.measurements.RoadOption, the frame contract's numbering; imported here for this module).
"""

from __future__ import annotations

import heapq
import math
import weakref
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np

from tools.dataset.errors import ToolError
from tools.dataset.measurements import RoadOption

#: Heading change through a junction (degrees) above which it is a turn, not straight on.
TURN_DEGREES = 30.0
#: Distance between target points on straight road, metres (as the leaderboard's downsampling).
TARGET_SPACING = 50.0
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
#: Bump when LaneGraph.build changes, so lane graphs kept beside towns (Town.lane_graph) are built again.
LANE_GRAPH_VERSION = "1"
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
    return RoutePlanner._densify(items)


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


@dataclass(frozen=True)
class Neighbours:
    """The driving lanes beside a carla.Map waypoint's lane (None where there is none)."""

    left: object | None  # of the same direction, on the left
    right: object | None  # of the same direction, on the right
    oncoming: object | None  # of the other direction, on the left


def lane_at(cmap, x: float, y: float, z: float | None = None):
    """The driving lane's waypoint nearest (x, y): the one rule for finding the lane under a point in the top view.
    carla.Map.get_waypoint looks in 3-D, and a point at height 0 on a town hundreds of metres up (Town11 lies at
    about 275 m) lands a lane off, beside the right one; without `z` the height is first taken from that lane.
    None: no driving lane."""
    import carla

    if z is None:
        near = cmap.get_waypoint(carla.Location(float(x), float(y), 0.0), project_to_road=True,
                                 lane_type=carla.LaneType.Driving)
        if near is None:
            return None
        z = near.transform.location.z
    return cmap.get_waypoint(carla.Location(float(x), float(y), float(z)), project_to_road=True,
                             lane_type=carla.LaneType.Driving)


def neighbours(wp) -> Neighbours:
    """The driving lanes beside a waypoint's lane: the one rule for passing an obstacle (tools.expert) and for
    where scenarios may put one (tools.collect.routes, tools.collect.sim.scenarios)."""
    left, right = wp.get_left_lane(), wp.get_right_lane()

    def driving(lane, same: bool) -> bool:
        return lane is not None and str(lane.lane_type) == "Driving" and (lane.lane_id * wp.lane_id > 0) == same

    return Neighbours(left=left if driving(left, True) else None, right=right if driving(right, True) else None,
                      oncoming=left if driving(left, False) else None)


class NoRoute(ToolError, ValueError):
    """Route waypoints the lane graph cannot join, or joins only by a detour; the message names them."""


#: Kinds of lane graph edges (RoadOption values, as GlobalRoutePlanner's edge types).
_FOLLOW = int(RoadOption.LANEFOLLOW)
_LEFT = int(RoadOption.CHANGELANELEFT)
_RIGHT = int(RoadOption.CHANGELANERIGHT)
#: A lane walk stops after this many steps (a lane that runs round onto itself has no end).
_MAX_STEPS = 200_000


def _xyz(w) -> tuple[float, float, float]:
    loc = w.transform.location
    return loc.x, loc.y, loc.z


def _lane_key(w) -> tuple[int, int, int]:
    return (w.road_id, w.section_id, w.lane_id)


def _walk_segment(entry, exit_, spacing: float) -> tuple[list, list]:
    """(points, grp_path) of one topology segment, walked with `Waypoint.next` only.

    points: the segment's samples for the dense route, `spacing` apart from the entry, then the exit. They are
    those of the planner before it (a walk to the lane's end with `next_until_lane_end`, cut at the sample
    nearest to the exit, the exit in its place; the walk may run on past the exit where a lane section
    renumbers its lanes): the walk goes on along the road while the lane has one successor, and stops once it
    has passed the exit.
    grp_path: GlobalRoutePlanner's samples of the segment (its `_build_topology`): `next(spacing)[0]` from the
    entry until one lies within `spacing` of the exit (3D), that one left out; None where it drops the segment
    (an entry within `spacing` of its exit, with no successor)."""
    ex, ey = exit_.transform.location.x, exit_.transform.location.y
    walk = [entry]
    loc = entry.transform.location
    d = [math.hypot(loc.x - ex, loc.y - ey)]
    best = d[0]
    road = entry.road_id
    ended = False
    w = entry
    while len(walk) < _MAX_STEPS:
        nxt = w.next(spacing)
        if len(nxt) != 1 or nxt[0].road_id != road:
            ended = True
            break
        w = nxt[0]
        walk.append(w)
        loc = w.transform.location
        d.append(math.hypot(loc.x - ex, loc.y - ey))
        best = min(best, d[-1])
        if best < 2 * spacing and d[-1] > best + 4 * spacing:
            break  # past the exit
    nearest = int(np.argmin(d))
    if ended and nearest == len(d) - 1 and 1e-4 < d[-1] <= 1.5 * spacing:
        points = walk + [exit_]  # the lane's end, within a step beyond the last sample, is the exit
    else:
        points = walk[: max(nearest, 1)] + [exit_]

    # GlobalRoutePlanner's samples: the same walk (next(spacing)[0] from the entry), on where it branched. Its
    # distances are carla.Location.distance's (single precision: a sample 1.0000000116 m away is 1 m away).
    end_loc = exit_.transform.location
    if entry.transform.location.distance(end_loc) <= spacing:
        first = entry.next(spacing)
        return points, ([first[0]] if first else None)
    grp: list = []
    for w in walk[1:]:
        if w.transform.location.distance(end_loc) <= spacing:
            return points, grp
        grp.append(w)
    w = walk[-1]
    for _ in range(_MAX_STEPS):
        nxt = w.next(spacing)
        if not nxt:
            break
        w = nxt[0]
        if w.transform.location.distance(end_loc) <= spacing:
            break
        grp.append(w)
    return points, grp


class LaneGraph:
    """CARLA's GlobalRoutePlanner graph of a carla.Map (agents/navigation/global_route_planner.py: its
    `_build_topology`, `_build_graph`, `_find_loose_ends`, `_lane_change_link`), as arrays that are kept on
    disk (Town.lane_graph) so the big towns walk their lanes once.

    The same as GlobalRoutePlanner: one node per topology segment end rounded to the metre (x, y, z); one edge
    per segment, its length the number of its samples `spacing` apart plus one (a later segment between the same
    two nodes replaces an earlier one); loose ends walked on; zero-length lane change edges from the entry of a
    segment off a junction to the entry of the segment of the lane beside it, where the lane marking allows the
    change. Not the same: the lanes are walked with `Waypoint.next` alone, and each segment keeps the samples the
    dense route is made of (`_walk_segment`)."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        a = arrays
        self.spacing = float(a["spacing"])
        self._start = a["seg_start"]
        self.xy = a["xy"].astype(np.float64)
        self.yaw = a["yaw"].astype(np.float64)
        self.junction = a["junction"].astype(bool)
        self.nodes = [tuple(float(c) for c in row) for row in a["nodes"]]
        self.edge_u = a["edge_u"].tolist()
        self.edge_v = a["edge_v"].tolist()
        self.edge_kind = a["edge_kind"].tolist()
        self.edge_seg = a["edge_seg"].tolist()
        self.edge_length = a["edge_length"].tolist()
        self.edge_target = a["edge_target"].tolist()
        self.seg_lane = [tuple(int(c) for c in row) for row in a["seg_lane"]]
        self.lanes = {(int(r), int(s), int(ln)): (int(u), int(v))
                      for (r, s, ln), (u, v) in zip(a["lanes"], a["lane_nodes"], strict=True)}
        self.lane_keys = [tuple(int(c) for c in row) for row in a["lanes"]]
        steps = np.hypot(*np.diff(self.xy, axis=0).T)
        steps[self._start[1:-1] - 1] = 0.0  # no step from one segment's last sample to the next one's first
        cum = np.concatenate([[0.0], np.cumsum(steps)])
        self.s = cum - np.repeat(cum[self._start[:-1]], np.diff(self._start))  # distance along the segment
        self.edges: dict[tuple[int, int], int] = {}
        self.adj: list[list[tuple[int, float]]] = [[] for _ in self.nodes]
        for e, (u, v) in enumerate(zip(self.edge_u, self.edge_v, strict=True)):
            self.edges[(u, v)] = e
            self.adj[u].append((v, self.edge_length[e]))

    # ------------------------------------------------------------------ building and keeping
    @classmethod
    def build(cls, cmap, spacing: float = 1.0) -> LaneGraph:
        """Walk every lane of `cmap` (carla.Map) with `Waypoint.next`; seconds on Town12 and Town13."""
        import carla

        right, left = int(carla.LaneChange.Right), int(carla.LaneChange.Left)
        driving = carla.LaneType.Driving
        pts_xy: list[tuple[float, float]] = []
        pts_yaw: list[float] = []
        pts_junction: list[bool] = []
        seg_start = [0]
        seg_lane: list[tuple[int, int, int]] = []

        def add_segment(waypoints) -> int:
            for w in waypoints:
                t = w.transform
                pts_xy.append((t.location.x, t.location.y))
                pts_yaw.append(t.rotation.yaw)
                pts_junction.append(w.is_junction)
            seg_start.append(len(pts_xy))
            seg_lane.append(_lane_key(waypoints[0]))
            return len(seg_lane) - 1

        node_of: dict[tuple, int] = {}
        nodes: list[tuple[float, float, float]] = []
        edge_of: dict[tuple[int, int], int] = {}
        edges: list[list] = []  # [u, v, kind, segment, length, target lane key]
        lanes: dict[tuple[int, int, int], tuple[int, int]] = {}

        def node(xyz) -> int:
            if xyz not in node_of:
                node_of[xyz] = len(nodes)
                nodes.append(xyz)
            return node_of[xyz]

        def add_edge(u: int, v: int, kind: int, seg: int, length: float, target=None) -> None:
            if (u, v) in edge_of:  # networkx's add_edge on an existing edge updates its attributes
                edges[edge_of[(u, v)]][2:] = [kind, seg, length, target]
            else:
                edge_of[(u, v)] = len(edges)
                edges.append([u, v, kind, seg, length, target])

        # _build_topology and _build_graph
        topology = []  # (entry, exit, entry node, exit node, grp path) of the segments GlobalRoutePlanner keeps
        walked: dict[tuple, tuple[list, list | None]] = {}
        for entry, exit_ in cmap.get_topology():
            e, x = _xyz(entry), _xyz(exit_)
            key = (_lane_key(entry), e, x)  # a lane with several successors at one place: walked once
            if key not in walked:
                walked[key] = _walk_segment(entry, exit_, spacing)
            points, grp = walked[key]
            seg = add_segment(points)
            if grp is None:
                continue
            rounded = np.round([*e, *x], 0)
            n1, n2 = node(tuple(rounded[:3].tolist())), node(tuple(rounded[3:].tolist()))
            lanes[_lane_key(entry)] = (n1, n2)
            add_edge(n1, n2, _FOLLOW, seg, float(len(grp) + 1))
            topology.append((entry, exit_, n1, n2, grp))

        # _find_loose_ends: a segment whose exit's lane starts no segment: that lane walked to its end
        loose = 0
        for _entry, exit_, _n1, n2, _grp in topology:
            key = _lane_key(exit_)
            if key in lanes:
                continue
            loose += 1
            path, nxt = [], exit_.next(spacing)
            while nxt and _lane_key(nxt[0]) == key and len(path) < _MAX_STEPS:
                path.append(nxt[0])
                nxt = nxt[0].next(spacing)
            if not path:
                lanes[key] = (n2, -1)  # no edge: GlobalRoutePlanner cannot route from there either
                continue
            nodes.append(_xyz(path[-1]))  # a node of its own, not rounded (GlobalRoutePlanner: id -1, -2, ...)
            end = len(nodes) - 1
            lanes[key] = (n2, end)
            add_edge(n2, end, _FOLLOW, add_segment([exit_, *path]), float(len(path) + 1))

        # _lane_change_link
        for entry, _exit, n1, _n2, grp in topology:
            if entry.is_junction:
                continue
            found_right = found_left = False
            for w in grp:
                for side, flag, kind in (("right", right, _RIGHT), ("left", left, _LEFT)):
                    if side == "right" and found_right or side == "left" and found_left:
                        continue
                    marking = w.right_lane_marking if side == "right" else w.left_lane_marking
                    if not marking or not int(marking.lane_change) & flag:
                        continue
                    other = w.get_right_lane() if side == "right" else w.get_left_lane()
                    if other is None or other.lane_type != driving or other.road_id != w.road_id:
                        continue
                    at = cmap.get_waypoint(other.transform.location)
                    target = lanes.get(_lane_key(at)) if at is not None else None
                    if target is None:
                        continue
                    add_edge(n1, target[0], kind, -1, 0.0, _lane_key(other))
                    if side == "right":
                        found_right = True
                    else:
                        found_left = True
                if found_right and found_left:
                    break

        lane_list = list(lanes)
        lane_index = {k: i for i, k in enumerate(lane_list)}
        return cls({
            "spacing": np.float64(spacing),
            "seg_start": np.array(seg_start, dtype=np.int64),
            "seg_lane": np.array(seg_lane, dtype=np.int64).reshape(-1, 3),
            "xy": np.array(pts_xy, dtype=np.float32).reshape(-1, 2),  # carla's coordinates are float32
            "yaw": np.array(pts_yaw, dtype=np.float32),
            "junction": np.array(pts_junction, dtype=bool),
            "nodes": np.array(nodes, dtype=np.float64).reshape(-1, 3),
            "edge_u": np.array([e[0] for e in edges], dtype=np.int64),
            "edge_v": np.array([e[1] for e in edges], dtype=np.int64),
            "edge_kind": np.array([e[2] for e in edges], dtype=np.int64),
            "edge_seg": np.array([e[3] for e in edges], dtype=np.int64),
            "edge_length": np.array([e[4] for e in edges], dtype=np.float64),
            "edge_target": np.array([lane_index.get(e[5], -1) if e[5] is not None else -1 for e in edges],
                                    dtype=np.int64),
            "lanes": np.array(lane_list, dtype=np.int64).reshape(-1, 3),
            "lane_nodes": np.array([lanes[k] for k in lane_list], dtype=np.int64).reshape(-1, 2),
        })

    def save(self, path: Path) -> None:
        """Write the graph as one .npz file (no pickle)."""
        with open(path, "wb") as f:
            np.savez_compressed(f, **self.arrays)

    @classmethod
    def load(cls, path: Path) -> LaneGraph:
        with np.load(path, allow_pickle=False) as z:
            return cls({k: z[k] for k in z.files})

    # ------------------------------------------------------------------ reading
    @property
    def n_segments(self) -> int:
        return len(self._start) - 1

    def segment(self, i: int) -> slice:
        """The rows of segment i's samples in xy, yaw and junction."""
        return slice(int(self._start[i]), int(self._start[i + 1]))

    def segment_xy(self, i: int) -> np.ndarray:
        return self.xy[self.segment(i)]

    def lane_edge(self, key: tuple[int, int, int]) -> int | None:
        """GlobalRoutePlanner's edge of a lane (road, section, lane): `_road_id_to_edge`; None: it has none."""
        nodes = self.lanes.get(key)
        return self.edges.get(nodes) if nodes is not None else None

    def astar(self, source: int, target: int) -> list[int] | None:
        """Nodes of the shortest path from source to target, None where there is none: networkx's astar_path
        (as GlobalRoutePlanner calls it: weight 'length', heuristic the straight line between the nodes),
        step for step, so that equal paths are chosen alike."""
        nodes, adj = self.nodes, self.adj
        tx, ty, tz = nodes[target]

        def heuristic(n: int) -> float:
            x, y, z = nodes[n]
            return math.sqrt((x - tx) ** 2 + (y - ty) ** 2 + (z - tz) ** 2)

        c = count()
        queue: list = [(0, next(c), source, 0, None)]
        enqueued: dict[int, tuple[float, float]] = {}
        explored: dict[int, int | None] = {}
        while queue:
            _, _, cur, dist, parent = heapq.heappop(queue)
            if cur == target:
                path = [cur]
                while parent is not None:
                    path.append(parent)
                    parent = explored[parent]
                return path[::-1]
            if cur in explored:
                if explored[cur] is None:
                    continue
                if enqueued[cur][0] < dist:
                    continue
            explored[cur] = parent
            for nb, w in adj[cur]:
                ncost = dist + w
                if nb in enqueued:
                    qcost, h = enqueued[nb]
                    if qcost <= ncost:
                        continue
                else:
                    h = heuristic(nb)
                enqueued[nb] = ncost, h
                heapq.heappush(queue, (ncost + h, next(c), nb, ncost, cur))
        return None


#: Who keeps the lane graph of a carla.Map, by the map's id: an object with the map as its cached `carla_map` and a
#: `lane_graph` (a tools.collect.town.Town registers itself: its graph is kept beside the town file). Weak values,
#: and the map is checked to still be the owner's (ids are reused).
_GRAPH_OWNERS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def keep_graph(cmap, owner: Any) -> None:
    """Register `owner` (its `carla_map` is `cmap`; its `lane_graph` the graph of it) as where cmap's lane graph
    is kept: RoutePlanner(cmap) then reads that one instead of walking the map."""
    _GRAPH_OWNERS[id(cmap)] = owner


def lane_graph(cmap, spacing: float = 1.0) -> LaneGraph:
    """The lane graph of a carla.Map: the one its owner keeps (keep_graph: a Town's, read from beside the town in
    milliseconds), else walked now."""
    owner = _GRAPH_OWNERS.get(id(cmap)) if spacing == 1.0 else None
    if owner is not None and owner.__dict__.get("carla_map") is cmap:
        return owner.lane_graph
    return LaneGraph.build(cmap, spacing)


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
        edge = g.lane_edge(_lane_key(w))
        if edge is None or g.edge_kind[edge] != _FOLLOW:
            raise NoRoute(f"route waypoint {i} ({p[0]:.1f}, {p[1]:.1f}) is on road {w.road_id} lane {w.lane_id}, "
                          "which no path of the lane graph leaves")
        loc = w.transform.location
        found = [(edge, np.array([loc.x, loc.y]))]
        keys = [_lane_key(x) for x in (w.get_left_lane(), w.get_right_lane())
                if x is not None and x.lane_type == carla.LaneType.Driving]
        if w.is_junction:
            keys += [_lane_key(start) for start, _ in w.get_junction().get_waypoints(carla.LaneType.Driving)]
        seen = {edge}
        for key in keys:
            e = g.lane_edge(key)
            if e is None or e in seen or g.edge_kind[e] != _FOLLOW:
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
        kind = _LEFT if abs(lb[2]) < abs(la[2]) else _RIGHT  # lane ids grow outwards from the road's centre
        seg = g.edge_seg[eb]
        xy = g.segment_xy(seg)
        k0 = self._nearest(xy, wa)
        k1 = min(k0 + LANE_CHANGE_AHEAD, len(xy) - 1)
        steps = [(kind, seg, k0, k1)]
        kb = self._nearest(xy, wb)
        if kb > k1:
            steps.append((_FOLLOW, seg, k1, kb))
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
            if g.edge_kind[e] != _FOLLOW:
                target = g.lane_edge(g.lane_keys[g.edge_target[e]]) if g.edge_target[e] >= 0 else None
                if target is None or g.edge_kind[target] != _FOLLOW:
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
                steps.append((_FOLLOW, seg, k0, k1))
            current = xy[k1]
        return steps

    def _length(self, steps, wa: np.ndarray) -> float:
        """About how long the steps are from wa (to choose among candidate lanes)."""
        g = self.graph
        total, current = 0.0, wa
        for kind, seg, k0, k1 in steps:
            rows = g.segment(seg)
            xy, s = g.xy[rows], g.s[rows]
            if kind == _FOLLOW:
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
                if kind != _FOLLOW:
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
        return self._densify(tr.items)

    @staticmethod
    def _densify(items) -> DenseRoute:
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
