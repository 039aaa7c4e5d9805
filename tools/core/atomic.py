"""Atomic writes: every file is written to a temporary name beside its target and renamed into place.

A reader therefore sees either the old file, the new file, or no file, never half a file, even when
the writer is killed with SIGKILL in the middle.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

TMP_PREFIX = ".tmp-"
#: A folder `remove_tree` renamed aside to delete: `.tmp-trash-<name>.<host>~<pid>`. One whose deleter was killed is
#: finished by whoever finds it (`leftover_trash`).
TRASH_PREFIX = f"{TMP_PREFIX}trash-"
#: A temporary file of `write_bytes` is `.tmp-<name>.<host>~<pid>.<n>`: whoever finds one can tell
#: whether its writer is still alive (`stale_temporaries`).
_OWNER_SEP = "~"
#: A temporary file of a writer on another host (whose pid cannot be checked) is stale after this long.
STALE_REMOTE_S = 600.0


def _host() -> str:
    return socket.gethostname().replace(".", "_").replace(_OWNER_SEP, "_")


def owner_tag() -> str:
    """`<host>~<pid>`: names a temporary file's writer (`stale_temporaries` tells whether it is alive)."""
    return f"{_host()}{_OWNER_SEP}{os.getpid()}"


def write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` atomically (temporary file in the same folder, fsync, rename). `durable=False`
    leaves out the fsync: still atomic against a killed writer; against a machine crash the file is made
    durable later, by `sync_filesystem` before the file that declares it complete (docs/reliability.md)."""
    path = Path(path)
    fd, tmp = _create_temporary(path)
    try:
        with open(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: Numbers this process's temporary files (`.tmp-<name>.<host>~<pid>.<n>`): unique with the host and pid.
_serial = itertools.count()


def _create_temporary(path: Path) -> tuple[int, str]:
    """(descriptor, name) of a new temporary file beside `path` (its folder made when missing), mode 0666 less
    the umask, as any file the user creates: a shared dataset stays readable by others. O_EXCL: a name left
    by a dead process of the same pid is skipped, never reused."""
    prefix = f"{path.parent}/{TMP_PREFIX}{path.name}.{owner_tag()}."
    for _ in range(1000):
        tmp = f"{prefix}{next(_serial)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def sync_filesystem(path: Path) -> None:
    """Flush to disk everything written on the file system that holds `path` (Linux syncfs(2), else sync(2)):
    one call makes a whole route run's frames durable before its result declares it complete."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # (never waits, whatever is there)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def remove_tree(path: Path) -> None:
    """Remove a folder so that no reader ever sees it half deleted: rename it aside first (`.tmp-trash-<name>.<host>~
    <pid>`), then delete. A deleter killed meanwhile leaves the trash folder: `leftover_trash` finds it."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(f"{TRASH_PREFIX}{path.name}.{owner_tag()}")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def leftover_trash(folder: Path) -> list[Path]:
    """The folders `remove_tree` renamed aside in `folder` and whose deleter is gone (killed mid-delete), sorted: what
    is left of them is to be deleted. (Names of older versions, `.tmp-trash-<name>-<pid>`, name no host: by age.)"""
    return [p for p in stale_temporaries(folder, folders=True)
            if p.name.startswith(TRASH_PREFIX) and not p.is_symlink()]


def is_temporary(path: Path) -> bool:
    """True for a name this module uses for work in progress (never part of the dataset)."""
    return Path(path).name.startswith(TMP_PREFIX)


def process_alive(pid: int) -> bool:
    """A process of this host that has not ended (a zombie, killed but not yet reaped, has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's (a root shared by a group): it exists, and may be a zombie
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (not Linux): signal 0 is all we can ask
        return True


def _writer_alive(name: str, mtime: float, now: float) -> bool:
    """Whether the writer of a temporary file named by `write_bytes` may still be writing it."""
    host = _host()
    for part in name.split("."):
        owner, sep, pid = part.rpartition(_OWNER_SEP)
        if sep and pid.isdigit() and owner == host:
            return process_alive(int(pid))
    return now - mtime < STALE_REMOTE_S  # another host's, or a name of unknown shape: by age


def temporary_dir(parent: Path, name: str) -> Path:
    """A new temporary folder in `parent` for work on `name` (`.tmp-<name>.<host>~<pid>.<n>`): fill it, then rename
    it into place; `stale_temporaries(parent, folders=True)` finds it if its writer dies. Mode 0777 less the umask,
    as any folder the user makes (mkdtemp's 0700 would keep the rest of a group sharing the root out of it)."""
    prefix = f"{parent}/{TMP_PREFIX}{name}.{owner_tag()}."
    for _ in range(1000):
        path = Path(f"{prefix}{next(_serial)}")
        try:
            path.mkdir()
            return path
        except FileExistsError:  # a name left by a dead process of the same pid: skipped, never reused
            continue
    raise FileExistsError(f"{parent}: no free temporary name for {name}")


def stale_temporaries(folder: Path, folders: bool = False) -> list[Path]:
    """Temporary files (with `folders`: temporary folders) directly in `folder` whose writer is gone (killed
    mid-write): safe to delete."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    now = time.time()
    out = []
    for p in folder.iterdir():
        if not is_temporary(p) or not (p.is_dir() if folders else p.is_file()):
            continue
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if not _writer_alive(p.name, mtime, now):
            out.append(p)
    return sorted(out)
