"""Child process groups of ours: started in a session of their own, killed with their parent, ended as a group.

Used by the local workers (each route run a child group), the CARLA server and evaluator, and the Py123D
export's workers. We only ever signal groups we started, by their id (never processes by name).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from pathlib import Path

from tools.core import files

#: SIGTERM to a group, then SIGKILL after this many seconds.
STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: a forked child should not dlopen
except (OSError, AttributeError):  # not Linux: no parent-death signal (run locks still prevent doubles)
    _prctl = None


def die_with_parent(parent: int | None = None) -> None:
    """In a child between fork and exec (preexec_fn), or a worker process's initializer: SIGKILL it when its
    parent dies (Linux PR_SET_PDEATHSIG), so a collector killed with -9 leaves no workers or servers behind.
    `parent`: the parent's pid, to exit at once when it died before the signal was set."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def process_age() -> float:
    """Seconds since this process began (was forked), from /proc; 0 where there is none."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def peak_memory_mb() -> float:
    """This process's peak resident memory so far, MB (pages shared with the zygote it was forked from count)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def start_group(argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
                ) -> subprocess.Popen:
    """Start `argv` in a process group (session) of its own, its output appended to `log`; it gets SIGKILL
    when the collector dies (PR_SET_PDEATHSIG). End it with `end_group`."""
    with open(files.open_for_writing(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as out:  # not via a link
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=die_with_parent, env=env, cwd=cwd)


def end_group(process: subprocess.Popen | None, grace: float = STOP_GRACE_S) -> None:
    """End the whole process group of a child started by `start_group`: SIGTERM, then SIGKILL after `grace`
    seconds (what ignored SIGTERM, its children included)."""
    if process is None:
        return
    pgid = process.pid  # its own session: the group id is its pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group of a child we started (its pid is the group id: start_new_session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
