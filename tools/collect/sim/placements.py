"""What the embedded world places when a route's scenarios start, as records to compare with what scenario_runner's
classes place for the same route blocks (docs/scenarios.md, "Placements"; benchmarks/scenario_placements.py).

`placements(route, carla_map, seed)` starts each scenario block of a route (tools.collect.sim.scenarios.Scenarios,
built from the route as a run builds it) against `RecordingWorld`, a stand-in of the world that records what it is
asked to place and simulates nothing (no SUMO): each actor's kind, size, position, heading and speed, and each SUMO
flow's source and sink. `compare(ours, real)` matches the actors of one block by kind, nearest first, and the flows by
source and sink, and gives the distances between them.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.collect.base.routes import read_routes
from tools.collect.base.scenario_types import (
    BICYCLE,
    BLOCKERS,
    CONE,
    DEBRIS,
    PARKED_CAR,
    POLICE_CAR,
    TRAFFIC_WARNING,
    TRIGGER_M,
    WALKER,
    WARNING_PROP,
)
from tools.collect.base.town import Town
from tools.collect.sim.scenarios import Scenarios
from tools.dataset import semantics as sem
from tools.dataset.geometry import wrap_degrees
from tools.expert.state import Box

#: The kind of each thing scenarios place, by its size (scenario_types): what an actor is matched by.
KINDS = {POLICE_CAR: "car", PARKED_CAR: "car", WARNING_PROP: "warning prop", TRAFFIC_WARNING: "traffic warning",
         CONE: "cone", DEBRIS: "debris", BICYCLE: "bicycle", WALKER: "walker",
         **{(*size, sem.STATIC): "blocker" for size in BLOCKERS.values()}}
#: What matches: an actor within this distance and heading of its counterpart (metres, degrees).
MATCH_M, MATCH_DEG = 1.0, 10.0
#: How each type the embedded world runs places its actors compared with its scenario_runner class (docs/scenarios.md,
#: "Placements"): "" for as the real class (every actor and flow within MATCH_M and MATCH_DEG of the class's:
#: tests/collect/sim/test_placements.py checks it on the recorded blocks), else how it differs.
PLACEMENT = {
    "Accident": "", "AccidentTwoWays": "", "ParkedObstacle": "", "ParkedObstacleTwoWays": "",
    "ConstructionObstacle": "", "ConstructionObstacleTwoWays": "", "HazardAtSideLane": "", "EnterActorFlow": "",
    "EnterActorFlowV2": "", "SignalizedJunctionRightTurn": "", "NonSignalizedJunctionRightTurn": "",
    "PedestrianCrossing": "",
    "HazardAtSideLaneTwoWays": "the cyclists as HazardAtSideLane's (within 0.15 m), and an oncoming SUMO flow of "
                               "ours (no counterpart); the class changes the background traffic's oncoming spawn "
                               "distance instead",
    "InvadingTurn": "three cars of ours on fixed paths in the oncoming lane (12 to 71 m from the class's); the class "
                    "runs an InvadingActorFlow there and lines it with cones",
    "VehicleOpensDoorTwoWays": "the car, its open door a metre wider, at the edge of the ego's lane; the class's in "
                               "the lane beside it, moved towards the ego's (1.5 m apart); the oncoming flow around "
                               "the oncoming lane, the class's around the ego's own (3.5 m)",
    "SignalizedJunctionLeftTurn": "a flow in every oncoming lane entering the junction (the class's within 0.01 m); "
                                  "the class draws one of them at random",
    "NonSignalizedJunctionLeftTurn": "as SignalizedJunctionLeftTurn (the recorded junctions have one oncoming lane)",
    "OppositeVehicleRunningRedLight": "the adversary a SUMO vehicle started at once 15 to 60 m up the class's lane "
                                      "(timed to meet the ego), across the junction to the class's sink; the "
                                      "class's car waits 30 m up that lane and starts by the ego's time to arrival "
                                      "(compared: a flow of ours, a car of the class's, no counterparts)",
    "OppositeVehicleTakingPriority": "as OppositeVehicleRunningRedLight",
    "DynamicObjectCrossing": "the walker 1.2 m beyond the road's edge at the crossing point, the blocker behind it; "
                             "the class's on the sidewalk's centre, the walker beside the blocker (up to 3.5 m and "
                             "90 degrees apart: the blocker turned along the road, the class's across)",
    "ParkingCrossingPedestrian": "the parked car half a car and 0.8 m before the crossing point, the walker beyond "
                                 "the road's edge; the class's car at `distance`, the walker a lane's width beside "
                                 "the ego's lane just past it (3.7 m and 6.4 m apart)",
    "VehicleTurningRoutePedestrian": "the walker crosses the route's exit lane 4 m past the junction; the class's "
                                     "from the sidewalk where the ego's lane leaves it (24 m apart)",
}
#: The types placed as the real class.
AS_THE_CLASS = frozenset(name for name, how in PLACEMENT.items() if not how)


class RecordingWorld:
    """The world as Scenarios talks to it (tools.collect.sim.world.SumoWorld's scenario calls), recording, not
    simulating: the ego stands where it is given; what is placed is kept as placed; a flow's route is its source and
    sink; no background traffic."""

    LANE_SPEED = 13.89  # what lane_speed says of every lane (50 km/h), m/s

    def __init__(self, ego: Box):
        self.time = 0.0
        self.ego = ego
        self.placed: dict[int, Box] = {}
        self.flow_ends: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {}  # first edge -> source, sink

    def ego_box(self) -> Box:
        return self.ego

    def add_static(self, cls: int, x: float, y: float, yaw: float, length: float, width: float, height: float,
                   block: bool = False) -> int:
        aid = len(self.placed) + 1
        self.placed[aid] = Box(aid, cls, x, y, height / 2, yaw, length, width, height)
        return aid

    def move_static(self, aid: int, x: float, y: float, yaw: float, speed: float) -> None:
        """Movers go on: the record keeps where they were placed."""

    def flow_route(self, source: tuple[float, float], sink: tuple[float, float]) -> tuple[list[str], int, float]:
        edge = f"flow{len(self.flow_ends)}"
        self.flow_ends[edge] = ((float(source[0]), float(source[1])), (float(sink[0]), float(sink[1])))
        return [edge], 0, 0.0

    def lane_speed(self, edge: str, lane: int) -> float:
        return self.LANE_SPEED

    def speed_limit(self) -> float:
        return self.LANE_SPEED

    def add_vehicle(self, edges: list[str], lane: int, pos: float, speed: float, rules: bool = True,
                    yields: bool = False, flow: str = "") -> None:
        return None

    def actors(self) -> list[Box]:
        return list(self.placed.values())

    def take_out(self, box_ids: set[int]) -> int:
        return 0

    def box_ids(self, vids: list[str]) -> list[int]:
        return []


def placements(route, carla_map, seed: int = 0, ego_speed: float = 0.0) -> list[dict]:
    """What the embedded world places for each scenario block of `route` (tools.collect.base.routes.Route) on its
    town's carla.Map, when the block starts: the ego `TRIGGER_M` route metres before its trigger point, at
    `ego_speed` (it times only OppositeVehicle*'s adversary). One record per block, in the route's order:
    {name, type, state (running; failed: no site; name only ...), actors: [{kind, cls, size, x, y, yaw, speed}],
    flows: [{source, sink, speed}]}; a mover's speed is the one it moves at once started."""
    scenarios = Scenarios.for_route(route, carla_map, seed)
    dense = scenarios.route
    world = RecordingWorld(Box(0, sem.CAR, 0.0, 0.0, 0.75, 0.0, 4.9, 2.1, 1.5))
    out = {}
    for a in sorted(scenarios.items, key=lambda a: a.trigger_s):
        k = min(int(np.searchsorted(dense.s, a.trigger_s - TRIGGER_M)), len(dense.s) - 1)
        x, y = dense.xy[k]
        world.ego = Box(0, sem.CAR, float(x), float(y), 0.75, float(dense.yaw[k]), 4.9, 2.1, 1.5, ego_speed)
        scenarios.update(world, float(dense.s[k]))  # as a run's tick there starts it (and any other reached)
        poses = [(m.id, *m.pose(world.time)[:3], m.speed) for m in a.movers]  # where each starts, how fast
        poses += [(aid, world.placed[aid].x, world.placed[aid].y, world.placed[aid].yaw, 0.0) for aid in a.statics]
        actors = []
        for aid, x, y, yaw, speed in poses:
            b = world.placed[aid]
            size = (b.length, b.width, b.height, b.cls)
            actors.append({"kind": KINDS.get(size, sem.NAMES[b.cls]), "cls": b.cls, "size": list(size[:3]),
                           "x": round(float(x), 3), "y": round(float(y), 3), "yaw": round(float(yaw), 2),
                           "speed": round(float(speed), 3)})
        flows = [{"source": list(world.flow_ends[f.edges[0]][0]), "sink": list(world.flow_ends[f.edges[0]][1]),
                  "reference": list(f.reference) if f.reference else None, "speed": round(f.speed, 3)}
                 for f in a.flows]
        out[a.block["name"]] = {"actors": actors, "flows": flows}
    states = scenarios.states()
    return [{"name": b["name"], "type": b["type"], "state": states.get(b["name"], "name only"),
             **out.get(b["name"], {"actors": [], "flows": []})} for b in route.scenarios]


@dataclass
class Match:
    """One actor (or flow) of ours and its counterpart of the real class; None where it has none."""

    kind: str
    distance: float | None  # metres (a flow: the larger of its source's and its sink's)
    heading: float | None  # degrees, absolute (a flow: None)
    ours: dict | None
    real: dict | None

    @property
    def within(self) -> bool:
        return (self.distance is not None and self.distance <= MATCH_M
                and (self.heading is None or self.heading <= MATCH_DEG))


def _heading(a: float, b: float, kind: str) -> float:
    d = abs(float(wrap_degrees(a - b)))
    # A cone or a walker standing still has no front: only its axis counts.
    return min(d, 180.0 - d) if kind in ("cone", "walker") else d


def _flow_distance(a: dict, b: dict) -> float:
    """How far apart two flows are: the larger of their sources' and their sinks' distances (the sources' alone where
    one has no sink; their reference points' where one is known by that alone)."""
    if not (a.get("source") and b.get("source")):  # one is known by its reference point (OppositeActorFlow)
        return math.dist(a["reference"], b["reference"]) if a.get("reference") and b.get("reference") else math.inf
    d = math.dist(a["source"], b["source"])
    return max(d, math.dist(a["sink"], b["sink"])) if a.get("sink") and b.get("sink") else d


def compare(ours: dict, real: dict) -> list[Match]:
    """Ours against the real class's record of the same block (both as `placements` writes them): each actor matched
    with the nearest of the same kind (the closest pairs first), each flow with the nearest by source and sink;
    unmatched ones on either side with None."""
    out: list[Match] = []
    for kind in sorted({a["kind"] for a in ours["actors"]} | {a["kind"] for a in real["actors"]}):
        mine = [a for a in ours["actors"] if a["kind"] == kind]
        theirs = [a for a in real["actors"] if a["kind"] == kind]
        pairs = sorted(((math.hypot(m["x"] - t["x"], m["y"] - t["y"]), i, j) for i, m in enumerate(mine)
                        for j, t in enumerate(theirs)))
        used_i, used_j = set(), set()
        for d, i, j in pairs:
            if i in used_i or j in used_j:
                continue
            used_i.add(i)
            used_j.add(j)
            out.append(Match(kind, d, _heading(mine[i]["yaw"], theirs[j]["yaw"], kind), mine[i], theirs[j]))
        out += [Match(kind, None, None, m, None) for i, m in enumerate(mine) if i not in used_i]
        out += [Match(kind, None, None, None, t) for j, t in enumerate(theirs) if j not in used_j]
    pairs = sorted(((_flow_distance(m, t), i, j) for i, m in enumerate(ours["flows"])
                    for j, t in enumerate(real["flows"])))
    used_i, used_j = set(), set()
    for d, i, j in pairs:
        if i in used_i or j in used_j or math.isinf(d):
            continue
        used_i.add(i)
        used_j.add(j)
        out.append(Match("flow", d, None, ours["flows"][i], real["flows"][j]))
    out += [Match("flow", None, None, m, None) for i, m in enumerate(ours["flows"]) if i not in used_i]
    out += [Match("flow", None, None, None, t) for j, t in enumerate(real["flows"]) if j not in used_j]
    return out


# ----------------------------------------------------------------------------- the real classes' records

#: Blueprint ids (parts of them) of the props scenario_runner's classes spawn, and the kind of ours each is.
_PROP_KINDS = {"warningaccident": "warning prop", "warningconstruction": "warning prop", "constructioncone": "cone",
               "trafficwarning": "traffic warning", "dirtdebris": "debris"}
_BICYCLES = ("crossbike", "century", "omafiets")


def real_kind(actor: dict) -> str:
    """The kind (KINDS) of an actor a scenario_runner class spawned, as recorded in tests/data/scenario_placements
    (its format: that folder's README.md); a prop of no kind of ours is named by its blueprint."""
    bp = actor.get("blueprint") or actor.get("model") or ""
    if actor["kind"] == "walker":
        return "walker"
    if actor["kind"] == "vehicle":
        return "bicycle" if actor.get("base_type") == "bicycle" or any(b in bp for b in _BICYCLES) else "car"
    if bp in BLOCKERS:
        return "blocker"
    return next((kind for part, kind in _PROP_KINDS.items() if part in bp), bp.rsplit(".", 1)[-1])


def real_record(block: dict) -> dict:
    """A real class's record of one block (tests/data/scenario_placements) in the shape `placements` gives ours."""
    actors = [{"kind": real_kind(a), "x": a["x"], "y": a["y"], "yaw": a["yaw"], "speed": a.get("speed") or 0.0,
               "blueprint": a.get("blueprint")} for a in block["actors"]]
    flows = []
    for f in block["flows"]:
        if f.get("behaviour") == "OppositeActorFlow":  # built around a reference point; its ends found when it runs
            flows.append({"reference": f["source"][:2], "source": None, "sink": None, "speed": f.get("speed")})
        else:
            flows.append({"source": f["source"][:2], "sink": f["sink"][:2] if f.get("sink") else None,
                          "speed": f.get("speed"), "behaviour": f.get("behaviour")})
    return {"name": block["name"], "type": block["type"], "town": block.get("town"), "error": block.get("error"),
            "actors": actors, "flows": flows}


# ----------------------------------------------------------------------------- per type

@dataclass
class TypeDifferences:
    """How ours differs from the real class over the recorded blocks of one type."""

    blocks: int = 0
    skipped: int = 0  # blocks the real class could not build (the leaderboard skips them) or ours could not place
    distances: list[float] = None  # matched actors and flows, metres
    headings: list[float] = None  # matched actors, degrees
    ours_only: int = 0  # actors or flows of ours with no counterpart
    real_only: int = 0

    def __post_init__(self) -> None:
        self.distances, self.headings = self.distances or [], self.headings or []

    def add(self, matches: list[Match]) -> None:
        for m in matches:
            if m.distance is None:
                self.ours_only += m.real is None
                self.real_only += m.ours is None
            else:
                self.distances.append(m.distance)
                if m.heading is not None:
                    self.headings.append(m.heading)

    def row(self) -> tuple:
        """blocks, skipped, matched, max m, mean m, max deg, mean deg, ours only, real only."""
        d, h = self.distances, self.headings
        return (self.blocks, self.skipped, len(d), max(d, default=0.0), sum(d) / len(d) if d else 0.0,
                max(h, default=0.0), sum(h) / len(h) if h else 0.0, self.ours_only, self.real_only)


def differences(pairs) -> dict[str, TypeDifferences]:
    """Per scenario type, from (ours, real) record pairs of the same blocks: the distances of the matched actors
    and flows; a block either side could not build counts as skipped."""
    out: dict[str, TypeDifferences] = {}
    for ours, real in pairs:
        t = out.setdefault(real["type"], TypeDifferences())
        t.blocks += 1
        if real.get("error") or ours["state"] != "running":
            t.skipped += 1
            continue
        t.add(compare(ours, real))
    return out


def differences_markdown(diffs: dict[str, TypeDifferences]) -> str:
    """The table of docs/scenarios.md ("Placements"): per type, the differences from the real class."""
    rows = ["| type | blocks | skipped | matched | max m | mean m | max deg | mean deg | ours only | real only |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(diffs):
        b, s, n, dmax, dmean, hmax, hmean, ours, real = diffs[name].row()
        rows.append(f"| `{name}` | {b} | {s} | {n} | {dmax:.2f} | {dmean:.2f} | {hmax:.1f} | {hmean:.1f} | {ours} "
                    f"| {real} |")
    return "\n".join(rows) + "\n"


def placement_markdown() -> str:
    """The per-type table of docs/scenarios.md ("Placements"): as the real class, or approximated and how."""
    rows = ["| type | placed | how it differs from the class |", "|---|---|---|"]
    for name, how in PLACEMENT.items():
        rows.append(f"| `{name}` | {'approximated' if how else 'as the real class'} | {how or '-'} |")
    return "\n".join(rows) + "\n"


def recorded_pairs(folder: Path, towns: Path, version: str = "v0.9.16") -> Iterator[tuple[dict, dict]]:
    """(ours, real) records of every block recorded in `folder` (tests/data/scenario_placements: `version`.json
    and the route files under routes/), ours computed on the towns' OpenDRIVE files in `towns` (TownXX.xodr),
    each town loaded once (Town12 and Town13 take seconds and 1 to 2 GB each) and kept while its blocks are placed:
    the route planner reads the lane graph the Town keeps beside it only while the Town lives (a map whose Town is
    gone has its graph walked again, a minute per route on Town13)."""
    folder, towns = Path(folder), Path(towns)
    blocks = json.loads((folder / f"{version}.json").read_text())["blocks"]
    for town in sorted({b["town"] for b in blocks}):
        kept = Town(towns / f"{town}.xodr")
        cmap = kept.carla_map
        ours: dict[tuple[str, str], dict[str, dict]] = {}
        for b in (b for b in blocks if b["town"] == town):
            key = (b["file"], b["route"])
            if key not in ours:
                route = next(r for r in read_routes(folder / "routes" / b["file"]) if r.id == b["route"])
                ours[key] = {rec["name"]: rec for rec in placements(route, cmap)}
            yield ours[key][b["name"]], real_record(b)
        del kept, cmap, ours
        gc.collect()  # one big town at a time
