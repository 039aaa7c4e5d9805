"""Traffic where the ego is (issue 22): on a large town the background vehicles live in a region around the ego
(tools.collect.sim.traffic.REGION_RADIUS_M), their count kept at the settings' `vehicles`, seeded; a town that is
not large keeps its traffic over the whole town."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tools.collect.base.town import Town, make_town
from tools.expert.control import Controller
from tools.expert.route import DenseRoute


def _straight_route(town: Town, length: float) -> DenseRoute:
    """A straight route along the grid's middle avenue (driving towards +x), `length` metres from its start."""
    xmin, ymin, xmax, ymax = town.bounds
    mid = (ymin + ymax) / 2
    lanes = [lane for lane in town.lanes if not lane.internal and len(lane.centerline) >= 2
             and lane.centerline[-1, 0] - lane.centerline[0, 0] > 50.0
             and abs(lane.centerline[-1, 1] - lane.centerline[0, 1]) < 1.0]
    lane = min(lanes, key=lambda la: (abs(la.centerline[0, 1] - mid) // 5, la.centerline[0, 0]))
    x0, y0 = lane.centerline[0]
    s = np.arange(0.0, length, 1.0)
    return DenseRoute(xy=np.column_stack([x0 + s, np.full(len(s), y0)]), yaw=np.zeros(len(s)),
                      option=np.full(len(s), 4), s=s, junction=np.zeros(len(s), dtype=bool))


@pytest.fixture(scope="module")
def long_town(tmp_path_factory) -> Town:
    """A generated town 2.1 km long (22 x 3 junctions, 100 m blocks): large (LARGE_TOWN_EXTENT)."""
    return Town(make_town(tmp_path_factory.mktemp("long") / "long.xodr", grid="22x3"))


def _drive(world, route: DenseRoute, ticks: int, every: int, speed: float = 8.0):
    """Drive the ego along the route by pure pursuit; every `every` ticks yield (ego x, y, background positions)."""
    controller = Controller(world.dt)
    index = 0
    for tick in range(1, ticks + 1):
        e = world.ego
        index, _ = route.advance(index, e.x, e.y, 20.0)
        world.step(controller(e.x, e.y, e.yaw, e.speed, route.xy[index:index + 40], speed))
        if tick % every == 0:
            yield world.ego.x, world.ego.y, world.background.positions()


def test_on_a_large_town_the_background_stays_around_the_ego_and_keeps_its_count(long_town):
    from tools.collect.sim.traffic import REGION_CHECK_TICKS, REGION_HYSTERESIS_M, REGION_RADIUS_M
    from tools.collect.sim.world import SumoWorld

    target = 30
    route = _straight_route(long_town, 1500.0)
    world = SumoWorld(long_town, route, seed=4, vehicles=target, sim_hz=20)
    try:
        assert world.background.regional
        start = (world.ego.x, world.ego.y)
        counts = []
        for x, y, bg in _drive(world, route, ticks=60 * 20, every=REGION_CHECK_TICKS):
            # Right after a check every vehicle SUMO drives is within the region and its hysteresis.
            far = max((math.hypot(bx - x, by - y) for bx, by in bg.values()), default=0.0)
            assert far <= REGION_RADIUS_M + REGION_HYSTERESIS_M, far
            assert len(world.background.vehicles) == target  # driving and waiting to enter: the settings' count
            counts.append(sum(math.hypot(bx - x, by - y) <= REGION_RADIUS_M for bx, by in bg.values()))
        moved = math.hypot(world.ego.x - start[0], world.ego.y - start[1])
        assert moved > REGION_RADIUS_M  # the region moved with the ego: the start's traffic is gone
        later = counts[len(counts) // 4:]  # after the first entries came in
        assert np.mean(later) >= 0.6 * target, counts
        assert min(later) >= 0.4 * target, counts
    finally:
        world.close()


def test_regional_traffic_is_deterministic_from_the_seed(long_town):
    from tools.collect.sim.world import SumoWorld

    route = _straight_route(long_town, 1500.0)
    runs = []
    for _ in range(2):
        world = SumoWorld(long_town, route, seed=9, vehicles=20, sim_hz=20)
        try:
            runs.append(list(_drive(world, route, ticks=15 * 20, every=100)))
        finally:
            world.close()
    assert runs[0] == runs[1]
    assert runs[0][-1][2]  # with traffic


def test_a_small_town_keeps_its_traffic_over_the_whole_town(tmp_path):
    from tools.collect.sim.world import SumoWorld

    town = Town(make_town(tmp_path / "small.xodr", grid="4x4"))
    world = SumoWorld(town, _straight_route(town, 200.0), seed=1, vehicles=10, sim_hz=20)
    try:
        assert not world.background.regional
        assert not world.background.vehicles
    finally:
        world.close()


def test_on_a_small_town_a_vehicle_replacing_one_that_arrived_enters_far_from_the_ego(tmp_path):
    """Town10HD ConstructionObstacleTwoWays: a car that replaced one that arrived entered 57 m before the ego, in
    the junction beyond the obstacle it had just begun to pass, and turned into the oncoming lane; both stood
    until blocked. On a small town a replacement (what `step` adds for each arrival) enters ENTER_CLEAR_M or more
    from the ego; drawn without that bound, some of the same town's enter close to it."""
    from tools.collect.sim.traffic import ENTER_CLEAR_M
    from tools.collect.sim.world import SumoWorld

    town = Town(make_town(tmp_path / "small.xodr", grid="4x4"))
    route = _straight_route(town, 250.0)
    world = SumoWorld(town, route, seed=2, vehicles=0, sim_hz=20)
    try:
        assert not world.background.regional

        def entered(clear: float) -> list[float]:
            before = set(world.background.positions())
            for _ in range(30):
                world.background.add((world.ego.x, world.ego.y), clear=clear)
            world.ls.simulationStep()
            positions = world.background.positions()
            return [math.hypot(x - world.ego.x, y - world.ego.y) for vid, (x, y) in positions.items()
                    if vid not in before]

        bounded, unbounded = entered(ENTER_CLEAR_M), entered(0.0)
    finally:
        world.close()
    # SUMO's position is the front bumper, a car length and a step into the edge
    assert len(bounded) >= 10 and min(bounded) >= ENTER_CLEAR_M - 10.0, sorted(bounded)
    assert min(unbounded) < ENTER_CLEAR_M, "the test's town has no edge near the ego to tell by"


def test_no_background_vehicle_drives_a_parking_lane(carla_towns):
    """netconvert lets cars drive OpenDRIVE parking lanes at the road's speed; CARLA's traffic never does, and a car
    driving one merged into the ego's lane at an accident and stood across it (Bench2Drive route 25845): the world
    closes them. Town15's road 280 has a parking lane beside its driving lanes."""
    from tools.collect.sim.world import SumoWorld

    town = Town(carla_towns / "Town15.xodr")
    parking = set(town.parking_lanes)
    assert "-280#1_0" in parking and "-280#1_1" not in parking
    (lane,) = [la for la in town.lanes if la.id == "-280#1_1"]
    xy = lane.centerline
    seg = np.hypot(*np.diff(xy, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    at = np.arange(0.0, s[-1], 1.0)
    route_xy = np.column_stack([np.interp(at, s, xy[:, 0]), np.interp(at, s, xy[:, 1])])
    yaw = np.degrees(np.arctan2(*np.gradient(route_xy, axis=0).T[::-1]))
    route = DenseRoute(xy=route_xy, yaw=yaw, option=np.full(len(at), 4), s=at, junction=np.zeros(len(at), dtype=bool))
    world = SumoWorld(town, route, seed=3, vehicles=80, sim_hz=20)
    try:
        on_parking = set()
        for tick in range(300):
            world.step(Controller(world.dt)(world.ego.x, world.ego.y, world.ego.yaw, world.ego.speed, route.xy, 0.0))
            if tick % 20 == 0:
                on_parking |= {v for v in world.ls.vehicle.getIDList() if world.ls.vehicle.getLaneID(v) in parking}
        assert not on_parking
    finally:
        world.close()


def test_spawn_places_and_stop_lines_are_read_from_sumo_once_per_town_and_kept_the_same(long_town):
    """Half a second of every Town12 route run's start went to asking SUMO for them edge by edge: they are kept
    beside the town (Town.derived_file) and read back exactly."""
    from tools.collect.sim.world import SumoWorld

    for _ in range(2):  # the first world finds and keeps them, the second reads them
        world = SumoWorld(long_town, _straight_route(long_town, 200.0), seed=1, vehicles=0, sim_hz=20)
        try:
            bg, signals = world.background, world.signals
            kept = bg._spawn_xy.copy(), bg._spawn_edge.copy(), bg._spawn_pos.copy(), dict(bg._edge_length)
            bg._find_spawn_places()
            assert all(np.array_equal(a, b) for a, b in zip(kept[:3], (bg._spawn_xy, bg._spawn_edge, bg._spawn_pos),
                                                              strict=True))
            assert kept[3] == bg._edge_length and len(kept[0]) > 100
            assert signals.stop_lines == signals._read_stop_lines()
        finally:
            world.close()
    kept_files = {p.name.rsplit(".", 2)[-2] for p in long_town.xodr.parent.iterdir() if p.name.startswith(".")}
    assert {"spawn-places", "stop-lines"} <= kept_files


def test_a_shadow_no_longer_needed_leaves_sumo_from_the_far_end_of_its_lane(tmp_path):
    """Bench2Drive route 2790 (the overtake rule on): the ego's shadow in the oncoming lane, taken out of SUMO where
    it stood as the ego entered a junction, crashed SUMO's next step (SIGSEGV in libsumo's simulationStep, every
    attempt). A shadow no longer needed first stands at the far end of its lane, away from the ego, and leaves SUMO
    two steps later."""
    from tools.collect.sim.world import SHADOW_END_M, SumoWorld

    town = Town(make_town(tmp_path / "small.xodr", grid="4x4"))
    route = _straight_route(town, 250.0)
    # Into the oncoming lane (CARLA's y points right: 3.5 m to the left of a route heading +x is y - 3.5) from
    # 30 to 60 m, back by 80 m.
    s = route.s
    path = route.xy + np.column_stack([np.zeros(len(s)), -3.5 * np.interp(s, [30, 40, 60, 80], [0, 1, 1, 0])])
    world = SumoWorld(town, route, seed=2, vehicles=0, sim_hz=20)
    controller = Controller(world.dt)
    placed, retired = set(), []  # shadow ids; (id, tick) of each as it was retired
    index = 0
    try:
        for tick in range(25 * 20):
            e = world.ego
            index, _ = route.advance(index, e.x, e.y, 20.0)
            before = world._shadow
            world.step(controller(e.x, e.y, e.yaw, e.speed, path[index:index + 40], 6.0))
            present = set(world.ls.vehicle.getIDList())
            if world._shadow is not None:
                placed.add(world._shadow[0])
            if before is not None and world._shadow != before:
                vid, lane = before
                assert vid in present, "taken out where it stood"
                pos, length = world.ls.vehicle.getLanePosition(vid), world.ls.lane.getLength(lane)
                assert min(pos, length - pos) <= SHADOW_END_M + 5.0, (pos, length)  # SUMO's position: the front
                retired.append((vid, tick))
            for vid, at in retired:
                assert (vid in present) == (tick < at + 1), (vid, at, tick)
            if e.x > route.xy[0, 0] + 120.0:
                break
    finally:
        world.close()
    assert placed, "the ego in the oncoming lane had no shadow"
    assert {vid for vid, _ in retired} == placed, "a shadow was never taken out"


def _standing_in_a_turn(town: Town, lane_id: str) -> DenseRoute:
    """A route whose start puts the ego's centre half-way along the junction's connection `lane_id`, turned 0.3 of
    the way the connection has turned there (an ego that cut the corner and stopped): SUMO maps it onto another of
    the junction's connections."""
    lane = next(la for la in town.lanes if la.id == lane_id)
    cl = lane.centerline
    d = np.diff(cl, axis=0)
    along = np.concatenate([[0.0], np.cumsum(np.hypot(d[:, 0], d[:, 1]))])
    half = along[-1] / 2
    x, y = np.interp(half, along, cl[:, 0]), np.interp(half, along, cl[:, 1])
    k = int(np.searchsorted(along, half)) - 1
    start, there = (math.degrees(math.atan2(d[i, 1], d[i, 0])) for i in (0, k))
    yaw = start + ((there - start + 180) % 360 - 180) * 0.3
    c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    ds = np.arange(0.0, 60.0, 1.0)
    x0, y0 = x - c * 2.45, y - s * 2.45  # the ego's rear on the route's first point, its centre at (x, y)
    return DenseRoute(xy=np.column_stack([x0 + c * ds, y0 + s * ds]), yaw=np.full(len(ds), yaw),
                      option=np.full(len(ds), 4), s=ds, junction=np.zeros(len(ds), dtype=bool))


def _follower_behind_the_standing_ego(town: Town, lane_id: str, guard: bool, monkeypatch, scenario: dict | None = None,
                                      followers: int = 1):
    """The ego standing in the turn of `_standing_in_a_turn`, a vehicle coming at 8 m/s from 35 m before the
    junction on the connection's approach (`followers` of them, 3 s apart): a background vehicle, or with `scenario`
    a scenario vehicle added with those keywords (SumoWorld.add_vehicle). (The collisions in 9 s, the last
    follower's gap to the ego's box and its speed at the end.)"""
    from tools.collect.sim import world as sim
    from tools.expert.control import Control

    if not guard:
        monkeypatch.setattr(sim.SumoWorld, "_guard", lambda self: None)
    world = sim.SumoWorld(town, _standing_in_a_turn(town, lane_id), seed=1, vehicles=0, sim_hz=20)
    try:
        ls = world.ls
        approach = next(la for la in ls.lane.getIDList() if not la.startswith(":")
                        and any(link[4] == lane_id for link in ls.lane.getLinks(la)))
        out = next(link[0] for link in ls.lane.getLinks(approach) if link[4] == lane_id)
        edges, index = [approach.rsplit("_", 1)[0], out.rsplit("_", 1)[0]], int(approach.rsplit("_", 1)[1])
        pos = max(ls.lane.getLength(approach) - 35.0, 0.0)
        ls.route.add("follow", edges)
        collisions, last = [], ""
        for tick in range(180):
            if tick % 60 == 0 and tick // 60 < followers:
                if scenario is None:
                    last = f"bg_follower{tick}"
                    ls.vehicle.add(last, "follow", typeID="DEFAULT_VEHTYPE", depart="now", departPos=str(pos),
                                   departLane=str(index), departSpeed="8")
                else:
                    last = world.add_vehicle(edges, index, pos, 8.0, **scenario)
            collisions += world.step(Control(steer=0.0, throttle=0.0, brake=1.0)).collisions
        near = world._vehicles()
        row = near.rows[near.vids.index(last)]
        e = world.ego_box()
        gap = math.hypot(row[0] - e.x, row[1] - e.y) - (row[3] + e.length) / 2
        return collisions, gap, float(row[5])
    finally:
        world.close()


def test_a_background_vehicle_brakes_for_the_ego_standing_where_sumo_does_not_see_it(tmp_path, monkeypatch):
    """Bench2Drive BlockedIntersection 2989: the ego stood in a left turn, SUMO mapped it onto another of the
    junction's overlapping connections, and the vehicle behind, seeing no leader on its own, drove into it at 8 m/s.
    CARLA's Traffic Manager brakes for every vehicle in its way, the hero too; the world's guard
    (tools.collect.sim.world `_guard`) does so along each background vehicle's lanes. Without it the same follower
    drives into the standing ego (the check that this case is one SUMO misses)."""
    town = Town(make_town(tmp_path / "small.xodr", grid="4x4"))
    lane_id = ":1_2_1"  # a left turn of the grid's first junction, whose start overlaps the straight connection's
    with monkeypatch.context() as m:
        collisions, _, _ = _follower_behind_the_standing_ego(town, lane_id, guard=False, monkeypatch=m)
    assert collisions, "without the guard SUMO's follower stopped for the ego: this case no longer tests the guard"
    collisions, gap, speed = _follower_behind_the_standing_ego(town, lane_id, guard=True, monkeypatch=monkeypatch)
    assert collisions == []
    assert speed < 0.1 and gap > 0.5, (gap, speed)  # it stands behind the ego, short of its box


def test_scenario_vehicles_brake_for_the_ego_as_their_classes_do(tmp_path, monkeypatch):
    """scenario_runner's OppositeActorFlow drives its vehicles with a BasicAgent, which brakes for vehicles in its
    way; ActorFlow's vehicles ignore every other vehicle until one of them collides, then its whole flow brakes for
    them; the adversaries' ConstantVelocityAgent ignores vehicles. Where SUMO does not see the standing ego (the
    case above): a vehicle that `yields` stops short of it; of a `flow`'s two vehicles the first hits the ego and
    the second stops; one that does neither hits it."""
    town = Town(make_town(tmp_path / "small.xodr", grid="4x4"))
    lane_id = ":1_2_1"
    collisions, gap, speed = _follower_behind_the_standing_ego(town, lane_id, True, monkeypatch,
                                                               scenario={"yields": True})
    assert collisions == [] and speed < 0.1 and gap > 0.5, (collisions, gap, speed)
    collisions, gap, speed = _follower_behind_the_standing_ego(town, lane_id, True, monkeypatch,
                                                               scenario={"flow": "ActorFlow_1/0"}, followers=2)
    assert len(collisions) == 1 and gap > 0.5, (collisions, gap, speed)  # the second closes in, short of the ego
    collisions, _, _ = _follower_behind_the_standing_ego(town, lane_id, True, monkeypatch, scenario={})
    assert len(collisions) == 1
