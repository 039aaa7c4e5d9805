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

from tools.collect.base.town import Town, make_town
from tools.collect.sim.vehicle import Bicycle
from tools.dataset import results
from tools.dataset import semantics as sem
from tools.dataset.geometry import boxes_overlap
from tools.dataset.layout import Layout
from tools.expert.conflicts import LANE_CHANGES
from tools.expert.expert import LIGHT_STOP_GAP, Expert, stops_for
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


def test_lane_at_finds_the_lane_under_a_point_of_a_town_high_up(carla_towns):
    """Town11 lies about 275 m up. carla.Map.get_waypoint at height 0 put the accident's police car (a metre right
    of the ego's lane centre) on the oncoming lane, so the expert found no lane to pass it in and stood behind it
    until blocked (benchmarks/bench_towns.py, Town11 AccidentTwoWays); the scenarios placed their actors from the
    same wrong lane. lanes.lane_at takes the road's height first."""
    import carla

    from tools.expert.lanes import lane_at

    cmap = Town(carla_towns / "Town11.xodr").carla_map
    start = cmap.get_waypoint(carla.Location(-1812.9, -10183.8, 275.0), project_to_road=True,
                              lane_type=carla.LaneType.Driving)
    assert (start.road_id, start.lane_id) == (405, 1)
    wrong_at_zero = 0
    for wp in [start, *(start.next(float(d))[0] for d in range(2, 40, 2))]:
        loc, rad = wp.transform.location, math.radians(wp.transform.rotation.yaw)
        for off in (-1.0, 1.0):  # a metre to either side of the lane's centre
            x, y = loc.x - off * math.sin(rad), loc.y + off * math.cos(rad)
            found = lane_at(cmap, x, y)
            assert (found.road_id, found.lane_id) == (wp.road_id, wp.lane_id), (x, y)
            at_zero = cmap.get_waypoint(carla.Location(x, y, 0.0), project_to_road=True,
                                        lane_type=carla.LaneType.Driving)
            wrong_at_zero += (at_zero.road_id, at_zero.lane_id) != (wp.road_id, wp.lane_id)
    assert wrong_at_zero > 0  # the stretch is one where height 0 goes wrong


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


def _parked_car(x: float, y: float, yaw: float) -> Box:
    """A standing car (4.6 x 1.9 m) at (x, y) along `yaw`: the obstacle the passing tests put on the route."""
    return Box(id=7, cls=sem.CAR, x=x, y=y, z=0.75, yaw=yaw, length=4.6, width=1.9, height=1.5, speed=0.0)


def _distance_on_route(dense, box: Box) -> float:
    return float(dense.s[int(np.hypot(dense.xy[:, 0] - box.x, dense.xy[:, 1] - box.y).argmin())])


def _lateral(dense, s: float, left: float, heading_offset: float = 0.0, speed: float = 0.0, id: int = 8) -> Box:
    """A car at route distance s, `left` metres left of the route, heading along it (+ heading_offset degrees)."""
    x, y, yaw = _at(dense, s)
    rad = math.radians(yaw)
    return Box(id=id, cls=sem.CAR, x=x + left * math.sin(rad), y=y - left * math.cos(rad), z=0.75,
               yaw=yaw + heading_offset, length=4.6, width=1.9, height=1.5, speed=speed)


def _touches(world: StandInWorld) -> bool:
    e = world.ego_box()
    rows = np.array([[b.x, b.y, b.yaw, b.length, b.width] for b in world.actors])
    return bool(boxes_overlap(np.array([e.x, e.y, e.yaw, e.length, e.width]), rows).any())


def test_expert_stops_before_a_red_light_and_goes_on_green(straight):
    town, dense = straight
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 100.0)
    world.lights = [Light(id="t:0", x=x, y=y, yaw=yaw, width=3.2, state="red")]
    expert = Expert(dense, world.dt, town.carla_map)
    decisions = world.drive(expert, 30.0)
    front = _distance_on_route(dense, world.ego_box()) + 4.9 / 2
    # It stands LIGHT_STOP_GAP before the line, where the camera still sees the light.
    assert world.ego.speed < 0.1 and 100.0 - LIGHT_STOP_GAP - 1.0 < front < 100.0 - LIGHT_STOP_GAP + 0.5, front
    assert decisions[-1].reason == "light" and decisions[-1].light == {"id": "t:0", "distance": pytest.approx(
        100.0 - front, abs=1.5), "state": "red"}
    world.lights = [Light(id="t:0", x=x, y=y, yaw=yaw, width=3.2, state="green")]
    world.drive(expert, 10.0)
    assert _distance_on_route(dense, world.ego_box()) > 110.0


