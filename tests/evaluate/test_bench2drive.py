"""Bench2Drive's metrics (success rate, the five abilities, efficiency; smoothness said not computable) and the
leaderboard 2.1 score beside 2.0, over evaluation roots of real result files written by results.write_result into a
real Layout with a real manifest, as an evaluation writes them; run.json written by hand with the dense route's
junction flags. Nothing is driven here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import PYTHON, run_bin, run_tool, tree

from tools.collect.base.config import CollectSettings
from tools.core import atomic
from tools.core.errors import ToolError
from tools.dataset.layout import Layout, RunKey
from tools.dataset.leaderboard_scores import VERSIONS, penalty_21, score_version
from tools.dataset.manifest import update_manifest
from tools.dataset.results import (
    COMPLETED,
    FAILED,
    FAILED_BLOCKED,
    FAILED_SIMULATION,
    INFRACTION_KEYS,
    PERFECT,
    RouteRecord,
    write_result,
)
from tools.dataset.score import aggregate, score_root
from tools.evaluate.bench2drive import ABILITIES, bench2drive_metrics, junction_fraction, write_bench2drive
from tools.evaluate.run import EVALUATION_FORMAT

SLOW = "Average speed is {}% of the surrounding traffic's one"
OFF_LANE = "Agent went outside its route lanes for about 10.0 meters (10.0% of the completed route)"


def run_key(scenario: str, route_id: int) -> RunKey:
    return RunKey.for_route(scenario, "bench2drive220", str(route_id), 0)


def make_root(path: Path, keys: list[RunKey]) -> Layout:
    """An evaluation root whose manifest plans `keys` (Bench2Drive's route ids), as bin/evaluate writes it."""
    layout = Layout(path)
    update_manifest(layout, {"routes_dir": "/routes", "repetitions": 1, "settings": {}, "argv": []},
                    {str(k): {"route": "/routes/bench2drive220.xml", "route_id": k.name.split("_route")[1][:-5],
                              "repetition": 0} for k in keys})
    settings = CollectSettings(agent="expert", record=False).to_dict()
    layout.evaluation.write_text(json.dumps({"format": EVALUATION_FORMAT, "agent": "expert", "checkpoint": None,
                                             "routes_dir": "/routes", "settings": settings}))
    return Layout(path)


def write_run_json(layout: Layout, key: RunKey, length: int, junction_at: int | None) -> None:
    """The run.json of a straight route, points 1 m apart, inside a junction from `junction_at` metres on for 10 m."""
    junction = [junction_at is not None and junction_at <= i < junction_at + 10 for i in range(length + 1)]
    atomic.write_json(layout.run_settings(key), {"town": "Town12", "dense_route": {
        "xy": [[float(i), 0.0] for i in range(length + 1)], "yaw": [0.0] * (length + 1),
        "option": [4] * (length + 1), "junction": junction}})


def record(route_id: int, status: str, completion: float = 100.0, **infractions: list[str]) -> RouteRecord:
    r = RouteRecord(str(route_id), status, route_completion=completion, route_length=100.0)
    r.infractions.update(infractions)
    return r


OVERTAKE_OK = run_key("Accident", 1000)  # Overtaking
OVERTAKE_HIT = run_key("ParkedObstacle", 1001)  # Overtaking: completed with a collision, no success
MERGE_SLOW = run_key("HighwayExit", 1002)  # Merging: completed, only min-speed checkpoints: a success
MERGE_BLOCKED = run_key("SignalizedJunctionLeftTurn", 1003)  # Merging and Traffic_Signs: blocked past its junction
RED_LIGHT = run_key("OppositeVehicleRunningRedLight", 1004)  # Emergency_Brake and Traffic_Signs: ran a red light
YIELD_FAIL = run_key("YieldToEmergencyVehicle", 1005)  # Give_Way: did not yield
INVADING_OK = run_key("InvadingTurn", 1006)  # Give_Way
CRASHED = run_key("PedestrianCrossing", 1007)  # Emergency_Brake and Traffic_Signs: the simulation crashed
BENCH = [OVERTAKE_OK, OVERTAKE_HIT, MERGE_SLOW, MERGE_BLOCKED, RED_LIGHT, YIELD_FAIL, INVADING_OK, CRASHED]


@pytest.fixture
def bench(tmp_path) -> Layout:
    layout = make_root(tmp_path / "eval", BENCH)
    write_result(layout, OVERTAKE_OK, record(1000, PERFECT))
    write_result(layout, OVERTAKE_HIT, record(1001, COMPLETED, collisions_layout=["hit a cone"]))
    write_result(layout, MERGE_SLOW, record(1002, COMPLETED, min_speed_infractions=[
        SLOW.format(80.0), SLOW.format(1200.0)]))  # above 1000 %: left out of the efficiency
    write_result(layout, MERGE_BLOCKED, record(1003, FAILED_BLOCKED, 60.0, vehicle_blocked=["blocked"],
                                               min_speed_infractions=[SLOW.format(50.0), SLOW.format(40.0)]))
    write_run_json(layout, MERGE_BLOCKED, 100, junction_at=20)  # passed: 0.6 > (20 + 1 + 8) / 101
    write_result(layout, RED_LIGHT, record(1004, FAILED, 60.0, red_light=["ran a red light"]))
    write_run_json(layout, RED_LIGHT, 100, junction_at=20)  # passed the junction, but through a red light
    write_result(layout, YIELD_FAIL, record(1005, COMPLETED, yield_emergency_vehicle_infractions=["did not yield"]))
    write_result(layout, INVADING_OK, record(1006, PERFECT))
    write_result(layout, CRASHED, record(1007, FAILED_SIMULATION, 90.0))
    return layout


def test_success_rate_and_driving_score_count_every_planned_run_and_ignore_min_speed(bench):
    metrics = write_bench2drive(bench, score_root(bench))
    merged = metrics.merged
    assert merged["eval num"] == 8
    assert merged["success rate"] == 3 / 8  # OVERTAKE_OK, MERGE_SLOW (min speed only), INVADING_OK
    # Each run's own score_composed: 100, 65, 100, 60, 42, 70, 100 and the crashed run's 0.
    assert merged["driving score"] == pytest.approx((100 + 65 + 100 + 60 + 42 + 70 + 100 + 0) / 8)
    assert json.loads(bench.bench2drive_merged.read_text()) == json.loads(json.dumps(merged))


def test_each_ability_is_its_runs_successes_and_traffic_signs_credits_a_clean_pass_of_the_first_junction(bench):
    metrics = bench2drive_metrics(bench, aggregate(bench))
    assert metrics.counts == {"Overtaking": (1, 2), "Merging": (1, 2), "Emergency_Brake": (0, 2),
                              "Give_Way": (1, 2), "Traffic_Signs": (1, 3)}
    ability = json.loads(json.dumps(metrics.ability))
    assert list(ability)[:5] == list(ABILITIES)  # Bench2Drive's keys, in its order
    assert ability["Overtaking"] == 0.5 and ability["Emergency_Brake"] == 0.0
    assert ability["Traffic_Signs"] == pytest.approx(1 / 3)  # the blocked left turn, past its junction clean
    assert ability["mean"] == pytest.approx((0.5 + 0.5 + 0 + 0.5 + 1 / 3) / 5)
    assert ability["crashed"] == [["PedestrianCrossing", "RouteScenario_1007_rep0"]]
    assert metrics.junction_credit == 1 and metrics.no_junction == 0


def test_efficiency_is_the_mean_over_runs_of_their_min_speed_percentages_and_smoothness_is_said_not_computed(bench):
    metrics = bench2drive_metrics(bench, aggregate(bench))
    assert metrics.merged["driving efficiency"] == pytest.approx((80.0 + (50.0 + 40.0) / 2) / 2)
    assert metrics.merged["driving smoothness"] is None
    assert "per-frame measurements" in metrics.merged["not computed"]["driving smoothness"]
    summary = metrics.summary()
    assert "success rate        37.500 %  (3 of 8" in summary and "Traffic Signs       33.333 %  (1 of 3)" in summary
    assert "efficiency          62.500 %" in summary and "smoothness        not computed" in summary


def test_without_a_min_speed_checkpoint_efficiency_is_not_computed_and_an_ability_without_runs_has_no_figure(
        tmp_path):
    layout = make_root(tmp_path / "eval", [OVERTAKE_OK])
    write_result(layout, OVERTAKE_OK, record(1000, PERFECT))
    metrics = bench2drive_metrics(layout, aggregate(layout))
    assert metrics.merged["driving efficiency"] is None
    assert "no run recorded a minimum-speed checkpoint" in metrics.merged["not computed"]["driving efficiency"]
    assert metrics.ability["Merging"] is None and metrics.ability["mean"] == 1.0  # over the one ability with runs
    assert "Merging                n/a" in metrics.summary() and "efficiency        not computed" in metrics.summary()


def test_merged_records_are_bench2drives_shape_sorted_by_route_id_without_index(bench):
    records = write_bench2drive(bench, score_root(bench)).merged["_checkpoint"]["records"]
    assert [r["route_id"] for r in records] == [f"RouteScenario_{i}_rep0" for i in range(1007, 999, -1)]
    by_id = {r["route_id"]: r for r in records}
    blocked = by_id["RouteScenario_1003_rep0"]
    assert "index" not in blocked and blocked["status"] == FAILED_BLOCKED
    assert (blocked["scenario_name"], blocked["town_name"]) == ("SignalizedJunctionLeftTurn", "Town12")
    assert blocked["route_id"].split("_")[1] == "1003"  # how ability_benchmark.py finds a route's record
    assert set(blocked["infractions"]) == set(INFRACTION_KEYS)
    assert set(blocked["scores"]) == {"score_route", "score_penalty", "score_composed"}


def test_the_junction_a_traffic_signs_run_must_pass_is_bench2drives_waypoint_count_in_metres(tmp_path):
    layout = make_root(tmp_path / "eval", [MERGE_BLOCKED])
    write_run_json(layout, MERGE_BLOCKED, 100, junction_at=20)
    assert junction_fraction(json.loads(layout.run_settings(MERGE_BLOCKED).read_text())) == pytest.approx(29 / 101)
    write_run_json(layout, MERGE_BLOCKED, 100, junction_at=None)
    assert junction_fraction(json.loads(layout.run_settings(MERGE_BLOCKED).read_text())) is None
    assert junction_fraction({}) is None


def test_the_21_penalty_adds_infractions_up_and_multiplies_the_off_lane_share(tmp_path):
    key = run_key("Accident", 1000)
    layout = make_root(tmp_path / "eval", [key])
    write_result(layout, key, record(1000, COMPLETED, 80.0, collisions_vehicle=["a", "b"], red_light=["c"],
                                     min_speed_infractions=[SLOW.format(60.0)], outside_route_lanes=[OFF_LANE]))
    # By hand: 2 x 0.7 + 0.4 + 0.4 x (1 - 0.6) = 1.96; (1 - 0.10) / (1 + 1.96) = 0.304054...
    penalty = 0.9 / 2.96
    run = aggregate(layout, VERSIONS["2.1"]).runs[0]
    assert run.record["scores"] == {"score_route": 80.0, "score_penalty": round(penalty, 6),
                                    "score_composed": round(80.0 * penalty, 6)}
    # 2.0 is the record's own: 0.6 x 0.6 x 0.7 (our writer judges neither min speed nor off-lane in the penalty).
    assert aggregate(layout).runs[0].record["scores"] == {"score_route": 80.0, "score_penalty": 0.252,
                                                          "score_composed": 20.16}
    for kind, value in (("collisions_pedestrian", 1.0), ("collisions_layout", 0.6), ("stop_infraction", 0.25),
                        ("scenario_timeouts", 0.4), ("yield_emergency_vehicle_infractions", 0.4)):
        assert penalty_21({kind: ["x"]}) == pytest.approx(1 / (1 + value))
    assert penalty_21({"route_dev": ["x"], "vehicle_blocked": ["x"], "route_timeout": ["x"]}) == 1.0
    # Bench2Drive's fork records every min-speed checkpoint; one at or above 100 % is no infraction of the leaderboard.
    assert penalty_21({"min_speed_infractions": [SLOW.format(100.0), SLOW.format(1479.0)]}) == 1.0
    assert penalty_21({"min_speed_infractions": ["Average speed is low"]}) == pytest.approx(1 / 1.4)  # no percentage


def test_the_20_aggregate_is_unchanged_and_21_is_named_in_result_json_and_the_summary(bench):
    before = score_root(bench)
    data_20 = bench.evaluation_result.read_bytes()
    assert "score_version" not in before.data and "leaderboard 2.0 scores" in before.summary("the expert")
    agg = score_root(bench, score_version("2.1"))
    assert agg.data["score_version"] == "2.1" and "leaderboard 2.1 scores" in agg.summary("the expert")
    assert json.loads(bench.evaluation_result.read_text())["score_version"] == "2.1"
    score_root(bench, score_version(2.0))  # Fire hands a typed 2.0 over as a float
    assert bench.evaluation_result.read_bytes() == data_20


def test_score_with_bench2drive_prints_both_and_writes_the_merged_files(bench):
    proc = run_bin("evaluate", "score", "--root", bench.root, "--score", "2.1", "--bench2drive")
    assert proc.returncode == 0, proc.stderr
    assert "leaderboard 2.1 scores" in proc.stdout and "Bench2Drive metrics over all 8 route runs" in proc.stdout
    assert json.loads(bench.evaluation_result.read_text())["score_version"] == "2.1"
    assert json.loads(bench.bench2drive_merged.read_text())["score_version"] == "2.1"
    assert json.loads(bench.bench2drive_ability.read_text())["Give_Way"] == 0.5


def one_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaluate: "), proc.stderr
    return lines[0]


def test_an_unknown_score_and_a_root_that_is_not_an_evaluation_root_are_one_line_and_write_nothing(bench, tmp_path):
    before = tree(bench.root)
    line = one_line(run_tool(PYTHON, "-m", "tools.evaluate", "score", "--root", bench.root, "--score", "3"))
    assert "--score 3: unknown leaderboard score; give --score 2.0 or --score 2.1" in line
    assert tree(bench.root) == before
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not an evaluation root" in one_line(run_bin("evaluate", "score", "--root", plain, "--bench2drive"))
    assert list(plain.iterdir()) == []
    with pytest.raises(ToolError, match="--score 2.2"):
        score_version("2.2")
