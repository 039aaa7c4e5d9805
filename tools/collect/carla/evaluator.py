"""The CARLA leaderboard evaluator, run by tools.collect.carla.run with what it has no flag for.

    python -m tools.collect.carla.evaluator --seed=N --repetition=K [--stop-on-infraction] [--track-of-agent]
        EVALUATOR [FLAGS...]

EVALUATOR (LEADERBOARD_ROOT/leaderboard/leaderboard_evaluator.py) runs as its own script, unchanged: as
`__main__`, its folder first on sys.path and FLAGS as its argv, as `python EVALUATOR FLAGS...` runs it. Before it
starts, these things of scenario_runner's and the leaderboard's are set (read from leaderboard aec81319 and
scenario_runner v0.9.16):

- `--seed`: scenario_runner's random source. CarlaDataProvider draws the scenarios' and the background
  traffic's blueprints, colours and spawn points from its RandomState `_rng`, made from `_random_seed` (2000)
  at import and again in its cleanup(); the evaluator never seeds it, only the Traffic Manager
  (--traffic-manager-seed, N too). Both are set to N, and Python's and numpy's global random sources with
  them (scenarios such as CutIn and ChangeLane draw from those). Each repetition of a route has its own N
  (tools.collect.runner.attempt.derive_seed), so repetitions differ; an attempt repeats its repetition.
- `--repetition`: the record's name, `RouteScenario_<id>_rep<K>`. The evaluator is given one repetition of one
  route (--repetitions=1), which its RouteIndexer numbers 0; a RouteIndexer that numbers it K replaces it.
- `--stop-on-infraction`: the route ends after the tick in which the leaderboard's own criteria record the
  first infraction (an event of a type its StatisticsManager lists in the record: PENALTY_NAME_DICT). The
  ScenarioManager's loop is stopped as a SIGINT stops it (`_running` false): the evaluator then stops the
  scenario and records the route unfinished, `Failed`, with the infraction among its infractions. A
  minimum-speed checkpoint stops nothing (`stopping_infractions`: a run with one is still Completed, usable
  data; the embedded world's referee alike).
- `--track-of-agent` (a researcher's agent file: bin/evaluate --world=carla --agent-file): the track is the agent's
  own. The evaluator checks the sensors against its --track and refuses an agent whose `track` (set in setup(),
  SENSORS by default) is another ("You are submitting to the wrong track", `Failed - Agent's sensors were
  invalid`, entry Rejected): leaderboard_evaluator.py `_load_and_run_scenario`, agent_wrapper.py
  `validate_sensor_configuration`. Which track an agent file is on is known only after its setup(), so its
  validate_sensor_configuration is given the agent's own track as the selected one, as if --track named it (the
  embedded world does the same: tools.evaluate.leaderboard.host); every other rule of the track stands.

And the `carla` distribution the evaluator reads its client's version from (importlib.metadata at leaderboard
master, pkg_resources at leaderboard-2.0; a missing one ends it before the agent loads): the 0.9.15 client for
Python 3.11 (`carla-0-9-15`) installs none, so a metadata-only `carla` of the client's own version is put on
sys.path then (`carla_distribution`).

And `Element.getchildren()`, removed in Python 3.9, which leaderboard-2.0's RouteParser (CARLA 0.9.15's leaderboard:
route_parser.py:132) calls on every <scenario>: on Python 3.11 every route with a scenario would crash there.
Its route files are read into elements that have it (`route_parser_with_getchildren`), for the evaluator and
for carla-check alike; leaderboard master reads `list(scenario)` and is left alone.

The leaderboard and scenario_runner are imported inside the functions: they exist only on the evaluator's
PYTHONPATH (tools.collect.carla.run.evaluator_env), never in the collector's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import os
import random
import runpy
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np

from tools.collect.base.town import carla_client_version, user_cache

#: What the evaluator's log says when a route is stopped at its first infraction.
STOPPED = "drivekit: --stop-on-infraction: the route ends at the first infraction"
#: What the evaluator's log says of an agent file's track (--track-of-agent).
OWN_TRACK = "drivekit: the track is the agent's own"


def seed_scenario_runner(seed: int) -> None:
    """Seed scenario_runner's random source (CarlaDataProvider's, kept across its cleanup()) and Python's and
    numpy's global ones."""
    from srunner.scenariomanager.carla_data_provider import CarlaDataProvider

    CarlaDataProvider._random_seed = seed
    CarlaDataProvider._rng = np.random.RandomState(seed)
    random.seed(seed)
    np.random.seed(seed)


def numbered_indexer(indexer: type, repetition: int) -> type:
    """The leaderboard's RouteIndexer, its routes' repetition numbered `repetition` (it is given one)."""

    class NumberedRouteIndexer(indexer):
        def __init__(self, routes_file, repetitions, routes_subset):
            super().__init__(routes_file, repetitions, routes_subset)
            for config in self._configs_list:
                config.repetition_index += repetition

    return NumberedRouteIndexer


