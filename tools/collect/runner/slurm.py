"""Collection on a SLURM cluster: route runs in waves of job arrays, a restartable monitor, resubmission.

    ROOT/slurm/waves/wave-<NNNN>.json   one wave: its route runs, how they map to array tasks, its arrays
    ROOT/logs/slurm/<array>_<task>.log  every array task's output (sbatch %A_%a, appended)

The wave file is tools.collect.runner.waves; an array task's side, tools.collect.runner.slurm_task (each route run
driven as the spec the collection wrote when it planned it says: tools.collect.base.spec); the options,
tools.collect.runner.slurm_options. Here: the scheduler and the monitor.

The monitor (`collect_slurm`) writes the route runs still to do into a wave file, then submits it as
job arrays of slurm/collect.sbatch (`--array=0-N%K`), split at the cluster's MaxArraySize: one `sbatch`
per array, never one per route. An array is written into the wave file, under a job name of its own,
*before* it is submitted and gets its job id after: a monitor killed in between finds it by name and
adopts it, so nothing is submitted twice. A task runs its route runs through bin/collect-task, which
claims each one like a local collector (tools.dataset.claims.claim_run) and watches its heartbeat.

Every poll (at most one every `--poll` seconds) asks the scheduler once: `sacct` where the cluster keeps
accounting, else `squeue` and `scontrol`. The truth about a route run is on disk (run_state); the
scheduler says which tasks are still queued or running and how the others ended. A run whose task ended
without a result (TIMEOUT, NODE_FAIL, CANCELLED, ...) gets `Failed - Simulation crashed`; failed runs
with attempts left go into a new wave once no task of the older ones is still queued.

A scheduler that does not answer (slurmctld down or restarting: tools.core.slurm.SchedulerUnavailable)
says nothing about any task: that poll is dropped, nothing is taken as ended and nothing is submitted, and
the monitor asks again after `--poll` seconds. A task the scheduler no longer remembers (no accounting,
ended more than MinJobAge ago) whose route runs all have their result is counted COMPLETED, never UNKNOWN.

A full disk stops the monitor with one line (tools.core.errors.DiskFull) instead of a new wave: when a task
of the last wave was stopped by it (a run's logs/<S>/<run>/disk-full.log written since the wave was submitted
and since this monitor started), or when the root's free space is below a route run's size.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.collect.inspect.tables import crash_lines
from tools.collect.runner.jobs import duration, route_run_bytes
from tools.collect.runner.slurm_options import SlurmOptions
from tools.collect.runner.waves import WAVE_NAME, Wave, load_waves, run_key_of, task_log_dir, waves_dir
from tools.core.errors import ToolError, disk_full, free_bytes
from tools.core.slurm import INVALID_JOB, SchedulerUnavailable, SlurmCommands, scontrol_jobs, state_rows
from tools.dataset.attempts import record_attempt
from tools.dataset.claims import attempts, exclusive
from tools.dataset.layout import Layout, RunKey
from tools.dataset.manifest import dataset_id
from tools.dataset.results import (
    FAILED_SIMULATION,
    RouteRecord,
    RunState,
    held_run_state,
    run_state,
    run_states,
    write_result,
)

REPO = Path(__file__).resolve().parents[3]
SBATCH_SCRIPT = REPO / "slurm" / "collect.sbatch"
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's default when `scontrol show config` does not say
#: A task the scheduler does not list is taken as ended only when its array is older than this (seconds):
#: accounting may not know a new array yet; without accounting, scontrol forgets ended jobs after MinJobAge.
FORGET_AFTER_S = 600.0

#: Job states of an ended task, as sacct and scontrol name them.
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "CANCELLED", "BOOT_FAIL",
         "DEADLINE")
#: Ended states that are the cluster's fault, not the route's: reported apart.
INFRASTRUCTURE = ("NODE_FAIL", "PREEMPTED", "BOOT_FAIL")


# ----------------------------------------------------------------------------- the scheduler


class Scheduler(SlurmCommands):
    """What the monitor asks of SLURM (tools.core.slurm runs and counts the commands)."""

    def __init__(self, env: dict[str, str] | None = None):
        super().__init__("leave --slurm out to collect locally", env)

    def max_array_size(self) -> int:
        out = self.query("scontrol", "show", "config").stdout
        m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
        return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE

    def find_by_name(self, name: str, accounting: bool) -> str | None:
        """The job id of a job array submitted under `name` (one a killed monitor did not record)."""
        out = self.query("squeue", "-h", "-r", f"--name={name}", "-o", "%F").stdout.split()
        if out:
            return out[0]
        if not accounting:  # an array that already ended: its runs' states on disk tell the rest
            return None
        out = self.query("sacct", "-n", "-X", f"--name={name}", "-o", "JobID", "-S", "now-7days").stdout.split()
        ids = [o.split("_")[0] for o in out if o.split("_")[0].isdigit()]
        return ids[0] if ids else None

    def task_states(self, job_ids: list[str], accounting: bool) -> dict[tuple[str, int], str]:
        """(array job id, task id) -> state of every task the scheduler still knows of. A scheduler that does
        not answer raises SchedulerUnavailable: an empty answer always means "none of them is known"."""
        if not job_ids:
            return {}
        states: dict[tuple[str, int], str] = {}
        if accounting:
            self._add(states, self.query("sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o",
                                         "JobID,State").stdout)
            if not {array for array, _ in states} >= set(job_ids):  # slurmdbd not told of a new array yet
                self._add(states, self._squeue(job_ids))
            return states
        self._add(states, self._squeue(job_ids))
        wanted = set(job_ids)
        for fields in scontrol_jobs(self.query("scontrol", "-o", "show", "job").stdout):
            array, task = fields.get("ArrayJobId"), fields.get("ArrayTaskId", "")
            if array in wanted and task.isdigit():
                states.setdefault((array, int(task)), fields.get("JobState", "UNKNOWN"))
        return states

    def _squeue(self, job_ids: list[str]) -> str:
        return self.query("squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i|%T", benign=INVALID_JOB).stdout

    @staticmethod
    def _add(states: dict[tuple[str, int], str], text: str) -> None:
        """The array tasks of sacct's or squeue's "JobID|State" lines (tools.core.slurm.state_rows), pending
        ones not yet split (12_[3-9%2]) each on its own."""
        for job, tasks, state in state_rows(text):
            for task in tasks if job.isdigit() and tasks is not None else []:
                states[(job, task)] = state or "UNKNOWN"

    def set_throttle(self, job_id: str, throttle: int) -> None:
        self.run("scontrol", "update", f"JobId={job_id}", f"ArrayTaskThrottle={throttle}")


# ----------------------------------------------------------------------------- the monitor


@dataclass
class Poll:
    """What one look at the scheduler and the disk found."""

    live: set[RunKey] = field(default_factory=set)  # runs of tasks still queued or running
    queued_tasks: int = 0
    running_tasks: int = 0
    ended: Counter = field(default_factory=Counter)  # task state -> tasks
    infrastructure: Counter = field(default_factory=Counter)  # tasks ended by a node failure, a preemption


class Monitor:
    """Submits waves and watches them; every piece of state it needs is on disk or in the scheduler."""

    def __init__(self, layout: Layout, options: SlurmOptions, scheduler: Scheduler, settings: dict[str, Any],
                 max_attempts: int, log=None, py123d: bool = False):
        self.layout = layout
        self.o = options
        self.s = scheduler
        self.settings = settings
        self.py123d = py123d
        self.max_attempts = max_attempts
        self.log = log or (lambda message: print(f"collect: {message}", file=sys.stderr, flush=True))
        self.prefix = f"drivekit-{dataset_id(layout)[:8]}"
        self._max_array: int | None = None
        self.started_at = time.time()  # (run() sets it again)

    @property
    def accounting(self) -> bool:
        return self.s.accounting

    @property
    def max_array(self) -> int:
        if self._max_array is None:
            self._max_array = self.s.max_array_size()
        return self._max_array

    # --------------------------------------------------------------- submitting
    def new_wave(self, entries: list[dict[str, Any]]) -> Wave:
        waves = load_waves(self.layout)
        n = max((w.wave for w in waves), default=0) + 1
        wave = Wave(waves_dir(self.layout) / WAVE_NAME.format(wave=n), n, entries, self.o.runs_per_task,
                    self.max_attempts, self.settings, self.o.throttle, py123d=self.py123d,
                    servers_per_gpu=self.o.servers_per_gpu)
        step = self.max_array
        for i, first in enumerate(range(0, wave.n_tasks, step)):
            wave.arrays.append({"name": f"{self.prefix}-w{n:04d}-{i}", "first": first,
                                "count": min(step, wave.n_tasks - first), "job_id": None, "argv": None})
        wave.save()  # the arrays are on disk, named, before any is submitted
        return wave

    def sbatch_argv(self, wave: Wave, array: dict[str, Any]) -> list[str]:
        logs = task_log_dir(self.layout)
        return ["sbatch", "--parsable", f"--array=0-{array['count'] - 1}%{wave.throttle}",
                f"--job-name={array['name']}", f"--output={logs}/%A_%a.log", "--open-mode=append",
                f"--export=ALL,DRIVEKIT_HOME={REPO},PYTHONUNBUFFERED=1", *self.o.resources(),
                str(SBATCH_SCRIPT), str(wave.path), str(array["first"])]

    def submit(self, wave: Wave, fresh: bool = False) -> None:
        """Submit the arrays of a wave not submitted yet, adopting one a killed monitor submitted but did not
        record (`fresh`: the wave was written by this monitor a moment ago, nobody can have submitted it)."""
        task_log_dir(self.layout).mkdir(parents=True, exist_ok=True)
        for array in wave.arrays:
            if array["job_id"]:
                continue
            found = None if fresh else self.s.find_by_name(array["name"], self.accounting)
            array["submitted"] = time.time()
            if found:
                self.log(f"wave {wave.wave}: adopted array {found} ({array['name']}), submitted by an earlier monitor")
                array["job_id"] = found
            else:
                argv = self.sbatch_argv(wave, array)
                array["job_id"] = self.s.submit(argv)
                array["argv"] = argv
                self.log(f"wave {wave.wave}: submitted array {array['job_id']} of {array['count']} tasks "
                         f"(at most {wave.throttle} at once)")
            wave.save()

    def apply_throttle(self, waves: list[Wave], live_arrays: set[str]) -> None:
        for wave in waves:
            if wave.throttle == self.o.throttle:
                continue
            for array in wave.arrays:
                if array["job_id"] in live_arrays:
                    self.s.set_throttle(array["job_id"], self.o.throttle)
                    self.log(f"array {array['job_id']}: throttle {wave.throttle} -> {self.o.throttle}")
            wave.throttle = self.o.throttle
            wave.save()

    # --------------------------------------------------------------- looking
    def poll(self, waves: list[Wave], act: bool = True) -> Poll:
        """One scheduler query: which tasks are live; how each ended task ended (recorded in its wave file
        the first time it is seen, so counts survive the scheduler forgetting it); runs whose task ended
        without a result are closed as crashed. `act=False` (progress, clean-failed) only looks."""
        ids = [a["job_id"] for w in waves for a in w.arrays if a["job_id"]]
        states = self.s.task_states(ids, self.accounting)
        out = Poll()
        ended_runs: list[tuple[RunKey, dict[str, Any], str]] = []
        for wave in waves:
            changed = False
            for array in wave.arrays:
                if not array["job_id"]:  # written, not yet submitted: its runs are spoken for
                    for t in range(array["count"]):
                        out.live.update(run_key_of(r) for r in wave.task_runs(array["first"] + t))
                    continue
                record = array.setdefault("ended", {})
                for t in range(array["count"]):
                    state = states.get((array["job_id"], t))
                    runs = wave.task_runs(array["first"] + t)
                    if state is None and time.time() - array.get("submitted", 0) < FORGET_AFTER_S:
                        state = "PENDING"  # too new for the scheduler to have forgotten it: not yet listed
                    if state is not None and state not in ENDED:  # queued, running, or on its way
                        out.live.update(run_key_of(r) for r in runs)
                        out.running_tasks += state == "RUNNING"
                        out.queued_tasks += state != "RUNNING"
                        continue
                    # Ended: as the scheduler says, or long enough ago that it forgot (no accounting)
                    if str(t) not in record:  # first seen ended: its runs may need closing
                        record[str(t)] = state or self._forgotten(runs)
                        changed = True
                        ended_runs += [(run_key_of(r), r, record[str(t)]) for r in runs]
                    out.ended[record[str(t)]] += 1
            if changed and act:
                wave.save()
        out.infrastructure = Counter({s: n for s, n in out.ended.items() if s in INFRASTRUCTURE})
        if act and ended_runs:
            states = run_states(self.layout, [key for key, _, _ in ended_runs])  # one heartbeat watch for all
            for key, entry, state in ended_runs:
                if key not in out.live and states[key] is RunState.CRASHED:  # (not queued again meanwhile)
                    self._close_crashed(key, entry, state)
        return out

    def _forgotten(self, runs: list[dict[str, Any]]) -> str:
        """How a task the scheduler no longer remembers ended, as far as the disk tells: COMPLETED when every
        one of its route runs has its result (finished or failed: the task did its work), else UNKNOWN."""
        done = all(run_state(self.layout, run_key_of(r)) in (RunState.FINISHED, RunState.FAILED) for r in runs)
        return "COMPLETED" if done else "UNKNOWN"

    def _close_crashed(self, key: RunKey, entry: dict[str, Any], state: str) -> None:
        """A run whose task ended without its result (killed by a time limit, a node failure, scancel):
        write `Failed - Simulation crashed` under the run's lock, so that the one definition holds."""
        if run_state(self.layout, key) is not RunState.CRASHED:
            return
        with exclusive(self.layout, key) as mine:
            if not mine or held_run_state(self.layout, key) is not RunState.CRASHED:
                return
            write_result(self.layout, key, RouteRecord(str(entry["route_id"]), FAILED_SIMULATION))
            record_attempt(self.layout, key, max(attempts(self.layout, key), 1), FAILED_SIMULATION,
                           f"its SLURM array task ended {state} without a result")
        self.log(f"{key}: its task ended {state} without a result: recorded as {FAILED_SIMULATION}")

    def look(self, planned: list[dict[str, Any]], live: set[RunKey]) -> tuple[list[dict[str, Any]], Counter]:
        """One pass over the planned runs' states on disk: the runs that need a task (not finished, not in a
        live task, attempts left) and the counts for the summary line."""
        redo, counts = [], Counter()
        states = run_states(self.layout, [run_key_of(entry) for entry in planned])  # one heartbeat watch for all
        for entry in planned:
            key = run_key_of(entry)
            state = states[key]
            if state is RunState.FINISHED:
                counts["finished"] += 1
            elif state is RunState.DAMAGED:
                counts["damaged"] += 1
            elif key in live or state is RunState.RUNNING:
                counts["in the queue"] += 1
            elif attempts(self.layout, key) >= self.max_attempts:
                counts["failed"] += 1
            else:  # failed or crashed with attempts left, or never started
                counts["to retry"] += 1
                redo.append(entry)
        return redo, counts

    def check_space(self, redo: list[dict[str, Any]], waves: list[Wave]) -> None:
        """DiskFull instead of a wave that could not write: a run to redo was stopped by a full disk since the
        last wave was submitted (and since this monitor started: a rerun after freeing space tries again), or
        the root has less free space than a route run takes."""
        since = max([self.started_at, *(a.get("submitted", 0) for w in waves for a in w.arrays)])
        stopped = 0
        for entry in redo:
            try:
                stopped += self.layout.disk_full_log(run_key_of(entry)).stat().st_mtime >= since
            except OSError:
                continue
        need = route_run_bytes(self.layout)
        free = free_bytes(self.layout.root)
        if stopped or (need is not None and free is not None and free < need[0]):
            what = f"a route run ({stopped} stopped by it in the last wave, not counted)" if stopped else "a route run"
            raise disk_full(self.layout.data, what, need)

    # --------------------------------------------------------------- the loop
    def run(self, planned: list[dict[str, Any]]) -> dict[str, Any]:
        """Submit what is to do and (with watch) poll until every planned run ended. Returns the summary."""
        started = time.monotonic()
        self.started_at = time.time()
        silent_since: float | None = None  # when the scheduler stopped answering
        while True:
            try:
                outcome = self._step(planned, started)
            except SchedulerUnavailable as e:
                if not self.o.watch:
                    raise
                silent_since = silent_since or time.monotonic()
                self.log(f"the scheduler does not answer ({e}) for {duration(time.monotonic() - silent_since)}: "
                         f"nothing is taken as ended and nothing submitted; asking again in {self.o.poll:g} s")
                time.sleep(self.o.poll)
                continue
            if silent_since is not None:
                self.log(f"the scheduler answers again after {duration(time.monotonic() - silent_since)}")
                silent_since = None
            if outcome is not None:
                return outcome
            time.sleep(self.o.poll)

    def _step(self, planned: list[dict[str, Any]], started: float) -> dict[str, Any] | None:
        """One round: submit what a killed monitor left unsubmitted, poll, submit the next wave when the queue has
        drained, log a line. Returns the summary when done (or not watching), else None."""
        waves = load_waves(self.layout)
        for wave in waves:  # arrays a killed monitor wrote but did not (knowingly) submit
            if any(not a["job_id"] for a in wave.arrays):
                self.submit(wave)
        p = self.poll(waves)
        live_arrays = {a["job_id"] for w in waves for a in w.arrays
                       if any(run_key_of(r) in p.live for r in w.runs)}
        self.apply_throttle(waves, live_arrays)
        redo, counts = self.look(planned, p.live)
        if redo and p.queued_tasks == 0:  # the queue has drained: the next wave, in one piece
            self.check_space(redo, waves)
            wave = self.new_wave(redo)
            self.log(f"wave {wave.wave}: {len(redo)} route runs in {wave.n_tasks} tasks")
            self.submit(wave, fresh=True)
            p.live.update(run_key_of(e) for e in redo)
            p.queued_tasks += wave.n_tasks
            counts["in the queue"] += len(redo)
            counts["to retry"] -= len(redo)
            redo = []
        counts = +counts
        self.log(f"{duration(time.monotonic() - started)}: {p.queued_tasks} tasks queued, "
                 f"{p.running_tasks} running; " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                 + (f"; tasks ended: {_states(p.ended)}" if p.ended else ""))
        done = not p.live and not redo
        if done or not self.o.watch:
            states = run_states(self.layout, [run_key_of(e) for e in planned])
            return {"counts": dict(counts), "done": done, "tasks_ended": dict(p.ended),
                    "infrastructure": dict(p.infrastructure), "calls": dict(self.s.calls),
                    "seconds": time.monotonic() - started, "crashes": crash_lines(self.layout, states)}
        return None


