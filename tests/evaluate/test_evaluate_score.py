"""Closed-loop evaluation's bookkeeping: the leaderboard 2.0 aggregate over every planned run (ROOT/result.json),
when a run of an evaluation root is final, and bin/evaluate's refusals. Result files are real ones, written by
results.write_result into a real Layout with a real manifest; nothing is driven here."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import PYTHON, run_bin, run_tool, tree

from tools.collect.base.config import CollectSettings
from tools.dataset.claims import RunClaim, claim_run
from tools.dataset.layout import Layout, RunKey
from tools.dataset.manifest import update_manifest
from tools.dataset.results import (
    COMPLETED,
    CRASH_STATUSES,
    DRIVING_STATUSES,
    FAILED,
    FAILED_BLOCKED,
    FAILED_SIMULATION,
    INFRACTION_KEYS,
    PERFECT,
    SUCCESS_STATUSES,
    RouteRecord,
    RunState,
    run_state,
    write_result,
)
from tools.dataset.score import aggregate, outside_lanes_km, score_root
from tools.evaluate.run import EVALUATION_FORMAT

PERFECT_RUN = RunKey("Alpha", "town_0000_rep0")
COMPLETED_RUN = RunKey("Alpha", "town_0001_rep0")
FAILED_RUN = RunKey("Beta", "town_0002_rep0")
CRASHED_RUN = RunKey("Beta", "town_0003_rep0")  # its result says the simulation crashed
DIED_RUN = RunKey("Beta", "town_0004_rep0")  # an attempt was counted, its process died without a result
MISSING_RUN = RunKey("Gamma", "town_0005_rep0")  # planned, nothing on disk
PLANNED = [PERFECT_RUN, COMPLETED_RUN, FAILED_RUN, CRASHED_RUN, DIED_RUN, MISSING_RUN]


def infractions(**counts: int) -> dict[str, list[str]]:
    return {k: [f"{k} {i}" for i in range(counts.get(k, 0))] for k in INFRACTION_KEYS}


def make_root(path: Path, keys: list[RunKey], evaluation: bool = True, agent: str = "expert",
              checkpoint: str = "") -> Layout:
    """A root with a manifest planning `keys`; an evaluation root (evaluation.json as bin/evaluate writes it)."""
    layout = Layout(path)
    update_manifest(layout, {"routes_dir": "/routes", "repetitions": 1, "settings": {}, "argv": []},
                    {str(k): {"route": f"/routes/{k.name}.xml", "route_id": k.name[:-5], "repetition": 0}
                     for k in keys})
    if evaluation:
        settings = CollectSettings(agent=agent, checkpoint=checkpoint, record=False).to_dict()
        layout.evaluation.write_text(json.dumps({
            "format": EVALUATION_FORMAT, "agent": agent, "checkpoint": checkpoint or None, "routes_dir": "/routes",
            "settings": settings}))
    return Layout(path)  # a fresh Layout: is_evaluation is looked at once per Layout


def attempt(layout: Layout, key: RunKey) -> None:
    """Count one attempt at a run, as a collector does before it starts it."""
    claim = claim_run(layout, key)
    assert isinstance(claim, RunClaim)
    claim.release()


@pytest.fixture
def evaluated(tmp_path) -> Layout:
    """Six planned runs: Perfect, Completed with two infractions, a failed drive at half the route, a crashed
    simulation, a run whose process died without a result, and one never started."""
    layout = make_root(tmp_path / "eval", PLANNED)
    for key in (PERFECT_RUN, COMPLETED_RUN, FAILED_RUN, CRASHED_RUN, DIED_RUN):
        attempt(layout, key)
    write_result(layout, PERFECT_RUN, RouteRecord("town_0000", PERFECT, route_completion=100.0, route_length=1000.0,
                                                  duration_game=60.0, duration_system=5.0))
    write_result(layout, COMPLETED_RUN, RouteRecord("town_0001", COMPLETED,
                                                    infractions(collisions_vehicle=1, red_light=1),
                                                    route_completion=100.0, route_length=500.0))
    write_result(layout, FAILED_RUN, RouteRecord("town_0002", FAILED, infractions(collisions_layout=1, route_timeout=1),
                                                 route_completion=50.0, route_length=2000.0))
    write_result(layout, CRASHED_RUN, RouteRecord("town_0003", FAILED_SIMULATION, infractions(collisions_vehicle=3),
                                                  route_completion=80.0, route_length=700.0))
    return layout


def test_the_means_count_every_planned_run_and_crashed_and_missing_runs_count_zero(evaluated):
    agg = score_root(evaluated)
    runs = {r.key: r for r in agg.runs}
    assert [r.key for r in agg.runs] == sorted(PLANNED, key=str)  # every planned run, none dropped
    assert {k: r.counted for k, r in runs.items()} == {
        PERFECT_RUN: "scored", COMPLETED_RUN: "scored", FAILED_RUN: "scored",
        CRASHED_RUN: "crashed", DIED_RUN: "crashed", MISSING_RUN: "missing"}
    ds = [100.0, 42.0, 32.5, 0, 0, 0]  # completion x penalty: 100 x 1, 100 x 0.6 x 0.7, 50 x 0.65
    rc = [100.0, 100.0, 50.0, 0, 0, 0]
    penalty = [1.0, 0.42, 0.65, 0, 0, 0]  # the leaderboard's empty record has penalty 0 too
    g = agg.global_record
    assert g["scores_mean"] == {"score_composed": round(sum(ds) / 6, 6), "score_route": round(sum(rc) / 6, 6),
                                "score_penalty": round(sum(penalty) / 6, 6)}
    assert agg.driving_score == pytest.approx(29.083333) and agg.route_completion == pytest.approx(41.666667)
    assert g["scores_std_dev"] == {"score_composed": round(statistics.stdev(ds), 3),
                                   "score_route": round(statistics.stdev(rc), 3),
                                   "score_penalty": round(statistics.stdev(penalty), 3)}
    # The crashed run's own scores (80 % driven) and infractions are not counted.
    assert runs[CRASHED_RUN].record["scores"] == {"score_route": 0.0, "score_penalty": 0.0, "score_composed": 0.0}
    assert runs[CRASHED_RUN].record["status"] == FAILED_SIMULATION
    assert g["status"] == "Failed"
    assert [tuple(e) for e in g["meta"]["exceptions"]] == [
        ("town_0002_rep0", 2, FAILED), ("town_0003_rep0", 3, FAILED_SIMULATION), ("town_0004_rep0", 4, "Started"),
        ("town_0005_rep0", 5, "Started")]
    assert g["meta"]["runs"] == {"total": 6, "scored": 3, "crashed": 2, "missing": 1}
    data = agg.data
    assert data["entry_status"] == "Started" and data["eligible"] is False  # a run has no result yet
    assert data["_checkpoint"]["progress"] == [4, 6]  # runs with a result file
    assert len(data["values"]) == len(data["labels"]) == 15
    assert data["values"][:3] == [str(g["scores_mean"][k]) for k in ("score_composed", "score_route", "score_penalty")]
    assert json.loads(evaluated.evaluation_result.read_text()) == json.loads(json.dumps(data))  # written as returned
    summary = agg.summary("the expert")
    assert "driving score       29.083" in summary and "counted with score 0: 2 crashed, 1 without a result" in summary
    assert f"{MISSING_RUN}  no result (pending)" in summary and str(evaluated.evaluation_result) in summary


def test_infractions_per_km_divide_by_the_distance_driven_not_the_route_length(evaluated):
    g = aggregate(evaluated).global_record
    km = 1.0 * 1.0 + 0.5 * 1.0 + 2.0 * 0.5  # route length x completion of the counted runs; the crashed one: 0
    assert g["meta"]["km_driven"] == km and g["meta"]["total_length"] == 4200.0  # metres, the crashed run's 700 too
    expected = dict.fromkeys(INFRACTION_KEYS, 0.0)
    expected.update(collisions_vehicle=round(1 / km, 3), red_light=round(1 / km, 3),
                    collisions_layout=round(1 / km, 3), route_timeout=round(1 / km, 3))
    assert g["infractions"] == expected  # the crashed run's 3 collisions are not counted


def test_off_lane_distance_is_read_from_the_leaderboards_message_and_not_divided(tmp_path):
    layout = make_root(tmp_path / "eval", [PERFECT_RUN])
    message = "Agent went outside its route lanes for about 123.4 meters (12.34% of the completed route)"
    record = RouteRecord("town_0000", COMPLETED, route_completion=100.0, route_length=1000.0)
    record.infractions["outside_route_lanes"] = [message]
    write_result(layout, PERFECT_RUN, record)
    agg = score_root(layout)
    assert outside_lanes_km([message]) == pytest.approx(0.1234) and outside_lanes_km(["elsewhere"]) == 0.0
    assert agg.global_record["infractions"]["outside_route_lanes"] == 0.123
    assert agg.data["entry_status"] == "Finished" and agg.data["eligible"] is True
    assert agg.global_record["scores_std_dev"] == dict.fromkeys(("score_composed", "score_route", "score_penalty"), 0)
    assert agg.global_record["status"] == COMPLETED


def test_a_crashed_run_without_missing_ones_makes_the_entry_crashed_and_not_eligible(tmp_path):
    layout = make_root(tmp_path / "eval", [PERFECT_RUN, CRASHED_RUN])
    write_result(layout, PERFECT_RUN, RouteRecord("town_0000", PERFECT, route_completion=100.0, route_length=100.0))
    write_result(layout, CRASHED_RUN, RouteRecord("town_0003", FAILED_SIMULATION))
    agg = score_root(layout)
    assert (agg.data["entry_status"], agg.data["eligible"], agg.driving_score) == ("Crashed", False, 50.0)


@pytest.mark.parametrize("status", sorted(DRIVING_STATUSES - SUCCESS_STATUSES))
def test_a_failed_drive_is_finished_in_an_evaluation_root_and_failed_in_a_collection_root(tmp_path, status):
    for evaluation, expected in ((True, RunState.FINISHED), (False, RunState.FAILED)):
        layout = make_root(tmp_path / str(evaluation), [FAILED_RUN], evaluation=evaluation)
        attempt(layout, FAILED_RUN)
        write_result(layout, FAILED_RUN, RouteRecord("town_0002", status, route_completion=30.0))
        assert run_state(layout, FAILED_RUN) is expected
        claim = claim_run(layout, FAILED_RUN, max_attempts=3)  # what a rerun asks before it drives again
        if evaluation:
            assert claim is RunState.FINISHED  # final: not redone
        else:
            assert isinstance(claim, RunClaim)  # retried, as collection always did
            claim.release()


@pytest.mark.parametrize("status", sorted(CRASH_STATUSES))
def test_a_crash_status_is_retried_in_an_evaluation_root_until_max_attempts(tmp_path, status):
    layout = make_root(tmp_path / "eval", [CRASHED_RUN])
    attempt(layout, CRASHED_RUN)
    write_result(layout, CRASHED_RUN, RouteRecord("town_0003", status))
    assert run_state(layout, CRASHED_RUN) is RunState.FAILED
    claim = claim_run(layout, CRASHED_RUN, max_attempts=2)
    assert isinstance(claim, RunClaim) and claim.attempt == 2
    claim.release()
    assert claim_run(layout, CRASHED_RUN, max_attempts=2) is RunState.FAILED  # attempts used up: left crashed
    assert json.loads(layout.result_path(CRASHED_RUN).read_text())["entry_status"] == "Crashed"


def test_a_success_is_finished_in_both_kinds_of_root(tmp_path):
    for evaluation in (True, False):
        layout = make_root(tmp_path / str(evaluation), [PERFECT_RUN], evaluation=evaluation)
        write_result(layout, PERFECT_RUN, RouteRecord("town_0000", PERFECT, route_completion=100.0))
        assert run_state(layout, PERFECT_RUN) is RunState.FINISHED


# ----------------------------------------------------------------------------- the command line


def evaluate(*args: str | Path):
    return run_tool(PYTHON, "-m", "tools.evaluate", *args)


def one_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("evaluate: "), proc.stderr
    return lines[0]


@pytest.fixture
def routes(tmp_path) -> Path:
    """A routes folder (its contents are never reached: every refusal here comes first)."""
    d = tmp_path / "routes"
    d.mkdir()
    return d


@pytest.mark.parametrize(("args", "says"), [
    ((), "give --checkpoint RUN_OR_STEP (a trained policy), --agent-file PATH (a leaderboard 2.0 agent) or "
         "--agent expert"),
    (("--agent", "expert", "--checkpoint", "/somewhere"), "--checkpoint and --agent expert both given"),
    (("--agent", "policy"), "--agent policy needs --checkpoint"),
    (("--agent", "robot"), "--agent robot: unknown"),
])
def test_neither_both_or_an_unknown_agent_is_one_line_and_nothing_is_written(tmp_path, routes, args, says):
    line = one_line(run_bin("evaluate", routes, "--root", tmp_path / "out", *args))
    assert says in line
    assert not (tmp_path / "out").exists()


def test_a_missing_routes_dir_is_one_line(tmp_path):
    line = one_line(evaluate("run", tmp_path / "nowhere", "--root", tmp_path / "out", "--agent", "expert"))
    assert f"ROUTES_DIR {tmp_path / 'nowhere'}: no such folder" in line
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_that_does_not_exist_is_one_line_from_load_policy(tmp_path, routes):
    line = one_line(evaluate("run", routes, "--root", tmp_path / "out", "--checkpoint", tmp_path / "no-run"))
    assert line.startswith(f"evaluate: --checkpoint {tmp_path / 'no-run'}: no such file or folder")
    assert not (tmp_path / "out").exists()


def test_an_evaluation_root_is_refused_to_another_agent_and_nothing_changes(tmp_path, routes):
    layout = make_root(tmp_path / "out", PLANNED, agent="policy", checkpoint="/runs/posttrain/step-00000002")
    before = tree(layout.root)
    line = one_line(run_bin("evaluate", "--agent", "expert", routes, "--root", layout.root))
    assert "evaluated checkpoint /runs/posttrain/step-00000002, this command evaluates the expert" in line
    assert "give another --root" in line
    assert tree(layout.root) == before


def test_a_collection_root_is_refused_and_score_wants_an_evaluation_root(tmp_path, routes):
    layout = make_root(tmp_path / "collected", [PERFECT_RUN], evaluation=False)
    before = tree(layout.root)
    assert "a collection root" in one_line(evaluate("run", routes, "--root", layout.root, "--agent", "expert"))
    assert "not an evaluation root" in one_line(run_bin("evaluate", "score", "--root", layout.root))
    assert tree(layout.root) == before


def test_score_aggregates_an_evaluation_root_again_and_prints_the_table(evaluated):
    proc = run_bin("evaluate", "score", "--root", evaluated.root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("evaluation of the expert on 6 route runs")
    for key in PLANNED:
        assert str(key) in proc.stdout
    assert f"result: {evaluated.evaluation_result} (entry_status Started; 1 runs have no result yet" in proc.stdout
    assert json.loads(evaluated.evaluation_result.read_text())["_checkpoint"]["global_record"]["meta"]["runs"][
        "total"] == 6


def driven_root(tmp_path: Path, short_routes: Path, statuses: tuple[str, ...], **record) -> tuple[Layout, list]:
    """An evaluation root of the short routes in which every run already has a result, of these statuses."""
    from tools.collect.base.routes import find_route_files
    from tools.collect.runner.jobs import plan

    keys = [job.key for job in plan(find_route_files(short_routes), None, 1)]
    layout = make_root(tmp_path / "out", keys)
    evaluation = json.loads(layout.evaluation.read_text())
    layout.evaluation.write_text(json.dumps({**evaluation, "routes_dir": str(short_routes)}))
    for key, status in zip(keys, statuses, strict=True):
        write_result(layout, key, RouteRecord(key.name[:-5], status, route_length=200.0, **record))
    return layout, keys


def test_a_rerun_drives_nothing_when_every_run_has_a_driving_outcome_even_a_failed_one(tmp_path, short_routes):
    """The resume of `bin/evaluate`: runs that drove to an outcome are final; nothing is started again."""
    layout, keys = driven_root(tmp_path, short_routes, (PERFECT, FAILED_BLOCKED), route_completion=60.0)
    proc = run_bin("evaluate", "--agent", "expert", short_routes, "--root", layout.root)
    assert proc.returncode == 0, proc.stderr
    assert "2 skipped as already finished" in proc.stderr
    assert not any(layout.attempt_logs(key) for key in keys)  # no attempt made
    statuses = next(line for line in proc.stdout.splitlines() if line.strip().startswith("statuses: "))
    assert f"{FAILED_BLOCKED} 1" in statuses and f"{PERFECT} 1" in statuses
    assert json.loads(layout.evaluation_result.read_text())["entry_status"] == "Finished"


def test_run_takes_score_and_bench2drive_as_score_does_and_its_summary_names_the_version(tmp_path, short_routes):
    """`run --score 2.1 --bench2drive` (a resumed root: every run already has its outcome, nothing is driven)."""
    layout, _ = driven_root(tmp_path, short_routes, (PERFECT, COMPLETED), route_completion=100.0,
                            infractions=infractions(collisions_vehicle=2))
    proc = run_bin("evaluate", "--agent", "expert", short_routes, "--root", layout.root, "--score", "2.1",
                   "--bench2drive")
    assert proc.returncode == 0, proc.stderr
    assert "leaderboard 2.1 scores" in proc.stdout and "Bench2Drive metrics over all 2 route runs" in proc.stdout
    result = json.loads(layout.evaluation_result.read_text())
    assert result["score_version"] == "2.1"
    assert json.loads(layout.bench2drive_merged.read_text())["score_version"] == "2.1"
    # 2.1 adds the two collisions up (one penalty factor), 2.0 multiplies them: the same records, other scores.
    ds_21 = result["_checkpoint"]["global_record"]["scores_mean"]["score_composed"]
    proc = run_bin("evaluate", "--agent", "expert", short_routes, "--root", layout.root)
    assert proc.returncode == 0 and "leaderboard 2.0 scores" in proc.stdout, proc.stderr
    result = json.loads(layout.evaluation_result.read_text())
    assert "score_version" not in result
    assert result["_checkpoint"]["global_record"]["scores_mean"]["score_composed"] != ds_21


def test_run_with_an_unknown_score_is_one_line_and_nothing_is_written(tmp_path, routes):
    line = one_line(run_bin("evaluate", "--agent", "expert", routes, "--root", tmp_path / "out", "--score", "3"))
    assert "--score 3: unknown leaderboard score; give --score 2.0 or --score 2.1" in line
    assert not (tmp_path / "out").exists()


def test_help_names_both_ways_in(routes):
    proc = run_bin("evaluate", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: bin/evaluate --checkpoint RUN_OR_STEP ROUTES_DIR")
    assert "bin/evaluate --agent expert ROUTES_DIR" in proc.stdout and "bin/evaluate score --root ROOT" in proc.stdout


def seeded_root(path: Path, route_completion: dict[str, list[float]]) -> Layout:
    """An evaluation root of routes x seeds whose runs drove clean to the given completions (DS = RC)."""
    keys = {RunKey.for_route("Alpha", route, route, k): rc for route, rcs in route_completion.items()
            for k, rc in enumerate(rcs)}
    layout = make_root(path, list(keys))
    for key, rc in keys.items():
        write_result(layout, key, RouteRecord(key.name[:-5], PERFECT if rc == 100 else FAILED_BLOCKED,
                                              route_completion=rc, route_length=200.0))
    return layout


def test_compare_gives_the_paired_difference_per_route_and_overall_with_95_percent_intervals(tmp_path):
    from tools.dataset.score import format_interval, mean_interval

    a = seeded_root(tmp_path / "a", {"r0": [100.0, 50.0], "r1": [100.0, 100.0]})
    b = seeded_root(tmp_path / "b", {"r0": [100.0, 100.0], "r1": [80.0, 60.0]})
    proc = run_bin("evaluate", "compare", a.root, b.root)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("paired difference B - A over 4 route runs (2 routes)")
    assert f"DS: A 87.500, B 85.000, B - A {format_interval(*mean_interval([0.0, 50.0, -20.0, -40.0]))}" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("  Alpha/")}
    r0, r1 = mean_interval([0.0, 50.0]), mean_interval([-20.0, -40.0])
    assert rows["Alpha/r0"][:6] == ["2", "75.00", "100.00", f"{r0[0]:.3f}", "±", f"{r0[1]:.3f}"]
    assert rows["Alpha/r1"][:6] == ["2", "100.00", "70.00", f"{r1[0]:.3f}", "±", f"{r1[1]:.3f}"]
    # One seed per route: a difference, no interval.
    one = seeded_root(tmp_path / "one", {"r0": [90.0], "r1": [100.0]})
    proc = run_bin("evaluate", "compare", a.root, one.root)
    assert proc.returncode == 0, proc.stderr
    assert "2 runs planned in one root only (other seeds) are left out" in proc.stdout
    assert "-10.000 ± n/a" in proc.stdout


def test_compare_refuses_roots_of_different_routes_in_one_line(tmp_path):
    a = seeded_root(tmp_path / "a", {"r0": [100.0], "r1": [100.0]})
    b = seeded_root(tmp_path / "b", {"r0": [100.0], "r2": [100.0]})
    proc = run_bin("evaluate", "compare", a.root, b.root)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "evaluated different routes (1 only in A, e.g. Alpha/r1; 1 only in B, e.g. Alpha/r2)" in proc.stderr


def test_seeds_and_repetitions_are_one_thing_and_two_different_counts_are_refused(tmp_path, routes):
    proc = run_bin("evaluate", "--agent", "expert", routes, "--root", tmp_path / "eval", "--seeds", "2",
                   "--repetitions", "3")
    assert proc.returncode == 2
    assert "--seeds 2 and --repetitions 3: they are the same thing" in proc.stderr
    assert not (tmp_path / "eval").exists()
