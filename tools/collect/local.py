"""Local collection: every route file under a folder times K repetitions, in N worker processes (each drives
in the embedded world, or with --world=carla in a CARLA server of its own under the leaderboard evaluator).

The parent decides and watches; each route run is a child `python -m tools.collect run` in its own
process group, writing its stdout and stderr to the run's attempt log. All state lives on disk
(results, heartbeats, attempt logs), so a killed collector loses nothing: run it again.

The parent claims a run (tools.dataset.results.claim_run: the run's lock, then the attempt) and hands
the locked file to the child, which holds it while it runs: no other collector or SLURM task runs the
same route run meanwhile. A child dies with its collector (PR_SET_PDEATHSIG), so a rerun after a kill -9
of the collector never finds more simulators than --workers.
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

from tools.collect.carla_server import die_with_parent
from tools.collect.config import CollectSettings
from tools.collect.routes import Route, check_routes, find_towns_dir, read_routes
from tools.dataset import cli
from tools.dataset.errors import ToolError
from tools.dataset.layout import Layout, RunKey, check_root_writable, resolve_root
from tools.dataset.manifest import read_manifest, update_manifest
from tools.dataset.results import (
    FAILED_SIMULATION,
    HEARTBEAT_STALE_S,
    LOCK_FD_ENV,
    RouteRecord,
    RunClaim,
    RunState,
    attempts,
    claim_run,
    is_failed,
    read_status,
    run_state,
    write_result,
)

POLL_S = 0.2  # how often the parent looks at its children
TERM_GRACE_S = 10.0  # SIGTERM to a child's process group, then SIGKILL after this long


@dataclass(frozen=True)
class Job:
    """One route run to do: a route of a route file, one repetition."""

    route_file: Path
    route: Route
    repetition: int
    towns: Path
    key: RunKey


@dataclass
class Worker:
    job: Job
    attempt: int
    log: Path
    proc: subprocess.Popen
    started: float


# ----------------------------------------------------------------------------- arguments


def find_route_files(routes_dir: Path) -> list[Path]:
    """Every *.xml under a folder, recursively, sorted; hidden files and folders and towns/ are skipped."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(routes_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "towns")
        found += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".xml") and not f.startswith(".")]
    return found


def plan(route_files: list[Path], towns: str | None, repetitions: int, default_towns: Path | None = None
         ) -> list[Job]:
    """Parse every route file and check every route against its town; one Job per route and repetition."""
    towns_given = None
    if towns is not None and str(towns) != "":
        towns_given = Path(str(towns)).expanduser().absolute()
        if not towns_given.is_dir():
            raise ToolError(f"--towns {towns_given}: no such folder; give the folder of OpenDRIVE towns (*.xodr)")
    groups: dict[Path, list[tuple[Path, Route]]] = {}
    jobs: list[Job] = []
    owner: dict[RunKey, Path] = {}
    for path in route_files:
        routes = read_routes(path)
        if not routes:
            raise ToolError(f"{path}: no <route> in this file")
        towns_dir = find_towns_dir(path, None if towns_given is None else str(towns_given), default_towns).absolute()
        for route in routes:
            groups.setdefault(towns_dir, []).append((path, route))
            for rep in range(repetitions):
                try:
                    key = RunKey.for_route(route.scenario, path.stem, route.id, rep)
                except ValueError as e:
                    raise ToolError(f"{path}: route {route.id}: {e}") from None
                if key in owner:
                    other = owner[key]
                    where = f"{path} has two routes with id {route.id}" if other == path else (
                        f"{other} and {path} both map to the route run {key}")
                    raise ToolError(f"{where}: route runs are named by file stem, route id and repetition "
                                    "within a scenario type (tools.dataset.layout.RunKey.for_route); rename one "
                                    "file or change a route id")
                owner[key] = path
                jobs.append(Job(path, route, rep, towns_dir, key))
    for towns_dir, entries in groups.items():
        check_routes(entries, towns_dir)
    return jobs


# ----------------------------------------------------------------------------- the collector


def _setting_args(settings: dict[str, Any]) -> list[str]:
    """Settings back into --key=value for the child's fire CLI (repr keeps non-strings typed)."""
    return [f"--{k}={v if isinstance(v, str) else repr(v)}" for k, v in sorted(settings.items())]


