"""A CARLA server under the leaderboard 2.0 evaluator as the runner sees it (tools.collect.runner.world.World): the
install, leaderboard and scenario_runner checked before anything is claimed (tools.collect.carla.run.check_setup),
the rig against the leaderboard's limits, the towns of the install, one server per route run on a GPU (no zygote:
the server loads the town), the evaluator's checkpoint published as the run's result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route
from tools.collect.base.spec import RunSpec
from tools.collect.base.town import Town
from tools.collect.carla import run as carla_run
from tools.collect.carla.agent import check_rig
from tools.dataset.layout import Layout
from tools.dataset.manifest import package_versions
from tools.dataset.results import RouteRecord


class CarlaWorld:
    name = "carla"
    forks_from_town = False  # each run's server loads the town
    gpus_per_task = 1  # the server renders on a GPU
    servers_on_gpus = True  # --servers-per-gpu
    sets_traffic = False  # the leaderboard's scenario_runner decides the background traffic

    def __init__(self) -> None:
        self.setup: carla_run.CarlaSetup | None = None

    def check_setup(self, settings: CollectSettings) -> Path:
        """The CARLA install, leaderboard, scenario_runner and client; the rig (sensors the leaderboard would refuse
        end every attempt: refused here). Returns the install's towns (carla_run.install_towns)."""
        self.setup = carla_run.check_setup()
        check_rig(settings.load_rig())
        return carla_run.install_towns(self.setup)

    def check_route(self, route_file: Path, route: Route) -> None:
        carla_run.check_route(route_file, route)

    def open_town(self, town_file: Path) -> None:
        return None  # the run's server loads it

    def drive(self, layout: Layout, spec: RunSpec, attempt: int, town: Town | None,
              make_driver: Callable[..., Any]) -> tuple[Path | RouteRecord, str]:
        # The leaderboard evaluator runs our agent (tools.collect.carla.agent), the expert: make_driver is not used
        if self.setup is None:
            self.setup = carla_run.check_setup()
        return carla_run.drive(layout, spec.key, spec.route_file.absolute(), spec.route, spec.settings,
                               spec.repetition, spec.seed, attempt, self.setup)

    def record(self, settings: CollectSettings) -> dict[str, Any]:
        return {"name": self.name, "carla_client": package_versions(["carla"]).get("carla"),
                "leaderboard_commit": carla_run.LEADERBOARD_COMMIT,
                "scenario_runner_commit": carla_run.SCENARIO_RUNNER_COMMIT}
