"""The fault suite, shared roots (docs/reliability.md "Shared roots"): symbolic links out of a root, a file system
without flock, clocks that differ between hosts, two trainings in one run folder, a resume that changes a key,
route ids too long for a file system, weather out of range. `pytest -m faults` runs them with tests/test_faults.py.

Shims, named in the test names: another host's clock is a child process writing heartbeats with a shifted time
and another host name (this machine has one clock); a file system without flock is `fcntl.flock` raising ENOLCK
in the tool's process (a sitecustomize on PYTHONPATH), as NFS without its lock daemon does.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, TINY, copy_root, run_bin, run_tool, start_tool, tree, wait_until

from tools.core.errors import ToolError
from tools.dataset import claims, heartbeats
from tools.dataset.layout import RUN_NAME_MAX, Layout
from tools.dataset.results import RunState, run_state

pytestmark = pytest.mark.faults


def one_line(proc, *expect: str) -> str:
    """The one line a refused command printed (exit status 2), holding every `expect`."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert all(e in lines[0] for e in expect), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


# ----------------------------------------------------------------------------- symbolic links out of a root


def test_a_symlinked_scenario_folder_is_refused_naming_the_link_and_the_other_root_is_untouched(collected_root,
                                                                                                tmp_path):
    other = copy_root(collected_root, tmp_path / "other")  # another root's finished runs
    root = copy_root(collected_root, tmp_path / "root")
    scenario = next(iter(Layout(root).iter_runs())).scenario
    for top in ("data", "results", "logs"):
        shutil.rmtree(root / top / scenario)
    (root / "data" / scenario).symlink_to(other / "data" / scenario)  # ROOT/data/S -> OTHER/data/S
    link = str(root / "data" / scenario)
    before = tree(other)
    one_line(run_bin("clean-failed", root, "--yes"), link, "symbolic link")  # they would look crashed here
    one_line(run_bin("progress", root), link)
    routes = collected_root.parent / "routes"
    one_line(run_bin("collect", routes, "--root", root, "--workers", "1"), link)  # it would record them again
    assert tree(other) == before


def test_a_symlinked_cache_run_folder_is_refused_by_build_cache_naming_the_link(train_root, tmp_path):
    root = copy_root(train_root, tmp_path / "root")
    run = next(p for p in (root / "cache").glob("*/data/*/*") if p.is_dir())
    outside = Path(shutil.move(run, tmp_path / "outside"))
    run.symlink_to(outside)
    before = tree(outside)
    one_line(run_bin("build-cache", "--root", root, "--force"), str(run), "symbolic link")
    one_line(run_tool(PYTHON, "-m", "tools.cache", "verify", "--root", root, "--repair"), str(run))
    assert tree(outside) == before


