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
import grp
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import PYTHON, REPO, TINY, copy_root, run_bin, run_tool, start_tool, tool_env, tree, wait_until

from tools.core import locks
from tools.core.errors import ToolError
from tools.dataset import claims, heartbeats
from tools.dataset.layout import RUN_NAME_MAX, Layout, RunKey
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
    from tools.collect.carla.server import CarlaServer, Ports
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
    server_log = tmp_path / "carla-server.log"  # a CARLA server's log (logs/<S>/<run>/...), written before it starts
    targets.append(tmp_path / "outside" / server_log.name)
    server_log.symlink_to(targets[-1])
    with pytest.raises(ToolError, match="carla-server.log is a symbolic link"):
        CarlaServer(["true"], Ports(1, 2, 3, 4), server_log).start()
    assert not any(t.exists() for t in targets), "a file was created through a link"
    assert layout.run_dir(key).is_dir()


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _waited_on(fifo: Path, read) -> float:
    """Seconds `read()` took, with a writer opening `fifo` after 3 s: a reader that waits for one (a blocking open)
    is freed then, so the test measures the wait instead of hanging."""
    writer = threading.Timer(3.0, lambda: os.close(os.open(fifo, os.O_RDWR)))
    writer.start()
    t0 = time.monotonic()
    try:
        read()
    finally:
        took = time.monotonic() - t0
        writer.cancel()
        writer.join()
    return took


def test_a_fifo_where_a_file_is_expected_is_one_line_never_a_hang(collected_root, pretrained, tmp_path):
    """A FIFO as run.lock hung progress, clean-failed, dataset-info and collect; as a checkpoint's part it hung a
    resume, as an attempt log the collector reading its crash. Nothing is opened so that it waits."""
    from tools.dataset.attempts import last_exception
    from tools.train import checkpoint

    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    crashed, locked = sorted(layout.iter_runs())[:2]
    for key in (crashed, locked):
        layout.result_path(key).unlink()  # crashed: clean-failed would delete them, collect drive them again
    lock = str(_fifo(layout.run_lock(locked)))
    before = {top: tree(root / top) for top in ("data", "results", "logs")}
    manifest = layout.manifest.read_bytes()
    for command in (("progress", root), ("dataset-info", root)):
        proc = run_bin(*command, timeout=60)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (command, proc.stderr[-2000:])
    one_line(run_bin("clean-failed", root, "--yes", timeout=60), lock, "a FIFO, not a regular file")
    one_line(run_bin("collect", collected_root.parent / "routes", "--root", root, "--workers", "1", timeout=60), lock,
             "a FIFO, not a regular file")
    assert {top: tree(root / top) for top in ("data", "results", "logs")} == before, "a run was deleted or driven"
    assert layout.manifest.read_bytes() == manifest, "collect appended to the manifest before it refused"

    # the collector reading a crashed attempt's log: no crash line, at once
    log = _fifo(tmp_path / "attempt-01.log")
    read = []
    assert _waited_on(log, lambda: read.append(last_exception(log))) < 1.0 and read == [""]

    # a resume whose newest checkpoint has a FIFO for model.pt: the older intact one, one warning naming it
    logdir = Path(shutil.copytree(pretrained, tmp_path / "run"))
    part = _fifo(checkpoint.step_dir(logdir, 4) / "model.pt")
    found = []
    assert _waited_on(part, lambda: found.append(checkpoint.find_resume(logdir))) < 1.0
    assert found[0].path.name == checkpoint.STEP_DIR.format(step=2), found
    assert len(found[0].warnings) == 1 and f"{part}: a FIFO" in found[0].warnings[0], found[0].warnings
    _fifo(logdir / checkpoint.RUN_LOCK)
    with pytest.raises(ToolError, match="train.lock: a FIFO, not a regular file"):
        checkpoint.lock_run_folder(logdir)


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


# ----------------------------------------------------------------------------- a root shared by a group


@pytest.fixture
def two_users():
    """Two real Unix users (useradd) in one group, and a folder of that group (setgid, 2770) for their root: (folder,
    group, users). Each command of theirs runs with umask 002 under `setpriv` (`_as`), keeping only
    CAP_DAC_READ_SEARCH: they read this checkout and the interpreter wherever these are (a venv under root's 0700
    home, as here), while every write is checked against the file modes, which is what the test is about."""
    if os.geteuid() != 0:
        pytest.skip("adding two users (useradd) needs root; CI runs as root")
    for tool in ("useradd", "groupadd", "userdel", "groupdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool} on this machine (shadow-utils, util-linux)")
    group = f"dk{os.getpid()}"  # names of this test run's own, removed at the end
    users = [f"{group}a", f"{group}b"]
    shared = Path(tempfile.mkdtemp(prefix="drivekit-shared-", dir="/tmp"))
    try:
        subprocess.run(["groupadd", group], check=True)
        for user in users:
            subprocess.run(["useradd", "-M", "-U", "-G", group, "-s", "/usr/sbin/nologin", user], check=True)
            (shared / f"home-{user}").mkdir()
            shutil.chown(shared / f"home-{user}", user, user)
        os.chown(shared, 0, grp.getgrnam(group).gr_gid)
        shared.chmod(0o2770)
        yield shared, group, users
    finally:
        for user in users:
            subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)


