"""The expert (tools/expert): on a real CARLA town in the embedded world, and alone, in a stand-in world.

The stand-in world (`StandInWorld`) is a few boxes and lights moved by the test around a kinematic bicycle
(tools.collect.sim.vehicle): the expert reads only a WorldView, so this is all it needs to be tested on one
behaviour at a time (stop for a red light, wait behind an obstacle then pass it, yield to a crossing car).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import PYTHON, run_tool

from tools.collect.sim.vehicle import Bicycle
from tools.collect.town import Town, make_town
from tools.dataset import results
from tools.dataset import semantics as sem
from tools.dataset.geometry import boxes_overlap
from tools.dataset.layout import Layout
from tools.expert.expert import Expert
from tools.expert.planner import RoutePlanner
from tools.expert.state import Box, Light, Snapshot


def _route_file(path: Path, town: str, points: list[tuple[float, float]]) -> Path:
    positions = "".join(f'<position x="{x:.2f}" y="{y:.2f}" z="0.0"/>' for x, y in points)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<routes><route id="0" town="{town}"><waypoints>{positions}</waypoints></route></routes>')
    return path


def test_expert_drives_a_real_town_route_of_two_far_apart_waypoints_to_its_last_waypoint(carla_towns, tmp_path):
    """Town10HD, a 180 to 200 m route through a junction given by its two end points only: SUMO's driver used to
    end such runs Failed at 84 to 86% (its SUMO route ended early); the expert follows the dense route to its end."""
    import carla

    town = Town(carla_towns / "Town10HD.xodr")
    planner = RoutePlanner(town.carla_map)
    chosen = None
    for wp in town.carla_map.generate_waypoints(20.0):
        if wp.is_junction:
            continue
        ahead = wp.next(184.0)
        if not ahead:
            continue
        a, b = wp.transform.location, ahead[0].transform.location
        dense = planner.trace(np.array([[a.x, a.y], [b.x, b.y]]))
        if 175.0 < dense.length < 200.0 and dense.junction.any() and math.hypot(b.x - a.x, b.y - a.y) > 100.0:
            chosen = [(a.x, a.y), (b.x, b.y)]
            break
    assert chosen is not None, "no two-point route of about 184 m through a junction in Town10HD"
    assert isinstance(town.carla_map, carla.Map)
    route = _route_file(tmp_path / "routes" / "far.xml", "Town10HD", chosen)
    root = tmp_path / "root"
    proc = run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route, "--root", root, "--towns", carla_towns,
                    "--record=False")
    assert proc.returncode == 0, proc.stderr
    layout = Layout(root)
    (key,) = list(layout.iter_runs())
    record = json.loads(layout.result_path(key).read_text())["_checkpoint"]["records"][0]
    assert record["status"] in (results.PERFECT, results.COMPLETED), record
    assert record["scores"]["score_route"] == 100.0
    assert not layout.frame_paths(key)  # --record=False drives without writing frames


# --------------------------------------------------------------------------------- the stand-in world


class StandInWorld:
    """A WorldView (tools.expert.expert) made by the test: the ego is a bicycle moved by the expert's control,
    the other actors move as the test says. Not a simulator: only what the expert reads."""

    def __init__(self, ego: Bicycle, dt: float = 0.05, speed_limit: float = 12.0):
        self.ego, self.dt, self.limit = ego, dt, speed_limit
        self.time = 0.0
        self.actors: list[Box] = []
        self.lights: list[Light] = []

    def ego_box(self) -> Box:
        e = self.ego
        return Box(id=0, cls=sem.CAR, x=e.x, y=e.y, z=0.75, yaw=e.yaw, length=4.9, width=2.1, height=1.5, speed=e.speed)

    def snapshot(self) -> Snapshot:
        return Snapshot(time=self.time, ego=self.ego_box(), actors=list(self.actors), lights=list(self.lights))

    def speed_limit(self) -> float:
        return self.limit

    def drive(self, expert: Expert, seconds: float, each=None) -> list:
        decisions = []
        for _ in range(round(seconds / self.dt)):
            d = expert.step(self)
            decisions.append(d)
            self.ego.step(d.control, self.dt)
            self.time += self.dt
            if each:
                each(self)
        return decisions


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """A straight 2 x 2-lane road of 400 m (a 2 x 2 grid town of 400 m blocks): its carla.Map and a dense route
    along one lane, away from the junctions."""
    xodr = make_town(tmp_path_factory.mktemp("straight") / "straight.xodr", grid="2x2", lanes=2, block=400.0)
    town = Town(xodr)
    lanes = [w for w in town.carla_map.generate_waypoints(5.0) if not w.is_junction and w.lane_id in (-1, 1)]
    start = max(lanes, key=lambda w: len(w.next_until_lane_end(5.0)))
    path = [start] + start.next_until_lane_end(5.0)
    pts = np.array([[w.transform.location.x, w.transform.location.y] for w in path])
    dense = RoutePlanner(town.carla_map).trace(pts[[5, -6]])
    assert dense.length > 250 and not dense.junction.any()
    return town, dense


def _at(dense, s: float) -> tuple[float, float, float]:
    x, y = (float(np.interp(s, dense.s, dense.xy[:, i])) for i in (0, 1))
    return x, y, float(dense.yaw[int(np.searchsorted(dense.s, s))])


def _start(dense) -> Bicycle:
    x, y, yaw = _at(dense, 3.0)
    return Bicycle(x=x, y=y, yaw=yaw)


def _distance_on_route(dense, box: Box) -> float:
    return float(dense.s[int(np.hypot(dense.xy[:, 0] - box.x, dense.xy[:, 1] - box.y).argmin())])


def test_expert_stops_before_a_red_light_and_goes_on_green(straight):
    town, dense = straight
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 100.0)
    world.lights = [Light(id="t:0", x=x, y=y, yaw=yaw, width=3.2, state="red")]
    expert = Expert(dense, world.dt, town.carla_map)
    decisions = world.drive(expert, 30.0)
    front = _distance_on_route(dense, world.ego_box()) + 4.9 / 2
    assert world.ego.speed < 0.1 and 95.0 < front < 100.0, (front, world.ego.speed)
    assert decisions[-1].reason == "light" and decisions[-1].light == {"id": "t:0", "distance": pytest.approx(
        100.0 - front, abs=1.5), "state": "red"}
    world.lights = [Light(id="t:0", x=x, y=y, yaw=yaw, width=3.2, state="green")]
    world.drive(expert, 10.0)
    assert _distance_on_route(dense, world.ego_box()) > 110.0


def test_expert_waits_behind_an_obstacle_then_passes_it_in_the_next_lane_without_touching_it(straight):
    town, dense = straight
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 80.0)
    parked = Box(id=7, cls=sem.CAR, x=x, y=y, z=0.75, yaw=yaw, length=4.6, width=1.9, height=1.5, speed=0.0)
    world.actors = [parked]
    expert = Expert(dense, world.dt, town.carla_map)
    touched = []

    def check(w: StandInWorld) -> None:
        e = w.ego_box()
        touched.append(bool(boxes_overlap(np.array([e.x, e.y, e.yaw, e.length, e.width]),
                                          np.array([x, y, yaw, 4.6, 1.9]))))

    decisions = world.drive(expert, 40.0, check)
    reasons = [d.reason for d in decisions]
    assert "leader" in reasons  # it first stops behind the obstacle
    stopped = [d for d in decisions if d.reason == "leader" and d.leader and d.leader["id"] == 7]
    assert stopped and min(d.leader["gap"] for d in stopped) > 1.0
    assert _distance_on_route(dense, world.ego_box()) > 110.0, "the ego did not get past the obstacle"
    assert not any(touched)
    lateral = np.hypot(*(np.array(_at(dense, _distance_on_route(dense, world.ego_box()))[:2])
                         - [world.ego.x, world.ego.y]))
    assert lateral < 0.8, "the ego is not back in its lane after passing"


def test_expert_yields_to_a_car_crossing_its_path(straight):
    """The constant-velocity forecast sees the conflict seconds ahead: the ego brakes before the crossing car
    is in its lane (reason "collision"), lets it pass, and goes on."""
    town, dense = straight
    ego = _start(dense)
    ego.speed = 10.0
    world = StandInWorld(ego)
    x, y, yaw = _at(dense, 60.0)
    c, s = math.cos(math.radians(yaw + 90)), math.sin(math.radians(yaw + 90))
    # A car 40 m to the side of the route at 60 m, crossing it at 8 m/s: it gets there when the ego would.
    crossing = {"x": x - 40 * c, "y": y - 40 * s}
    expert = Expert(dense, world.dt, town.carla_map)
    hits = []

    def move(w: StandInWorld) -> None:
        crossing["x"] += 8.0 * c * w.dt
        crossing["y"] += 8.0 * s * w.dt
        box = Box(id=3, cls=sem.CAR, x=crossing["x"], y=crossing["y"], z=0.75, yaw=yaw + 90, length=4.6, width=1.9,
                  height=1.5, speed=8.0)
        w.actors = [box]
        e = w.ego_box()
        hits.append(bool(boxes_overlap(np.array([e.x, e.y, e.yaw, e.length, e.width]),
                                       np.array([box.x, box.y, box.yaw, box.length, box.width]))))

    move(world)
    decisions = world.drive(expert, 20.0, move)
    assert any(d.reason == "collision" and "vehicle 3" in d.detail for d in decisions)
    assert not any(hits)
    assert _distance_on_route(dense, world.ego_box()) > 80.0  # and then it went on


def test_the_expert_imports_nothing_of_sumo():
    """The same expert will drive in CARLA: importing it (and its controllers) loads no SUMO module."""
    code = ("import sys, tools.expert.expert, tools.expert.control; "
            "bad = sorted(m for m in sys.modules if 'sumo' in m.lower() or m == 'traci'); print(bad); "
            "sys.exit(1 if bad else 0)")
    proc = run_tool(PYTHON, "-c", code)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def stop_sign_route(carla_towns):
    """Town10HD, a route from 20 to 30 m before a stop sign's line to 40 m past it: its carla.Map, the dense
    route, and the line's distance along it."""
    from tools.expert.planner import STOP_SIGN, stop_signs

    town = Town(carla_towns / "Town10HD.xodr")
    for wp in town.carla_map.generate_waypoints(5.0):
        marks = [m for m in wp.get_landmarks_of_type(30.0, STOP_SIGN, False) if 20.0 < m.distance < 30.0]
        if marks and not wp.is_junction:
            end = wp.next(marks[0].distance + 40.0)[0]
            a, b = wp.transform.location, end.transform.location
            dense = RoutePlanner(town.carla_map).trace(np.array([[a.x, a.y], [b.x, b.y]]))
            lines = stop_signs(dense, town.carla_map)
            if len(lines) == 1:
                return town, dense, float(lines[0])
    raise AssertionError("no route through a stop sign in Town10HD")


