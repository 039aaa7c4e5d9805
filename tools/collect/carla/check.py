"""`python -m tools.collect carla-check`: our CARLA backend against the real leaderboard 2.0 and scenario_runner.

Run on a user's install (LEADERBOARD_ROOT, SCENARIO_RUNNER_ROOT, and CARLA_ROOT for CARLA's `agents` package, which
both import) and in the CARLA image at build time (containers/carla.def %test). Needs no CARLA server. Each check
runs the real code where it runs without a server and reads the real source where it does not:

  agent       our agent file loaded as LeaderboardEvaluator loads it (its folder first on sys.path, get_entry_point(),
              the class built with (host, port, debug): the real AutonomousAgent), its sensors (the rig's cameras, as
              sensors() declares them) through the real agent_wrapper.validate_sensor_configuration; our own check of
              the rig (agent.check_rig, run before anything starts) must agree, on the rig and on a rig it refuses
  scenarios   every type of our catalogue (scenario_types.PARAMETERS) is a class of srunner/scenarios, and what the
              class reads of its block (config.other_parameters, read from its source with `ast`, base classes
              included) is what the catalogue says: a drift is reported type by type
  routes      route files (ours: one generated per placeable type and per junction shape, or the ROUTES given)
              through the real RouteParser.parse_routes_file; every scenario has a trigger point, a type that is a
              class, and the parameters its class reads in the shape it reads them (value, from/to, x/y/z); its
              trigger point on the route as RouteParser.is_scenario_at_route finds it (the route traced by our
              planner, which follows GlobalRoutePlanner, when the town is in a towns/ folder above the file)
  build       every scenario block of those route files built as RouteScenario.build_scenarios builds it: its class
              (as get_all_scenario_classes finds it) called with (world, [ego], config, timeout) on the route
              interpolate_trajectory traces, against a stand-in of the server on the town's carla.Map (found in a
              towns/ folder above the file; tools.collect.carla.scenario_build); a class that raises is a block the
              leaderboard skips ("Skipping scenario ... due to setup error"): a FAIL naming the file, route, block,
              type and the class's error
  argv        tools.collect.carla.run.evaluator_command parsed by the evaluator's own argparse definitions (the
              add_argument calls of leaderboard_evaluator.py main(), executed)
  checkpoint  a checkpoint written by the real StatisticsManager in the evaluator's order (a finished route and a
              crashed one) read back by tools.dataset.results as a run's result

One line per check; the exit status is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tools.collect.base.route_gen import generate_routes
from tools.collect.base.routes import TOWN_SUFFIX, find_route_files, find_towns_dir, read_routes
from tools.collect.base.scenario_types import INTERVAL, LOCATION, PARAMETERS, PLACEABLE, SHAPE_KEYS, VALUE
from tools.collect.base.town import Town
from tools.collect.carla.agent import AGENT_FILE, MAX_RGB_CAMERAS, MAX_SENSOR_RADIUS_M, check_rig, declared_sensors
from tools.collect.carla.evaluator import route_parser_with_getchildren
from tools.collect.carla.run import (
    INSTALL_TOWNS,
    TRACK,
    CarlaSetup,
    check_route,
    evaluator_command,
    leaderboard_root,
    scenario_runner_root,
)
from tools.collect.carla.scenario_build import Builder, all_scenario_classes, planned_route
from tools.collect.carla.server import Ports
from tools.collect.carla.versions import VersionError, check_release, install_package
from tools.core.errors import ToolError
from tools.dataset import results
from tools.dataset.rig import CameraConfig, RigConfig
from tools.expert.planner import RoutePlanner
from tools.expert.route import NoRoute

#: scenario_runner's helpers that read one parameter of a block, and the shape each reads.
_HELPERS = {"get_value_parameter": VALUE, "get_interval_parameter": INTERVAL, "get_parameter": VALUE}
_KEY_SHAPE = {"value": VALUE, "from": INTERVAL, "to": INTERVAL}


@dataclass
class Report:
    """The check's lines and whether any failed."""

    lines: list[str] = field(default_factory=list)
    failed: bool = False

    def ok(self, name: str, text: str) -> None:
        self.lines.append(f"ok    {name}: {text}")

    def fail(self, name: str, text: str) -> None:
        self.lines.append(f"FAIL  {name}: {text}")
        self.failed = True