def test_the_expert_stops_for_red_and_for_yellow_only_while_it_can_still_stop_before_the_line():
    # What it obeys is what a frame's light_hazard says (tools.collect.base.recording): the light head's label.
    assert stops_for("red", 3.0, 10.0) and stops_for("red", 60.0, 0.0)
    assert stops_for("yellow", 30.0, 10.0) and not stops_for("yellow", 10.0, 10.0)  # 16.7 m to stop from 10 m/s
    assert not stops_for("green", 10.0, 5.0) and not stops_for("off", 10.0, 5.0)


def test_expert_waits_behind_an_obstacle_then_passes_it_in_the_next_lane_without_touching_it(straight):
    town, dense = straight
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 80.0)
    parked = _parked_car(x, y, yaw)
    world.actors = [parked]
    expert = Expert(dense, world.dt, town.carla_map)
    touched = []
    decisions = world.drive(expert, 40.0, lambda w: touched.append(_touches(w)))
    reasons = [d.reason for d in decisions]
    assert "leader" in reasons  # it first stops behind the obstacle
    stopped = [d for d in decisions if d.reason == "leader" and d.leader and d.leader["id"] == 7]
    assert stopped and min(d.leader["gap"] for d in stopped) > 1.0
    assert _distance_on_route(dense, world.ego_box()) > 110.0, "the ego did not get past the obstacle"
    assert not any(touched)
    lateral = np.hypot(*(np.array(_at(dense, _distance_on_route(dense, world.ego_box()))[:2])
                         - [world.ego.x, world.ego.y]))
    assert lateral < 0.8, "the ego is not back in its lane after passing"


def _town01_road8(carla_towns):
    """Town01, one lane each way: a dense route of 130 m along road 8, no junction on it."""
    import carla

    town = Town(carla_towns / "Town01.xodr")
    wp = town.carla_map.get_waypoint(carla.Location(396.3, 297.3, 0.0))
    a, b = wp.previous(70.0)[0].transform.location, wp.next(60.0)[0].transform.location
    dense = RoutePlanner(town.carla_map).trace(np.array([[a.x, a.y], [b.x, b.y]]))
    assert not dense.junction.any()
    return town, dense


def test_expert_passes_a_bus_standing_on_its_lanes_centre_through_the_oncoming_lane_untouched(carla_towns):
    """Town01, one lane each way: a bus standing on the lane's centre, as SUMO's traffic queues behind an obstacle.
    A millimetre left of the centre it counted as standing left of it, where the oncoming lane is not for
    passing (behind HazardAtSideLaneTwoWays' bicycles the expert stood until blocked): within CENTRED_M of the
    centre it stands on neither side. Stopped 3 m behind it, the ego clipped its corner moving out (Town01
    AccidentTwoWays): behind a standing actor it stops STANDING_GAP back."""
    town, dense = _town01_road8(carla_towns)
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 70.0)
    rad = math.radians(yaw)
    x, y = x + 0.001 * math.sin(rad), y - 0.001 * math.cos(rad)  # a millimetre left of the centre
    bus = Box(id=7, cls=sem.BUS, x=x, y=y, z=1.6, yaw=yaw, length=11.0, width=2.5, height=3.2, speed=0.0)
    world.actors = [bus]
    expert = Expert(dense, world.dt, town.carla_map)
    touched = []
    decisions = world.drive(expert, 40.0, lambda w: touched.append(_touches(w)))
    assert min(d.leader["gap"] for d in decisions if d.leader and d.leader["id"] == 7) > 4.5  # room to steer out
    assert any(d.reason == "passing" for d in decisions)
    assert not any(touched)
    assert _distance_on_route(dense, world.ego_box()) > 100.0, "the ego did not get past the bus"


