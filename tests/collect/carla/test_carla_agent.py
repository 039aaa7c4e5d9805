"""Our leaderboard agent (tools/collect/carla/leaderboard_agent/drivekit_agent.py, tools.collect.carla.agent) against
stand-ins: no CARLA server or leaderboard runs here. The agent file is loaded the way the evaluator loads it,
over stand-ins of the leaderboard's agent base, CarlaDataProvider and GameTime (tests/standin_leaderboard);
the test plays the simulator with a real carla.Map of the test town, stand-in actors made of real carla
transforms, and synthetic sensor data in CARLA's own layouts (BGRA images, semantic tags in the red channel,
depth encoded in RGB, semantic LiDAR detections). The frames it writes pass the same validation as the
embedded world's, and buckets, cache and training read a root holding runs of both worlds."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import carla
import numpy as np
import pytest

from tests.conftest import PYTHON, TESTS, copy_root, run_tool, train
from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import Route, select_route, write_route
from tools.collect.carla.agent import (
    AGENT_FILE,
    CARLA_DEPTH_FAR_M,
    ENTRY_POINT,
    SEMANTIC_LIDAR_DTYPE,
    AgentConfig,
    actor_box,
    actor_class,
    depth_of,
    own_sensors,
)
from tools.dataset import frames, results, semantics
from tools.dataset.frames import read_boxes, read_frame
from tools.dataset.geometry import BevGrid, Pose, world_to_ego
from tools.dataset.layout import Layout, RunKey
from tools.dataset.measurements import RoadOption
from tools.dataset.rig import RigConfig
from tools.dataset.validate import check_frame, check_run
from tools.expert.planner import RoutePlanner
from tools.expert.route import DenseRoute

STANDINS = TESTS / "standin_leaderboard"
TICKS = 41  # 2 s at 20 Hz: frames at ticks 0, 5, ..., 40
SKY_ROWS = 60  # the synthetic cameras' top rows are sky
GROUND_DEPTH_M = 12.34
HERO_ID, CAR_ID, WALKER_ID, CONE_ID, LIGHT_ID = 101, 202, 303, 404, 505


# ----------------------------------------------------------------------------- the stand-in simulator


class StandinActor:
    """A CARLA actor as our agent reads it: real carla transforms, boxes and vectors."""

    def __init__(self, actor_id: int, type_id: str, extent: tuple[float, float, float], base_type: str = ""):
        self.id, self.type_id = actor_id, type_id
        self.attributes = {"role_name": "hero" if actor_id == HERO_ID else "npc", "base_type": base_type}
        # The actor's origin on the ground, its box centre 0.2 m ahead of it (as CARLA's cars have it).
        self.bounding_box = carla.BoundingBox(carla.Location(0.2, 0.0, extent[2]), carla.Vector3D(*extent))
        self.transform = carla.Transform()
        self.velocity = carla.Vector3D()

    def place(self, x: float, y: float, yaw: float, speed: float) -> None:
        # The box centre at (x, y): the origin 0.2 m behind it.
        c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
        self.transform = carla.Transform(carla.Location(x - 0.2 * c, y - 0.2 * s, 0.0), carla.Rotation(yaw=yaw))
        self.velocity = carla.Vector3D(speed * c, speed * s, 0.0)

    def get_transform(self):
        return self.transform

    def get_location(self):
        return self.transform.location

    def get_velocity(self):
        return self.velocity

    def get_acceleration(self):
        return carla.Vector3D()

    def get_speed_limit(self):
        return 50.0  # km/h


class StandinLight:
    type_id = "traffic.traffic_light"

    def __init__(self, actor_id: int, stop: carla.Waypoint):
        self.id, self.stop = actor_id, stop

    def get_state(self):
        return carla.TrafficLightState.Red

    def get_stop_waypoints(self):
        return [self.stop]


class StandinSensor:
    def __init__(self, blueprint, transform):
        self.blueprint, self.transform = blueprint, transform
        self.callback, self.destroyed = None, False

    def listen(self, callback):
        self.callback = callback

    def stop(self):
        pass

    def destroy(self):
        self.destroyed = True


class StandinBlueprint:
    def __init__(self, type_id: str):
        self.id, self.attributes = type_id, {}

    def set_attribute(self, key, value):
        self.attributes[key] = value


class StandinWorld:
    def __init__(self, actors):
        self.actors, self.sensors = actors, []

    def get_actors(self):
        return list(self.actors) + list(self.sensors)

    def get_blueprint_library(self):
        return self

    def find(self, type_id):
        return StandinBlueprint(type_id)

    def spawn_actor(self, blueprint, transform, attach_to=None):
        assert attach_to is not None and attach_to.id == HERO_ID
        sensor = StandinSensor(blueprint, transform)
        sensor.type_id, sensor.id = blueprint.id, 900 + len(self.sensors)
        self.sensors.append(sensor)
        return sensor


class Measurement:
    """A carla.Image / SemanticLidarMeasurement as a listener receives it: frame, raw_data (and size)."""

    def __init__(self, frame: int, raw: bytes, width: int = 0, height: int = 0):
        self.frame, self.raw_data, self.width, self.height = frame, raw, width, height


def encode_depth(metres: np.ndarray) -> np.ndarray:
    """CARLA's depth camera encoding into B, G, R (the inverse of carla_agent.depth_of)."""
    code = np.rint(np.asarray(metres) / CARLA_DEPTH_FAR_M * (256 ** 3 - 1)).astype(np.int64)
    return np.stack([code // 65536, (code // 256) % 256, code % 256], axis=-1).astype(np.uint8)


def camera_frames(cam, frame: int) -> tuple[np.ndarray, Measurement, Measurement]:
    """RGB (BGRA array, as the leaderboard hands it), semantic and depth images of one tick."""
    h, w = cam.height, cam.width
    rgb = np.zeros((h, w, 4), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2], rgb[..., 3] = 10, (frame * 7) % 256, 200, 255  # B, G, R, A
    tags = np.full((h, w), semantics.ROAD, dtype=np.uint8)
    tags[:SKY_ROWS] = semantics.SKY
    sem = np.zeros((h, w, 4), dtype=np.uint8)
    sem[..., 2], sem[..., 3] = tags, 255
    depth = np.zeros((h, w, 4), dtype=np.uint8)
    depth[..., :3] = encode_depth(np.full((h, w), GROUND_DEPTH_M))
    depth[:SKY_ROWS, :, :3] = encode_depth(np.full((SKY_ROWS, w), CARLA_DEPTH_FAR_M))
    return (rgb, Measurement(frame, sem.tobytes(), w, h), Measurement(frame, depth.tobytes(), w, h))


def lidar_points(hero: StandinActor, car: StandinActor, lidar) -> np.ndarray:
    """Semantic LiDAR detections in the sensor's frame: the car's rear face, ground ahead, one on the ego."""
    pose = _box_pose(hero)
    car_pose = _box_pose(car)
    ext = car.bounding_box.extent
    c, s = math.cos(math.radians(car_pose[2])), math.sin(math.radians(car_pose[2]))
    rear = np.array([[car_pose[0] - ext.x * c - t * s, car_pose[1] - ext.x * s + t * c] for t in (-0.8, 0.0, 0.8)])
    rear_ego = world_to_ego(Pose(*pose), rear)
    rows = [(x - lidar.x, y, z - lidar.z, 1.0, CAR_ID, semantics.CAR) for x, y in rear_ego for z in (0.5, 1.0)]
    rows += [(8.0 + k, -1.0 + 0.5 * k, -lidar.z, 1.0, 0, semantics.ROAD) for k in range(4)]
    rows.append((-1.0 - lidar.x, 0.0, 1.0 - lidar.z, 1.0, HERO_ID, semantics.CAR))
    return np.array(rows, dtype=SEMANTIC_LIDAR_DTYPE)


def _box_pose(actor: StandinActor) -> tuple[float, float, float]:
    box = actor_box(actor, 0, 0, 0.0)  # (carla.Transform.transform would move the box's location in place)
    return box.x, box.y, box.yaw


@pytest.fixture
def standin_leaderboard(monkeypatch):
    """The agent file loaded as the evaluator loads it, over the stand-in leaderboard modules."""
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.syspath_prepend(str(AGENT_FILE.parent))  # the evaluator's sys.path.insert(0, dirname(agent))
    names = ("leaderboard", "srunner", AGENT_FILE.stem)
    yield importlib.import_module(AGENT_FILE.stem)
    for name in [n for n in sys.modules if n.split(".")[0] in names]:
        del sys.modules[name]


def leaderboard_plan(route: DenseRoute) -> list[tuple[carla.Transform, RoadOption]]:
    """A route as the evaluator hands it to set_global_plan (RouteScenario.route: (carla.Transform, RoadOption)
    about 1 m apart, GlobalRoutePlanner's samples, which our RoutePlanner reproduces)."""
    return [(carla.Transform(carla.Location(float(x), float(y), 0.0), carla.Rotation(yaw=float(yaw))), RoadOption(o))
            for (x, y), yaw, o in zip(route.xy, route.yaw, route.option, strict=True)]


def start_standin(module, root: Path, route_file: Path, xodr: Path, repetition: int, tmp_path: Path, monkeypatch,
                  plan: DenseRoute | None = None):
    """Our agent set up as the evaluator sets it up (set_global_plan with the leaderboard's route, then setup) in
    the stand-in simulator. Returns the agent, its run key, the map, the route driven, the world and the hero."""
    from srunner.scenariomanager.carla_data_provider import CarlaDataProvider

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the server map's OpenDRIVE copy
    route = select_route(route_file, None)
    carla_map = carla.Map(route.town, xodr.read_text())
    dense = plan if plan is not None else RoutePlanner(carla_map).trace(route.waypoints)
    hero = StandinActor(HERO_ID, "vehicle.lincoln.mkz_2020", (2.45, 1.05, 0.75), "car")
    car = StandinActor(CAR_ID, "vehicle.carlamotors.carlacola", (2.6, 1.3, 1.2), "truck")
    walker = StandinActor(WALKER_ID, "walker.pedestrian.0001", (0.3, 0.3, 0.9))
    cone = StandinActor(CONE_ID, "static.prop.trafficcone01", (0.2, 0.2, 0.4))
    stop = carla_map.get_waypoint(carla.Location(float(dense.xy[-1, 0]), float(dense.xy[-1, 1]), 0.0))
    world = StandinWorld([hero, car, walker, cone, StandinLight(LIGHT_ID, stop)])
    CarlaDataProvider.world, CarlaDataProvider.map, CarlaDataProvider.hero = world, carla_map, hero

    key = RunKey.for_route(route.scenario, route_file.stem, route.id, repetition)
    config = AgentConfig(root=str(root), scenario=key.scenario, name=key.name, route_file=str(route_file),
                         route_id=route.id, repetition=repetition, seed=1, attempt=1,
                         settings=CollectSettings().to_dict())
    config.write(tmp_path / "agent.json")
    agent = getattr(module, module.get_entry_point())("127.0.0.1", 2000, 0)
    agent.set_global_plan([({"lat": 0.0, "lon": 0.0, "z": 0.0}, o) for _, o in leaderboard_plan(dense)],
                          leaderboard_plan(dense))
    agent.setup(str(tmp_path / "agent.json"))
    return agent, key, carla_map, dense, world, hero, car, walker, cone


def drive_standin(module, root: Path, route_file: Path, xodr: Path, repetition: int, tmp_path: Path,
                  monkeypatch) -> RunKey:
    """One route run of our agent in the stand-in simulator: the hero moves along the route at 6 m/s behind a
    car, past a walker and a cone, towards a red light. Returns the run's key."""
    from srunner.scenariomanager.timer import GameTime

    agent, key, carla_map, dense, world, hero, car, walker, cone = start_standin(
        module, root, route_file, xodr, repetition, tmp_path, monkeypatch)
    rig = RigConfig()
    cam = rig.cameras[0]
    declared = agent.sensors()
    assert declared == [{"type": "sensor.camera.rgb", "id": "rgb_front", "x": cam.x + 0.2, "y": 0.0, "z": cam.z,
                         "roll": 0.0, "pitch": 0.0, "yaw": 0.0, "width": cam.width, "height": cam.height,
                         "fov": cam.fov}]

    def at(s: float) -> tuple[float, float, float]:
        i = int(np.searchsorted(dense.s, s))
        return float(dense.xy[i, 0]), float(dense.xy[i, 1]), float(dense.yaw[i])

    for tick in range(TICKS):
        s = 5.0 + 6.0 * tick / 20.0
        hero.place(*at(s), 6.0)
        car.place(*at(s + 14.0), 6.0)
        x, y, yaw = at(s + 25.0)
        walker.place(x + 3.5 * math.sin(math.radians(yaw)), y - 3.5 * math.cos(math.radians(yaw)), yaw, 0.0)
        cone.place(*at(s + 30.0), 0.0)
        frame = 1000 + tick
        GameTime.frame = frame
        rgb, sem, depth = camera_frames(cam, frame)
        by_name = {own.name: sensor for own, sensor in zip(own_sensors(rig, (0.2, 0.0, 0.0), 20), world.sensors,
                                                           strict=True)}
        by_name["semantics_front"].callback(sem)
        by_name["depth_front"].callback(depth)
        by_name["lidar"].callback(Measurement(frame, lidar_points(hero, car, rig.lidar).tobytes()))
        control = agent.run_step({"rgb_front": (frame, rgb)}, 0.05 * tick + 7.0)
        assert isinstance(control, carla.VehicleControl)
        assert -1.0 <= control.steer <= 1.0 and 0.0 <= control.throttle <= 1.0 and 0.0 <= control.brake <= 1.0
    agent.destroy()
    assert world.sensors and all(sensor.destroyed for sensor in world.sensors)
    return key


# ----------------------------------------------------------------------------- tests


def test_the_agent_spawns_each_cameras_semantic_and_depth_twin_and_the_rigs_lidar(standin_leaderboard):
    assert standin_leaderboard.get_entry_point() == ENTRY_POINT
    assert getattr(standin_leaderboard, ENTRY_POINT).__mro__[1].__name__ == "AutonomousAgent"
    rig = RigConfig()
    specs = {s.name: s for s in own_sensors(rig, (0.2, 0.0, -0.1), 20)}
    assert specs["semantics_front"].blueprint == "sensor.camera.semantic_segmentation"
    assert specs["depth_front"].blueprint == "sensor.camera.depth"
    cam = rig.cameras[0]
    for name in ("semantics_front", "depth_front"):
        assert specs[name].attributes == {"image_size_x": str(cam.width), "image_size_y": str(cam.height),
                                          "fov": str(cam.fov)}
        assert specs[name].mount == {"x": cam.x + 0.2, "y": 0.0, "z": cam.z - 0.1, "roll": 0.0, "pitch": 0.0,
                                     "yaw": 0.0}
    lidar = specs["lidar"]
    assert lidar.blueprint == "sensor.lidar.ray_cast_semantic"
    li = rig.lidar
    assert lidar.attributes == {"channels": str(li.channels), "range": str(li.range), "upper_fov": str(li.upper_fov),
                                "lower_fov": str(li.lower_fov), "rotation_frequency": "20",
                                "points_per_second": str(li.channels * li.azimuth_steps * 20)}


def _lane(carla_map, x: float, y: float, yaw: float) -> list[float]:
    """The centre of the driving lane at (x, y) that runs along `yaw`."""
    w = carla_map.get_waypoint(carla.Location(x, y, 0.0), project_to_road=True, lane_type=carla.LaneType.Driving)
    lanes = [c for c in (w, w.get_left_lane(), w.get_right_lane())
             if c is not None and c.lane_type == carla.LaneType.Driving]
    best = min(lanes, key=lambda c: abs((c.transform.rotation.yaw - yaw + 180.0) % 360.0 - 180.0))
    return [best.transform.location.x, best.transform.location.y, 0.0]


def test_at_a_fork_the_agent_drives_the_leaderboards_plan_not_its_own_search_standin(
        standin_leaderboard, town_xodr, tmp_path, monkeypatch):
    """A route across a block of the grid town: two paths of the same length (straight on at the first junction,
    or turn). Our search takes one; the leaderboard's plan is the other. The agent drives the plan it is given
    (set_global_plan), which the leaderboard judges deviation and completion on."""
    carla_map = carla.Map("town", town_xodr.read_text())
    start, end, other = (_lane(carla_map, 50, 0, 0), _lane(carla_map, 200, -150, -90), _lane(carla_map, 150, 0, 0))
    ours = RoutePlanner(carla_map).trace(np.array([start, end]))
    plan = RoutePlanner(carla_map).trace(np.array([start, other, end]))  # straight on where our search turns

    def passes(route: DenseRoute, x: float, y: float) -> bool:
        return bool((np.hypot(route.xy[:, 0] - x, route.xy[:, 1] - y) < 3.0).any())

    assert not passes(ours, *other[:2]) and passes(plan, *other[:2])  # the fork: the two routes part there
    route_file = tmp_path / "routes" / "fork.xml"
    route_file.parent.mkdir()
    write_route(route_file, Route("0", "town", np.array([start, end])))
    agent, key, *_ = start_standin(standin_leaderboard, tmp_path / "root", route_file, town_xodr, 0, tmp_path,
                                   monkeypatch, plan=plan)
    assert len(agent._global_plan_world_coord) < len(plan.xy) / 10  # what the base class keeps: downsampled
    driven = agent.core.driver.expert.route  # what the expert steers along
    assert passes(driven, *other[:2]) and not passes(driven, 100.0, -50.0)
    assert driven.length == pytest.approx(plan.length, abs=1.0)
    run = json.loads(Layout(tmp_path / "root").run_settings(key).read_text())
    assert np.allclose(np.array(run["dense_route"]["xy"]), plan.xy, atol=0.01)
    agent.destroy()


def test_the_agent_never_prints_a_line_per_tick_standin_leaderboard(standin_leaderboard, capsys):
    """The leaderboard's AutonomousAgent.__call__ prints every tick (attempt logs of megabytes); ours does not, and
    hands the run step what the base would: the sensor interface's data of the frame, the game time."""
    from leaderboard.autoagents.autonomous_agent import AutonomousAgent
    from srunner.scenariomanager.timer import GameTime

    agent = getattr(standin_leaderboard, ENTRY_POINT)("127.0.0.1", 2000, 0)
    seen = []
    agent.run_step = lambda data, t: seen.append((data, t)) or carla.VehicleControl(throttle=0.5,
                                                                                   manual_gear_shift=True)
    agent.sensor_interface.data = {"rgb_front": (12, "pixels")}
    GameTime.frame, GameTime.time = 12, 3.5
    control = agent()
    assert capsys.readouterr().out == ""
    assert seen == [({"rgb_front": (12, "pixels")}, 3.5)]
    assert control.throttle == pytest.approx(0.5) and control.manual_gear_shift is False
    AutonomousAgent.__call__(agent)  # the base class (stand-in) does print: what ours leaves out
    assert "[Agent]" in capsys.readouterr().out


def test_parked_cars_of_the_large_towns_are_boxed_as_cars():
    """Leaderboard 2.0 spawns Town12/Town13's parked cars as static.prop.mesh actors of a car's mesh; cameras and
    LiDAR see a car there, and the box says so (a mesh prop whose mesh_path names another mesh stays static)."""
    parked = StandinActor(7, "static.prop.mesh", (2.3, 1.0, 0.7))
    parked.attributes["mesh_path"] = ("/Game/Carla/Static/Car/4Wheeled/ParkedVehicles/Lincoln/"
                                      "SM_LincolnParked.SM_LincolnParked")  # leaderboard/utils/parked_vehicles.py
    other = StandinActor(8, "static.prop.mesh", (0.5, 0.5, 0.5))
    other.attributes["mesh_path"] = "/Game/Carla/Static/Dynamic/Trash/SM_Bin.SM_Bin"
    assert actor_class(parked) == semantics.CAR
    assert actor_class(StandinActor(6, "static.prop.mesh", (2.3, 1.0, 0.7))) == semantics.CAR  # no mesh_path read
    assert actor_class(other) == semantics.STATIC
    assert actor_class(StandinActor(9, "static.prop.trafficcone01", (0.2, 0.2, 0.4))) == semantics.STATIC


def test_carla_depth_decodes_to_centimetres_with_the_sky_at_zero():
    metres = np.array([[0.5, 12.34, 654.9, 900.0]])
    pixels = np.zeros((1, 4, 4), dtype=np.uint8)
    pixels[..., :3] = encode_depth(metres)
    classes = np.array([[semantics.ROAD, semantics.ROAD, semantics.ROAD, semantics.SKY]], dtype=np.uint8)
    assert depth_of(pixels, classes).tolist() == [[50, 1234, 65490, 0]]


def test_standin_leaderboard_agent_writes_frames_that_validate_and_read_like_the_embedded_worlds(
        standin_leaderboard, collected_root, tmp_path, monkeypatch):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    embedded = list(layout.iter_runs())
    xodr = Path(json.loads(layout.run_settings(embedded[0]).read_text())["town_file"])
    route_file = sorted(xodr.parent.parent.rglob("*.xml"))[0]
    key = drive_standin(standin_leaderboard, root, route_file, xodr, 7, tmp_path, monkeypatch)

    paths = layout.frame_paths(key)
    assert len(paths) == 9  # ticks 0, 5, ..., 40
    assert check_run(layout, key) == []
    assert check_run(layout, embedded[0]) == []  # the same validation passes the embedded world's runs
    run = json.loads(layout.run_settings(key).read_text())
    assert run["rig"] == RigConfig().to_dict() and run["town"] and run["dense_route"]

    frame = read_frame(paths[2])
    sensors = frame["sensors"]
    rgb = sensors["rgb_front"]
    assert rgb.shape == (256, 512, 3) and abs(int(rgb[100, 100, 0]) - 200) <= 3  # R from BGRA's third byte (JPEG)
    assert (sensors["semantics_front"][:SKY_ROWS] == semantics.SKY).all()
    assert (sensors["semantics_front"][SKY_ROWS:] == semantics.ROAD).all()
    assert (sensors["depth_front"][:SKY_ROWS] == 0).all()
    assert (sensors["depth_front"][SKY_ROWS:] == round(GROUND_DEPTH_M * 100)).all()
    ids = sensors["lidar_labels"][:, 1]
    assert (ids == CAR_ID).sum() == 6 and (ids == HERO_ID).sum() == 0 and (ids == 0).sum() == 5
    boxes = {b.id: b for b in read_boxes(frame)}
    assert boxes[CAR_ID].cls == semantics.TRUCK and boxes[WALKER_ID].cls == semantics.PEDESTRIAN
    assert boxes[CONE_ID].cls == semantics.STATIC
    m = frame["measurements"]
    assert m["frame"] == 2 and m["tick"] == 10 and m["time"] == pytest.approx(0.5)
    assert m["speed"] == pytest.approx(6.0) and m["speed_limit"] == pytest.approx(50 / 3.6, abs=1e-3)
    assert m["leader"] and m["leader"]["id"] == CAR_ID
    bev = sensors["bev"]
    assert (bev == semantics.BEV_EGO).any() and (bev == semantics.BEV_VEHICLE).any()

    # A LiDAR point of the car moved out of its box is caught.
    bad = dict(frame)
    bad["sensors"] = dict(sensors)
    points = sensors["lidar"].copy()
    points[np.flatnonzero(ids == CAR_ID)[0], 0] -= 5.0  # 5 m behind the rear face
    bad["sensors"]["lidar"] = points
    assert check_frame(bad, RigConfig(), BevGrid.of_rig(RigConfig().bev)) == [
        f"1 LiDAR points of actor {CAR_ID} lie outside its box"]

    # The same dataset: buckets, cache and training read both worlds' runs, with no branch on the source
    # (the evaluator's result is a stand-in: what the leaderboard writes for a finished route).
    results.write_result(layout, key, results.RouteRecord(route_id="0", status=results.PERFECT,
                                                          route_completion=100.0))
    run_tool(PYTHON, "-m", "tools.buckets", "build", "--root", str(root), check=True)
    run_tool(PYTHON, "-m", "tools.cache", "build", "--root", str(root), check=True)
    cached = [p for p in (root / "cache").rglob("*") if p.is_file() and key.name in str(p)]
    assert len(cached) >= len(paths) - 1, cached
    buckets = (root / "buckets" / "pretrain.json").read_text()
    assert f"data/{key.scenario}/{key.name}" in buckets
    done = train("pretrain", root, tmp_path / "logs", "max_steps=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert frames.read_measurements(paths[0]).frame == 0