def duration(seconds: float) -> str:
    """H:MM:SS."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Collector:
    """Runs jobs in at most `workers` child processes, retrying failed runs until `max_attempts` (unless
    `retry` is off: a SLURM task leaves retries to the monitor's next wave); `py123d`: each run also writes its
    Py123D log (run --py123d)."""

    def __init__(self, layout: Layout, workers: int, max_attempts: int, settings: dict[str, Any], retry: bool = True,
                 progress: bool = True, py123d: bool = False):
        self.layout = layout
        self.py123d = py123d
        self.workers = workers
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

    # --------------------------------------------------------------- one attempt
    def _command(self, job: Job, attempt: int) -> list[str]:
        return [
            sys.executable, "-m", "tools.collect", "run",
            "--route", str(job.route_file), "--root", str(self.layout.root),
            "--repetition", str(job.repetition), f"--route-id={job.route.id}",
            "--towns", str(job.towns), "--attempt", str(attempt),
            *_setting_args(self.settings), *(["--py123d"] if self.py123d else []),
        ]

    def _launch(self, job: Job) -> str:
        """Start an attempt at a job; or say why not: "finished", "running", "damaged", "given-up"."""
        claim = claim_run(self.layout, job.key, self.max_attempts)
        if not isinstance(claim, RunClaim):
            return {RunState.FINISHED: "finished", RunState.RUNNING: "running", RunState.DAMAGED: "damaged",
                    RunState.FAILED: "given-up"}[claim]
        try:
            cmd = self._command(job, claim.attempt)
            env = dict(os.environ, PYTHONUNBUFFERED="1", **{LOCK_FD_ENV: str(claim.fd)})
            with open(claim.log, "ab") as out:
                out.write(f"# collect: attempt {claim.attempt} of at most {self.max_attempts}\n"
                          f"$ {shlex.join(cmd)}\n".encode())
                out.flush()
                # Own session and process group: a Ctrl-C in the terminal reaches only us, and we end a
                # child with everything it started by signalling its group. The child inherits the run's
                # lock (pass_fds) and dies with us (die_with_parent).
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True, pass_fds=(claim.fd,),
                                        preexec_fn=functools.partial(die_with_parent, os.getpid()))
        finally:
            claim.release()  # our copy: from now on the child alone holds the lock
        self.running.append(Worker(job, claim.attempt, claim.log, proc, time.time()))
        return "started"

    def _watchdog(self, w: Worker) -> None:
        """Kill a child whose heartbeat of this attempt went stale: it hangs, and would hold a slot forever."""
        try:
            beat = self.layout.heartbeat(w.job.key).stat().st_mtime
        except OSError:
            return
        if beat > w.started and time.time() - beat > HEARTBEAT_STALE_S:
            tqdm.write(f"collect: {w.job.key}: no heartbeat for {HEARTBEAT_STALE_S:.0f} s, killing attempt {w.attempt}",
                       file=sys.stderr)
            _signal_group(w.proc, signal.SIGKILL)

    def _reap(self, w: Worker, rc: int, queue: deque[Job], bar: tqdm) -> None:
        key = w.job.key
        result = self.layout.result_path(key)
        if not result.exists() and run_state(self.layout, key) is not RunState.RUNNING:
            how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
            write_result(self.layout, key, RouteRecord(w.job.route.id, FAILED_SIMULATION))
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
        for job in jobs:
            state = run_state(self.layout, job.key)
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
            while (queue or self.running) and not self.signals:
                while queue and len(self.running) < self.workers and not self.signals:
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
                for w in list(self.running):
                    rc = w.proc.poll()
                    if rc is None:
                        self._watchdog(w)
                        continue
                    self.running.remove(w)
                    self._reap(w, rc, queue, bar)
                if tty and time.monotonic() - last_refresh > 1.0:  # keep the elapsed time moving
                    bar.refresh()
                    last_refresh = time.monotonic()
                time.sleep(POLL_S)
        finally:
            bar.close()
            if self.running:
                self._stop_children()
            for s, h in handlers.items():
                signal.signal(s, h)
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
            _signal_group(w.proc, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        for w in self.running:
            while w.proc.poll() is None and time.monotonic() < deadline and len(self.signals) < 2:
                time.sleep(0.05)
            if w.proc.poll() is None:  # too slow, or a second Ctrl-C
                _signal_group(w.proc, signal.SIGKILL)
                w.proc.wait()
        self.running.clear()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group of a child we started (its pid is the group id: start_new_session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


# ----------------------------------------------------------------------------- entry


def collect_local(routes_dir: str, root: str | None, towns: str | None, workers: int, repetitions: int,
                  max_attempts: int, settings: dict[str, Any], slurm: Any = None, py123d: bool = False) -> None:
    """Drive every route file under `routes_dir` `repetitions` times in `workers` local processes, or, with
    `slurm` (tools.collect.slurm.SlurmOptions), as SLURM job arrays watched by a monitor."""
    started = time.time()
    if routes_dir is None or str(routes_dir) == "" or isinstance(routes_dir, bool):
        raise ToolError("ROUTES_DIR missing: give the folder that holds the route files (*.xml)")
    routes_path = Path(cli.text(routes_dir, "routes-dir")).expanduser().absolute()
    workers = cli.integer(workers, "workers", 1)
    repetitions = cli.integer(repetitions, "repetitions", 1)
    max_attempts = cli.integer(max_attempts, "max-attempts", 1)
    if not routes_path.exists():
        raise ToolError(f"ROUTES_DIR {routes_path}: no such folder; give the folder that holds the route files")
    if not routes_path.is_dir():
        raise ToolError(f"ROUTES_DIR {routes_path}: not a folder; give the folder that holds the route files "
                        "(for one file: python -m tools.collect run --route FILE)")
    layout = Layout(resolve_root(cli.optional_text(root, "root")))
    check_root_writable(layout.root)

    route_files = find_route_files(routes_path)
    if not route_files:
        raise ToolError(f"ROUTES_DIR {routes_path}: no route files (*.xml) in it or below it; make some with "
                        "python -m tools.collect routes --town FILE --count N --out DIR")
    resolved = CollectSettings.from_flags(settings)  # a typo fails here, not in every worker
    if resolved.world == "carla":  # the CARLA install, leaderboard, scenario_runner and client, not in every worker
        from tools.collect.carla_run import check_route, check_setup, install_towns

        default_towns = install_towns(check_setup())
    else:
        default_towns = None
    jobs = plan(route_files, towns, repetitions, default_towns)
    if resolved.world == "carla":
        for job in {(j.route_file, j.route.id): j for j in jobs}.values():  # each route once, not per repetition
            check_route(job.route_file, job.route)
    read_manifest(layout)  # a root of another format version is refused before anything is written
    from tools.collect.info import card_after_collection, collection_record
    from tools.collect.routes import town_file

    # settings, world, rate, seeds, rig (a bad --rig is refused here), expert, route set, towns: for the manifest
    record = collection_record(resolved, route_files, routes_path, {town_file(j.route_file, j.route, j.towns)
                                                                    for j in jobs})
    scheduler = None
    if slurm is not None:  # no sbatch, an unknown partition: refused before anything is written
        from tools.collect.slurm import Scheduler, check_options

        check_options(slurm)
        scheduler = Scheduler()
        scheduler.require()
        if slurm.partition:
            scheduler.check_partition(slurm.partition)

    # Everything checked: from here on ROOT changes.
    try:
        layout.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ToolError(f"--root {layout.root}: cannot create it ({e.strerror})") from None
    update_manifest(
        layout,
        collection={
            "routes_dir": str(routes_path),
            "repetitions": repetitions,
            "max_attempts": max_attempts,
            "workers": workers,
            "slurm": None if slurm is None else {k: v for k, v in vars(slurm).items() if k != "sbatch_args"},
            "argv": ["python", "-m", "tools.collect", *sys.argv[1:]],
            **record,  # docs/dataset-format.md
        },
        runs={str(j.key): {"route": str(j.route_file.resolve()), "route_id": j.route.id,
                           "repetition": j.repetition} for j in jobs},
    )
    n_routes = len({(j.route_file, j.route.id) for j in jobs})
    where = f"{workers} workers" if slurm is None else f"SLURM job arrays of at most {slurm.throttle} tasks at once"
    print(f"collect: {len(jobs)} route runs ({n_routes} routes x {repetitions} repetitions) "
          f"into {layout.root}, {where}, at most {max_attempts} attempts each", file=sys.stderr)
    if slurm is not None:
        from tools.collect.slurm import collect_slurm, summary_line

        outcome = collect_slurm(layout, jobs, slurm, settings, max_attempts, scheduler, py123d=py123d)
        card_after_collection(layout)  # ROOT/README.md, from the manifest and the counts now
        print(summary_line(layout, outcome, slurm, time.time() - started), file=sys.stderr)
        return

    c = Collector(layout, workers=workers, max_attempts=max_attempts, settings=settings, py123d=py123d)
    c.run(jobs)
    if py123d:  # finished runs without a current Py123D log: finished before, or their export was cut short
        from tools.collect.py123d_export import export_missing

        export_missing(layout)
    card_after_collection(layout)  # ROOT/README.md, from the manifest and the counts now

    parts = [f"collect: {len(c.finished)} route runs finished and {len(c.failed)} failed in this invocation"]
    if c.retried:
        parts.append(f" ({c.retried} failed attempts were retried)")
    parts.append(f"; {c.skipped} skipped as already finished")
    if c.busy:
        parts.append(f", {len(c.busy)} skipped as running elsewhere")
    if c.damaged:
        parts.append(f", {len(c.damaged)} left alone with damaged result files (named above)")
    if c.given_up:
        parts.append(f", {len(c.given_up)} given up (failed {max_attempts} times before; bin/clean-failed "
                     f"{layout.root} --yes starts them over)")
    parts.append(f". {c.frames} frames recorded by the finished runs in {duration(time.time() - started)}. Data in "
                 f"{layout.root}/data, results in {layout.root}/results, logs in {layout.root}/logs; "
                 f"see bin/progress {layout.root}.")
    if c.failed or c.given_up:
        parts.append(" Some failed routes are normal (about 10%, more for hard scenario types): "
                     "collection still exits 0.")
    print("".join(parts), file=sys.stderr)