def test_a_link_made_after_a_tool_started_is_refused_before_a_run_is_claimed_or_deleted(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = next(iter(layout.iter_runs()))
    elsewhere = tmp_path / "elsewhere"
    shutil.move(layout.log_dir(key), elsewhere)
    layout.log_dir(key).symlink_to(elsewhere)
    before = tree(elsewhere)
    for act in (lambda: claims.claim_run(layout, key, redo=True), lambda: claims.discard_run(layout, key)):
        with pytest.raises(ToolError, match="symbolic link"):
            act()
    assert tree(elsewhere) == before and layout.run_dir(key).is_dir()


def test_validate_never_writes_its_report_through_a_symlinked_report_folder(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "report.json").write_text("{}")
    today = root / "reports" / datetime.date.today().isoformat()
    today.parent.mkdir(exist_ok=True)
    today.symlink_to(elsewhere)  # ROOT/reports/<date> -> a folder elsewhere
    before = tree(elsewhere)
    one_line(run_bin("validate", root, "--workers", "1"), str(today), "symbolic link")
    assert tree(elsewhere) == before and (elsewhere / "report.json").read_text() == "{}"


def test_a_root_reached_through_a_symlink_is_nested_and_the_outer_roots_clean_failed_never_deletes_an_inner_one(
        collected_root, short_routes, tmp_path):
    outer = copy_root(collected_root, tmp_path / "outer")
    layout = Layout(outer)
    key = next(iter(layout.iter_runs()))
    link = tmp_path / "link"
    link.symlink_to(layout.frames_dir(key))  # LINK -> OUTER/data/<S>/<run>/frames
    before = tree(outer)
    proc = run_bin("collect", short_routes, "--root", link / "inner", "--workers", "1")
    one_line(proc, f"--root {link / 'inner'} ({layout.frames_dir(key) / 'inner'})", f"inside the dataset root {outer}")
    assert tree(outer) == before
    # A root already inside a run folder, deeper than a tool looks when it starts (made by hand, or by an older
    # drivekit through such a link), and that run crashed: clean-failed deletes the run, never the root in it.
    inner = layout.frames_dir(key) / "inner"
    inner.mkdir()
    shutil.copy(layout.manifest, inner / "manifest.json")
    layout.result_path(key).unlink()
    one_line(run_bin("clean-failed", outer, "--yes"), f"{layout.run_dir(key)} holds another dataset root, {inner}")
    assert (inner / "manifest.json").is_file() and layout.attempt_logs(key)


def test_a_dangling_symlink_as_a_lock_is_refused_in_one_line_naming_it_and_nothing_is_created_where_it_points(
        collected_root, tmp_path):
    from tools.train import checkpoint

    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = next(iter(layout.iter_runs()))
    layout.result_path(key).unlink()  # crashed: clean-failed deletes it, collect runs it again
    (tmp_path / "outside").mkdir()
    targets = []
    for lock in (layout.run_lock(key), layout.bucket_lock, tmp_path / "run" / checkpoint.RUN_LOCK):
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.unlink(missing_ok=True)
        targets.append(tmp_path / "outside" / lock.name)
        lock.symlink_to(targets[-1])  # dangling: an O_CREAT through it would create the file outside
    run_lock = str(layout.run_lock(key))
    one_line(run_bin("clean-failed", root, "--yes"), run_lock, "symbolic link")
    collect = run_bin("collect", collected_root.parent / "routes", "--root", root, "--workers", "1")
    assert collect.returncode == 2 and "Traceback" not in collect.stderr, collect.stderr  # after its header line:
    assert run_lock in collect.stderr.splitlines()[-1] and "symbolic link" in collect.stderr.splitlines()[-1]
    one_line(run_bin("build-buckets", "--root", root), str(layout.bucket_lock), "symbolic link")
    with pytest.raises(ToolError, match="train.lock is a symbolic link"):
        checkpoint.lock_run_folder(tmp_path / "run")
    assert not any(t.exists() for t in targets), "a file was created through a link"
    assert layout.run_dir(key).is_dir()


# ----------------------------------------------------------------------------- no flock, clock skew


def test_a_file_system_without_flock_is_refused_in_one_line_before_anything_is_written_shim(short_routes, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import errno, fcntl\n"
        "def flock(fd, op):\n"
        "    raise OSError(errno.ENOLCK, 'No locks available')\n"
        "fcntl.flock = flock\n")
    env = {"PYTHONPATH": f"{shim}:{REPO}"}
    root = tmp_path / "root"
    proc = run_tool(PYTHON, "-m", "tools.collect", "collect", short_routes, "--root", root, env=env)
    one_line(proc, "flock", "ENOLCK")
    assert not root.exists()


def _beat(layout: Layout, key, host: str, shift: float) -> None:
    layout.heartbeat(key).write_text(json.dumps({"host": host, "pid": 1, "time": time.time() + shift, "tick": 0}))


#: A child process that is "another node" whose clock runs 200 s behind: it rewrites the heartbeat every 0.3 s.
_BEHIND = """
import json, sys, time
from pathlib import Path
from tools.core import atomic
path, tick = Path(sys.argv[1]), 0
while True:
    tick += 1
    atomic.write_json(path, {"host": "node-behind", "pid": 1, "time": time.time() - 200.0, "tick": tick})
    time.sleep(0.3)
"""


def test_clock_skew_a_live_run_200s_behind_is_running_and_a_dead_future_one_is_crashed_within_a_bound_shim(
        collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    behind, ahead = list(layout.iter_runs())[:2]
    for key in (behind, ahead):
        layout.result_path(key).unlink()  # started, no result: its heartbeat decides
    _beat(layout, ahead, "node-ahead", 3600.0)  # a dead run whose node's clock was an hour ahead
    writer = start_tool(PYTHON, "-c", _BEHIND, layout.heartbeat(behind))
    try:
        wait_until(lambda: json.loads(layout.heartbeat(behind).read_text())["host"] == "node-behind", 30,
                   "the shim's first heartbeat")
        t0 = time.monotonic()
        proc = run_bin("clean-failed", root, "--yes", timeout=120)
        took = time.monotonic() - t0
        assert proc.returncode == 0, proc.stderr
        assert layout.run_dir(behind).is_dir(), "clean-failed deleted a live run of a node whose clock is behind"
        assert not layout.run_dir(ahead).exists(), "a dead run with a future heartbeat was kept as running"
        assert str(behind) not in proc.stdout
        assert took < heartbeats.HEARTBEAT_WATCH_S + 15, f"clean-failed took {took:.0f} s"  # watched once, not per run
        assert run_state(layout, behind) is RunState.RUNNING  # (its heartbeat changes within 0.3 s)
    finally:
        writer.kill()
        writer.wait()


def test_a_heartbeat_of_this_host_dated_an_hour_ahead_beside_a_live_pid_is_dead_unless_it_changes(
        collected_root, tmp_path, monkeypatch):
    """One rule for every host: a stamp beyond the allowed skew ahead is watched, never believed. It kept a crashed
    run "running" for an hour (this host's own pid alive: any process's, such as the reader's)."""
    monkeypatch.setattr(heartbeats, "HEARTBEAT_WATCH_S", 0.5)
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = next(iter(layout.iter_runs()))
    layout.result_path(key).unlink()  # started, no result: its heartbeat decides
    layout.heartbeat(key).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                                 "time": time.time() + 3600.0, "tick": 0}))
    assert not heartbeats.heartbeat_alive(layout.heartbeat(key))
    assert run_state(layout, key) is not RunState.RUNNING


