"""Bench2Drive's metrics (success rate, the five abilities, efficiency and smoothness) and the leaderboard 2.1 score
beside 2.0, over evaluation roots of real result files written by results.write_result into a real Layout with a real
manifest, as an evaluation writes them; run.json and metric_info.json written by hand (the dense route's junction
flags; the ego's kinematics). Smoothness against hand-computed cases, scipy's filter and, where this machine has
Bench2Drive's source, its own script. Nothing is driven here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import PYTHON, run_bin, run_tool, tree

from tools.collect.base.config import CollectSettings
from tools.core import atomic
from tools.core.errors import ToolError
from tools.dataset.layout import Layout, RunKey
from tools.dataset.leaderboard_scores import VERSIONS, penalty_21, score_version
from tools.dataset.manifest import update_manifest
from tools.dataset.metric_info import KEYS, MetricInfoTrack, read_metric_info
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
from tools.evaluate.bench2drive import (
    ABILITIES,
    LEAST_ROUTES_PER_TOWN,
    ROUTES_IN_CHECKOUT,
    bench2drive_metrics,
    benchmark_routes,
    junction_fraction,
    routes_per_town,
    run_smoothness,
    savgol_filter,
    write_bench2drive,
)
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


def test_efficiency_is_the_mean_over_runs_of_their_min_speed_percentages_and_smoothness_needs_metric_info(bench):
    """Records without Bench2Drive's checkpoints (as the CARLA leaderboard writes them): their messages' percentages,
    said not comparable; no metric_info.json anywhere: smoothness not computed, and said why."""
    metrics = bench2drive_metrics(bench, aggregate(bench))
    assert metrics.merged["driving efficiency"] == pytest.approx((80.0 + (50.0 + 40.0) / 2) / 2)
    assert metrics.merged["driving smoothness"] is None
    assert "no run has a metric_info.json" in metrics.merged["not computed"]["driving smoothness"]
    assert "driving efficiency" not in metrics.merged["not computed"]
    summary = metrics.summary()
    assert "success rate        37.500 %  (3 of 8" in summary and "Traffic Signs       33.333 %  (1 of 3)" in summary
    assert "driving efficiency   62.500 %" in summary and "2 of them with the upstream leaderboard's" in summary
    assert "driving smoothness  not computed" in summary


def test_without_a_min_speed_checkpoint_efficiency_is_not_computed_and_an_ability_without_runs_has_no_figure(
        tmp_path):
    layout = make_root(tmp_path / "eval", [OVERTAKE_OK])
    write_result(layout, OVERTAKE_OK, record(1000, PERFECT))
    metrics = bench2drive_metrics(layout, aggregate(layout))
    assert metrics.merged["driving efficiency"] is None
    assert "no run recorded a minimum-speed checkpoint" in metrics.merged["not computed"]["driving efficiency"]
    assert metrics.ability["Merging"] is None and metrics.ability["mean"] == 1.0  # over the one ability with runs
    assert "Merging                n/a" in metrics.summary()
    assert "driving efficiency  not computed" in metrics.summary()


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
    # 2.0 is the record's own, which our writer computes as the leaderboard 2.0 does: 0.6 x 0.6 x 0.7, the min-speed
    # event's 1 - 0.3 x (1 - 0.6) and the off-lane share's 1 - 0.1 (rounded to 4 digits, as our records are).
    assert aggregate(layout).runs[0].record["scores"] == {"score_route": 80.0, "score_penalty": 0.1996,
                                                          "score_composed": 15.9667}
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


# ----------------------------------------------------------------------------------- efficiency and smoothness

#: Bench2Drive's source where this machine keeps it (a bare clone); the comparisons with its script skip elsewhere.
BENCH2DRIVE_GIT = Path("/work/.mirror/Thinklab-SJTU+Bench2Drive/repo")
BENCH2DRIVE_COMMIT = "7ec25d1c9f75"


def bench2drive_script(tmp_path: Path):
    """Bench2Drive's tools/efficiency_smoothness_benchmark.py at release 0.0.4, imported as it is (it needs scipy)."""
    pytest.importorskip("scipy.signal")
    if not BENCH2DRIVE_GIT.is_dir():
        pytest.skip(f"no copy of Bench2Drive's source at {BENCH2DRIVE_GIT}")
    source = subprocess.run(["git", f"--git-dir={BENCH2DRIVE_GIT}", "show",
                             f"{BENCH2DRIVE_COMMIT}:tools/efficiency_smoothness_benchmark.py"],
                            capture_output=True, text=True, check=True).stdout
    path = tmp_path / "efficiency_smoothness_benchmark.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("efficiency_smoothness_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_info(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """n ticks of kinematics noisy enough that some 20-tick windows are comfortable and some not."""
    yaw = np.cumsum(rng.normal(0.0, 0.3, n))
    c, s = np.cos(np.radians(yaw)), np.sin(np.radians(yaw))
    scale = rng.choice([0.05, 0.3, 1.5])
    return {"acceleration": np.c_[rng.normal(0.0, scale, (n, 2)), np.zeros(n)],
            "angular_velocity": np.c_[np.zeros((n, 2)), rng.normal(0.0, scale, n)],
            "forward_vector": np.c_[c, s, np.zeros(n)], "right_vector": np.c_[-s, c, np.zeros(n)],
            "location": rng.normal(size=(n, 3)), "rotation": np.c_[np.zeros((n, 2)), yaw]}


def test_our_savitzky_golay_filter_is_scipys_with_its_interp_edges():
    signal = pytest.importorskip("scipy.signal")
    rng = np.random.default_rng(0)
    for n in range(3, 30):  # windows of 3 to 7, the even ones only as long as the values (as theirs get them)
        y = rng.normal(0.0, 5.0, n)
        window = min(7, n)
        for deriv, delta in ((0, 1.0), (1, 0.1)):
            ours = savgol_filter(y, window, 2, deriv, delta)
            theirs = signal.savgol_filter(y, window_length=window, polyorder=2, deriv=deriv, delta=delta)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
    with pytest.raises(ValueError):
        savgol_filter(np.zeros(2), 2, 2)


def test_smoothness_by_hand_windows_of_20_ticks_against_the_bounds():
    """A yaw rate of 0.9 deg/s passes their 0.95 bound, 1.0 fails (their degrees against nuPlan's radians); a
    longitudinal acceleration that rises 0.40 m/s^2 a tick has a jerk of 4.0 at their 0.1 s spacing, within 4.13,
    one that rises 0.45, 4.5: uncomfortable; the ticks after the last whole window count for nothing."""
    def info(n: int, yaw_rate: float = 0.0, lon: np.ndarray | None = None) -> dict[str, np.ndarray]:
        acc = np.zeros((n, 3))
        if lon is not None:
            acc[:, 0] = lon
        return {"acceleration": acc, "angular_velocity": np.c_[np.zeros((n, 2)), np.full(n, yaw_rate)],
                "forward_vector": np.tile([1.0, 0.0, 0.0], (n, 1)), "right_vector": np.tile([0.0, 1.0, 0.0], (n, 1)),
                "location": np.zeros((n, 3)), "rotation": np.zeros((n, 3))}

    assert run_smoothness(info(45, 0.0)) == 1.0
    windows = {k: np.concatenate([a, b, c]) for k, a, b, c in zip(
        KEYS, info(20, 0.9).values(), info(20, 1.0).values(), info(5, 5.0).values(), strict=True)}
    assert run_smoothness(windows) == 0.5  # 0.9 deg/s: comfortable; 1.0: not; the last 5 ticks: no window
    assert run_smoothness(info(5, lon=0.40 * np.arange(5))) == 1.0  # one window of 5 ticks, filter window 5
    assert run_smoothness(info(5, lon=0.45 * np.arange(5))) == 0.0
    assert run_smoothness(info(2)) is None  # theirs raise: too short for the filter


def test_smoothness_is_bench2drives_own_script_on_synthetic_runs(tmp_path):
    script = bench2drive_script(tmp_path)
    rng = np.random.default_rng(1)
    ours, theirs = [], []
    for n in [3, 4, 6, 7, 19, 20, 21, 40, 59, 133, *rng.integers(3, 300, 30).tolist()]:
        info = synthetic_info(rng, int(n))
        ours.append(run_smoothness(info))
        theirs.append(script.seg_compute_comfort_metric(**info))
    assert ours == theirs
    assert 0.1 < np.mean(theirs) < 0.9  # the runs exercise both sides of the bounds


def test_the_metric_info_track_is_carlas_conventions_and_bench2drives_keys(tmp_path):
    """Facing south (CARLA's yaw 90, y down), speeding up by 0.02 m/s a tick and turning 1 degree a tick (20 deg/s at
    20 Hz): acceleration along +y, angular velocity in deg/s, right vector -x (west), in the file's tick order."""
    track = MetricInfoTrack(0.05)
    for i in range(3):
        track.add(10.0, 5.0 + i, 90.0 + i, 0.02 * i)
    path = tmp_path / "metric_info.json"
    track.write(path)
    data = json.loads(path.read_text())
    assert list(data) == ["0", "1", "2"] and list(data["1"]) == list(KEYS)
    assert data["0"]["acceleration"] == [0.0, 0.0, 0.0] and data["0"]["angular_velocity"] == [0.0, 0.0, 0.0]
    assert data["0"]["forward_vector"] == [0.0, 1.0, 0.0] and data["0"]["right_vector"] == [-1.0, 0.0, 0.0]
    assert data["1"]["acceleration"] == pytest.approx([-0.006981, 0.399939, 0.0], abs=1e-6)  # v = 0.02 at 91 deg
    assert data["2"]["angular_velocity"] == pytest.approx([0.0, 0.0, 20.0])
    assert data["2"]["location"] == [10.0, 7.0, 0.0] and data["2"]["rotation"] == [0.0, 0.0, 92.0]
    assert read_metric_info(path)["angular_velocity"].shape == (3, 3)


def test_bench2drives_checkpoints_give_the_efficiency_the_merged_records_and_a_driving_score_without_min_speed(
        tmp_path):
    """A run whose record holds the leaderboard's slow checkpoint (60%: its 2.0 DS 88) and Bench2Drive's 20 in its meta:
    efficiency the mean of Bench2Drive's up to 1000%; merged.json carries them as their fork records them, with the
    run's score unpenalised (DS 100), under 2.0 and 2.1 alike."""
    layout = make_root(tmp_path / "eval", [OVERTAKE_OK])
    rec = record(1000, COMPLETED, min_speed_infractions=[SLOW.format(60.0)])
    rec.bench2drive_min_speed = [50.0, 150.0, 100, 1200.0]
    write_result(layout, OVERTAKE_OK, rec)
    assert aggregate(layout).runs[0].record["scores"]["score_composed"] == 88.0  # 1 - 0.3 x 0.4
    for version in ("2.0", "2.1"):
        metrics = write_bench2drive(layout, score_root(layout, score_version(version)))
        merged = json.loads(layout.bench2drive_merged.read_text())
        (merged_record,) = merged["_checkpoint"]["records"]
        assert merged_record["infractions"]["min_speed_infractions"] == [
            SLOW.format("50.0"), SLOW.format("150.0"), SLOW.format(100), SLOW.format("1200.0")]
        assert merged_record["num_infractions"] == 4 and merged_record["scores"]["score_composed"] == 100.0
        assert merged["driving score"] == 100.0 and merged["success rate"] == 1.0
        assert merged["driving efficiency"] == pytest.approx(100.0)  # (50 + 150 + 100) / 3
        assert "efficiency" in metrics.summary() and "upstream" not in metrics.summary()


def test_bench2drives_script_reads_our_merged_json_and_run_folders_to_our_figures(tmp_path):
    """merged.json with -m ROOT/data: efficiency_smoothness_benchmark.py finds every run's metric_info.json by its
    save_name and computes the efficiency and smoothness we write."""
    script = bench2drive_script(tmp_path)
    layout = make_root(tmp_path / "eval", [OVERTAKE_OK, MERGE_SLOW, INVADING_OK])
    rng = np.random.default_rng(2)
    for i, key in enumerate((OVERTAKE_OK, MERGE_SLOW, INVADING_OK)):
        rec = record(1000 + i, COMPLETED)
        rec.bench2drive_min_speed = rng.uniform(20.0, 400.0, 19).round(2).tolist() + [100]
        write_result(layout, key, rec)
        track = MetricInfoTrack(0.05)
        for tick in range(int(rng.integers(30, 120))):
            track.add(0.0, 0.0, float(rng.normal(0.0, 0.5 + i)) * tick, 8.0 + float(rng.normal(0.0, 0.05 * (i + 1))))
        track.write(layout.metric_info(key))
    merged = write_bench2drive(layout, score_root(layout)).merged
    all_data, efficiencies = script.read_from_json(str(layout.bench2drive_merged), str(layout.root / "data"))
    smoothness = [script.seg_compute_comfort_metric(**run) for run in all_data]
    assert merged["driving efficiency"] == pytest.approx(sum(efficiencies) / len(efficiencies))
    assert merged["driving smoothness"] == pytest.approx(sum(smoothness) / len(smoothness))
    assert "not computed" not in merged


# ----------------------------------------------------------------------------- the field's protocol (bin/demo)


def benchmark_file(path: Path, towns: list[str]) -> Path:
    """A route file of Bench2Drive-220's shape: one <routes>, a <route id town> a route, a scenario each."""
    routes = "".join(
        f'<route id="{2000 + i}" town="{town}"><waypoints><position x="{i}.0" y="0.0" z="0.0"/>'
        f'<position x="{i}.0" y="50.0" z="0.0"/></waypoints><scenarios><scenario name="Accident_1" type="Accident">'
        f'<trigger_point x="{i}.0" y="10.0" z="0.0" yaw="90"/></scenario></scenarios></route>'
        for i, town in enumerate(towns))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>\n<routes>{routes}</routes>\n')
    return path


def test_the_benchmark_is_a_checkouts_route_file_or_a_file_and_a_bad_path_is_one_line(tmp_path):
    file = benchmark_file(tmp_path / "Bench2Drive" / ROUTES_IN_CHECKOUT, ["Town12", "Town13"])
    assert benchmark_routes(tmp_path / "Bench2Drive") == file
    assert benchmark_routes(file) == file
    (tmp_path / "empty.xml").write_text("<routes></routes>")
    (tmp_path / "broken.xml").write_text("<routes><route")
    for path, why in ((tmp_path, f"no {ROUTES_IN_CHECKOUT} in that folder"),
                      (tmp_path / "missing.xml", "no such file or folder"),
                      (tmp_path / "empty.xml", "no <route> in the file"),
                      (tmp_path / "broken.xml", "malformed route XML")):
        with pytest.raises(ToolError) as e:
            benchmark_routes(path)
        assert str(e.value).startswith(f"--bench2drive {path}: {why}") and "\n" not in str(e.value)


def test_training_routes_are_shared_as_the_benchmarks_with_a_least_per_town(tmp_path):
    file = benchmark_file(tmp_path / "b2d.xml", ["Town12"] * 6 + ["Town13"] * 3 + ["Town01"])
    shares = routes_per_town(file, ["Town01", "Town12", "Town13", "Town02"], 100)
    assert shares == {"Town01": 10, "Town12": 60, "Town13": 30, "Town02": LEAST_ROUTES_PER_TOWN}
    assert routes_per_town(None, ["Town01", "Town02"], 10) == {"Town01": 5, "Town02": 5}
