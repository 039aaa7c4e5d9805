"""Route runs in child processes: the parent decides and watches; each route run is a child
`python -m tools.collect run --spec FILE` (a policy's: `python -m tools.evaluate route --spec FILE`) in its own
process group, writing its stdout and stderr to the run's attempt log. FILE is the run's spec that the collection
wrote when it planned the run (tools.collect.base.spec.RunSpec at Layout.run_spec): the child drives it as planned.
All state lives on disk (results, heartbeats, attempt logs), so a killed collector loses nothing: run it again. A
local collection runs N of them at once; a SLURM array task runs its share one after the other. In a world whose
runs fork from a loaded town (World.forks_from_town: the embedded world) the child runs that same command forked
from the town's zygote (tools.collect.runner.zygote), which loaded the town once for all the worker's runs there;
the runs are ordered by town, and at most one zygote per worker is kept.

The parent claims a run (tools.dataset.claims.claim_run: the run's lock, then the attempt) and hands
the locked file to the child, which holds it while it runs: no other collector or SLURM task runs the
same route run meanwhile. A child dies with its collector (PR_SET_PDEATHSIG), so a rerun after a kill -9
of the collector never finds more simulators than --workers.

With --servers-per-gpu (CARLA servers on a machine's GPUs) every worker is a slot with a GPU of its own
(`gpu_slots`): the child of slot i renders on GPU slots[i] (tools.collect.carla.server.GPU_ENV), and reserves its
own ports when its server starts.

A full disk stops the collection, counting no attempt: an attempt stopped by it (exit status EXIT_DISK_FULL:
the child uncounted its attempt) is measured and discarded here (jobs.take_back), no new run starts, the
running ones end, and the collector exits with the one line (tools.core.errors.DiskFull).
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tools.collect.base.config import ROUTE_RUN_COMMAND, ROUTE_RUN_PRELOAD, CollectSettings
from tools.collect.base.processes import die_with_parent, signal_group
from tools.collect.base.routes import town_file
from tools.collect.carla.server import GPU_ENV
from tools.collect.runner.jobs import Job, route_run_bytes, take_back
from tools.collect.runner.world import world_for
from tools.collect.runner.zygote import RouteRun, Zygote
from tools.core import files
from tools.core.errors import EXIT_DISK_FULL, DiskFull, disk_full, is_disk_full
from tools.dataset.attempts import crash_message, record_attempt
from tools.dataset.claims import LOCK_FD_ENV, RunClaim, attempts, claim_run, exclusive
from tools.dataset.heartbeats import HEARTBEAT_STALE_S, HeartbeatWatch
from tools.dataset.layout import Layout, RunKey
from tools.dataset.results import (
    FAILED_SIMULATION,
    RouteRecord,
    RunState,
    is_failed,
    read_status,
    run_state,
    run_states,
    write_result,
)

POLL_S = 0.2  # how often the parent looks at its children
TERM_GRACE_S = 10.0  # SIGTERM to a child's process group, then SIGKILL after this long


@dataclass
class Worker:
    job: Job
    attempt: int
    log: Path
    proc: subprocess.Popen | RouteRun
    started: float
    beat: HeartbeatWatch
    slot: int = 0  # which worker slot it runs in (its GPU, with --servers-per-gpu)


def _signal(proc: subprocess.Popen | RouteRun, sig: int) -> None:
    """Signal a route run's process group, a child we started or one a zygote forked."""
    if isinstance(proc, RouteRun):
        proc.signal_group(sig)
    else:
        signal_group(proc, sig)


# ----------------------------------------------------------------------------- the collector


def gpu_slots(gpus: list[str], per_gpu: int) -> list[str]:
    """One GPU per worker slot, `per_gpu` slots a GPU, the GPUs taken in turn (a collection with fewer runs left
    than slots still spreads them over every GPU)."""
    return [gpus[i % len(gpus)] for i in range(len(gpus) * per_gpu)]


