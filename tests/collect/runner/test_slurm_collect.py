"""Collection on a real SLURM cluster (tests/slurm_cluster.py): waves of job arrays, the monitor with and without
accounting, resubmission after a cancelled task and a time limit, a killed monitor, live throttle changes,
MaxArraySize splitting, progress and clean-failed beside the queue, and bad input. No stand-in scheduler."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from datetime import datetime
from pathlib import Path

import pytest
from conftest import BIN, REPO, copy_root, run_tool, start_tool, tree, wait_until
from slurm_cluster import path_without_slurm

from tools.collect.runner.slurm import Monitor, Scheduler
from tools.collect.runner.slurm_options import SlurmOptions
from tools.collect.runner.waves import load_waves, run_key_of, waves_dir
from tools.dataset.claims import attempts
from tools.dataset.layout import Layout
from tools.dataset.results import FAILED_SIMULATION, RunState, read_status, run_state

pytestmark = pytest.mark.slurm
POLL = "1"


@pytest.fixture(scope="module")
def four_routes(collected_root) -> Path:
    """The 4 short routes of the collected root's fixture, with their town."""
    return collected_root.parent / "routes"


def collect(cluster, routes: Path, root: Path, *extra: str, timeout: float = 400):
    return run_tool(BIN / "collect", routes, "--root", root, "--slurm", "--poll", POLL, "--vehicles", "10", *extra,
                    env=cluster.env, timeout=timeout)


def start_collect(cluster, routes: Path, root: Path, *extra: str):
    return start_tool(BIN / "collect", routes, "--root", root, "--slurm", "--poll", POLL, "--vehicles", "10", *extra,
                      env=cluster.env)


def array_ids(root: Path) -> list[str]:
    return [a["job_id"] for w in load_waves(Layout(root)) for a in w.arrays]


def all_finished(root: Path, expected: int) -> None:
    layout = Layout(root)
    keys = list(layout.iter_runs())
    assert len(keys) == expected
    assert [run_state(layout, k) for k in keys] == [RunState.FINISHED] * expected


def running_tasks(cluster, job: str) -> list[str]:
    return [line.split()[0] for line in cluster.active(job) if line.split()[1] == "RUNNING"]


