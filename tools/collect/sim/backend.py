"""The embedded world (SUMO, carla.Map and our renderer) as the runner sees it (tools.collect.runner.world.World):
nothing to install, the route runs forked from a zygote that loaded their town once, the drive loop of
tools.collect.sim.drive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route
from tools.collect.base.spec import RunSpec
from tools.collect.base.town import Town, keep_town, open_town
from tools.collect.sim.drive import DriverFactory, drive
from tools.dataset.layout import Layout
from tools.dataset.manifest import package_versions
from tools.dataset.results import RouteRecord


class EmbeddedWorld:
    name = "sim"
    forks_from_town = True  # a worker's zygote loads the town once (tools.collect.runner.zygote)
    gpus_per_task = 0  # it renders on the CPU
    servers_on_gpus = False
    sets_traffic = True  # --vehicles

    def check_settings(self, settings: CollectSettings) -> None:
        return None  # every setting means something here

    def check_setup(self, settings: CollectSettings) -> Path | None:
        return None  # SUMO and carla.Map are packages of ours: nothing to check, no towns of its own

    def check_route(self, route_file: Path, route: Route) -> None:
        return None  # a route that lies on its town's roads is all it needs (tools.collect.base.routes.check_routes)

    def open_town(self, town_file: Path) -> Town:
        town = open_town(town_file)  # the town kept by the worker that forked us, else loaded now
        keep_town(town)  # the route's check reads the same carla.Map
        return town

    def drive(self, layout: Layout, spec: RunSpec, attempt: int, town: Town | None,
              make_driver: DriverFactory) -> tuple[RouteRecord, str]:
        assert town is not None, "open_town first"
        record = drive(layout, spec.key, spec.route, town, spec.settings, spec.repetition, spec.seed, attempt,
                       make_driver)
        return record, ""

    def record(self, settings: CollectSettings) -> dict[str, Any]:
        sumo = package_versions(["eclipse-sumo", "libsumo"])
        return {"name": self.name, "sumo": sumo.get("eclipse-sumo") or sumo.get("libsumo"),
                "vehicles": settings.vehicles}
