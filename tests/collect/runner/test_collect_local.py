"""bin/collect end to end on the embedded world: real town, real routes, real worker processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import BIN, progress_table, run_bin, start_tool, tree

from tools.collect.base.spec import RunSpec
from tools.dataset.attempts import read_attempts
from tools.dataset.claims import attempts
from tools.dataset.frames import read_frame
from tools.dataset.layout import DATASET_FORMAT, Layout, RunKey
from tools.dataset.manifest import update_manifest
from tools.dataset.results import (
    FAILED_SIMULATION,
    PERFECT,
    RouteRecord,
    RunState,
    read_status,
    run_state,
    write_result,
)


def run_keys(root: Path) -> list[RunKey]:
    return list(Layout(root).iter_runs())


def no_temporary_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.startswith(".tmp-")]


@pytest.fixture
def routes(tmp_path, short_routes) -> Path:
    """A private copy of the 2 short routes and their town (tests edit it)."""
    return Path(shutil.copytree(short_routes, tmp_path / "routes"))


@pytest.fixture
def one_route(tmp_path, short_routes) -> Path:
    """A folder with the first of the short routes and the town."""
    d = tmp_path / "one-route"
    first = sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]
    (d / first.parent.name).mkdir(parents=True)
    shutil.copy(first, d / first.parent.name / first.name)
    shutil.copytree(short_routes / "towns", d / "towns")
    return d


def test_two_routes_collected_end_to_end_with_two_workers_then_rerun_skips(routes, tmp_path):
    root = tmp_path / "root"
    proc = run_bin("collect", str(routes), "--root", str(root), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "2 route runs finished and 0 failed" in proc.stderr
    assert f"bin/progress {root}" in proc.stderr
    # The summary counts what is on disk. (How fast collection is belongs to benchmarks/, not here.)
    frames = sum(len(Layout(root).frame_paths(k)) for k in run_keys(root))
    assert frames > 0 and f" {frames} frames recorded by the finished runs" in proc.stderr

    rows = progress_table(run_bin("progress", str(root)).stdout)
    assert rows["total"][:5] == ["2", "2", "0", "0", "0"]
    manifest = json.loads((root / "manifest.json").read_text())
    assert sorted(manifest["runs"]) == sorted(str(k) for k in run_keys(root))
    assert len(manifest["collections"]) == 1 and manifest["collections"][0]["workers"] == 2

    results_before = tree(root / "results")
    again = run_bin("collect", str(routes), "--root", str(root), "--workers", "2")
    assert again.returncode == 0, again.stderr
    assert "0 route runs finished" in again.stderr and "2 skipped as already finished" in again.stderr
    assert tree(root / "results") == results_before
    assert [attempts(Layout(root), k) for k in run_keys(root)] == [1, 1]
    assert len(json.loads((root / "manifest.json").read_text())["collections"]) == 2


def start_collector(routes: Path, root: Path, *args: str) -> subprocess.Popen:
    return start_tool(BIN / "collect", routes, "--root", root, *args)


def wait_for_worker(collector: subprocess.Popen, root: Path, frames: int) -> tuple[RunKey, int]:
    """The run a worker is driving and the worker's pid (from its heartbeat), once it recorded `frames`."""
    layout = Layout(root)
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"no {frames} frames recorded within 60 s"
        assert collector.poll() is None, "the collector ended before its worker could be interrupted"
        beats = list(root.glob("data/*/*/heartbeat.json"))
        if beats:
            key = RunKey(beats[0].parent.parent.name, beats[0].parent.name)
            assert not layout.result_path(key).exists(), "the route ended before it could be interrupted"
            if len(layout.frame_paths(key)) >= frames:
                pid = json.loads(beats[0].read_text())["pid"]
                assert pid != collector.pid
                return key, pid
        time.sleep(0.01)


def test_worker_killed_mid_route_never_looks_complete_and_rerun_completes_it(one_route, tmp_path):
    root = tmp_path / "root"
    layout = Layout(root)
    collector = start_collector(one_route, root, "--max-attempts", "1")
    try:
        key, worker = wait_for_worker(collector, root, frames=3)
        os.kill(worker, signal.SIGKILL)
        _, err = collector.communicate(timeout=60)
    finally:
        if collector.poll() is None:
            collector.kill()
    assert collector.returncode == 0, err
    assert "killed by SIGKILL" in err and "0 route runs finished and 1 failed" in err
    assert run_state(layout, key) is RunState.FAILED
    assert read_status(layout.result_path(key)) == FAILED_SIMULATION

    proc = run_bin("collect", str(one_route), "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    assert "1 route runs finished" in proc.stderr
    assert run_state(layout, key) is RunState.FINISHED
    assert attempts(layout, key) == 2
    # Each attempt's outcome is kept: the crash (how the worker's process ended), then the finished drive.
    assert read_attempts(layout, key) == [
        {"attempt": 1, "status": FAILED_SIMULATION, "message": "the route run's process ended (killed by SIGKILL)",
         "detail": "the route run's process ended (killed by SIGKILL)", "route": ""},  # the collector's record
        {"attempt": 2, "status": read_status(layout.result_path(key)), "message": "", "detail": "",
         "route": RunSpec.read(layout.run_spec(key)).route.digest}]  # the run's own, with the route it drove
    assert "1 route runs crashed, then finished on a later attempt" in proc.stderr
    frames = layout.frame_paths(key)
    assert [int(p.stem) for p in frames] == list(range(len(frames))) and len(frames) > 3
    for i, path in enumerate(frames):
        assert read_frame(path)["index"] == i
    assert no_temporary_files(root)


def test_sigterm_ends_the_workers_by_process_group_and_exits_non_zero(one_route, tmp_path):
    root = tmp_path / "root"
    collector = start_collector(one_route, root)
    try:
        key, worker = wait_for_worker(collector, root, frames=1)
        collector.send_signal(signal.SIGTERM)
        _, err = collector.communicate(timeout=30)
    finally:
        if collector.poll() is None:
            collector.kill()
    assert collector.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM" in err
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)
    assert run_state(Layout(root), key) is RunState.CRASHED  # unfinished, and never looks complete


