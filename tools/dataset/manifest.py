"""ROOT/manifest.json: the dataset's format version, and who collected what, when, with which code and settings.

    {
      "format_version": 4,                      layout.DATASET_FORMAT of the writer
      "dataset_id": "3f2a...",                  uuid4 hex made with the manifest: which dataset this is
      "created": "2025-01-31T12:00:00+00:00",   ISO 8601, UTC
      "created_by": "user@host",
      "tool": "drivekit 0.1.0",
      "collections": [                          one entry appended per `collect` (or lone `run`) invocation
        {"time", "user", "tool", "format_version", "code", "machine",      added by update_manifest
         "command", "routes_dir", "repetitions", "settings", "argv", ...}  given by the caller
      ],
      "runs": {                                 every route run ever planned in this root
        "<scenario>/<run>": {"route": "/abs/path/route.xml", "route_id": "7", "repetition": 0}
      }
    }

Every collection entry records the format version it wrote, the code (`code_version`: package version,
git commit and whether the tree was dirty, when known) and the machine (`machine`: host, CPU, OS, Python,
key package versions). What the caller adds (tools/collect/runner/record.py `collection_record`: the exact settings,
rig, rates, seeds, world, expert, the route set as `route_set`) is docs/dataset-format.md's to describe.
Entries written before these fields existed simply lack them: readers take every field as optional.

`dataset_id` names the dataset wherever its root is moved or copied to; files derived from it (bucket
files) record it, so that such a file copied into another root is refused. A manifest written before
`dataset_id` existed gets one derived from its `created` and `created_by`, the same every time.

A root written by another format version is refused, never rewritten. The file is replaced
atomically, so a reader sees the old or the new manifest, never half of one.
"""

from __future__ import annotations

import datetime
import getpass
import hashlib
import json
import os
import platform
import socket
import subprocess
import uuid
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset.layout import DATASET_FORMAT, READABLE_FORMATS, Layout


def tool_version() -> str:
    try:
        return f"drivekit {metadata.version('drivekit')}"
    except metadata.PackageNotFoundError:
        return "drivekit (not installed)"


#: The checkout this code runs from (tools/dataset/manifest.py -> the repository root), when it is one.
CHECKOUT = Path(__file__).resolve().parents[2]
#: The commit and dirty flag baked into an Apptainer image at build time (containers/*.def `%environment`,
#: set from `make images`), for code that runs where no git checkout is: read when git cannot tell.
COMMIT_ENV = "DRIVEKIT_COMMIT"
DIRTY_ENV = "DRIVEKIT_DIRTY"
#: Packages whose versions a collection records (those installed): what decides how frames are made.
KEY_PACKAGES = ("numpy", "carla", "carla-0-9-15", "eclipse-sumo", "libsumo", "msgpack", "zstandard", "simplejpeg",
                "numba", "pillow", "torch", "py123d")
_GIT_TIMEOUT_S = 10.0


def _git(*args: str) -> str | None:
    """`git -C CHECKOUT ARGS` stdout, None when git is absent, fails or hangs. GIT_OPTIONAL_LOCKS=0: `status`
    must not take the index lock of a checkout others are working in."""
    try:
        proc = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_S, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def code_version() -> dict[str, Any]:
    """{"version": the drivekit package version (None when not installed), "commit": the git commit (None when
    unknown), "dirty": whether tracked files differ from it (untracked files do not count, as in `git describe
    --dirty`; None when unknown), "source": where commit and dirty come from: "git" (this checkout), "image"
    (baked at build time: COMMIT_ENV, DIRTY_ENV) or None}.

    The commit is read only from the checkout the code runs from (not from a repository around an installed
    copy): git absent, a folder that is no repository, or one owned by someone else all give None, never an
    error."""
    try:
        version = metadata.version("drivekit")
    except metadata.PackageNotFoundError:
        version = None
    out: dict[str, Any] = {"version": version, "commit": None, "dirty": None, "source": None}
    top = _git("rev-parse", "--show-toplevel", "HEAD")
    lines = top.split() if top else []
    if len(lines) == 2 and Path(lines[0]).resolve() == CHECKOUT:
        status = _git("status", "--porcelain", "--untracked-files=no")
        out.update(commit=lines[1], dirty=None if status is None else bool(status.strip()), source="git")
        return out
    baked = os.environ.get(COMMIT_ENV, "").strip()
    if baked and baked != "unknown":
        dirty = os.environ.get(DIRTY_ENV, "").strip().lower()
        out.update(commit=baked, dirty={"true": True, "1": True, "false": False, "0": False}.get(dirty),
                   source="image")
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _os_name() -> str:
    try:
        name = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        name = ""
    kernel = f"{platform.system()} {platform.release()}"
    return f"{name} ({kernel})" if name else platform.platform()


