"""What the embedded world places when a scenario starts (tools/collect/sim/placements.py) against what
scenario_runner's classes place for the same route blocks, recorded from a scenario_runner checkout into
tests/data/scenario_placements (README.md there): the types docs/scenarios.md calls "as the real class" match actor
by actor within 1 m and 10 degrees, and the differences docs/scenarios.md gives for every type are the ones measured.
All 34 recorded blocks on their four towns: about 8 s of CPU for the file, most of it loading Town12 and Town13 once
each (their lane graphs are read from beside the towns)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from tools.collect.sim.placements import (
    AS_THE_CLASS,
    MATCH_DEG,
    MATCH_M,
    PLACEMENT,
    compare,
    differences,
    differences_markdown,
    placement_markdown,
    placements,
    real_record,
    recorded_pairs,
)
from tools.dataset import semantics as sem

DATA = REPO / "tests" / "data" / "scenario_placements"


@pytest.fixture(scope="module")
def pairs(carla_towns: Path) -> list[tuple[dict, dict]]:
    """(ours, real) records of every recorded block, each town loaded once."""
    if not (DATA / "v0.9.16.json").is_file():
        pytest.skip(f"no recorded placements in {DATA} (recorded from a scenario_runner checkout: its README.md)")
    started = time.perf_counter()
    out = list(recorded_pairs(DATA, carla_towns))
    print(f"{len(out)} recorded blocks compared in {time.perf_counter() - started:.1f} s")
    return out


def test_the_recorded_placements_cover_every_type_the_embedded_world_runs_on_four_towns(pairs):
    from tools.collect.base.scenario_types import PLACEABLE

    assert len(pairs) >= 30
    assert {real["type"] for _, real in pairs} >= set(PLACEABLE)
    assert {ours["name"] for ours, _ in pairs} and len({real["name"] for _, real in pairs}) >= 1


def test_types_as_the_real_class_place_every_actor_and_flow_where_the_class_does(pairs):
    checked = 0
    for ours, real in pairs:
        if real["type"] not in AS_THE_CLASS or real.get("error"):
            continue
        assert ours["state"] == "running", f"{real['name']}: the class builds it, ours: {ours['state']}"
        for m in compare(ours, real):
            assert m.within, (f"{real['name']} ({real['type']}): {m.kind} {m.distance} m, {m.heading} deg apart "
                              f"(ours {m.ours}, the class's {m.real})")
            checked += 1
    assert checked


def test_docs_give_the_measured_differences_of_every_type(pairs):
    table = differences_markdown(differences(pairs))
    assert table in (REPO / "docs" / "scenarios.md").read_text(), (
        "docs/scenarios.md's placement table is not the measured one: run benchmarks/scenario_placements.py and "
        "paste its table\n" + table)


def test_docs_say_for_every_type_the_world_runs_whether_it_is_placed_as_the_real_class():
    from tools.collect.base.scenario_types import PLACEABLE

    assert set(PLACEMENT) == set(PLACEABLE)
    assert placement_markdown() in (REPO / "docs" / "scenarios.md").read_text()


def test_the_comparison_matches_by_kind_nearest_first_and_flows_by_source_and_sink():
    car = {"kind": "car", "x": 0.0, "y": 0.0, "yaw": 0.0}
    ours = {"actors": [car, {**car, "x": 10.0}, {"kind": "cone", "x": 5.0, "y": 0.0, "yaw": 90.0}],
            "flows": [{"source": [0.0, 0.0], "sink": [50.0, 0.0]}]}
    real = {"actors": [{**car, "x": 10.5, "yaw": 5.0}, {**car, "x": 0.2}, {"kind": "cone", "x": 5.0, "y": 0.0,
                                                                          "yaw": 270.0}],
            "flows": [{"source": [0.0, 0.5], "sink": [52.0, 0.0]}]}
    by_kind = {(m.kind, round(m.distance, 2), round(m.heading or 0.0, 1)) for m in compare(ours, real)}
    # a cone has no front: 90 and 270 degrees are the same
    assert by_kind == {("car", 0.2, 0.0), ("car", 0.5, 5.0), ("cone", 0.0, 0.0), ("flow", 2.0, 0.0)}
    assert [m.within for m in compare(ours, real) if m.kind == "flow"] == [False]
    assert MATCH_M == 1.0 and MATCH_DEG == 10.0
    lone = compare({"actors": [], "flows": []}, real)
    assert all(m.distance is None and m.ours is None for m in lone) and len(lone) == 4
    assert real_record({"name": "a", "type": "Accident", "actors": [
        {"kind": "prop", "blueprint": "static.prop.warningaccident", "x": 1, "y": 2, "yaw": 3},
        {"kind": "vehicle", "blueprint": "vehicle.bh.crossbike", "base_type": "bicycle", "x": 1, "y": 2, "yaw": 3},
        {"kind": "walker", "blueprint": "walker.pedestrian.0001", "x": 1, "y": 2, "yaw": 3}],
        "flows": []})["actors"][0]["kind"] == "warning prop"


def test_placements_records_what_a_run_starts_without_a_world(town_xodr, tmp_path):
    """The stand-in world records: an Accident block on the test grid started as a run starts it, nothing simulated:
    the police car and two cars in a row in the ego's lane, offset to its right, and the warning prop."""
    from tools.collect.base.route_gen import generate_routes
    from tools.collect.base.routes import read_routes
    from tools.collect.base.town import Town

    (path,) = generate_routes(str(town_xodr), count=1, out=str(tmp_path), seed=3, scenarios="Accident")
    (route,) = read_routes(path)
    (rec,) = placements(route, Town(town_xodr).carla_map, seed=0)
    assert rec["state"] == "running" and not rec["flows"]
    assert sorted(a["kind"] for a in rec["actors"]) == ["car", "car", "car", "warning prop"]
    cars = [a for a in rec["actors"] if a["kind"] == "car"]
    assert all(a["cls"] == sem.CAR and a["speed"] == 0.0 for a in cars)
    gaps = sorted(round(float(np.hypot(a["x"] - cars[0]["x"], a["y"] - cars[0]["y"]))) for a in cars)
    assert gaps == [0, 10, 16]  # the police car, the first car 10 m on, the second 6 m after it
