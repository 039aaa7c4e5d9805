"""bin/progress and bin/clean-failed on a hand-made dataset root with runs in every state."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, progress_table, run_bin, run_tool, tree

from tools.dataset.claims import attempts, claim_run, exclusive
from tools.dataset.heartbeats import write_heartbeat
from tools.dataset.layout import DATASET_FORMAT, Layout, RunKey
from tools.dataset.manifest import update_manifest
from tools.dataset.results import (
    FAILED_BLOCKED,
    FAILED_SIMULATION,
    PERFECT,
    RouteRecord,
    RunState,
    run_state,
    run_states,
    write_result,
)

FINISHED_A = RunKey("Alpha", "town_0000_route0_rep0")
FAILED_A = RunKey("Alpha", "town_0001_route1_rep0")
RUNNING_A = RunKey("Alpha", "town_0002_route2_rep0")
CRASHED_B = RunKey("Beta", "town_0003_route3_rep0")
PENDING_B = RunKey("Beta", "town_0004_route4_rep0")  # planned in the manifest, nothing on disk
FINISHED_B = RunKey("Beta", "town_0005_route5_rep0")
UNPLANNED_C = RunKey("Gamma", "other_0000_route0_rep0")  # on disk, not in the manifest: counted too


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def make_run(layout: Layout, key: RunKey, n_attempts: int = 1, frames: int = 2) -> None:
    for _ in range(n_attempts):
        claim_run(layout, key).release()
    layout.frames_dir(key).mkdir(parents=True)
    for i in range(frames):
        layout.frame_path(key, i).write_bytes(b"frame")


@pytest.fixture
def root(tmp_path) -> Path:
    layout = Layout(tmp_path / "root")
    planned = [FINISHED_A, FAILED_A, RUNNING_A, CRASHED_B, PENDING_B, FINISHED_B]
    update_manifest(layout, {"routes_dir": "/routes", "repetitions": 1, "settings": {}, "argv": []},
                    {str(k): {"route": f"/routes/{k.name}.xml", "route_id": "0", "repetition": 0} for k in planned})
    for key in (FINISHED_A, FINISHED_B, UNPLANNED_C):
        make_run(layout, key)
        write_result(layout, key, RouteRecord("0", PERFECT, route_completion=100.0))
    make_run(layout, FAILED_A, n_attempts=2)
    write_result(layout, FAILED_A, RouteRecord("1", FAILED_BLOCKED, route_completion=40.0))
    make_run(layout, RUNNING_A)
    write_heartbeat(layout, RUNNING_A, tick=10)  # this test process: alive
    make_run(layout, CRASHED_B)
    layout.heartbeat(CRASHED_B).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead_pid(), "time": time.time(), "tick": 3}))
    states = {k: run_state(layout, k) for k in planned + [UNPLANNED_C]}
    assert states == {FINISHED_A: RunState.FINISHED, FAILED_A: RunState.FAILED, RUNNING_A: RunState.RUNNING,
                      CRASHED_B: RunState.CRASHED, PENDING_B: RunState.PENDING, FINISHED_B: RunState.FINISHED,
                      UNPLANNED_C: RunState.FINISHED}
    return layout.root


def tool(*args: str) -> subprocess.CompletedProcess:
    """python -m tools.collect ARGS..."""
    return run_tool(PYTHON, "-m", "tools.collect", *args)


def test_progress_counts_every_state_per_scenario_type_through_bin_progress(root):
    proc = run_bin("progress", str(root))
    assert proc.returncode == 0, proc.stderr
    assert progress_table(proc.stdout) == {
        "Alpha": ["3", "1", "1", "1", "0", "50.0%"],
        "Beta": ["3", "1", "1", "0", "1", "50.0%"],
        "Gamma": ["1", "1", "0", "0", "0", "0.0%"],
        "total": ["7", "3", "2", "1", "1", "40.0%"],
    }
    assert str(root) in proc.stdout


def test_progress_takes_the_root_as_flag_too(root):
    by_flag = progress_table(tool("progress", "--root", str(root)).stdout)
    assert by_flag == progress_table(tool("progress", str(root)).stdout)


def test_progress_of_a_root_with_only_a_manifest_shows_everything_pending(tmp_path):
    layout = Layout(tmp_path / "fresh")
    update_manifest(layout, {"routes_dir": "/r"}, {"S/a_route0_rep0": {}, "S/a_route0_rep1": {}})
    rows = progress_table(tool("progress", str(layout.root)).stdout)
    assert rows["S"] == ["2", "0", "0", "0", "2", "-"]


@pytest.mark.parametrize("case", ["missing", "empty", "file"])
def test_progress_of_no_dataset_is_one_line_error(tmp_path, case):
    path = tmp_path / "root"
    if case == "empty":
        path.mkdir()
    elif case == "file":
        path.write_text("not a folder")
    proc = tool("progress", str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"collect: --root {path}: "), proc.stderr


def test_progress_refuses_a_manifest_of_another_format_version(root):
    manifest = Layout(root).manifest
    data = json.loads(manifest.read_text())
    data["format_version"] = DATASET_FORMAT + 1
    manifest.write_text(json.dumps(data))
    proc = tool("progress", str(root))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "format version" in proc.stderr and str(manifest) in proc.stderr


def test_clean_failed_lists_failed_and_crashed_runs_without_deleting(root):
    before = tree(root)
    proc = run_bin("clean-failed", str(root))
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines() if "attempts=" in line]
    assert listed == [str(FAILED_A), str(CRASHED_B)]
    assert f"{FAILED_A}  failed  attempts=2  status={FAILED_BLOCKED}" in proc.stdout
    assert f"{CRASHED_B}  crashed  attempts=1  status=no result (crashed)" in proc.stdout
    assert f"bin/clean-failed {root} --yes" in proc.stdout
    assert tree(root) == before


def test_clean_failed_yes_deletes_failed_runs_never_the_running_one_and_progress_shows_it(root):
    layout = Layout(root)
    keep = {k: tree(layout.run_dir(k)) for k in (RUNNING_A, FINISHED_A, FINISHED_B)}
    proc = run_bin("clean-failed", str(root), "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "deleted 2 failed route runs" in proc.stdout
    for key in (FAILED_A, CRASHED_B):
        assert not layout.result_path(key).exists()
        assert not layout.run_dir(key).exists()
        assert not layout.log_dir(key).exists() and attempts(layout, key) == 0
        assert run_state(layout, key) is RunState.PENDING
    for key, files in keep.items():
        assert tree(layout.run_dir(key)) == files
    assert run_state(layout, RUNNING_A) is RunState.RUNNING
    assert not [p for p in root.rglob("*") if p.name.startswith(".tmp-")]

    rows = progress_table(run_bin("progress", str(root)).stdout)
    assert rows["Alpha"] == ["3", "1", "0", "1", "1", "0.0%"]
    assert rows["Beta"] == ["3", "1", "0", "0", "2", "0.0%"]
    assert rows["total"] == ["7", "3", "0", "1", "3", "0.0%"]

    again = tool("clean-failed", str(root), "--yes")
    assert again.returncode == 0 and "no failed route runs" in again.stdout


def test_run_states_in_bulk_are_run_state_run_by_run_on_a_root_with_every_state(root):
    layout = Layout(root)
    odd = {
        "damaged": RunKey("Alpha", "town_0010_route10_rep0"),  # a result file that is not a result
        "result_folder": RunKey("Beta", "town_0011_route11_rep0"),  # a folder where the result file goes
        "dangling": RunKey("Beta", "town_0012_route12_rep0"),  # a result that links to nothing: as if none
        "locked": RunKey("Gamma", "other_0001_route1_rep0"),  # run.lock held: running, no heartbeat
        "crash_status": RunKey("Gamma", "other_0002_route2_rep0"),  # Failed - Simulation crashed
        "logs_only": RunKey("Delta", "town_0013_route13_rep0"),  # an attempt log and nothing else
    }
    make_run(layout, odd["damaged"])
    layout.result_path(odd["damaged"]).write_text('{"_checkpoint": {"records": []}}')
    layout.result_path(odd["result_folder"]).mkdir(parents=True)
    layout.result_path(odd["dangling"]).symlink_to(root / "nowhere.json")
    make_run(layout, odd["locked"])
    make_run(layout, odd["crash_status"])
    write_result(layout, odd["crash_status"], RouteRecord("2", FAILED_SIMULATION))
    claim_run(layout, odd["logs_only"]).release()
    (layout.root / "results" / "Alpha" / ".tmp-town_0000_route0_rep0.json.x~1.y").write_text("{}")  # a writer's
    with exclusive(layout, odd["locked"]) as mine:
        assert mine
        one_by_one = {key: run_state(layout, key) for key in layout.iter_runs()}
        bulk = run_states(layout)
        asked = run_states(layout, [PENDING_B, *odd.values()])  # given keys, the pending one with nothing on disk
    assert bulk == one_by_one and list(bulk) == sorted(one_by_one)
    assert asked == {PENDING_B: RunState.PENDING, **{key: one_by_one[key] for key in odd.values()}}
    assert {name: bulk[key] for name, key in odd.items()} == {
        "damaged": RunState.DAMAGED, "result_folder": RunState.DAMAGED, "dangling": RunState.PENDING,
        "locked": RunState.RUNNING, "crash_status": RunState.FAILED, "logs_only": RunState.CRASHED}
    assert set(bulk.values()) == set(RunState)
    Layout(root).evaluation.write_text("{}")  # an evaluation root: a driving failure is final
    assert run_states(Layout(root)) == {key: run_state(Layout(root), key) for key in Layout(root).iter_runs()}
    assert run_states(Layout(root))[FAILED_A] is RunState.FINISHED


def test_progress_looks_for_slurm_waves_where_the_slurm_module_writes_them(root):
    from tools.collect.runner.waves import SLURM_DIR, slurm_dir

    assert slurm_dir(Layout(root)) == root / "slurm" and SLURM_DIR == "slurm"  # progress.py's shortcut


def test_only_runs_crashing_the_same_way_on_every_attempt_are_named_and_recovered_runs_are_counted(tmp_path):
    """From the runs' attempt records: the same crash twice (ports and pids aside) is named; two different
    crashes, a single crash, a crash then a driving failure, and a run still running are not; a crash then a
    finish is counted apart."""
    from tools.collect.inspect.tables import crash_lines
    from tools.dataset.attempts import crash_history, record_attempt
    from tools.dataset.results import FAILED

    layout = Layout(tmp_path / "root")
    timeout = "RuntimeError: time-out of 10000ms while waiting for the simulator, connected to 127.0.0.1:{}"
    runs = {  # run: (its attempts (status, message), its last result)
        "same": ([(FAILED_SIMULATION, timeout.format(40001)), (FAILED_SIMULATION, timeout.format(51377))], True),
        "different": ([(FAILED_SIMULATION, timeout.format(40001)), (FAILED_SIMULATION, "Segmentation fault")], True),
        "once": ([(FAILED_SIMULATION, timeout.format(40001))], True),
        "then_drove": ([(FAILED_SIMULATION, timeout.format(1)), (FAILED, "")], True),
        "recovered": ([(FAILED_SIMULATION, timeout.format(40001)), (PERFECT, "")], True),
        "running": ([(FAILED_SIMULATION, timeout.format(1)), (FAILED_SIMULATION, timeout.format(1))], False),
    }
    keys = {}
    for i, (name, (outcomes, ended)) in enumerate(runs.items()):
        key = keys[name] = RunKey("Alpha", f"town_{i:04d}_route{i}_rep0")
        for n, (status, message) in enumerate(outcomes, 1):
            layout.attempt_log(key, n).parent.mkdir(parents=True, exist_ok=True)
            layout.attempt_log(key, n).write_text("")
            record_attempt(layout, key, n, status, message)
        if ended:
            write_result(layout, key, RouteRecord(str(i), outcomes[-1][0]))
        else:
            write_heartbeat(layout, key, 1)
    history = crash_history(layout, run_states(layout))
    assert history.repeated == {keys["same"]: (2, f"{FAILED_SIMULATION}: {timeout.format(51377)}")}
    assert history.recovered == [keys["recovered"]]
    lines = crash_lines(layout, run_states(layout))
    assert lines[0].startswith("1 route runs crash the same way on every attempt")
    assert lines[1].startswith(f"  {keys['same']}: {FAILED_SIMULATION}: RuntimeError: time-out")
    assert "(2 attempts; logs in " in lines[1]
    assert lines[2:] == ["1 route runs crashed, then finished on a later attempt"]