def package_versions(names: Iterable[str] = KEY_PACKAGES) -> dict[str, str]:
    """Versions of the installed ones of `names` (a missing one is left out)."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def machine() -> dict[str, Any]:
    """Where a collection ran: host name, CPU model and counts (all, and usable by this process), OS, Python and
    the KEY_PACKAGES installed."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {"hostname": socket.gethostname(), "cpu": _cpu_model(), "cpus": os.cpu_count(), "usable_cpus": usable,
            "os": _os_name(), "python": platform.python_version(), "packages": package_versions()}


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content (hex). ToolError naming the file when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with files.open_regular(path, None) as f:  # a FIFO or a device: refused, not waited on or read forever
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except files.UnreadableFile as e:
        raise ToolError(str(e)) from None
    except OSError as e:
        raise ToolError(f"{path}: cannot read it ({e.strerror})") from None
    return digest.hexdigest()


def route_set(files: Iterable[Path], base: Path) -> dict[str, Any]:
    """The route files of a collection as one fingerprint: {"dir": base, "files": how many, "sha256": the hash of
    every file's path relative to `base` and content hash, sorted}. The same files in another folder give the
    same hash; a file changed, added, removed or renamed gives another."""
    base = Path(base)
    lines = []
    for path in files:
        path = Path(path)
        try:
            rel = path.relative_to(base).as_posix()
        except ValueError:
            rel = path.name
        lines.append(f"{rel}\0{file_sha256(path)}\n")
    lines.sort()
    return {"dir": str(base), "files": len(lines), "sha256": hashlib.sha256("".join(lines).encode()).hexdigest()}


def user_at_host() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, as in some containers
        user = os.environ.get("USER") or str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def read_manifest(layout: Layout) -> dict[str, Any] | None:
    """The root's manifest, None when there is none. Raises ToolError for an unreadable or foreign one."""
    path = layout.manifest
    try:
        text = files.read_text(path)
    except FileNotFoundError:
        return None
    except files.UnreadableFile as e:
        raise ToolError(f"{e}") from e
    except OSError as e:
        raise ToolError(f"{path}: cannot read the manifest ({e.strerror})") from e
    except ValueError as e:
        raise ToolError(f"{path}: not UTF-8 text ({e}); restore it or move it aside") from e
    try:
        manifest = files.loads(text)
    except ValueError as e:
        raise ToolError(f"{path}: not valid JSON ({e}); restore it or move it aside") from e
    if not isinstance(manifest, dict):
        raise ToolError(f"{path}: not a drivekit manifest (expected a JSON object)")
    version = manifest.get("format_version")
    if version not in READABLE_FORMATS:
        raise ToolError(
            f"{path}: dataset format version {version}, this tool reads versions "
            f"{', '.join(map(str, READABLE_FORMATS))} and writes version {DATASET_FORMAT}; "
            "use a drivekit release of that version, or collect into a new --root"
        )
    return manifest


def _derived_id(manifest: dict[str, Any]) -> str:
    """The id of a manifest written before `dataset_id` existed: stable, from when and by whom it was made."""
    text = f"{manifest.get('created')}\n{manifest.get('created_by')}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def dataset_id(layout: Layout) -> str:
    """The root's dataset id (manifest `dataset_id`). ToolError for a root without a manifest."""
    manifest = read_manifest(layout)
    if manifest is None:
        raise ToolError(f"{layout.root}: no {layout.manifest.name}, so not a dataset root (or one whose manifest "
                        "was lost); give the --root that bin/collect wrote")
    value = manifest.get("dataset_id")
    return str(value) if value else _derived_id(manifest)


def planned_runs(manifest: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The manifest's `runs` ("<scenario>/<run>" -> route, route_id, repetition); empty without one."""
    runs = (manifest or {}).get("runs") or {}
    return runs if isinstance(runs, dict) else {}


def update_manifest(layout: Layout, collection: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict:
    """Create or update the manifest: append one collection entry, merge the planned runs, write atomically."""
    manifest = read_manifest(layout)
    if manifest is None:
        manifest = {
            "format_version": DATASET_FORMAT,
            "dataset_id": uuid.uuid4().hex,
            "created": now_iso(),
            "created_by": user_at_host(),
            "tool": tool_version(),
            "collections": [],
            "runs": {},
        }
    else:
        manifest.setdefault("dataset_id", _derived_id(manifest))  # keep the id files derived from it recorded
        manifest["format_version"] = DATASET_FORMAT  # what it now holds (an older version's frames read as they are)
    entry = {"time": now_iso(), "user": user_at_host(), "tool": tool_version(), "format_version": DATASET_FORMAT,
             "code": code_version(), "machine": machine(), **collection}
    manifest.setdefault("collections", []).append(entry)
    merged = dict(planned_runs(manifest))
    merged.update(runs)
    manifest["runs"] = dict(sorted(merged.items()))
    # default=str: settings come from the command line and may hold tuples or other plain values.
    atomic.write_text(layout.manifest, json.dumps(manifest, indent=2, default=str) + "\n")
    return manifest
