"""Leaderboard 2.0 scenarios in the embedded world (tools/collect/sim/scenarios.py): route files with scenario
blocks, where the generator places them, and what happens on the road when the expert drives them in the
real SUMO world: obstacles passed, a walker yielded to, a red-light runner, each labelled in every sensor."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import PYTHON, REPO, run_bin, run_tool

from tools.collect.base.route_gen import generate_routes
from tools.collect.base.routes import Route, read_routes, write_route
from tools.collect.base.scenario_types import (
    CATALOGUE,
    EXTENT_M,
    JUNCTION,
    JUNCTION_SIDES,
    NAME_ONLY,
    OBSTACLE,
    PASS_ROOM_M,
    PEDESTRIAN,
    PLACEABLE,
    catalogue_markdown,
    check_params,
    junction_side,
)
from tools.collect.base.town import Town
from tools.collect.sim.scenarios import LEAVE_SPACE_M, Active, Scenarios
from tools.dataset import semantics as sem
from tools.dataset.frames import read_boxes, read_frame
from tools.dataset.layout import Layout
from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.results import SUCCESS_STATUSES
from tools.expert.lanes import lane_at
from tools.expert.planner import RoutePlanner
from tools.expert.route import DenseRoute, turn_option
from tools.expert.state import Box

#: Every scenario type of the leaderboard 2.0 route files (data/routes_training.xml, routes_devtest.xml) and
#: scenario_runner's route scenarios at CARLA 0.9.16.
LEADERBOARD_TYPES = (
    "Accident", "AccidentTwoWays", "BlockedIntersection", "ConstructionObstacle", "ConstructionObstacleTwoWays",
    "ControlLoss", "CrossingBicycleFlow", "DynamicObjectCrossing", "EnterActorFlow", "EnterActorFlowV2",
    "HardBreakRoute", "HazardAtSideLane", "HazardAtSideLaneTwoWays", "HighwayCutIn", "HighwayExit",
    "InterurbanActorFlow", "InterurbanAdvancedActorFlow", "InvadingTurn", "MergerIntoSlowTraffic",
    "MergerIntoSlowTrafficV2", "NonSignalizedJunctionLeftTurn", "NonSignalizedJunctionRightTurn",
    "OppositeVehicleRunningRedLight", "OppositeVehicleTakingPriority", "ParkedObstacle", "ParkedObstacleTwoWays",
    "ParkingCrossingPedestrian", "ParkingCutIn", "ParkingExit", "PedestrianCrossing", "PriorityAtJunction",
    "SignalizedJunctionLeftTurn", "SignalizedJunctionRightTurn", "StaticCutIn", "VehicleOpensDoorTwoWays",
    "VehicleTurningRoute", "VehicleTurningRoutePedestrian", "YieldToEmergencyVehicle",
)
#: What the driven fixture places on the test grid: an obstacle, a walker, a red-light runner.
DRIVEN = ("Accident", "DynamicObjectCrossing", "OppositeVehicleRunningRedLight")


def test_the_catalogue_covers_every_leaderboard_type_and_docs_print_it():
    assert set(LEADERBOARD_TYPES) <= set(CATALOGUE)
    for name, t in CATALOGUE.items():
        assert t.handling == NAME_ONLY or t.kind is not None, name
        assert t.handling == "executed" or t.why, f"{name}: {t.handling} without a reason"
    assert catalogue_markdown() in (REPO / "docs" / "scenarios.md").read_text()


def test_scenario_parameters_round_trip_through_a_route_file(tmp_path):
    params = {"distance": {"value": "70"}, "direction": {"value": "left"}, "frequency": {"from": "20", "to": "60"}}
    route = Route("0", "town", np.array([[0.0, 0.0, 0.0], [50.0, 0.0, 0.0]]),
                  [{"name": "AccidentTwoWays_1", "type": "AccidentTwoWays", "trigger": [1.0, 2.0, 0.0, 90.0],
                    "params": params}])
    write_route(tmp_path / "r.xml", route)
    (back,) = read_routes(tmp_path / "r.xml")
    assert back.scenarios == [{"name": "AccidentTwoWays_1", "type": "AccidentTwoWays",
                               "trigger": [1.0, 2.0, 0.0, 90.0], "params": params}]
    assert '<frequency from="20" to="60" />' in (tmp_path / "r.xml").read_text()


def test_the_generator_places_obstacles_on_clear_stretches_and_junction_types_before_their_junction(
        tmp_path, town_xodr):
    types = ("Accident", "ConstructionObstacle", "DynamicObjectCrossing", "SignalizedJunctionLeftTurn",
             "SignalizedJunctionRightTurn", "PedestrianCrossing")
    files = generate_routes(str(town_xodr), count=len(types), out=str(tmp_path), seed=5, scenarios=",".join(types))
    town = Town(town_xodr)
    for path, name in zip(files, types, strict=True):
        (route,) = read_routes(path)
        assert path.parent.name == name and [s["type"] for s in route.scenarios] == [name]
        dense = RoutePlanner(town.carla_map).trace(route.waypoints)
        x, y = route.scenarios[0]["trigger"][:2]
        k = int(np.hypot(dense.xy[:, 0] - x, dense.xy[:, 1] - y).argmin())
        assert math.hypot(dense.xy[k, 0] - x, dense.xy[k, 1] - y) < 2.0, f"{name}: trigger off the route"
        trigger_s = dense.s[k]
        if CATALOGUE[name].kind == JUNCTION or name == "PedestrianCrossing":
            i0, i1 = dense.junction_after(trigger_s)
            assert 5.0 < dense.s[i0] - trigger_s < 40.0, f"{name}: no junction right after the trigger"
            turn = turn_option(float(dense.yaw[i0 - 1]), float(dense.yaw[min(i1 + 1, len(dense.s) - 1)]))
            if "LeftTurn" in name:
                assert turn == RoadOption.LEFT, name
            if "RightTurn" in name:
                assert turn == RoadOption.RIGHT, name
        else:  # the site and the room to pass it lie on one stretch without a junction
            distance = float(route.scenarios[0]["params"]["distance"]["value"])
            need = distance + (EXTENT_M.get(name, 0.0) + PASS_ROOM_M if CATALOGUE[name].kind == OBSTACLE else 6.0)
            span = (dense.s >= trigger_s) & (dense.s <= trigger_s + need)
            assert not dense.junction[span].any(), name


@pytest.mark.parametrize("scenarios, message", [
    ("ControlLoss", "cannot place it: a loss of control"),
    ("Accident,NoSuchType", "NoSuchType: the embedded world cannot place it: not a leaderboard 2.0 type"),
])
def test_a_type_the_world_cannot_place_is_refused_in_one_line_before_anything_is_written(tmp_path, town_xodr,
                                                                                        scenarios, message):
    out = tmp_path / "routes"
    r = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", str(town_xodr), "--count", "2", "--out",
                 str(out), "--scenarios", scenarios)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not out.exists()


def test_all_places_every_type_a_real_town_has_a_place_for_and_names_those_it_has_none_for(tmp_path, carla_towns):
    """--scenarios all on Town01 (one lane each way: no accident to pass in the same direction): every route has a
    placeable type, each type once in as many routes as there are types, and the summary names those left out."""
    out = tmp_path / "routes"
    r = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", str(carla_towns / "Town01.xodr"), "--count",
                 str(len(PLACEABLE)), "--out", str(out), "--scenarios", "all", "--seed", "4")
    assert r.returncode == 0, r.stderr
    types = [read_routes(p)[0].scenario for p in out.rglob("*.xml") if "towns" not in p.parts]
    left_out = {t.strip() for t in r.stdout.split("no place in Town01 for ")[1].split(", ")}
    assert {"Accident", "ParkedObstacle", "ConstructionObstacle"} <= left_out
    assert set(types) == set(PLACEABLE) - left_out and len(types) == len(PLACEABLE)


# ----------------------------------------------------------------------------------- driven in the world


@pytest.fixture(scope="module")
def driven(tmp_path_factory, town_xodr) -> Layout:
    """An obstacle, a walker and a red-light runner on the test grid, driven by the expert with frames."""
    d = tmp_path_factory.mktemp("scenarios")
    generate_routes(str(town_xodr), count=len(DRIVEN), out=str(d / "routes"), seed=2, min_length=200,
                    max_length=400, scenarios=",".join(DRIVEN))
    run_bin("collect", str(d / "routes"), "--root", str(d / "root"), "--workers", "2", "--max-attempts", "1",
            check=True, timeout=600)
    return Layout(d / "root")


def _frames(layout: Layout, scenario: str) -> list[tuple[Measurements, dict]]:
    (run,) = [p for p in (layout.root / "data" / scenario).iterdir() if p.is_dir()]
    out = []
    for path in sorted((run / "frames").glob("*.msgpack"), key=lambda p: int(p.stem)):
        frame = read_frame(path)
        out.append((Measurements.from_dict(frame["measurements"]), frame))
    return out


def test_every_scenario_run_finishes_without_infractions(driven):
    results = sorted((driven.root / "results").rglob("*.json"))
    assert len(results) == len(DRIVEN)
    for path in results:
        record = json.loads(path.read_text())["_checkpoint"]["records"][0]
        assert record["status"] in SUCCESS_STATUSES, (path.parent.name, record["status"], record["infractions"])
        assert not any(record["infractions"].values()), (path.parent.name, record["infractions"])


def test_the_expert_passes_the_accident_whose_actors_are_labelled(driven):
    frames = _frames(driven, "Accident")
    running = [(m, f) for m, f in frames if m.scenario]
    assert running and frames[0][0].scenario is None  # measurements say when it runs
    actors = set(running[0][0].scenario["actors"])
    assert len(actors) == 4 and all(m.scenario["type"] == "Accident" for m, _ in running)
    classes = {b.id: b.cls for _, f in running for b in read_boxes(f) if b.id in actors}
    assert sorted(classes.values()) == [sem.CAR, sem.CAR, sem.CAR, sem.STATIC]
    passing = [m for m, _ in running if m.reason == "passing"]
    assert passing and all("vehicle" in m.reason_detail for m in passing)
    # Passing means leaving the lane: the ego's centre a lane width beside the route's centreline.
    offsets = []
    for m in passing:
        (x0, y0), (x1, y1) = m.route[0], m.route[1]
        along = math.hypot(x1 - x0, y1 - y0)
        offsets.append(abs((x1 - x0) * (m.ego_xy[1] - y0) - (y1 - y0) * (m.ego_xy[0] - x0)) / along)
    assert max(offsets) > 2.5


def test_the_walker_is_in_every_sensor_and_the_expert_yields_to_it(driven):
    frames = _frames(driven, "DynamicObjectCrossing")
    running = [(m, f) for m, f in frames if m.scenario]
    walkers = {b.id for _, f in running for b in read_boxes(f) if b.cls == sem.PEDESTRIAN}
    assert len(walkers) == 1
    (walker,) = walkers
    seen = {"semantics": False, "lidar": False, "bev": False}
    for _, f in running:
        s = f["sensors"]
        seen["semantics"] |= bool((s["semantics_front"] == sem.PEDESTRIAN).sum() > 20)
        labels = s["lidar_labels"]
        seen["lidar"] |= bool(((labels[:, 1] == walker) & (labels[:, 0] == sem.PEDESTRIAN)).any())
        seen["bev"] |= bool((s["bev"] == sem.BEV_PEDESTRIAN).any())
    assert all(seen.values()), seen
    moving = [b.speed for _, f in running for b in read_boxes(f) if b.id == walker]
    assert max(moving) > 1.5 and min(moving) == 0.0  # waits on the kerb, crosses, stands on the far side
    yielding = [m for m, _ in running
                if m.reason in ("collision", "leader") and f"pedestrian {walker}" in m.reason_detail]
    assert yielding and min(m.target_speed - m.speed for m in yielding) < -0.5  # it brakes for the walker


def test_the_red_light_runner_is_a_sumo_vehicle_of_the_scenario(driven):
    frames = _frames(driven, "OppositeVehicleRunningRedLight")
    running = [(m, f) for m, f in frames if m.scenario]
    assert running
    actors = {a for m, _ in running for a in m.scenario["actors"]}
    boxes = [b for _, f in running for b in read_boxes(f) if b.id in actors]
    assert len(actors) == 1 and boxes and max(b.speed for b in boxes) > 8.0
    assert all(b.cls == sem.CAR for b in boxes)


def test_each_type_takes_the_directions_its_class_accepts():
    for kind in ("OppositeVehicleRunningRedLight", "OppositeVehicleTakingPriority"):
        assert all(check_params({"direction": {"value": d}}, kind) is None for d in JUNCTION_SIDES)
        assert "must be ref or left or opposite or right" in check_params({"direction": {"value": "up"}}, kind)
    for kind in ("Accident", "ParkedObstacleTwoWays", "DynamicObjectCrossing", "StaticCutIn", "ParkingExit"):
        assert "must be left or right" in check_params({"direction": {"value": "opposite"}}, kind)
    assert check_params({"direction": {"value": "opposite"}}, "ParkingCutIn") is None  # anything but left: right
    assert check_params({"direction": {"value": "up"}}, "HazardAtSideLane") is None  # its class reads none
    # scenario_helper.filter_junction_wp_direction's bands of the entry's yaw minus the ego's
    assert [junction_side(d) for d in (0, 29, 31, 135, 136, 225, 226, 330, 331, -90, -179)] == [
        "ref", "ref", "left", "left", "opposite", "opposite", "right", "right", "ref", "right", "opposite"]


class _PlacingWorld:
    """What Scenarios asks of a world when a scenario starts: boxes placed (add_static), the actors near the ego,
    background vehicles taken out (take_out)."""

    def __init__(self, ego: Box, actors: list[Box] = ()):
        self.time, self.ego, self.placed, self.taken = 0.0, ego, {}, set()
        self.others = list(actors)

    def ego_box(self) -> Box:
        return self.ego

    def actors(self) -> list[Box]:
        return self.others + list(self.placed.values())

    def add_static(self, cls, x, y, yaw, length, width, height, block=False) -> int:
        aid = 100 + len(self.placed)
        self.placed[aid] = Box(aid, cls, x, y, height / 2, yaw, length, width, height)
        return aid

    def take_out(self, ids: set[int]) -> int:
        self.taken |= ids
        return len(ids)

    def box_ids(self, vids: list[str]) -> list[int]:
        return []


def test_a_scenario_leaves_the_egos_lane_ahead_free_of_background_vehicles_as_the_leaderboard_does():
    """LeaveSpaceInFront: the vehicles in the ego's lane between it and 20 m past an obstacle are taken out (one
    queued behind an accident was an obstacle the ego could not pass); beside, behind, oncoming, beyond: kept."""
    xs = np.arange(0.0, 201.0, 1.0)
    route = DenseRoute(np.column_stack([xs, np.zeros_like(xs)]), np.zeros_like(xs), np.zeros(len(xs), dtype=int),
                       xs.copy(), np.zeros(len(xs), dtype=bool))
    car = lambda i, x, y, yaw=0.0: Box(i, sem.CAR, x, y, 0.75, yaw, 4.6, 1.9, 1.5, 5.0)  # noqa: E731
    world = _PlacingWorld(car(0, 20.0, 0.0), [car(1, 45.0, 0.4), car(2, 45.0, 3.5), car(3, 10.0, 0.0),
                                              car(4, 60.0, 0.2, 180.0), car(5, 130.0, 0.0), car(6, 110.0, -0.5, 8.0)])
    scenarios = Scenarios([], route, None, seed=0)
    scenarios._leave_space(Active({"name": "Accident_1"}, CATALOGUE["Accident"], 40.0, site_s=100.0), world, 20.0,
                           100.0 + LEAVE_SPACE_M["Accident"])
    assert world.taken == {1, 6}
    assert set(LEAVE_SPACE_M) <= {n for n, t in CATALOGUE.items() if t.kind in (OBSTACLE, PEDESTRIAN)}


def test_a_two_ways_obstacle_clears_the_oncoming_lane_of_standing_background_traffic():
    """ChangeOppositeBehavior(active=False): SUMO's oncoming traffic queued beside the ego stood there for good and
    the lane to pass in was never free (Bench2Drive route 25845); standing background vehicles in the oncoming lane
    between the ego and past the site go, moving ones, other lanes and beyond stay."""
    xs = np.arange(0.0, 201.0, 1.0)
    route = DenseRoute(np.column_stack([xs, np.zeros_like(xs)]), np.zeros_like(xs), np.zeros(len(xs), dtype=int),
                       xs.copy(), np.zeros(len(xs), dtype=bool))

    def car(i: int, x: float, y: float, yaw: float = 180.0, speed: float = 0.0) -> Box:
        return Box(i, sem.CAR, x, y, 0.75, yaw, 4.6, 1.9, 1.5, speed)

    # CARLA's y points right: the oncoming lane, on the left of a route heading +x, is at y = -3.5.
    world = _PlacingWorld(car(0, 20.0, 0.0, 0.0), [
        car(1, 30.0, -3.5), car(2, 12.0, -3.4), car(3, 60.0, -3.5, speed=8.0), car(4, 60.0, -3.5, 0.0),
        car(5, 40.0, 0.0, 0.0), car(6, 160.0, -3.5), car(7, 110.0, -3.6), car(8, 60.0, 3.5, 0.0)])
    scenarios = Scenarios([], route, None, seed=0)
    active = Active({"name": "AccidentTwoWays_1", "type": "AccidentTwoWays"}, CATALOGUE["AccidentTwoWays"], 40.0,
                    site_s=100.0, state="running")
    scenarios._run(active, world, 20.0)
    assert world.taken == {1, 2, 7}
    world.taken.clear()
    scenarios._run(active, world, 20.0)  # once a second, not every tick
    assert not world.taken


def test_the_parked_car_of_parking_crossing_pedestrian_stands_a_lane_width_beside_the_egos_lane(tmp_path, town_xodr):
    """As scenario_runner parks it (the lane's width to the side of its centre): at the kerb it reached 0.3 m into
    the ego's lane, an obstacle the expert stopped behind for good (Bench2Drive route 18252)."""
    (path,) = generate_routes(str(town_xodr), count=1, out=str(tmp_path), seed=3, scenarios="ParkingCrossingPedestrian")
    (route,) = read_routes(path)
    town = Town(town_xodr)
    dense = RoutePlanner(town.carla_map).trace(route.waypoints)
    scenarios = Scenarios(route.scenarios, dense, town.carla_map, seed=0)
    (a,) = scenarios.items
    x, y = dense.xy[0]
    world = _PlacingWorld(Box(0, sem.CAR, float(x), float(y), 0.75, float(dense.yaw[0]), 4.9, 2.1, 1.5))
    scenarios._start(a, world, 0.0)
    (car,) = [b for b in world.placed.values() if b.cls == sem.CAR]
    k = int(np.hypot(dense.xy[:, 0] - car.x, dense.xy[:, 1] - car.y).argmin())
    width = lane_at(town.carla_map, float(dense.xy[k, 0]), float(dense.xy[k, 1])).lane_width
    lateral = math.hypot(car.x - dense.xy[k, 0], car.y - dense.xy[k, 1])
    assert lateral == pytest.approx(width, abs=0.3) and lateral - car.width / 2 > width / 2


def test_a_bench2drive_route_with_a_red_light_runner_from_the_opposite_side_is_read_and_driven(driven, tmp_path,
                                                                                              town_xodr):
    """Bench2Drive's route 2082 names `direction="opposite"` (accepted by scenario_runner's class): its shape here,
    on the test grid, with the waypoints and trigger of the driven red-light route."""
    (source,) = (driven.root.parent / "routes" / "OppositeVehicleRunningRedLight").glob("*.xml")
    (route,) = read_routes(source)
    x, y, z, yaw = route.scenarios[0]["trigger"]
    positions = "".join(f'<position x="{p[0]:.1f}" y="{p[1]:.1f}" z="{p[2]:.1f}" />' for p in route.waypoints)
    weather = ('<weather cloudiness="5.0" fog_density="60.0" precipitation="0.0" route_percentage="{}" '
               'sun_altitude_angle="-90.0" wetness="0.0" wind_intensity="10.0" />')
    (tmp_path / "towns").mkdir()
    (tmp_path / "towns" / "town.xodr").symlink_to(town_xodr)
    path = tmp_path / "2082.xml"
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?>\n<routes><route id="2082" town="town"><waypoints>'
                    f'{positions}</waypoints><scenarios><scenario name="OppositeVehicleRunningRedLight_1" '
                    f'type="OppositeVehicleRunningRedLight"><trigger_point x="{x:.1f}" y="{y:.1f}" yaw="{yaw:.1f}" '
                    f'z="{z:.1f}" /><direction value="opposite" /></scenario></scenarios><weathers>'
                    f'{weather.format(0)}{weather.format(100)}</weathers></route></routes>\n')
    assert read_routes(path)[0].scenarios[0]["params"] == {"direction": {"value": "opposite"}}
    run_tool(PYTHON, "-m", "tools.collect", "run", "--route", str(path), "--root", str(tmp_path / "root"),
             "--record=false", check=True)
    (result,) = (tmp_path / "root" / "results").rglob("*.json")
    record = json.loads(result.read_text())["_checkpoint"]["records"][0]
    assert record["status"] in SUCCESS_STATUSES and not any(record["infractions"].values()), record
    assert record["meta"]["scenarios"] == {"OppositeVehicleRunningRedLight_1": "done"}
    log = "".join(p.read_text() for p in (tmp_path / "root" / "logs").rglob("attempt-*.log"))
    assert "its adversary enters the junction from the opposite" in log


