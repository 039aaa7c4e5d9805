"""Route-run results in the leaderboard 2.0 checkpoint format, THE definition of a failed route, and the
claim that makes one process the only one running a route run.

Every tool that asks "is this route run done, failed, running or still to do?" calls `run_state`.

Claim-and-run protocol (`claim_run`): the process that runs an attempt first takes an exclusive lock on
logs/<Scenario>/<run>/run.lock (flock), then, holding it, checks the run's state and counts the attempt
(an attempt log created with O_EXCL). The lock lives as long as the process that runs the attempt (a
collector hands its locked file to the child it starts, then closes its own copy), so:
- a second collector, a rerun after a kill -9 of the collector, or a SLURM task never runs the same
  route run at the same time: it finds the lock taken and the run RUNNING, and counts no attempt;
- there is no window between counting an attempt and the first heartbeat in which the run looks crashed.
A file system without working flock is refused in one line (tools.dataset.locks). Heartbeats remain for what a
lock cannot see (a writer on another host of a file system whose locks are only local to each node), and are
judged by one rule that survives clocks that differ between hosts: `heartbeats_alive`.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.dataset import atomic, files, locks
from tools.dataset.errors import ToolError
from tools.dataset.layout import RESULTS, Layout, RunKey

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
#: Wall-clock seconds between a writer's heartbeats (a route run in either world, a Py123D export after one).
HEARTBEAT_EVERY_S = 5.0
#: Another host's heartbeat dated more than this (seconds) ahead of this host's clock is not believed: its
#: writer's clock runs ahead, and only a change of the file says that it lives (`heartbeats_alive`). So a dead
#: run's future-dated heartbeat keeps it "running" for at most HEARTBEAT_STALE_S + this.
HEARTBEAT_FUTURE_S = 30.0
#: How far apart the clocks of the hosts writing one root may be (seconds): another host's heartbeat older than
#: HEARTBEAT_STALE_S, but by less than this more, is watched for a change before its run is called crashed.
CLOCK_SKEW_MAX_S = 600.0
#: How long a reader watches a heartbeat its clock cannot judge: more than two beats of a live writer.
HEARTBEAT_WATCH_S = 2 * HEARTBEAT_EVERY_S + 1.0


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
                "scenarios": dict(self.scenarios),
            },
        }
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
        status = json.loads(text)["_checkpoint"]["records"][0]["status"]
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


# ----------------------------------------------------------------------------- liveness


def write_heartbeat(layout: Layout, key: RunKey, tick: int) -> None:
    atomic.write_json(
        layout.heartbeat(key),
        {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(), "tick": tick},
    )


def _read(path: Path) -> bytes | None:
    try:
        return files.read_bytes(path, files.MAX_JSON_BYTES)
    except OSError:
        return None


_ALIVE, _DEAD, _WATCH = "alive", "dead", "watch"


def _judge(text: bytes | None, now: float) -> str:
    """What one reading of a heartbeat says: alive, dead, or watch (its writer's clock cannot be trusted here)."""
    try:
        beat = json.loads(text or b"")
        stamp, host, pid = float(beat["time"]), str(beat["host"]), int(beat["pid"])
    except (ValueError, KeyError, TypeError):
        return _DEAD
    age = now - stamp
    if host == socket.gethostname():  # written with this host's clock, by a process we can ask about
        return _ALIVE if age <= HEARTBEAT_STALE_S and atomic.process_alive(pid) else _DEAD
    if -HEARTBEAT_FUTURE_S <= age <= HEARTBEAT_STALE_S:
        return _ALIVE
    if age > HEARTBEAT_STALE_S + CLOCK_SKEW_MAX_S:
        return _DEAD
    return _WATCH  # stale by our clock but within the skew allowed, or dated in the future: watch it change


#: Heartbeats this process saw unchanged: path -> (content, monotonic time first seen so). A long-running
#: observer (the collector, the SLURM monitor, clean-failed's second look) need not watch one twice.
_unchanged: dict[Path, tuple[bytes | None, float]] = {}


def heartbeats_alive(paths: Iterable[Path]) -> dict[Path, bool]:
    """THE liveness rule of route runs, for many heartbeats at once (progress, clean-failed, the collector and the
    SLURM monitor all come here through run_state / run_states):

    - no heartbeat, or not one: dead;
    - this host's: alive while it is fresh and its process exists (one clock, one process table);
    - another host's dated within [-HEARTBEAT_FUTURE_S, HEARTBEAT_STALE_S] of this host's clock: alive;
      older than HEARTBEAT_STALE_S + CLOCK_SKEW_MAX_S: dead;
    - else its writer's clock may differ from ours (a node 200 s behind, one ahead): the file's own change
      decides, watched on this process's monotonic clock for HEARTBEAT_WATCH_S (once for all of them): a live
      writer rewrites it every HEARTBEAT_EVERY_S; unchanged, it is dead.
    """
    now = time.time()
    first = {Path(p): _read(Path(p)) for p in paths}
    out = {p: _judge(text, now) == _ALIVE for p, text in first.items()}
    clock = time.monotonic()
    watch = {}
    for p, text in first.items():
        if out[p] or _judge(text, now) != _WATCH:
            continue
        seen, since = _unchanged.get(p, (None, None))
        if since is None or seen != text:
            _unchanged[p] = (text, clock)
        elif clock - since >= HEARTBEAT_WATCH_S:
            continue  # seen unchanged long enough before: dead
        watch[p] = text
    deadline = clock + HEARTBEAT_WATCH_S
    while watch:
        time.sleep(min(0.25, HEARTBEAT_WATCH_S))
        for p, text in list(watch.items()):
            if _read(p) != text:  # rewritten: its writer lives, whatever its clock says
                out[p] = True
                _unchanged.pop(p, None)
                del watch[p]
        if time.monotonic() >= deadline:
            break
    return out


def heartbeat_alive(path: Path) -> bool:
    """`heartbeats_alive` of one heartbeat."""
    return heartbeats_alive([path])[Path(path)]


def heartbeat_age(path: Path) -> float:
    """Seconds since this host wrote the heartbeat `path` (by its own `time`, on this host's clock, not the file's
    mtime, which a file server may stamp with its own); infinite when there is none."""
    try:
        return time.time() - float(files.read_json(path)["time"])
    except (OSError, ValueError, KeyError, TypeError):
        return float("inf")


class HeartbeatWatch:
    """One heartbeat watched by a long-running observer (the collector's watchdog of its own child): stale once
    the file, having changed since the watch began, stays unchanged for `stale_s` seconds of this process's
    monotonic clock, whatever the clocks of its writer and of the file server say."""

    def __init__(self, path: Path, stale_s: float = HEARTBEAT_STALE_S):
        self.path, self.stale_s = Path(path), stale_s
        self.seen, self.since, self.changed = _read(self.path), time.monotonic(), False

    def stale(self) -> bool:
        text = _read(self.path)
        if text != self.seen:
            self.seen, self.since, self.changed = text, time.monotonic(), True
            return False
        return self.changed and time.monotonic() - self.since > self.stale_s


def run_state(layout: Layout, key: RunKey) -> RunState:
    """THE definition of where a route run stands. A run is finished only when its result says so: in a
    collection root when the route was driven to its end (SUCCESS_STATUSES), in an evaluation root
    (`layout.is_evaluation`) when the run has any driving outcome (DRIVING_STATUSES), a failed drive
    included; a crash status is FAILED (retried) in both."""
    return _state(layout, key, holder=False)


def run_states(layout: Layout, keys: Iterable[RunKey] | None = None) -> dict[RunKey, RunState]:
    """run_state of many route runs at once: `keys`, else every run on disk (`layout.iter_runs`, sorted). The
    same states as run_state asked run by run (tests/test_progress.py checks it on a root with runs in every
    state), for a fraction of the system calls: see `read_results`."""
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
    beats = heartbeats_alive(layout.heartbeat(key) for key in rest)  # one watch for all that need one
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
        return beats[beat] if beats is not None and beat in beats else heartbeat_alive(beat)

    if holder:
        if not _own_heartbeat(layout, key) and alive():
            return RunState.RUNNING
    elif lock_held(layout, key) or alive():
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


def attempts(layout: Layout, key: RunKey) -> int:
    """Attempts made at a route run, counted on disk (one log per attempt)."""
    return len(layout.attempt_logs(key))


# ----------------------------------------------------------------------------- each attempt's outcome

#: How much of a crash's message an attempt record keeps, characters.
MESSAGE_CHARS = 400
_TRACEBACK = "Traceback (most recent call last):"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: What differs between two attempts of the same crash (ports, pids, times, addresses): left out when messages
#: are compared.
_VARYING = re.compile(r"0x[0-9a-fA-F]+|\d{4,}")


def record_attempt(layout: Layout, key: RunKey, attempt: int, status: str, message: str = "",
                   detail: str = "") -> None:
    """Note how an attempt of a run ended in logs/<Scenario>/<run>/attempts.json (`layout.attempts_record`): its
    status and, for a crash, what crashed (`message`, one line: the exception, else how the process ended) and
    how the process ended (`detail`). Written by whoever writes the attempt's result (the run itself, a collector
    whose child died, the SLURM monitor for a task that ended): it outlives the result, which the next attempt
    replaces."""
    entries = [e for e in read_attempts(layout, key) if e["attempt"] != attempt]
    entries.append({"attempt": int(attempt), "status": status, "message": _line(message), "detail": _line(detail)})
    atomic.write_json(layout.attempts_record(key), {"attempts": sorted(entries, key=lambda e: e["attempt"])})


def _line(text: str) -> str:
    return " ".join(text.split())[:MESSAGE_CHARS]


def read_attempts(layout: Layout, key: RunKey) -> list[dict[str, Any]]:
    """The run's attempt records ({"attempt", "status", "message", "detail"}), by attempt; [] without any."""
    try:
        entries = json.loads(layout.attempts_record(key).read_text())["attempts"]
        return [{"attempt": int(e["attempt"]), "status": str(e["status"]), "message": str(e.get("message", "")),
                 "detail": str(e.get("detail", ""))} for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def crash_message(log: Path, how: str) -> tuple[str, str]:
    """(message, detail) of a crashed attempt: the last exception in its log, else `how` (how its process
    ended); and `how`."""
    return last_exception(log) or how, how


def last_exception(log: Path) -> str:
    """The exception line of the last Python traceback in a log (its first unindented line after the last
    "Traceback (most recent call last):"), colour codes removed; "" when there is none."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 256 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    starts = [i for i, line in enumerate(lines) if _TRACEBACK in line]
    for line in lines[starts[-1] + 1:] if starts else []:
        line = _ANSI.sub("", line).rstrip()
        if line and not line[0].isspace():
            return line
    return ""


@dataclass(frozen=True)
class CrashHistory:
    """Routes that crash the same way on every attempt (`repeated`: key -> (attempts, the last one's status and
    message)), apart from runs that crashed and then finished (`recovered`)."""

    repeated: dict[RunKey, tuple[int, str]]
    recovered: list[RunKey]


def crash_history(layout: Layout, states: dict[RunKey, RunState]) -> CrashHistory:
    """Read the attempt records of the runs that ended (`states`: run_states): a failed run whose every attempt,
    two or more, ended with the same crash status and message (ports, pids and times aside) is `repeated`; a
    finished one with a crash among its attempts is `recovered`."""
    repeated: dict[RunKey, tuple[int, str]] = {}
    recovered: list[RunKey] = []
    for key, state in states.items():
        if state not in (RunState.FAILED, RunState.FINISHED):
            continue
        entries = read_attempts(layout, key)
        crashes = [e for e in entries if e["status"] in CRASH_STATUSES]
        if not crashes:
            continue
        if state is RunState.FINISHED:
            recovered.append(key)
        elif len(crashes) == len(entries) >= 2 and len({_crash_signature(e) for e in crashes}) == 1:
            last = crashes[-1]
            repeated[key] = (len(crashes), f"{last['status']}: {last['message']}" if last["message"]
                             else last["status"])
    return CrashHistory(repeated, recovered)


def _crash_signature(entry: dict[str, Any]) -> tuple[str, str]:
    return entry["status"], _VARYING.sub("#", entry["message"])


# ----------------------------------------------------------------------------- the claim

#: Environment variable through which a collector hands the locked run.lock descriptor to its child.
LOCK_FD_ENV = "DRIVEKIT_RUN_LOCK_FD"
#: How long a claimant retries a lock that a state probe (run_state) may hold for a few microseconds.
_LOCK_RETRY_S = 2.0


def lock_held(layout: Layout, key: RunKey) -> bool:
    """True while a process holds the run's lock (runs an attempt of it). Never creates anything."""
    try:
        fd = os.open(layout.run_lock(key), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: heartbeats decide
        return False
    finally:
        os.close(fd)
    return False


@dataclass
class RunClaim:
    """Exclusive ownership of one route run's attempt, held while `fd` (the locked run.lock) is open."""

    key: RunKey
    attempt: int
    log: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _lock(path: Path) -> int | None:
    """An fd of `path` holding its exclusive flock, or None when another process holds it. Retries for a
    moment (a state probe holds the lock for microseconds) and when the file was replaced meanwhile (a
    run being cleaned): the fd returned always locks the file now at `path`."""
    deadline = time.monotonic() + _LOCK_RETRY_S
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            taken = locks.try_lock(fd, path)  # a file system without locks: ToolError, nothing claimed
        except BaseException:
            os.close(fd)
            raise
        if not taken:
            os.close(fd)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # we locked a file that was deleted meanwhile: lock the new one


def claim_run(layout: Layout, key: RunKey, max_attempts: int | None = None, redo: bool = False
              ) -> RunClaim | RunState:
    """Take the run's lock, then count the next attempt. Returns the claim, or, without counting anything,
    the state that stops it: RUNNING (locked by another process), FINISHED or DAMAGED (unless `redo`, a
    user's explicit --force), or FAILED when `max_attempts` attempts were made already. ToolError when a folder
    of the run is reached through a symbolic link (Layout.check_run_paths): nothing is written through one."""
    layout.check_run_paths(key)
    fd = _lock(layout.run_lock(key))
    if fd is None:
        return RunState.RUNNING
    try:
        state = _state(layout, key, holder=True)
        stop = state is RunState.RUNNING or (state in (RunState.FINISHED, RunState.DAMAGED) and not redo)
        if not stop and max_attempts is not None and attempts(layout, key) >= max_attempts:
            state, stop = RunState.FAILED, True
        if stop:
            os.close(fd)
            return state
        n = attempts(layout, key) + 1
        log = layout.attempt_log(key, n)
        try:
            os.close(os.open(log, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:  # only without working locks: another host counted this attempt
            os.close(fd)
            return RunState.RUNNING
        return RunClaim(key, n, log, fd)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def exclusive(layout: Layout, key: RunKey) -> Iterator[bool]:
    """Hold the run's lock for a moment (to delete it, say): yields False when a process runs it now. ToolError
    when a folder of the run is reached through a symbolic link."""
    layout.check_run_paths(key)
    fd = _lock(layout.run_lock(key))
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def _own_heartbeat(layout: Layout, key: RunKey) -> bool:
    try:
        beat = files.read_json(layout.heartbeat(key))
        return beat.get("host") == socket.gethostname() and int(beat.get("pid")) == os.getpid()
    except (OSError, ValueError, TypeError):
        return False


def inherited_claim(layout: Layout, key: RunKey, attempt: int) -> RunClaim:
    """The claim a collector handed to this process (LOCK_FD_ENV): checked to be the locked run.lock of
    `key`. ToolError when there is none: --attempt is given only by `tools.collect collect`."""
    raw = os.environ.get(LOCK_FD_ENV)
    try:
        fd = int(raw or "")
        held = os.fstat(fd)
        on_disk = os.stat(layout.run_lock(key))
        if (held.st_dev, held.st_ino) != (on_disk.st_dev, on_disk.st_ino):
            raise ValueError
    except (ValueError, OSError):
        raise ToolError(f"--attempt {attempt}: no claim of {key} handed over by a collector; leave --attempt "
                        "out (it is for tools.collect collect), the run claims its own attempt") from None
    return RunClaim(key, int(attempt), layout.attempt_log(key, int(attempt)), fd)


def discard_run(layout: Layout, key: RunKey) -> None:
    """Remove a run's data and result (result first, so the run never looks finished meanwhile); never through a
    symbolic link (Layout.check_run_paths)."""
    layout.check_run_paths(key)
    layout.result_path(key).unlink(missing_ok=True)
    atomic.remove_tree(layout.run_dir(key))