def test_the_watchdog_judges_its_childs_heartbeat_by_change_on_its_own_clock_not_by_mtime(tmp_path):
    path = tmp_path / "heartbeat.json"
    path.write_text("1")
    os.utime(path, (0, 0))  # a file server stamping 1970: old by any clock, but not stale until watched so
    watch = heartbeats.HeartbeatWatch(path, stale_s=0.3)
    assert not watch.stale()  # never changed since the watch began (a child still setting up)
    path.write_text("2")
    assert not watch.stale()
    time.sleep(0.4)
    assert watch.stale()


# ----------------------------------------------------------------------------- training run folders


def _held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_a_second_training_in_the_same_logdir_is_refused_in_one_line(train_root, tmp_path):
    logdir = tmp_path / "run"
    args = [PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY]
    first = start_tool(*args, "max_steps=1000")
    try:
        wait_until(lambda: _held(logdir / "train.lock") or first.poll() is not None, 120, "the first training")
        assert first.poll() is None, first.communicate()[1]
        one_line(run_tool(*args, "max_steps=1", timeout=120), "another training runs in it", str(logdir))
    finally:
        first.kill()
        first.communicate(timeout=60)


def test_a_resume_that_changes_lr_is_refused_in_one_line_and_nothing_is_written(pretrained, tmp_path):
    logdir = Path(shutil.copytree(pretrained, tmp_path / "run"))
    stored = json.loads((logdir / "config.json").read_text())
    before = tree(logdir)
    proc = run_tool(PYTHON, "-m", "tools.train", "pretrain", f"root={stored['root']}", f"logdir={logdir}", *TINY,
                    "max_steps=5", "lr=0.0001", timeout=120)
    one_line(proc, "lr=0.0001", f"lr={stored['lr']!r}")
    assert tree(logdir) == before, "a refused resume wrote into the run folder"


def test_a_resume_on_another_dataset_is_refused_in_one_line_and_a_moved_root_resumes(train_root, pretrained,
                                                                                      tmp_path):
    """`root=` another dataset on resume went on without a word, and its checkpoints named only the new dataset. The
    dataset is kept like lr, by its dataset_id: the same root copied elsewhere resumes."""
    logdir = Path(shutil.copytree(pretrained, tmp_path / "run"))
    was = json.loads((logdir / "config.json").read_text())["trained_on"]["dataset_id"]
    other = copy_root(train_root, tmp_path / "other")  # another collection: another dataset_id
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["dataset_id"] = uuid.uuid4().hex
    (other / "manifest.json").write_text(json.dumps(manifest))
    run_bin("build-buckets", "--root", other, "--force", check=True)  # its own bucket files
    before = tree(logdir)
    args = [PYTHON, "-m", "tools.train", "pretrain", f"logdir={logdir}", *TINY, "max_steps=5"]
    proc = run_tool(*args, f"root={other}", timeout=120)
    one_line(proc, f"root={other} (dataset {manifest['dataset_id']})", f"(dataset {was})", "a new --logdir=")
    assert tree(logdir) == before, "a refused resume wrote into the run folder"
    # the same dataset wherever it lies: a root copied elsewhere changes nothing a resume keeps
    from tools.train.config import TrainConfig
    from tools.train.loop import resume_changes

    stored = json.loads((logdir / "config.json").read_text())
    moved = TrainConfig.from_dict({**stored, "root": str(copy_root(train_root, tmp_path / "moved"))})
    assert resume_changes(moved, stored) == []
    assert resume_changes(TrainConfig.from_dict({**stored, "root": str(other)}), stored) != []


# ----------------------------------------------------------------------------- route files


def _one_route(short_routes: Path, tmp_path: Path, edit) -> Path:
    d = Path(shutil.copytree(short_routes, tmp_path / "routes"))
    files = sorted(p for p in d.rglob("*.xml") if "towns" not in p.parts)
    for other in files[1:]:
        other.unlink()
    files[0].write_text(edit(files[0].read_text()))
    return d


@pytest.mark.parametrize("edit,expect", [
    (lambda t: t.replace('id="', 'id="' + "r" * 230 + '" old="', 1), f"at most {RUN_NAME_MAX}"),
    (lambda t: t.replace('fog_density="', 'fog_density="250" old="', 1), "fog_density=250 is outside 0 to 100"),
], ids=["route id of 230 characters", "fog density 250"])
def test_a_route_the_root_cannot_hold_is_one_line_before_anything_is_written(short_routes, tmp_path, edit, expect):
    routes = _one_route(short_routes, tmp_path, edit)
    root = tmp_path / "root"
    root.mkdir()
    proc = run_bin("collect", routes, "--root", root, "--workers", "1")
    one_line(proc, expect)
    assert list(root.iterdir()) == []
