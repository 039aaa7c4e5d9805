"""Atomic writes: every file is written to a temporary name beside its target and renamed into place.

A reader therefore sees either the old file, the new file, or no file, never half a file, even when
the writer is killed with SIGKILL in the middle.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

TMP_PREFIX = ".tmp-"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temporary file in the same folder, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a shared dataset must be readable by others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def remove_tree(path: Path) -> None:
    """Remove a folder so that no reader ever sees it half deleted: rename it aside first, then delete."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(f"{TMP_PREFIX}trash-{path.name}-{os.getpid()}")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def is_temporary(path: Path) -> bool:
    """True for a name this module uses for work in progress (never part of the dataset)."""
    return Path(path).name.startswith(TMP_PREFIX)
