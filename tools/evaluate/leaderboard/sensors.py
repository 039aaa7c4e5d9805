"""A leaderboard agent's sensors in the embedded world: checked as the leaderboard checks them, rendered with our
renderer (tools.collect.sensors.render) from a rig built from the agent's own list, and handed over as the
leaderboard's sensor interface hands them: `{id: (frame, data)}` every 20 Hz tick.

What each sensor delivers (leaderboard-2.0 leaderboard/envs/sensor_interface.py `CallBack`, the attributes
leaderboard/autoagents/agent_wrapper.py `_preprocess_sensor_spec` fixes, and CARLA's sensors):

- sensor.camera.rgb: (H, W, 4) uint8 BGRA, alpha 255, at the agent's width, height and horizontal fov;
- sensor.lidar.ray_cast: (N, 4) float32 x, y, z, intensity in the sensor's frame (CARLA's, left-handed: x forward,
  y right, z up); 64 channels from +10 to -30 degrees, 85 m, 10 Hz at 600,000 points/s: half a turn per 20 Hz tick,
  469 rays per channel; intensity exp(-0.004 d); CARLA's drop-off (45 % of the rays; below intensity 0.8 a
  return is kept with probability 0.6 + 0.5 intensity: RayCastLidar.cpp);
- sensor.other.gnss: (3,) float64 lat, lon, alt of the sensor's place (geo.gnss), noise 5e-6 (degrees, metres);
- sensor.other.imu: (7,) float64 accelerometer xyz (m/s^2, gravity included), gyroscope xyz (rad/s), compass
  (radians clockwise from north, CARLA's -y) in the sensor's frame; noise 0.001 (accelerometer z: 0.015);
- sensor.speedometer: {'speed': m/s along the heading};
- sensor.opendrive_map: {'opendrive': the town's OpenDRIVE text}, on the first tick only (the leaderboard's reader
  sends it once and the sensor interface does not wait for it).

Every other sensor delivers every tick (the leaderboard sets no sensor_tick, and its sensor interface waits for
all of them each frame).

The noise (GNSS, IMU, LiDAR drop-off) can be switched off (`noise=False`) for checks; drawn from numpy's generator,
not CARLA's engine. What the embedded world cannot render is refused at set-up, in one line naming the sensor:
radar, a camera with pitch or roll, more than one LiDAR, a LiDAR off the centre line (y) or tilted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tools.dataset.rig import LIDAR, BevConfig, CameraConfig, LidarConfig, RigConfig, camera_sensors
from tools.evaluate.leaderboard import geo
from tools.evaluate.leaderboard.world import HeroState

#: The leaderboard's limits (agent_wrapper.py: MAX_ALLOWED_RADIUS_SENSOR, SENSORS_LIMITS, QUALIFIER_SENSORS_LIMITS).
MAX_RADIUS_M = 3.0
SENSORS_LIMITS = {"sensor.camera.rgb": 8, "sensor.lidar.ray_cast": 2, "sensor.other.radar": 4, "sensor.other.gnss": 1,
                  "sensor.other.imu": 1, "sensor.opendrive_map": 1, "sensor.speedometer": 1}
QUALIFIER_LIMITS = {"sensor.camera.rgb": 4, "sensor.lidar.ray_cast": 1, "sensor.other.radar": 2,
                    "sensor.other.gnss": 1, "sensor.other.imu": 1, "sensor.opendrive_map": 1, "sensor.speedometer": 1}
TRACKS = ("SENSORS", "MAP", "SENSORS_QUALIFIER", "MAP_QUALIFIER")

#: The leaderboard's LiDAR (agent_wrapper.py) and CARLA's ray-cast LiDAR model (RayCastLidar.cpp).
LIDAR_CHANNELS = 64
LIDAR_RANGE_M = 85.0
LIDAR_ROTATION_HZ = 10.0
LIDAR_POINTS_PER_SECOND = 600000
LIDAR_UPPER_FOV, LIDAR_LOWER_FOV = 10.0, -30.0
LIDAR_ATTENUATION = 0.004
LIDAR_DROPOFF_GENERAL = 0.45
LIDAR_DROPOFF_LIMIT = 0.8
LIDAR_DROPOFF_ZERO = 0.4
#: The leaderboard's IMU noise (agent_wrapper.py): accelerometer x, y, z and gyroscope x, y, z standard deviations.
IMU_ACCEL_STDDEV = (0.001, 0.001, 0.015)
IMU_GYRO_STDDEV = (0.001, 0.001, 0.001)
#: CARLA's IMU adds gravity to the accelerometer (m/s^2).
GRAVITY = 9.81


class SensorsInvalid(Exception):
    """The agent's sensors break the leaderboard's rules, or ask what the embedded world cannot render."""


def _track(track: Any) -> str:
    return str(getattr(track, "value", track))


def validate(sensors: Any, agent_track: Any, selected_track: str = "SENSORS") -> None:
    """The leaderboard's checks of an agent's sensor list (agent_wrapper.validate_sensor_configuration): the track,
    unique ids, allowed types (no OpenDRIVE map on the SENSORS track), within 3 m of the hero's origin, counts."""
    if _track(agent_track) != selected_track:
        raise SensorsInvalid(f"You are submitting to the wrong track [{selected_track}]! (the agent's track is "
                             f"{_track(agent_track)})")
    if not isinstance(sensors, list | tuple) or not all(isinstance(s, dict) for s in sensors):
        raise SensorsInvalid(f"sensors() returned {type(sensors).__name__}, not a list of dicts")
    seen: set[str] = set()
    count: dict[str, int] = {}
    for s in sensors:
        if "id" not in s or "type" not in s:
            raise SensorsInvalid(f"sensor {s!r} has no {'id' if 'id' not in s else 'type'}")
        if s["id"] in seen:
            raise SensorsInvalid(f"Duplicated sensor tag [{s['id']}]")
        seen.add(s["id"])
        if _track(agent_track) == "SENSORS" and s["type"].startswith("sensor.opendrive_map"):
            raise SensorsInvalid("Illegal sensor 'sensor.opendrive_map' used for Track [SENSORS]!")
        if s["type"] not in SENSORS_LIMITS:
            raise SensorsInvalid(f"Illegal sensor '{s['type']}' used for Track [{_track(agent_track)}]!")
        if all(k in s for k in "xyz") and math.sqrt(s["x"] ** 2 + s["y"] ** 2 + s["z"] ** 2) > MAX_RADIUS_M:
            raise SensorsInvalid(f"Illegal sensor extrinsics used for sensor '{s['id']}'. Max allowed radius is "
                                 f"{MAX_RADIUS_M:g}m")
        count[s["type"]] = count.get(s["type"], 0) + 1
    limits = QUALIFIER_LIMITS if _track(agent_track).endswith("QUALIFIER") else SENSORS_LIMITS
    for kind, most in limits.items():
        if count.get(kind, 0) > most:
            raise SensorsInvalid(f"Too many {kind} used! Maximum number allowed is {most}, but {count[kind]} were "
                                 "requested.")


