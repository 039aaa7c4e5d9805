"""`python -m tools.collect carla-check` (tools.collect.carla.check) and the route files it checks.

The real leaderboard and scenario_runner cannot be reached here: the checks run over stand-ins of the modules they
call (tests/standin_leaderboard: the agent base, agent_wrapper's sensor rules, RouteParser; the stand-in evaluator's
main() with the real one's flags; scenario classes written by the test), and the tests say so in their names. The
route files are our generator's, on CARLA's Town03 (roads at several heights)."""

from __future__ import annotations

import math
import shutil
import sys

import carla
import numpy as np
import pytest
from conftest import PYTHON, TESTS, run_tool

from tools.collect.base.route_gen import generate_routes
from tools.collect.base.routes import read_routes, write_route
from tools.collect.base.scenario_types import CATALOGUE, JUNCTION, LOCATION, PARAMETERS, SHAPE_KEYS, VALUE
from tools.collect.carla import check, scenario_build
from tools.dataset.rig import CameraConfig, RigConfig
from tools.expert.planner import RoutePlanner

STANDINS = TESTS / "standin_leaderboard"

#: Stand-in scenario_runner source with every way a class reads its block (srunner/scenarios at v0.9.16 reads
#: them so): a required location, a value tested with `in`, the helpers with defaults, a subclass adding one.
SCENARIO_SOURCE = '''
def convert_dict_to_location(actor_dict):
    return (float(actor_dict['x']), float(actor_dict['y']), float(actor_dict['z']))

def get_value_parameter(config, name, p_type, default):
    if name in config.other_parameters:
        return p_type(config.other_parameters[name]['value'])
    return default

def get_interval_parameter(config, name, p_type, default):
    if name in config.other_parameters:
        return [p_type(config.other_parameters[name]['from']), p_type(config.other_parameters[name]['to'])]
    return default

class BasicScenario:
    pass

class Flow(BasicScenario):
    def __init__(self, world, ego_vehicles, config):
        self._start = convert_dict_to_location(config.other_parameters['start_actor_flow'])
        self._speed = get_value_parameter(config, 'flow_speed', float, 10)
        self._gaps = get_interval_parameter(config, 'source_dist_interval', float, [20, 50])
        if 'direction' in config.other_parameters:
            self._direction = config.other_parameters['direction']['value']

class FlowV2(Flow):
    def __init__(self, world, ego_vehicles, config):
        super().__init__(world, ego_vehicles, config)
        self._end = convert_dict_to_location(config.other_parameters['end_actor_flow'])
'''


def test_what_a_scenario_class_reads_is_read_from_its_source_base_classes_included_standin_scenarios(tmp_path):
    (tmp_path / "srunner" / "scenarios").mkdir(parents=True)
    (tmp_path / "srunner" / "scenarios" / "flows.py").write_text(SCENARIO_SOURCE)
    reads = check.scenario_reads(tmp_path)
    flow = {"start_actor_flow": (LOCATION, True), "flow_speed": (VALUE, False),
            "source_dist_interval": ("interval", False), "direction": (VALUE, False)}
    assert reads["Flow"] == flow
    assert reads["FlowV2"] == {**flow, "end_actor_flow": (LOCATION, True)}
    assert reads["BasicScenario"] == {}
    problems = check.scenario_problems("FlowV2", {"start_actor_flow": {"x": "1", "y": "2"},
                                                  "source_dist_interval": {"value": "30"}}, reads["FlowV2"])
    assert problems == ["lacks <end_actor_flow> (x/y/z), which FlowV2 reads unconditionally",
                        "<source_dist_interval> lacks from, to (its class reads from/to)",
                        "<start_actor_flow> lacks z (its class reads x/y/z)"]


def test_the_catalogue_names_what_every_type_reads_in_shapes_the_checks_know():
    assert set(PARAMETERS) == set(CATALOGUE)
    for kind, reads in PARAMETERS.items():
        for name, (shape, required) in reads.items():
            assert shape in SHAPE_KEYS and isinstance(required, bool), (kind, name)


