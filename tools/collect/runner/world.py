"""The one seam between the runner and a world: what the runner asks of the world a route run is driven in (the
`World` protocol), and the one place that picks a world by its name (`world_for`, like lerobot's storage backend
factory). Nothing else in the runner asks which world it is.

    sim     the embedded world: SUMO, carla.Map and our renderer (tools.collect.sim.backend.EmbeddedWorld)
    carla   a CARLA server under the leaderboard 2.0 evaluator (tools.collect.carla.backend.CarlaWorld)

Adding a world (or a second CARLA version) is one module implementing `World` and one line in WORLDS.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route
from tools.collect.base.spec import RunSpec
from tools.collect.base.town import Town
from tools.collect.carla.backend import CarlaWorld
from tools.collect.sim.backend import EmbeddedWorld
from tools.collect.sim.drive import DriverFactory
from tools.core.errors import ToolError
from tools.dataset.layout import Layout
from tools.dataset.results import RouteRecord


class World(Protocol):
    """What a world answers for the runner (collection, attempt, workers, SLURM, the manifest record)."""

    #: Its name (--world=NAME).
    name: str
    #: Whether a worker forks its route runs from a zygote that loaded their town once (tools.collect.runner.zygote).
    forks_from_town: bool
    #: The GPUs a SLURM array task asks for when --gpus is not given.
    gpus_per_task: int
    #: Whether it runs servers on GPUs (--servers-per-gpu has a meaning).
    servers_on_gpus: bool
    #: Whether its background traffic is ours to set (--vehicles, a preset's traffic).
    sets_traffic: bool

    def check_settings(self, settings: CollectSettings) -> None:
        """What it cannot honour of the settings (a ToolError naming the flag): the first thing check_setup checks,
        and what an evaluation checks before it writes anything."""
        ...

    def check_setup(self, settings: CollectSettings) -> Path | None:
        """The settings (check_settings), then what it needs (an install, a rig it accepts), checked before
        anything is claimed: a ToolError for the first thing wrong. Returns its default towns folder (routes without
        a towns/ folder of their own), if any."""
        ...

    def check_route(self, route_file: Path, route: Route) -> None:
        """What it needs of a route beyond a town the route lies in (checked when the run is planned)."""
        ...

    def open_town(self, town_file: Path) -> Town | None:
        """The run's town, loaded (or kept by the worker's zygote) and kept for this process; None when the world
        loads the town itself."""
        ...

    def drive(self, layout: Layout, spec: RunSpec, attempt: int, town: Town | None,
              make_driver: DriverFactory) -> tuple[RouteRecord | Path, str]:
        """Drive one attempt of the run: its record, or a result file to publish unchanged (the CARLA evaluator's
        checkpoint); and how it ended, in words ("" when the record says it all)."""
        ...

    def record(self, settings: CollectSettings) -> dict[str, Any]:
        """The manifest's `world`: its name and the versions of what makes it."""
        ...


#: Every world by its name: the one place that knows them.
WORLDS: dict[str, Callable[[], World]] = {"sim": EmbeddedWorld, "carla": CarlaWorld}


def world_for(name: str) -> World:
    """The world called `name` (CollectSettings.world); a ToolError naming --world for an unknown one."""
    make = WORLDS.get(str(name))
    if make is None:
        raise ToolError(f"--world={name!r}: no such world (worlds: {', '.join(WORLDS)})")
    return make()