def _states(c: Counter) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(c.items()))


def live_runs(layout: Layout, scheduler: Scheduler | None = None) -> Poll | None:
    """What the scheduler says of a root's tasks (runs in queued or running tasks, task counts), for
    progress and clean-failed: one query. None when the root has no SLURM state or no scheduler is here."""
    waves = load_waves(layout)
    if not waves:
        return None
    s = scheduler or Scheduler()
    try:
        s.require()
    except ToolError:
        return None
    return Monitor(layout, SlurmOptions(), s, {}, 0, log=lambda message: None).poll(waves, act=False)


def collect_slurm(layout: Layout, jobs: list, options: SlurmOptions, settings: dict[str, Any], max_attempts: int,
                  scheduler: Scheduler | None = None, py123d: bool = False) -> dict[str, Any]:
    """Plan, submit and (with options.watch) monitor the route runs `jobs` (tools.collect.runner.jobs.Job); `py123d`:
    each task's runs also write their Py123D logs (run --py123d)."""
    s = scheduler or Scheduler()
    s.require()
    if options.partition:
        s.check_partition(options.partition)
    planned = [{"key": str(j.key), "route": str(j.route_file.resolve()), "route_id": j.route.id,
                "route_digest": j.route.digest, "repetition": j.repetition, "towns": str(j.towns)} for j in jobs]
    monitor = Monitor(layout, options, s, settings, max_attempts, py123d=py123d)
    return monitor.run(planned)


