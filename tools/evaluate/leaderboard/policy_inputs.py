"""Our own trained policy as a leaderboard 2.0 sensor agent: the core of the agent file
(agent_file/policy_agent.py), without the leaderboard's modules, so that it is tested as it is.

What the checkpoint sees must be what the embedded world's PolicyDriver hands it (tools.evaluate.driver): the
Preprocessor's sample of the rig camera, the LiDAR's BEV counts, the target point, the speed and the command,
from the same functions (the drive loop's `tools.collect.base.recording.measurements`, the referee's progress on the
route, the Pilot's plan and controllers). Where a sensor agent cannot receive what the embedded world's driver reads,
the smallest faithful bridge:

- the ego's pose: GNSS, converted back with the map's reference solved from the plan (geo.reference_from_plan) and
  the installed CARLA's projection, and the IMU's compass, instead of the ego box (exact up to CARLA's float32
  locations without the leaderboard's noise; with it, GNSS is off by about half a metre, unfiltered);
- the place on the route (the target point, the command): the referee's own tracking (Referee.track) on the dense
  route the plan gives (the world plan, about 1 m apart), at every tick from the second, as the drive loop's referee
  tracks the ego after each tick;
- the LiDAR: the leaderboard's sensor gives half a turn per tick (64 channels, 85 m; the rig's LiDAR was a full turn
  of its own channels and reach): the previous tick's half moved into this tick's ego frame and joined to this
  one, a full turn, in the ego frame (the mount's x and z added back). The density differs (64 x 938 rays a turn,
  less CARLA's drop-off, for the rig's channels x azimuth steps): counts in the BEV differ; measured, not hidden
  (docs/leaderboard-agent.md);
- the camera: CARLA's BGRA as RGB, at the rig camera's size, fov and mount (the same pixels from our renderer);
- what the preprocessing reads but the model never sees (the camera's semantics and depth, the BEV labels): zeros of
  their shapes.

The model runs at the rate it was trained at (a frame every `frame_dt`, from the agent's first tick, as the drive
loop's frame ticks), the controllers at every tick.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from tools.collect.base.config import CollectSettings
from tools.collect.base.recording import measurements
from tools.collect.base.referee import Referee
from tools.core import files
from tools.core.errors import ToolError
from tools.dataset import rig as R
from tools.dataset.geometry import Pose, ego_to_world, world_to_ego
from tools.dataset.measurements import Measurements
from tools.evaluate.driver import Pilot
from tools.evaluate.leaderboard import geo
from tools.evaluate.policy import load_policy
from tools.expert.control import Control
from tools.expert.route import DenseRoute
from tools.expert.state import Box, Snapshot

FLAG = "--agent-config"
#: The leaderboard's tick (20 Hz).
DT = 0.05
#: The ids of the agent's sensors.
CAMERA, LIDAR, GNSS, IMU, SPEED = "camera", "lidar", "gnss", "imu", "speed"


def checkpoint_of(config: str | Path) -> Path:
    """The checkpoint an --agent-config names: a post-training run folder or step folder itself, or a JSON file
    {"checkpoint": PATH} (PATH relative to the file's folder)."""
    return read_config(config)[0]


def read_config(config: str | Path) -> tuple[Path, float]:
    """(checkpoint, GNSS gain) of an --agent-config: a checkpoint folder (gain 1: GNSS as read), or a JSON file
    {"checkpoint": PATH, "gnss_gain": G} (G in (0, 1], default 1: the share of each GNSS reading's correction taken
    into the position dead-reckoned from the last one with the speedometer and compass)."""
    path = Path(config).expanduser()
    if str(config) in ("", ".") or not path.exists():
        raise ToolError(f"{FLAG} {config!r}: no such file or folder; give a post-training checkpoint (a run folder or "
                        "one of its step folders) or a JSON file naming one as {\"checkpoint\": PATH}")
    if path.is_dir():
        return path, 1.0
    try:
        data = files.read_json(path)
        named, gain = data["checkpoint"], float(data.get("gnss_gain", 1.0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ToolError(f"{FLAG} {path}: not a JSON file {{\"checkpoint\": PATH}} ({type(e).__name__}: {e}); give "
                        "the checkpoint folder itself, or such a file") from None
    if not 0.0 < gain <= 1.0:
        raise ToolError(f"{FLAG} {path}: gnss_gain {gain}: expected a share in (0, 1] (1: GNSS as read)")
    return (path.parent / str(named)).expanduser(), gain


class HalfTurns:
    """The leaderboard LiDAR's half turns joined into full turns in the ego frame: the previous tick's half moved
    with the ego's motion into this tick's frame."""

    def __init__(self, x: float, z: float):
        self.mount = np.array([x, 0.0, z], dtype=np.float64)
        self.previous: tuple[np.ndarray, Pose] | None = None

    def join(self, half: np.ndarray, pose: Pose) -> np.ndarray:
        """(N, 4) float32 x, y, z (ego frame), intensity: this tick's half turn (sensor frame) and the last one."""
        half = np.asarray(half, dtype=np.float64).reshape(-1, 4)
        now = np.concatenate([half[:, :3] + self.mount, half[:, 3:]], axis=1)
        parts = [now]
        if self.previous is not None:
            before, then = self.previous
            moved = world_to_ego(pose, ego_to_world(then, before[:, :3]))
            parts.insert(0, np.concatenate([moved, before[:, 3:]], axis=1))
        self.previous = (now, pose)
        return np.concatenate(parts).astype(np.float32)


class PolicyAgentCore:
    """A checkpoint driving from the leaderboard's input: `sensors()` to declare, `set_plan` once, `step` each tick."""

    def __init__(self, config: str | Path, dt: float = DT):
        checkpoint, self.gnss_gain = read_config(config)
        self.policy = load_policy(checkpoint)
        self._position: tuple[float, float] | None = None  # the last tick's estimate
        self.rig = self.policy.rig
        self.pilot = Pilot(self.policy, dt)
        self.dt = dt
        self.settings = CollectSettings()  # the drive loop's: route points ahead, the referee's window
        self.every = max(1, round(self.policy.frame_dt / dt))  # ticks between two frames the model sees
        self.camera = self.rig.camera(self.policy.camera)
        self.lidar = HalfTurns(self.rig.lidar.x, self.rig.lidar.z)
        self.ticks = 0
        self.frames = 0
        self.route: DenseRoute | None = None
        #: The last frame's model input, as the Preprocessor got it (for checks: docs/leaderboard-agent.md).
        self.last_input: tuple[dict[str, np.ndarray], Measurements] | None = None

    def sensors(self) -> list[dict[str, Any]]:
        """The rig the checkpoint trained with, as the leaderboard's sensors: its camera, the LiDAR where the rig's
        sits (the leaderboard fixes its channels and reach), GNSS, IMU and speedometer at the hero's origin."""
        c, lidar = self.camera, self.rig.lidar
        level = {"roll": 0.0, "pitch": 0.0}
        return [
            {"type": "sensor.camera.rgb", "id": CAMERA, "x": c.x, "y": c.y, "z": c.z, **level, "yaw": c.yaw,
             "width": c.width, "height": c.height, "fov": c.fov},
            {"type": "sensor.lidar.ray_cast", "id": LIDAR, "x": lidar.x, "y": 0.0, "z": lidar.z, **level, "yaw": 0.0},
            {"type": "sensor.other.gnss", "id": GNSS, "x": 0.0, "y": 0.0, "z": 0.0},
            {"type": "sensor.other.imu", "id": IMU, "x": 0.0, "y": 0.0, "z": 0.0, **level, "yaw": 0.0},
            {"type": "sensor.speedometer", "id": SPEED, "reading_frequency": round(1.0 / self.dt)},
        ]

    def set_plan(self, gps_plan: list, world_plan: list) -> None:
        """The whole plan (set_global_plan's, before the base class downsamples it): the dense route and the map's
        GNSS reference."""
        xy = np.array([[t.location.x, t.location.y] for t, _ in world_plan], dtype=np.float64)
        yaw = np.array([t.rotation.yaw for t, _ in world_plan], dtype=np.float64)
        option = np.array([int(getattr(o, "value", o)) for _, o in world_plan], dtype=np.int64)
        s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
        self.route = DenseRoute(xy=xy, yaw=yaw, option=option, s=s, junction=np.zeros(len(xy), dtype=bool))
        self.coarse = self.route.target_indices()
        self.referee = Referee(self.route, self.settings)
        first = gps_plan[0][0]
        self.reference = geo.reference_from_plan(first["lat"], first["lon"], xy[0, 0], xy[0, 1])

    def pose(self, input_data: dict[str, tuple]) -> tuple[Pose, float]:
        """The ego's pose (GNSS and compass) and speed (speedometer)."""
        lat, lon, _ = input_data[GNSS][1]
        x, y = geo.gnss_to_world(float(lat), float(lon), *self.reference)
        compass = float(input_data[IMU][1][6])
        yaw = 0.0 if math.isnan(compass) else (math.degrees(compass) - 90.0 + 180.0) % 360.0 - 180.0
        speed = float(input_data[SPEED][1]["speed"])
        if self.gnss_gain < 1.0 and self._position is not None:  # dead reckoning, then a share of GNSS's correction
            step, h = speed * self.dt, math.radians(yaw)
            px, py = self._position[0] + step * math.cos(h), self._position[1] + step * math.sin(h)
            x, y = px + self.gnss_gain * (x - px), py + self.gnss_gain * (y - py)
        self._position = (x, y)
        return Pose(x, y, yaw), speed

    def frame(self, input_data: dict[str, tuple], pose: Pose, speed: float, points: np.ndarray
              ) -> tuple[dict[str, np.ndarray], Measurements]:
        """The model's input of this tick's frame: the sensors by the rig's names and the frame's measurements."""
        c = self.camera
        rgb, semantics, depth = R.camera_sensors(c.name)
        bgra = input_data[CAMERA][1]
        sensors = {rgb: np.ascontiguousarray(bgra[..., 2::-1]), semantics: np.zeros((c.height, c.width), np.uint8),
                   depth: np.zeros((c.height, c.width), np.uint16), R.LIDAR: points,
                   R.BEV: np.zeros((self.rig.bev.pixels,) * 2, np.uint8)}
        ego = Box(id=0, cls=0, x=pose.x, y=pose.y, z=0.0, yaw=pose.yaw, length=0.0, width=0.0, height=0.0, speed=speed)
        snap = Snapshot(time=self.ticks * self.dt, ego=ego)
        m = measurements(snap, self.route, self.coarse, self.referee, frame_index=self.frames, tick=self.ticks,
                         ahead=self.settings.route_ahead, weather={}, decision=None)
        return sensors, m

    def step(self, input_data: dict[str, tuple]) -> Control:
        """One tick: a new plan on a frame tick, the controllers' control every tick."""
        if self.route is None:
            raise RuntimeError("set_plan was never called: the leaderboard gives the plan before the first tick")
        pose, speed = self.pose(input_data)
        points = self.lidar.join(input_data[LIDAR][1], pose)
        if self.ticks:  # the drive loop's referee tracks the ego after each tick: from the second tick on
            self.referee.track(np.array([pose.x, pose.y]))
        if self.ticks % self.every == 0:
            self.last_input = self.frame(input_data, pose, speed, points)
            self.pilot.plan(*self.last_input, pose)
            self.frames += 1
        self.ticks += 1
        return self.pilot.control(pose.x, pose.y, pose.yaw, speed)