def test_a_drift_between_our_catalogue_and_the_classes_fails_naming_the_type_standin_scenarios():
    report = check.Report()
    check.check_scenarios(report, {kind: dict(reads) for kind, reads in PARAMETERS.items()})
    assert not report.failed and f"{len(PARAMETERS)} types" in report.lines[0]
    drifted = {kind: dict(reads) for kind, reads in PARAMETERS.items() if kind != "ParkingExit"}
    drifted["EnterActorFlow"] = {**drifted["EnterActorFlow"], "end_actor_flow": (LOCATION, False)}
    report = check.Report()
    check.check_scenarios(report, drifted)
    assert report.failed
    assert [line.split(":")[1].strip() for line in report.lines] == ["EnterActorFlow", "ParkingExit"]
    assert "end_actor_flow (location)" in report.lines[0] and "no such class" in report.lines[1]


def _read(name: str, shape: str, required: bool) -> str:
    """One line of stand-in scenario source reading parameter `name` as scenario_runner's classes do."""
    if required:
        return (f"convert_dict_to_location(config.other_parameters[{name!r}])" if shape == LOCATION else
                f"config.other_parameters[{name!r}][{SHAPE_KEYS[shape][0]!r}]")
    return (f"get_value_parameter(config, {name!r}, str, 0)" if shape == VALUE else
            f"get_interval_parameter(config, {name!r}, float, 0)")


@pytest.fixture
def standin_trees(tmp_path, monkeypatch):
    """LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT made of the stand-ins, first on sys.path; scenario classes for
    every type of the catalogue reading what it says (the drift check is tested above)."""
    leaderboard, runner = tmp_path / "leaderboard", tmp_path / "scenario_runner"
    shutil.copytree(STANDINS / "leaderboard", leaderboard / "leaderboard")
    shutil.copy(TESTS / "standin_leaderboard_evaluator.py", leaderboard / "leaderboard" / "leaderboard_evaluator.py")
    shutil.copytree(STANDINS / "srunner", runner / "srunner")
    lines = [SCENARIO_SOURCE]
    for kind, reads in PARAMETERS.items():
        body = [_read(name, shape, required) for name, (shape, required) in reads.items()] or ["pass"]
        head = (f"class {kind}(BasicScenario):\n"
                "    def __init__(self, world, ego_vehicles, config, timeout=60):\n        ")
        lines.append(head + "\n        ".join(body))
    (runner / "srunner" / "scenarios").mkdir()
    (runner / "srunner" / "scenarios" / "all.py").write_text("\n\n".join(lines) + "\n")
    for path in (runner, leaderboard):
        monkeypatch.syspath_prepend(str(path))
    yield leaderboard, runner
    for name in [n for n in sys.modules if n.split(".")[0] in ("leaderboard", "srunner", "drivekit_agent")]:
        del sys.modules[name]


def test_our_agent_loads_as_the_evaluator_loads_it_and_the_sensor_rules_agree_standin_leaderboard(standin_trees):
    report = check.Report()
    check.check_agent(report, RigConfig())
    assert not report.failed, report.lines
    assert report.lines[0].startswith("ok    agent: ") and "DriveKitAgent (an AutonomousAgent, track SENSORS)" in \
        report.lines[0]
    assert [line.split(":")[1].strip() for line in report.lines[1:]] == [
        "the rig", "a rear camera at x -2.0, z 2.3", "9 cameras"]
    report = check.Report()
    check.check_agent(report, RigConfig(cameras=(CameraConfig(name="far", x=2.9, z=1.0),)))
    assert report.failed and report.lines[1].startswith("FAIL  sensors: the rig: Illegal sensor extrinsics")


def test_the_evaluators_own_argparse_reads_our_command_line_as_meant_standin_evaluator(standin_trees):
    leaderboard, runner = standin_trees
    report = check.Report()
    check.check_argv(report, leaderboard, runner)
    assert report.lines == ["ok    argv: the evaluator's argparse reads our 14 flags as meant (--resume off)"]
    parser = check.evaluator_flags(leaderboard)
    assert parser.parse_args(["--routes=r.xml", "--agent=a.py", "--resume=False"]).resume is True  # why we never


def _z_of_road(cmap, x: float, y: float, z: float) -> float:
    wp = cmap.get_waypoint(carla.Location(x, y, z), project_to_road=True, lane_type=carla.LaneType.Driving)
    return float(wp.transform.location.z)