def test_expert_stands_still_at_a_stop_sign_then_goes_on(stop_sign_route):
    town, dense, line = stop_sign_route
    world = StandInWorld(_start(dense))
    expert = Expert(dense, world.dt, town.carla_map)
    stood = []

    def watch(w: StandInWorld) -> None:
        front = _distance_on_route(dense, w.ego_box()) + 4.9 / 2
        if w.ego.speed < 0.1 and w.time > 1.0:
            stood.append(front)

    decisions = world.drive(expert, 25.0, watch)
    assert any(d.reason == "stop_sign" for d in decisions)
    assert stood and all(line - 4.0 < f < line + 0.5 for f in stood), (line, stood[:3], stood[-3:])
    assert _distance_on_route(dense, world.ego_box()) > line + 20.0  # and it went on


def test_the_referee_counts_a_stop_sign_run_and_not_a_stop(stop_sign_route):
    from tools.collect.config import CollectSettings
    from tools.collect.referee import Referee
    from tools.collect.sim.world import StepEvents

    town, dense, line = stop_sign_route
    for stops_there, expected in ((True, 0), (False, 1)):
        referee = Referee(dense, CollectSettings(), np.array([line]))
        t = 0.0
        for s in np.arange(2.0, line + 10.0, 0.4):
            x, y, _ = _at(dense, float(s))
            speed = 0.0 if stops_there and abs(s - (line - 3.0)) < 0.3 else 8.0
            referee.update(t, np.array([x, y]), speed, StepEvents())
            t += 0.05
        assert len(referee.infractions["stop_infraction"]) == expected