def test_max_attempts_is_respected_counting_attempt_logs_on_disk(one_route, tmp_path):
    root = tmp_path / "root"
    layout = Layout(root)
    hopeless = ["--timeout-base=0", "--timeout-speed=1000"]  # a route time budget of a fraction of a second
    proc = run_bin("collect", str(one_route), "--root", str(root), "--max-attempts", "2", *hopeless)
    assert proc.returncode == 0, proc.stderr
    assert "0 route runs finished and 1 failed" in proc.stderr and "1 failed attempts were retried" in proc.stderr
    assert "collection still exits 0" in proc.stderr
    (key,) = run_keys(root)
    assert run_state(layout, key) is RunState.FAILED and attempts(layout, key) == 2

    again = run_bin("collect", str(one_route), "--root", str(root), "--max-attempts", "2", *hopeless)
    assert again.returncode == 0 and "1 given up" in again.stderr
    assert attempts(layout, key) == 2

    more = run_bin("collect", str(one_route), "--root", str(root), "--max-attempts", "3", *hopeless)
    assert more.returncode == 0 and "1 failed in this invocation" in more.stderr
    assert attempts(layout, key) == 3


# ----------------------------------------------------------------------------- bad input


def _first_route_file(routes: Path) -> Path:
    return sorted(p for p in routes.rglob("*.xml") if "towns" not in p.parts)[0]


def _malformed(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    f = _first_route_file(routes)
    f.write_text('<routes><route id="0" town="town"><waypoints><position x="1"')
    return [str(routes)], str(f)


def _town_missing(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    f = _first_route_file(routes)
    f.write_text(f.read_text().replace('town="town"', 'town="Atlantis"'))
    return [str(routes)], "Atlantis"


def _off_road(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    f = _first_route_file(routes)
    tree_ = ET.parse(f)
    first = tree_.getroot().find("route/waypoints/position")
    first.set("x", f"{float(first.get('x')) + 5000.0:.1f}")
    tree_.write(f)
    return [str(routes)], str(f)


def _empty_folder(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    empty = tmp_path / "empty"
    shutil.copytree(routes / "towns", empty / "towns")  # a town, but no route file
    return [str(empty)], str(empty)


def _zero_workers(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    return [str(routes), "--workers", "0"], "--workers"


def _unknown_setting(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    return [str(routes), "--vehicels=10"], "--vehicels"


def _foreign_manifest(routes: Path, tmp_path: Path) -> tuple[list[str], str]:
    manifest = tmp_path / "root" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(f'"format_version": {DATASET_FORMAT}', '"format_version": 99'))
    return [str(routes)], "format version 99"


@pytest.mark.parametrize("make_bad", [_malformed, _town_missing, _off_road, _empty_folder, _zero_workers,
                                      _unknown_setting, _foreign_manifest], ids=lambda f: f.__name__.strip("_"))
def test_bad_input_is_one_line_naming_it_and_leaves_root_unchanged(make_bad, routes, tmp_path):
    root = tmp_path / "root"
    layout = Layout(root)
    update_manifest(layout, {"routes_dir": "/before"}, {"S/x_route0_rep0": {}})
    write_result(layout, RunKey("S", "x_route0_rep0"), RouteRecord("0", PERFECT, route_completion=100.0))
    args, named = make_bad(routes, tmp_path)
    before = tree(root)
    time.sleep(0.01)
    proc = run_bin("collect", *args, "--root", str(root))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("collect: ") and named in lines[0], proc.stderr
    assert tree(root) == before


def test_unwritable_root_is_one_line_and_nothing_is_created(routes, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file where a folder should be")
    before = tree(tmp_path)
    proc = run_bin("collect", str(routes), "--root", str(blocker / "root"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"collect: --root {blocker / 'root'}"), proc.stderr
    assert tree(tmp_path) == before


def test_two_route_files_making_the_same_run_are_refused_naming_both(routes, tmp_path):
    f = _first_route_file(routes)
    twin = f.parent.parent / "Elsewhere" / f.parent.name / f.name  # same stem, id and scenario type
    twin.parent.mkdir(parents=True)
    shutil.copy(f, twin)
    proc = run_bin("collect", str(routes), "--root", str(tmp_path / "root"))
    assert proc.returncode == 2
    assert str(f) in proc.stderr and str(twin) in proc.stderr
    assert not (tmp_path / "root").exists()