@pytest.mark.parametrize("case", ["no sbatch", "unknown partition", "throttle 0", "read-only root"])
def test_bad_input_is_one_line_and_nothing_is_submitted(slurm, four_routes, tmp_path, case):
    root = tmp_path / "root"
    root.mkdir()
    env = dict(slurm.env)
    args = [BIN / "collect", four_routes, "--root", root, "--slurm"]
    if case == "no sbatch":
        env["PATH"] = path_without_slurm(tmp_path / "path")
    elif case == "unknown partition":
        args += ["--partition", "nosuch"]
    elif case == "throttle 0":
        args += ["--throttle", "0"]
    else:
        from conftest import read_only

        args = read_only(root, *args)
    queued_before = slurm.run("squeue", "-h", "-o", "%i").stdout
    before = tree(root)
    proc = run_tool(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("collect: "), proc.stderr
    expected = {"no sbatch": "sbatch not found", "unknown partition": "--partition nosuch",
                "throttle 0": "--throttle 0", "read-only root": "not writable"}[case]
    assert expected in lines[0]
    assert tree(root) == before
    assert slurm.run("squeue", "-h", "-o", "%i").stdout == queued_before


def test_clean_failed_leaves_runs_queued_for_another_attempt_alone(slurm, four_routes, tmp_path, collected_root):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = next(iter(layout.iter_runs()))
    result = layout.result_path(key)
    result.write_text(result.read_text().replace('"Perfect"', '"Failed"'))
    # A wave holding the failed run, its array held in the queue (--hold): queued for another attempt.
    m = Monitor(layout, SlurmOptions(sbatch_args=("--hold",)), Scheduler(slurm.env), {}, 3,
                log=lambda message: None)
    entry = {"key": str(key), "route": "/nowhere.xml", "route_id": "0", "repetition": 0, "towns": "/nowhere"}
    wave = m.new_wave([entry])
    m.submit(wave, fresh=True)
    job = wave.arrays[0]["job_id"]
    try:
        before = tree(root)
        proc = run_tool(BIN / "clean-failed", root, "--yes", env=slurm.env)
        assert proc.returncode == 0, proc.stderr
        assert "queued for another attempt" in proc.stdout and str(key) in proc.stdout
        assert layout.result_path(key).exists() and tree(root)[str(result.relative_to(root))] == \
            before[str(result.relative_to(root))]
    finally:
        slurm.run("scancel", job)


#: Route runs of one short route in the task past its time limit: a worker forks each from its town's zygote in
#: about 1 s on a quiet machine, so 40 could all finish inside the minute; 200 cannot.
PAST_LIMIT_RUNS = 200


@pytest.fixture(scope="module")
def past_time_limit(slurm, short_routes, tmp_path_factory):
    """A task that runs past its one-minute time limit, submitted (--no-watch) before the collection tests below,
    which run meanwhile: test_a_task_past_its_time_limit_is_recorded_resubmitted_and_reported_as_timeout, last in
    this module, waits for it. The tests that compare the queue before and after a refused command come first.
    Returns (routes, root, the submitting command)."""
    d = tmp_path_factory.mktemp("past-time-limit")
    routes = Path(shutil.copytree(short_routes, d / "routes"))
    for extra in sorted(p for p in routes.rglob("*.xml") if "towns" not in p.parts)[1:]:
        extra.unlink()
    root = d / "root"
    # PAST_LIMIT_RUNS repetitions of one short route in one task: far more than the 1-minute limit.
    first = collect(slurm, routes, root, "--time", "1", "--repetitions", str(PAST_LIMIT_RUNS), "--runs-per-task",
                    str(PAST_LIMIT_RUNS), "--no-watch")
    return routes, root, first


@pytest.mark.usefixtures("past_time_limit")
def test_four_routes_with_throttle_two_all_finish_never_more_than_two_at_once_and_sbatch_matches_the_golden_file(
        slurm_accounting, four_routes, tmp_path):
    """One collection checked for two things: how it ran (all finished, never more than 2 at once, what the
    monitor asked the scheduler), and the sbatch command line it built from the SLURM flags (the golden file)."""
    root = tmp_path / "root"
    proc = collect(slurm_accounting, four_routes, root, "--throttle", "2", "--partition", slurm_accounting.partition,
                   "--time", "00:30:00", "--mem", "2G", "--sbatch-args=--nice=10 --comment=golden")
    assert proc.returncode == 0, proc.stderr
    all_finished(root, 4)
    (job,) = array_ids(root)
    out = slurm_accounting.run("sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,Start,End").stdout
    spans = []
    for line in out.splitlines():
        _, state, start, end = line.split("|")
        assert state == "COMPLETED", out
        spans.append((datetime.fromisoformat(start), datetime.fromisoformat(end)))
    assert len(spans) == 4
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap <= 2, spans
    assert "1 sbatch" in proc.stderr and "4 COMPLETED" in proc.stderr
    calls = dict((c, int(n)) for n, c in re.findall(r"(\d+) (\w+)", proc.stderr.split("Scheduler calls:")[1]))
    # with accounting a poll is one sacct; squeue only while slurmdbd has not heard of a new array yet
    assert calls["sacct"] > calls.get("squeue", 0), calls
    logs = sorted((root / "logs" / "slurm").glob(f"{job}_*.log"))
    assert len(logs) == 4 and all("task" in p.read_text() for p in logs)

    # The golden file of the sbatch command line.
    (wave,) = load_waves(Layout(root))
    argv = [a.replace(str(root), "ROOT").replace(str(REPO), "REPO") for a in wave.arrays[0]["argv"]]
    argv = [re.sub(r"drivekit-[0-9a-f]{8}-", "drivekit-DATASET-", a) for a in argv]
    golden = REPO / "tests" / "golden" / "collect-sbatch.json"
    if os.environ.get("DRIVEKIT_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(json.dumps(argv, indent=1) + "\n")
    assert argv == json.loads(golden.read_text())
    script = (REPO / "slurm" / "collect.sbatch").read_text()
    sbatch_lines = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert sbatch_lines == sorted(sbatch_lines)
    assert waves_dir(Layout(root)).is_dir()


@pytest.mark.usefixtures("past_time_limit")
def test_a_cancelled_array_task_is_resubmitted_and_finishes(slurm, four_routes, tmp_path):
    root = tmp_path / "root"
    # Throttle 2 (of 4 tasks): a task is cancelled in the middle of its route with others still to run.
    monitor = start_collect(slurm, four_routes, root, "--throttle", "2")
    job = wait_until(lambda: (array_ids(root) or [None])[0], 60, "the first wave's array")
    layout = Layout(root)
    (wave,) = load_waves(layout)

    def mid_route() -> str | None:  # a running task whose run has frames and no result yet
        for task in running_tasks(slurm, job):
            key = run_key_of(wave.task_runs(int(task.split("_")[1]))[0])
            if len(layout.frame_paths(key)) >= 3 and not layout.result_path(key).exists():
                return task
        return None

    task = wait_until(mid_route, 120, "a task in the middle of its route")
    slurm.run("scancel", task)  # a task of the array this test's monitor submitted
    _, err = monitor.communicate(timeout=400)
    assert monitor.returncode == 0, err
    all_finished(root, 4)
    assert sorted(attempts(layout, k) for k in layout.iter_runs()) == [1, 1, 1, 2]
    assert "CANCELLED" in err and len(load_waves(layout)) == 2


@pytest.mark.usefixtures("past_time_limit")
def test_the_monitor_killed_mid_wave_and_restarted_submits_nothing_twice_and_finishes(slurm, four_routes, tmp_path):
    root = tmp_path / "root"
    # Throttle 2 (of 4 tasks): killed while a task runs, the wave is still half queued.
    monitor = start_collect(slurm, four_routes, root, "--throttle", "2")
    job = wait_until(lambda: (array_ids(root) or [None])[0], 60, "the first wave's array")
    wait_until(lambda: running_tasks(slurm, job), 60, "a running task")
    monitor.send_signal(signal.SIGKILL)  # the monitor this test started, by pid
    monitor.wait()
    again = collect(slurm, four_routes, root, "--throttle", "2")
    assert again.returncode == 0, again.stderr
    all_finished(root, 4)
    assert array_ids(root) == [job], "a second array was submitted"
    assert "0 sbatch" not in again.stderr and "sbatch" not in again.stderr.split("Scheduler calls:")[1]
    layout = Layout(root)
    assert [attempts(layout, k) for k in layout.iter_runs()] == [1, 1, 1, 1]


@pytest.mark.usefixtures("past_time_limit")
def test_an_array_submitted_by_a_monitor_killed_before_recording_it_is_adopted(slurm, four_routes, tmp_path):
    root = tmp_path / "root"
    first = collect(slurm, four_routes, root, "--throttle", "2", "--no-watch")  # submits wave 1, exits
    assert first.returncode == 0, first.stderr
    layout = Layout(root)
    (wave,) = load_waves(layout)
    job = wave.arrays[0]["job_id"]
    wave.arrays[0]["job_id"] = None  # as if killed between sbatch and writing its answer down
    wave.save()
    again = collect(slurm, four_routes, root, "--throttle", "2")
    assert again.returncode == 0, again.stderr
    assert f"adopted array {job}" in again.stderr
    assert array_ids(root) == [job]
    all_finished(root, 4)


@pytest.mark.usefixtures("past_time_limit")
def test_a_new_throttle_changes_the_live_array_and_progress_shows_the_queue(slurm, four_routes, tmp_path):
    root = tmp_path / "root"
    first = collect(slurm, four_routes, root, "--throttle", "1", "--no-watch")
    assert first.returncode == 0, first.stderr
    (job,) = array_ids(root)
    progress = run_tool(BIN / "progress", root, env=slurm.env)
    assert progress.returncode == 0 and re.search(r"SLURM: \d+ array tasks queued, \d+ running", progress.stdout)
    again = collect(slurm, four_routes, root, "--throttle", "3", "--no-watch")
    assert again.returncode == 0, again.stderr
    assert f"array {job}: throttle 1 -> 3" in again.stderr
    records = slurm.show_job(job)
    assert any(r.get("ArrayTaskThrottle") == "3" for r in records), records
    done = collect(slurm, four_routes, root, "--throttle", "3")
    assert done.returncode == 0, done.stderr
    all_finished(root, 4)


@pytest.mark.usefixtures("past_time_limit")
def test_a_wave_larger_than_max_array_size_is_split_into_arrays(slurm_accounting, four_routes, tmp_path):
    root = tmp_path / "root"
    with slurm_accounting.max_array_size_set(3):
        proc = collect(slurm_accounting, four_routes, root, "--throttle", "4")
    assert proc.returncode == 0, proc.stderr
    (wave,) = load_waves(Layout(root))
    assert [(a["first"], a["count"]) for a in wave.arrays] == [(0, 3), (3, 1)]
    assert "2 sbatch" in proc.stderr
    all_finished(root, 4)


@pytest.mark.usefixtures("past_time_limit")
def test_runs_per_task_puts_several_route_runs_in_one_task(slurm, four_routes, tmp_path):
    root = tmp_path / "root"
    proc = collect(slurm, four_routes, root, "--runs-per-task", "2", "--throttle", "2")
    assert proc.returncode == 0, proc.stderr
    (wave,) = load_waves(Layout(root))
    assert wave.n_tasks == 2 and wave.arrays[0]["count"] == 2
    all_finished(root, 4)


def test_a_task_past_its_time_limit_is_recorded_resubmitted_and_reported_as_timeout(slurm, past_time_limit):
    routes, root, first = past_time_limit
    assert first.returncode == 0, first.stderr
    (job,) = array_ids(root)
    slurm.wait_done(job, timeout=180)
    layout = Layout(root)
    # The run the limit cut short: begun (its attempt's log) without a result. A worker starts its next run as soon
    # as one ends, but the limit can still fall between two runs (then none was cut short; CI saw it once).
    cut = [k for k in layout.iter_runs() if layout.attempt_logs(k) and not layout.result_path(k).exists()]
    assert len(cut) <= 1, cut
    # The resubmission is held in the queue: a task that started at once would redo the crashed run (discarding its
    # result) while this test reads the root.
    again = collect(slurm, routes, root, "--time", "1", "--repetitions", str(PAST_LIMIT_RUNS), "--runs-per-task",
                    str(PAST_LIMIT_RUNS),
                    "--no-watch", "--sbatch-args=--hold")
    assert again.returncode == 0, again.stderr
    assert "1 TIMEOUT" in again.stderr
    crashed = [k for k in layout.iter_runs() if read_status(layout.result_path(k)) == FAILED_SIMULATION]
    assert crashed == cut, "the run the time limit cut short is recorded as crashed"
    waves = load_waves(layout)
    assert len(waves) == 2 and {w["key"] for w in waves[1].runs} >= {str(k) for k in crashed}
    finished = sum(run_state(layout, k) is RunState.FINISHED for k in layout.iter_runs())
    assert len(waves[1].runs) == PAST_LIMIT_RUNS - finished
    slurm.run("scancel", waves[1].arrays[0]["job_id"])  # the resubmission this test made; not waited for
