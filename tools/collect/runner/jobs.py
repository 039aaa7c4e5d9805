"""The route runs a collection plans: every route file under a folder, each route times K repetitions, checked
against its town before anything runs (`plan`), each a `Job` that local workers and SLURM tasks both run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.collect.routes import Route, check_routes, find_towns_dir, read_routes
from tools.dataset.errors import ToolError
from tools.dataset.layout import RunKey


@dataclass(frozen=True)
class Job:
    """One route run to do: a route of a route file, one repetition."""

    route_file: Path
    route: Route
    repetition: int
    towns: Path
    key: RunKey



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


def duration(seconds: float) -> str:
    """H:MM:SS."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
