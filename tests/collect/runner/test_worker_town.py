"""A worker pays a town's load once: its route runs are forked from a zygote that loaded the town
(tools.collect.runner.zygote), and a route run that crashes ends alone, leaving the next one of the same worker fine.

Checked through what the runs' logs say (which zygote forked a run, how many runs it forked, whether the run found
the town kept), never through timings."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import BIN, PYTHON, file_bytes, run_bin, run_tool, start_tool

from tools.collect.runner.zygote import Zygote
from tools.dataset.claims import attempts
from tools.dataset.layout import Layout
from tools.dataset.results import FAILED_SIMULATION, RunState, read_status, run_state

#: The line a forked route run's log opens with (tools.collect.runner.zygote._child).
FORKED = re.compile(r"# town (?P<town>\S+) loaded once by this worker \(zygote pid (?P<pid>\d+)\) in [\d.]+ s: .*; "
                    r"route run (?P<n>\d+) forked from it")


def _forks(log: Path) -> list[tuple[int, int]]:
    text = log.read_text(errors="replace")
    return [(int(m["pid"]), int(m["n"])) for m in FORKED.finditer(text)]


@pytest.fixture
def one_route(tmp_path, short_routes) -> Path:
    """The first of the short routes and the town."""
    d = tmp_path / "one-route"
    first = sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts)[0]
    (d / first.parent.name).mkdir(parents=True)
    shutil.copy(first, d / first.parent.name / first.name)
    shutil.copytree(short_routes / "towns", d / "towns")
    return d


def test_a_workers_next_route_run_finds_the_town_kept_after_a_run_crashed_by_sigsegv(one_route, tmp_path):
    """One worker: its first route run is killed by SIGSEGV while it records; the retry is forked from the same
    zygote (the town is not loaded again), finds the town kept, and finishes."""
    root = tmp_path / "root"
    layout = Layout(root)
    collector = start_tool(BIN / "collect", one_route, "--root", root, "--workers", "1", "--vehicles", "10")
    try:
        deadline = time.monotonic() + 120
        while True:  # the run's process, once it recorded a few frames (its heartbeat names its pid)
            assert time.monotonic() < deadline and collector.poll() is None, "no route run started recording"
            beats = list(root.glob("data/*/*/heartbeat.json"))
            if beats and len(list(beats[0].parent.glob("frames/*"))) >= 3:
                victim = json.loads(beats[0].read_text())["pid"]
                break
            time.sleep(0.02)
        os.kill(victim, signal.SIGSEGV)  # a crash in the route run's own process (as libcarla's would be)
        _, err = collector.communicate(timeout=240)
    finally:
        if collector.poll() is None:
            collector.kill()
    assert collector.returncode == 0, err
    assert "crashed (killed by SIGSEGV)" in err and "1 route runs finished and 0 failed" in err, err
    (key,) = list(layout.iter_runs())
    assert run_state(layout, key) is RunState.FINISHED and attempts(layout, key) == 2
    logs = layout.attempt_logs(key)
    forks = [f for log in logs for f in _forks(log)]
    assert len({pid for pid, _ in forks}) == 1, f"the town was loaded by more than one zygote: {forks}"
    assert [n for _, n in forks] == [1, 2]
    assert all("(kept by this worker)" in log.read_text(errors="replace") for log in logs)
    assert read_status(layout.result_path(key)) != FAILED_SIMULATION  # the retry's result replaced the crash's


def test_a_route_run_forked_from_a_zygote_records_what_the_same_run_started_alone_records(one_route, tmp_path):
    """The world is the route's and the repetition's seed, nothing else: a run that bin/collect forks from a worker's
    zygote (which loaded the town and rendered a warm-up frame first) and the same run started alone with the same
    settings (`python -m tools.collect run`) record the same measurements and frames, byte for byte, and the same
    outcome."""
    (route,) = [p for p in one_route.rglob("*.xml") if "towns" not in p.parts]
    forked, alone = tmp_path / "forked", tmp_path / "alone"
    proc = run_bin("collect", one_route, "--root", forked, "--workers", "1", "--vehicles", "10", timeout=240)
    assert proc.returncode == 0, proc.stderr
    proc = run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route, "--root", alone, "--vehicles=10",
                    timeout=240)
    assert proc.returncode == 0, proc.stderr
    (key,) = list(Layout(forked).iter_runs())
    assert list(Layout(alone).iter_runs()) == [key]
    assert [n for log in Layout(forked).attempt_logs(key) for _, n in _forks(log)] == [1]  # it was forked

    def recorded(root: Path) -> dict[str, bytes]:
        return {name: data for name, data in file_bytes(Layout(root).run_dir(key)).items()
                if name not in ("run.json", "heartbeat.json")}  # these name the process

    def outcome(root: Path) -> dict:
        record = json.loads(Layout(root).result_path(key).read_text())["_checkpoint"]["records"][0]
        return {**record, "meta": {k: v for k, v in record["meta"].items() if k != "duration_system"}}

    ours, theirs = recorded(forked), recorded(alone)
    assert "measurements.msgpack" in ours and len(ours) > 10
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []
    assert outcome(forked) == outcome(alone)


def test_a_zygote_outlives_children_that_exit_or_segfault_and_still_runs_a_route(short_routes, tmp_path):
    """Children forked from one zygote that end with os._exit and with SIGSEGV in their own code; the next child
    drives a route run (claiming it itself, as `python -m tools.collect run` alone does) to a result."""
    town = short_routes / "towns" / "town.xodr"
    route = sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts)[0]
    root = tmp_path / "root"
    log = tmp_path / "child.log"
    lock = os.open(tmp_path / "unused.lock", os.O_CREAT | os.O_RDWR)
    z = Zygote(town, root)
    try:
        # A child runs any module's command line as `python -m` would: the stdlib's timeit runs our statement.
        exits = z.spawn(["timeit", "-n", "1", "import os; os._exit(7)"], log, lock)
        crashes = z.spawn(["timeit", "-n", "1", "import ctypes; ctypes.string_at(0)"], log, lock)
        assert exits.wait(120) == 7
        assert crashes.wait(60) == -signal.SIGSEGV
        run = ["tools.collect", "run", "--route", str(route), "--root", str(root), "--vehicles=5"]
        drives = z.spawn(run, log, lock)
        assert drives.wait(120) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        os.close(lock)
        z.close()
    assert [n for _, n in _forks(log)] == [1, 2, 3]
    (key,) = list(Layout(root).iter_runs())
    assert run_state(Layout(root), key) is RunState.FINISHED
    assert "(kept by this worker)" in log.read_text(errors="replace")
    assert z.proc.returncode is not None  # closed: no zygote left behind


def test_warm_up_loads_every_renderer_kernel_a_route_runs_first_frame_calls(town_xodr):
    """A forked route run paid about 0.8 s at its first frame for numba to load the renderer's compiled kernels
    (Town12: later set-up 2.5 s, 1.1 s with the zygote's warm-up): after `warm_up`, rendering a frame of another
    place compiles and loads nothing more."""
    from tools.collect.base.town import Town
    from tools.collect.sensors import raycast
    from tools.collect.sensors.render import Renderer, warm_up
    from tools.collect.sensors.scene import Scene
    from tools.dataset import semantics as sem
    from tools.dataset.rig import RigConfig
    from tools.expert.state import Box, Snapshot

    town = Town(town_xodr)
    assert warm_up(town) > 0.0
    kernels = {name: f for name, f in vars(raycast).items() if hasattr(f, "signatures")}  # every numba dispatcher
    loaded = {name: len(f.signatures) for name, f in kernels.items()}
    assert all(loaded[name] for name in ("camera_plan", "camera_boxes", "camera_ground", "camera_finish",
                                         "lidar_plan", "lidar_boxes", "lidar_points", "bev_ground"))
    lane = [la for la in town.lanes if not la.internal and len(la.centerline) >= 2][-1]
    (x, y), (x1, y1) = lane.centerline[0], lane.centerline[1]
    yaw = math.degrees(math.atan2(y1 - y, x1 - x))
    scene = Scene(town, seed=0, region=Scene.route_region(lane.centerline))
    ego = Box(0, sem.CAR, x, y, 0.75, yaw, 4.9, 2.1, 1.5)
    others = [Box(k, cls, x + 6.0 * k, y, 1.0, yaw, 5.0, 2.0, 2.0, 3.0) for k, cls in ((1, sem.BUS), (2, sem.CAR))]
    Renderer(scene, RigConfig()).render(Snapshot(time=1.0, ego=ego, actors=others, lights=[]))
    assert {name: len(f.signatures) for name, f in kernels.items()} == loaded
