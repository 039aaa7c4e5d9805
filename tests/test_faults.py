"""The fault suite (docs/reliability.md): kill -9 at random moments, two collectors at once, damaged files,
hostile inputs. Every case asserts what must hold afterwards, not only that nothing crashed.

Run it alone with `pytest -m faults`; it is part of `make test`. The kill moments are drawn from a seeded
generator, so a failure is reproducible; each trial is its own test (the table in the closing note is
pytest's count of them).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, copy_root, read_only, run_bin, run_tool, start_tool, train, tree
from processes import Process, live_processes

from tools.collect.base.routes import read_routes
from tools.dataset.attempts import read_attempts
from tools.dataset.claims import attempts
from tools.dataset.frames import read_frame
from tools.dataset.layout import Layout, RunKey
from tools.dataset.results import RunState, run_state

pytestmark = pytest.mark.faults
REPO_BIN = Path(__file__).resolve().parent.parent / "bin"

TRIALS = 3
TINY_TRAIN = ["batch_size=4", "log_every=1", "image_every=1000", "val_samples=4", "val_every=1000", "warmup_steps=1",
              "save_every=2"]


def moments(name: str, low: float, high: float) -> list[float]:
    """TRIALS kill moments (seconds after the start) for one fault, reproducible."""
    rng = random.Random(name)
    return [round(rng.uniform(low, high), 2) for _ in range(TRIALS)]


# ----------------------------------------------------------------------------- what must hold


def processes_mentioning(text: str) -> list[Process]:
    """Live processes whose command line contains `text` (to see what a killed parent left)."""
    return [p for p in live_processes() if text in p.cmdline]


def wait_for_no_processes(text: str, timeout: float = 10.0) -> list[Process]:
    deadline = time.monotonic() + timeout
    while (left := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def assert_every_run_finished_once(root: Path, expected: int) -> None:
    """Every route run finished, its frames contiguous and readable, no temporary file anywhere, and every
    attempt log written by exactly one attempt."""
    layout = Layout(root)
    keys = list(layout.iter_runs())
    assert len(keys) == expected, keys
    for key in keys:
        assert run_state(layout, key) is RunState.FINISHED, (key, run_state(layout, key))
        frames = layout.frame_paths(key)
        assert [int(p.stem) for p in frames] == list(range(len(frames))), key
        assert frames, key
        for path in frames:
            read_frame(path)  # every sensor decodes
        logs = layout.attempt_logs(key)
        assert [int(p.stem.split("-")[1]) for p in logs] == list(range(1, len(logs) + 1)), key
        for log in logs:  # one attempt per log: a log written by two processes would hold two headers
            assert log.read_text(errors="replace").count("# collect: attempt") <= 1, log
    assert not [p for p in root.rglob(".tmp-*")], "temporary files left"


@pytest.fixture
def routes(tmp_path, short_routes) -> Path:
    return Path(shutil.copytree(short_routes, tmp_path / "routes"))


def collect(routes: Path, root: Path, *extra: str, check: bool = True):
    return run_bin("collect", routes, "--root", root, "--workers", "2", "--vehicles", "10", *extra, check=check,
                   timeout=240)


def kill_after(proc, seconds: float) -> bool:
    """SIGKILL a process we started after `seconds`, unless it ended first; True when killed."""
    try:
        proc.wait(timeout=seconds)
        return False
    except Exception:
        proc.kill()
        proc.wait()
        return True


# ----------------------------------------------------------------------------- kill -9


@pytest.mark.parametrize("delay", moments("collector", 0.5, 5.0))
def test_kill9_of_the_collector_leaves_no_workers_and_a_rerun_finishes_every_run_once(routes, tmp_path, delay):
    root = tmp_path / "root"
    proc = start_tool(REPO_BIN / "collect", routes, "--root", root, "--workers", "2", "--vehicles", "10")
    kill_after(proc, delay)
    # Its workers die with it (PR_SET_PDEATHSIG): none is left to race the rerun's.
    assert wait_for_no_processes(str(root)) == []
    collect(routes, root)
    assert_every_run_finished_once(root, expected=2)


@pytest.mark.parametrize("delay", moments("worker", 1.0, 4.0))
def test_kill9_of_a_worker_is_a_crash_that_the_collector_retries(routes, tmp_path, delay):
    root = tmp_path / "root"
    proc = start_tool(REPO_BIN / "collect", routes, "--root", root, "--workers", "1", "--vehicles", "10")
    time.sleep(delay)
    # Then the first moment a run is being recorded (frames, no result yet): a worker killed after writing its
    # result has finished its run, which is no crash.
    deadline = time.monotonic() + 60.0
    while proc.poll() is None and not _recording(root) and time.monotonic() < deadline:
        time.sleep(0.02)
    # bin/collect execs the collector, so its workers are children of the process we started
    workers = [p.pid for p in processes_mentioning(str(root)) if p.ppid == proc.pid]
    for pid in workers:  # the collector's own child (we started the collector), by pid
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert_every_run_finished_once(root, expected=2)
    runs = sum(attempts(Layout(root), k) for k in Layout(root).iter_runs())
    if workers and "crashed (killed by SIGKILL)" in err:  # (almost always: the kill lands mid-run)
        assert runs == 3  # the crashed attempt and its retry
    else:  # no worker was left to kill, or the kill landed between its result and its exit
        assert runs == 2, err


def _recording(root: Path) -> bool:
    """Whether a route run is being recorded: it has frames and no result yet."""
    layout = Layout(root)
    return any(layout.frame_count(k) > 0 and not layout.result_path(k).exists() for k in layout.iter_runs())


def test_two_collectors_at_once_run_each_route_run_exactly_once(routes, tmp_path):
    root = tmp_path / "root"
    args = [REPO_BIN / "collect", routes, "--root", root, "--workers", "2", "--vehicles", "10"]
    first, second = start_tool(*args), start_tool(*args)
    for proc in (first, second):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert_every_run_finished_once(root, expected=2)
    layout = Layout(root)
    assert [attempts(layout, k) for k in layout.iter_runs()] == [1, 1], "an attempt was counted twice"


@pytest.mark.parametrize("delay", moments("cache", 0.3, 3.0))
def test_kill9_of_the_cache_builder_then_a_rerun_builds_a_verified_cache(collected_root, tmp_path, delay):
    root = copy_root(collected_root, tmp_path / "root")
    proc = start_tool(REPO_BIN / "build-cache", "--root", root)
    kill_after(proc, delay)
    run_bin("build-cache", "--root", root, check=True)
    verify = run_tool(PYTHON, "-m", "tools.cache", "verify", "--root", root)
    assert verify.returncode == 0, verify.stderr
    assert "0 damaged, 0 missing" in verify.stderr
    assert not [p for p in (root / "cache").rglob(".tmp-*")], "a killed builder's temporary file was left"


#: sitecustomize of a deleter killed mid-delete: once it has deleted 3 files of a folder it renamed aside to delete,
#: it ends itself with SIGKILL (the moment a kill -9 would leave the most behind, made exact).
KILLED_MID_DELETE = (
    "import os, shutil, signal\n"
    "_rmtree = shutil.rmtree\n"
    "def rmtree(path, *args, **kwargs):\n"
    "    if os.path.basename(str(path)).startswith('.tmp-trash-'):\n"
    "        for top, _dirs, names in os.walk(path):\n"
    "            for name in names[:3]:\n"
    "                os.unlink(os.path.join(top, name))\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    return _rmtree(path, *args, **kwargs)\n"
    "shutil.rmtree = rmtree\n")


def test_kill9_of_clean_failed_mid_delete_is_counted_and_finished_by_the_next_clean_failed_and_collect_shim(
        collected_root, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(KILLED_MID_DELETE)
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    keys = sorted(layout.iter_runs())
    routes = Path(shutil.copytree(collected_root.parent / "routes", tmp_path / "routes"))
    for key in keys[:-1]:  # collect's routes: only the last run's, finished (collect starts, finds it done)
        (routes / key.scenario / f"{key.name.split('_route')[0]}.xml").unlink()
    env = {"PYTHONPATH": f"{shim}:{REPO}"}
    for finisher, key in (("clean-failed", keys[0]), ("collect", keys[1])):
        layout.result_path(key).unlink()  # crashed: clean-failed --yes deletes it
        killed = run_tool(PYTHON, "-m", "tools.collect", "clean-failed", root, "--yes", env=env)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        trash = sorted(layout.run_dir(key).parent.glob(".tmp-trash-*"))
        assert len(trash) == 1 and not layout.run_dir(key).exists(), trash
        progress = run_bin("progress", root)
        counted = f"1 route run folder ({trash[0].relative_to(root)}) left half deleted"
        assert counted in progress.stdout, progress.stdout
        if finisher == "clean-failed":
            proc = run_bin("clean-failed", root, "--yes")
            assert proc.returncode == 0 and "finished deleting 1 route run folder" in proc.stdout, proc.stdout
            assert not layout.log_dir(key).exists()  # and the crashed run, as asked
        else:
            proc = collect(routes, root)
            assert "finished deleting 1 route run folder" in proc.stderr and "1 skipped" in proc.stderr, proc.stderr
        assert not list(root.glob("data/*/.tmp-*")) and not list(root.glob("logs/*/.tmp-*"))


# train_root: the session's collected root with its buckets and cache (conftest.py; read-only).


@pytest.mark.parametrize("delay", moments("train", 3.0, 15.0))
def test_kill9_of_training_then_a_rerun_resumes_from_an_intact_checkpoint_and_finishes(train_root, tmp_path,
                                                                                       delay):
    from tools.train import checkpoint

    logdir = tmp_path / "run"
    args = [PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY_TRAIN,
            "max_steps=6"]
    proc = start_tool(*args)
    kill_after(proc, delay)
    again = run_tool(*args, timeout=300)
    assert again.returncode == 0, again.stderr
    last = checkpoint.latest(logdir)
    assert last is not None and last.name == "step-00000006"
    checkpoint.verify(last)
    assert not [p for p in (logdir / "checkpoints").iterdir() if p.name.startswith(".tmp-")]


# ----------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize("content", ["", '{"_checkpoint": {"records": [', "[1, 2, 3]", '{"_checkpoint": {}}'])
def test_a_damaged_result_file_is_its_own_state_reported_and_never_deleted(collected_root, tmp_path, content):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = next(iter(layout.iter_runs()))
    layout.result_path(key).write_text(content)
    assert run_state(layout, key) is RunState.DAMAGED
    progress = run_bin("progress", root)
    assert progress.returncode == 0 and "damaged result file" in progress.stdout and str(key) in progress.stdout
    before = tree(root)
    cleaned = run_bin("clean-failed", root, "--yes")
    assert cleaned.returncode == 0
    assert f"{key}  damaged" in cleaned.stdout
    assert tree(root) == before, "clean-failed deleted or changed something of a damaged run"
    assert layout.frame_paths(key)


@pytest.fixture(scope="module")
def four_steps(train_root, tmp_path_factory) -> Path:
    """A run of 4 steps saving at 2 and 4 (the fault suite's tiny settings). Read-only: copy it."""
    logdir = tmp_path_factory.mktemp("faults-four-steps") / "run"
    run_tool(PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY_TRAIN,
             "max_steps=4", check=True, timeout=300)
    return logdir


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_with_one_warning(train_root, four_steps, tmp_path,
                                                                                 damage):
    from tools.train import checkpoint

    logdir = Path(shutil.copytree(four_steps, tmp_path / "run"))  # a private copy of the 4-step run
    args = [PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY_TRAIN]
    newest = checkpoint.latest(logdir)
    assert newest.name == "step-00000004"
    model = newest / "model.pt"
    data = bytearray(model.read_bytes())
    if damage == "flip":
        for i in range(len(data) // 2, len(data) // 2 + 64):
            data[i] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = bytearray()
    model.write_bytes(bytes(data))
    proc = run_tool(*args, "max_steps=5", timeout=300)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "checksum mismatch" in line]
    assert len(warnings) == 1 and "falling back" in warnings[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert checkpoint.latest(logdir).name == "step-00000005"


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("part", ["optimizer.pt", "model.pt"])
def test_a_run_whose_checkpoints_are_all_damaged_never_starts_over_silently_and_purge_keeps_the_intact(
        train_root, four_steps, tmp_path, part):
    """`part` damaged in steps 2 and 4, and a step 9 whose model.pt is damaged (numbered above what the resumed run
    writes). optimizer.pt: step 4's model, schedule and data position are resumed with one line, and purge (keep=1)
    keeps the new step 5, not the damaged 9. model.pt: one line naming them and how to start over, nothing written."""
    from tools.train import checkpoint

    logdir = Path(shutil.copytree(four_steps, tmp_path / "run"))
    shutil.copytree(checkpoint.step_dir(logdir, 4), checkpoint.step_dir(logdir, 9))
    _flip(checkpoint.step_dir(logdir, 9) / "model.pt")
    for step in (2, 4):
        _flip(checkpoint.step_dir(logdir, step) / part)
    before = tree(logdir)
    proc = run_tool(PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY_TRAIN,
                    "max_steps=5", "keep=1", timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "checksum mismatch" in line]
    if part == "optimizer.pt":
        assert proc.returncode == 0, proc.stderr
        assert len(lines) == 2 and "step-00000009/model.pt" in lines[0] and "falling back" in lines[0], proc.stderr
        assert "resuming step-00000004 from its intact model.pt" in lines[1], lines[1]
        assert "new optimizer moments" in lines[1]
        assert "step 4/5" in proc.stderr and "from scratch" not in proc.stderr, proc.stderr
        kept = [p.name for p in checkpoint.complete_checkpoints(logdir)]
        assert kept == ["step-00000005", "step-00000009"], kept  # the intact new step kept, not only the damaged
        assert checkpoint.latest(logdir) == checkpoint.step_dir(logdir, 5)
    else:
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert [line for line in proc.stderr.splitlines() if line.strip()] == lines, proc.stderr
        assert all(s in lines[0] for s in ("none of its 3 checkpoints", "step-00000009 model.pt checksum mismatch",
                                            "step-00000004 model.pt", "step-00000002 model.pt",
                                            "to start over from step 0 on purpose", "mv "))
        assert tree(logdir) == before, "a refused resume wrote into the run folder"


def test_a_planted_pickled_session_cache_is_refused_before_training_reads_it(train_root, tmp_path):
    import diskcache

    from tools.train.data import find_cache

    folder, _ = find_cache(Layout(train_root))
    base = tmp_path / "tmp"
    path = base / f"drivekit-session-{os.getuid()}-{folder.name}"
    marker = tmp_path / "pwned"
    payload = _RunsCode(str(marker))
    with diskcache.Cache(str(path)) as c:  # the attacker's cache: diskcache's default Disk pickles
        c.set("data/x", payload)
    proc = run_tool(PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={tmp_path / 'run'}",
                    *TINY_TRAIN, "max_steps=1", "session_cache=auto", env={"TMPDIR": str(base)}, timeout=300)
    assert proc.returncode != 0
    assert not marker.exists(), "the planted pickle ran"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("train: session cache") and "pickled" in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr


class _RunsCode:
    """What an attacker pickles: unpickling it creates a file."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


# ----------------------------------------------------------------------------- hostile inputs and bad flags


def _route_file(short_routes: Path, tmp_path: Path, edit) -> Path:
    d = Path(shutil.copytree(short_routes, tmp_path / "hostile"))
    first = sorted(p for p in d.rglob("*.xml") if "towns" not in p.parts)[0]
    for other in d.rglob("*.xml"):
        if other != first and "towns" not in other.parts:
            other.unlink()
    first.write_text(edit(first.read_text()))
    return d


@pytest.mark.parametrize("name,edit,expect", [
    ("nan waypoint", lambda t: t.replace('x="', 'x="nan" xx="', 1), "not a finite number"),
    ("town outside towns/", lambda t: t.replace('town="town"', 'town="../../somewhere/town"'), "not a plain name"),
    ("route id with a path", lambda t: t.replace('id="', 'id="../x" old="', 1), "not a plain name"),
    # A 200 MB file took the collector to 3.9 GB for 8 minutes and counted an attempt: refused as it is planned.
    ("a route file past the bound", lambda t: t + "<!--" + "x" * (33 << 20) + "-->", "more than a route file may hold"),
])
def test_hostile_route_files_are_one_line_and_change_nothing(short_routes, tmp_path, name, edit, expect):
    routes = _route_file(short_routes, tmp_path, edit)
    root = tmp_path / "root"
    root.mkdir()
    proc = collect(routes, root, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], proc.stderr
    assert list(root.iterdir()) == []


def test_a_route_id_with_a_path_through_run_is_one_line(short_routes, tmp_path):
    routes = _route_file(short_routes, tmp_path, lambda t: t.replace('id="', 'id="../x" old="', 1))
    route = next(p for p in routes.rglob("*.xml") if "towns" not in p.parts)
    proc = run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route, "--root", tmp_path / "root")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("command", [
    ["build-buckets", "--root", "{root}", "--bogus"],
    ["build-cache", "--root", "{root}", "--bogus"],
    ["clean-failed", "{root}", "--yes", "--bogus"],
    ["clean-failed", "{root}", "--yes=1"],
    ["progress", "{root}", "extra"],
    ["collect", "{routes}", "--root", "{root}", "--workers"],
])
def test_a_bad_flag_is_refused_before_anything_is_touched(collected_root, short_routes, tmp_path, command):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = next(iter(layout.iter_runs()))
    layout.result_path(key).write_text(layout.result_path(key).read_text().replace('"Perfect"', '"Failed"'))
    before = tree(root)
    args = [a.format(root=root, routes=short_routes) for a in command]
    proc = run_bin(*args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert tree(root) == before


def test_a_root_inside_another_root_and_a_root_holding_one_are_refused(collected_root, short_routes, tmp_path):
    outer = copy_root(collected_root, tmp_path / "outer")
    before = tree(outer)
    inside = collect(short_routes, outer / "data", check=False)
    assert inside.returncode == 2 and "inside the dataset root" in inside.stderr, inside.stderr
    holder = tmp_path / "holder"
    copy_root(collected_root, holder / "data")
    for cmd in (["progress", holder], ["clean-failed", holder, "--yes"], ["build-buckets", "--root", holder]):
        proc = run_bin(*cmd)
        assert proc.returncode == 2 and "holds another dataset root" in proc.stderr, (cmd, proc.stderr)
    assert tree(outer) == before


def test_names_the_layout_cannot_produce_are_not_route_runs(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    (root / "data" / "data").mkdir()
    (root / "data" / "data" / "Scenario").mkdir()
    (root / "results" / "data").mkdir()
    (root / "results" / "data" / "notes.json").write_text("{}")
    keys = list(Layout(root).iter_runs())
    assert all(k.name.rsplit("_rep", 1)[1].isdigit() and k.scenario != "data" for k in keys)
    assert len(keys) == len(list(Layout(collected_root).iter_runs()))



def test_build_cache_on_a_read_only_root_is_one_line(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    before = tree(root)
    proc = run_tool(*read_only(root, REPO_BIN / "build-cache", "--root", root))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not writable" in lines[0], proc.stderr
    assert tree(root) == before




# ----------------------------------------------------------------------------- silent corruption, stale caches, bombs

CORRUPTIONS = 6  # damaged frames per trial; and as many damaged records


def _damage(path: Path, rng: random.Random, offset: int | None = None, zero: bool = False) -> None:
    """Overwrite 64 bytes of a file (at `offset`, else at a random place) with random bytes (or zeros) that differ
    from what was there."""
    data = bytearray(path.read_bytes())
    at = rng.randrange(0, len(data) - 64) if offset is None else offset
    new = bytes(64) if zero else bytes(rng.randrange(256) for _ in range(64))
    if data[at:at + 64] == new:
        new = bytes(b ^ 0xFF for b in new)
    data[at:at + 64] = new
    path.write_bytes(bytes(data))


def _blob_offset(path: Path, sensor: str) -> int:
    """Where the middle of a sensor's encoded bytes lies in a frame file."""
    import msgpack

    raw = path.read_bytes()
    blob = msgpack.unpackb(raw, raw=False)["sensors"][sensor]["data"]
    return raw.index(blob) + len(blob) // 2 - 32


def test_random_bytes_in_random_frames_and_records_are_every_one_found(train_root, tmp_path):
    """A seeded trial: 64 zeroed bytes in a LiDAR blob and in a camera JPEG (the bytes still decode), and 64
    random bytes at random places of random frames: validate names every damaged frame, build-cache refuses each
    one by name, and `verify` finds every record damaged the same way."""
    from tools.dataset.cache import record_path, run_rel
    from tools.dataset.validate import inspect_run

    root = copy_root(train_root, tmp_path / "root")
    layout = Layout(root)
    rng = random.Random("corruption")
    frames = [p for key in layout.iter_runs() for p in layout.frame_paths(key)]
    damaged = rng.sample(frames, CORRUPTIONS)
    _damage(damaged[0], rng, _blob_offset(damaged[0], "lidar"), zero=True)
    _damage(damaged[1], rng, _blob_offset(damaged[1], "rgb_front"), zero=True)
    for path in damaged[2:]:
        _damage(path, rng)
    index_of = rng.choice(sorted(layout.iter_runs()))  # and one run's measurements index
    _damage(layout.run_measurements(index_of), rng)
    found = {}
    for key in layout.iter_runs():
        for problem in inspect_run(layout, key).problems:
            found.setdefault(f"{key}/{problem.split(':')[0]}", problem)
    for path in damaged:
        name = f"{path.parent.parent.relative_to(root / 'data')}/frames/{path.name}"
        assert name in found, (name, sorted(found))
    assert f"{index_of}/measurements.msgpack" in found, sorted(found)
    # build-cache: the damaged frames' records are made again (removed first) and each frame is refused by name
    cache = next(p for p in (root / "cache").iterdir() if p.is_dir())
    for path in damaged:
        record_path(cache, f"data/{path.parent.parent.relative_to(root / 'data')}", int(path.stem)).unlink()
    proc = run_bin("build-cache", "--root", root)
    assert proc.returncode != 0
    for path in damaged:
        assert f"{path}: checksum mismatch" in proc.stderr, (path, proc.stderr[-3000:])
    # records: random bytes anywhere in random records, each found by verify
    items = [(run_rel(k), int(p.stem)) for k in layout.iter_runs() for p in layout.frame_paths(k)
             if p not in damaged]
    for rel, index in rng.sample(items, CORRUPTIONS):
        _damage(record_path(cache, rel, index), rng)
    verify = run_tool(PYTHON, "-m", "tools.cache", "verify", "--root", root)
    assert verify.returncode != 0
    assert f"{CORRUPTIONS} damaged, {CORRUPTIONS} missing" in verify.stderr, verify.stderr[-2000:]


def test_a_run_recorded_again_makes_its_cache_records_stale_and_build_cache_rebuilds_them(train_root, tmp_path):
    from tools.dataset.cache import read_run_fingerprint, record_path, record_run, run_rel
    from tools.train import data

    root = copy_root(train_root, tmp_path / "root")
    layout = Layout(root)
    key = sorted(layout.iter_runs())[0]
    cache = next(p for p in (root / "cache").iterdir() if p.is_dir())
    before = read_run_fingerprint(layout, key)
    layout.result_path(key).unlink()  # what validate advises for a bad run: delete its result, collect again
    collect(_routes_of(train_root), root, check=True)
    assert run_state(layout, key) is RunState.FINISHED and read_run_fingerprint(layout, key) != before
    items = [(run_rel(k), i) for k in layout.iter_runs() for i in range(layout.frame_count(k))]
    with pytest.raises(Exception, match="earlier recording"):
        data.check_cache_complete(cache, layout, items, data.run_fingerprints(layout, items))
    verify = run_tool(PYTHON, "-m", "tools.cache", "verify", "--root", root)
    assert verify.returncode != 0 and "stale" in verify.stderr, verify.stderr[-2000:]
    built = run_bin("build-cache", "--root", root)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "made from an earlier recording" in built.stderr and str(key) in built.stderr
    now = read_run_fingerprint(layout, key)
    assert all(record_run(record_path(cache, run_rel(key), i)) == now for i in range(layout.frame_count(key)))
    verify = run_tool(PYTHON, "-m", "tools.cache", "verify", "--root", root)
    assert verify.returncode == 0 and "0 damaged, 0 missing, 0 stale" in verify.stderr, verify.stderr[-2000:]
    data.check_cache_complete(cache, layout, items, data.run_fingerprints(layout, items))


def _routes_of(root: Path) -> Path:
    """The route folder a root was collected from (its manifest's routes_dir)."""
    import json

    return Path(json.loads((root / "manifest.json").read_text())["collections"][0]["routes_dir"])


#: The memory a reader may use while meeting the bombs below (address space of the child process).
BOMB_MEMORY = 1_500_000_000

#: Run in a child process under BOMB_MEMORY: each reader meets its bomb and must refuse it in one line.
BOMB_READERS = r"""
import sys, json
from pathlib import Path
from tools.dataset import cache, frames
from tools.core import files
from tools.dataset.buckets import read_collection
from tools.core.errors import ToolError
from tools.dataset.rig import run_rig
from tools.dataset.samples import CacheSettings

work, run_json = Path(sys.argv[1]), Path(sys.argv[2])
rig = run_rig(json.loads(run_json.read_text()))
cases = []
for path in sorted(work.glob("frame-*")):
    cases += [(path.name + " (rig)", lambda p=path: frames.read_frame(p, rig=rig)),
              (path.name, lambda p=path: frames.read_frame(p))]
for path in sorted(work.glob("record-*")):
    cases += [(path.name, lambda p=path: cache.read_record(p, CacheSettings())),
              (path.name + " (no settings)", lambda p=path: cache.read_record(p))]
for path in sorted(work.glob("bucket-*")):
    cases.append((path.name, lambda p=path: read_collection(p)))
for name, read in cases:
    try:
        read()
        print(f"READ {name}")
    except (frames.FrameError, cache.CacheRecordError, ToolError) as e:
        print(f"refused {name}: {e}")
    except MemoryError:
        print(f"MEMORY {name}")
"""


def _zstd_declaring(size: int) -> bytes:
    """A zstd frame whose header declares `size` bytes of content (one raw block of 8 follows)."""
    import struct

    return b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", size) + b"\x41\x00\x00" + bytes(8)


def test_decompression_bombs_and_huge_ranges_are_refused_under_a_memory_cap(train_root, tmp_path):
    """A frame's LiDAR declaring 8 GiB (in its shape, or only in its zstd header), a JPEG whose header says
    60000 x 60000, a cache record whose body or one of its arrays declares 8 GiB (checksums valid: planted, not
    damaged), a bucket file with a range [0, 1e10] or a negative one: every reader refuses each in one line,
    under a 1.5 GB memory cap (RLIMIT_AS)."""
    import json
    import zlib

    import msgpack

    from tools.dataset.frames import seal

    layout = Layout(train_root)
    key = sorted(layout.iter_runs())[0]
    frame = msgpack.unpackb(layout.frame_path(key, 0).read_bytes(), raw=False)
    frame.pop("crc32")
    work = tmp_path / "bombs"
    work.mkdir()

    def planted(name: str, sensor: str, **blob) -> None:
        sensors = {**frame["sensors"], sensor: {**frame["sensors"][sensor], **blob}}
        (work / f"frame-{name}").write_bytes(seal({**frame, "sensors": sensors}))

    planted("lidar-shape", "lidar", shape=[1 << 29, 4], data=_zstd_declaring(8 << 30))
    planted("lidar-header", "lidar", data=_zstd_declaring(8 << 30))
    jpeg = bytearray(frame["sensors"]["rgb_front"]["data"])
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5:sof + 9] = (60000).to_bytes(2, "big") * 2
    planted("jpeg-header", "rgb_front", data=bytes(jpeg))
    planted("jpeg-shape", "rgb_front", data=bytes(jpeg), shape=[60000, 60000, 3])

    from tools.dataset.cache import Made, record_path, run_rel

    cache = next(p for p in (train_root / "cache").iterdir() if p.is_dir())
    outer = msgpack.unpackb(record_path(cache, run_rel(key), 0).read_bytes(), raw=False)
    fields = msgpack.unpackb(__import__("zstandard").ZstdDecompressor().decompress(outer["body"]), raw=False)
    bodies = {"body": _zstd_declaring(8 << 30),
              "array": __import__("zstandard").ZstdCompressor().compress(msgpack.packb(
                  {**fields, "depth": {**fields["depth"], "codec": "zstd", "shape": [1 << 16, 1 << 16],
                                       "data": _zstd_declaring(8 << 30)}}, use_bin_type=True))}
    made = Made(outer["source"], outer["index"], outer["run"], outer["frame"]).packed()  # what the checksum covers
    for name, body in bodies.items():
        (work / f"record-{name}").write_bytes(msgpack.packb({**outer, "crc32": zlib.crc32(body, zlib.crc32(made)),
                                                             "body": body}, use_bin_type=True))

    bucket_file = next(p for p in (train_root / "buckets").glob("*.json") if p.name != "index.json")
    data = json.loads(bucket_file.read_text())
    bucket = next(b for b in data["buckets"] if b["frames"])
    run = next(iter(bucket["frames"]))
    for name, ranges in {"huge": [[0, 10 ** 10]], "negative": [[-5, 3]]}.items():
        bucket["frames"][run] = ranges
        (work / f"bucket-{name}.json").write_text(json.dumps(data))

    proc = run_tool("prlimit", f"--as={BOMB_MEMORY}", PYTHON, "-c", BOMB_READERS, work,
                    layout.run_settings(key), env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                    timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 * 2 + 2 * 2 + 2 and all(line.startswith("refused ") for line in lines), proc.stdout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_result_file_that_is_a_fifo_or_dev_zero_is_a_damaged_run_not_a_hang(collected_root, tmp_path, kind):
    """Every tool runs under a memory cap (a reader of /dev/zero would otherwise take the machine's memory)."""
    capped = ("prlimit", f"--as={2 * BOMB_MEMORY}")
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = sorted(layout.iter_runs())[0]
    result = layout.result_path(key)
    result.unlink()
    if kind == "fifo":
        os.mkfifo(result)
    else:
        result.symlink_to("/dev/zero")
    state = run_tool(*capped, PYTHON, "-c", "import sys; from pathlib import Path; "
                     "from tools.dataset.layout import Layout, RunKey; from tools.dataset.results import run_state; "
                     "print(run_state(Layout(Path(sys.argv[1])), RunKey(*sys.argv[2:])).value)",
                     root, key.scenario, key.name, timeout=60)
    assert state.stdout.strip() == RunState.DAMAGED.value, state.stderr[-2000:]
    for command in (("progress", root), ("clean-failed", root, "--yes"), ("build-buckets", "--root", root)):
        proc = run_tool(*capped, REPO_BIN / command[0], *command[1:], timeout=120)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
    assert "damaged result file" in run_tool(*capped, REPO_BIN / "progress", root, timeout=60).stdout
    # collect ends (every other run is finished) and redoes nothing
    again = run_tool(*capped, REPO_BIN / "collect", _routes_of(root), "--root", root, "--workers", "2", "--vehicles",
                     "10", timeout=240)
    assert "damaged" in again.stdout + again.stderr, again.stderr[-2000:]
    assert result.is_symlink() or result.is_fifo(), "a tool removed or replaced it"


NESTING_BOMB = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("target", ["result", "heartbeat", "manifest", "bucket", "attempts"])
def test_a_json_nesting_bomb_in_a_root_file_is_one_line_in_every_tool(train_root, tmp_path, target):
    """'[' * 100,000: Python's JSON parser raises RecursionError, which no reader caught (a traceback in progress,
    clean-failed, collect, build-buckets, validate and train). files.loads makes it damaged JSON like any other."""
    root = copy_root(train_root, tmp_path / "root")
    layout = Layout(root)
    key = sorted(layout.iter_runs())[0]
    path = {"result": layout.result_path(key), "heartbeat": layout.heartbeat(key), "manifest": layout.manifest,
            "bucket": next((root / "buckets").rglob("*.json")), "attempts": layout.attempts_record(key)}[target]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NESTING_BOMB)
    commands = [("progress", root), ("clean-failed", root), ("validate", "--root", root),
                ("build-buckets", "--root", root)]
    for command in commands:
        proc = run_bin(command[0], *command[1:], timeout=120)
        assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr, (command, proc.stderr[-3000:])
        if proc.returncode:
            assert len(proc.stderr.strip().splitlines()) == 1 and str(path.name) in proc.stderr, (command, proc.stderr)
    # collect and train read the same files through the same readers: the readers in-process, for the seconds
    read = run_tool(PYTHON, "-c", NESTED_READERS, root, timeout=60)
    assert read.returncode == 0 and "Traceback" not in read.stderr, read.stderr[-3000:]
    assert path.read_text() == NESTING_BOMB, "a tool rewrote the damaged file"


NESTED_READERS = r"""
import sys
from pathlib import Path
from tools.core.errors import ToolError
from tools.dataset import attempts, heartbeats, manifest, results
from tools.dataset.buckets import read_collection
from tools.dataset.layout import Layout, RunKey
layout = Layout(Path(sys.argv[1]))
for key in layout.iter_runs():
    results.run_state(layout, key), attempts.read_attempts(layout, key)
    heartbeats.heartbeat_alive(layout.heartbeat(key))
for path in (layout.root / "buckets").rglob("*.json"):
    try:
        read_collection(path)
    except ToolError:
        pass
try:
    manifest.read_manifest(layout)
except ToolError:
    pass
"""


def test_an_attempts_record_that_is_dev_zero_is_no_attempts_not_a_memory_error(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = sorted(layout.iter_runs())[0]
    record = layout.attempts_record(key)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.unlink(missing_ok=True)
    record.symlink_to("/dev/zero")
    proc = run_tool("prlimit", f"--as={2 * BOMB_MEMORY}", PYTHON, "-c",
                    "import sys; from pathlib import Path; from tools.dataset.layout import Layout, RunKey; "
                    "from tools.dataset.attempts import read_attempts; "
                    "print(read_attempts(Layout(Path(sys.argv[1])), RunKey(*sys.argv[2:])))",
                    root, key.scenario, key.name, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-2000:]
    info = run_tool("prlimit", f"--as={2 * BOMB_MEMORY}", REPO_BIN / "progress", root, timeout=60)
    assert info.returncode == 0 and "MemoryError" not in info.stderr, info.stderr[-2000:]


def test_a_bucket_file_edited_by_hand_is_refused_by_training_in_one_line(train_root, tmp_path):
    """The test split relabelled as train: training read 500 train frames instead of 81 and exited 0."""
    root = copy_root(train_root, tmp_path / "root")
    path = root / "buckets" / "pretrain.json"
    data = json.loads(path.read_text())
    for bucket in data["buckets"]:
        bucket["split"] = "train" if bucket["split"] == "test" else bucket["split"]
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    proc = train("pretrain", root, tmp_path / "logdir", "max_steps=1")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pretrain.json: edited since it was built" in lines[0] and "--force" in lines[0], \
        proc.stderr[-2000:]
    assert path.read_bytes() == before and not (tmp_path / "logdir").exists()


def test_a_route_set_written_again_under_the_same_names_is_refused_and_replace_drives_it(collected_root, tmp_path):
    """Routes written again under the same names (another --seed, a folder of the same file names) were "1 skipped
    as already finished": the manifest named the new file while the run on disk drove the old route, and the new
    route was never driven. Here the same route with another weather: the same run name, another route."""
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    old = sorted(p for p in _routes_of(root).rglob("*.xml") if "towns" not in p.parts)[0]
    new = tmp_path / "again" / old.parent.name / old.name
    new.parent.mkdir(parents=True)
    shutil.copytree(_routes_of(root) / "towns", tmp_path / "again" / "towns")
    text = old.read_text()
    new.write_text(re.sub(r'cloudiness="[0-9.]+"', 'cloudiness="33"', text, count=1))
    assert new.read_text() != text
    (route,) = read_routes(new)
    key = next(k for k in layout.iter_runs() if k.name.startswith(f"{new.stem}_route"))
    before = tree(root)
    proc = collect(new.parent.parent, root, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{new}: route {route.id} is not the route run {key} drove" in lines[0] \
        and str(old) in lines[0] and "--replace" in lines[0] and "new --root" in lines[0], proc.stderr
    assert tree(root) == before
    proc = collect(new.parent.parent, root, "--replace", check=False)
    assert proc.returncode == 0 and "--replace: 1 of 1 finished runs whose route changed discarded" in proc.stderr, \
        proc.stderr[-2000:]
    assert [e["route"] for e in read_attempts(layout, key)] == [route.digest]  # its attempts start over


def test_a_slurm_task_replanning_a_run_whose_route_file_changed_since_the_wave_stops_in_one_line(short_routes,
                                                                                                 tmp_path):
    """A task re-plans a run from its wave's entry when the run's spec is gone (bin/clean-failed removes it): the
    route file read then must hold the route the collection planned, else the run would drive another one."""
    from tools.collect.base.config import CollectSettings
    from tools.collect.runner.slurm_task import _task_spec
    from tools.core.errors import ToolError

    routes = Path(shutil.copytree(short_routes, tmp_path / "routes"))
    path = sorted(p for p in routes.rglob("*.xml") if "towns" not in p.parts)[0]
    (route,) = read_routes(path)
    entry = {"key": f"{route.scenario}/{path.stem}_route{route.id}_rep0", "route": str(path), "route_id": route.id,
             "route_digest": route.digest, "repetition": 0, "towns": str(routes / "towns")}
    layout = Layout(tmp_path / "root")
    assert _task_spec(layout, entry, CollectSettings(), Path("wave-0001.json")).route.digest == route.digest
    layout.run_spec(RunKey(*entry["key"].split("/"))).unlink()
    path.write_text(re.sub(r'cloudiness="[0-9.]+"', 'cloudiness="33"', path.read_text(), count=1))
    with pytest.raises(ToolError, match=rf"{path}: route {route.id} changed since the collection planned it"):
        _task_spec(layout, entry, CollectSettings(), Path("wave-0001.json"))


def _swap(a: Path, b: Path) -> None:
    """Swap two files' contents (by renaming, as a careless `mv` would)."""
    tmp = a.with_name(a.name + ".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def test_frames_swapped_between_runs_are_refused_by_build_cache_by_the_rule_validate_applies(train_root, tmp_path):
    """Frame 5 of two runs swapped (checksums intact: each frame is whole): validate named them, but
    `bin/build-cache --force` built both into the cache, exit 0. Each frame names its run and index inside its
    checksummed bytes, and the builder refuses a frame that lies elsewhere, with validate's words."""
    from tools.dataset.cache import cache_dir, read_record, record_path, run_rel
    from tools.dataset.frames import misplaced
    from tools.dataset.samples import CacheSettings

    root = copy_root(train_root, tmp_path / "root")
    layout = Layout(root)
    first, second = sorted(layout.iter_runs())[:2]
    a, b = layout.frame_path(first, 5), layout.frame_path(second, 5)
    _swap(a, b)
    rule = misplaced(read_frame(a, sensors=False), str(first), 5)
    assert f"holds frame 5 of run '{second}', not frame 5 of run {first}" in rule
    cache = cache_dir(layout, CacheSettings())
    for key in (first, second):  # what --force does to these two (the other records are left to save time)
        record_path(cache, run_rel(key), 5).unlink()
    proc = run_bin("build-cache", "--root", root)
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert f"{a}: cannot make its sample (FrameError: {rule})" in proc.stderr
    assert f"{b}: cannot make its sample (FrameError: holds frame 5 of run '{first}'" in proc.stderr
    assert "2 samples could not be made" in proc.stderr.strip().splitlines()[-1]
    assert not record_path(cache, run_rel(first), 5).exists() and not record_path(cache, run_rel(second), 5).exists()
    read_record(record_path(cache, run_rel(first), 6))  # the rest of the cache stands
    # validate's words for the same frame are the rule's
    from tools.dataset.validate import inspect_run

    assert [p for p in inspect_run(layout, first).problems if "holds frame" in p] == [f"frames/00005.msgpack: {rule}"]


def test_cache_records_swapped_within_a_run_are_found_by_verify_and_refused_by_the_loader(train_root, tmp_path,
                                                                                          monkeypatch, capsys):
    """Records 3 and 7 of a run swapped: both have valid checksums and name the run's recorded attempt, so verify
    passed them and training read frame 7's sample as frame 3's. A record names its run, its frame index and its
    frame's fingerprint; verify reports both as damaged and the loader refuses them."""
    import numpy as np

    from tools.dataset.cache import CacheRecordError, cache_dir, read_record, record_path, run_rel
    from tools.dataset.samples import CacheSettings
    from tools.train import data

    root = copy_root(train_root, tmp_path / "root")
    layout = Layout(root)
    key = sorted(layout.iter_runs())[0]
    rel = run_rel(key)
    cache = cache_dir(layout, CacheSettings())
    three, seven = record_path(cache, rel, 3), record_path(cache, rel, 7)
    _swap(three, seven)
    # the loader: the record is refused, rebuilt (here: the rebuild fails) and the sample replaced by the next one
    items = [(rel, i) for i in range(layout.frame_count(key))]
    rebuilt = []

    def rebuild(root, settings, run, index):
        rebuilt.append((run, index))
        raise CacheRecordError("rebuild refused by the test")

    monkeypatch.setattr(data, "rebuild_record", rebuild)
    loader = data.RecordDataset(items, root, cache, CacheSettings(), None, data.run_fingerprints(layout, items),
                                data.frame_fingerprints(layout, items))
    sample = loader[3]
    assert rebuilt == [(rel, 3)] and sample["replaced"] == 1
    np.testing.assert_array_equal(sample["rgb"], read_record(record_path(cache, rel, 4))["rgb"])  # the next one's
    err = capsys.readouterr().err
    assert f"{three}: holds the sample of frame 7 of {rel}, not of frame 3 of {rel}" in err, err
    # verify names both, as damaged records (which --repair makes again, tests/cache)
    verify = run_tool(PYTHON, "-m", "tools.cache", "verify", "--root", root)
    assert verify.returncode != 0 and "2 damaged, 0 missing, 0 stale" in verify.stderr, verify.stderr[-2000:]
    assert f"{seven}: holds the sample of frame 3 of {rel}, not of frame 7" in verify.stderr
    assert f"{three}: holds the sample of frame 7 of {rel}, not of frame 3" in verify.stderr
