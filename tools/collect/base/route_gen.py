"""Route generation: `count` random routes of a town, each with at most one leaderboard scenario placed where it
makes sense, written as route files (their format, reading and checks are tools.collect.base.routes).

A route is a random walk through the town's road network (`_random_walk`) that crosses a junction, does not
revisit itself and ends outside a junction; its scenario is the flow of its first junction's turn (none going
straight), or one of the asked types placed on the walk (`_place`: junction types before a junction of the right
kind where their scenario_runner class finds the lanes it looks for (tools.collect.base.scenario_sites), obstacles
and mid-block crossings on straight stretches); its waypoints are the planner's path every
`spacing` metres (`_dense_waypoints`), kept only when every one lies on the road (what `run` would refuse).
`python -m tools.collect routes` is the command.
"""

from __future__ import annotations

import math
import random
import shutil
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tools.collect.base.routes import TOWN_SUFFIX, TOWNS_FOLDER, Route, RouteError, off_road, write_route
from tools.collect.base.scenario_sites import (
    FLOW_SIDE,
    entry_sides,
    has_sidewalks,
    junction_ahead,
    light_junctions,
    sidewalk_before_junction,
)
from tools.collect.base.scenario_types import (
    BEFORE_M,
    CATALOGUE,
    EXTENT_M,
    INTERVAL,
    JUNCTION,
    JUNCTION_CLEARANCE_M,
    OBSTACLE,
    PARAMETERS,
    PASS_ROOM_M,
    PLACEABLE,
    SIDES,
)
from tools.collect.base.town import Town
from tools.dataset.measurements import RoadOption
from tools.expert.lanes import neighbours
from tools.expert.planner import RoutePlanner
from tools.expert.route import NoRoute, turn_option

_WEATHERS = [  # a few leaderboard-style presets: sun altitude, clouds, rain, fog
    {"route_percentage": 0, "cloudiness": 5, "precipitation": 0, "fog_density": 0, "sun_altitude_angle": 60},
    {"route_percentage": 0, "cloudiness": 60, "precipitation": 0, "fog_density": 10, "sun_altitude_angle": 30},
    {"route_percentage": 0, "cloudiness": 90, "precipitation": 60, "fog_density": 20, "sun_altitude_angle": 45},
    {"route_percentage": 0, "cloudiness": 20, "precipitation": 0, "fog_density": 5, "sun_altitude_angle": 10},
]


def _signalized_junctions(town) -> set[int]:
    """carla junction ids that the SUMO network controls with traffic lights."""
    import sumolib

    net = sumolib.net.readNet(str(town.net))
    lights = [town.sumo_to_carla(np.array(n.getCoord()[:2])) for n in net.getNodes() if "traffic_light" in n.getType()]
    out = set()
    if not lights:
        return out
    lights_a = np.array(lights)
    for entry, _ in town.carla_map.get_topology():
        if entry.is_junction:
            c = entry.get_junction().bounding_box.location
            if np.hypot(lights_a[:, 0] - c.x, lights_a[:, 1] - c.y).min() < 25.0:
                out.add(entry.get_junction().id)
    return out


def _random_walk(rng: random.Random, start, length: float, step: float = 2.0):
    """Follow lanes from `start` for `length` metres, choosing randomly at every fork."""
    path, travelled = [start], 0.0
    while travelled < length:
        nxt = path[-1].next(step)
        if not nxt:
            break
        path.append(rng.choice(nxt))
        travelled += step
    return path


def _revisits(wps, radius: float = 5.0) -> bool:
    """True when a walk passes the same place twice (a loop round a block)."""
    xy = np.array([[w.transform.location.x, w.transform.location.y] for w in wps])
    d = np.hypot(xy[:, None, 0] - xy[None, :, 0], xy[:, None, 1] - xy[None, :, 1])
    return bool((d[np.triu_indices(len(xy), k=1)] < radius).any())


def _junctions(path, signalized: set[int], lights: set[int] = frozenset()) -> list[dict]:
    """The junctions a walk passes, in order: {"start", "end" (walk indices inside), "turn" (LEFT, RIGHT,
    STRAIGHT), "signalized" (SUMO runs it with traffic lights), "lights" (CARLA has traffic lights in it: the
    OpenDRIVE's), "exit" (the waypoint after it)}."""
    out = []
    i = 0
    while i < len(path):
        if not path[i].is_junction:
            i += 1
            continue
        j = i
        while j < len(path) and path[j].is_junction:
            j += 1
        entry_wp, exit_wp = path[max(i - 1, 0)], path[min(j, len(path) - 1)]
        jid = path[i].get_junction().id
        out.append({"start": i, "end": j - 1, "exit": exit_wp, "signalized": jid in signalized, "lights": jid in lights,
                    "id": jid, "turn": turn_option(entry_wp.transform.rotation.yaw, exit_wp.transform.rotation.yaw)})
        i = j
    return out


