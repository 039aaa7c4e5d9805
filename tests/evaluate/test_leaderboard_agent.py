"""A researcher's own leaderboard 2.0 agent file in the embedded world (tools.evaluate.leaderboard): its sensors
where CARLA would put them, the example agent of docs/examples driving a route to its end through the host and the
real drive loop, and the leaderboard's statuses for bad agents, each in one line.

Real parts: CARLA's own client (carla.Map of the real towns, its geolocation, carla.VehicleControl), SUMO, our
renderer and drive loop. Stand-ins: drivekit's own leaderboard, scenario_runner and `agents` modules (compat/),
which the host puts on sys.path when LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT are not set, as here.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import carla
import numpy as np
import pytest
from conftest import run_bin

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import read_routes
from tools.collect.base.town import Town
from tools.collect.sensors.render import Renderer
from tools.collect.sensors.scene import Scene
from tools.collect.sim.drive import drive
from tools.dataset import results, semantics
from tools.dataset.geometry import camera_intrinsics
from tools.dataset.layout import Layout, RunKey
from tools.evaluate.leaderboard import geo
from tools.evaluate.leaderboard.host import COMPAT, AgentSettings, agent_factory, install_roots, plans, roots
from tools.evaluate.leaderboard.sensors import SensorReader, suite, validate
from tools.evaluate.leaderboard.world import HeroState
from tools.expert.route import DenseRoute
from tools.expert.state import Box, Snapshot

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "gnss_agent.py"
DT = 0.05


@pytest.fixture(autouse=True)
def _agent_modules_stay_in_the_test():
    """The host puts the stand-in roots and each agent's folder on sys.path and imports them: undone after each
    test, so that other tests' stand-ins of the same packages (tests/standin_leaderboard) are not shadowed."""
    path, before = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - before:
        where = str(getattr(sys.modules[name], "__file__", "") or "")
        if name.split(".")[0] in ("leaderboard", "srunner", "agents") or where.startswith(tempfile.gettempdir()):
            del sys.modules[name]