class Collector:
    """Runs jobs in at most `workers` child processes, retrying failed runs until `max_attempts` (unless
    `retry` is off: a SLURM task leaves retries to the monitor's next wave), each run driven as its spec says
    (written when the collection was planned; `settings` are the collection's); `py123d`: each run also writes its
    Py123D log (run --py123d); `gpus`: one GPU per worker slot (`gpu_slots`; --servers-per-gpu), which then sets the
    number of workers."""

    def __init__(self, layout: Layout, workers: int, max_attempts: int, settings: CollectSettings, retry: bool = True,
                 progress: bool = True, py123d: bool = False, gpus: list[str] | None = None):
        self.layout = layout
        self.py123d = py123d
        self.gpus = list(gpus) if gpus else None
        self.workers = len(self.gpus) if self.gpus else workers
        self.max_attempts = max_attempts
        self.settings = settings
        self.retry = retry
        self.progress = progress
        self.running: list[Worker] = []
        self.signals: list[int] = []
        self.finished: list[Job] = []
        self.failed: list[Job] = []
        self.skipped = 0
        self.busy: list[RunKey] = []
        self.damaged: list[RunKey] = []
        self.given_up: list[RunKey] = []
        self.retried = 0
        self.frames = 0
        self.disk_full: DiskFull | None = None  # the first full disk met: no run starts after it
        # Route runs forked from a zygote per town that loaded the town once (tools.collect.runner.zygote), where the
        # world's runs do (the embedded world's); at most one per worker, the least recently used idle one ended first.
        self.zygotes: dict[Path, Zygote] = {}
        self.use_zygotes = world_for(settings.world).forks_from_town

    # --------------------------------------------------------------- one attempt
    def _command(self, job: Job, attempt: int) -> list[str]:
        module, command = ROUTE_RUN_COMMAND[self.settings.agent]
        return [
            sys.executable, "-m", module, command,
            "--spec", str(self.layout.run_spec(job.key)), "--root", str(self.layout.root),
            "--attempt", str(attempt), *(["--py123d"] if self.py123d else []),
        ]

    def _launch(self, job: Job) -> str:
        """Start an attempt at a job; or say why not: "finished", "running", "damaged", "given-up"."""
        claim = claim_run(self.layout, job.key, self.max_attempts)
        if not isinstance(claim, RunClaim):
            return {RunState.FINISHED: "finished", RunState.RUNNING: "running", RunState.DAMAGED: "damaged",
                    RunState.FAILED: "given-up"}[claim]
        slot = min(set(range(self.workers)) - {w.slot for w in self.running})
        try:
            cmd = self._command(job, claim.attempt)
            env = dict(os.environ, PYTHONUNBUFFERED="1", **{LOCK_FD_ENV: str(claim.fd)})
            where = ""
            if self.gpus:
                env[GPU_ENV] = self.gpus[slot]
                where = f", worker {slot} on GPU {self.gpus[slot]}"
            with open(files.open_for_writing(claim.log, os.O_WRONLY | os.O_APPEND), "ab") as out:
                out.write(f"# collect: attempt {claim.attempt} of at most {self.max_attempts}{where}\n"
                          f"$ {shlex.join(cmd)}\n".encode())
                out.flush()
                if self.use_zygotes:  # the same command, forked from the town's zygote
                    proc = self._zygote(town_file(job.route_file, job.route, job.towns)).spawn(
                        cmd[2:], claim.log, claim.fd)
                else:
                    # Own session and process group: a Ctrl-C in the terminal reaches only us, and we end a
                    # child with everything it started by signalling its group. The child inherits the run's
                    # lock (pass_fds) and dies with us (die_with_parent).
                    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True, pass_fds=(claim.fd,),
                                            preexec_fn=functools.partial(die_with_parent, os.getpid()))
        except OSError as e:
            if not is_disk_full(e):
                raise
            claim.log.unlink(missing_ok=True)  # under the run's lock: the attempt never started, counts nothing
            self.disk_full = self.disk_full or disk_full(claim.log.parent, "a route run", route_run_bytes(self.layout))
            return "disk-full"
        finally:
            claim.release()  # our copy: from now on the child alone holds the lock
        self.running.append(Worker(job, claim.attempt, claim.log, proc, time.time(),
                                   HeartbeatWatch(self.layout.heartbeat(job.key)), slot))
        return "started"

    def _zygote(self, town: Path) -> Zygote:
        """The zygote of `town`, started when there is none (a dead one is replaced); beyond one per worker, the
        least recently used idle one is ended first."""
        z = self.zygotes.pop(town, None)
        if z is None or z.dead:
            idle = [t for t, other in self.zygotes.items() if not other.busy]
            while len(self.zygotes) >= self.workers and idle:
                self.zygotes.pop(idle.pop(0)).close()
            z = Zygote(town, self.layout.root, ROUTE_RUN_PRELOAD.get(self.settings.agent, ()))
        self.zygotes[town] = z  # the most recently used last
        return z

    def _watchdog(self, w: Worker) -> None:
        """Kill a child whose heartbeat of this attempt went stale: it hangs, and would hold a slot forever. Stale:
        unchanged for HEARTBEAT_STALE_S on our own clock (heartbeats.HeartbeatWatch), not by a file server's mtime."""
        if w.beat.stale():
            tqdm.write(f"collect: {w.job.key}: no heartbeat for {HEARTBEAT_STALE_S:.0f} s, killing attempt {w.attempt}",
                       file=sys.stderr)
            _signal(w.proc, signal.SIGKILL)

    def _reap(self, w: Worker, rc: int, queue: deque[Job], bar: tqdm) -> None:
        key = w.job.key
        result = self.layout.result_path(key)
        if rc == EXIT_DISK_FULL:  # the child uncounted its attempt: measure and discard what it wrote
            with exclusive(self.layout, key) as mine:
                if mine and not result.exists():
                    error = take_back(self.layout, key)
                else:
                    error = disk_full(self.layout.data, "a route run", route_run_bytes(self.layout))
            self.disk_full = self.disk_full or error
            if not result.exists():
                return
        if not result.exists() and run_state(self.layout, key) is not RunState.RUNNING:
            how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
            write_result(self.layout, key, RouteRecord(w.job.route.id, FAILED_SIMULATION))
            record_attempt(self.layout, key, w.attempt, FAILED_SIMULATION,
                           *crash_message(w.log, f"the route run's process ended ({how})"))
            tqdm.write(f"collect: {key}: attempt {w.attempt} crashed ({how}), log: {w.log}", file=sys.stderr)
        state = run_state(self.layout, key)
        if state is RunState.FINISHED:
            self.finished.append(w.job)
            self.frames += len(self.layout.frame_paths(key))
            self._advance(bar)
        elif is_failed(state) and self.retry and attempts(self.layout, key) < self.max_attempts:
            self.retried += 1
            queue.append(w.job)
            tqdm.write(f"collect: {key}: attempt {w.attempt} failed ({read_status(result) or state}); "
                       "will retry", file=sys.stderr)
        elif is_failed(state):
            self.failed.append(w.job)
            self._advance(bar)
            left = "left failed" if self.retry else "the next wave retries it while attempts remain"
            tqdm.write(f"collect: {key}: failed ({read_status(result) or state}) in attempt {w.attempt}, "
                       f"{left}; log: {w.log}", file=sys.stderr)
        else:  # running again or pending: someone else took it over meanwhile
            self.busy.append(key)
            self._advance(bar)

    def _advance(self, bar: tqdm) -> None:
        bar.set_postfix(finished=len(self.finished), failed=len(self.failed), refresh=False)
        bar.update(1)

    # --------------------------------------------------------------- the loop
    def run(self, jobs: list[Job]) -> None:
        queue: deque[Job] = deque()
        if self.use_zygotes:  # a town's runs one after the other: its zygote loads the town once for them
            jobs = sorted(jobs, key=lambda j: str(town_file(j.route_file, j.route, j.towns)))
        states = run_states(self.layout, [job.key for job in jobs])  # one heartbeat watch for all (liveness)
        for job in jobs:
            state = states[job.key]
            if state is RunState.FINISHED:
                self.skipped += 1
            elif state is RunState.RUNNING:
                self.busy.append(job.key)
            elif state is RunState.DAMAGED:
                self.damaged.append(job.key)
            elif is_failed(state) and attempts(self.layout, job.key) >= self.max_attempts:
                self.given_up.append(job.key)
            else:
                queue.append(job)
        if self.busy:
            shown = ", ".join(str(k) for k in self.busy[:3]) + (", ..." if len(self.busy) > 3 else "")
            print(f"collect: skipping {len(self.busy)} route runs in progress elsewhere ({shown})", file=sys.stderr)
        for key in self.damaged:
            print(f"collect: {key}: damaged result file {self.layout.result_path(key)}, left alone: look at it, "
                  "then delete it to have the run redone", file=sys.stderr)

        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        tty = sys.stderr.isatty()  # in a SLURM log, a bar line every 30 s rather than at every change
        bar = tqdm(total=len(queue), unit="run", desc="collect", file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.5 if tty else 30.0, disable=not queue or not self.progress)
        bar.set_postfix(finished=0, failed=0, refresh=False)
        try:
            last_refresh = 0.0
            while (self.running or (queue and not self.disk_full)) and not self.signals:
                while queue and len(self.running) < self.workers and not self.signals and not self.disk_full:
                    why = self._launch(job := queue.popleft())
                    if why == "finished":  # by someone else meanwhile
                        self.skipped += 1
                        self._advance(bar)
                    elif why == "running":
                        self.busy.append(job.key)
                        self._advance(bar)
                    elif why == "damaged":
                        self.damaged.append(job.key)
                        self._advance(bar)
                    elif why == "given-up":
                        self.given_up.append(job.key)
                        self._advance(bar)
                reaped = False
                for w in list(self.running):
                    rc = w.proc.poll()
                    if rc is None:
                        self._watchdog(w)
                        continue
                    self.running.remove(w)
                    self._reap(w, rc, queue, bar)
                    reaped = True
                if tty and time.monotonic() - last_refresh > 1.0:  # keep the elapsed time moving
                    bar.refresh()
                    last_refresh = time.monotonic()
                if not reaped:  # a slot just freed is filled at once: no idle gap between a worker's runs
                    time.sleep(POLL_S)
        finally:
            bar.close()
            if self.running:
                self._stop_children()
            for z in self.zygotes.values():
                z.close()
            self.zygotes.clear()
            for s, h in handlers.items():
                signal.signal(s, h)
        if self.disk_full is not None and not self.signals:
            raise self.disk_full
        if self.signals:
            name = signal.Signals(self.signals[0]).name
            print(f"collect: interrupted by {name}: {len(self.finished)} route runs finished before; "
                  "the stopped ones are left unfinished (their attempt counts). Run the same command "
                  "again to go on.", file=sys.stderr)
            raise SystemExit(128 + self.signals[0])

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only note it: the loop stops the children, so nothing is started half way through a launch.
        self.signals.append(signum)

    def _stop_children(self) -> None:
        """End our own children by their process groups: SIGTERM, then SIGKILL after a grace period."""
        for w in self.running:
            _signal(w.proc, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        for w in self.running:
            while w.proc.poll() is None and time.monotonic() < deadline and len(self.signals) < 2:
                time.sleep(0.05)
            if w.proc.poll() is None:  # too slow, or a second Ctrl-C (a run its zygote has not forked yet: the
                _signal(w.proc, signal.SIGKILL)  # zygote's end below ends it)
                if not isinstance(w.proc, RouteRun):
                    w.proc.wait()
        self.running.clear()
