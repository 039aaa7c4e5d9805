"""Route-run results in the leaderboard 2.0 checkpoint format, and THE definition of a failed route.

Every tool that asks "is this route run done, failed, running or still to do?" calls `run_state`.
"""

from __future__ import annotations

import enum
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.dataset import atomic
from tools.dataset.layout import Layout, RunKey

# Leaderboard 2.0 record statuses.
STARTED = "Started"
PERFECT = "Perfect"
COMPLETED = "Completed"
FAILED = "Failed"
FAILED_SIMULATION = "Failed - Simulation crashed"
FAILED_SENSORS = "Failed - Agent's sensors were invalid"
FAILED_SETUP = "Failed - Agent couldn't be set up"
FAILED_AGENT = "Failed - Agent crashed"
FAILED_TIMEOUT = "Failed - Agent timed out"
FAILED_DEVIATED = "Failed - Agent deviated from the route"
FAILED_BLOCKED = "Failed - Agent got blocked"

#: Statuses of a route run whose data is usable: the route was driven to its end.
SUCCESS_STATUSES = frozenset({PERFECT, COMPLETED})

INFRACTION_KEYS = (
    "collisions_layout",
    "collisions_pedestrian",
    "collisions_vehicle",
    "red_light",
    "stop_infraction",
    "outside_route_lanes",
    "min_speed_infractions",
    "yield_emergency_vehicle_infractions",
    "scenario_timeouts",
    "route_dev",
    "vehicle_blocked",
    "route_timeout",
)

# Leaderboard 2.0 infraction penalties (multiplicative), used for score_penalty.
_PENALTY = {
    "collisions_pedestrian": 0.5,
    "collisions_vehicle": 0.6,
    "collisions_layout": 0.65,
    "red_light": 0.7,
    "stop_infraction": 0.8,
    "scenario_timeouts": 0.7,
    "yield_emergency_vehicle_infractions": 0.7,
}

#: A heartbeat older than this (seconds) means its writer is gone, wherever it ran.
HEARTBEAT_STALE_S = 120.0


class RunState(enum.StrEnum):
    PENDING = "pending"  # nothing on disk yet
    RUNNING = "running"  # a live process is writing it (fresh heartbeat)
    FINISHED = "finished"  # result file with a success status: usable data
    FAILED = "failed"  # result file with a failure status
    CRASHED = "crashed"  # started, no result, and its writer is gone: unfinished


#: The one definition of a failed route run, used by collect, progress, clean-failed and buckets.
FAILED_STATES = frozenset({RunState.FAILED, RunState.CRASHED})


def is_failed(state: RunState) -> bool:
    return state in FAILED_STATES


@dataclass
class RouteRecord:
    """What a route run produced, in the leaderboard's vocabulary."""

    route_id: str
    status: str
    infractions: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in INFRACTION_KEYS})
    route_completion: float = 0.0  # percent
    route_length: float = 0.0  # metres
    duration_game: float = 0.0  # seconds
    duration_system: float = 0.0  # seconds

    def to_result(self, index: int = 0) -> dict[str, Any]:
        """The whole leaderboard 2.0 checkpoint JSON for this one route run."""
        penalty = 1.0
        for key, items in self.infractions.items():
            penalty *= _PENALTY.get(key, 1.0) ** len(items)
        completion = round(self.route_completion, 4)
        scores = {
            "score_route": completion,
            "score_penalty": round(penalty, 4),
            "score_composed": round(max(completion * penalty, 0.0), 4),
        }
        record = {
            "index": index,
            "route_id": self.route_id,
            "status": self.status,
            "num_infractions": sum(len(v) for v in self.infractions.values()),
            "infractions": {k: list(self.infractions.get(k, [])) for k in INFRACTION_KEYS},
            "scores": scores,
            "meta": {
                "route_length": round(self.route_length, 3),
                "duration_game": round(self.duration_game, 3),
                "duration_system": round(self.duration_system, 3),
            },
        }
        crashed = self.status in (FAILED_SIMULATION, FAILED_AGENT, FAILED_SETUP, FAILED_SENSORS)
        return {
            "_checkpoint": {
                "global_record": {
                    "index": -1,
                    "route_id": -1,
                    "status": self.status,
                    "num_infractions": record["num_infractions"],
                    "infractions": {k: float(len(v)) for k, v in record["infractions"].items()},
                    "scores_mean": scores,
                    "scores_std_dev": {k: 0.0 for k in scores},
                    "meta": {"total_length": record["meta"]["route_length"], "exceptions": []},
                },
                "progress": [1, 1],
                "records": [record],
            },
            "entry_status": "Crashed" if crashed else "Finished",
            "eligible": not crashed,
            "sensors": [],
            "values": [],
            "labels": [],
        }


def write_result(layout: Layout, key: RunKey, record: RouteRecord) -> Path:
    path = layout.result_path(key)
    atomic.write_json(path, record.to_result())
    return path


def read_status(path: Path) -> str | None:
    """The record status of a result file, or None when the file is unreadable or not a result."""
    try:
        data = json.loads(path.read_text())
        return str(data["_checkpoint"]["records"][0]["status"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


# ----------------------------------------------------------------------------- liveness


def write_heartbeat(layout: Layout, key: RunKey, tick: int) -> None:
    atomic.write_json(
        layout.heartbeat(key),
        {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(), "tick": tick},
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def heartbeat_alive(path: Path, now: float | None = None) -> bool:
    """A heartbeat is alive while it is fresh, and, on this host, while its process exists."""
    try:
        beat = json.loads(path.read_text())
        age = (time.time() if now is None else now) - float(beat["time"])
        host, pid = str(beat["host"]), int(beat["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if age > HEARTBEAT_STALE_S:
        return False
    if host == socket.gethostname():
        return _pid_alive(pid)
    return True


def run_state(layout: Layout, key: RunKey) -> RunState:
    """THE definition of where a route run stands. A run is finished only when its result says so."""
    result = layout.result_path(key)
    if result.exists():
        status = read_status(result)
        return RunState.FINISHED if status in SUCCESS_STATUSES else RunState.FAILED
    if heartbeat_alive(layout.heartbeat(key)):
        return RunState.RUNNING
    if layout.run_dir(key).exists() or layout.attempt_logs(key):
        return RunState.CRASHED
    return RunState.PENDING


def attempts(layout: Layout, key: RunKey) -> int:
    """Attempts made at a route run, counted on disk (one log per attempt)."""
    return len(layout.attempt_logs(key))


def claim_attempt(layout: Layout, key: RunKey) -> tuple[int, Path] | None:
    """Create the next attempt's log with O_EXCL; None when another process claimed it first."""
    n = attempts(layout, key) + 1
    path = layout.attempt_log(key, n)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None
    os.close(fd)
    return n, path


def discard_run(layout: Layout, key: RunKey) -> None:
    """Remove a run's data and result (result first, so the run never looks finished meanwhile)."""
    layout.result_path(key).unlink(missing_ok=True)
    atomic.remove_tree(layout.run_dir(key))
