"""What a collection records in its manifest entry (tools.dataset.manifest.update_manifest adds the time, user,
format version, code version and machine): the exact settings, world, rate, seeds, rig, expert parameters, the
route set and the towns. Written by a collection (tools.collect.runner.collection) and by a lone route run."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.runner.world import world_for
from tools.dataset.manifest import file_sha256, route_set
from tools.expert import conflicts, control, expert


def _constants(module: Any) -> dict[str, Any]:
    """The upper-case numbers and strings of a module and of its classes (`Controller.KP`): the expert's
    parameters."""
    found = {}
    for name, value in vars(module).items():
        if name.isupper() and type(value) in (int, float, str):
            found[name] = value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, inner in vars(value).items():
                if attr.isupper() and type(inner) in (int, float, str):
                    found[f"{name}.{attr}"] = inner
    return dict(sorted(found.items()))


def expert_record() -> dict[str, Any]:
    """The expert's parameters (every constant of tools/expert/expert.py, conflicts.py and control.py) and a hash of its
    source files, which names its exact code even in a dirty checkout."""
    folder = Path(expert.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(f"{path.name}\0{file_sha256(path)}\n".encode())
    return {"module": "tools.expert", "sha256": digest.hexdigest(),
            "parameters": {"expert": dict(sorted({**_constants(expert), **_constants(conflicts)}.items())),
                           "control": _constants(control)}}


def world_record(settings: CollectSettings) -> dict[str, Any]:
    """Which world drove the routes, and the versions of what makes it (the world's own record)."""
    return world_for(settings.world).record(settings)


def collection_record(settings: CollectSettings, route_files: Iterable[Path], routes_dir: Path,
                      town_files: Iterable[Path]) -> dict[str, Any]:
    """What a collection adds to its manifest entry besides its command line: `settings` (every CollectSettings
    field), `world`, `rate`, `seeds`, `rig` (the resolved rig: the default one when --rig is not given) and
    `rig_file`, `expert`, `routes` (`tools.dataset.manifest.route_set`) and `towns` (name -> sha256 of each
    OpenDRIVE file the routes drive on)."""
    rate = settings.rate
    record: dict[str, Any] = {
        "settings": settings.to_dict(),
        "world": world_record(settings),
        "rate": {"sim_hz": rate.sim_hz, "record_every": rate.record_every, "frame_dt": rate.frame_dt},
        "seeds": {"offset": settings.seed,
                  "rule": "tools.collect.runner.attempt.derive_seed(route file stem, route id, repetition, offset)"},
        "rig": settings.load_rig().to_dict() if settings.record else None,
        "rig_file": {"path": str(Path(settings.rig).absolute()), "sha256": file_sha256(Path(settings.rig))}
        if settings.rig else None,
        "expert": expert_record() if settings.agent == "expert" else None,
        "routes": route_set(route_files, routes_dir),
        "towns": {Path(p).stem: file_sha256(Path(p)) for p in sorted(set(map(Path, town_files)))},
    }
    return record