@pytest.mark.parametrize("stop", [False, True])
def test_stop_on_infraction_ends_an_embedded_run_at_its_first_infraction_as_failed(town_xodr, short_routes, stop):
    """The ego drives the whole route and collides with a vehicle on the way: without --stop-on-infraction the run
    goes on to the end, Completed with the collision; with it, the referee ends the run at the collision (the
    drive loop stops when `status` is set), Failed with the collision in its record."""
    from tools.collect.config import CollectSettings
    from tools.collect.referee import Referee
    from tools.collect.routes import read_routes
    from tools.collect.sim.world import StepEvents

    town = Town(town_xodr)
    route_file = sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts)[0]
    dense = RoutePlanner(town.carla_map).trace(read_routes(route_file)[0].waypoints)
    referee = Referee(dense, CollectSettings(stop_on_infraction=stop))
    t, s, ticks = 0.0, 0.0, 0
    while referee.status is None and not referee.arrived:  # the drive loop's condition
        x, y, _ = _at(dense, min(s, dense.length))
        events = StepEvents(collisions=[(42, "vehicle")] if ticks == 100 else [])
        referee.update(t, np.array([x, y]), 8.0, events)
        t, s, ticks = t + 0.05, s + 0.4, ticks + 1
    if referee.arrived and referee.status is None:  # as the drive loop ends an arrived run
        referee.index = len(dense.s) - 1
    assert len(referee.infractions["collisions_vehicle"]) == 1
    if stop:
        assert ticks == 101 and referee.final_status() == results.FAILED and referee.completion < 50.0
        assert referee.stopped.startswith("collisions_vehicle: Agent collided against object with type=vehicle")
    else:
        assert referee.arrived and referee.final_status() == results.COMPLETED and referee.stopped is None