@pytest.fixture(scope="module")
def town03_routes(tmp_path_factory, carla_towns):
    """Route files of our generator on Town03: EnterActorFlow, EnterActorFlowV2, HazardAtSideLaneTwoWays, then
    three without --scenarios; the folder they are in and the town's carla.Map."""
    xodr, folder = carla_towns / "Town03.xodr", tmp_path_factory.mktemp("town03")
    files = generate_routes(str(xodr), 3, str(folder / "routes"), seed=2, min_length=150.0, max_length=400.0,
                            scenarios="EnterActorFlow,EnterActorFlowV2,HazardAtSideLaneTwoWays")
    files += generate_routes(str(xodr), 3, str(folder / "plain"), seed=9, min_length=150.0, max_length=400.0)
    return files, folder, carla.Map("Town03", xodr.read_text())


def test_generated_routes_carry_the_roads_z_and_every_parameter_their_class_reads_standin_route_parser(
        tmp_path, town03_routes, standin_trees):
    """On Town03 (roads from -0.9 to 8.4 m): waypoints and triggers at the road's z; EnterActorFlow's flow from a
    lane entering its junction to its exit on the route; routes without --scenarios typed by a class that exists.
    The route parser's stand-in then finds every parameter each class reads and every trigger on its route; a
    trigger moved off the route and an old-style file fail."""
    files, folder, cmap = town03_routes
    heights = []
    for path in files:
        (route,) = read_routes(path)
        if not route.scenarios:  # without --scenarios, a straight first junction: no scenario
            assert path.is_relative_to(folder / "plain") and path.parent.name == "NoScenario"
        for block in route.scenarios:
            assert block["type"] in PARAMETERS and not check.scenario_problems(block["type"], block["params"],
                                                                                PARAMETERS[block["type"]])
        for x, y, z in route.waypoints:
            assert abs(z - _z_of_road(cmap, x, y, z)) <= 0.06, (path, x, y, z)
        heights += route.waypoints[:, 2].tolist()
        if not route.scenarios:
            continue
        x, y, z, _ = block["trigger"]
        assert abs(z - _z_of_road(cmap, x, y, z)) <= 0.06
        if block["type"].startswith("EnterActorFlow"):
            p = block["params"]
            start, end = (np.array([float(p[k][a]) for a in "xyz"]) for k in ("start_actor_flow", "end_actor_flow"))
            dense = RoutePlanner(cmap).trace(route.waypoints)
            assert np.hypot(*(dense.xy - end[:2]).T).min() < 1.5, "the flow ends on the ego's route"
            assert np.hypot(*(dense.xy - start[:2]).T).min() > 5.0, "the flow starts off it"
            wp = cmap.get_waypoint(carla.Location(*start.tolist()))
            assert math.dist((wp.transform.location.x, wp.transform.location.y), start[:2]) < 0.2
        elif path.is_relative_to(folder / "plain"):
            assert CATALOGUE[block["type"]].kind == JUNCTION
    assert max(heights) > 1.0, "Town03's routes ran on the flat only: the z check saw nothing"

    report = check.Report()
    check.check_routes(report, files, {k: dict(v) for k, v in PARAMETERS.items()}, "ours")
    assert not report.failed and report.lines[0].startswith("ok    routes: 6 route files (ours) parse"), report.lines

    (route,) = read_routes(files[0])  # its trigger 4 m aside: the leaderboard would ignore the scenario
    route.scenarios[0]["trigger"][1] += 4.0
    shifted = files[0].with_name("shifted.xml")
    write_route(shifted, route)
    report = check.Report()
    check.check_routes(report, [shifted], {k: dict(v) for k, v in PARAMETERS.items()}, "shifted")
    assert report.lines == [f"FAIL  routes: {shifted}: RouteScenario_0 scenario 'EnterActorFlow_1' (EnterActorFlow): "
                            "its trigger point is off the route as the leaderboard traces it "
                            "(RouteParser.is_scenario_at_route): it would ignore the scenario",
                            # (a CARLA run does not trace routes before it starts; the embedded world skips a
                            # trigger only beyond 10 m)
                            f"FAIL  routes: {shifted}: our checks before a CARLA run (read_routes, check_route) "
                            "accept it"]

    old = tmp_path / "old.xml"  # as the generator wrote them before: no flow ends, a straight junction type
    (route,) = read_routes(files[0])
    route.scenarios[0]["params"] = {}
    write_route(old, route)
    old.write_text(old.read_text().replace('type="EnterActorFlow"', 'type="SignalizedJunctionStraight"'))
    report = check.Report()
    check.check_routes(report, [old], {k: dict(v) for k, v in PARAMETERS.items()}, "old")
    assert report.failed and "no class of srunner/scenarios is called SignalizedJunctionStraight" in report.lines[0]


