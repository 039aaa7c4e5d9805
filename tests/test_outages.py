"""The fault suite, part two (docs/reliability.md): outages of what the pipeline stands on. A SLURM controller
stopped in the middle of a wave (the real test cluster, slurmctld stopped and started by its pid), tasks the
scheduler has forgotten, and a full disk (ENOSPC on a small tmpfs) under every stage.

Run with the rest of the fault suite: `pytest -m faults`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, PYTHON, copy_root, run_tool, start_tool
from test_faults import TINY_TRAIN

from tools.collect.base.routes import find_route_files
from tools.collect.runner.jobs import plan, route_run_bytes, run_bytes
from tools.collect.runner.slurm import FORGET_AFTER_S, Monitor, Scheduler
from tools.collect.runner.slurm_options import SlurmOptions
from tools.collect.runner.waves import Wave, load_waves, waves_dir
from tools.core.errors import EXIT_DISK_FULL, DiskFull
from tools.dataset.claims import attempts
from tools.dataset.layout import BUCKET_LOCK, Layout
from tools.dataset.results import RunState, run_state

pytestmark = pytest.mark.faults


def slurm_collect(cluster, routes: Path, root: Path, *extra: str):
    return [BIN / "collect", routes, "--root", root, "--slurm", "--poll", "1", "--vehicles", "10", *extra]


def array_ids(root: Path) -> list[str]:
    return [a["job_id"] for w in load_waves(Layout(root)) for a in w.arrays]


def age_arrays(root: Path, seconds: float) -> None:
    """Make every array of the root's waves look submitted `seconds` ago."""
    for wave in load_waves(Layout(root)):
        for array in wave.arrays:
            array["submitted"] = time.time() - seconds
        wave.save()


# ----------------------------------------------------------------------------- SLURM


@pytest.mark.slurm
def test_slurmctld_stopped_mid_wave_is_waited_out_and_nothing_is_submitted_twice(slurm, collected_root, tmp_path):
    """The controller stops while a wave runs (its array older than FORGET_AFTER_S, when a task the scheduler does
    not list would count as ended): the monitor takes nothing as ended, submits nothing, survives, and once
    slurmctld is back it finishes the wave it had; every route run has one attempt."""
    routes = collected_root.parent / "routes"
    root = tmp_path / "root"
    first = run_tool(*slurm_collect(slurm, routes, root, "--throttle", "2", "--no-watch"), env=slurm.env)
    assert first.returncode == 0, first.stderr
    (job,) = array_ids(root)
    age_arrays(root, FORGET_AFTER_S + 60)
    # Commands that cannot reach slurmctld give up after 2 MessageTimeouts: 2 s here, not 10, to keep this short.
    slurm.reconfigure(MessageTimeout=2)
    try:
        slurm.stop_controller()
        monitor = start_tool(*slurm_collect(slurm, routes, root, "--throttle", "2"), env=slurm.env)
        time.sleep(15)  # a few polls without an answer
        alive, waves = monitor.poll() is None, len(load_waves(Layout(root)))
    finally:
        slurm.start_controller()
        slurm.reconfigure(MessageTimeout=None)
    try:
        _, err = monitor.communicate(timeout=400)
    finally:
        if monitor.poll() is None:  # the monitor this test started, by pid
            monitor.kill()
    assert alive, f"the monitor exited during the outage: {err}"
    assert waves == 1, "a wave was submitted while the scheduler did not answer"
    assert monitor.returncode == 0, err
    assert "the scheduler does not answer" in err and "the scheduler answers again" in err, err
    assert array_ids(root) == [job], "a second array was submitted"
    layout = Layout(root)
    keys = list(layout.iter_runs())
    assert [run_state(layout, k) for k in keys] == [RunState.FINISHED] * 4
    assert [attempts(layout, k) for k in keys] == [1, 1, 1, 1]
    assert "UNKNOWN" not in err and "4 COMPLETED" in err.split("array tasks ended:")[-1], err


@pytest.mark.slurm
@pytest.mark.parametrize("cluster", ["slurm", "slurm_accounting"])
def test_tasks_the_scheduler_forgot_whose_runs_all_have_results_are_completed_not_unknown(cluster, request,
                                                                                          collected_root, tmp_path):
    """Without accounting, slurmctld forgets an ended job after MinJobAge: a task it no longer lists, whose route
    runs all have their result, is counted COMPLETED in the summary. (The array's id is one the cluster never
    gave out: the scheduler knows nothing of it, as of a forgotten job; with accounting sacct does not know it
    either.)"""
    slurm = request.getfixturevalue(cluster)
    routes = collected_root.parent / "routes"
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    jobs = plan(find_route_files(routes), None, 1)
    entries = [{"key": str(j.key), "route": str(j.route_file.resolve()), "route_id": j.route.id,
                "repetition": j.repetition, "towns": str(j.towns)} for j in jobs]
    monitor = Monitor(layout, SlurmOptions(), Scheduler(slurm.env), {}, 3, log=lambda message: None)
    wave = monitor.new_wave(entries)
    wave.arrays[0]["job_id"] = "60000000"  # never given out (MaxJobId is 67043328)
    wave.save()
    age_arrays(root, FORGET_AFTER_S + 60)
    proc = run_tool(*slurm_collect(slurm, routes, root, "--no-watch"), env=slurm.env)
    assert proc.returncode == 0, proc.stderr
    assert "array tasks ended: 4 COMPLETED" in proc.stderr and "UNKNOWN" not in proc.stderr, proc.stderr
    assert array_ids(root) == ["60000000"]


