"""The error every tool reports as one line (`prog: message`) with a non-zero exit, no traceback.

A full disk is one of them: `space_for(folder, what, need)` around a stage's writes turns an OSError
ENOSPC into DiskFull, one line naming the folder, the free space there and what the stage needs (its own
estimate, saying how it was made); `run_cli` turns an ENOSPC no stage caught into the same line without the
estimate. Every stage's entry point goes through `run_cli`.

So is a permission problem, common in a root shared by a group: `permission_denied(path)` names the file or folder,
its owner, group and mode, the user who may not change it and the fix; `run_cli` gives any PermissionError naming a
file the same line.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class ToolError(Exception):
    """Bad input or a state the tool cannot go on from. The message says what, where, and the fix."""


class DiskFull(ToolError):
    """No space left on the device of a folder the tool writes to (ENOSPC)."""


EXIT_TOOL_ERROR = 2
#: Exit status of a tool stopped by a full disk (sysexits' EX_TEMPFAIL: free space, then run it again).
EXIT_DISK_FULL = 75


def human(n: float) -> str:
    """1536 -> "1.5 KiB"."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def free_bytes(folder: Path) -> int | None:
    """Free bytes (for this user) on the device of `folder` or of its nearest existing parent."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_full(folder: Path, what: str = "", need: tuple[int, str] | None = None) -> DiskFull:
    """The one line of ENOSPC under `folder`: its free space, and `need` (bytes, how they were estimated) for
    `what` (e.g. "the cache's 120 records still to build")."""
    free = free_bytes(folder)
    parts = [f"{folder}: no space left on device ({'?' if free is None else human(free)} free)"]
    if need is not None:
        parts.append(f"; about {human(need[0])} needed for {what or 'this'} ({need[1]})")
    parts.append("; free space there (or write elsewhere), then run the same command again")
    return DiskFull("".join(parts))


def _name(table: Any, ident: int) -> str:
    try:
        return table(ident)[0]
    except KeyError:  # an id without a name here (another node's user, a container's)
        return str(ident)


def permission_denied(path: str | os.PathLike) -> ToolError:
    """The one line of a file or folder of a root this user may not change: its owner, group and mode (those of
    the folder it would be created in, when it does not exist yet), and how a root shared by a group is set up."""
    path = Path(path)
    where = path
    while not os.path.lexists(where) and where != where.parent:
        where = where.parent
    me = _name(pwd.getpwuid, os.geteuid())
    try:
        st = os.lstat(where)
    except OSError:
        return ToolError(f"{path}: permission denied to {me}")
    what = f"{path}: {me} may not change it" if where == path else f"{path}: {me} may not create it in {where}"
    return ToolError(f"{what} (owner {_name(pwd.getpwuid, st.st_uid)}, group {_name(grp.getgrgid, st.st_gid)}, "
                     f"mode {stat.filemode(st.st_mode)}); in a root shared by a group every user needs write access "
                     "to its files and folders: its owner (or an administrator) runs chgrp -R GROUP ROOT and chmod -R "
                     "g+rwX ROOT, and each user works with umask 002 (drivekit's files and folders honour it)")


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def space_for(folder: Path, what: str, need: Callable[[], tuple[int, str] | None]) -> Iterator[None]:
    """Inside, an ENOSPC (or a full quota) is DiskFull: `folder`, and `need()` (bytes, how estimated) for `what`,
    estimated only when the disk is full."""
    try:
        yield
    except OSError as e:
        if not is_disk_full(e):
            raise
        raise disk_full(folder, what, need()) from None


def run_cli(prog: str, main: Callable[[], Any]) -> None:
    """Run a fire CLI; turn a ToolError into one line on stderr and exit status 2 (a full disk: 75)."""
    try:
        main()
    except DiskFull as e:
        print(f"{prog}: {e}", file=sys.stderr)
        sys.exit(EXIT_DISK_FULL)
    except ToolError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        sys.exit(EXIT_TOOL_ERROR)
    except PermissionError as e:  # (EACCES, EPERM) one the tool did not check beforehand
        if not e.filename:
            raise
        print(f"{prog}: {permission_denied(e.filename)}", file=sys.stderr)
        sys.exit(EXIT_TOOL_ERROR)
    except OSError as e:
        if not is_disk_full(e):
            raise
        print(f"{prog}: {disk_full(Path(e.filename).parent if e.filename else Path.cwd())}", file=sys.stderr)
        sys.exit(EXIT_DISK_FULL)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