def test_an_ego_standing_longer_than_sumos_jam_time_stays_where_it_is(town_xodr, short_routes):
    """SUMO teleports a vehicle that stood 60 s (--time-to-teleport): the world puts its ego back at once, where
    the bicycle is, and traffic keeps seeing it."""
    from tools.collect.routes import read_routes
    from tools.collect.sim.world import EGO, SumoWorld
    from tools.expert.control import Control

    town = Town(town_xodr)
    route_file = sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]
    dense = RoutePlanner(town.carla_map).trace(read_routes(route_file)[0].waypoints)
    world = SumoWorld(town, dense, seed=1, vehicles=10, sim_hz=20)
    try:
        start = (world.ego.x, world.ego.y)
        for _ in range(int(75 * 20)):
            world.step(Control(brake=1.0))
            assert EGO in world.ls.vehicle.getIDList()
        assert (world.ego.x, world.ego.y) == start
        assert world._ego_adds == 2  # SUMO did take it out once, and it was put back
        fx, fy = world.ls.vehicle.getPosition(EGO)
        front = town.carla_to_sumo(np.array([start[0], start[1]]))
        assert math.hypot(fx - front[0], fy - front[1]) < EGO_HALF_LENGTH + 0.5
        assert world.snapshot().actors  # the context subscription came back with it
    finally:
        world.close()


EGO_HALF_LENGTH = 4.9 / 2


def test_no_background_vehicle_starts_on_or_just_behind_the_ego(town_xodr, short_routes):
    """Dense traffic: whatever SUMO placed within START_CLEAR_M behind the ego is taken out before the run starts
    (it would drive into the standing ego), and the world steps on."""
    from tools.collect.routes import read_routes
    from tools.collect.sim.world import START_CLEAR_M, SumoWorld
    from tools.expert.control import Control

    town = Town(town_xodr)
    for route_file in sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name):
        dense = RoutePlanner(town.carla_map).trace(read_routes(route_file)[0].waypoints)
        world = SumoWorld(town, dense, seed=3, vehicles=250, sim_hz=20)
        try:
            e = world.ego
            c, s = math.cos(math.radians(e.yaw)), math.sin(math.radians(e.yaw))
            for a in world.snapshot().actors:
                along, across = (a.x - e.x) * c + (a.y - e.y) * s, -(a.x - e.x) * s + (a.y - e.y) * c
                assert not (-START_CLEAR_M < along < 4.9 and abs(across) < 2.5), (a, along, across)
            for _ in range(20):
                assert not world.step(Control(brake=1.0)).collisions
        finally:
            world.close()
