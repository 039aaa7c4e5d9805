"""The rig: which sensors a run records, where they sit on the ego, and what each recorded sensor is named.

One frozen dataclass per sensor kind (`CameraConfig`, `LidarConfig`, `BevConfig`) and the rig holding
them (`RigConfig`), read from a rig file (`collect --rig FILE`) and written into every run's run.json
as `rig`. Every producer (the embedded world's renderer, the CARLA agent) records what the rig names,
under the names `sensor_names` gives; every consumer (cache, show, export) reads the rig back from
run.json with `read_run_rig` and looks sensors up by the same names.

Mounts are in the ego frame (tools.dataset.geometry): x forward from the ego box's centre, y right,
z above the ground. Sensors have no pitch or roll.

Recorded sensors per frame (name: dtype shape, codec):

| name                  | array                                         | codec |
|-----------------------|-----------------------------------------------|-------|
| rgb_<camera>          | uint8 (H, W, 3)                               | jpeg  |
| semantics_<camera>    | uint8 (H, W): tools.dataset.semantics ids     | png   |
| depth_<camera>        | uint16 (H, W): centimetres along the axis, 0 sky | png |
| lidar                 | float32 (N, 4): x, y, z (ego frame), intensity | zstd_shuffle |
| lidar_labels          | uint32 (N, 2): semantic id, actor id (0: none) | zstd  |
| bev                   | uint8 (pixels, pixels): semantics.BEV_* ids    | png   |
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from tools.core import files
from tools.dataset.codec import Spec

#: Names of the recorded sensors (the templates take the camera's name).
RGB = "rgb_{camera}"
SEMANTICS = "semantics_{camera}"
DEPTH = "depth_{camera}"
LIDAR = "lidar"
LIDAR_LABELS = "lidar_labels"
BEV = "bev"

#: How each kind of recorded sensor is stored (tools.dataset.codec).
#: Class and depth rasters are zstd, not PNG: smaller, 2 to 15 times faster to write and to read (frames of
#: earlier versions hold PNG; a blob names its codec, so both read).
#: LiDAR points are byte-shuffled (format 4): about 40% smaller than plain zstd and twice as fast to write.
CODEC = {RGB: "jpeg", SEMANTICS: "zstd", DEPTH: "zstd", LIDAR: "zstd_shuffle", LIDAR_LABELS: "zstd", BEV: "zstd"}
#: JPEG quality of recorded camera images.
JPEG_QUALITY = 90
#: Depth images hold centimetres in uint16: farther ground reads as this many metres, the sky as 0.
MAX_DEPTH_M = 655.0
#: Recorded LiDAR intensity is exp(-LIDAR_ATTENUATION * distance in metres): CARLA's LiDAR model without its
#: noise and drop-off, computed the same way for points of the embedded world and of CARLA.
LIDAR_ATTENUATION = 0.02


def lidar_intensity(distance: np.ndarray) -> np.ndarray:
    """The recorded intensity (float32) of LiDAR returns `distance` metres away."""
    return np.exp(np.float32(-LIDAR_ATTENUATION) * np.asarray(distance, dtype=np.float32)).astype(np.float32)


def camera_sensors(camera: str) -> tuple[str, str, str]:
    """The (rgb, semantics, depth) sensor names of one camera."""
    return RGB.format(camera=camera), SEMANTICS.format(camera=camera), DEPTH.format(camera=camera)


def _check_number(owner: str, name: str, value: Any, *, integer: bool = False, positive: bool = False) -> Any:
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or (not integer and not math.isfinite(value)):
        raise ValueError(f"{owner}.{name}: {value!r} is not {kind}")
    if positive and value <= 0:
        raise ValueError(f"{owner}.{name}: {value!r}, expected a positive {kind[2:] if integer else 'number'}")
    return value if integer else float(value)


class _Config:
    """Shared checks of the frozen sensor configs: numbers coerced and range-checked in __post_init__."""

    _ints: tuple[str, ...] = ()
    _positive: tuple[str, ...] = ()

    def _owner(self) -> str:
        return type(self).__name__

    def _coerce(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            if f.type in ("float", "int", float, int):
                value = _check_number(self._owner(), f.name, getattr(self, f.name), integer=f.name in self._ints,
                                      positive=f.name in self._positive)
                object.__setattr__(self, f.name, value)

    @classmethod
    def from_dict(cls, d: dict, where: str = "") -> Any:
        where = where or cls.__name__
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        for key in d:
            if key not in known:
                raise ValueError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        return cls(**d)


@dataclass(frozen=True)
class CameraConfig(_Config):
    """A level pinhole camera mounted on the ego: x forward from the ego box centre, y right, z above ground."""

    name: str = "front"
    width: int = 512
    height: int = 256
    fov: float = 100.0  # horizontal, degrees
    x: float = -1.5
    y: float = 0.0
    z: float = 2.0
    yaw: float = 0.0  # degrees, positive to the right

    _ints = ("width", "height")
    _positive = ("width", "height", "z")

    def _owner(self) -> str:
        return f"camera {self.name!r}"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_]+", self.name):
            raise ValueError(f"camera.name: {self.name!r}, expected letters, digits or _ (it names the sensors)")
        self._coerce()
        if not 0.0 < self.fov < 180.0:
            raise ValueError(f"camera {self.name!r}.fov: {self.fov}, expected degrees in (0, 180)")


@dataclass(frozen=True)
class LidarConfig(_Config):
    """A spinning LiDAR on the ego: `channels` rings from upper_fov down to lower_fov, `azimuth_steps` per turn."""

    channels: int = 32
    azimuth_steps: int = 720
    range: float = 70.0  # metres
    z: float = 2.5
    x: float = 0.0
    upper_fov: float = 10.0  # degrees above the horizon
    lower_fov: float = -30.0

    _ints = ("channels", "azimuth_steps")
    _positive = ("channels", "azimuth_steps", "range", "z")

    def _owner(self) -> str:
        return "lidar"

    def __post_init__(self) -> None:
        self._coerce()
        if not -90.0 < self.lower_fov <= self.upper_fov < 90.0:
            raise ValueError(f"lidar.upper_fov/lower_fov: {self.upper_fov}/{self.lower_fov}, "
                             "expected -90 < lower_fov <= upper_fov < 90")


@dataclass(frozen=True)
class BevConfig(_Config):
    """An ego-centred top view: image up is ego forward, image right is ego right.

    The ego's centre is at pixel (row pixels/2 + ego_offset_px, column pixels/2): with the defaults it sees
    48 m ahead and 16 m behind, 32 m to each side.
    """

    pixels: int = 256
    resolution: float = 0.25  # metres per pixel
    ego_offset_px: int = 64  # how far below the image centre the ego sits

    _ints = ("pixels", "ego_offset_px")
    _positive = ("pixels", "resolution")

    def _owner(self) -> str:
        return "bev"

    def __post_init__(self) -> None:
        self._coerce()
        if not 0 <= self.ego_offset_px < self.pixels // 2:
            raise ValueError(f"bev.ego_offset_px: {self.ego_offset_px}, expected 0 to {self.pixels // 2 - 1} "
                             "(the ego must stay in the image)")


@dataclass(frozen=True)
class RigConfig:
    """The sensors of a run: cameras, one LiDAR, one BEV. Written into run.json as `rig`."""

    cameras: tuple[CameraConfig, ...] = (CameraConfig(),)
    lidar: LidarConfig = field(default_factory=LidarConfig)
    bev: BevConfig = field(default_factory=BevConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cameras", tuple(self.cameras))
        for i, cam in enumerate(self.cameras):
            if not isinstance(cam, CameraConfig):
                raise ValueError(f"rig.cameras[{i}]: expected a CameraConfig, got {type(cam).__name__}")
        names = [cam.name for cam in self.cameras]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"rig.cameras: camera names must be unique, {', '.join(dupes)} repeated")
        if not isinstance(self.lidar, LidarConfig):
            raise ValueError(f"rig.lidar: expected a LidarConfig, got {type(self.lidar).__name__}")
        if not isinstance(self.bev, BevConfig):
            raise ValueError(f"rig.bev: expected a BevConfig, got {type(self.bev).__name__}")

    def to_dict(self) -> dict:
        return {"cameras": [asdict(c) for c in self.cameras], "lidar": asdict(self.lidar), "bev": asdict(self.bev)}

    @classmethod
    def from_dict(cls, d: dict) -> RigConfig:
        if not isinstance(d, dict):
            raise ValueError(f"rig: expected a mapping, got {type(d).__name__}")
        for key in d:
            if key not in ("cameras", "lidar", "bev"):
                raise ValueError(f"rig: unknown key {key!r} (known: bev, cameras, lidar)")
        kwargs: dict[str, Any] = {}
        if "cameras" in d:
            if not isinstance(d["cameras"], list | tuple):
                raise ValueError("rig.cameras: expected a list of cameras")
            cams = enumerate(d["cameras"])
            kwargs["cameras"] = tuple(CameraConfig.from_dict(c, f"rig.cameras[{i}]") for i, c in cams)
        if "lidar" in d:
            kwargs["lidar"] = LidarConfig.from_dict(d["lidar"], "rig.lidar")
        if "bev" in d:
            kwargs["bev"] = BevConfig.from_dict(d["bev"], "rig.bev")
        return cls(**kwargs)


    def sensor_names(self) -> dict[str, str]:
        """Every recorded sensor of this rig: name -> codec, in recording order."""
        names: dict[str, str] = {}
        for cam in self.cameras:
            for template in (RGB, SEMANTICS, DEPTH):
                names[template.format(camera=cam.name)] = CODEC[template]
        for template in (LIDAR, LIDAR_LABELS, BEV):
            names[template] = CODEC[template]
        return names

    def max_lidar_points(self) -> int:
        """The most points a frame's LiDAR holds: one return per ray of a turn (channels x azimuth_steps), twice
        that for CARLA's sweep, which may straddle two turns."""
        return 2 * self.lidar.channels * self.lidar.azimuth_steps

    def array_specs(self) -> dict[str, Spec]:
        """The dtype and shape of each recorded sensor (a LiDAR's point count free up to max_lidar_points): what
        validate checks and what bounds every decode of a frame's blobs before it allocates."""
        out: dict[str, Spec] = {}
        for cam in self.cameras:
            out[RGB.format(camera=cam.name)] = Spec("uint8", (cam.height, cam.width, 3))
            out[SEMANTICS.format(camera=cam.name)] = Spec("uint8", (cam.height, cam.width))
            out[DEPTH.format(camera=cam.name)] = Spec("uint16", (cam.height, cam.width))
        points = self.max_lidar_points()
        out[LIDAR] = Spec("float32", (-1, 4), points)
        out[LIDAR_LABELS] = Spec("uint32", (-1, 2), points)
        out[BEV] = Spec("uint8", (self.bev.pixels, self.bev.pixels))
        return out

    def camera(self, name: str) -> CameraConfig:
        """The camera called `name`; ValueError naming the cameras there are."""
        for cam in self.cameras:
            if cam.name == name:
                return cam
        raise ValueError(f"camera {name!r} is not in the rig (cameras: {', '.join(c.name for c in self.cameras)})")


