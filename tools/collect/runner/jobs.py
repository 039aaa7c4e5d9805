"""The route runs a collection plans: every route file under a folder, each route times K repetitions, checked
against its town before anything runs (`plan`), each a `Job` that local workers and SLURM tasks both run, its
RunSpec written for the process that drives it (`write_specs`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route, check_routes, find_towns_dir, read_routes, town_file
from tools.collect.base.spec import RunSpec
from tools.core.errors import DiskFull, ToolError, disk_full
from tools.dataset.attempts import read_attempts
from tools.dataset.claims import discard_run, exclusive
from tools.dataset.layout import Layout, RunKey
from tools.dataset.results import CRASH_STATUSES, RunState, held_run_state, run_state, run_states

#: How many finished route runs a size estimate looks at.
SIZE_SAMPLE = 20


@dataclass(frozen=True)
class Job:
    """One route run to do: a route of a route file, one repetition."""

    route_file: Path
    route: Route
    repetition: int
    towns: Path
    key: RunKey

    def spec(self, settings: CollectSettings) -> RunSpec:
        """The run as its process drives it (tools.collect.base.spec)."""
        return RunSpec.plan(self.key, self.route_file, self.route, self.towns,
                            town_file(self.route_file, self.route, self.towns), self.repetition, settings)

    @staticmethod
    def of(spec: RunSpec) -> Job:
        return Job(spec.route_file, spec.route, spec.repetition, spec.towns, spec.key)


def write_specs(layout: Layout, jobs: list[Job], settings: CollectSettings) -> None:
    """Each job's RunSpec at Layout.run_spec, where the child that drives it reads it."""
    for job in jobs:
        job.spec(settings).write(layout.run_spec(job.key))


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


def changed_routes(layout: Layout, jobs: list[Job], manifest: dict | None) -> tuple[list[tuple[Job, str]], int]:
    """The planned runs that finished on disk driving another route than the one planned (a route set written
    again with another --seed under the same names, two folders with the same file name): [(job, the route file
    the manifest names for it, or "")], and how many finished runs record no route to compare (before route
    digests: not verified). A run is its route's content (Route.digest, in its attempt record), not its name."""
    runs = (manifest or {}).get("runs") or {}
    states = run_states(layout, [job.key for job in jobs])  # one pass (and one heartbeat watch) for them all
    changed, unverified = [], 0
    for job in jobs:
        if states[job.key] is not RunState.FINISHED:
            continue
        driven = next((e["route"] for e in reversed(read_attempts(layout, job.key)) if e["status"] not in
                       CRASH_STATUSES), "")
        if not driven:
            unverified += 1
        elif driven != job.route.digest:
            changed.append((job, str((runs.get(str(job.key)) or {}).get("route", ""))))
    return changed, unverified


def replace_changed(layout: Layout, changed: list[tuple[Job, str]]) -> int:
    """--replace: the finished runs of `changed` discarded with their logs (their attempts were of another route:
    the new one starts over), under their lock, as bin/clean-failed discards; one a process runs now is left. How
    many were discarded."""
    done = 0
    for job, _ in changed:
        with exclusive(layout, job.key) as mine:
            if mine and held_run_state(layout, job.key) is RunState.FINISHED:
                discard_run(layout, job.key, logs=True)  # result first, then the data and log folders
                done += 1
    return done


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under `folder` (0 when there is none)."""
    total = 0
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def run_bytes(layout: Layout, key: RunKey) -> int:
    """Everything a route run writes: its data folder, its logs, its result file and an evaluated run's picture
    (0.5 to 0.9 MB, more than the rest of an evaluated run: an estimate without it was 12.6 KiB)."""
    extra = 0
    for path in (layout.result_path(key), layout.film_path(key)):
        try:
            extra += os.lstat(path).st_size
        except OSError:
            continue
    return folder_bytes(layout.run_dir(key)) + folder_bytes(layout.log_dir(key)) + extra


def route_run_bytes(layout: Layout, partial: RunKey | None = None) -> tuple[int, str] | None:
    """About how much disk one route run takes, and how that was estimated: the mean of up to SIZE_SAMPLE of
    this root's finished runs (run_bytes: data, logs, result, picture); without one, at least what `partial` (an
    attempt a full disk stopped) had written; None when neither tells."""
    sizes = []
    for key in layout.iter_runs():
        if run_state(layout, key) is RunState.FINISHED:
            sizes.append(run_bytes(layout, key))
            if len(sizes) == SIZE_SAMPLE:
                break
    if sizes:
        mean = sum(sizes) // len(sizes)
        return mean, f"the mean of {len(sizes)} finished route runs of this root"
    written = run_bytes(layout, partial) if partial is not None else 0
    if written:
        frames = layout.frame_count(partial)
        return written, f"at least what the attempt had written when the disk filled, {frames} frames"
    return None


def take_back(layout: Layout, key: RunKey) -> DiskFull:
    """An attempt a full disk stopped (its attempt log already uncounted): the one line, with the size of a route
    run estimated before its frames are discarded (the run is as if never attempted)."""
    error = disk_full(layout.data, "a route run", route_run_bytes(layout, partial=key))
    discard_run(layout, key)
    return error


def duration(seconds: float) -> str:
    """H:MM:SS."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