def test_expert_past_the_obstacle_goes_back_into_its_lane_before_oncoming_cars_that_stopped_for_it(carla_towns):
    """Town01 ParkedObstacleTwoWays: past the parked car, still in the oncoming lane, the oncoming cars had
    stopped for the ego 9 m ahead of it; its gentle ramp back ran into them, so it stood, and they stood, until
    it was blocked. Past the obstacle, with traffic in the way, it goes back on half a ramp."""
    town, dense = _town01_road8(carla_towns)
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 70.0)
    parked = _parked_car(x, y, yaw)
    world.actors = [parked]
    expert = Expert(dense, world.dt, town.carla_map)
    touched = []

    def oncoming_stops(w: StandInWorld) -> None:
        s_ego = _distance_on_route(dense, w.ego_box())
        if len(w.actors) == 1 and expert.passing is not None and s_ego - 4.9 / 2 > 70.0 + 2.3 + 2.0:
            w.actors = [parked, _lateral(dense, s_ego + 11.0, 4.0, 180.0)]
        touched.append(_touches(w))

    world.drive(expert, 45.0, oncoming_stops)
    assert len(world.actors) == 2, "the oncoming car never stopped ahead of the passing ego"
    assert not any(touched)
    assert _distance_on_route(dense, world.ego_box()) > 110.0, "the ego stood in the oncoming lane"


def test_expert_merges_into_slow_traffic_of_its_direction_to_pass_an_obstacle(straight):
    """Town13 Accident: SUMO's cars squeezed past the accident in the next lane, slowly, one after another; the
    whole pass was never free of them, and the expert stood until blocked. Into a lane of its own direction it
    merges in front of a car far enough behind and follows the one ahead."""
    town, dense = straight
    world = StandInWorld(_start(dense))
    x, y, yaw = _at(dense, 60.0)
    parked = _parked_car(x, y, yaw)
    expert = Expert(dense, world.dt, town.carla_map)
    offset = None
    touched = []

    def stream(w: StandInWorld) -> None:  # cars 30 m apart at 4 m/s in the lane to pass in, without end
        nonlocal offset
        if offset is None:
            offset, _ = expert._neighbour_offset(x, y)
        cars = []
        for k in range(12):
            s = (4.0 * w.time + 30.0 * k) % 360.0 - 40.0
            if 0.0 < s < dense.length:
                cars.append(_lateral(dense, s, offset, speed=4.0, id=20 + k))
        w.actors = [parked, *cars]
        touched.append(_touches(w))

    stream(world)
    world.drive(expert, 60.0, stream)
    assert not any(touched)
    assert _distance_on_route(dense, world.ego_box()) > 90.0, "the ego never got past the obstacle"


@pytest.mark.parametrize(("v_car", "behind"), [(14.0, 12.0), (12.0, 8.0)])
def test_expert_lets_a_car_behind_in_the_lane_it_changes_into_go_by_first(straight, v_car, behind):
    """make demo's held-out route NonSignalizedJunctionLeftTurn town_0001: the route moves into the left lane just
    before a junction, a car came up from behind in that lane, and the expert, which left every car behind it to car
    following, moved over in front of it (a vehicle collision, expert DS 90 on the demo's 4 routes). A car behind in
    the lane the route changes into is now in its conflict check: it lets the car by, then changes lanes. Here a
    route on the straight road moves into the lane on its right at about 80 m, the ego at 10 m/s 35 m before it, a
    car in that lane `behind` metres behind the ego at `v_car` (both cases touched the car before)."""
    town, _ = straight
    cmap = town.carla_map
    lanes = [w for w in cmap.generate_waypoints(5.0) if not w.is_junction and w.lane_id == -1]
    start = max(lanes, key=lambda w: len(w.next_until_lane_end(5.0)))
    beside = start.get_right_lane()  # lane -1 has the oncoming lane 1 on its left, lane -2 of its own way on its right
    assert beside is not None and beside.lane_id == -2, "the straight road has two lanes each way"
    xy = lambda w: [w.transform.location.x, w.transform.location.y]  # noqa: E731
    dense = RoutePlanner(cmap).trace(np.array([xy(start.next(20.0)[0]), xy(start.next(100.0)[0]),
                                               xy(beside.next(200.0)[0])]))
    (change,) = np.flatnonzero(np.isin(dense.option, LANE_CHANGES))
    s0 = float(dense.s[change]) - 35.0
    x, y, yaw = _at(dense, s0)
    world = StandInWorld(Bicycle(x=x, y=y, yaw=yaw, speed=10.0))
    lane = np.array([xy(w) for w in [beside, *beside.next_until_lane_end(1.0)]])
    along = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(lane, axis=0).T))])
    q0 = along[np.hypot(lane[:, 0] - x, lane[:, 1] - y).argmin()] - behind
    expert = Expert(dense, world.dt, cmap)
    touched = []

    def drive_by(w: StandInWorld) -> None:
        q = q0 + v_car * w.time
        w.actors = [Box(id=9, cls=sem.CAR, x=float(np.interp(q, along, lane[:, 0])),
                        y=float(np.interp(q, along, lane[:, 1])), z=0.75, yaw=beside.transform.rotation.yaw,
                        length=4.6, width=1.9, height=1.5, speed=v_car)]
        touched.append(_touches(w))

    drive_by(world)
    decisions = world.drive(expert, 15.0, drive_by)
    assert not any(touched)
    assert any(d.reason == "collision" and "vehicle 9" in d.detail for d in decisions)  # it waited for the car
    assert _distance_on_route(dense, world.ego_box()) > dense.s[change] + 40.0, "the ego did not go on"