def _block(name: str, wp, params: dict[str, dict[str, str]] | None = None) -> dict:
    """A scenario block triggered at waypoint `wp`: its z is the road's (the town's elevation), as the leaderboard
    compares a trigger point with the route's own z."""
    t = wp.transform
    return {"name": f"{name}_1", "type": name, "trigger": [t.location.x, t.location.y, t.location.z, t.rotation.yaw],
            "params": params or {}}


def _junction_type(first: dict, walk, cmap) -> str | None:
    """The junction scenario type of a walk's first junction (how routes without --scenarios are filed): the
    junction flow of its turn; None where it goes straight across (the leaderboard has no straight junction flow:
    the route runs no scenario and is filed under NoScenario), where SUMO and CARLA disagree on its traffic lights,
    or where the type's class would find no lane for its flow (_class_finds)."""
    if first["turn"] not in (RoadOption.LEFT, RoadOption.RIGHT) or first["signalized"] != first["lights"]:
        return None
    kind = "Signalized" if first["signalized"] else "NonSignalized"
    name = f"{kind}Junction{'LeftTurn' if first['turn'] == RoadOption.LEFT else 'RightTurn'}"
    at = _trigger_index(first)
    return name if at > 0 and _class_finds(name, first, _class_lane(cmap, walk[at])) is not None else None


def _trigger_index(j: dict) -> int:
    """The walk index a junction scenario is triggered at: 20 m (10 steps) before its junction."""
    return max(j["start"] - 10, 0)


def _class_lane(cmap, wp):
    """The lane a scenario class finds under a trigger point: carla.Map.get_waypoint of the point as the route file
    writes it (to 0.1 m)."""
    import carla

    t = wp.transform.location
    return cmap.get_waypoint(carla.Location(round(t.x, 1), round(t.y, 1), round(t.z, 1)))


def _class_finds(name: str, j: dict, lane, sidewalks: bool = True) -> dict | None:
    """What the leaderboard class of junction or crossing type `name` finds from its trigger lane `lane` (the
    queries of tools.collect.base.scenario_sites): {} or, for OppositeVehicle*, {"directions": the sides with an
    entry lane}; None where it would raise (the junction it walks to is not the walk's `j`, no entry lane on the
    side it takes its flow from, no sidewalk on the right: looked for only where the town has `sidewalks`)."""
    walks = name in FLOW_SIDE or name.startswith("OppositeVehicle") or name == "PedestrianCrossing"
    if not walks:
        return {}
    ahead = junction_ahead(lane)
    if ahead is None or ahead[1].get_junction().id != j["id"]:
        return None
    if name == "PedestrianCrossing":
        return {} if not sidewalks or sidewalk_before_junction(lane) is not None else None
    sides = entry_sides(lane)
    if name in FLOW_SIDE:
        return {} if sides.get(FLOW_SIDE[name]) else None
    found = [side for side in SIDES if sides.get(side)]
    return {"directions": found} if found else None


def _junction_params(name: str, j: dict, walk, rng: random.Random, found: dict) -> dict[str, dict[str, str]] | None:
    """The parameters of junction type `name` at junction `j` of a walk: every one its leaderboard class reads
    (EnterActorFlow: where its flow starts and ends; OppositeVehicle*: a `direction` among those its class finds
    an entry lane on, `found`); None when the junction has no place for it."""
    if name.endswith(("LeftTurn", "RightTurn")) or name.startswith("EnterActorFlow"):
        lo = rng.choice((15, 20, 25))
        params = {"flow_speed": {"value": f"{rng.uniform(8.0, 12.0):.1f}"},
                  "source_dist_interval": {"from": str(lo), "to": str(lo + 30)}}
        if name.startswith("EnterActorFlow"):
            ends = _flow_ends(j, walk)
            if ends is None:
                return None
            params.update(ends)
        return params
    if name.startswith("OppositeVehicle"):
        return {"direction": {"value": rng.choice(found["directions"])}}
    return {}


