"""A CARLA server under the leaderboard 2.0 evaluator as the runner sees it (tools.collect.runner.world.World): the
install, leaderboard and scenario_runner checked before anything is claimed (tools.collect.carla.run.check_setup),
the rig against the leaderboard's limits (or a researcher's agent file, --agent=leaderboard, and its config), the
towns of the install, one server per route run on a GPU (no zygote: the server loads the town), the evaluator's
checkpoint published as the run's result."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route
from tools.collect.base.spec import RunSpec
from tools.collect.base.town import Town, carla_client_version
from tools.collect.carla import run as carla_run
from tools.collect.carla.agent import check_rig
from tools.core.errors import ToolError
from tools.dataset.layout import Layout
from tools.dataset.results import RouteRecord

#: The leaderboard evaluator ticks CARLA at a fixed rate (leaderboard_evaluator.py: LeaderboardEvaluator.frame_rate).
CARLA_SIM_HZ = 20
#: Settings the leaderboard's own criteria and scenario_runner's background traffic decide in a CARLA run: a
#: value other than the default would be silently ignored there, so it is refused.
CARLA_DECIDES = ("vehicles", "blocked_after", "max_deviation", "timeout_base", "timeout_speed", "sensor_noise")


def check_agent_files(settings: CollectSettings) -> None:
    """A researcher's agent file (--agent-file) and its --agent-config, when given, exist: one line naming the flag
    (bin/evaluate checks them before anything is written; a SLURM task checks them again on its node)."""
    if not Path(settings.agent_file).is_file():
        raise ToolError(f"--agent-file {settings.agent_file}: no such file here ({os.uname().nodename}); give a "
                        "leaderboard 2.0 agent file on storage every node running route runs sees")
    if settings.agent_config and not Path(settings.agent_config).exists():
        raise ToolError(f"--agent-config {settings.agent_config}: no such file or folder here "
                        f"({os.uname().nodename}); give it on storage every node running route runs sees")


class CarlaWorld:
    name = "carla"
    forks_from_town = False  # each run's server loads the town
    gpus_per_task = 1  # the server renders on a GPU
    servers_on_gpus = True  # --servers-per-gpu
    sets_traffic = False  # the leaderboard's scenario_runner decides the background traffic

    def __init__(self) -> None:
        self.setup: carla_run.CarlaSetup | None = None

    def check_settings(self, settings: CollectSettings) -> None:
        """What a CARLA run cannot honour, refused in one line before anything starts."""
        if settings.sim_hz != CARLA_SIM_HZ:
            raise ToolError(f"--sim-hz={settings.sim_hz}: --world=carla runs at {CARLA_SIM_HZ} Hz, the leaderboard "
                            f"evaluator's fixed rate; leave --sim-hz out (record less often with --record-every)")
        if settings.agent == "policy":
            raise ToolError("--agent=policy: --world=carla drives the expert or a leaderboard agent file; evaluate "
                            "a checkpoint in CARLA as the agent file "
                            "tools/evaluate/leaderboard/agent_file/policy_agent.py (--agent-file that --agent-config "
                            "CHECKPOINT), or in the embedded world (leave --world out)")
        defaults = CollectSettings()
        for name in CARLA_DECIDES:
            if getattr(settings, name) != getattr(defaults, name):
                raise ToolError(f"--{name.replace('_', '-')}={getattr(settings, name)!r}: with --world=carla the "
                                "leaderboard evaluator decides this (its criteria and scenario_runner's background "
                                "traffic); leave it out")

    def check_setup(self, settings: CollectSettings) -> Path:
        """The settings (check_settings); the CARLA install, leaderboard, scenario_runner and client; our agent's rig
        (sensors the leaderboard would refuse end every attempt: refused here), or a researcher's agent file and its
        config, which must be where this process runs (a SLURM task's node). Returns the install's towns
        (carla_run.install_towns)."""
        self.check_settings(settings)
        self.setup = carla_run.check_setup()
        if settings.agent == "leaderboard":  # the agent declares its own sensors; the leaderboard checks them
            check_agent_files(settings)
        else:
            check_rig(settings.load_rig())
        return carla_run.install_towns(self.setup)

    def check_route(self, route_file: Path, route: Route) -> None:
        carla_run.check_route(route_file, route)

    def open_town(self, town_file: Path) -> None:
        return None  # the run's server loads it

    def drive(self, layout: Layout, spec: RunSpec, attempt: int, town: Town | None,
              make_driver: Callable[..., Any]) -> tuple[Path | RouteRecord, str]:
        # The leaderboard evaluator runs the agent, ours (tools.collect.carla.agent: the expert) or a researcher's
        # agent file (settings.agent_file): make_driver is not used
        if self.setup is None:
            self.setup = carla_run.check_setup()
        return carla_run.drive(layout, spec.key, spec.route_file.absolute(), spec.route, spec.settings,
                               spec.repetition, spec.seed, attempt, self.setup)

    def record(self, settings: CollectSettings) -> dict[str, Any]:
        try:  # the release of the set-up the runs drive in (checked before anything starts)
            release = (self.setup or carla_run.check_setup()).release
        except ToolError:
            release = None
        return {"name": self.name, "carla_client": carla_client_version(),
                "leaderboard_commit": release.leaderboard_commit if release else None,
                "scenario_runner_commit": release.scenario_runner_commit if release else None}
