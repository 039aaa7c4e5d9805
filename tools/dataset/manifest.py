"""ROOT/manifest.json: the dataset's format version, and who collected what, when, with which settings.

    {
      "format_version": 1,                      layout.DATASET_FORMAT of the writer
      "dataset_id": "3f2a...",                  uuid4 hex made with the manifest: which dataset this is
      "created": "2025-01-31T12:00:00+00:00",   ISO 8601, UTC
      "created_by": "user@host",
      "tool": "drivekit 0.1.0",
      "collections": [                          one entry appended per `collect` invocation
        {"time", "user", "tool", "routes_dir", "repetitions", "settings", "argv"}
      ],
      "runs": {                                 every route run ever planned in this root
        "<scenario>/<run>": {"route": "/abs/path/route.xml", "route_id": "7", "repetition": 0}
      }
    }

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
import socket
import uuid
from importlib import metadata
from typing import Any

from tools.dataset import atomic
from tools.dataset.errors import ToolError
from tools.dataset.layout import DATASET_FORMAT, READABLE_FORMATS, Layout


def tool_version() -> str:
    try:
        return f"drivekit {metadata.version('drivekit')}"
    except metadata.PackageNotFoundError:
        return "drivekit (not installed)"


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
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ToolError(f"{path}: cannot read the manifest ({e.strerror})") from e
    try:
        manifest = json.loads(text)
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
    entry = {"time": now_iso(), "user": user_at_host(), "tool": tool_version(), **collection}
    manifest.setdefault("collections", []).append(entry)
    merged = dict(planned_runs(manifest))
    merged.update(runs)
    manifest["runs"] = dict(sorted(merged.items()))
    # default=str: settings come from the command line and may hold tuples or other plain values.
    atomic.write_text(layout.manifest, json.dumps(manifest, indent=2, default=str) + "\n")
    return manifest