class _Spawns:
    """A stand-in scenario class that builds: a bicycle `distance` metres (else 10) ahead of its trigger on its lane,
    and an ActorFlow from the trigger's lane to 30 m ahead (scenario_runner's signature)."""

    def __init__(self, world, ego_vehicles, config, timeout=60):
        from srunner.scenariomanager.carla_data_provider import CarlaDataProvider

        wp = CarlaDataProvider.get_map().get_waypoint(config.trigger_points[0].location)
        ahead = wp.next(float(config.other_parameters.get("distance", {"value": 10})["value"]))[0]
        CarlaDataProvider.request_new_actor("vehicle.diamondback.century", ahead.transform)
        ActorFlow(wp, wp.next(30.0)[0], [15, 25], actor_speed=8.0)


class _Raises:
    """A stand-in scenario class that raises what HazardAtSideLaneTwoWays' does without a lane on the left."""

    def __init__(self, world, ego_vehicles, config, timeout=60):
        raise ValueError("Couldnt find a left lane to spawn the opposite traffic")


class ActorFlow:
    """Stand-in of scenario_runner's ActorFlow behaviour (its arguments)."""

    def __init__(self, source_wp, sink_wp, spawn_dist_interval, sink_dist=2, actor_speed=20 / 3.6,
                 initial_actors=False, initial_junction=False, name="ActorFlow"):
        self.source, self.sink = source_wp, sink_wp


def test_each_scenario_block_is_built_with_its_class_spawns_and_flows_recorded_standin_scenarios(
        town03_routes, standin_trees):
    """check_build over the Town03 routes (a towns/ folder beside them): a class that raises is a FAIL naming the
    file, route, block, type and error; one that spawns builds, its bicycle and its flow in the record."""
    files, folder, cmap = town03_routes
    runner = standin_trees[1]
    hazard = next(f for f in files if f.parent.name == "HazardAtSideLaneTwoWays")
    classes = {k: _Spawns for k in PARAMETERS}
    report = check.Report()
    check.check_build(report, files, runner, "ours", classes)
    blocks = sum(len(read_routes(f)[0].scenarios) for f in files)
    assert report.lines == [f"ok    build: {blocks} scenario blocks of 6 route files (ours) built with their classes "
                            f"of {runner} without an error"], report.lines
    report = check.Report()
    check.check_build(report, [hazard], runner, "ours", {**classes, "HazardAtSideLaneTwoWays": _Raises})
    assert report.lines == [f"FAIL  build: {hazard}: RouteScenario_2 scenario 'HazardAtSideLaneTwoWays_1' "
                            "(HazardAtSideLaneTwoWays): its class raises ValueError: Couldnt find a left lane to "
                            "spawn the opposite traffic: the leaderboard would skip it (\"Skipping scenario ... due "
                            "to setup error\")"]

    from leaderboard.utils.route_parser import RouteParser

    (config,) = RouteParser.parse_routes_file(str(hazard))
    (block,) = scenario_build.Builder(cmap, {"HazardAtSideLaneTwoWays": _Spawns}).build_route(config, {"file": "h"})
    x, y, z, yaw = read_routes(hazard)[0].scenarios[0]["trigger"]
    distance = float(config.scenario_configs[0].other_parameters["distance"]["value"])
    ahead = cmap.get_waypoint(carla.Location(x, y, z)).next(distance)[0].transform
    assert block["error"] is None and block["stopped"] is None and block["type"] == "HazardAtSideLaneTwoWays"
    (bike,) = block["actors"]
    assert bike["blueprint"] == "vehicle.diamondback.century" and bike["kind"] == "vehicle"
    assert bike["base_type"] == "bicycle" and bike["role"] == "scenario" and bike["placed_by"] == "spawn"
    assert math.dist((bike["x"], bike["y"]), (ahead.location.x, ahead.location.y)) < 0.01
    source, sink = cmap.get_waypoint(carla.Location(x, y, z)), None
    sink = source.next(30.0)[0].transform.location
    (flow,) = block["flows"]  # recorded by wrapping ActorFlow in the class's module while it is built
    assert flow["behaviour"] == "ActorFlow" and flow["speed"] == 8.0 and flow["interval"] == [15.0, 25.0]
    assert math.dist(flow["source"][:2], (source.transform.location.x, source.transform.location.y)) < 0.01
    assert math.dist(flow["sink"][:2], (sink.x, sink.y)) < 0.01