# ----------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk():
    """small_disk(folder, size): a tmpfs of `size` (e.g. "256k") mounted on `folder` (made), unmounted after the
    test. Skips when mounting is not permitted (not root; CI runs as root)."""
    mounted: list[Path] = []

    def mount(folder: Path, size: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs ({proc.stderr.strip() or proc.returncode}): the full-disk tests need "
                        "root (CI runs them as root)")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def assert_disk_full_line(proc, prog: str, folder: Path) -> str:
    """Exit status 75, and the last stderr line is the one line: the folder, its free space, what is needed."""
    assert proc.returncode == EXIT_DISK_FULL, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{prog}: {folder}: no space left on device ("), line
    assert re.search(r"; about \d[^;]* needed for ", line), line
    return line


def test_a_full_disk_stops_a_local_collection_and_a_slurm_task_with_one_line_counting_no_attempt(
        short_routes, tmp_path, small_disk):
    """The local collector and a SLURM array task (bin/collect-task, run by hand as the docs say one may) stop at
    the first attempt the full disk stops, take it back (no attempt counted, its frames gone) and say so in one line;
    the SLURM monitor then submits no new wave but stops with the same line."""
    root = tmp_path / "root"
    small_disk(root / "data", "256k")  # the frames' folder: far less than one route run
    proc = run_tool(BIN / "collect", short_routes, "--root", root, "--workers", "1", "--vehicles", "10",
                    "--max-attempts", "3", timeout=240)
    line = assert_disk_full_line(proc, "collect", root / "data")
    assert "at least what the attempt had written" in line, line
    assert "Simulation crashed" not in proc.stderr and "normal" not in proc.stderr, proc.stderr
    layout = Layout(root)
    jobs = plan(find_route_files(short_routes), None, 1)
    keys = [j.key for j in jobs]
    assert len(keys) == 2 and all(attempts(layout, k) == 0 for k in keys), {k: attempts(layout, k) for k in keys}
    assert all(run_state(layout, k) is RunState.PENDING for k in keys), {k: run_state(layout, k) for k in keys}
    assert sum(layout.disk_full_log(k).exists() for k in keys) == 1, "the collector went on to another route"
    assert not list((root / "data").rglob("*.msgpack")), "the stopped attempt's frames are left"

    # A SLURM wave of both runs in one task, its array submitted a moment ago under a watching monitor.
    for key in keys:
        layout.disk_full_log(key).unlink(missing_ok=True)
    monitor = Monitor(layout, SlurmOptions(), Scheduler(), {}, 3, log=lambda message: None)
    entries = [{"key": str(j.key), "route": str(j.route_file.resolve()), "route_id": j.route.id,
                "repetition": j.repetition, "towns": str(j.towns)} for j in jobs]
    wave = Wave(waves_dir(layout) / "wave-0001.json", 1, entries, 2, 3, {"vehicles": 10}, 1,
                [{"name": "test", "first": 0, "count": 1, "job_id": "1", "argv": None, "submitted": time.time()}])
    wave.save()
    task = run_tool(BIN / "collect-task", wave.path, "0", timeout=240)
    assert_disk_full_line(task, "collect", root / "data")
    assert all(attempts(layout, k) == 0 for k in keys)
    assert sum(layout.disk_full_log(k).exists() for k in keys) == 1, "the task went on to its second run"
    with pytest.raises(DiskFull, match="no space left on device"):
        monitor.check_space(entries, [wave])


def test_a_full_disk_under_build_buckets_is_one_line_with_the_files_exact_size(collected_root, tmp_path, small_disk):
    root = copy_root(collected_root, tmp_path / "root")
    small_disk(root / "buckets", "8k")
    proc = run_tool(BIN / "build-buckets", "--root", root)
    line = assert_disk_full_line(proc, "buckets", root / "buckets")
    print(line)
    assert "exact size" in line, line
    for path in (root / "buckets").iterdir():  # written atomically: whole files or none, no temporary left
        assert path.name == BUCKET_LOCK or json.loads(path.read_text()), path


def test_a_full_disk_under_build_cache_is_one_line_with_the_records_size(collected_root, tmp_path, small_disk):
    root = copy_root(collected_root, tmp_path / "root")
    small_disk(root / "cache", "1m")
    proc = run_tool(BIN / "build-cache", "--root", root)
    line = assert_disk_full_line(proc, "cache", next((root / "cache").iterdir()))
    print(line)
    assert "records of" in line and "the mean of" in line, line


def test_a_full_disk_under_training_is_one_line_with_a_checkpoints_size(train_root, tmp_path, small_disk):
    logdir = small_disk(tmp_path / "run", "1m")
    proc = run_tool(PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY_TRAIN,
                    "max_steps=1", timeout=300)  # the first checkpoint: at the end of step 1
    line = assert_disk_full_line(proc, "train", logdir / "checkpoints")
    print(line)
    assert "model's, optimizer's" in line, line
    assert not list((logdir / "checkpoints").glob(".tmp-*")), "a partial checkpoint is left"


def test_the_size_of_a_route_run_counts_everything_it_writes_its_picture_and_logs_too(collected_root, tmp_path):
    """An evaluation's full-disk line said "about 12.6 KiB needed" where a run writes its picture (0.5-0.9 MB)."""
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    keys = sorted(layout.iter_runs())
    before, _ = route_run_bytes(layout)
    for key in keys:
        layout.film_path(key).parent.mkdir(parents=True, exist_ok=True)
        layout.film_path(key).write_bytes(b"\0" * 600_000)
    after, how = route_run_bytes(layout)
    assert after - before == 600_000 and "finished route runs" in how
    assert run_bytes(layout, keys[0]) >= 600_000 + os.path.getsize(layout.result_path(keys[0]))