def example_module():
    install_roots()
    spec = importlib.util.spec_from_file_location("gnss_agent_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hero(x: float, y: float, yaw: float, speed: float = 0.0, yaw_rate: float = 0.0) -> HeroState:
    c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    return HeroState(x, y, yaw, (speed * c, speed * s, 0.0), (0.0, 0.0, 0.0), yaw_rate, speed)


def straight_route(x0: float, y0: float, yaw: float, length: float = 60.0) -> DenseRoute:
    s = np.arange(0.0, length, 1.0)
    c, si = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    xy = np.stack([x0 + c * s, y0 + si * s], axis=1)
    return DenseRoute(xy=xy, yaw=np.full(len(s), yaw), option=np.full(len(s), 4), s=s,
                      junction=np.zeros(len(s), dtype=bool))


# ----------------------------------------------------------------------------- GNSS and compass


@pytest.mark.parametrize("town", ["Town01", "Town12", "Town13"])
def test_gnss_converted_back_with_the_reference_solved_from_the_plan_is_within_a_decimetre_of_the_sensor(
        carla_towns, town):
    text = (carla_towns / f"{town}.xodr").read_text()
    cmap = carla.Map(town, text)
    ref = geo.latlon_ref(text)
    if town == "Town13":
        assert ref != (0.0, 0.0)  # its geoReference is not at the origin (lat_0 41.09, lon_0 -81.59)
    example = example_module()
    spread = [(0.0, 0.0), (1500.0, -800.0), (-3000.0, 4200.0), (5000.0, 5000.0), (-250.3, 77.7)]
    worst = 0.0
    for x0, y0 in spread:
        route = straight_route(x0, y0, 30.0)
        gps_plan, world_plan = plans(route, cmap)
        lat_ref, lon_ref = example.reference_from_plan(gps_plan, world_plan)
        assert abs(lat_ref - ref[0]) < 1e-9 and abs(lon_ref - ref[1]) < 1e-9
        specs, rig = suite([{"type": "sensor.other.gnss", "id": "gps", "x": 0.7, "y": -0.3, "z": 1.6}], DT)
        reader = SensorReader(specs, rig, cmap, DT, noise=False, seed=0)
        for k in (0, 17, 59):
            ego = hero(*route.xy[k], 30.0)
            lat, lon, alt = reader.read({}, ego, frame=k + 1)["gps"][1]
            x, y = example.gnss_to_world(lat, lon, lat_ref, lon_ref)
            # The sensor sits 0.7 m ahead and 0.3 m left of the hero's origin.
            c, s = math.cos(math.radians(30.0)), math.sin(math.radians(30.0))
            want = (ego.x + 0.7 * c + 0.3 * s, ego.y + 0.7 * s - 0.3 * c)
            worst = max(worst, math.hypot(x - want[0], y - want[1]))
            assert alt == pytest.approx(1.6, abs=1e-6)
    assert worst < 0.1, f"{town}: GNSS back in the world {worst:.4f} m off"


def test_the_compass_is_the_heading_from_north_clockwise_and_the_imu_at_rest_reads_gravity(carla_towns):
    cmap = carla.Map("Town01", (carla_towns / "Town01.xodr").read_text())
    specs, rig = suite([{"type": "sensor.other.imu", "id": "imu", "x": 0.0, "y": 0.0, "z": 0.0, "roll": 0.0,
                         "pitch": 0.0, "yaw": 0.0}], DT)
    reader = SensorReader(specs, rig, cmap, DT, noise=False, seed=0)
    # CARLA: north is -y (yaw -90), east +x (yaw 0), south +y (yaw 90).
    for yaw, compass in ((-90.0, 0.0), (0.0, math.pi / 2), (90.0, math.pi), (180.0, 3 * math.pi / 2),
                         (-135.0, 7 * math.pi / 4), (33.0, math.radians(123.0))):
        for tick in range(3):
            imu = reader.read({}, hero(100.0, 50.0, yaw), frame=tick + 1)["imu"][1]
        assert imu.dtype == np.float64 and imu.shape == (7,)
        assert imu[6] == pytest.approx(compass, abs=1e-9)
        assert imu[:3] == pytest.approx([0.0, 0.0, 9.81], abs=1e-9)  # at rest: gravity only, as CARLA's IMU
        assert imu[3:6] == pytest.approx([0.0, 0.0, 0.0])
        assert (imu[6] - math.pi / 2 - math.radians(yaw) + math.pi) % (2 * math.pi) - math.pi == pytest.approx(0.0)


def test_the_imu_reads_the_turn_rate_and_the_centripetal_acceleration_of_a_circle(carla_towns):
    cmap = carla.Map("Town01", (carla_towns / "Town01.xodr").read_text())
    specs, rig = suite([{"type": "sensor.other.imu", "id": "imu", "x": 0.0, "y": 0.0, "z": 0.0, "roll": 0.0,
                         "pitch": 0.0, "yaw": 0.0}], DT)
    reader = SensorReader(specs, rig, cmap, DT, noise=False, seed=0)
    radius, speed = 20.0, 10.0
    rate = math.degrees(speed / radius)  # clockwise seen from above: a right turn in CARLA
    for k in range(4):
        yaw = rate * k * DT
        # The centre is to the right of the hero (CARLA's +y when heading +x).
        cx, cy = 0.0, radius
        a = math.radians(yaw) - math.pi / 2
        imu = reader.read({}, hero(cx + radius * math.cos(a), cy + radius * math.sin(a), yaw, speed, rate),
                          frame=k + 1)["imu"][1]
    assert imu[2] == pytest.approx(9.81)
    assert imu[1] == pytest.approx(speed ** 2 / radius, rel=0.01)  # towards the right: +y in CARLA's frame
    # The difference is centred a tick back and turned with the current heading (as CARLA's IMU): a lag of one
    # tick's turn leaks into x.
    assert abs(imu[0]) == pytest.approx(speed ** 2 / radius * math.sin(math.radians(rate * DT)), rel=0.05)
    assert imu[5] == pytest.approx(speed / radius)  # rad/s about z, positive turning right (clockwise)


# ----------------------------------------------------------------------------- LiDAR and camera


def test_a_box_ahead_appears_in_the_lidar_and_camera_where_carla_would_put_it(town_xodr):
    town = Town(town_xodr)
    sensors = [
        {"type": "sensor.camera.rgb", "id": "front", "x": 1.3, "y": 0.0, "z": 2.3, "roll": 0.0, "pitch": 0.0,
         "yaw": 0.0, "width": 400, "height": 300, "fov": 90},
        {"type": "sensor.lidar.ray_cast", "id": "lidar", "x": 0.0, "y": 0.0, "z": 2.5, "roll": 0.0, "pitch": 0.0,
         "yaw": -90.0},
    ]
    validate(sensors, "SENSORS")
    specs, rig = suite(sensors, DT)
    assert rig.lidar.channels == 64 and rig.lidar.range == 85.0 and rig.lidar.azimuth_steps == 938
    ego_yaw, ex, ey = 30.0, 10.0, 20.0
    ego = Box(id=0, cls=semantics.CAR, x=ex, y=ey, z=0.75, yaw=ego_yaw, length=4.8, width=2.0, height=1.5)
    # A car 15 m ahead and 3 m to the right of the hero (its frame), turned 10 degrees.
    fx, fy = 15.0, 3.0
    c, s = math.cos(math.radians(ego_yaw)), math.sin(math.radians(ego_yaw))
    car = Box(id=7, cls=semantics.CAR, x=ex + c * fx - s * fy, y=ey + s * fx + c * fy, z=0.8, yaw=ego_yaw + 10.0,
              length=4.0, width=1.8, height=1.6)
    renderer = Renderer(Scene(town, seed=0), rig)
    empty = renderer.render(Snapshot(time=0.0, ego=ego))
    full = renderer.render(Snapshot(time=0.0, ego=ego, actors=[car]))
    reader = SensorReader(specs, rig, None, DT, noise=False, seed=0)
    state = hero(ex, ey, ego_yaw)
    tick0 = reader.read(full, state, frame=1)
    tick1 = reader.read(full, state, frame=2)

    # LiDAR, sensor frame (x forward, y right, z up; the sensor yawed -90: its x points to the hero's left).
    # CARLA puts the car's centre at (-fy, fx) there, and the sensor at 2.5 m.
    for _, points in (tick0["lidar"], tick1["lidar"]):
        assert points.dtype == np.float32 and points.shape[1] == 4 and len(points) <= 469 * 64
    p1 = tick1["lidar"][1]
    on_car = p1[(np.abs(p1[:, 0] + fy) < 1.5) & (np.abs(p1[:, 1] - fx) < 2.5) & (p1[:, 2] > -2.45)]
    assert len(on_car) > 50
    assert on_car[:, 2].max() == pytest.approx(1.6 - 2.5, abs=0.15)  # the roof, 0.9 m below the sensor
    assert on_car[:, 1].min() == pytest.approx(fx - 2.0, abs=0.5)  # the rear face, about 13 m ahead
    assert np.all(np.degrees(np.arctan2(p1[:, 1], p1[:, 0])) >= -1e-3)  # tick 2: the half turn 0 .. 180 degrees
    p0 = tick0["lidar"][1]
    assert np.all(np.degrees(np.arctan2(p0[:, 1], p0[:, 0])) < 1e-3)  # tick 1: -180 .. 0, the car not in it
    assert len(p0[(np.abs(p0[:, 0] + fy) < 1.5) & (np.abs(p0[:, 1] - fx) < 2.5) & (p0[:, 2] > -2.45)]) == 0
    assert np.allclose(p1[:, 3], np.exp(-0.004 * np.linalg.norm(p1[:, :3], axis=1)), atol=1e-6)

    # Camera: BGRA; the pixels that changed lie where CARLA's pinhole projection puts the car's corners.
    image = tick1["front"][1]
    assert image.shape == (300, 400, 4) and image.dtype == np.uint8 and np.all(image[..., 3] == 255)
    rgb_name = "rgb_lb0"
    assert np.array_equal(image[..., 2::-1], full[rgb_name][0])
    changed = np.argwhere(np.any(full[rgb_name][0] != empty[rgb_name][0], axis=2))
    k = camera_intrinsics(rig.cameras[0])
    corners = car.corners()  # world; into the camera: the hero's frame, then the camera's (x depth, y right, z up)
    dx, dy = corners[:, 0] - ex, corners[:, 1] - ey
    cam = np.stack([c * dx + s * dy - 1.3, -s * dx + c * dy, corners[:, 2] - 2.3], axis=1)
    u = k[0, 2] + k[0, 0] * cam[:, 1] / cam[:, 0]
    v = k[1, 2] - k[1, 1] * cam[:, 2] / cam[:, 0]
    assert changed[:, 1].min() == pytest.approx(u.min(), abs=2)
    assert changed[:, 1].max() + 1 == pytest.approx(u.max(), abs=2)
    assert changed[:, 0].min() == pytest.approx(v.min(), abs=2)


# ----------------------------------------------------------------------------- driving, and bad agents


def drive_agent(routes: Path, tmp_path: Path, agent_file: Path, **settings) -> results.RouteRecord:
    route_file = sorted(p for p in routes.rglob("*.xml") if "towns" not in p.parts)[0]
    route = read_routes(route_file)[0]
    town = Town(routes / "towns" / f"{route.town}.xodr")
    factory = agent_factory(AgentSettings(agent_file=str(agent_file), **settings), route.id)
    return drive(Layout(tmp_path / "root"), RunKey("NoScenario", "run"), route, town,
                 CollectSettings(record=False, vehicles=0), 0, 0, 1, factory)


def test_the_example_gnss_agent_drives_a_short_route_to_its_end_with_the_leaderboards_noise(short_routes, tmp_path):
    for route_file in sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts):
        folder = tmp_path / route_file.stem
        (folder / "towns").mkdir(parents=True)
        (folder / "towns" / "town.xodr").write_bytes((short_routes / "towns" / "town.xodr").read_bytes())
        (folder / route_file.name).write_bytes(route_file.read_bytes())
        record = drive_agent(folder, tmp_path, EXAMPLE, noise=True)
        assert record.route_completion == 100.0, (route_file.name, record.status, record.infractions)
        if route_file.parent.name == "NoScenario":
            assert record.status == results.PERFECT, (route_file.name, record.status, record.infractions)
        else:  # blind to the scenario's traffic and lights (it has no camera): it ends, with what it ran into
            assert record.status == results.COMPLETED


