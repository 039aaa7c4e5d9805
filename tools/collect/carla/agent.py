"""Our leaderboard 2.0 agent: drives a route in a real CARLA server with the expert and records it.

The CARLA leaderboard evaluator (leaderboard/leaderboard_evaluator.py) loads AGENT_FILE by path
(`--agent=...`), takes the class `get_entry_point()` names and hands it the path of its configuration
(`--agent-config=FILE`, an AgentConfig JSON written by tools.collect.carla.run). AGENT_FILE is a thin
subclass of the leaderboard's `AutonomousAgent`; everything it does is `AgentCore` here, which needs
neither the leaderboard nor scenario_runner (the tests drive it with stand-ins of both).

Per tick the core builds the privileged state from the simulator (`CarlaWorldView`: the ego, vehicles,
walkers, props, traffic lights at their stop lines, in the Snapshot of tools.expert.state), drives with the
expert (tools.expert.drivers, as in the embedded world) and, every `record_every` ticks, writes a frame
through tools.dataset.frames with the embedded world's measurements and box labels (tools.collect.base.recording) and
its BEV (tools.collect.sensors.render). Sensors:
- the rig's RGB cameras are declared to the leaderboard (`sensors()`; it allows RGB cameras and vetoes
  semantic and depth cameras);
- each camera's semantic and depth twin and the LiDAR (CARLA's semantic LiDAR, which labels every point
  with its class and actor) are spawned by the agent itself on the ego with the rig's settings (the
  leaderboard's LiDAR is fixed at 64 channels, 85 m, 10 Hz).
Data arrives in CARLA's layouts (BGRA images, semantic tags in the red channel, depth encoded in RGB,
semantic LiDAR detections of 24 bytes) and is converted to the dataset's (tools.dataset.rig) here.

Heights: the recorded world frame is CARLA's, with z measured from the ground under the ego at each frame
(the ego frame's z: tools.dataset.geometry), so that boxes and sensors agree wherever the town is not at z = 0.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.collect.base.config import CollectSettings
from tools.collect.base.recording import RunRecorder
from tools.collect.base.referee import Referee
from tools.collect.base.routes import select_route
from tools.collect.base.town import Town, user_cache
from tools.collect.sensors.render import Renderer
from tools.collect.sensors.scene import Scene
from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset import semantics
from tools.dataset.geometry import Pose, ego_to_world
from tools.dataset.layout import Layout, RunKey
from tools.dataset.rig import (
    LIDAR,
    LIDAR_LABELS,
    MAX_DEPTH_M,
    CameraConfig,
    LidarConfig,
    RigConfig,
    camera_sensors,
    lidar_intensity,
)
from tools.expert.drivers import make_expert
from tools.expert.route import DenseRoute, given_route, stop_signs
from tools.expert.state import Box, Light, Snapshot

log = logging.getLogger("collect.carla")

#: The file the evaluator loads (its --agent), and the class its get_entry_point() names. It sits alone in its
#: folder: the evaluator puts the agent's folder first on sys.path, where tools/collect's own modules (agents,
#: config, ...) would shadow scenario_runner's imports (CARLA's `agents` package).
AGENT_FILE = Path(__file__).resolve().parent / "leaderboard_agent" / "drivekit_agent.py"
ENTRY_POINT = "DriveKitAgent"

#: CARLA's depth camera: depth = (R + 256 G + 65536 B) / (256^3 - 1) of this many metres.
CARLA_DEPTH_FAR_M = 1000.0
#: One detection of CARLA's semantic LiDAR (carla::sensor::data::SemanticLidarDetection).
SEMANTIC_LIDAR_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("cos", "<f4"), ("idx", "<u4"),
                                 ("tag", "<u4")])
#: Seconds the agent waits for its own sensors' data of a tick before it gives up (the agent crashes).
SENSOR_TIMEOUT_S = 20.0
#: Vehicle blueprints' base_type attribute -> semantic class (CARLA 0.9.16 blueprints).
_BASE_TYPE_CLASS = {"car": semantics.CAR, "van": semantics.CAR, "truck": semantics.TRUCK, "bus": semantics.BUS,
                    "motorcycle": semantics.MOTORCYCLE, "bicycle": semantics.BICYCLE}
_LIGHT_STATE = {"Red": "red", "Yellow": "yellow", "Green": "green", "Off": "off", "Unknown": "off"}
#: What the leaderboard allows of an agent's sensors (leaderboard/autoagents/agent_wrapper.py:
#: MAX_ALLOWED_RADIUS_SENSOR, SENSORS_LIMITS['sensor.camera.rgb']); carla-check compares them with the real ones.
MAX_SENSOR_RADIUS_M = 3.0
MAX_RGB_CAMERAS = 8
#: Leaderboard 2.0's parked cars (Town12, Town13: leaderboard/utils/parked_vehicles.py) are static.prop.mesh
#: actors whose mesh_path lies under this folder of CARLA's content (RouteScenario.spawn_parked_vehicles; the
#: leaderboard spawns no other static.prop.mesh).
PARKED_VEHICLE_MESHES = "/Static/Car/"


@dataclass(frozen=True)
class AgentConfig:
    """What one route run tells the agent: where to write, which route, and the collection settings."""

    root: str  # the dataset root (absolute)
    scenario: str  # the run's RunKey (tools.dataset.layout): scenario folder and run name
    name: str
    route_file: str  # the route file the evaluator drives (absolute)
    route_id: str
    repetition: int
    seed: int
    attempt: int
    settings: dict[str, Any]  # tools.collect.base.config.CollectSettings.to_dict()

    def write(self, path: Path) -> None:
        atomic.write_json(Path(path), dataclasses.asdict(self))

    @classmethod
    def read(cls, path: str | Path) -> AgentConfig:
        """The config the runner wrote; ValueError naming the file when it is not one."""
        try:
            data = files.read_json(path)  # logs/<S>/<run>/: a FIFO planted there is refused, not waited on
            return cls(**data)
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"{path}: not an agent config of tools.collect.carla.agent ({e})") from None

    @property
    def key(self) -> RunKey:
        return RunKey(self.scenario, self.name)


def get_entry_point() -> str:
    return ENTRY_POINT


# ----------------------------------------------------------------------------- CARLA's layouts -> ours


def bgra(image: Any) -> np.ndarray:
    """A carla.Image's pixels, (H, W, 4) uint8 in CARLA's BGRA order."""
    return np.frombuffer(image.raw_data, dtype=np.uint8).reshape(image.height, image.width, 4)


def rgb_of(pixels: np.ndarray) -> np.ndarray:
    """(H, W, 3) RGB of a BGRA array (the leaderboard hands RGB cameras over as BGRA arrays)."""
    return np.ascontiguousarray(pixels[..., 2::-1])


def semantics_of(pixels: np.ndarray) -> np.ndarray:
    """Class ids of a semantic camera's BGRA array: CARLA's tag is the red channel, and its tags are our ids
    (tools.dataset.semantics follows CARLA 0.9.14+)."""
    return np.ascontiguousarray(pixels[..., 2])


def depth_of(pixels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """A depth camera's BGRA array as the dataset's depth: uint16 centimetres along the axis, the sky 0,
    anything farther than MAX_DEPTH_M at MAX_DEPTH_M (as the embedded world records it)."""
    b, g, r = (pixels[..., i].astype(np.float64) for i in range(3))
    metres = (r + 256.0 * g + 65536.0 * b) / (256.0 ** 3 - 1.0) * CARLA_DEPTH_FAR_M
    cm = np.rint(np.minimum(metres, MAX_DEPTH_M) * 100.0).astype(np.uint16)
    cm[classes == semantics.SKY] = 0
    return cm


def lidar_of(raw: bytes | np.ndarray, cfg: LidarConfig, ego_actor_id: int) -> tuple[np.ndarray, np.ndarray]:
    """A semantic LiDAR measurement (its raw_data) as the dataset's `lidar` (float32 x, y, z in the ego frame,
    intensity) and `lidar_labels` (uint32 class, actor id; the ego's own id is 0, as in the boxes)."""
    det = np.frombuffer(raw, dtype=SEMANTIC_LIDAR_DTYPE)
    x = det["x"] + np.float32(cfg.x)  # the sensor's frame is the ego's (x forward, y right, z up), shifted
    y = det["y"]
    z = det["z"] + np.float32(cfg.z)
    dist = np.sqrt(det["x"] ** 2 + det["y"] ** 2 + det["z"] ** 2)
    points = np.stack([x, y, z, lidar_intensity(dist)], axis=1).astype(np.float32)
    ids = det["idx"].astype(np.uint32)
    ids[ids == np.uint32(ego_actor_id)] = 0
    return points, np.stack([det["tag"].astype(np.uint32), ids], axis=1)


# ----------------------------------------------------------------------------- the privileged state


def actor_class(actor: Any) -> int | None:
    """The semantic class of a CARLA actor's box, or None for what is not boxed (sensors, lights, signs)."""
    type_id = str(actor.type_id)
    if type_id.startswith("vehicle."):
        return _BASE_TYPE_CLASS.get(str(actor.attributes.get("base_type", "car")).lower(), semantics.CAR)
    if type_id.startswith("walker.pedestrian"):
        return semantics.PEDESTRIAN
    if type_id == "static.prop.mesh":  # the leaderboard spawns these for parked cars only
        mesh = str(actor.attributes.get("mesh_path", ""))
        if not mesh or PARKED_VEHICLE_MESHES in mesh:
            return semantics.CAR  # cameras and LiDAR see a car there (its semantic tag is Car)
    if type_id.startswith("static.prop"):
        return semantics.STATIC
    return None


def actor_box(actor: Any, box_id: int, cls: int, ground: float) -> Box:
    """The Box of a CARLA actor (its bounding box in the world; z from `ground`), speed along its heading."""
    tf = actor.get_transform()
    bb = actor.bounding_box
    # The box centre without carla.Transform.transform(location), which moves the location it is given in place
    # (checked with the 0.9.16 client; bounding_box.location hands out the actor's own). Pitch and roll of the
    # offset (tenths of a metre) are left out.
    yaw = math.radians(tf.rotation.yaw)
    cx, cy = ego_to_world(Pose(float(tf.location.x), float(tf.location.y), float(tf.rotation.yaw)),
                          np.array([float(bb.location.x), float(bb.location.y)])).tolist()
    cz = float(tf.location.z) + float(bb.location.z)
    v = actor.get_velocity()
    return Box(id=box_id, cls=cls, x=cx, y=cy, z=cz - ground,
               yaw=float(tf.rotation.yaw), length=2.0 * float(bb.extent.x), width=2.0 * float(bb.extent.y),
               height=2.0 * float(bb.extent.z), speed=float(v.x) * math.cos(yaw) + float(v.y) * math.sin(yaw))


def mount_offset(hero: Any) -> tuple[float, float, float]:
    """Where the ego frame's origin (the ground under the box centre) is in the hero actor's own frame: what
    turns a rig mount into the transform CARLA attaches a sensor with."""
    bb = hero.bounding_box
    return float(bb.location.x), float(bb.location.y), float(bb.location.z) - float(bb.extent.z)


class CarlaWorldView:
    """The tools.expert.expert.WorldView of a CARLA world: the ego and what is around it, once per tick."""

    def __init__(self, world: Any, carla_map: Any, hero: Any):
        self.world = world
        self.map = carla_map
        self.hero = hero
        self.time = 0.0
        self._snap: Snapshot | None = None
        self._stops: dict[int, list[Any]] = {}  # traffic light id -> its stop waypoints (they never move)

    def refresh(self, time_s: float) -> None:
        """Read the world anew (call once per tick, `time_s` simulated seconds since the route started)."""
        self.time = time_s
        ego_box = actor_box(self.hero, 0, semantics.CAR, 0.0)
        ground = ego_box.z - ego_box.height / 2.0
        ego = dataclasses.replace(ego_box, z=ego_box.height / 2.0)
        actors: list[Box] = []
        lights: list[Light] = []
        for actor in self.world.get_actors():
            if actor.id == self.hero.id:
                continue
            if str(actor.type_id).startswith("traffic.traffic_light"):
                lights += self._lights(actor, ground)
                continue
            cls = actor_class(actor)
            if cls is not None:
                actors.append(actor_box(actor, int(actor.id), cls, ground))
        self._snap = Snapshot(time=time_s, ego=ego, actors=actors, lights=lights, speed_limit=self.speed_limit(),
                              lane=self.lane(), acceleration=self.acceleration())

    def _lights(self, light: Any, ground: float) -> list[Light]:
        """One Light per stop line of a CARLA traffic light (its stop waypoints), id "<actor id>:<k>"."""
        if light.id not in self._stops:
            self._stops[light.id] = list(light.get_stop_waypoints())
        state = _LIGHT_STATE.get(str(light.get_state()).rsplit(".", 1)[-1], "off")
        out = []
        for k, wp in enumerate(self._stops[light.id]):
            tf = wp.transform
            out.append(Light(id=f"{light.id}:{k}", x=float(tf.location.x), y=float(tf.location.y),
                             yaw=float(tf.rotation.yaw), width=float(wp.lane_width), state=state))
        return out

    def ego_box(self) -> Box:
        return self.snapshot().ego

    def snapshot(self) -> Snapshot:
        if self._snap is None:
            raise RuntimeError("CarlaWorldView.refresh was not called this tick")
        return self._snap

    def speed_limit(self) -> float:
        """The ego's current speed limit (CARLA gives km/h), m/s."""
        return float(self.hero.get_speed_limit()) / 3.6

    def lane(self) -> str:
        """The ego's OpenDRIVE lane, "<road id>_<lane id>" (the embedded world records SUMO's lane id)."""
        wp = self.map.get_waypoint(self.hero.get_location())
        return f"{wp.road_id}_{wp.lane_id}" if wp is not None else ""

    def acceleration(self) -> float:
        """The ego's acceleration along its heading, m/s^2."""
        a = self.hero.get_acceleration()
        yaw = math.radians(self.hero.get_transform().rotation.yaw)
        return float(a.x) * math.cos(yaw) + float(a.y) * math.sin(yaw)


# ----------------------------------------------------------------------------- sensors


def declared_sensors(rig: RigConfig, offset: tuple[float, float, float]) -> list[dict[str, Any]]:
    """The leaderboard's sensor list (AutonomousAgent.sensors): the rig's RGB cameras, named as recorded."""
    return [{"type": "sensor.camera.rgb", "id": camera_sensors(cam.name)[0], **_mount(cam, offset),
             "width": cam.width, "height": cam.height, "fov": cam.fov} for cam in rig.cameras]


def check_rig(rig: RigConfig) -> None:
    """The rig's declared sensors against what the leaderboard allows (validate_sensor_configuration), before
    anything starts: ToolError naming the camera and the limit. The mounts are checked as declared with the hero's
    origin on the ground under its box centre: its real offset (a few tenths of a metre at most on CARLA's cars)
    is known only once the hero exists, when the leaderboard checks them again."""
    cameras = rig.cameras
    if len(cameras) > MAX_RGB_CAMERAS:
        raise ToolError(f"--rig: {len(cameras)} cameras, but the leaderboard allows at most {MAX_RGB_CAMERAS} RGB "
                        "cameras (every attempt would end as \"Agent's sensors were invalid\"); drop cameras")
    for cam, sensor in zip(cameras, declared_sensors(rig, (0.0, 0.0, 0.0)), strict=True):
        radius = math.sqrt(sensor["x"] ** 2 + sensor["y"] ** 2 + sensor["z"] ** 2)
        if radius > MAX_SENSOR_RADIUS_M:
            raise ToolError(f"--rig: camera {cam.name!r} at x {cam.x:g}, y {cam.y:g}, z {cam.z:g} is {radius:.2f} m "
                            f"from the ego's origin; the leaderboard refuses sensors beyond {MAX_SENSOR_RADIUS_M:g} m "
                            "(every attempt would end as \"Agent's sensors were invalid\"); move it closer")


def _mount(sensor: CameraConfig | LidarConfig, offset: tuple[float, float, float]) -> dict[str, float]:
    """A rig mount (ego frame) as the transform CARLA attaches the sensor to the hero with (its own frame),
    in tenths of millimetres (CARLA's boxes are float32)."""
    xyz = (sensor.x + offset[0], getattr(sensor, "y", 0.0) + offset[1], sensor.z + offset[2])
    return {"x": round(xyz[0], 4), "y": round(xyz[1], 4), "z": round(xyz[2], 4), "roll": 0.0, "pitch": 0.0,
            "yaw": float(getattr(sensor, "yaw", 0.0))}


@dataclass(frozen=True)
class OwnSensor:
    """A sensor the agent spawns itself: its recorded name(s), blueprint, attributes and mount."""

    name: str  # the key its data is kept under (the semantic camera: the rig's semantics name)
    blueprint: str
    attributes: dict[str, str]
    mount: dict[str, float]


def own_sensors(rig: RigConfig, offset: tuple[float, float, float], sim_hz: int) -> list[OwnSensor]:
    """Each camera's semantic and depth twin, and the semantic LiDAR turning once per tick."""
    out = []
    for cam in rig.cameras:
        _, sem_name, depth_name = camera_sensors(cam.name)
        attrs = {"image_size_x": str(cam.width), "image_size_y": str(cam.height), "fov": str(cam.fov)}
        out.append(OwnSensor(sem_name, "sensor.camera.semantic_segmentation", attrs, _mount(cam, offset)))
        out.append(OwnSensor(depth_name, "sensor.camera.depth", attrs, _mount(cam, offset)))
    li = rig.lidar
    out.append(OwnSensor(LIDAR, "sensor.lidar.ray_cast_semantic", {
        "channels": str(li.channels), "range": str(li.range), "upper_fov": str(li.upper_fov),
        "lower_fov": str(li.lower_fov), "rotation_frequency": str(sim_hz),
        "points_per_second": str(li.channels * li.azimuth_steps * sim_hz)}, _mount(li, offset)))
    return out


class SensorBuffer:
    """The latest measurement of each of the agent's own sensors, by frame; `wait` blocks for a frame's."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[int, Any]] = {}
        self._cond = threading.Condition()

    def callback(self, name: str):
        def put(measurement: Any) -> None:
            with self._cond:
                self._data[name] = (int(measurement.frame), measurement)
                self._cond.notify_all()
        return put

    def wait(self, names: list[str], frame: int, timeout: float = SENSOR_TIMEOUT_S) -> dict[str, Any]:
        """The measurements of `frame` of every name; RuntimeError naming the late ones after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                late = [n for n in names if n not in self._data or self._data[n][0] < frame]
                if not late:
                    return {n: self._data[n][1] for n in names}
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no data of frame {frame} from {', '.join(late)} after {timeout:.0f} s")
                self._cond.wait(left)


def to_sensors(rig: RigConfig, codecs: dict[str, str], input_data: dict[str, Any], own: dict[str, Any],
               ego_actor_id: int) -> dict[str, np.ndarray]:
    """The recorded sensors (but the BEV) of one frame: the leaderboard's `input_data` ({id: (frame, BGRA)})
    and the agent's own measurements ({name: carla measurement}), converted to tools.dataset.rig's arrays."""
    out: dict[str, np.ndarray] = {}
    for cam in rig.cameras:
        rgb_name, sem_name, depth_name = camera_sensors(cam.name)
        out[rgb_name] = rgb_of(np.asarray(input_data[rgb_name][1]))
        classes = semantics_of(bgra(own[sem_name]))
        out[sem_name] = classes
        out[depth_name] = depth_of(bgra(own[depth_name]), classes)
    points, labels = lidar_of(own[LIDAR].raw_data, rig.lidar, ego_actor_id)
    out[LIDAR], out[LIDAR_LABELS] = points, labels
    return {name: array for name, array in out.items() if name in codecs}


# ----------------------------------------------------------------------------- the agent


class AgentCore:
    """Everything our leaderboard agent does (the AutonomousAgent subclass only forwards to it)."""

    def __init__(self, config: AgentConfig):
        self.config = config
        self.settings = CollectSettings.from_flags(config.settings)
        self.rig = self.settings.load_rig()
        self.layout = Layout(Path(config.root))
        self.key = config.key
        self.buffer = SensorBuffer()
        self.spawned: list[Any] = []
        self.t0: float | None = None

    def sensors(self, hero: Any) -> list[dict[str, Any]]:
        return declared_sensors(self.rig, mount_offset(hero))

    def start(self, world: Any, carla_map: Any, hero: Any, plan: list | None) -> None:
        """At set-up (the hero exists; the leaderboard then ticks the world a few times before the route starts,
        so that sensors deliver from the first tick): take the route the leaderboard planned (`plan`, its dense
        route: set_global_plan), make the expert and the BEV, spawn the agent's own sensors, write run.json."""
        cfg, s = self.config, self.settings
        route = select_route(Path(cfg.route_file), cfg.route_id)
        town = town_of_map(carla_map)
        dense = plan_route(plan, carla_map)
        self.view = CarlaWorldView(world, carla_map, hero)
        self.route, self.dense = route, dense
        self.recorder = RunRecorder(self.layout, self.key, route, dense, s)
        self.driver = make_expert(dense, 1.0 / s.sim_hz, carla_map)
        self.referee = Referee(dense, s, stop_signs(dense, carla_map))
        # The BEV, drawn as in the embedded world; on a large town, the scene round the route only.
        self.renderer = Renderer(Scene(town, seed=0, region=Scene.route_region(dense.xy)), self.rig)
        self.codecs = self.rig.sensor_names()
        offset = mount_offset(hero)
        library = world.get_blueprint_library()
        import carla

        for spec in own_sensors(self.rig, offset, s.sim_hz):
            bp = library.find(spec.blueprint)
            for k, v in spec.attributes.items():
                bp.set_attribute(k, v)
            m = spec.mount
            tf = carla.Transform(carla.Location(x=m["x"], y=m["y"], z=m["z"]),
                                 carla.Rotation(pitch=m["pitch"], roll=m["roll"], yaw=m["yaw"]))
            sensor = world.spawn_actor(bp, tf, attach_to=hero)
            sensor.listen(self.buffer.callback(spec.name))
            self.spawned.append(sensor)
        self.own_names = [spec.name for spec in own_sensors(self.rig, offset, s.sim_hz)]
        self.recorder.start(town=route.town, town_file=town.xodr, rig=self.rig, repetition=cfg.repetition,
                            seed=cfg.seed, attempt=cfg.attempt)
        self.hero_id = int(hero.id)

    def step(self, input_data: dict[str, Any], frame: int, timestamp: float) -> Any:
        """One tick: our Control (tools.expert.control) for the ego; the recorder writes a frame when one is due."""
        if self.t0 is None:
            self.t0 = timestamp
        view = self.view
        view.refresh(timestamp - self.t0)
        snap = view.snapshot()
        self.referee.track(np.array([snap.ego.x, snap.ego.y]))
        decision = self.driver.step(view, None)
        self.recorder.add_frame(snap, self.referee, decision, lambda: self._sensors(input_data, frame, snap))
        return decision.control

    def _sensors(self, input_data: dict[str, Any], frame: int, snap: Snapshot) -> dict[str, tuple[np.ndarray, str]]:
        """The frame's sensors (the recorder asks on frame ticks only): the leaderboard's cameras, the agent's own
        sensors once they delivered this frame, and the BEV."""
        own = self.buffer.wait(self.own_names, frame)
        arrays = to_sensors(self.rig, self.codecs, input_data, own, self.hero_id)
        arrays["bev"] = self.renderer.bev(snap)
        return {name: (arrays[name], codec) for name, codec in self.codecs.items()}

    def destroy(self) -> None:
        for sensor in self.spawned:
            try:
                sensor.stop()
                sensor.destroy()
            except RuntimeError as e:  # the server may be gone already
                log.warning("could not destroy sensor %s: %s", getattr(sensor, "id", "?"), e)
        self.spawned = []
        if hasattr(self, "recorder"):  # set up: the run's measurements index, after its last frame
            self.recorder.finish()
            log.info("%s: %d frames recorded in %d ticks", self.key, self.recorder.frames, self.recorder.ticks)


def plan_route(plan: list | None, carla_map: Any) -> DenseRoute:
    """The route the expert drives: the leaderboard's own plan, as the evaluator hands it to the agent before its
    set-up (AutonomousAgent.set_global_plan's `global_plan_world_coord`: the route file's waypoints joined by
    CARLA's GlobalRoutePlanner, (carla.Transform, RoadOption) about 1 m apart; the base class keeps only a
    downsampled copy, so the agent keeps the whole). The leaderboard measures completion and deviation on this
    plan: a route of our own could take the other branch of a fork and be judged deviated."""
    if not plan:
        raise RuntimeError("the leaderboard gave the agent no route (set_global_plan was not called before setup)")
    xy = [(float(t.location.x), float(t.location.y)) for t, _ in plan]
    yaw = [float(t.rotation.yaw) for t, _ in plan]
    option = [int(getattr(o, "value", o)) for _, o in plan]
    return given_route(np.array(xy), np.array(yaw), np.array(option), carla_map)


def town_of_map(carla_map: Any) -> Any:
    """The embedded world's Town (tools.collect.base.town) of the server's map, from its OpenDRIVE text: the BEV's
    road raster is drawn from it. Written once per map content under the user's cache (netconvert's network
    is cached beside it)."""
    text = carla_map.to_opendrive()
    name = str(carla_map.name).rsplit("/", 1)[-1] or "town"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = user_cache("carla-maps") / f"{name}-{digest}.xodr"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(path, text.encode())
    return Town(path)