def _as(user: str, shared: Path, *args: str | Path) -> dict[str, Any]:
    """subprocess arguments that run `args` as `user` (two_users), umask 002, with a home of its own."""
    home = shared / f"home-{user}"
    return {"args": ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--inh-caps=+dac_read_search",
                     "--ambient-caps=+dac_read_search", *[str(a) for a in args]],
            "env": tool_env({"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}), "umask": 0o002,
            "cwd": REPO, "text": True}


def _run_as(user: str, shared: Path, *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(**_as(user, shared, *args), capture_output=True, timeout=120)


def _crash_a_collection_as(user: str, shared: Path, routes: Path, root: Path, key: RunKey) -> None:
    """`user` collects into `root` and is killed (SIGKILL) as soon as it has claimed the run (its lock taken, its
    attempt counted: the files a second user's clean-failed and collect failed on): the run crashed. (Not later: the
    route run's process would first compile the sensors' kernels for this user, seconds.)"""
    layout = Layout(root)
    proc = subprocess.Popen(**_as(user, shared, REPO / "bin" / "collect", routes, "--root", root, "--workers", "1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: layout.attempt_logs(key) or proc.poll() is not None, 60, f"{user}'s attempt")
        assert proc.poll() is None, proc.communicate()[1][-2000:]
    finally:
        proc.kill()
        proc.communicate()
    wait_until(lambda: not locks.held(layout.run_lock(key)), 30, "the killed run's processes to end")


def _one_route_run(routes: Path) -> RunKey:
    """Keep one route file of `routes` (the smallest collection); the key of its run."""
    from tools.collect.base.routes import read_routes

    kept, *extra = sorted(p for p in routes.rglob("*.xml") if "towns" not in p.parts)
    for path in extra:
        path.unlink()
    for path in [routes, *routes.rglob("*")]:  # readable by all (pytest's folders are 0700), as SUMO checks
        path.chmod(path.stat().st_mode | (0o055 if path.is_dir() else 0o044))
    return RunKey.for_route(read_routes(kept)[0].scenario, kept.stem, read_routes(kept)[0].id, 0)


def _not_group_writable(root: Path) -> list[str]:
    return [f"{p.relative_to(root)} {stat.filemode(p.lstat().st_mode)}" for p in [root, *root.rglob("*")]
            if not p.is_symlink() and not p.lstat().st_mode & stat.S_IWGRP]


def test_two_users_of_one_group_collect_and_clean_one_root_and_a_permission_problem_is_one_line(two_users,
                                                                                                 collected_root):
    """umask 002, two users: run.lock and attempt-NN.log were created 0644, so the second user's clean-failed and
    collect died in a PermissionError traceback (collect after appending to the manifest). Every file and folder
    honours the umask; a file a user may not change is one line naming it and its owner, before anything changes."""
    shared, group, (alice, bob) = two_users
    routes = Path(shutil.copytree(collected_root.parent / "routes", shared / "routes"))  # one of its routes is kept
    key = _one_route_run(routes)
    root = shared / "root"
    layout = Layout(root)

    _crash_a_collection_as(alice, shared, routes, root, key)
    assert _not_group_writable(root) == []
    proc = _run_as(bob, shared, REPO / "bin" / "clean-failed", root, "--yes")
    assert proc.returncode == 0 and "deleted 1 failed route runs" in proc.stdout, proc.stderr[-2000:]
    assert not layout.run_dir(key).exists() and not layout.log_dir(key).exists()
    _crash_a_collection_as(bob, shared, routes, root, key)
    assert _not_group_writable(root) == [] and layout.run_lock(key).stat().st_uid != os.stat(root).st_uid

    # a lock left 0644 (by an older drivekit): one line naming it and its owner, nothing appended or deleted
    layout.run_lock(key).chmod(0o644)
    manifest, before = layout.manifest.read_bytes(), tree(root)
    for command in (("collect", routes, "--root", root, "--workers", "1"), ("clean-failed", root, "--yes")):
        one_line(_run_as(alice, shared, REPO / "bin" / command[0], *command[1:]), str(layout.run_lock(key)),
                 f"{alice} may not change it (owner {bob}, group {group}, mode -rw-r--r--)")
    assert layout.manifest.read_bytes() == manifest and tree(root) == before
    layout.run_lock(key).chmod(0o664)
    proc = _run_as(alice, shared, REPO / "bin" / "clean-failed", root, "--yes")
    assert proc.returncode == 0 and "deleted 1 failed route runs" in proc.stdout, proc.stderr[-2000:]


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
