"""The wave files of a SLURM collection (tools.collect.runner.slurm): what a wave holds and where it lies.

    ROOT/slurm/waves/wave-<NNNN>.json   one wave: its route runs, how they map to array tasks, its arrays
    ROOT/logs/slurm/<array>_<task>.log  every array task's output (sbatch %A_%a, appended)

The monitor writes them (tools.collect.runner.slurm), each array task reads its own
(tools.collect.runner.slurm_task); each route run of a wave is driven as its spec says (tools.collect.base.spec).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset.layout import SLURM, Layout, RunKey
from tools.dataset.manifest import now_iso

SLURM_DIR = SLURM
WAVES = "waves"
WAVE_NAME = "wave-{wave:04d}.json"
WAVE_FORMAT = 1
#: sbatch's %A_%a: one log per array task, under ROOT/logs/slurm/.
TASK_LOG = "{array}_{task}.log"


def slurm_dir(layout: Layout) -> Path:
    return layout.root / SLURM_DIR


def waves_dir(layout: Layout) -> Path:
    return slurm_dir(layout) / WAVES


def task_log_dir(layout: Layout) -> Path:
    return layout.root / "logs" / SLURM_DIR


@dataclass
class Wave:
    """One wave file: route runs, tasks (`runs_per_task` consecutive runs each), and their arrays."""

    path: Path
    wave: int
    runs: list[dict[str, Any]]  # {"key", "route", "route_id", "route_digest", "repetition", "towns"}
    runs_per_task: int
    max_attempts: int
    settings: dict[str, Any]
    throttle: int
    arrays: list[dict[str, Any]] = field(default_factory=list)  # {"name", "first", "count", "job_id", "argv"}
    created: str = field(default_factory=now_iso)
    py123d: bool = False  # each run also writes its Py123D log (collect --py123d; absent in older wave files)
    servers_per_gpu: int = 0  # a task's runs at once per GPU it was given (0: one at a time; absent in older files)

    @property
    def n_tasks(self) -> int:
        return -(-len(self.runs) // self.runs_per_task)

    def task_runs(self, task: int) -> list[dict[str, Any]]:
        return self.runs[task * self.runs_per_task:(task + 1) * self.runs_per_task]

    def save(self) -> None:
        atomic.write_json(self.path, {
            "format": WAVE_FORMAT, "wave": self.wave, "created": self.created, "runs_per_task": self.runs_per_task,
            "max_attempts": self.max_attempts, "settings": self.settings, "throttle": self.throttle,
            "arrays": self.arrays, "runs": self.runs, "py123d": self.py123d, "servers_per_gpu": self.servers_per_gpu,
        })

    @staticmethod
    def load(path: Path) -> Wave:
        try:
            d = files.read_json(path)
            if d.get("format") != WAVE_FORMAT:
                raise ValueError(f"format {d.get('format')}, this tool reads {WAVE_FORMAT}")
            return Wave(Path(path), int(d["wave"]), list(d["runs"]), int(d["runs_per_task"]), int(d["max_attempts"]),
                        dict(d["settings"]), int(d["throttle"]), list(d["arrays"]), str(d["created"]),
                        bool(d.get("py123d", False)), int(d.get("servers_per_gpu", 0)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ToolError(f"{path}: not a readable wave file ({e})") from None


def load_waves(layout: Layout) -> list[Wave]:
    d = waves_dir(layout)
    if not d.is_dir():
        return []
    return [Wave.load(p) for p in sorted(d.glob("wave-*.json")) if not atomic.is_temporary(p)]


def run_key_of(entry: dict[str, Any]) -> RunKey:
    scenario, _, name = str(entry["key"]).partition("/")
    return RunKey(scenario, name)