def _flow_ends(j: dict, walk) -> dict[str, dict[str, str]] | None:
    """start_actor_flow and end_actor_flow of an EnterActorFlow at junction `j`: a lane entering the junction from
    another road (the left preferred, as the embedded world runs it) that leads onto the ego's exit lane, 40 m
    before the junction; the flow ends 20 m past it on the ego's route. None when no other lane leads there."""
    import carla

    entry = walk[max(j["start"] - 1, 0)]
    exit_ = j["exit"]
    heading = math.radians(entry.transform.rotation.yaw)
    candidates = []
    for a, b in walk[j["start"]].get_junction().get_waypoints(carla.LaneType.Driving):
        if b.next(1.0) and all((w.road_id, w.lane_id) != (exit_.road_id, exit_.lane_id) for w in b.next(1.0)):
            continue
        into, before = a.previous(1.0), a.previous(40.0)
        if not before or any((w.road_id, w.lane_id) == (entry.road_id, entry.lane_id) for w in into):
            continue  # the ego's own way in
        d, e = before[0].transform.location, entry.transform.location
        # Left of the ego's heading in CARLA's frame (y to the right): a negative cross product.
        cross = math.cos(heading) * (d.y - e.y) - math.sin(heading) * (d.x - e.x)
        candidates.append((cross >= 0.0, d))
    if not candidates:
        return None
    start = min(candidates, key=lambda c: c[0])[1]
    end = walk[min(j["end"] + 10, len(walk) - 1)].transform.location
    return {"start_actor_flow": _location(start), "end_actor_flow": _location(end)}


def _location(loc) -> dict[str, str]:
    return {"x": f"{loc.x:.1f}", "y": f"{loc.y:.1f}", "z": f"{loc.z:.1f}"}


#: A scenario is triggered this many walk steps (2 m) after the route's start at the earliest.
_LEAD_STEPS = 25


def _place(name: str, walk, junctions: list[dict], rng: random.Random, cmap, sidewalks: bool = True) -> dict | None:
    """A scenario block of type `name` on a walk (2 m steps) of `cmap`, where it makes sense; None when the walk has
    no such place. Obstacles and mid-block crossings go on straight stretches without a junction (with the
    neighbouring lane their pass needs), junction types before a junction of the right kind where their class
    finds the lanes it looks for (_class_finds)."""
    stype = CATALOGUE[name]
    if stype.kind == JUNCTION or name in ("PedestrianCrossing", "VehicleTurningRoutePedestrian"):
        def fits(j: dict) -> bool:
            if "LeftTurn" in name and j["turn"] != RoadOption.LEFT:
                return False
            if ("RightTurn" in name or name == "VehicleTurningRoutePedestrian") and j["turn"] != RoadOption.RIGHT:
                return False
            # Traffic lights where both SUMO (the embedded world) and CARLA (the OpenDRIVE's, which the
            # signalized classes look for) have them; none in either for the others.
            if name.startswith("Signalized") or name == "OppositeVehicleRunningRedLight":
                return j["signalized"] and j["lights"]
            if name.startswith("NonSignalized") or name == "OppositeVehicleTakingPriority":
                return not j["signalized"] and not j["lights"]
            return True
        for j in junctions:
            if j["start"] >= _LEAD_STEPS and j["end"] + 20 < len(walk) and fits(j):
                trigger = walk[_trigger_index(j)]
                found = _class_finds(name, j, _class_lane(cmap, trigger), sidewalks)
                params = None if found is None else _junction_params(name, j, walk, rng, found)
                if params is not None:
                    return _block(name, trigger, params)
        return None
    # A straight stretch: the trigger, then `distance` metres to the site, then room to pass it.
    distance = rng.uniform(BEFORE_M, BEFORE_M + 15.0) if stype.kind == OBSTACLE else rng.uniform(12.0, 30.0)
    need = int((distance + EXTENT_M.get(name, 6.0) + PASS_ROOM_M + JUNCTION_CLEARANCE_M) / 2.0) + 1
    two_ways = name.endswith("TwoWays")
    for k in range(_LEAD_STEPS, len(walk) - need - 15):
        stretch = walk[k:k + need]
        if any(w.is_junction for w in stretch):
            continue
        site = walk[k + int(distance / 2.0)]
        lanes = neighbours(site)
        if two_ways or name == "InvadingTurn":
            passable = lanes.oncoming is not None
        else:
            passable = lanes.left is not None or lanes.right is not None
        if stype.kind == OBSTACLE and not passable:
            continue
        params = {"distance": {"value": f"{distance:.0f}"}}
        # The obstacle takes the side away from the lane the ego can pass in: a same-direction lane on the left, or
        # the oncoming one, is on the left: right (the classes' default, not written); only one on the right: left.
        if ("direction" in PARAMETERS[name] and stype.kind == OBSTACLE and lanes.left is None
                and lanes.oncoming is None and lanes.right is not None):
            params["direction"] = {"value": "left"}
        if two_ways:
            lo = rng.choice((40, 60, 80))
            # In the shape the type's class reads it (HazardAtSideLaneTwoWays: one value).
            if PARAMETERS[name]["frequency"][0] == INTERVAL:
                params["frequency"] = {"from": str(lo), "to": str(lo + 60)}
            else:
                params["frequency"] = {"value": str(lo + 30)}
        if name == "DynamicObjectCrossing":
            params["blocker_model"] = {"value": rng.choice(("static.prop.vendingmachine",
                                                            "static.prop.advertisement", "static.prop.container"))}
            params["crossing_angle"] = {"value": str(rng.choice((0, 10, 15)))}
        return _block(name, walk[k], params)
    return None