def first_infraction(criteria: list, infractions: dict) -> tuple[str, str] | None:
    """(record key, message) of the first event of `criteria` (the scenario's criterion nodes) whose type is an
    infraction of the record (`infractions`: the StatisticsManager's PENALTY_NAME_DICT), else None."""
    for node in criteria:
        for event in node.events:
            if event.get_type() in infractions:
                return infractions[event.get_type()], str(event.get_message())
    return None


def stopping_infractions(infractions: dict) -> dict:
    """The event types of the record (`infractions`: PENALTY_NAME_DICT) that --stop-on-infraction stops at: all but
    the minimum speed (a run with a slow checkpoint is still Completed; the embedded world's referee alike)."""
    return {kind: key for kind, key in infractions.items() if key != "min_speed_infractions"}


def stopping_manager(manager: type, infractions: dict) -> type:
    """The leaderboard's ScenarioManager, ending the route after the tick of its first infraction."""

    class StopOnInfraction(manager):
        def _tick_scenario(self):
            super()._tick_scenario()
            if self._running and self.scenario is not None:
                found = first_infraction(self.scenario.get_criteria(), infractions)
                if found is not None:
                    print(f"{STOPPED}: {found[0]}: {found[1]}", flush=True)
                    self._running = False

    return StopOnInfraction


def agents_own_track(validate: Any) -> Any:
    """agent_wrapper.validate_sensor_configuration(sensors, agent_track, selected_track), the selected track the
    agent's own (`agent_track`'s value): every rule of that track checked, never "the wrong track"."""

    def validate_on_agents_track(sensors, agent_track, selected_track):
        track = getattr(agent_track, "value", agent_track)
        print(f"{OWN_TRACK}: {track} (the evaluator was given --track={selected_track})", flush=True)
        return validate(sensors, agent_track, track)

    return validate_on_agents_track


def carla_distribution() -> Path | None:
    """Where no `carla` distribution is installed but the client imports (`carla-0-9-15`), a folder holding a
    metadata-only one of the client's own version, put on sys.path (made once under the user's cache). None
    where one is installed or no client imports."""
    try:
        importlib.metadata.distribution("carla")
        return None
    except importlib.metadata.PackageNotFoundError:
        pass
    version = carla_client_version()
    if version is None:
        return None
    folder = user_cache("carla-metadata", version)
    info = folder / f"carla-{version}.dist-info"
    if not (info / "METADATA").is_file():
        tmp = folder / f".{os.getpid()}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "METADATA").write_text(f"Metadata-Version: 2.1\nName: carla\nVersion: {version}\n")
        try:
            tmp.rename(info)  # atomic: evaluators starting at once never see half of it
        except OSError:  # another made it first
            for child in tmp.iterdir():
                child.unlink()
            tmp.rmdir()
    sys.path.append(str(folder))  # last: it holds no module, only what the metadata lookups find
    return folder


class _Element(ET.Element):
    """An element with Python 3.8's getchildren() (the children, in order), which leaderboard-2.0 calls."""

    def getchildren(self) -> list[ET.Element]:
        return list(self)


def route_parser_with_getchildren(route_parser: types.ModuleType) -> bool:
    """Where the leaderboard's route_parser module calls getchildren() (leaderboard-2.0), its ElementTree is one
    whose parse() makes elements that have it; whether it was. The module's source is otherwise unchanged."""
    if "getchildren" not in inspect.getsource(route_parser):
        return False

    def parse(source, parser=None):
        return ET.parse(source, parser or ET.XMLParser(target=ET.TreeBuilder(element_factory=_Element)))

    route_parser.ET = types.SimpleNamespace(**{**{k: getattr(ET, k) for k in dir(ET) if not k.startswith("__")},
                                               "parse": parse})
    return True


def main(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(prog="python -m tools.collect.carla.evaluator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--repetition", type=int, required=True)
    parser.add_argument("--stop-on-infraction", action="store_true")
    parser.add_argument("--track-of-agent", action="store_true")
    parser.add_argument("evaluator", type=Path)
    parser.add_argument("flags", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    carla_distribution()
    seed_scenario_runner(args.seed)
    from leaderboard.utils import route_indexer, route_parser

    route_parser_with_getchildren(route_parser)

    route_indexer.RouteIndexer = numbered_indexer(route_indexer.RouteIndexer, args.repetition)
    if args.stop_on_infraction:
        from leaderboard.scenarios import scenario_manager
        from leaderboard.utils.statistics_manager import PENALTY_NAME_DICT

        scenario_manager.ScenarioManager = stopping_manager(scenario_manager.ScenarioManager,
                                                            stopping_infractions(PENALTY_NAME_DICT))
    if args.track_of_agent:
        from leaderboard.autoagents import agent_wrapper

        agent_wrapper.validate_sensor_configuration = agents_own_track(agent_wrapper.validate_sensor_configuration)
    evaluator = str(args.evaluator)
    sys.argv = [evaluator, *args.flags]
    sys.path[0] = str(args.evaluator.parent)  # as `python EVALUATOR` has it
    return runpy.run_path(evaluator, run_name="__main__")


if __name__ == "__main__":
    main()