def test_expert_waits_for_a_car_that_turns_into_the_oncoming_lane_beyond_the_pass(carla_towns):
    """Town10HD ConstructionObstacle(TwoWays): a car driving towards the far end of the pass, off the oncoming
    lane, turned into it at the junction beyond; its straight forecast kept clear of the pass, the ego began it,
    and the two stood face to face until blocked. Through the oncoming lane, a car that can reach the pass's far
    end during the pass, driving towards it, is waited for."""
    town, dense = _town01_road8(carla_towns)
    world = StandInWorld(_start(dense))
    parked = _parked_car(*_at(dense, 70.0))
    world.actors = [parked]
    expert = Expert(dense, world.dt, town.carla_map)
    lane, oncoming = expert._neighbour_offset(parked.x, parked.y)
    assert oncoming, "the test's pass is not through the oncoming lane"
    touched, started = [], []

    def turning_in(w: StandInWorld) -> None:
        # From t = 19 s (the ego has stood behind the obstacle since t = 15), 8 m/s against the route from s = 128,
        # 7 m left of the oncoming lane until s = 110, then into it over 10 m: it turns in beyond the pass's end
        # (about 92 m), unseen by a straight forecast.
        s_car = 128.0 - 8.0 * (w.time - 19.0)
        left = lane + 7.0 * float(np.clip((s_car - 100.0) / 10.0, 0.0, 1.0))
        w.actors = [parked, _lateral(dense, s_car, left, 180.0, 8.0)] if 0.5 < s_car <= 128.0 else [parked]
        touched.append(_touches(w))
        if expert.passing is not None and not started:
            started.append(s_car)

    world.drive(expert, 50.0, turning_in)
    assert not any(touched)
    assert started and started[0] < _distance_on_route(dense, parked), "the pass began before the car went by"
    assert _distance_on_route(dense, world.ego_box()) > 100.0, "the ego never got past the obstacle"


def test_a_car_standing_in_the_egos_own_lane_does_not_keep_it_from_passing(straight):
    """Town15 ConstructionObstacle: on its 3 m lanes the cars queued behind the ego stood 2.6 to 2.8 m from the
    shifted path, and an actor within 3 m of it (centre to centre) kept the pass from starting: the ego stood until
    blocked. An actor keeps off the pass by the two half widths and PASS_SIDE_GAP_M."""
    town, dense = straight
    world = StandInWorld(_start(dense))
    parked = _parked_car(*_at(dense, 60.0))
    world.actors = [parked]
    expert = Expert(dense, world.dt, town.carla_map)
    side, _ = expert._neighbour_offset(parked.x, parked.y)
    queued = []

    def queue_behind(w: StandInWorld) -> None:  # once the ego stands behind the obstacle: a car 0.4 m off centre,
        # towards the lane to pass in (2.8 m from the shifted path on these 3.2 m lanes)
        s_ego = _distance_on_route(dense, w.ego_box())
        if not queued and s_ego > 45.0 and w.ego.speed < 0.1:
            queued.append(_lateral(dense, s_ego - 9.0, math.copysign(0.4, side)))
            w.actors = [parked, queued[0]]

    decisions = world.drive(expert, 40.0, queue_behind)
    assert queued, "the ego never stood behind the obstacle"
    assert any(d.reason == "passing" for d in decisions)
    assert _distance_on_route(dense, world.ego_box()) > 90.0, "the ego never got past the obstacle"