def summary_line(layout: Layout, outcome: dict[str, Any], options: SlurmOptions, seconds: float) -> str:
    """The closing summary of a SLURM collection, like the local one."""
    counts = outcome["counts"]
    parts = [f"collect: {counts.get('finished', 0)} route runs finished, {counts.get('failed', 0)} failed after "
             "their last attempt"]
    for name in ("in the queue", "to retry", "damaged"):
        if counts.get(name):
            parts.append(f", {counts[name]} {name}")
    if outcome["tasks_ended"]:
        parts.append(f"; array tasks ended: {_states(Counter(outcome['tasks_ended']))}")
    if outcome["infrastructure"]:
        parts.append(f" (infrastructure failures, not the routes': {_states(Counter(outcome['infrastructure']))}"
                     " route runs)")
    calls = outcome["calls"]
    parts.append(f". Scheduler calls: {', '.join(f'{n} {c}' for c, n in sorted(calls.items()))}"
                 f" in {duration(seconds)}.")
    if not outcome["done"]:
        parts.append(f" Not watching (--no-watch): run the same command again to resubmit what failed; "
                     f"bin/progress {layout.root} shows the queue.")
    else:
        parts.append(f" Data in {layout.root}/data; see bin/progress {layout.root}.")
    return "\n".join(["".join(parts), *outcome.get("crashes", [])])