def _need(s: dict, *keys: str) -> list[float]:
    missing = [k for k in keys if k not in s]
    if missing:
        raise SensorsInvalid(f"sensor '{s['id']}' ({s['type']}) has no {', '.join(missing)} (the leaderboard needs "
                             "them to spawn it)")
    try:
        return [float(s[k]) for k in keys]
    except (TypeError, ValueError):
        raise SensorsInvalid(f"sensor '{s['id']}': {', '.join(keys)} must be numbers") from None


@dataclass(frozen=True)
class Mount:
    """Where a sensor sits on the hero (its frame: x forward, y right, z up from the ground under the box centre)."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    yaw: float = 0.0  # degrees, clockwise from above (CARLA's)


@dataclass(frozen=True)
class Spec:
    id: str
    type: str
    mount: Mount
    camera: str = ""  # the rig camera that renders it


def suite(sensors: list[dict], dt: float) -> tuple[list[Spec], RigConfig]:
    """The agent's (validated) sensor list as specs and the rig that renders them; SensorsInvalid naming the sensor
    for what the embedded world cannot render."""
    specs: list[Spec] = []
    cameras: list[CameraConfig] = []
    lidar: LidarConfig | None = None
    for s in sensors:
        kind, sid = s["type"], str(s["id"])
        if kind == "sensor.camera.rgb":
            x, y, z, roll, pitch, yaw, width, height, fov = _need(s, "x", "y", "z", "roll", "pitch", "yaw", "width",
                                                                   "height", "fov")
            if roll or pitch:
                raise SensorsInvalid(f"camera '{sid}': pitch {pitch:g}, roll {roll:g}: the embedded world renders "
                                     "level cameras only (pitch and roll 0)")
            if z <= 0:
                raise SensorsInvalid(f"camera '{sid}': z {z:g}: the embedded world's cameras sit above the ground")
            name = f"lb{len(cameras)}"
            try:
                cameras.append(CameraConfig(name=name, width=int(width), height=int(height), fov=fov, x=x, y=y, z=z,
                                            yaw=yaw))
            except ValueError as e:
                raise SensorsInvalid(f"camera '{sid}': {e}") from None
            specs.append(Spec(sid, kind, Mount(x, y, z, yaw), camera=name))
        elif kind == "sensor.lidar.ray_cast":
            x, y, z, roll, pitch, yaw = _need(s, "x", "y", "z", "roll", "pitch", "yaw")
            if lidar is not None:
                raise SensorsInvalid(f"LiDAR '{sid}': the embedded world renders one LiDAR only")
            if roll or pitch or y:
                raise SensorsInvalid(f"LiDAR '{sid}': y {y:g}, pitch {pitch:g}, roll {roll:g}: the embedded world's "
                                     "LiDAR sits level on the hero's centre line (y, pitch and roll 0)")
            if z <= 0:
                raise SensorsInvalid(f"LiDAR '{sid}': z {z:g}: the embedded world's LiDAR sits above the ground")
            # CARLA's points per laser per tick (RayCastSemanticLidar.cpp: RoundHalfFromZero), 469 at 20 Hz.
            per_channel = int(math.floor(LIDAR_POINTS_PER_SECOND * dt / LIDAR_CHANNELS + 0.5))
            turn = round(per_channel / (LIDAR_ROTATION_HZ * dt))
            lidar = LidarConfig(channels=LIDAR_CHANNELS, azimuth_steps=turn, range=LIDAR_RANGE_M, z=z, x=x,
                                upper_fov=LIDAR_UPPER_FOV, lower_fov=LIDAR_LOWER_FOV)
            specs.append(Spec(sid, kind, Mount(x, y, z, yaw)))
        elif kind == "sensor.other.radar":
            raise SensorsInvalid(f"radar '{sid}': the embedded world has no radar model; drop it from sensors()")
        elif kind == "sensor.other.gnss":
            x, y, z = _need(s, "x", "y", "z")
            specs.append(Spec(sid, kind, Mount(x, y, z)))  # the leaderboard spawns it unrotated
        elif kind == "sensor.other.imu":
            x, y, z, roll, pitch, yaw = _need(s, "x", "y", "z", "roll", "pitch", "yaw")
            if roll or pitch:
                raise SensorsInvalid(f"IMU '{sid}': pitch {pitch:g}, roll {roll:g}: the embedded world's IMU is level")
            specs.append(Spec(sid, kind, Mount(x, y, z, yaw)))
        elif kind == "sensor.opendrive_map":
            _need(s, "reading_frequency")
            specs.append(Spec(sid, kind, Mount()))
        else:  # sensor.speedometer
            specs.append(Spec(sid, kind, Mount()))
    # Without a LiDAR of the agent's, a token one (the renderer always casts one); the default BEV (under a
    # millisecond) draws the run's picture as for every evaluation.
    rig = RigConfig(cameras=tuple(cameras),
                    lidar=lidar or LidarConfig(channels=1, azimuth_steps=4, range=1.0, z=1.0, upper_fov=0.0,
                                               lower_fov=0.0),
                    bev=BevConfig())
    return specs, rig


def to_bgra(rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) RGB as CARLA's (H, W, 4) BGRA, alpha 255."""
    out = np.empty(rgb.shape[:2] + (4,), dtype=np.uint8)
    out[..., 0], out[..., 1], out[..., 2] = rgb[..., 2], rgb[..., 1], rgb[..., 0]  # channel by channel: 3x faster
    out[..., 3] = 255
    return out