def test_scenario_frames_go_to_the_scenario_buckets(driven, tmp_path):
    run_bin("build-buckets", str(driven.root), check=True)
    index = (driven.root / "buckets" / "index.json").read_text()
    assert "obstacle_passing" in index and "pedestrian_yielding" in index


def test_placeable_types_are_every_type_with_a_kind():
    assert set(PLACEABLE) == {n for n, t in CATALOGUE.items() if t.kind is not None}
    assert Path(REPO / "docs" / "scenarios.md").is_file()


def test_show_picks_the_frame_with_the_scenario_in_view(driven, tmp_path):
    run = next((driven.root / "data" / "DynamicObjectCrossing").iterdir())
    r = run_tool(PYTHON, "-m", "tools.collect", "show", str(run), "--frame", "scenario", "--out",
                 str(tmp_path / "walker.png"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "walker.png").stat().st_size > 10_000
    r = run_tool(PYTHON, "-m", "tools.collect", "show", str(run), "--frame", "nope")
    assert r.returncode != 0 and "expected a frame index (an integer) or 'scenario'" in r.stderr


@pytest.mark.parametrize("param, message", [
    ('<distance value="far"/>', 'scenario Accident_1: parameter <distance value="far"> is not a number'),
    ('<frequency from="20" to="nan"/>', 'parameter <frequency to="nan"> is not a number'),
    ('<direction value="up"/>', 'parameter <direction value="up"> must be left or right'),
])
def test_a_bad_scenario_parameter_is_one_line_naming_it_and_nothing_runs(tmp_path, town_xodr, param, message):
    (tmp_path / "towns").mkdir()
    (tmp_path / "towns" / "town.xodr").write_bytes(town_xodr.read_bytes())
    route = tmp_path / "r.xml"
    route.write_text('<routes><route id="0" town="town"><waypoints><position x="0" y="0" z="0"/>'
                     '<position x="50" y="0" z="0"/></waypoints><scenarios><scenario name="Accident_1" '
                     f'type="Accident"><trigger_point x="0" y="0" z="0" yaw="0"/>{param}</scenario></scenarios>'
                     '</route></routes>')
    r = run_tool(PYTHON, "-m", "tools.collect", "run", "--route", str(route), "--root", str(tmp_path / "root"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and message in lines[0] and "r.xml: route 0" in lines[0], r.stderr
    assert not (tmp_path / "root").exists()