def test_expert_passes_an_obstacle_it_stands_behind_at_a_junctions_exit(carla_towns):
    """Town02 VehicleOpensDoorTwoWays: behind a car standing just past a junction, the ego's centre stood on the
    junction's last route point; the pass was refused as "inside a junction" (its check began 17 m behind the
    obstacle, in the junction the ego had left) and the ego stood until blocked. What lies behind the ego's front
    is driven already: only the route ahead of it must be free of junctions."""
    town = Town(carla_towns / "Town01.xodr")
    dense = RoutePlanner(town.carla_map).trace(np.array([[88.41, 268.33], [184.90, 330.60]]))
    exit_s = float(dense.s[np.flatnonzero(dense.junction)[-1]])
    assert 60.0 < exit_s < dense.length - 80.0
    world = StandInWorld(_start(dense))
    # where the ego stands STANDING_GAP behind it, its centre is a metre short of the junction's exit
    parked = _parked_car(*_at(dense, exit_s - 1.0 + 4.9 / 2 + 5.0 + 4.6 / 2))
    world.actors = [parked]
    expert = Expert(dense, world.dt, town.carla_map)
    touched = []
    decisions = world.drive(expert, 45.0, lambda w: touched.append(_touches(w)))
    assert any(d.reason == "passing" for d in decisions)
    assert not any(touched)
    assert _distance_on_route(dense, world.ego_box()) > exit_s + 30.0, "the ego never got past the obstacle"


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
        hits.append(_touches(w))

    move(world)
    decisions = world.drive(expert, 20.0, move)
    assert any(d.reason == "collision" and "vehicle 3" in d.detail for d in decisions)
    assert not any(hits)
    assert _distance_on_route(dense, world.ego_box()) > 80.0  # and then it went on


def _turning_car(v0: float, accel: float, turn: float, seconds: float, dt: float) -> np.ndarray:
    """(N, 4) x, y, yaw, speed every dt of a car leaving (0, 0) heading 0 degrees, speeding up and turning (deg/s)
    until it has turned 90 degrees."""
    x = y = yaw = 0.0
    v, out = v0, []
    for _ in range(round(seconds / dt)):
        out.append((x, y, yaw, v))
        v += accel * dt
        yaw = max(yaw + turn * dt, -90.0) if turn < 0 else min(yaw + turn * dt, 90.0)
        x += v * math.cos(math.radians(yaw)) * dt
        y += v * math.sin(math.radians(yaw)) * dt
    return np.array(out)


def test_expert_yields_to_an_oncoming_car_that_pulls_away_turning_across_its_lane(straight):
    """The demo's collision (NonSignalizedJunctionRightTurn): an oncoming bus at 1.3 m/s, two lanes over, pulled
    away turning left across the ego's lane (2 m/s^2, 14 deg/s). Forecast at constant velocity it stayed out of
    the ego's lane until too late to stop (the ego hit it 2.3 s on); forecast with its acceleration and turn rate
    the ego stops before its sweep and goes on behind it."""
    decisions, hits, sweep, end = _drive_past_a_turning_car(*straight, v0=1.3, accel=2.0, turn=14.0, lane=6.0,
                                                            v_ego=8.0)
    assert any(d.reason == "collision" and "vehicle 5" in d.detail for d in decisions)
    assert not any(hits), f"the ego hit the turning bus {0.05 * hits.index(True):.2f} s on"
    assert end > sweep + 30.0  # and then it went on


