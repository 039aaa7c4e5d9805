"""One route run as planned: a frozen, typed `RunSpec`, handed from the plan to the process that drives the run in
one JSON file (ROOT/logs/<Scenario>/<run>/run-spec.json, tools.dataset.layout.Layout.run_spec), as submitit hands a
job over in one file (JSON here, never a pickle).

A collection (tools.collect.runner.collection) writes every planned run's spec once, after it has checked the routes
against their towns; the child it starts for an attempt (`python -m tools.collect run --spec FILE --attempt N`, a
policy's `python -m tools.evaluate route ...`, the same forked from a town's zygote, a SLURM task's) reads it: the
route as planned (its waypoints, scenarios and weathers) is the route driven, its key, town file, seed and settings
are not worked out again. `python -m tools.collect run --route FILE` (a run alone) builds the same spec itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route
from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset.layout import RunKey

#: Version of run-spec.json.
SPEC_FORMAT = 1


def derive_seed(route_stem: str, route_id: str, repetition: int, offset: int) -> int:
    """The world's seed, from (route, repetition): identical runs for identical inputs."""
    digest = hashlib.sha256(f"{route_stem}/{route_id}/{repetition}/{offset}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class RunSpec:
    """One route run to drive: which (`key`), the route as planned (`route`, read from `route_file`), its town
    (`town_file`, found in `towns`), the repetition and the world's seed derived from them, and the settings."""

    key: RunKey
    route_file: Path
    route: Route
    towns: Path
    town_file: Path
    repetition: int
    seed: int
    settings: CollectSettings

    @staticmethod
    def plan(key: RunKey, route_file: Path, route: Route, towns: Path, town_file: Path, repetition: int,
             settings: CollectSettings) -> RunSpec:
        """The spec of a planned run, its seed derived from (route, repetition, settings.seed)."""
        return RunSpec(key, Path(route_file), route, Path(towns), Path(town_file), int(repetition),
                       derive_seed(Path(route_file).stem, route.id, int(repetition), settings.seed), settings)

    def to_dict(self) -> dict[str, Any]:
        r = self.route
        return {
            "format": SPEC_FORMAT, "key": str(self.key), "route_file": str(self.route_file),
            "route": {"id": r.id, "town": r.town, "waypoints": np.asarray(r.waypoints, dtype=np.float64).tolist(),
                      "scenarios": r.scenarios, "weathers": r.weathers},
            "towns": str(self.towns), "town_file": str(self.town_file), "repetition": self.repetition,
            "seed": self.seed, "settings": self.settings.to_dict(),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> RunSpec:
        if d.get("format") != SPEC_FORMAT:
            raise ValueError(f"format {d.get('format')}, this tool reads {SPEC_FORMAT}")
        r = d["route"]
        route = Route(str(r["id"]), str(r["town"]), np.array(r["waypoints"], dtype=np.float64),
                      list(r["scenarios"]), list(r["weathers"]))
        scenario, _, name = str(d["key"]).partition("/")
        return RunSpec(RunKey(scenario, name), Path(d["route_file"]), route, Path(d["towns"]), Path(d["town_file"]),
                       int(d["repetition"]), int(d["seed"]), CollectSettings(**d["settings"]))

    def write(self, path: Path) -> None:
        """Write it atomically (not fsynced: a spec lost to a machine crash is written again by the next plan)."""
        atomic.write_bytes(Path(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode(), durable=False)

    @staticmethod
    def read(path: Path) -> RunSpec:
        """The spec in `path`; a ToolError naming the file when it is missing or not a spec."""
        try:
            return RunSpec.from_dict(files.read_json(path))
        except FileNotFoundError:
            raise ToolError(f"--spec {path}: no such file; plan the run again (python -m tools.collect collect)") \
                from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ToolError(f"--spec {path}: not a readable run spec ({e})") from None

