"""`python -m tools.collect scenario-placements`: what the real scenario_runner classes place for each scenario block
of route files, recorded without a CARLA server (tools.collect.carla.scenario_build), as JSON data.

The file: {"scenario_runner": its `git describe --tags` (or the folder's name), "leaderboard": its commit,
"carla": the carla client's version, "blocks": [one record per block, scenario_build's format, with "file" (the
route file, relative to the folder given) and "town"]}. tests/data/scenario_placements/ holds recordings made so
and the route files they were made from (its README.md says how to make them again).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tools.collect.base.routes import TOWN_SUFFIX, find_route_files, find_towns_dir
from tools.collect.base.town import Town, carla_client_version
from tools.collect.carla.check import _import, real_paths
from tools.collect.carla.scenario_build import Builder, all_scenario_classes
from tools.core import atomic
from tools.core.errors import ToolError


def _describe(root: Path) -> str:
    """A checkout's tag (`git describe --tags --always`), else its folder's name."""
    proc = subprocess.run(["git", "-C", str(root), "describe", "--tags", "--always"], capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else root.name


def record(routes: Path, out: Path, towns: Path | None = None, env: Mapping[str, str] | None = None,
           progress=print) -> dict:
    """Every scenario block of the route files under `routes` (a file or a folder) built with the classes of
    SCENARIO_RUNNER_ROOT; the data written to `out` and returned. Towns: `towns`, else a towns/ folder above each
    file. ToolError (one line) when the roots, the files or a town are missing."""
    env = os.environ if env is None else env
    leaderboard, runner, paths = real_paths(env)
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    files = [routes] if routes.is_file() else find_route_files(routes) if routes.is_dir() else []
    if not files:
        raise ToolError(f"scenario-placements {routes}: no route file there (a *.xml file, or a folder of them)")
    parser = _import("leaderboard.utils.route_parser").RouteParser
    classes = all_scenario_classes(runner)
    base = routes if routes.is_dir() else routes.parent
    builders: dict[Path, tuple[Town, Builder]] = {}
    blocks = []
    for path in files:
        for config in parser.parse_routes_file(str(path)):
            xodr = find_towns_dir(path, towns) / f"{config.town}{TOWN_SUFFIX}"
            if not xodr.is_file():
                raise ToolError(f"scenario-placements: {path} runs on {config.town}, and there is no {xodr}; give "
                                "--towns a folder of the towns (make towns: .cache/carla-towns)")
            if xodr not in builders:
                # The route as the leaderboard's own interpolate_trajectory traces it: a recording is compared
                # within a metre, and where our planner's options differ by a point the classes that follow the
                # route past a junction (VehicleTurningRoutePedestrian) place 2 m apart. Minutes on Town12/13.
                town = Town(xodr)  # held: the lane graph our planner reads is kept with it
                builders[xodr] = town, Builder(town.carla_map, classes, exact_route=True)
            where = {"file": path.relative_to(base).as_posix(), "town": config.town}
            for block in builders[xodr][1].build_route(config, where):
                blocks.append(block)
                verdict = ("off the route: ignored" if block.get("ignored") else
                           f"{block['error']['type']}: {block['error']['message']}" if block["error"] else
                           f"{len(block['actors'])} actors, {len(block['flows'])} flows")
                progress(f"{where['file']}: {block['name']} ({block['type']}): {verdict}")
    data = {"scenario_runner": _describe(runner), "leaderboard": _describe(leaderboard),
            "carla": carla_client_version() or "unknown", "blocks": blocks}
    atomic.write_bytes(out, (json.dumps(data, indent=1) + "\n").encode())
    return data