#: Metres between two written route waypoints (leaderboard 2.0's route files: dense waypoints, about 2 m).
WAYPOINT_SPACING_M = 2.0
#: A pair of written waypoints whose traced path is longer than the walk between them by this factor (plus
#: _SLACK_M) would send the planner round a block: the second one is left out.
_DETOUR = 1.1
_SLACK_M = 3.0


def _dense_waypoints(planner: RoutePlanner, walk, spacing: float) -> np.ndarray | None:
    """The route waypoints of a walk (2 m steps): one every `spacing` metres outside junctions (as written, to
    0.1 m), and none inside one: a point inside a junction lies on several of its overlapping lanes, and the
    planner (and the leaderboard's GlobalRoutePlanner) would take the wrong one. A waypoint whose pair with the
    last one kept would be traced round a detour (a lane renumbered within a road) is left out; None when the
    walk cannot be written so."""
    step = max(1, int(round(spacing / 2.0)))
    candidates = [i for i in range(0, len(walk), step) if not walk[i].is_junction]
    if candidates[-1] != len(walk) - 1:
        candidates.append(len(walk) - 1)
    # z from the town's road (its OpenDRIVE elevation): the leaderboard places each waypoint on the road nearest
    # to it in 3D (as our planner does), so where roads cross at two levels a z of 0 would pick the wrong one.
    xyz = np.round([[w.transform.location.x, w.transform.location.y, w.transform.location.z]
                    for w in (walk[i] for i in candidates)], 1)
    kept = [0]
    for k in range(1, len(candidates)):
        a = kept[-1]
        walked = 2.0 * (candidates[k] - candidates[a])
        if walked < 1.0:
            continue
        try:
            traced = planner.trace(xyz[[a, k]]).length
        except NoRoute:
            traced = math.inf
        if traced <= walked * _DETOUR + _SLACK_M:
            kept.append(k)
        elif k == len(candidates) - 1:
            return None
    return xyz[kept]


#: --scenarios all: every placeable type a town has a place for; a type is left out after this many tries in a row.
ALL = "all"
ALL_TRIES = 400


