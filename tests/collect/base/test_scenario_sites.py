"""tools.collect.base.scenario_sites, the lane queries the real scenario classes make, against what the real classes
did: tests/data/scenario_placements (scenario_runner v0.9.16 and v0.9.15 record the same), on its blocks of Town03
and Town10HD (the small towns of the recording; loading Town12 or Town13 takes seconds and gigabytes)."""

from __future__ import annotations

import json
import math

import carla
import pytest
from conftest import TESTS

from tools.collect.base.routes import read_routes
from tools.collect.base.scenario_sites import (
    FLOW_SIDE,
    entry_sides,
    has_sidewalks,
    junction_ahead,
    light_junctions,
    sidewalk_before_junction,
)
from tools.collect.base.scenario_types import PLACEABLE

DATA = TESTS / "data" / "scenario_placements"
SMALL = ("Town03", "Town10HD")


@pytest.fixture(scope="module")
def recorded(carla_towns):
    """The recorded blocks, and the carla.Map of each small town."""
    blocks = json.loads((DATA / "v0.9.16.json").read_text())["blocks"]
    return blocks, {t: carla.Map(t, (carla_towns / f"{t}.xodr").read_text()) for t in SMALL}


def _lane(cmap, point):
    return cmap.get_waypoint(carla.Location(*map(float, point[:3])))


def _entry_key(cmap, point) -> tuple[int, int]:
    """(road, lane) of the last waypoint before the junction ahead of a point's lane: the entry lane it is on."""
    before, _ = junction_ahead(_lane(cmap, point))
    return before.road_id, before.lane_id


def _keys(lanes) -> set[tuple[int, int]]:
    return {(w.road_id, w.lane_id) for w in lanes}


def test_the_recording_covers_every_placeable_type_on_four_towns_and_no_class_refused_a_block(recorded):
    blocks, _ = recorded
    assert len(blocks) >= 30 and {b["town"] for b in blocks} == {"Town03", "Town10HD", "Town12", "Town13"}
    assert {b["type"] for b in blocks} == set(PLACEABLE)
    assert [b for b in blocks if b["error"] or b["stopped"] or b.get("ignored")] == []
    for b in blocks:  # the route files they were recorded from, as our checks read them
        (route,) = read_routes(DATA / "routes" / b["file"])
        assert [s["type"] for s in route.scenarios] == [b["type"]] and route.id == b["route"]


def test_a_junction_turns_flow_comes_from_an_entry_lane_found_on_its_side_as_the_class_finds_it(recorded):
    blocks, maps = recorded
    seen = 0
    for b in (b for b in blocks if b["type"] in FLOW_SIDE and b["town"] in SMALL):
        cmap = maps[b["town"]]
        sides = entry_sides(_lane(cmap, b["trigger"]))
        (flow,) = b["flows"]
        assert _entry_key(cmap, flow["source"]) in _keys(sides[FLOW_SIDE[b["type"]]]), b["file"]
        seen += 1
    assert seen >= 4


def test_an_opposite_vehicle_enters_from_the_direction_its_block_names(recorded):
    blocks, maps = recorded
    seen = 0
    for b in (b for b in blocks if b["type"].startswith("OppositeVehicle") and b["town"] in SMALL):
        cmap = maps[b["town"]]
        (route,) = read_routes(DATA / "routes" / b["file"])
        side = route.scenarios[0]["params"]["direction"]["value"]
        (adversary,) = b["actors"]  # where the behaviour puts it when the scenario starts
        assert adversary["placed_by"] == "ActorTransformSetter"
        point = (adversary["x"], adversary["y"], adversary["z"])
        assert _entry_key(cmap, point) in _keys(entry_sides(_lane(cmap, b["trigger"]))[side]), b["file"]
        seen += 1
    assert seen >= 3


def test_pedestrian_crossing_walkers_start_at_the_sidewalk_found_before_the_junction(recorded):
    blocks, maps = recorded
    seen = 0
    for b in (b for b in blocks if b["type"] == "PedestrianCrossing" and b["town"] in SMALL):
        start = sidewalk_before_junction(_lane(maps[b["town"]], b["trigger"]))
        assert start is not None and len(b["actors"]) == 3
        at = start.transform.location
        for walker in b["actors"]:  # the class's offsets from its start: at most 1.6 m on, 2.5 m aside
            assert math.hypot(walker["x"] - at.x, walker["y"] - at.y) < 3.0, b["file"]
        seen += 1
    assert seen == 2


def test_carlas_traffic_lights_are_the_signals_a_junctions_controllers_name(carla_towns):
    text = (carla_towns / "Town10HD.xodr").read_text()
    lights = light_junctions(text)
    assert lights[23] == ["943", "945", "944"]  # its controllers 964, 965, 966
    assert lights[664] == [], "SUMO runs it with lights; CARLA has none there (SignalizedJunction* would refuse it)"
    assert has_sidewalks(text) and not has_sidewalks('<lane id="-1" type="driving"/>')
