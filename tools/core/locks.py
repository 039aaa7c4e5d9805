"""File locks (flock): the one place that takes an exclusive one, and that says when a file system has none.

Collectors, clean-failed, the SLURM monitor and training rely on flock to keep two processes off one route run
(tools.dataset.claims.claim_run) or one training run folder. Some cluster file systems have no working flock
(NFS without a lock daemon, Lustre mounted without -o flock: ENOLCK, EOPNOTSUPP, ENOSYS): there a tool refuses in
one line (`require_flock`, `try_lock`) instead of going on without the guarantee.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from tools.core.atomic import TMP_PREFIX, owner_tag
from tools.core.errors import ToolError
from tools.core.files import open_for_writing

#: The errors of a file system without working flock.
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


def no_locks_error(path: Path, err: OSError) -> ToolError:
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    return ToolError(f"{path}: file locks (flock) do not work on this file system ({name}), and without them two "
                     "processes could write the same route run or run folder; use a folder on a file system with "
                     "locks (a local disk, NFS with its lock daemon, Lustre mounted with -o flock)")


def try_lock(fd: int, path: Path) -> bool:
    """Take an exclusive flock on `fd` (the file `path`) without waiting: True when taken, False when another
    process holds it. ToolError on a file system without locks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in NO_LOCKS:
            raise no_locks_error(path, e) from None
        raise
    return True


def held(path: Path) -> bool:
    """True while a process holds a lock on `path` (a run's run.lock: it runs an attempt of the run). Never creates
    anything; False without the file, and on a file system without locks (there heartbeats decide)."""
    try:  # not through a link (a link there is refused when a run is claimed), never waiting on a FIFO
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def hold(path: Path) -> int | None:
    """An open descriptor of `path` (created when missing) holding its exclusive flock until it is closed (or the
    process ends), or None when another process holds it. ToolError on a file system without locks, and for a
    `path` that is a symbolic link or not a regular file (files.open_for_writing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_for_writing(path, os.O_CREAT | os.O_RDWR)
    try:
        if try_lock(fd, path):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def require_flock(folder: Path) -> None:
    """ToolError when flock does not work on the file system of `folder` (its nearest existing folder is asked,
    with a temporary file removed at once): a collector asks before it writes anything."""
    probe_dir = Path(folder)
    while not probe_dir.is_dir() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    probe = probe_dir / f"{TMP_PREFIX}flock-probe.{owner_tag()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise ToolError(f"{probe_dir}: cannot create a file to test its locks ({e.strerror})") from None
    try:
        try_lock(fd, Path(folder))
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
