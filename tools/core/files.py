"""The one reader of a dataset file: a regular file, read whole up to a size bound; and the one way to open a
file of a root for writing in place (`open_for_writing`: locks, logs appended to), never through a link.

A shared root is written by many hands. A result file, a manifest, a bucket file, run.json, a frame or a cache
record that is a symlink to /dev/zero, a FIFO or a device would make a plain `read_bytes` read without end or
wait for a writer that never comes; a sparse file of 100 GB would be read into memory. Every reader in
tools/dataset (and the stages, through it) opens with `O_NONBLOCK` (opening a FIFO does not wait), checks with
fstat that it holds a regular file (a symlink to one is fine) no larger than the bound, and reads at most the
bound. What is refused is an `UnreadableFile`, an OSError: callers that treat an unreadable file already handle
it, and its message names the file and what it is.

A file written in place (not by `tools.core.atomic`, whose rename replaces a link rather than writing through it)
is opened with `O_NOFOLLOW`: a lock or a log that is a symbolic link, a dangling one too, would otherwise create or
change a file wherever it points (as root, /etc/nologin). The folders above it are checked by the layout
(`Layout.links`, `Layout.check_run_paths`). It is created with mode 0666 less the umask, as `tools.core.atomic`'s
files: in a root shared by a group (umask 002) a second user takes the same locks and appends to the same logs.
`check_writable` asks, before a tool changes anything, whether this user may change what it will.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from tools.core.errors import ToolError, permission_denied

#: JSON files of a root (results, run.json, heartbeats, manifest, bucket files, cache settings): a manifest of
#: 100,000 planned runs is about 15 MB, a bucket file of a million frames a few MB.
MAX_JSON_BYTES = 256 << 20
#: Binary files (frames, measurements indexes, cache records): a frame of 8 cameras at 4K is under 200 MB.
MAX_BINARY_BYTES = 1 << 30

_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device (such as /dev/zero)",
          stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


class UnreadableFile(OSError):
    """A file a tool refuses to read: not a regular file, or larger than its bound."""


class TooLarge(UnreadableFile):
    """A regular file larger than the bound of its kind."""


def open_regular(path: str | os.PathLike, limit: int | None = MAX_BINARY_BYTES) -> IO[bytes]:
    """A binary file object of `path`, which must be a regular file of at most `limit` bytes (UnreadableFile
    otherwise; FileNotFoundError and other OSErrors as open raises them). `limit` None: any size, for a reader that
    reads in blocks or only a part (a log's end, a checkpoint hashed before it is loaded)."""
    fd, _ = _open_checked(path, limit)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_checked(path: str | os.PathLike, limit: int | None) -> tuple[int, int]:
    """(file descriptor, size) of `path` opened for reading, checked to be a regular file of at most `limit`
    bytes (None: any size; the caller closes it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise UnreadableFile(f"{path}: {what}, not a regular file; not read (replace it with the file it "
                                 "stands for, or remove it)")
        if limit is not None and st.st_size > limit:
            raise TooLarge(f"{path}: {st.st_size} bytes, more than the {limit} a file of its kind may hold; not "
                           "read (a damaged or planted file: move it aside)")
        os.set_blocking(fd, True)
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, limit: int = MAX_BINARY_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (UnreadableFile otherwise, also when it grew past
    the bound while being read)."""
    fd, size = _open_checked(path, limit)
    try:
        # os.read of as many bytes as the file holds and one more (to see it grow), without a file object: a
        # cache record is read in a third of the time (the training loader reads one per sample)
        parts, got, want = [], 0, min(size, limit) + 1
        while got < want:
            chunk = os.read(fd, want - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if size < got <= limit:  # it grew since: the rest, up to the bound
            while got <= limit and (chunk := os.read(fd, min(limit + 1 - got, 1 << 30))):
                parts.append(chunk)
                got += len(chunk)
    finally:
        os.close(fd)
    if got > limit:
        raise TooLarge(f"{path}: grew past {limit} bytes while being read; not read")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_text(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> str:
    """read_bytes decoded as UTF-8 (ValueError when it is not)."""
    return read_bytes(path, limit).decode()


def loads(data: str | bytes, **kwargs: Any) -> Any:
    """json.loads, with JSON nested too deep for Python's parser (`[[[[...` 100,000 deep: a RecursionError) a
    ValueError as for any damaged JSON, which every reader of a root's files already handles."""
    try:
        return json.loads(data, **kwargs)
    except RecursionError:
        raise ValueError("JSON nested too deep to read (a damaged or planted file)") from None


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES, **kwargs: Any) -> Any:
    """The JSON value of a regular file of at most `limit` bytes (ValueError when not JSON, nested too deep
    included; `kwargs` go to json.loads)."""
    return loads(read_bytes(Path(path), limit), **kwargs)


def open_for_writing(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """A descriptor of `path` opened with `flags` (os.O_RDWR, os.O_CREAT, os.O_APPEND, ...) as the file itself: never
    through a symbolic link (O_NOFOLLOW; a link there, dangling or not, is a ToolError naming it and where it points)
    and only a regular file (a FIFO or a device is a ToolError; the open does not wait for a FIFO's reader). Created
    with `mode` less the umask; a file this user may not write is a ToolError naming its owner (`permission_denied`)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except PermissionError:
        raise permission_denied(path) from None
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(path):
            raise _link_refused(path) from None
        if e.errno == errno.ENXIO:  # a FIFO opened for writing without a reader
            raise _not_regular(path, stat.S_IFIFO) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_in_place(path: str | os.PathLike) -> None:
    """The ToolError `open_for_writing` would raise for `path` (a symbolic link, or not a regular file), without
    opening anything: a tool asks before it changes anything (a run.lock that is a FIFO stopped clean-failed after
    it had deleted other runs)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _link_refused(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)


def _link_refused(path: str | os.PathLike) -> ToolError:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return ToolError(f"{path} is a symbolic link (to {target}): drivekit opens the files of a dataset root for "
                     "writing only where they are, never through a link (it would create or change a file "
                     f"elsewhere); remove the link (rm {path}) and run this again")


def _not_regular(path: str | os.PathLike, mode: int) -> ToolError:
    what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return ToolError(f"{path}: {what}, not a regular file; not opened (remove it)")


def check_writable(paths: Iterable[str | os.PathLike]) -> None:
    """ToolError (`permission_denied`: the owner named) for the first of `paths` that exists and that this user may
    not change: a folder whose entries it may not create or remove (write and search), a file it may not open for
    reading and writing (a lock, a log). Paths that do not exist are skipped (their folder is in the list). A tool
    asks before it changes anything, so that a root shared by a group is never left half changed by a user who
    lacks a permission (a collection appended to the manifest, then a traceback)."""
    effective = os.access in os.supports_effective_ids
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue  # (links are refused by the layout, in one line of their own)
        need = os.W_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else os.R_OK)
        if not os.access(path, need, effective_ids=effective):
            raise permission_denied(path)