def _drive_past_a_turning_car(town, dense, v0: float, accel: float, turn: float, lane: float, v_ego: float):
    """The ego at v_ego m/s on the straight road; a bus in the oncoming lane `lane` m to its left pulls away from v0
    m/s, speeding up at `accel` and turning left at `turn` deg/s across the ego's lane, timed so that the ego, not
    braking, would meet it. The decisions, whether the boxes touched each tick, the route s where the bus's sweep
    across the ego's lane begins, and the ego's route s at the end."""
    dt = 0.05
    ego = _start(dense)
    ego.speed = v_ego
    world = StandInWorld(ego, speed_limit=v_ego)
    # The bus's way in its own frame: speeding up, turning left (CARLA: the yaw falls). Its box's corners step by
    # step, and those in the ego's lane (the strip `lane` m to its left, as wide as the ego): it starts where the
    # ego's front, not braking, gets to the nearest of them as the bus first reaches the lane.
    way = _turning_car(v0, accel, -turn, 14.0, dt)
    rad = np.radians(way[:, 2])[:, None]
    along, across = np.array([1, 1, -1, -1]) * 3.75, np.array([1, -1, 1, -1]) * 1.2
    cx = way[:, :1] + along * np.cos(rad) - across * np.sin(rad)
    cy = way[:, 1:2] + along * np.sin(rad) + across * np.cos(rad)
    inside = np.abs(cy + lane) < 1.05
    k = int(np.flatnonzero(inside.any(axis=1))[0])
    s0 = 3.0 + 4.9 / 2 + v_ego * k * dt + float(cx[k][inside[k]].max())  # route s where it starts
    x0, y0, yaw0 = _at(dense, s0)
    back = math.radians(yaw0 + 180.0)
    left = np.array([math.sin(math.radians(yaw0)), -math.cos(math.radians(yaw0))])  # CARLA: y to the right
    origin = np.array([x0, y0]) + lane * left
    rot = np.array([[math.cos(back), -math.sin(back)], [math.sin(back), math.cos(back)]])
    expert = Expert(dense, world.dt, town.carla_map)
    hits, step = [], {"i": 0}

    def move(w: StandInWorld) -> None:
        i = min(step["i"], len(way) - 1)
        step["i"] += 1
        bx, by = origin + rot @ way[i, :2]
        box = Box(id=5, cls=sem.BUS, x=float(bx), y=float(by), z=1.5, yaw=float(yaw0 + 180.0 + way[i, 2]),
                  length=7.5, width=2.4, height=3.0, speed=float(way[i, 3]))
        w.actors = [box]
        hits.append(_touches(w))

    move(world)
    decisions = world.drive(expert, 14.0, move)
    return decisions, hits, s0 - float(cx[inside].max()), _distance_on_route(dense, world.ego_box())


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
    from tools.expert.route import STOP_SIGN, stop_signs

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
    from tools.collect.base.config import CollectSettings
    from tools.collect.base.referee import Referee
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
    from tools.collect.base.config import CollectSettings
    from tools.collect.base.referee import Referee
    from tools.collect.base.routes import read_routes
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


def test_an_ego_or_a_block_standing_longer_than_sumos_jam_time_stays_where_it_is(town_xodr, short_routes):
    """SUMO teleports a vehicle that stood 60 s (--time-to-teleport): the world puts its ego back at once, where
    the bicycle is, and traffic keeps seeing it; so too a scenario's block (an accident's car: SUMO's traffic
    drove through the obstacle the ego still waited behind)."""
    from tools.collect.base.routes import read_routes
    from tools.collect.sim.world import EGO, SumoWorld
    from tools.expert.control import Control

    town = Town(town_xodr)
    route_file = sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]
    dense = RoutePlanner(town.carla_map).trace(read_routes(route_file)[0].waypoints)
    world = SumoWorld(town, dense, seed=1, vehicles=10, sim_hz=20)
    try:
        start = (world.ego.x, world.ego.y)
        site = next(float(v) for v in dense.s if v > 15.0 and not dense.junction[np.abs(dense.s - v) < 5.0].any())
        x, y, yaw = _at(dense, site)
        block = f"block{world.add_static(sem.CAR, x, y, yaw, 4.6, 1.9, 1.5, block=True)}"
        for _ in range(int(75 * 20)):
            world.step(Control(brake=1.0))
            assert EGO in world.ls.vehicle.getIDList()
            assert block in world.ls.vehicle.getIDList()
        bx, by = world.ls.vehicle.getPosition(block)  # its front, where it was put
        rad = math.radians(yaw)
        front = town.carla_to_sumo(np.array([x + 2.3 * math.cos(rad), y + 2.3 * math.sin(rad)]))
        assert math.hypot(bx - front[0], by - front[1]) < 0.5
        assert world._stand_ins >= 2  # SUMO did take it out, and it was put back
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
    from tools.collect.base.routes import read_routes
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