def write_agent(tmp_path: Path, name: str, body: str, sensors: str = "[]", entry: bool = True, top: str = "") -> Path:
    path = tmp_path / "agents" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(f"""\
        import json
        import carla
        from leaderboard.autoagents.autonomous_agent import AutonomousAgent, Track
        from srunner.scenariomanager.carla_data_provider import CarlaDataProvider
        {top}

        {"def get_entry_point():" if entry else "def entry():"}
            return "Agent"

        class Agent(AutonomousAgent):
            def setup(self, path_to_conf_file):
                self.track = Track.SENSORS
                self.seen = []

            def sensors(self):
                return {sensors}

            def destroy(self):
                with open({str(path.with_suffix('.destroyed'))!r}, "w") as f:
                    json.dump(self.seen, f)

            def run_step(self, input_data, timestamp):
        """) + textwrap.indent(textwrap.dedent(body), " " * 8))
    return path


BAD = {
    "import_fails": ("return carla.VehicleControl()", "[]", results.FAILED_SETUP,
                     "No module named 'no_such_module_anywhere'"),
    "run_step_raises": ("raise ValueError('the model lost its weights')", "[]", results.FAILED_AGENT,
                        "ValueError: the model lost its weights"),
    "returns_a_dict": ("return {'steer': 0.0}", "[]", results.FAILED_AGENT,
                       "returned dict, not a carla.VehicleControl"),
    "asks_for_the_client": ("CarlaDataProvider.get_client()\nreturn carla.VehicleControl()", "[]",
                            results.FAILED_AGENT, "CarlaDataProvider.get_client: not available"),
    "spawns_an_actor": ("CarlaDataProvider.get_world().spawn_actor(None, None)\nreturn carla.VehicleControl()", "[]",
                        results.FAILED_AGENT, "world.spawn_actor: not available"),
    "too_many_cameras": ("return carla.VehicleControl()", str([
        {"type": "sensor.camera.rgb", "id": f"c{i}", "x": 0, "y": 0, "z": 2, "roll": 0, "pitch": 0, "yaw": 0,
         "width": 8, "height": 8, "fov": 90} for i in range(9)]), results.FAILED_SENSORS,
        "Too many sensor.camera.rgb used! Maximum number allowed is 8, but 9 were requested."),
    "camera_too_far": ("return carla.VehicleControl()", str([
        {"type": "sensor.camera.rgb", "id": "far", "x": 2.5, "y": 0, "z": 2, "roll": 0, "pitch": 0, "yaw": 0,
         "width": 8, "height": 8, "fov": 90}]), results.FAILED_SENSORS, "sensor 'far'. Max allowed radius is 3m"),
    "map_on_sensors_track": ("return carla.VehicleControl()", str([
        {"type": "sensor.opendrive_map", "id": "hd", "reading_frequency": 1e-6}]), results.FAILED_SENSORS,
        "Illegal sensor 'sensor.opendrive_map' used for Track [SENSORS]!"),
    "radar": ("return carla.VehicleControl()", str([
        {"type": "sensor.other.radar", "id": "radar", "x": 2, "y": 0, "z": 1, "roll": 0, "pitch": 0, "yaw": 0,
         "horizontal_fov": 30, "vertical_fov": 30}]), results.FAILED_SENSORS,
        "radar 'radar': the embedded world has no radar model"),
    "exits": ("import sys\nsys.exit(3)", "[]", results.FAILED_AGENT, "SystemExit: 3"),
    "hangs": ("import time\ntime.sleep(30)\nreturn carla.VehicleControl()", "[]", results.FAILED_TIMEOUT,
              "one call of the agent took longer than 3 s"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_agent_ends_the_run_with_the_leaderboards_status_in_one_line_and_is_destroyed(
        case, short_routes, tmp_path, caplog):
    body, sensors, status, says = BAD[case]
    top = "import no_such_module_anywhere" if case == "import_fails" else ""
    agent = write_agent(tmp_path, case, body, sensors, top=top)
    with caplog.at_level(logging.ERROR):  # the watchdog: 3 s for the set-up and for each call, loose for a loaded CPU
        record = drive_agent(short_routes, tmp_path, agent, timeout_s=3.0)
    assert record.status == status
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert str(agent) in errors[0] and "route " in errors[0] and status in errors[0] and says in errors[0], errors[0]
    if case != "import_fails":  # built, so destroyed
        assert agent.with_suffix(".destroyed").is_file()


def test_an_agent_file_without_get_entry_point_could_not_be_set_up(short_routes, tmp_path, caplog):
    agent = write_agent(tmp_path, "no_entry", "return carla.VehicleControl()", entry=False)
    with caplog.at_level(logging.ERROR):
        record = drive_agent(short_routes, tmp_path, agent)
    assert record.status == results.FAILED_SETUP
    assert "no_entry.py defines no get_entry_point()" in caplog.text


def test_input_data_arrives_as_the_leaderboards_sensor_interface_delivers_it(short_routes, tmp_path):
    sensors = [
        {"type": "sensor.camera.rgb", "id": "rgb", "x": 1.3, "y": 0.2, "z": 2.3, "roll": 0, "pitch": 0, "yaw": -20,
         "width": 64, "height": 48, "fov": 100},
        {"type": "sensor.lidar.ray_cast", "id": "lidar", "x": 1.3, "y": 0.0, "z": 2.5, "roll": 0, "pitch": 0,
         "yaw": -90},
        {"type": "sensor.other.gnss", "id": "gps", "x": 0, "y": 0, "z": 0},
        {"type": "sensor.other.imu", "id": "imu", "x": 0, "y": 0, "z": 0, "roll": 0, "pitch": 0, "yaw": 0},
        {"type": "sensor.speedometer", "id": "speed", "reading_frequency": 20},
        {"type": "sensor.opendrive_map", "id": "hd", "reading_frequency": 1e-6},
    ]
    body = """\
        self.seen.append((timestamp, {k: (f, type(d).__name__, getattr(d, 'shape', None),
                                          str(getattr(d, 'dtype', '')), sorted(d) if isinstance(d, dict) else None)
                                      for k, (f, d) in input_data.items()},
                          CarlaDataProvider.get_hero_actor().get_transform().rotation.yaw,
                          len(self._global_plan), len(self._global_plan_world_coord)))
        if len(self.seen) == 4:
            raise RuntimeError("enough")
        control = carla.VehicleControl()
        control.throttle = 0.5
        return control
        """
    agent = write_agent(tmp_path, "probe", body, repr(sensors))
    agent.write_text(agent.read_text().replace("self.track = Track.SENSORS", "self.track = Track.MAP"))
    record = drive_agent(short_routes, tmp_path, agent, noise=False)  # the track: the agent's own (MAP)
    assert record.status == results.FAILED_AGENT
    seen = json.loads(agent.with_suffix(".destroyed").read_text())
    assert [round(t, 6) for t, *_ in seen] == [0.05, 0.1, 0.15, 0.2]
    first, second = seen[0][1], seen[1][1]
    assert set(first) == {"rgb", "lidar", "gps", "imu", "speed", "hd"}
    assert set(second) == {"rgb", "lidar", "gps", "imu", "speed"}  # the map comes once
    assert first["rgb"][1:4] == ["ndarray", [48, 64, 4], "uint8"]
    assert first["lidar"][1] == "ndarray" and first["lidar"][2][1] == 4 and first["lidar"][3] == "float32"
    assert first["gps"][1:4] == ["ndarray", [3], "float64"]
    assert first["imu"][1:4] == ["ndarray", [7], "float64"]
    assert first["speed"][4] == ["speed"] and first["hd"][4] == ["opendrive"]
    assert {f for f, *_ in first.values()} == {1} and {f for f, *_ in second.values()} == {2}
    assert seen[0][3] <= seen[0][4]  # the base class keeps a downsampled plan


# ----------------------------------------------------------------------------- bin/evaluate --agent-file


def test_bin_evaluate_with_an_agent_file_drives_every_route_and_scores_it(short_routes, tmp_path):
    root = tmp_path / "eval"
    proc = run_bin("evaluate", "--agent-file", EXAMPLE, short_routes, "--root", root, "--vehicles=0", check=True)
    assert f"evaluation of agent file {EXAMPLE}" in proc.stdout
    result = json.loads((root / "result.json").read_text())
    records = result["_checkpoint"]["records"]
    assert len(records) == 2 and all(r["scores"]["score_route"] == 100.0 for r in records), records
    evaluation = json.loads((root / "evaluation.json").read_text())
    assert evaluation["agent"] == "leaderboard" and evaluation["settings"]["agent_file"] == str(EXAMPLE)


def test_bin_evaluate_with_the_sensor_noise_off_hands_the_agent_exact_readings_and_says_so(short_routes, tmp_path):
    """--no-sensor-noise (for checks such as the policy agent's oracle) reaches the agent: the IMU at rest reads
    gravity and no turn, exactly; the summary and evaluation.json say the noise was off."""
    body = """\
        self.seen.append([float(v) for v in input_data["imu"][1]])
        raise RuntimeError("one reading is enough")
        """
    sensors = [{"type": "sensor.other.imu", "id": "imu", "x": 0, "y": 0, "z": 0, "roll": 0, "pitch": 0, "yaw": 0}]
    agent = write_agent(tmp_path, "imu_probe", body, repr(sensors))
    root = tmp_path / "eval"
    proc = run_bin("evaluate", "--agent-file", agent, short_routes, "--root", root, "--vehicles=0",
                   "--no-sensor-noise", "--max-attempts", "1", check=True)
    assert f"evaluation of agent file {agent} (the leaderboard's sensor noise off)" in proc.stdout
    assert json.loads((root / "evaluation.json").read_text())["settings"]["sensor_noise"] is False
    (imu,) = json.loads(agent.with_suffix(".destroyed").read_text())
    assert imu[:6] == [0.0, 0.0, 9.81, 0.0, 0.0, 0.0]


def test_bin_evaluate_with_a_missing_agent_config_says_so_in_one_line_before_anything_starts(short_routes, tmp_path):
    root = tmp_path / "eval"
    proc = run_bin("evaluate", "--agent-file", EXAMPLE, "--agent-config", tmp_path / "nope.yaml", short_routes,
                   "--root", root)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--agent-config" in lines[0] and "nope.yaml: no such file" in lines[0], proc.stderr
    assert not root.exists()


def test_an_agent_of_the_map_track_submitted_to_the_sensors_track_has_invalid_sensors(short_routes, tmp_path, caplog):
    agent = write_agent(tmp_path, "map_agent", "return carla.VehicleControl()",
                        str([{"type": "sensor.opendrive_map", "id": "hd", "reading_frequency": 1e-6}]))
    agent.write_text(agent.read_text().replace("self.track = Track.SENSORS", "self.track = Track.MAP"))
    with caplog.at_level(logging.ERROR):
        record = drive_agent(short_routes, tmp_path, agent, track="SENSORS")
    assert record.status == results.FAILED_SENSORS
    assert "You are submitting to the wrong track [SENSORS]!" in caplog.text


def test_the_users_leaderboard_root_is_imported_when_set_else_drivekits_stand_ins(short_routes, tmp_path,
                                                                                     monkeypatch, caplog):
    assert roots({})[:2] == [COMPAT / "leaderboard_root", COMPAT / "scenario_runner_root"]
    assert roots({"LEADERBOARD_ROOT": "/lb", "SCENARIO_RUNNER_ROOT": "/sr"})[:2] == [Path("/lb"), Path("/sr")]
    # A user's own leaderboard tree (here: a copy of the stand-in's), named by LEADERBOARD_ROOT.
    user_root = tmp_path / "my-leaderboard"
    shutil.copytree(COMPAT / "leaderboard_root", user_root)
    monkeypatch.setenv("LEADERBOARD_ROOT", str(user_root))
    agent = write_agent(tmp_path, "which_base", "import leaderboard.autoagents.autonomous_agent as base\n"
                                                "raise RuntimeError('base class from ' + base.__file__)")
    with caplog.at_level(logging.ERROR):
        record = drive_agent(short_routes, tmp_path, agent)
    assert record.status == results.FAILED_AGENT
    assert f"base class from {user_root}/leaderboard/autoagents/autonomous_agent.py" in caplog.text


def test_the_leaderboards_gnss_noise_is_on_by_default_and_off_when_asked(carla_towns):
    cmap = carla.Map("Town01", (carla_towns / "Town01.xodr").read_text())
    specs, rig = suite([{"type": "sensor.other.gnss", "id": "gps", "x": 0.0, "y": 0.0, "z": 0.0}], DT)
    noisy = SensorReader(specs, rig, cmap, DT, noise=AgentSettings(agent_file="x").noise, seed=1)
    quiet = SensorReader(specs, rig, cmap, DT, noise=False, seed=1)
    readings = np.array([noisy.read({}, hero(10.0, 20.0, 0.0), frame=k + 1)["gps"][1] for k in range(2000)])
    exact = quiet.read({}, hero(10.0, 20.0, 0.0), frame=1)["gps"][1]
    assert np.allclose(readings.std(axis=0), 5e-6, rtol=0.1)  # agent_wrapper's noise_*_stddev, degrees and metres
    assert np.allclose(readings.mean(axis=0), exact, atol=1e-6)  # no bias
    assert exact.tolist() == list(geo.gnss(cmap, 10.0, 20.0, 0.0))


def test_the_stand_in_global_route_planner_traces_a_route_of_map_waypoints_a_metre_apart(short_routes):
    install_roots()
    from agents.navigation.global_route_planner import GlobalRoutePlanner
    from agents.navigation.local_planner import RoadOption

    route_file = sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts)[0]
    route = read_routes(route_file)[0]
    town = Town(short_routes / "towns" / f"{route.town}.xodr")
    start, end = route.waypoints[0], route.waypoints[-1]
    plan = GlobalRoutePlanner(town.carla_map, 1.0).trace_route(carla.Location(*map(float, start[:3])),
                                                                carla.Location(*map(float, end[:3])))
    assert len(plan) > 100
    assert all(isinstance(wp, carla.Waypoint) and isinstance(option, RoadOption) for wp, option in plan)
    pairs = zip(plan, plan[1:], strict=False)
    steps = [a.transform.location.distance(b.transform.location) for (a, _), (b, _) in pairs]
    assert np.median(steps) == pytest.approx(1.0, abs=0.05) and max(steps) < 2.0
    assert plan[0][0].transform.location.distance(carla.Location(*map(float, start[:3]))) < 2.0
    assert plan[-1][0].transform.location.distance(carla.Location(*map(float, end[:3]))) < 2.0