class SensorReader:
    """Each tick's `{id: (frame, data)}` of the agent's sensors, from the rendered rig and the hero's state."""

    def __init__(self, specs: list[Spec], rig: RigConfig, carla_map: Any, dt: float, noise: bool, seed: int):
        self.specs = specs
        self.rig = rig
        self.map = carla_map
        self.dt = dt
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.ticks = 0
        self.opendrive: str | None = None
        self._imu_track: dict[str, list[np.ndarray]] = {}  # the IMU's last world positions

    def read(self, rendered: dict[str, tuple[np.ndarray, str]], hero: HeroState, frame: int) -> dict[str, tuple]:
        """One tick's data of every sensor; the first call is the sensors' first tick."""
        out: dict[str, tuple] = {}
        # The map first: the leaderboard's sensor interface stops reading a frame's queue once every other sensor
        # has delivered, so the map must be queued before them to reach the agent.
        for spec in sorted(self.specs, key=lambda sp: sp.type != "sensor.opendrive_map"):
            data = self._measure(spec, rendered, hero)
            if data is not None:
                out[spec.id] = (frame, data)
        self.ticks += 1
        return out

    def _measure(self, spec: Spec, rendered: dict, hero: HeroState) -> Any:
        kind = spec.type
        if kind == "sensor.camera.rgb":
            return to_bgra(rendered[camera_sensors(spec.camera)[0]][0])
        if kind == "sensor.lidar.ray_cast":
            return self._lidar(rendered[LIDAR][0], spec.mount)
        if kind == "sensor.other.gnss":
            x, y = self._place(hero, spec.mount)
            lat, lon, alt = geo.gnss(self.map, x, y, spec.mount.z)
            if self.noise:
                lat, lon, alt = np.array([lat, lon, alt]) + self.rng.normal(0.0, geo.GNSS_NOISE_STDDEV)
            return np.array([lat, lon, alt], dtype=np.float64)
        if kind == "sensor.other.imu":
            return self._imu(spec, hero)
        if kind == "sensor.speedometer":
            return {"speed": float(hero.speed)}
        if kind == "sensor.opendrive_map":
            if self.ticks:
                return None  # the leaderboard's reader sends it once, at the first tick
            if self.opendrive is None:
                self.opendrive = self.map.to_opendrive()
            return {"opendrive": self.opendrive}
        raise AssertionError(kind)

    @staticmethod
    def _place(hero: HeroState, m: Mount) -> tuple[float, float]:
        """The world (x, y) of a mount on the hero."""
        c, s = math.cos(math.radians(hero.yaw)), math.sin(math.radians(hero.yaw))
        return hero.x + c * m.x - s * m.y, hero.y + s * m.x + c * m.y

    def _lidar(self, points: np.ndarray, m: Mount) -> np.ndarray:
        """The renderer's full turn (ego frame) as CARLA's half turn of this tick, in the sensor's frame. CARLA's
        ray-cast LiDAR (RayCastSemanticLidar.cpp SimulateLidar) casts at fmod(current + step * i, 360) - 180 degrees,
        clockwise seen from above, the current angle starting at 0 and advancing 180 degrees a tick: the first
        tick the left half (-180 to 0), the next the right half (0 to 180), and so on. (Under the leaderboard the
        sensor has ticked 10 times before the agent's first step, an even number: the same parity.)"""
        c, s = math.cos(math.radians(m.yaw)), math.sin(math.radians(m.yaw))
        dx, dy, dz = points[:, 0] - m.x, points[:, 1] - m.y, points[:, 2] - m.z
        x, y = c * dx + s * dy, -s * dx + c * dy
        azimuth = np.degrees(np.arctan2(y, x))
        start = -180.0 + 180.0 * (self.ticks % 2)
        keep = (azimuth >= start) & (azimuth < start + 180.0)
        x, y, z = x[keep], y[keep], dz[keep]
        intensity = np.exp(-LIDAR_ATTENUATION * np.sqrt(x * x + y * y + z * z))
        if self.noise:  # CARLA's drop-off: rays dropped before casting, then weak returns
            kept = self.rng.random(len(x)) >= LIDAR_DROPOFF_GENERAL
            keep_rate = (LIDAR_DROPOFF_ZERO / LIDAR_DROPOFF_LIMIT) * intensity + (1.0 - LIDAR_DROPOFF_ZERO)
            kept &= (intensity > LIDAR_DROPOFF_LIMIT) | (self.rng.random(len(x)) < keep_rate)
            x, y, z, intensity = x[kept], y[kept], z[kept], intensity[kept]
        return np.stack([x, y, z, intensity], axis=1).astype(np.float32)

    def _imu(self, spec: Spec, hero: HeroState) -> np.ndarray:
        """CARLA's IMU: the acceleration of the sensor's own place (second difference of its last three positions,
        as InertialMeasurementUnit.cpp) plus gravity, the angular velocity, both in the sensor's frame, and the
        compass: the sensor's heading in radians clockwise from north (CARLA's north is -y), in [0, 2 pi)."""
        m = spec.mount
        track = self._imu_track.setdefault(spec.id, [])
        track.append(np.array(self._place(hero, m)))
        del track[:-3]
        accel_world = np.zeros(2)
        if len(track) == 3:
            accel_world = (track[2] - 2.0 * track[1] + track[0]) / self.dt ** 2
        yaw = math.radians(hero.yaw + m.yaw)
        c, s = math.cos(yaw), math.sin(yaw)
        accel = np.array([c * accel_world[0] + s * accel_world[1], -s * accel_world[0] + c * accel_world[1], GRAVITY])
        gyro = np.array([0.0, 0.0, math.radians(hero.yaw_rate)])
        if self.noise:
            accel = accel + self.rng.normal(0.0, IMU_ACCEL_STDDEV)
            gyro = gyro + self.rng.normal(0.0, IMU_GYRO_STDDEV)
        compass = (yaw + math.pi / 2.0) % (2.0 * math.pi)
        return np.array([*accel, *gyro, compass], dtype=np.float64)