# ----------------------------------------------------------------------------- the recording rate


@dataclass(frozen=True)
class RecordingRate:
    """Simulation ticks per second and how many ticks apart recorded frames are (20 Hz, every 5th: 4 Hz)."""

    sim_hz: int = 20
    record_every: int = 5

    def __post_init__(self) -> None:
        if not (isinstance(self.sim_hz, int) and 1 <= self.sim_hz <= 200):
            raise ValueError(f"sim_hz={self.sim_hz!r}: expected an integer from 1 to 200")
        if not (isinstance(self.record_every, int) and 1 <= self.record_every <= 1000):
            raise ValueError(f"record_every={self.record_every!r}: expected an integer from 1 to 1000")

    @property
    def frame_dt(self) -> float:
        """Seconds between two recorded frames."""
        return self.record_every / self.sim_hz


# ----------------------------------------------------------------------------- files


def read_rig_file(path: str | Path) -> RigConfig:
    """A rig file (JSON of RigConfig.to_dict); ValueError naming the file and what is wrong."""
    try:
        return RigConfig.from_dict(files.read_json(path))  # (a FIFO there: refused, not waited on)
    except files.UnreadableFile as e:
        raise ValueError(str(e)) from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the rig file ({e.strerror})") from None
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def run_rig(run_settings: dict[str, Any]) -> RigConfig:
    """The rig of a run from its run.json content (the default rig when it names none)."""
    rig = run_settings.get("rig")
    return RigConfig() if rig is None else RigConfig.from_dict(rig)


def run_rate(run_settings: dict[str, Any]) -> RecordingRate:
    """The recording rate of a run from its run.json content (its collection settings)."""
    s = run_settings.get("settings") or {}
    default = RecordingRate()
    return RecordingRate(sim_hz=int(s.get("sim_hz", default.sim_hz)),
                         record_every=int(s.get("record_every", default.record_every)))