def test_carla_check_passes_over_the_standin_trees_and_fails_on_an_old_route_file_standin_leaderboard(
        tmp_path, carla_towns, standin_trees):
    """The command as the image runs it: its lines, its verdict, its exit status (our routes generated on Town10HD)."""
    leaderboard, runner = standin_trees
    env = {"LEADERBOARD_ROOT": str(leaderboard), "SCENARIO_RUNNER_ROOT": str(runner), "CARLA_ROOT": "",
           "DRIVEKIT_CARLA_TOWNS": str(carla_towns), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = run_tool(PYTHON, "-m", "tools.collect", "carla-check", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[1:-1]] == [
        "ok    agent", *["ok    sensors"] * 3, "ok    scenarios", "ok    routes", "ok    build", "ok    argv",
        *["ok    checkpoint"] * 2]
    assert "26 route files (ours on Town10HD: one per placeable type and 4 without --scenarios)" in lines[6]
    assert lines[7].startswith("ok    build: ") and f"built with their classes of {runner} without an error" in lines[7]
    assert lines[-1].startswith("carla-check passed (0 failed of 10, ")
    old = tmp_path / "old" / "r.xml"  # a straight junction type, as the generator wrote them before
    old.parent.mkdir()
    old.write_text("<routes><route id='0' town='Town10HD'><waypoints><position x='1' y='2' z='0'/>"
                   "<position x='9' y='2' z='0'/></waypoints><scenarios><scenario name='S_1' "
                   "type='SignalizedJunctionStraight'><trigger_point x='1' y='2' z='0' yaw='0'/></scenario>"
                   "</scenarios></route></routes>")
    proc = run_tool(PYTHON, "-m", "tools.collect", "carla-check", "--routes", str(old.parent), env=env)
    assert proc.returncode == 1
    assert f"FAIL  routes: {old}: RouteScenario_0 scenario 'S_1' (SignalizedJunctionStraight): no class of " \
           "srunner/scenarios is called SignalizedJunctionStraight" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("carla-check FAILED (1 failed of 10, ")


def test_carla_check_without_the_roots_is_one_line_naming_the_variable(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LEADERBOARD_ROOT": "", "SCENARIO_RUNNER_ROOT": ""}
    proc = run_tool(PYTHON, "-m", "tools.collect", "carla-check", env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("collect: carla-check: LEADERBOARD_ROOT is not set; clone ") and \
        proc.stderr.count("\n") == 1, proc.stderr
    (tmp_path / "lb" / "leaderboard").mkdir(parents=True)
    (tmp_path / "lb" / "leaderboard" / "leaderboard_evaluator.py").write_text("")
    proc = run_tool(PYTHON, "-m", "tools.collect", "carla-check", env={**env, "LEADERBOARD_ROOT": str(tmp_path / "lb"),
                                                                       "SCENARIO_RUNNER_ROOT": str(tmp_path)})
    assert proc.returncode == 2 and f"SCENARIO_RUNNER_ROOT={tmp_path} has no srunner/" in proc.stderr


def test_the_carla_image_runs_the_check_at_build_time():
    definition = (TESTS.parent / "containers" / "carla.def").read_text()
    test = definition.split("%test", 1)[1].split("\n%", 1)[0]
    assert "python -m tools.collect carla-check" in test

