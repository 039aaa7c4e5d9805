"""Route-run results in the leaderboard 2.0 checkpoint format and their statuses, and THE definition of where a
route run stands, a failed one included.

Every tool that asks "is this route run done, failed, running or still to do?" calls `run_state`: a run with a
result file is what its status says; without one it is RUNNING while a process holds its lock (the claim,
tools.dataset.claims) or its heartbeat is alive (tools.dataset.heartbeats), else CRASHED once anything of it is
on disk, else PENDING.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core import atomic, files, locks
from tools.dataset import heartbeats
from tools.dataset.layout import RESULTS, Layout, RunKey
from tools.dataset.leaderboard_scores import penalty_20

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
#: Statuses that say the run itself broke (the simulator, the agent's process, its set-up or sensors), not
#: how the ego drove: the result's `entry_status` is Crashed, and the run is retried everywhere.
CRASH_STATUSES = frozenset({FAILED_SIMULATION, FAILED_AGENT, FAILED_SETUP, FAILED_SENSORS})
#: How the ego drove: the outcomes of a run that went to its end. In an evaluation root (bin/evaluate) each of
#: them is final, a FINISHED run; in a collection root only SUCCESS_STATUSES are.
DRIVING_STATUSES = frozenset({PERFECT, COMPLETED, FAILED, FAILED_TIMEOUT, FAILED_DEVIATED, FAILED_BLOCKED})

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

class RunState(enum.StrEnum):
    PENDING = "pending"  # nothing on disk yet
    RUNNING = "running"  # a live process is writing it (fresh heartbeat)
    FINISHED = "finished"  # result file with a success status (usable data); in an evaluation root, any driving outcome
    FAILED = "failed"  # result file with another status (in an evaluation root: a crash status)
    CRASHED = "crashed"  # started, no result, and its writer is gone: unfinished
    DAMAGED = "damaged"  # a result file that is not a readable result: reported, never redone or deleted silently


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
    #: What became of each of the route's scenario blocks (tools.collect.sim.scenarios.Scenarios.states), in
    #: meta.scenarios: a run whose scenario never ran says so.
    scenarios: dict[str, str] = field(default_factory=dict)
    #: Bench2Drive's minimum-speed checkpoints (its fork of MinimumSpeedRouteTest: 20 along the route, every one kept,
    #: percent), in meta.bench2drive_min_speed when the referee judged them (the embedded world); None: not judged.
    bench2drive_min_speed: list[float] | None = None
    #: The leaderboard 2.0's 4 minimum-speed checkpoints (percent), in meta.min_speed when the referee judged them
    #: (the embedded world, where they are no infraction: tools.collect.base.referee); None: not judged.
    min_speed: list[float] | None = None

    def to_result(self, index: int = 0) -> dict[str, Any]:
        """The whole leaderboard 2.0 checkpoint JSON for this one route run."""
        penalty = penalty_20(self.infractions)  # leaderboard 2.0's: the factors multiply
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
                "scenarios": dict(self.scenarios),
            },
        }
        if self.bench2drive_min_speed is not None:
            record["meta"]["bench2drive_min_speed"] = list(self.bench2drive_min_speed)
        if self.min_speed is not None:
            record["meta"]["min_speed"] = list(self.min_speed)
        crashed = self.status in CRASH_STATUSES
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
        return _status(files.read_bytes(path, files.MAX_JSON_BYTES))
    except OSError:
        return None


def _status(text: bytes) -> str | None:
    try:
        status = files.loads(text)["_checkpoint"]["records"][0]["status"]
        return status if isinstance(status, str) else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def publish_checkpoint(layout: Layout, key: RunKey, checkpoint: Path) -> str | None:
    """Publish a leaderboard checkpoint written by the CARLA leaderboard evaluator as the run's result file,
    unchanged and atomically, when it holds a finished record (a status other than Started); returns that
    status, or None when there is none (nothing is published). The evaluator writes its checkpoint early,
    with no records, and in place: it never goes straight to `result_path`, whose existence ends a run."""
    try:
        text = files.read_bytes(checkpoint, files.MAX_JSON_BYTES)  # read once: what is checked is what is published
    except OSError:
        return None
    status = _status(text)
    if status is None or status == STARTED:
        return None
    atomic.write_bytes(layout.result_path(key), text)
    return status


def run_state(layout: Layout, key: RunKey) -> RunState:
    """THE definition of where a route run stands. A run is finished only when its result says so: in a
    collection root when the route was driven to its end (SUCCESS_STATUSES), in an evaluation root
    (`layout.is_evaluation`) when the run has any driving outcome (DRIVING_STATUSES), a failed drive
    included; a crash status is FAILED (retried) in both."""
    return _state(layout, key, holder=False)


def run_states(layout: Layout, keys: Iterable[RunKey] | None = None) -> dict[RunKey, RunState]:
    """run_state of many route runs at once: `keys`, else every run on disk (`layout.iter_runs`, sorted). The
    same states as run_state asked run by run (tests/collect/runner/test_progress.py checks it on a root with runs in
    every state), for a fraction of the system calls: see `read_results`."""
    return {key: state for key, (state, _) in read_results(layout, keys).items()}


def read_results(layout: Layout, keys: Iterable[RunKey] | None = None
                 ) -> dict[RunKey, tuple[RunState, bytes | None]]:
    """{key: (run_state, the bytes of its result file the state was read from, None without one)} of `keys`,
    else of every run on disk, sorted. One listing of each results/<Scenario>/ folder says which runs have
    a result file: for those the file is read once (its status decides, as in run_state); a run without
    one, or whose file cannot be read as listed, is asked with run_state itself (lock, heartbeat, folders)."""
    scan = layout.scan_runs()
    if keys is None:
        keys = sorted(set().union(*scan.values()), key=lambda k: (k.scenario, k.name))
    with_result = scan[RESULTS]
    out: dict[RunKey, tuple[RunState, bytes | None]] = {}
    rest = []
    for key in keys:
        if key in with_result:
            try:
                text = files.read_bytes(layout.result_path(key), files.MAX_JSON_BYTES)
            except OSError:  # gone since the listing, a folder, a FIFO, unreadable: run_state says what it is
                text = None
            if text is not None:
                out[key] = (_result_state(layout, _status(text)), text)
                continue
        rest.append(key)
    beats = heartbeats.heartbeats_alive(layout.heartbeat(key) for key in rest)  # one watch for all that need one
    for key in rest:
        out[key] = (_state(layout, key, holder=False, beats=beats), None)
    return {key: out[key] for key in keys}


def held_run_state(layout: Layout, key: RunKey) -> RunState:
    """run_state asked by the process holding the run's lock (claim_run, exclusive): its own lock does
    not make the run RUNNING."""
    return _state(layout, key, holder=True)


def _state(layout: Layout, key: RunKey, holder: bool, beats: dict[Path, bool] | None = None) -> RunState:
    """run_state; `holder`: asked by the process holding the run's lock, which does not count itself; `beats`:
    heartbeats_alive of the run's heartbeat, when already asked."""
    result = layout.result_path(key)
    if result.exists():
        return _result_state(layout, read_status(result))
    beat = layout.heartbeat(key)

    def alive() -> bool:
        return beats[beat] if beats is not None and beat in beats else heartbeats.heartbeat_alive(beat)

    if holder:
        if not heartbeats.own_heartbeat(beat) and alive():
            return RunState.RUNNING
    elif locks.held(layout.run_lock(key)) or alive():
        return RunState.RUNNING
    if layout.run_dir(key).exists() or layout.attempt_logs(key):
        return RunState.CRASHED
    return RunState.PENDING


def _result_state(layout: Layout, status: str | None) -> RunState:
    """The state of a run whose result file holds `status` (None: not a readable result)."""
    if status is None:
        return RunState.DAMAGED
    final = DRIVING_STATUSES if layout.is_evaluation else SUCCESS_STATUSES
    return RunState.FINISHED if status in final else RunState.FAILED
