"""The fault suite, part two (docs/reliability.md): outages of what the pipeline stands on. A SLURM controller
stopped in the middle of a wave (the real test cluster, slurmctld stopped and started by its pid), tasks the
scheduler has forgotten, and a full disk (ENOSPC on a small tmpfs) under every stage.

Run with the rest of the fault suite: `pytest -m faults`.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import BIN, copy_root, run_tool, start_tool

from tools.collect.runner.jobs import find_route_files, plan
from tools.collect.runner.slurm import FORGET_AFTER_S, Monitor, Scheduler, SlurmOptions, load_waves
from tools.dataset.layout import Layout
from tools.dataset.results import RunState, attempts, run_state

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