# ----------------------------------------------------------------------------- what scenario classes read


def scenario_reads(scenario_runner: Path) -> dict[str, dict[str, tuple[str, bool]]]:
    """Every class of SCENARIO_RUNNER_ROOT/srunner/scenarios: what it reads of its block's parameters
    (config.other_parameters), base classes included: {class: {parameter: (shape, required)}}. Read from the
    source: `config.other_parameters['X']` is required unless the class tests `'X' in config.other_parameters`;
    its shape is the key read next (['value'], ['from'] / ['to']) or x/y/z when convert_dict_to_location takes it;
    get_value_parameter / get_interval_parameter read an optional value or from/to."""
    own: dict[str, tuple[list[str], dict[str, tuple[str, bool]]]] = {}
    for path in sorted((scenario_runner / "srunner" / "scenarios").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                own[node.name] = (bases, _class_reads(node))

    def resolve(name: str, seen: frozenset[str] = frozenset()) -> dict[str, tuple[str, bool]]:
        if name not in own or name in seen:
            return {}
        bases, reads = own[name]
        out: dict[str, tuple[str, bool]] = {}
        for base in bases:
            out.update(resolve(base, seen | {name}))
        out.update(reads)
        return out

    return {name: resolve(name) for name in own}


def _class_reads(cls: ast.ClassDef) -> dict[str, tuple[str, bool]]:
    parents = {child: parent for parent in ast.walk(cls) for child in ast.iter_child_nodes(parent)}
    guarded = {node.left.value for node in ast.walk(cls)
               if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
               and any(isinstance(op, ast.In) for op in node.ops)
               and any(_is_other_parameters(c) for c in node.comparators)}
    reads: dict[str, tuple[str, bool]] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _HELPERS:
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                reads[node.args[1].value] = (_HELPERS[node.func.id], False)
        elif (isinstance(node, ast.Subscript) and _is_other_parameters(node.value)
              and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            name, up = node.slice.value, parents.get(node)
            if isinstance(up, ast.Subscript) and isinstance(up.slice, ast.Constant) and up.slice.value in _KEY_SHAPE:
                shape = _KEY_SHAPE[up.slice.value]
            elif isinstance(up, ast.Call) and getattr(up.func, "id", "") == "convert_dict_to_location":
                shape = LOCATION
            else:
                shape = "?"
            reads[name] = (shape, name not in guarded)
    return reads


def _is_other_parameters(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "other_parameters"


def scenario_problems(kind: str, params: Mapping[str, Mapping[str, str]],
                      reads: Mapping[str, tuple[str, bool]]) -> list[str]:
    """What the class of `kind` (its `reads`) would fail on in a block's parameters, in words."""
    out = []
    for name, (shape, required) in sorted(reads.items()):
        if name not in params:
            if required:
                out.append(f"lacks <{name}> ({'/'.join(SHAPE_KEYS.get(shape, ()))}), which {kind} reads "
                           "unconditionally")
            continue
        missing = [k for k in SHAPE_KEYS.get(shape, ()) if k not in params[name]]
        if missing:
            out.append(f"<{name}> lacks {', '.join(missing)} (its class reads {'/'.join(SHAPE_KEYS[shape])})")
    return out


# ----------------------------------------------------------------------------- the real modules


def real_paths(env: Mapping[str, str]) -> tuple[Path, Path, list[str]]:
    """LEADERBOARD_ROOT, SCENARIO_RUNNER_ROOT and the sys.path entries the leaderboard's docs name (CARLA's
    PythonAPI/carla when CARLA_ROOT is set, scenario_runner, the leaderboard)."""
    leaderboard, runner = leaderboard_root(env, "carla-check"), scenario_runner_root(env, "carla-check")
    paths = [str(runner), str(leaderboard)]
    if env.get("CARLA_ROOT", "").strip():
        paths.insert(0, str(Path(env["CARLA_ROOT"]).expanduser() / "PythonAPI" / "carla"))
    return leaderboard, runner, paths


def _import(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        pip = install_package(top)
        fix = ("set CARLA_ROOT to a CARLA install (its PythonAPI/carla holds `agents`)" if top == "agents" else
               f"{pip} (every package they import: pip install -e '.[carla]' in a drivekit checkout)" if pip else
               f"install the package that provides {top}")
        raise ToolError(f"carla-check: importing {name} needs {e.name}: {fix}") from None


# ----------------------------------------------------------------------------- the checks


def check_agent(report: Report, rig: RigConfig, host: str = "127.0.0.1", port: int = 2000) -> None:
    """Our agent file as the evaluator loads it, its sensors through the real validate_sensor_configuration."""
    wrapper = _import("leaderboard.autoagents.agent_wrapper")
    interface = _import("leaderboard.envs.sensor_interface")
    sys.path.insert(0, str(AGENT_FILE.parent))  # LeaderboardEvaluator.__init__: the agent's folder first
    try:
        module = importlib.import_module(AGENT_FILE.stem)
    finally:
        sys.path.remove(str(AGENT_FILE.parent))
    agent = getattr(module, module.get_entry_point())(host, port, 0)
    base = [c.__module__ for c in type(agent).__mro__]
    if "leaderboard.autoagents.autonomous_agent" not in base:
        report.fail("agent", f"{AGENT_FILE.name}'s {type(agent).__name__} is not the leaderboard's AutonomousAgent")
        return
    report.ok("agent", f"{AGENT_FILE} loads as the evaluator loads it: {type(agent).__name__} "
                       f"(an AutonomousAgent, track {agent.track.value})")
    limits = (float(wrapper.MAX_ALLOWED_RADIUS_SENSOR), int(wrapper.SENSORS_LIMITS["sensor.camera.rgb"]))
    if limits != (MAX_SENSOR_RADIUS_M, MAX_RGB_CAMERAS):
        report.fail("sensors", f"the leaderboard allows sensors within {limits[0]} m and {limits[1]} RGB cameras; "
                               f"tools/collect/carla/agent.py checks {MAX_SENSOR_RADIUS_M} m and {MAX_RGB_CAMERAS}")
    far = CameraConfig(name="rear", x=-2.0, z=2.3, yaw=180.0)
    many = tuple(CameraConfig(name=f"c{i}") for i in range(MAX_RGB_CAMERAS + 1))
    for what, candidate in (("the rig", rig), ("a rear camera at x -2.0, z 2.3", RigConfig(cameras=(far,))),
                            (f"{MAX_RGB_CAMERAS + 1} cameras", RigConfig(cameras=many))):
        sensors = declared_sensors(candidate, (0.0, 0.0, 0.0))
        try:
            wrapper.validate_sensor_configuration(sensors, agent.track, TRACK)
            real = None
        except interface.SensorConfigurationInvalid as e:
            real = str(e)
        try:
            check_rig(candidate)
            ours = None
        except ToolError as e:
            ours = str(e)
        verdict = "valid" if real is None else f"invalid ({real})"
        if (real is None) != (ours is None):
            report.fail("sensors", f"{what}: the leaderboard says {verdict}, our check before the run says "
                                   f"{'valid' if ours is None else 'invalid'}")
        elif candidate is rig and real is not None:
            report.fail("sensors", f"the rig: {real} ({ours})")
        else:
            report.ok("sensors", f"{what}: {verdict}, and our check agrees")


def check_scenarios(report: Report, reads: Mapping[str, Mapping[str, tuple[str, bool]]]) -> None:
    """Our catalogue's parameters of every type against what its class reads."""
    drift = []
    for kind, ours in PARAMETERS.items():
        if kind not in reads:
            drift.append(f"{kind}: no such class in srunner/scenarios")
        elif dict(reads[kind]) != ours:
            drift.append(f"{kind}: its class reads {_describe(reads[kind])}; scenario_types.PARAMETERS says "
                         f"{_describe(ours)}")
    if drift:
        for line in drift:
            report.fail("scenarios", line)
    else:
        required = sum(1 for ours in PARAMETERS.values() for _, req in ours.values() if req)
        report.ok("scenarios", f"{len(PARAMETERS)} types of our catalogue are classes of srunner/scenarios and read "
                               f"exactly the parameters scenario_types.PARAMETERS names ({required} of them "
                               "required)")


def _describe(reads: Mapping[str, tuple[str, bool]]) -> str:
    return ", ".join(f"{n} ({s}{', required' if r else ''})" for n, (s, r) in sorted(reads.items())) or "nothing"


def check_routes(report: Report, files: list[Path], reads: Mapping[str, Mapping[str, tuple[str, bool]]],
                 source: str) -> None:
    """Route files through the real RouteParser; every scenario against what its class reads."""
    module = _import("leaderboard.utils.route_parser")
    route_parser_with_getchildren(module)  # as the evaluator runs it (leaderboard-2.0 on Python 3.9+)
    parser = module.RouteParser
    counts: dict[str, int] = {}
    planners: dict[Path, RoutePlanner] = {}
    bad = 0
    for path in files:
        problems = []
        try:
            configs = parser.parse_routes_file(str(path))
        except Exception as e:  # noqa: BLE001  whatever the real parser raises is the finding
            report.fail("routes", f"{path}: the leaderboard's RouteParser fails: {type(e).__name__}: {e}")
            bad += 1
            continue
        for config in configs:
            for sc in config.scenario_configs:
                where = f"{path}: {config.name} scenario {sc.name!r} ({sc.type})"
                counts[sc.type] = counts.get(sc.type, 0) + 1
                if not sc.trigger_points:
                    problems.append(f"{where} has no <trigger_point>: RouteScenario fails on it")
                if sc.type not in reads:
                    problems.append(f"{where}: no class of srunner/scenarios is called {sc.type}")
                    continue
                problems += [f"{where} {p}" for p in scenario_problems(sc.type, sc.other_parameters, reads[sc.type])]
        problems += _triggers_off_route(parser, path, configs, planners)
        try:  # what a CARLA run checks before it starts must refuse what the leaderboard cannot run
            for route in read_routes(path):
                check_route(path, route)
            ours = None
        except ToolError as e:
            ours = str(e)
        if problems and ours is None:
            problems.append(f"{path}: our checks before a CARLA run (read_routes, check_route) accept it")
        for p in problems:
            report.fail("routes", p)
        bad += bool(problems)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    if not bad:
        report.ok("routes", f"{len(files)} route files ({source}) parse with the leaderboard's RouteParser; every "
                            f"scenario has a trigger point, a class and the parameters it reads ({kinds})")


def _triggers_off_route(parser, path: Path, configs, planners: dict[Path, RoutePlanner]) -> list[str]:
    """Scenarios whose trigger point the leaderboard would find off its route, which it then ignores ("too far from
    the route"): the real RouteParser.is_scenario_at_route on the route as our planner traces it
    (scenario_build.planned_route). Routes whose town is not found beside them (a
    towns/ folder above the file) are not traced."""
    import carla

    try:
        ours = {f"RouteScenario_{r.id}": r for r in read_routes(path)}
        towns = find_towns_dir(path, None)
    except ToolError:
        return []
    out = []
    for config in configs:
        route = ours.get(config.name)
        xodr = towns / f"{route.town}{TOWN_SUFFIX}" if route is not None else None
        if route is None or xodr is None or not xodr.is_file() or not config.scenario_configs:
            continue
        if xodr not in planners:
            planners[xodr] = RoutePlanner(Town(xodr).carla_map)  # the town keeps its lane graph beside it
        points = [carla.Location(float(x), float(y), float(z)) for x, y, z in route.waypoints]
        try:
            traced = planned_route(planners[xodr], points)
        except NoRoute as e:
            out.append(f"{path}: {config.name}: our planner finds no route through its waypoints ({e})")
            continue
        for sc in config.scenario_configs:
            if sc.trigger_points and not parser.is_scenario_at_route(sc.trigger_points[0], traced):
                out.append(f"{path}: {config.name} scenario {sc.name!r} ({sc.type}): its trigger point is off the "
                           "route as the leaderboard traces it (RouteParser.is_scenario_at_route): it would ignore "
                           "the scenario")
    return out


def check_build(report: Report, files: list[Path], runner: Path, source: str,
                classes: Mapping[str, type] | None = None) -> None:
    """Every scenario block of the route files built with its real class (scenario_build); `classes`: those of
    `runner` (all_scenario_classes) unless given. Files the RouteParser refuses, blocks of a type without a class
    (the routes check names both) and routes whose town is not beside them are not built (said on the ok line)."""
    parser = _import("leaderboard.utils.route_parser").RouteParser
    classes = all_scenario_classes(runner) if classes is None else classes
    builders: dict[Path, tuple[Town, Builder]] = {}
    built = stopped = 0
    unbuilt: list[str] = []
    for path in files:
        try:
            configs = parser.parse_routes_file(str(path))
            towns = find_towns_dir(path, None)
        except Exception:  # noqa: BLE001  the routes check reports what the parser refuses
            continue
        for config in configs:
            xodr = towns / f"{config.town}{TOWN_SUFFIX}"
            if not xodr.is_file():
                unbuilt.append(f"{path.name} ({config.town}: no {xodr})")
                continue
            if xodr not in builders:
                town = Town(xodr)  # held: the lane graph our planner reads is kept with it
                builders[xodr] = town, Builder(town.carla_map, classes)
            config.scenario_configs = [sc for sc in config.scenario_configs if sc.type in classes]
            for block in builders[xodr][1].build_route(config):
                if block.get("ignored"):
                    continue  # the routes check names triggers off the route
                built += 1
                stopped += bool(block["stopped"])
                if block["error"]:
                    e = block["error"]
                    report.fail("build", f"{path}: {config.name} scenario {block['name']!r} ({block['type']}): "
                                         f"its class raises {e['type']}: {e['message']}: the leaderboard would skip "
                                         "it (\"Skipping scenario ... due to setup error\")")
    if not any(line.startswith("FAIL  build") for line in report.lines):
        notes = [f"{stopped} of them up to a server call the stand-in does not model"] if stopped else []
        if unbuilt:
            notes.append(f"not built, no town beside them: {', '.join(unbuilt)}")
        report.ok("build", f"{built} scenario blocks of {len(files)} route files ({source}) built with their classes "
                           f"of {runner} without an error{'; ' + '; '.join(notes) if notes else ''}")


def evaluator_flags(leaderboard: Path) -> argparse.ArgumentParser:
    """The evaluator's argument parser: the ArgumentParser and add_argument calls of leaderboard_evaluator.py's
    main(), executed (importing the module would need a CARLA server's `agents` and every scenario's imports)."""
    path = leaderboard / "leaderboard" / "leaderboard_evaluator.py"
    tree = ast.parse(path.read_text(), str(path))
    main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
    if main is None:
        raise ToolError(f"carla-check: {path} has no main(); is LEADERBOARD_ROOT a leaderboard 2.0 checkout?")
    kept = [s for s in main.body if _is_parser_statement(s)]
    namespace: dict = {"argparse": argparse, "RawTextHelpFormatter": argparse.RawTextHelpFormatter}
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace["parser"]


def _is_parser_statement(stmt: ast.stmt) -> bool:
    """`parser = argparse.ArgumentParser(...)`, `parser.add_argument(...)` and the constants they use."""
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
        return True
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
        return any(isinstance(t, ast.Name) and t.id == "parser" for t in stmt.targets)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        return isinstance(func, ast.Attribute) and func.attr == "add_argument"
    return False


def check_argv(report: Report, leaderboard: Path, runner: Path) -> None:
    """Our evaluator command line, parsed by the evaluator's argparse."""
    parser = evaluator_flags(leaderboard)
    setup = CarlaSetup(Path("/carla"), leaderboard, runner)
    folder = Path("/run")
    argv = evaluator_command(sys.executable, setup, folder / "r.xml", "7", folder / "cp.json", folder / "live.txt",
                             AGENT_FILE, folder / "agent.json", Ports(2000, 2001, 2002, 8000), 42, 0)
    flags = argv[argv.index(str(setup.evaluator)) + 1:]  # after our wrapper's own flags and the evaluator's file
    try:
        args = parser.parse_args(flags)
    except SystemExit:
        report.fail("argv", f"the evaluator's argparse refuses {' '.join(flags)}")
        return
    want = {"routes": "/run/r.xml", "routes_subset": "7", "repetitions": 1, "track": TRACK,
            "checkpoint": "/run/cp.json", "debug_checkpoint": "/run/live.txt", "agent": str(AGENT_FILE),
            "agent_config": "/run/agent.json", "port": 2000, "traffic_manager_port": 8000,
            "traffic_manager_seed": 42, "resume": False, "debug": 0}
    wrong = {k: (getattr(args, k, None), v) for k, v in want.items() if getattr(args, k, None) != v}
    if wrong:
        report.fail("argv", "the evaluator's argparse reads " + ", ".join(f"{k}={got!r} (meant {v!r})"
                                                                         for k, (got, v) in wrong.items()))
    else:
        report.ok("argv", f"the evaluator's argparse reads our {len(flags)} flags as meant (--resume off)")


def check_checkpoint(report: Report, folder: Path) -> None:
    """Checkpoints written by the real StatisticsManager (the evaluator's order of calls) read as results."""
    stats = _import("leaderboard.utils.statistics_manager")
    events = _import("srunner.scenariomanager.traffic_events")
    import carla

    class Criterion:  # a criterion node as compute_route_statistics reads it: its events
        def __init__(self, evs):
            self.events = evs

    class Scenario:  # what StatisticsManager reads of a RouteScenario: route, timeout_node, get_criteria()
        route = [(carla.Transform(carla.Location(x=float(x))), None) for x in range(0, 101, 10)]
        timeout_node = types.SimpleNamespace(timeout=False)

        def get_criteria(self):
            done = events.TrafficEvent(event_type=events.TrafficEventType.ROUTE_COMPLETION, frame=0)
            done.set_dict({"route_completed": 100})
            return [Criterion([done])]

    cases = (("a finished route", Scenario(), "Finished", "", results.PERFECT),
             ("a crashed simulation", None, "Crashed", "Simulation crashed", results.FAILED_SIMULATION))
    for what, scenario, entry, message, status in cases:
        path = folder / f"checkpoint-{entry}.json"
        sm = stats.StatisticsManager(str(path), str(folder / "live.txt"))
        sm.clear_records()  # LeaderboardEvaluator.run, then _load_and_run_scenario, then the end of run
        sm.save_progress(0, 1)
        sm.write_statistics()
        sm.create_route_data("RouteScenario_7_rep0", 0)
        early = results.read_status(path)
        if scenario is not None:
            sm.set_scenario(scenario)
        sm.save_sensors(["carla_camera"])
        sm.save_entry_status(entry)
        sm.compute_route_statistics(0, 12.5, 10.0, message)
        sm.save_progress(1, 1)
        sm.write_statistics()
        sm.compute_global_statistics()
        sm.validate_and_write_statistics(True, entry == "Crashed")
        got = results.read_status(path)
        data = json.loads(path.read_text())
        record = data["_checkpoint"]["records"][0]
        missing = [k for k in results.INFRACTION_KEYS if k not in record["infractions"]]
        if early is not None or got != status or missing:
            report.fail("checkpoint", f"{what}: the StatisticsManager's file reads as {got!r} (meant {status!r}; "
                                      f"before the record {early!r}); infraction keys we lack: {missing}")
        else:
            report.ok("checkpoint", f"{what}: the StatisticsManager's checkpoint reads as {got!r} (entry_status "
                                    f"{data['entry_status']}), none while it holds no record")


# ----------------------------------------------------------------------------- the command


#: The CARLA town our route files are generated on (every placeable type has a place there).
ROUTE_TOWN = "Town10HD"
#: The types a generated grid town has no place for: those passing through the oncoming lane (one-way streets),
#: and those whose class looks for what netconvert does not write (CARLA's traffic lights, sidewalks).
_NOT_ON_GRID = tuple(n for n in PLACEABLE if n.endswith("TwoWays") or n == "InvadingTurn"
                     or n.startswith("SignalizedJunction") or n == "PedestrianCrossing")


def route_town(env: Mapping[str, str]) -> Path | None:
    """ROUTE_TOWN's OpenDRIVE: the CARLA install's (CARLA_ROOT), else DRIVEKIT_CARLA_TOWNS' (make towns); None."""
    carla_root = env.get("CARLA_ROOT", "").strip()
    if carla_root:
        for pattern in INSTALL_TOWNS:
            found = sorted(p for p in Path(carla_root).expanduser().glob(pattern) if p.stem == ROUTE_TOWN)
            if found:
                return found[0]
    folder = env.get("DRIVEKIT_CARLA_TOWNS", "").strip()
    path = Path(folder) / f"{ROUTE_TOWN}.xodr" if folder else None
    return path if path is not None and path.is_file() else None


def our_routes(folder: Path, town: Path | None) -> tuple[list[Path], str]:
    """Route files as `routes` writes them: one per placeable scenario type and four without --scenarios, on
    `town` (ROUTE_TOWN), else on a generated grid town, where the types of _NOT_ON_GRID have no place (left out,
    and said so). The files and where they come from, in words."""
    kinds = list(PLACEABLE)
    if town is not None:  # a copy: what the town's SUMO network is made into lands beside it, not in the install
        town = Path(shutil.copy(town, folder / town.name))
    else:
        from tools.collect.base.town import make_town

        town = make_town(folder / "town.xodr", grid="3x3", seed=1, lanes=2, block=110.0)
        kinds = [n for n in kinds if n not in _NOT_ON_GRID]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its progress
        files = generate_routes(str(town), len(kinds), str(folder / "routes"), seed=3, min_length=150.0,
                                max_length=450.0, scenarios=",".join(kinds))
        files += generate_routes(str(town), 4, str(folder / "plain"), seed=5, min_length=150.0, max_length=450.0)
    left = [n for n in PLACEABLE if n not in kinds]
    note = f"; no {ROUTE_TOWN} found (CARLA_ROOT): not generated {', '.join(left)}" if left else ""
    return files, f"ours on {town.stem}: one per placeable type and 4 without --scenarios{note}"


def carla_check(routes: str | None = None, rig: RigConfig | None = None,
                env: Mapping[str, str] | None = None, out: Callable[[str], None] = print) -> Report:
    """Every check; its lines go to `out`. ToolError (one line) when the roots, the route files or a module the
    checks import are missing."""
    env = os.environ if env is None else env
    started = time.monotonic()
    leaderboard, runner, paths = real_paths(env)
    carla_root = Path(env["CARLA_ROOT"]).expanduser() if env.get("CARLA_ROOT", "").strip() else None
    try:  # server (when CARLA_ROOT is set), client and scenario_runner of one release, before anything runs
        release = check_release(env, carla_root, leaderboard, runner, what="carla-check")
    except VersionError as e:
        raise ToolError(str(e)) from None
    files = None
    if routes:
        folder = Path(routes)
        files = [folder] if folder.is_file() else find_route_files(folder) if folder.is_dir() else []
        if not files:
            raise ToolError(f"carla-check --routes {routes}: no route file there (a *.xml file, or a folder of them)")
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    report = Report()
    out(f"carla-check: CARLA {release.version}: leaderboard {leaderboard} (pinned {release.leaderboard_commit[:8]}), "
        f"scenario_runner {runner} (pinned {release.scenario_runner_commit[:8]}, {release.scenario_runner_tag})")
    reads = scenario_reads(runner)
    with tempfile.TemporaryDirectory(prefix="carla-check-") as tmp:
        made: list[tuple[list[Path], str]] = [(files, str(routes))] if files else []
        steps = [("agent", lambda: check_agent(report, rig or RigConfig())),
                 ("scenarios", lambda: check_scenarios(report, reads)),
                 ("routes", lambda: made or made.append(our_routes(Path(tmp), route_town(env)))),
                 ("routes", lambda: made and check_routes(report, made[0][0], reads, made[0][1])),
                 ("build", lambda: made and check_build(report, made[0][0], runner, made[0][1])),
                 ("argv", lambda: check_argv(report, leaderboard, runner)),
                 ("checkpoint", lambda: check_checkpoint(report, Path(tmp)))]
        for name, step in steps:
            before = len(report.lines)
            try:
                step()
            except ToolError:
                raise
            except Exception as e:  # noqa: BLE001  a check that cannot run is a failed check, named
                report.fail(name, f"could not run: {type(e).__name__}: {e}")
            for line in report.lines[before:]:
                out(line)
    verdict = "FAILED" if report.failed else "passed"
    out(f"carla-check {verdict} ({sum(1 for x in report.lines if x.startswith('FAIL'))} failed of "
        f"{len(report.lines)}, {time.monotonic() - started:.1f} s)")
    return report
