"""The lanes of a `carla.Map`: the lane under a point (`lane_at`), the lanes beside one (`neighbours`), and the lane
graph the route planner searches (`LaneGraph`: CARLA's GlobalRoutePlanner graph, kept on disk beside a town).

Only `carla.Map` and `carla.Waypoint` are used, so the same code serves the embedded world (a map built offline from
OpenDRIVE text) and a CARLA server (`world.get_map()`). The lanes are walked with `Waypoint.next` only:
`Waypoint.next_until_lane_end` dies with SIGSEGV inside the carla 0.9.16 client on Town12, Town13 and Town15.
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

from tools.dataset.measurements import RoadOption

#: Bump when LaneGraph.build changes, so lane graphs kept beside towns (Town.lane_graph) are built again.
LANE_GRAPH_VERSION = "1"


#: Kinds of lane graph edges (RoadOption values, as GlobalRoutePlanner's edge types).
FOLLOW = int(RoadOption.LANEFOLLOW)
CHANGE_LEFT = int(RoadOption.CHANGELANELEFT)
CHANGE_RIGHT = int(RoadOption.CHANGELANERIGHT)
#: A lane walk stops after this many steps (a lane that runs round onto itself has no end).
_MAX_STEPS = 200_000


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
    where scenarios may put one (tools.collect.base.route_gen, tools.collect.sim.scenarios)."""
    left, right = wp.get_left_lane(), wp.get_right_lane()

    def driving(lane, same: bool) -> bool:
        return lane is not None and str(lane.lane_type) == "Driving" and (lane.lane_id * wp.lane_id > 0) == same

    return Neighbours(left=left if driving(left, True) else None, right=right if driving(right, True) else None,
                      oncoming=left if driving(left, False) else None)


def _xyz(w) -> tuple[float, float, float]:
    loc = w.transform.location
    return loc.x, loc.y, loc.z


def lane_key(w) -> tuple[int, int, int]:
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
            seg_lane.append(lane_key(waypoints[0]))
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
            key = (lane_key(entry), e, x)  # a lane with several successors at one place: walked once
            if key not in walked:
                walked[key] = _walk_segment(entry, exit_, spacing)
            points, grp = walked[key]
            seg = add_segment(points)
            if grp is None:
                continue
            rounded = np.round([*e, *x], 0)
            n1, n2 = node(tuple(rounded[:3].tolist())), node(tuple(rounded[3:].tolist()))
            lanes[lane_key(entry)] = (n1, n2)
            add_edge(n1, n2, FOLLOW, seg, float(len(grp) + 1))
            topology.append((entry, exit_, n1, n2, grp))

        # _find_loose_ends: a segment whose exit's lane starts no segment: that lane walked to its end
        loose = 0
        for _entry, exit_, _n1, n2, _grp in topology:
            key = lane_key(exit_)
            if key in lanes:
                continue
            loose += 1
            path, nxt = [], exit_.next(spacing)
            while nxt and lane_key(nxt[0]) == key and len(path) < _MAX_STEPS:
                path.append(nxt[0])
                nxt = nxt[0].next(spacing)
            if not path:
                lanes[key] = (n2, -1)  # no edge: GlobalRoutePlanner cannot route from there either
                continue
            nodes.append(_xyz(path[-1]))  # a node of its own, not rounded (GlobalRoutePlanner: id -1, -2, ...)
            end = len(nodes) - 1
            lanes[key] = (n2, end)
            add_edge(n2, end, FOLLOW, add_segment([exit_, *path]), float(len(path) + 1))

        # _lane_change_link
        for entry, _exit, n1, _n2, grp in topology:
            if entry.is_junction:
                continue
            found_right = found_left = False
            for w in grp:
                for side, flag, kind in (("right", right, CHANGE_RIGHT), ("left", left, CHANGE_LEFT)):
                    if side == "right" and found_right or side == "left" and found_left:
                        continue
                    marking = w.right_lane_marking if side == "right" else w.left_lane_marking
                    if not marking or not int(marking.lane_change) & flag:
                        continue
                    other = w.get_right_lane() if side == "right" else w.get_left_lane()
                    if other is None or other.lane_type != driving or other.road_id != w.road_id:
                        continue
                    at = cmap.get_waypoint(other.transform.location)
                    target = lanes.get(lane_key(at)) if at is not None else None
                    if target is None:
                        continue
                    add_edge(n1, target[0], kind, -1, 0.0, lane_key(other))
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
#: `lane_graph` (a tools.collect.base.town.Town registers itself: its graph is kept beside the town file). Weak values,
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