def generate_routes(town: str, count: int, out: str, seed: int = 0, min_length: float = 150.0,
                    max_length: float = 700.0, scenarios: str | tuple | list | None = None,
                    spacing: float = WAYPOINT_SPACING_M) -> list[Path]:
    """`count` routes of `town` into OUT/<first scenario type>/<town>_<NNNN>.xml, one route per file with one
    <scenario> block (none under NoScenario), waypoints every `spacing` metres outside junctions. Without
    `scenarios` each route takes the junction flow of its first junction's turn (none going straight); with types
    (tools.collect.base.scenario_types.PLACEABLE), the routes take them in turn, each placed where it makes sense;
    `scenarios="all"`: every placeable type the town has a place for, in an order of the seed's and the town's (a
    type without a place in ALL_TRIES tries in a row is left out, and the summary names it: Town01 has no lane to
    pass an accident in). Every block carries the parameters its leaderboard class reads (scenario_types.PARAMETERS);
    waypoints and trigger points carry the road's z."""
    try:
        count = int(count)
        min_length, max_length, spacing = float(min_length), float(max_length), float(spacing)
    except (TypeError, ValueError):
        raise RouteError("--count, --min-length, --max-length and --spacing must be numbers") from None
    if count < 1:
        raise RouteError(f"--count {count}: must be at least 1")
    if not (math.isfinite(min_length) and math.isfinite(max_length) and 20.0 <= min_length <= max_length):
        raise RouteError(f"--min-length {min_length:g} / --max-length {max_length:g}: need 20 <= min <= max")
    if not 2.0 <= spacing <= 50.0:
        raise RouteError(f"--spacing {spacing:g}: expected 2 to 50 metres between route waypoints")
    every = scenarios == ALL
    types = list(PLACEABLE) if every else _scenario_list(scenarios)
    for name in types:
        if name not in PLACEABLE:
            why = f"{CATALOGUE[name].why} (docs/scenarios.md)" if name in CATALOGUE else "not a leaderboard 2.0 type"
            raise RouteError(f"--scenarios {name}: the embedded world cannot place it: {why}; placeable: "
                             f"{', '.join(PLACEABLE)}")
    t = Town(Path(town))
    out_dir = Path(out)
    towns_dir = out_dir / TOWNS_FOLDER
    towns_dir.mkdir(parents=True, exist_ok=True)
    target = towns_dir / f"{t.name}{TOWN_SUFFIX}"
    if target.resolve() != t.xodr.resolve():
        shutil.copyfile(t.xodr, target)
    rng = random.Random(int(seed))
    if every:  # in an order of the seed's and the town's: a town of few routes gets a few types, not the first ones
        random.Random(f"{int(seed)}/{t.name}").shuffle(types)
    planner = RoutePlanner(t.carla_map)
    starts = [w for w in t.carla_map.generate_waypoints(5.0) if not w.is_junction]
    signalized = _signalized_junctions(t)
    # CARLA's traffic lights (the signalized classes look for them); a town whose OpenDRIVE assigns none to its
    # junctions (netconvert's, generated: no CARLA town) is taken to have SUMO's.
    opendrive = t.xodr.read_text()
    lights = {j for j, signals in light_junctions(opendrive).items() if signals} or set(signalized)
    sidewalks = has_sidewalks(opendrive)  # else (a generated town) PedestrianCrossing is placed without one
    written = []
    left_out: list[str] = []
    with tqdm(total=count, desc="routes", unit="route") as bar:
        tries = in_row = 0  # all tries; the tries since the last route written
        while len(written) < count:
            tries += 1
            in_row += 1
            wanted = types[len(written) % len(types)] if types else None
            if every and in_row > ALL_TRIES and len(types) > 1:  # this town has no place for `wanted`
                types.remove(wanted)
                left_out.append(wanted)
                in_row = 0
                continue
            if tries > 200 * count + (ALL_TRIES * len(PLACEABLE) if every else 0):  # (and those of types left out)
                what = f"a place for {wanted}" if wanted else "a junction"
                raise RouteError(f"town {town}: cannot find routes of {min_length:.0f}-{max_length:.0f} m with "
                                 f"{what}; lower --min-length{' or leave that type out' if wanted else ''}")
            length = rng.uniform(min_length, max_length)
            walk = _random_walk(rng, rng.choice(starts), length)
            if len(walk) * 2.0 < min_length:
                continue
            junctions = _junctions(walk, signalized, lights)
            if not junctions:
                continue
            if wanted:
                scenario = _place(wanted, walk, junctions, rng, t.carla_map, sidewalks)
                if scenario is None:
                    continue
            else:  # the flow of its first junction's turn with the class's defaults; none going straight
                first = _junction_type(junctions[0], walk, t.carla_map)
                scenario = first and _block(first, walk[_trigger_index(junctions[0])])
            pts = [walk[0]] + [j["exit"] for j in junctions] + [walk[-1]]
            if walk[-1].is_junction or _revisits(pts):
                continue
            waypoints = _dense_waypoints(planner, walk, spacing)
            if waypoints is None or off_road(t.carla_map, waypoints) is not None:  # what `run` would refuse
                continue
            route = Route(id=str(len(written)), town=t.name, waypoints=waypoints,
                          scenarios=[scenario] if scenario else [], weathers=[rng.choice(_WEATHERS)])
            path = out_dir / route.scenario / f"{t.name}_{len(written):04d}.xml"
            write_route(path, route)
            written.append(path)
            in_row = 0
            bar.update()
    by_type: dict[str, int] = {}
    for p in written:
        by_type[p.parent.name] = by_type.get(p.parent.name, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(by_type.items()))
    print(f"wrote {len(written)} routes to {out_dir} ({summary}); town copied to {target}"
          + (f"; no place in {t.name} for {', '.join(left_out)}" if left_out else ""))
    return written


def _scenario_list(scenarios: str | tuple | list | None) -> list[str]:
    """--scenarios as a list of names: "A,B" (fire may hand a tuple for A,B)."""
    if scenarios is None or scenarios == "":
        return []
    items = scenarios if isinstance(scenarios, (tuple, list)) else str(scenarios).split(",")
    return [str(name).strip() for name in items if str(name).strip()]
