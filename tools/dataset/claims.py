"""The claim that makes one process the only one running a route run's attempt, and the count of attempts.

Claim-and-run protocol (`claim_run`): the process that runs an attempt first takes an exclusive lock on
logs/<Scenario>/<run>/run.lock (flock), then, holding it, checks the run's state and counts the attempt
(an attempt log created with O_EXCL). The lock lives as long as the process that runs the attempt (a
collector hands its locked file to the child it starts, then closes its own copy), so:
- a second collector, a rerun after a kill -9 of the collector, or a SLURM task never runs the same
  route run at the same time: it finds the lock taken and the run RUNNING, and counts no attempt;
- there is no window between counting an attempt and the first heartbeat in which the run looks crashed.
A file system without working flock is refused in one line (tools.core.locks). Heartbeats remain for what a
lock cannot see (tools.dataset.heartbeats). Holding the lock a moment (`exclusive`) guards a run's deletion
(`discard_run`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tools.core import atomic, files, locks
from tools.core.errors import ToolError
from tools.dataset.layout import Layout, RunKey
from tools.dataset.results import RunState, held_run_state

#: Environment variable through which a collector hands the locked run.lock descriptor to its child.
LOCK_FD_ENV = "DRIVEKIT_RUN_LOCK_FD"
#: How long a claimant retries a lock that a state probe (run_state) may hold for a few microseconds.
_LOCK_RETRY_S = 2.0


def attempts(layout: Layout, key: RunKey) -> int:
    """Attempts made at a route run, counted on disk (one log per attempt)."""
    return len(layout.attempt_logs(key))


@dataclass
class RunClaim:
    """Exclusive ownership of one route run's attempt, held while `fd` (the locked run.lock) is open."""

    key: RunKey
    attempt: int
    log: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _lock(path: Path) -> int | None:
    """An fd of `path` holding its exclusive flock, or None when another process holds it. Retries for a
    moment (a state probe holds the lock for microseconds) and when the file was replaced meanwhile (a
    run being cleaned): the fd returned always locks the file now at `path`."""
    deadline = time.monotonic() + _LOCK_RETRY_S
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = files.open_for_writing(path, os.O_CREAT | os.O_RDWR)  # a link or a FIFO there: ToolError
        try:
            taken = locks.try_lock(fd, path)  # a file system without locks: ToolError, nothing claimed
        except BaseException:
            os.close(fd)
            raise
        if not taken:
            os.close(fd)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # we locked a file that was deleted meanwhile: lock the new one


def claim_run(layout: Layout, key: RunKey, max_attempts: int | None = None, redo: bool = False
              ) -> RunClaim | RunState:
    """Take the run's lock, then count the next attempt. Returns the claim, or, without counting anything,
    the state that stops it: RUNNING (locked by another process), FINISHED or DAMAGED (unless `redo`, a
    user's explicit --force), or FAILED when `max_attempts` attempts were made already. ToolError when a folder
    of the run is reached through a symbolic link (Layout.check_run_paths): nothing is written through one."""
    layout.check_run_paths(key)
    fd = _lock(layout.run_lock(key))
    if fd is None:
        return RunState.RUNNING
    try:
        state = held_run_state(layout, key)
        stop = state is RunState.RUNNING or (state in (RunState.FINISHED, RunState.DAMAGED) and not redo)
        if not stop and max_attempts is not None and attempts(layout, key) >= max_attempts:
            state, stop = RunState.FAILED, True
        if stop:
            os.close(fd)
            return state
        n = attempts(layout, key) + 1
        log = layout.attempt_log(key, n)
        try:
            # 0666 less the umask, as every file of a root: a root shared by a group (umask 002) stays writable by it
            os.close(os.open(log, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
        except FileExistsError:  # only without working locks: another host counted this attempt
            os.close(fd)
            return RunState.RUNNING
        return RunClaim(key, n, log, fd)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def exclusive(layout: Layout, key: RunKey) -> Iterator[bool]:
    """Hold the run's lock for a moment (to delete it, say): yields False when a process runs it now. ToolError
    when a folder of the run is reached through a symbolic link."""
    layout.check_run_paths(key)
    fd = _lock(layout.run_lock(key))
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def inherited_claim(layout: Layout, key: RunKey, attempt: int) -> RunClaim:
    """The claim a collector handed to this process (LOCK_FD_ENV): checked to be the locked run.lock of
    `key`. ToolError when there is none: --attempt is given only by `tools.collect collect`."""
    raw = os.environ.get(LOCK_FD_ENV)
    try:
        fd = int(raw or "")
        held = os.fstat(fd)
        on_disk = os.stat(layout.run_lock(key))
        if (held.st_dev, held.st_ino) != (on_disk.st_dev, on_disk.st_ino):
            raise ValueError
    except (ValueError, OSError):
        raise ToolError(f"--attempt {attempt}: no claim of {key} handed over by a collector; leave --attempt "
                        "out (it is for tools.collect collect), the run claims its own attempt") from None
    return RunClaim(key, int(attempt), layout.attempt_log(key, int(attempt)), fd)


def finish_deletes(layout: Layout) -> list[Path]:
    """Finish the deletes of route run folders that a killed clean-failed or collector left half done
    (Layout.leftover_trash: their folders were renamed aside, so no run counts them); returns those finished. A
    trash folder holding another dataset root (an older drivekit's) is refused, as a run folder is."""
    found = layout.leftover_trash()
    for trash in found:
        layout.check_holds_no_root(trash)
    for trash in found:
        shutil.rmtree(trash, ignore_errors=True)
    return found


def trash_text(layout: Layout, trash: list[Path]) -> str:
    """How progress, clean-failed and collect name interrupted deletes: "2 route run folders (data/S/.tmp-trash-...,
    ...) left half deleted by a killed clean-failed or collector"."""
    shown = ", ".join(str(p.relative_to(layout.root)) for p in trash[:3]) + (", ..." if len(trash) > 3 else "")
    return (f"{len(trash)} route run folder{'s' if len(trash) != 1 else ''} ({shown}) left half deleted by a killed "
            "clean-failed or collector")


def discard_run(layout: Layout, key: RunKey, logs: bool = False) -> None:
    """Remove a run's data and result (result first, so the run never looks finished meanwhile), with `logs` its log
    folder too (its attempts start over); never through a symbolic link (Layout.check_run_paths), and never a folder
    that holds another dataset root (Layout.check_holds_no_root: looked at before anything is deleted)."""
    layout.check_run_paths(key)
    folders = [layout.run_dir(key), *([layout.log_dir(key)] if logs else [])]
    for folder in folders:
        layout.check_holds_no_root(folder)
    layout.result_path(key).unlink(missing_ok=True)
    for folder in folders:
        atomic.remove_tree(folder)
