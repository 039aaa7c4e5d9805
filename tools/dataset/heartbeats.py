"""Heartbeats of route runs: how a writer says that it lives, and THE rule by which a reader judges it.

A route run's writer (either world's run, a Py123D export after one) rewrites data/<Scenario>/<run>/heartbeat.json
(`Layout.heartbeat`) every HEARTBEAT_EVERY_S wall seconds. A run's lock (tools.dataset.claims) says more on one
host; heartbeats remain for what a lock cannot see (a writer on another host of a file system whose locks are only
local to each node), and are judged by one rule that survives clocks that differ between hosts:
`heartbeats_alive`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path

from tools.core import atomic, files
from tools.dataset.layout import Layout, RunKey

#: A heartbeat older than this (seconds) means its writer is gone, wherever it ran.
HEARTBEAT_STALE_S = 120.0
#: Wall-clock seconds between a writer's heartbeats (a route run in either world, a Py123D export after one).
HEARTBEAT_EVERY_S = 5.0
#: A heartbeat dated more than this (seconds) ahead of this host's clock is not believed, whichever host wrote it
#: (another host's clock runs ahead; this host's cannot): only a change of the file says that it lives. So a dead
#: run's future-dated heartbeat keeps it "running" for at most HEARTBEAT_STALE_S + this.
HEARTBEAT_FUTURE_S = 30.0
#: How far apart the clocks of the hosts writing one root may be (seconds): another host's heartbeat older than
#: HEARTBEAT_STALE_S, but by less than this more, is watched for a change before its run is called crashed.
CLOCK_SKEW_MAX_S = 600.0
#: How long a reader watches a heartbeat its clock cannot judge: more than two beats of a live writer.
HEARTBEAT_WATCH_S = 2 * HEARTBEAT_EVERY_S + 1.0


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
        beat = files.loads(text or b"")
        stamp, host, pid = float(beat["time"]), str(beat["host"]), int(beat["pid"])
    except (ValueError, KeyError, TypeError):
        return _DEAD
    age = now - stamp
    if age < -HEARTBEAT_FUTURE_S:  # dated ahead of this clock, on any host: only a change says that it lives
        return _WATCH if host != socket.gethostname() or atomic.process_alive(pid) else _DEAD
    if host == socket.gethostname():  # written with this host's clock, by a process we can ask about
        return _ALIVE if age <= HEARTBEAT_STALE_S and atomic.process_alive(pid) else _DEAD
    if age <= HEARTBEAT_STALE_S:
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
    - dated more than HEARTBEAT_FUTURE_S ahead of this host's clock, whichever host wrote it: watched (below),
      never believed (a planted or hand-edited stamp an hour ahead beside a live pid kept a crashed run "running");
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


def own_heartbeat(path: Path) -> bool:
    """True when the heartbeat `path` was written by this very process (this host, this pid)."""
    try:
        beat = files.read_json(path)
        return beat.get("host") == socket.gethostname() and int(beat.get("pid")) == os.getpid()
    except (OSError, ValueError, TypeError):
        return False
