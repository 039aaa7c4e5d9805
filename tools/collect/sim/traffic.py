"""The embedded world's background traffic: SUMO's vehicles driving around the ego (tools.collect.sim.world).

SUMO drives them; this module adds them (random routes, random types, seeded) and keeps their number. On a small
town they drive between random edges over the whole town, and one that arrives is replaced by one entering
ENTER_CLEAR_M or more from the ego. On a large town (LARGE_TOWN_EXTENT) they live around the ego, as the
leaderboard's background activity does: the settings' `vehicles` enter within REGION_RADIUS_M of it (during the run
beyond the view), drive random walks, and are taken out beyond the region, so that SUMO's cost follows the traffic
near the ego, not the town's size.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from tools.collect.base.town import LARGE_TOWN_EXTENT, Town
from tools.dataset import semantics

#: (class, length, width, height, share) of background vehicles.
VEHICLE_TYPES = (
    (semantics.CAR, 4.6, 1.9, 1.5, 0.80),
    (semantics.TRUCK, 7.5, 2.4, 3.0, 0.12),
    (semantics.BUS, 11.0, 2.5, 3.2, 0.08),
)
#: On a small town, a background vehicle that replaces one that arrived enters at least this far from the ego, metres
#: (beyond where the expert looks ahead: one entering 57 m before it turned into the lane it was passing in).
ENTER_CLEAR_M = 100.0

#: Background traffic on a large town (its SUMO network wider or taller than LARGE_TOWN_EXTENT): the settings'
#: `vehicles` live within this distance of the ego, metres, as the leaderboard's background activity keeps traffic
#: around the hero. Its disk is about a small town's area (Town03), so the
#: density near the ego is a small town's. Smaller towns keep their traffic over the whole town.
REGION_RADIUS_M = 250.0
#: A background vehicle farther than REGION_RADIUS_M + this from the ego is taken out (and replaced), metres.
REGION_HYSTERESIS_M = 50.0
#: Regional traffic is checked (vehicles taken out and replaced) every this many ticks.
REGION_CHECK_TICKS = 20
#: Spacing of the places (along each edge's lanes) where regional traffic may enter, metres.
_SPAWN_SPACING_M = 20.0
#: Length of a regional vehicle's route (a random walk from where it enters), metres.
_WALK_M = 3 * REGION_RADIUS_M
#: Bump when _find_spawn_places changes (or what it reads of the network: the parking lanes the world closes):
#: the spawn places are kept beside the town.
_SPAWN_VERSION = "spawn places 1, parking lanes closed"
#: A regional vehicle SUMO could not insert for this many seconds is given up (and replaced elsewhere).
_PENDING_GIVE_UP_S = 3.0


class Background:
    """The background vehicles of one SUMO simulation (`ls`, libsumo, started on `town`'s network): their vehicle
    types, and each vehicle added (ids "bg<n>"), seeded by `seed`. `regional`: keep them within REGION_RADIUS_M of
    the ego (True) or over the whole town (False); None: regional on a large town only (LARGE_TOWN_EXTENT). `view`:
    how far the world's state reaches from the ego, metres (regional traffic enters beyond it)."""

    def __init__(self, ls: Any, town: Town, seed: int, vehicles: int, regional: bool | None, view: float):
        self.ls = ls
        self.town = town
        self.view = view
        self.rng = random.Random(seed)
        self.target = vehicles  # the settings' `vehicles`
        self._next = 0  # the number of the next vehicle's id
        self.edges = [e for e in ls.edge.getIDList() if not e.startswith(":")]
        (bx0, by0), (bx1, by1) = ls.simulation.getNetBoundary()
        #: True: the background lives around the ego (REGION_RADIUS_M), not over the whole town.
        self.regional = max(bx1 - bx0, by1 - by0) > LARGE_TOWN_EXTENT if regional is None else bool(regional)
        self.vehicles: dict[str, float] = {}  # regional: the background vehicles' ids, and when each was added
        if self.regional:
            self._setup_spawn_places()

    def setup_types(self) -> None:
        """SUMO's vehicle type of each of VEHICLE_TYPES ("bg<class>")."""
        vt = self.ls.vehicletype
        for cls, length, width, height, _ in VEHICLE_TYPES:
            name = f"bg{cls}"
            vt.copy("DEFAULT_VEHTYPE", name)
            vt.setLength(name, length)
            vt.setWidth(name, width)
            vt.setHeight(name, height)
            vt.setImperfection(name, 0.5)
            vt.setSpeedDeviation(name, 0.1)

    def start(self, ego: tuple[float, float]) -> None:
        """The first `vehicles`, anywhere (regional: within the region around the ego at `ego`)."""
        for _ in range(self.target):
            if self.regional:
                self.add_regional(ego, 0.0, 0.0, REGION_RADIUS_M)
            else:
                self.add(ego, depart_pos="random_free")

    def replace(self, vid: str, ego: tuple[float, float], time: float) -> None:
        """A new vehicle for `vid`, which arrived: the traffic's density kept."""
        if self.regional:
            self.vehicles.pop(vid, None)
            self.add_regional(ego, time, *self.entry_band())
        else:
            self.add(ego, clear=ENTER_CLEAR_M)

    def forget(self, vid: str) -> None:
        """`vid` was taken out (by the world)."""
        self.vehicles.pop(vid, None)

    def add(self, ego: tuple[float, float], depart_pos: str = "base", clear: float = 0.0) -> None:
        """A background vehicle on a route between two random edges; with `clear`, one whose first edge starts at
        least that far from the ego at `ego` (CARLA frame; the farthest of the draws when none does): a car that
        replaces one that arrived does not appear out of nothing before the ego."""
        sx, sy = self.town.carla_to_sumo(ego)
        best, best_d = None, -1.0
        for _ in range(20):
            a, b = self.rng.sample(self.edges, 2)
            found = self.ls.simulation.findRoute(a, b)
            if not found.edges or len(found.edges) < 2:
                continue
            if clear <= 0.0:
                best = found
                break
            x, y = self.ls.lane.getShape(f"{a}_0")[0][:2]
            d = math.hypot(x - sx, y - sy)
            if d > best_d:
                best, best_d = found, d
            if d >= clear:
                break
        if best is None:
            return
        self._insert(list(best.edges), depart_pos, "best")

    def _insert(self, edges: list[str], depart_pos: str, depart_lane: str) -> str:
        """A background vehicle of a random type on the route `edges`, leaving now; its id."""
        cls = self.rng.choices([t[0] for t in VEHICLE_TYPES], weights=[t[-1] for t in VEHICLE_TYPES])[0]
        vid = f"bg{self._next}"
        self._next += 1
        self.ls.route.add(f"r_{vid}", edges)
        self.ls.vehicle.add(vid, f"r_{vid}", typeID=f"bg{cls}", depart="now", departPos=depart_pos,
                            departLane=depart_lane, departSpeed="avg")
        self.ls.vehicle.setSpeedFactor(vid, self.rng.uniform(0.8, 1.1))
        return vid

    def _setup_spawn_places(self) -> None:
        """The places where regional traffic may enter (`_find_spawn_places`), found once per town and kept beside
        it (Town.derived_file: half a second of every route run's start on Town12, asking SUMO edge by edge)."""
        self._successors: dict[str, list[str]] = {}  # _next_edges, by edge

        def write(tmp) -> None:
            self._find_spawn_places()
            with open(tmp, "wb") as f:
                np.savez(f, edges=np.array(self.edges), length_edges=np.array(list(self._edge_length)),
                         lengths=np.array(list(self._edge_length.values()), dtype=np.float64), xy=self._spawn_xy,
                         edge=self._spawn_edge, pos=self._spawn_pos)

        path = self.town.derived_file("spawn-places.npz", f"{_SPAWN_VERSION} {self.town.net.name}", write)
        with np.load(path) as kept:
            if kept["edges"].tolist() != self.edges:  # not this network's (cannot be: its name is in the key)
                self._find_spawn_places()
                return
            self._edge_length = dict(zip(kept["length_edges"].tolist(), kept["lengths"].tolist(), strict=True))
            self._spawn_xy, self._spawn_edge, self._spawn_pos = kept["xy"], kept["edge"], kept["pos"]

    def _find_spawn_places(self) -> None:
        """Every _SPAWN_SPACING_M along each edge that cars may use (on its rightmost lane's shape), as SUMO-frame
        points with their edge and position on it; the edges cars may use with their lengths."""
        ls = self.ls
        xy, edges, pos = [], [], []
        self._edge_length: dict[str, float] = {}  # the edges cars may use, and their lengths
        for k, edge in enumerate(self.edges):
            lane = f"{edge}_0"
            if not any(self._car_lane(f"{edge}_{i}") for i in range(ls.edge.getLaneNumber(edge))):
                continue
            shape = np.array(ls.lane.getShape(lane), dtype=np.float64)[:, :2]
            length = float(ls.lane.getLength(lane))
            self._edge_length[edge] = length
            if len(shape) < 2 or length < 1.0:
                continue
            seg = np.hypot(*np.diff(shape, axis=0).T)
            along = np.concatenate([[0.0], np.cumsum(seg)])
            at = np.arange(min(_SPAWN_SPACING_M / 2, length / 2), along[-1], _SPAWN_SPACING_M)
            xy.append(np.column_stack([np.interp(at, along, shape[:, 0]), np.interp(at, along, shape[:, 1])]))
            edges.append(np.full(len(at), k))
            pos.append(np.minimum(at * length / max(along[-1], 1e-6), length - 0.5))
        self._spawn_xy = np.concatenate(xy) if xy else np.zeros((0, 2))
        self._spawn_edge = np.concatenate(edges) if edges else np.zeros(0, dtype=int)
        self._spawn_pos = np.concatenate(pos) if pos else np.zeros(0)

    def entry_band(self) -> tuple[float, float]:
        """Distances from the ego where regional traffic enters during the run: beyond the view (the sensors and
        the expert do not see vehicles appear), within the region."""
        return min(self.view, REGION_RADIUS_M / 2), REGION_RADIUS_M

    def add_regional(self, ego: tuple[float, float], time: float, near: float, far: float) -> None:
        """One background vehicle entering at a place between `near` and `far` metres from the ego (at `ego`,
        CARLA frame), at simulated second `time`, on a random walk through the network (_random_walk: no route
        search over a large town)."""
        sx, sy = self.town.carla_to_sumo(ego)
        d = np.hypot(self._spawn_xy[:, 0] - sx, self._spawn_xy[:, 1] - sy)
        entries = np.flatnonzero((d >= near) & (d <= far))
        if not len(entries):
            return
        for _ in range(20):
            k = int(entries[self.rng.randrange(len(entries))])
            edges = self._random_walk(self.edges[self._spawn_edge[k]])
            if len(edges) >= 2:
                break
        else:
            return
        vid = self._insert(edges, f"{self._spawn_pos[k]:.2f}", "free")
        self.vehicles[vid] = time

    def _random_walk(self, edge: str) -> list[str]:
        """A route from `edge` turning at random (self.rng) at each junction, _WALK_M long (or to a dead end):
        longer than the region's diameter, so that its vehicles leave the region before they arrive."""
        route, length = [edge], 0.0
        while length < _WALK_M and len(route) < 200:
            nexts = self._next_edges(route[-1])
            if not nexts:
                break
            route.append(nexts[self.rng.randrange(len(nexts))])
            length += self._edge_length[route[-1]]
        return route

    def _next_edges(self, edge: str) -> list[str]:
        """The edges cars may take after `edge` (from any of its lanes), sorted; asked once per edge."""
        if edge not in self._successors:
            lanes = [f"{edge}_{i}" for i in range(self.ls.edge.getLaneNumber(edge))]
            found = {link[0].rsplit("_", 1)[0] for lane in lanes if self._car_lane(lane)
                     for link in self.ls.lane.getLinks(lane) if self._car_lane(link[0])}
            self._successors[edge] = sorted(found & self._edge_length.keys())
        return self._successors[edge]

    def _car_lane(self, lane: str) -> bool:
        """Cars may drive on this lane."""
        allowed = self.ls.lane.getAllowed(lane)
        return not allowed or "passenger" in allowed

    def keep_region(self, ego: tuple[float, float], time: float) -> list[str]:
        """Take out the background vehicles beyond the region (and its hysteresis) around the ego (at `ego`) and
        those SUMO could not insert for a while; bring the count back to the target with vehicles entering in the
        entry band. The ids of those taken out."""
        sx, sy = self.town.carla_to_sumo(ego)
        pending = set(self.ls.simulation.getPendingVehicles())
        out = []
        for vid, added in self.vehicles.items():
            if vid in pending:
                if time - added > _PENDING_GIVE_UP_S:
                    out.append(vid)
                continue
            try:
                x, y = self.ls.vehicle.getPosition(vid)
            except self.ls.TraCIException:  # gone (teleported away, taken out by SUMO)
                out.append(vid)
                continue
            if math.hypot(x - sx, y - sy) > REGION_RADIUS_M + REGION_HYSTERESIS_M:
                out.append(vid)
        for vid in out:
            try:
                self.ls.vehicle.remove(vid)
            except self.ls.TraCIException:
                pass
            self.vehicles.pop(vid)
        band = self.entry_band()
        for _ in range(self.target - len(self.vehicles)):
            self.add_regional(ego, time, *band)
        return out

    def positions(self) -> dict[str, tuple[float, float]]:
        """Every background vehicle SUMO drives now (inserted, not the scenarios'), CARLA frame: for tests and
        benchmarks."""
        out = {}
        for vid in self.ls.vehicle.getIDList():
            if vid.startswith("bg"):
                x, y = self.town.sumo_to_carla(np.array(self.ls.vehicle.getPosition(vid)))
                out[vid] = (float(x), float(y))
        return out
