"""The embedded world's sensors: pinhole cameras (RGB, semantics, depth), a LiDAR and a BEV raster.

Everything is drawn from the world state (`Snapshot`) and a static `Scene` built once per town from
its real geometry: the lanes and junction shapes of the SUMO network, the traffic-light connections,
and roadside structures placed beside the roads from a seed. One ray-casting model serves every sensor,
so labels match pixels by construction:

- the ground is the plane z=0, drawn once into a top-down raster (terrain, sidewalk, road, lane
  markings); the cameras and the LiDAR are level with the ego, so where each pixel's or ray's ray meets
  the ground is fixed in the ego frame and a frame only moves those points into the world and reads
  the raster;
- vehicles and structures are oriented boxes, hit by the slab method. Because the sensors have no pitch
  or roll, a ray's horizontal direction depends on the image column (LiDAR: azimuth) only and its slope on
  the row (LiDAR: channel) only, so the x/y slabs are solved per column and the z slab per row; a box
  costs two small vectors and a few passes over its projected rectangle;
- the nearest hit wins in a depth buffer; the label, colour and depth of a pixel come from that hit.

Frames. World: CARLA's (x east, y = -y OpenDRIVE, z up, yaw degrees, see tools.collect.state). Ego
frame: origin on the ground under the ego box's centre, x forward, y right, z up. A camera looks along
its yaw in the ego frame; its image has u to the right and v down, pixel (row i, column j) spans
[j, j+1) x [i, i+1) so `floor(uv)` is the pixel a projected point falls in. Depth is along the optical
axis. The ego itself is not drawn in the cameras and gives no LiDAR points (as if the sensors sat
in front of it); it is drawn in the BEV.
"""

from __future__ import annotations

import math
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from tools.collect.state import Box, Snapshot
from tools.collect.town import Town
from tools.dataset import semantics as sem

# ----------------------------------------------------------------------------------------- settings

#: Boxes farther than this from a camera are not drawn (the ground still is, to the horizon).
CAMERA_BOX_RANGE = 150.0
#: Largest depth a uint16 centimetre image holds; farther ground reads as this, the sky as 0.
MAX_DEPTH_M = 655.0
#: Static structures' ids start here, far from actor ids (0 is the ego, actors count up from 1).
STATIC_ID0 = 1_000_000

_NEAR = 0.05  # metres: points nearer to a camera than this are behind it
_SKY_Z = 1e30  # depth buffer value of the sky
_SIDEWALK_WIDTH = 2.0
_MARKING_WIDTH = 0.15
_DASH, _GAP = 3.0, 5.0
_RASTER_MARGIN = 40.0  # metres of terrain around the town's lanes
_RASTER_MAX_PIXELS = 8192  # per side: beyond ~800 m the raster is coarser than 0.1 m per pixel


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


# ----------------------------------------------------------------------------------------- geometry


def camera_intrinsics(cam: CameraConfig) -> np.ndarray:
    """3x3 K of a camera: square pixels, principal point at the image centre."""
    f = cam.width / 2.0 / math.tan(math.radians(cam.fov) / 2.0)
    return np.array([[f, 0.0, cam.width / 2.0], [0.0, f, cam.height / 2.0], [0.0, 0.0, 1.0]])


def world_to_ego(ego: Box, pts: np.ndarray) -> np.ndarray:
    """World points (N, 3) to the ego frame: origin on the ground (z=0) under the ego centre, x fwd, y right."""
    pts = np.asarray(pts, dtype=np.float64)
    c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
    dx, dy = pts[..., 0] - ego.x, pts[..., 1] - ego.y
    return np.stack([c * dx + s * dy, -s * dx + c * dy, pts[..., 2]], axis=-1)


def ego_to_world(ego: Box, pts: np.ndarray) -> np.ndarray:
    """Inverse of world_to_ego."""
    pts = np.asarray(pts, dtype=np.float64)
    c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
    x, y = pts[..., 0], pts[..., 1]
    return np.stack([ego.x + c * x - s * y, ego.y + s * x + c * y, pts[..., 2]], axis=-1)


def project(cam: CameraConfig, ego: Box, pts_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World points (N, 3) to pixels: uv (N, 2) and depth along the optical axis (N,).

    A point behind the camera has depth <= 0 and uv NaN.
    """
    p = world_to_ego(ego, pts_world)
    c, s = math.cos(math.radians(cam.yaw)), math.sin(math.radians(cam.yaw))
    rx, ry, rz = p[..., 0] - cam.x, p[..., 1] - cam.y, p[..., 2] - cam.z
    depth = c * rx + s * ry
    right = -s * rx + c * ry
    k = camera_intrinsics(cam)
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(depth > 1e-9, depth, np.nan)
        uv = np.stack([k[0, 2] + k[0, 0] * right / safe, k[1, 2] - k[1, 1] * rz / safe], axis=-1)
    return uv, depth


def ego_to_bev_pixels(bev: BevConfig, pts_ego: np.ndarray) -> np.ndarray:
    """Ego-frame points (N, 2) to continuous BEV pixel coordinates (column, row); floor gives the cell."""
    pts = np.asarray(pts_ego, dtype=np.float64)
    col = bev.pixels / 2.0 + pts[..., 1] / bev.resolution
    row = bev.pixels / 2.0 + bev.ego_offset_px - pts[..., 0] / bev.resolution
    return np.stack([col, row], axis=-1)


def _polyline_clean(line: np.ndarray) -> np.ndarray:
    line = np.asarray(line, dtype=np.float64)
    keep = np.ones(len(line), dtype=bool)
    keep[1:] = np.hypot(*np.diff(line, axis=0).T) > 1e-6
    return line[keep]


def _offset(line: np.ndarray, d: float) -> np.ndarray:
    """A polyline moved sideways by d metres, to the right of its direction (CARLA's frame is left-handed)."""
    seg = np.diff(line, axis=0)
    t = seg / np.hypot(seg[:, 0], seg[:, 1])[:, None]
    n = np.stack([-t[:, 1], t[:, 0]], axis=1)  # right of (tx, ty) when y points south
    vn = np.zeros_like(line)
    vn[:-1] += n
    vn[1:] += n
    vn /= np.maximum(np.hypot(vn[:, 0], vn[:, 1]), 1e-9)[:, None]
    # Miter: keep the offset edges parallel to the segments at a bend.
    cos_half = np.ones(len(line))
    cos_half[1:-1] = np.maximum((vn[1:-1] * n[:-1]).sum(1), 0.5)
    return line + vn * (d / cos_half)[:, None]


def _resample(line: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Points every `step` metres along a polyline (ends included) and their arc length."""
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    s = np.append(np.arange(0.0, arc[-1], step), arc[-1])
    return np.stack([np.interp(s, arc, line[:, 0]), np.interp(s, arc, line[:, 1])], axis=1), s


def _yaw_of(p0: np.ndarray, p1: np.ndarray) -> float:
    return math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))


# ----------------------------------------------------------------------------------------- materials
# A pixel's material (uint16) gives both its class and its colour through two lookup tables:
#   0..255      ground: slot * 32 + texture shade (slots below)
#   256..319    sky, by elevation
#   512 + 16*p + k   paint p under light level k (0 dark .. 15 lit)

_SLOT_TERRAIN, _SLOT_SIDEWALK, _SLOT_ROAD, _SLOT_LINE = 0, 1, 2, 3
_SLOT_CLASS = {_SLOT_TERRAIN: sem.TERRAIN, _SLOT_SIDEWALK: sem.SIDEWALK, _SLOT_ROAD: sem.ROAD,
               _SLOT_LINE: sem.ROADLINE}
_SLOT_RGB = {_SLOT_TERRAIN: (92, 116, 58), _SLOT_SIDEWALK: (150, 147, 140), _SLOT_ROAD: (72, 72, 78),
             _SLOT_LINE: (225, 225, 214)}
_SLOT_TO_BEV = {_SLOT_TERRAIN: sem.BEV_EMPTY, _SLOT_SIDEWALK: sem.BEV_EMPTY, _SLOT_ROAD: sem.BEV_ROAD,
                _SLOT_LINE: sem.BEV_LANE_MARKING}
_MAT_SKY = 256
_SKY_LEVELS = 64
_MAT_PAINT = 512

# Paints 0..255: one per class id (what a box of an unknown class looks like). Then extra paints.
_CLASS_RGB = {sem.BUILDING: (150, 138, 120), sem.POLE: (120, 120, 125), sem.TRAFFIC_LIGHT: (32, 34, 36),
              sem.CAR: (40, 60, 140), sem.TRUCK: (180, 175, 160), sem.BUS: (200, 120, 30),
              sem.VEGETATION: (60, 110, 40), sem.PEDESTRIAN: (170, 60, 60)}
_CAR_RGB = [(40, 60, 140), (170, 30, 30), (225, 225, 225), (25, 25, 28), (130, 135, 140), (30, 110, 60),
            (200, 170, 40), (90, 40, 110), (180, 90, 30), (60, 130, 170), (110, 20, 30), (200, 200, 190)]
_BUILDING_RGB = [(150, 138, 120), (170, 120, 95), (120, 118, 115), (185, 175, 150), (140, 95, 75),
                 (105, 110, 125), (200, 190, 170), (95, 90, 85)]
_LAMP_RGB = {"red": (235, 40, 30), "yellow": (245, 190, 30), "green": (40, 220, 90), "off": (50, 52, 55)}
_PAINT_CAR = 256
_PAINT_BUILDING = _PAINT_CAR + len(_CAR_RGB)
_PAINT_LAMP = {state: _PAINT_BUILDING + len(_BUILDING_RGB) + i for i, state in enumerate(_LAMP_RGB)}
_N_PAINTS = max(_PAINT_LAMP.values()) + 1

# Faces of a box: 0 +x (front), 1 -x, 2 +y, 3 -y, 4 top, 5 bottom.
_SUN = np.array([math.cos(math.radians(205)) * math.cos(math.radians(50)),
                 math.sin(math.radians(205)) * math.cos(math.radians(50)), math.sin(math.radians(50))])


def _material_tables() -> tuple[np.ndarray, np.ndarray]:
    """(class LUT uint8, colour LUT uint8 (n, 3)) of every material."""
    n = _MAT_PAINT + 16 * _N_PAINTS
    cls = np.zeros(n, dtype=np.uint8)
    rgb = np.zeros((n, 3), dtype=np.float64)
    shade = 0.78 + 0.3 * np.arange(32) / 31.0  # ground texture brightness
    for slot, c in _SLOT_CLASS.items():
        cls[slot * 32:(slot + 1) * 32] = c
        rgb[slot * 32:(slot + 1) * 32] = np.outer(shade, _SLOT_RGB[slot])
    lv = np.linspace(0.0, 1.0, _SKY_LEVELS)[:, None]  # 0 at the horizon, 1 high up
    cls[_MAT_SKY:_MAT_SKY + _SKY_LEVELS] = sem.SKY
    rgb[_MAT_SKY:_MAT_SKY + _SKY_LEVELS] = (1 - lv) * np.array([205, 218, 232]) + lv * np.array([70, 120, 190])
    paints = [(c, _CLASS_RGB.get(c, tuple(int(v) for v in sem.PALETTE[c]))) for c in range(256)]
    paints += [(sem.CAR, c) for c in _CAR_RGB] + [(sem.BUILDING, c) for c in _BUILDING_RGB]
    paints += [(sem.TRAFFIC_LIGHT, _LAMP_RGB[s]) for s in _LAMP_RGB]
    light = 0.3 + 0.75 * np.arange(16) / 15.0
    for p, (c, colour) in enumerate(paints):
        cls[_MAT_PAINT + 16 * p:_MAT_PAINT + 16 * (p + 1)] = c
        rgb[_MAT_PAINT + 16 * p:_MAT_PAINT + 16 * (p + 1)] = np.outer(light, colour)
    return cls, np.clip(rgb, 0, 255).astype(np.uint8)


def _face_levels(yaw_deg: np.ndarray) -> np.ndarray:
    """(K, 6) light level 0..15 of each face of boxes with these world yaws (sun fixed in the sky)."""
    yaw = np.radians(np.asarray(yaw_deg, dtype=np.float64))
    c, s = np.cos(yaw), np.sin(yaw)
    nx = np.stack([c, -c, -s, s], axis=1)  # +x, -x, +y, -y normals' x component
    ny = np.stack([s, -s, c, -c], axis=1)
    side = 0.35 + 0.65 * np.maximum(nx * _SUN[0] + ny * _SUN[1], 0.0)
    top = np.full((len(yaw), 1), 0.35 + 0.65 * _SUN[2])
    bottom = np.full((len(yaw), 1), 0.2)
    b = np.concatenate([side, top, bottom], axis=1)
    return np.clip(np.round(b * 15), 0, 15).astype(np.uint16)


# ----------------------------------------------------------------------------------------- the scene


@dataclass(frozen=True)
class Signal:
    """A traffic-light head over one incoming lane, and the light ids (`tls:link`) that drive it."""

    lane: str
    x: float  # stop line centre, world
    y: float
    yaw: float
    width: float
    head: int  # index of the head's box in Scene.static_boxes
    links: tuple[str, ...]


@dataclass
class GroundRaster:
    """A top-down raster of ground codes, pixel (r, c) covering x in [x0 + c*res, ...), y in [y0 + r*res, ...)."""

    codes: np.ndarray  # uint8 (H, W)
    x0: float
    y0: float
    res: float


class Scene:
    """The static world of one town: a ground raster and roadside structures, built once.

    Structures (deterministic from `seed`): buildings set back behind the sidewalks (never on the road,
    checked on the raster), street lamps along the sidewalks, and at every signalled stop line of the
    SUMO network a pole with a mast arm and one traffic-light head per lane.
    """

    def __init__(self, town: Town, seed: int = 0, resolution: float = 0.1):
        self.town = town
        self.seed = int(seed)
        self.lanes = sorted(town.lanes, key=lambda lane: lane.id)
        self._junctions, self._tls = _parse_net(town)
        xmin, ymin, xmax, ymax = town.bounds
        extent = max(xmax - xmin, ymax - ymin) + 2 * _RASTER_MARGIN
        self.resolution = max(float(resolution), extent / _RASTER_MAX_PIXELS)
        self._rasters: dict[tuple[float, float, bool], GroundRaster] = {}
        self.ground = self.raster(self.resolution, _MARKING_WIDTH, texture=True)
        self.static_boxes: list[Box] = []
        self.signals: list[Signal] = []
        rng = np.random.default_rng(self.seed)
        self._place_signals()
        self._place_buildings_and_lamps(rng)
        self._static_arrays()

    # ------------------------------------------------------------------ ground
    def raster(self, resolution: float, marking_width: float, texture: bool = False) -> GroundRaster:
        """The ground drawn at `resolution` m/px (cached). Codes are slot*32 + texture shade."""
        key = (round(resolution, 6), round(marking_width, 6), texture)
        if key in self._rasters:
            return self._rasters[key]
        xmin, ymin, xmax, ymax = self.town.bounds
        x0, y0 = xmin - _RASTER_MARGIN, ymin - _RASTER_MARGIN
        w = int(math.ceil((xmax - xmin + 2 * _RASTER_MARGIN) / resolution))
        h = int(math.ceil((ymax - ymin + 2 * _RASTER_MARGIN) / resolution))
        img = Image.new("L", (w, h), _SLOT_TERRAIN)
        draw = ImageDraw.Draw(img)

        def px(p: np.ndarray) -> list[tuple[float, float]]:  # PIL puts pixel centres on integers
            return [((x - x0) / resolution - 0.5, (y - y0) / resolution - 0.5) for x, y in p]

        normal = [(lane, _polyline_clean(lane.centerline)) for lane in self.lanes]
        normal = [(lane, line) for lane, line in normal if len(line) >= 2]
        for lane, line in normal:  # sidewalks along the outer edge of each road
            if not lane.internal and lane.index == 0:
                outer = _offset(line, lane.width / 2)
                far = _offset(line, lane.width / 2 + _SIDEWALK_WIDTH)
                draw.polygon(px(np.concatenate([outer, far[::-1]])), fill=_SLOT_SIDEWALK)
        for shape in self._junctions:  # and round the corners of junctions
            draw.line(px(np.concatenate([shape, shape[:1]])), fill=_SLOT_SIDEWALK,
                      width=max(1, round(2 * _SIDEWALK_WIDTH / resolution)), joint="curve")
        for shape in self._junctions:
            draw.polygon(px(shape), fill=_SLOT_ROAD)
        for lane, line in normal:
            left, right = _offset(line, -lane.width / 2), _offset(line, lane.width / 2)
            draw.polygon(px(np.concatenate([left, right[::-1]])), fill=_SLOT_ROAD)
        lw = max(1, round(marking_width / resolution))
        for lane, line in normal:
            if lane.internal:
                continue
            if lane.index == 0:  # the outer edge of the road: solid
                draw.line(px(_offset(line, lane.width / 2)), fill=_SLOT_LINE, width=lw)
            left = _offset(line, -lane.width / 2)
            if lane.index == lane.lanes_in_edge - 1:  # the road centre: solid
                draw.line(px(left), fill=_SLOT_LINE, width=lw)
            else:  # between lanes of one direction: dashed
                pts, s = _resample(left, 0.5)
                on = (s % (_DASH + _GAP)) < _DASH
                edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
                for a, b in zip(edges[::2], edges[1::2], strict=True):
                    if b - a >= 2:
                        draw.line(px(pts[a:b]), fill=_SLOT_LINE, width=lw)
        slots = np.asarray(img, dtype=np.uint8)
        codes = slots * np.uint8(32)
        if texture:
            codes += _texture(slots.shape, self.seed)
        raster = GroundRaster(codes=codes, x0=x0, y0=y0, res=resolution)
        self._rasters[key] = raster
        return raster

    # ------------------------------------------------------------------ structures
    def _add(self, cls: int, x: float, y: float, z: float, yaw: float, length: float, width: float,
             height: float) -> int:
        self.static_boxes.append(Box(STATIC_ID0 + len(self.static_boxes), cls, x, y, z, yaw, length, width, height))
        return len(self.static_boxes) - 1

    def _place_signals(self) -> None:
        """A pole at the right edge of each signalled approach, a mast arm across it, one head per lane."""
        by_lane = {lane.id: lane for lane in self.lanes}
        approaches: dict[str, dict[int, list[str]]] = {}
        for edge, lane_index, link in self._tls:
            approaches.setdefault(edge, {}).setdefault(lane_index, []).append(link)
        for edge in sorted(approaches):
            lanes = {i: by_lane.get(f"{edge}_{i}") for i in approaches[edge]}
            lanes = {i: lane for i, lane in lanes.items() if lane is not None and len(lane.centerline) >= 2}
            if not lanes:
                continue
            ref = lanes[min(lanes)]
            line = _polyline_clean(ref.centerline)
            end, before = line[-1], line[-2]
            yaw = _yaw_of(before, end)
            t = np.array([math.cos(math.radians(yaw)), math.sin(math.radians(yaw))])
            n = np.array([-t[1], t[0]])  # right
            # Pole on the sidewalk, 1 m before the stop line, right of the rightmost signalled lane.
            right_edge = end + n * (ref.width / 2 + 0.8 + ref.width * min(lanes)) - t * 1.0
            pole_h, arm_z = 6.2, 5.9
            self._add(sem.POLE, *right_edge, pole_h / 2, yaw, 0.3, 0.3, pole_h)
            heads = []
            for i, lane in sorted(lanes.items()):
                stop = _polyline_clean(lane.centerline)[-1]
                head_xy = stop - t * 1.0
                heads.append((i, lane, stop, head_xy))
            far = heads[-1][3]
            span = float(np.hypot(*(far - right_edge))) + 0.6
            mid = (right_edge + far) / 2 + (far - right_edge) / max(span, 1e-6) * 0.3
            self._add(sem.POLE, *mid, arm_z, yaw + 90.0, span, 0.2, 0.2)
            for i, lane, stop, head_xy in heads:
                k = self._add(sem.TRAFFIC_LIGHT, *head_xy, arm_z - 0.65, yaw, 0.4, 0.4, 1.1)
                self.signals.append(Signal(lane=lane.id, x=float(stop[0]), y=float(stop[1]), yaw=yaw,
                                           width=lane.width, head=k, links=tuple(approaches[edge][i])))

    def _place_buildings_and_lamps(self, rng: np.random.Generator) -> None:
        """Buildings behind the sidewalks and lamps on them, walking along the outer edge of every road."""
        occ_res = 0.5
        g = self.ground
        f = max(1, int(round(occ_res / g.res)))
        h, w = g.codes.shape[0] // f, g.codes.shape[1] // f
        blocks = (g.codes[:h * f, :w * f] >> 5).reshape(h, f, w, f) != _SLOT_TERRAIN
        occ = blocks.any(axis=(1, 3))
        occ_res = g.res * f
        # Keep a metre of terrain between the sidewalk and any wall.
        grown = occ.copy()
        for _ in range(max(1, round(1.0 / occ_res))):
            grown[1:] |= occ[:-1]
            grown[:-1] |= occ[1:]
            grown[:, 1:] |= occ[:, :-1]
            grown[:, :-1] |= occ[:, 1:]
            occ = grown.copy()

        def cells(cx: float, cy: float, yaw: float, length: float, width: float) -> tuple[np.ndarray, np.ndarray]:
            c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
            a = np.arange(-length / 2, length / 2 + 1e-9, occ_res / 2)
            b = np.arange(-width / 2, width / 2 + 1e-9, occ_res / 2)
            aa, bb = np.meshgrid(a, b)
            x = cx + c * aa - s * bb
            y = cy + s * aa + c * bb
            return ((y - g.y0) / occ_res).astype(np.int64).ravel(), ((x - g.x0) / occ_res).astype(np.int64).ravel()

        def free(rows: np.ndarray, cols: np.ndarray) -> bool:
            inside = (rows >= 0) & (rows < occ.shape[0]) & (cols >= 0) & (cols < occ.shape[1])
            return bool(inside.all()) and not occ[rows, cols].any()

        for lane in self.lanes:
            if lane.internal or lane.index != 0:
                continue
            line = _polyline_clean(lane.centerline)
            if len(line) < 2:
                continue
            # Lamps first (on the sidewalk), then buildings behind them.
            walk = _offset(line, lane.width / 2 + 0.6)
            pts, s = _resample(walk, 1.0)
            for a in np.arange(8.0, s[-1] - 8.0, 28.0):
                k = int(np.searchsorted(s, a))
                x, y = pts[k]
                r, c = int((y - g.y0) / g.res), int((x - g.x0) / g.res)
                if g.codes[r, c] >> 5 == _SLOT_SIDEWALK:
                    self._add(sem.POLE, float(x), float(y), 3.75, _yaw_of(pts[k - 1], pts[k]), 0.22, 0.22, 7.5)
            base = _offset(line, lane.width / 2 + _SIDEWALK_WIDTH + 1.5)
            pts, s = _resample(base, 0.5)
            a = float(rng.uniform(0.0, 4.0))
            while a < s[-1]:
                length, depth = float(rng.uniform(8.0, 22.0)), float(rng.uniform(8.0, 16.0))
                height = float(rng.choice([rng.uniform(5.0, 12.0), rng.uniform(12.0, 30.0)], p=[0.7, 0.3]))
                k0 = int(np.searchsorted(s, a))
                k1 = min(int(np.searchsorted(s, a + length)), len(s) - 1)
                if k1 <= k0:
                    break
                p0, p1 = pts[k0], pts[k1]
                yaw = _yaw_of(p0, p1)
                length = float(np.hypot(*(p1 - p0)))
                n = np.array([-math.sin(math.radians(yaw)), math.cos(math.radians(yaw))])
                centre = (p0 + p1) / 2 + n * (depth / 2 + float(rng.uniform(0.0, 2.5)))
                rows, cols = cells(*centre, yaw, length, depth)
                if length > 4.0 and free(rows, cols):
                    self._add(sem.BUILDING, float(centre[0]), float(centre[1]), height / 2, yaw, length, depth, height)
                    rows, cols = cells(*centre, yaw, length + 2 * occ_res, depth + 2 * occ_res)
                    ok = (rows >= 0) & (rows < occ.shape[0]) & (cols >= 0) & (cols < occ.shape[1])
                    occ[rows[ok], cols[ok]] = True
                    a += length + float(rng.uniform(1.0, 6.0))
                else:
                    a += 2.0

    def _static_arrays(self) -> None:
        """The structures as arrays, for culling and casting without Python loops over all of them."""
        b = self.static_boxes
        self.static_xyz = np.array([[x.x, x.y, x.z] for x in b], dtype=np.float64).reshape(-1, 3)
        self.static_yaw = np.array([x.yaw for x in b], dtype=np.float64)
        self.static_half = np.array([[x.length / 2, x.width / 2, x.height / 2] for x in b]).reshape(-1, 3)
        self.static_cls = np.array([x.cls for x in b], dtype=np.uint8)
        paint = self.static_cls.astype(np.int64)
        bidx = np.flatnonzero(self.static_cls == sem.BUILDING)
        paint[bidx] = _PAINT_BUILDING + (bidx * 7919 + self.seed) % len(_BUILDING_RGB)
        self.static_faces = (_MAT_PAINT + 16 * paint[:, None] + _face_levels(self.static_yaw)).astype(np.uint16)


def _parse_net(town: Town) -> tuple[list[np.ndarray], list[tuple[str, int, str]]]:
    """Junction outlines (CARLA frame) and signalled connections (from edge, from lane, "tls:link") of a town."""
    junctions, tls = [], []
    for _, el in ET.iterparse(str(town.net)):
        if el.tag == "junction" and el.get("type") not in ("internal", "dead_end") and el.get("shape"):
            pts = np.array([[float(v) for v in p.split(",")[:2]] for p in el.get("shape").split()])
            if len(pts) >= 3:
                junctions.append(town.sumo_to_carla(pts))
        elif el.tag == "connection" and el.get("tl") is not None and el.get("linkIndex") is not None:
            tls.append((el.get("from"), int(el.get("fromLane")), f"{el.get('tl')}:{el.get('linkIndex')}"))
        if el.tag != "edge":  # an edge's lanes are read through Town.lanes; free the rest as we go
            el.clear()
    return junctions, tls


def _texture(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Ground texture shades 0..31: metre-scale blotches plus a little grain, deterministic."""
    rng = np.random.default_rng(seed + 7)
    h, w = shape
    coarse = rng.integers(0, 24, size=(h // 24 + 2, w // 24 + 2), dtype=np.uint8)
    big = np.asarray(Image.fromarray(coarse).resize((w + 48, h + 48), Image.Resampling.BILINEAR))[24:24 + h, 24:24 + w]
    return big + rng.integers(0, 8, size=shape, dtype=np.uint8)


# ----------------------------------------------------------------------------------------- rendering


@dataclass
class _Boxes:
    """This frame's boxes (actors then structures) in the ego frame."""

    xyz: np.ndarray  # (K, 3) centres
    yaw: np.ndarray  # (K,) radians, ego frame
    half: np.ndarray  # (K, 3) half extents
    cls: np.ndarray  # (K,) uint8
    ids: np.ndarray  # (K,) uint32 actor id, 0 for structures
    faces: np.ndarray  # (K, 6) uint16 materials


class _CameraRays:
    """A camera's precomputed rays. Column j has horizontal direction (dx[j], dy[j]) in the ego frame with a
    unit component along the optical axis; row i has slope dz[i]. So the ray parameter is the depth."""

    def __init__(self, cam: CameraConfig):
        self.cam = cam
        k = camera_intrinsics(cam)
        f, cx, cy = k[0, 0], k[0, 2], k[1, 2]
        right = (np.arange(cam.width) + 0.5 - cx) / f
        c, s = math.cos(math.radians(cam.yaw)), math.sin(math.radians(cam.yaw))
        # float32: the per-box passes over pixels are memory bound.
        self.dx = (c - s * right).astype(np.float32)
        self.dy = (s + c * right).astype(np.float32)
        dz = -(np.arange(cam.height) + 0.5 - cy) / f
        self.dz = dz.astype(np.float32)
        self.h0 = int(np.argmax(dz < 0)) if (dz < 0).any() else cam.height  # first ground row
        self.ground_t = np.minimum(cam.z / -dz[self.h0:], MAX_DEPTH_M).astype(np.float32)  # depth per row
        self.origin = (cam.x, cam.y, cam.z)
        self.f, self.cx, self.cy = f, cx, cy
        zb = np.full((cam.height, cam.width), _SKY_Z, dtype=np.float32)
        zb[self.h0:] = self.ground_t[:, None]
        self.base_z = zb
        mat = np.zeros((cam.height, cam.width), dtype=np.uint16)
        elev = np.degrees(np.arctan(dz[:self.h0]))
        level = np.clip(elev / 45.0 * (_SKY_LEVELS - 1), 0, _SKY_LEVELS - 1).astype(np.uint16)
        mat[:self.h0] = (_MAT_SKY + level)[:, None]
        self.base_mat = mat
        self.cos_half = math.cos(math.radians(cam.fov) / 2)
        self.tan_half = math.tan(math.radians(cam.fov) / 2)
        self.cam_c, self.cam_s = c, s


_CORNER_SIGNS = np.array([[1, 1, -1], [1, -1, -1], [-1, -1, -1], [-1, 1, -1],
                          [1, 1, 1], [1, -1, 1], [-1, -1, 1], [-1, 1, 1]], dtype=np.float64)
_BOX_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4],
                       [0, 4], [1, 5], [2, 6], [3, 7]])


class Renderer:
    """Renders one Snapshot into every sensor of a rig. Holds only precomputed rays and tables."""

    def __init__(self, scene: Scene, rig: RigConfig):
        self.scene = scene
        self.rig = rig
        self.cls_lut, self.rgb_lut = _material_tables()
        self.slot_cls = np.array([_SLOT_CLASS.get(i >> 5, sem.TERRAIN) for i in range(256)], dtype=np.uint8)
        self.cameras = [_CameraRays(cam) for cam in rig.cameras]
        self._init_lidar(rig.lidar)
        self._init_bev(rig.bev)
        self._link_head = {link: s.head for s in scene.signals for link in s.links}
        self._head_xy = np.array([[s.x, s.y] for s in scene.signals]).reshape(-1, 2)
        self._head_box = np.array([s.head for s in scene.signals], dtype=np.int64)

    # ------------------------------------------------------------------ setup
    def _init_lidar(self, cfg: LidarConfig) -> None:
        self.el = np.radians(np.linspace(cfg.upper_fov, cfg.lower_fov, cfg.channels))
        self.el_step = (self.el[0] - self.el[-1]) / max(cfg.channels - 1, 1)
        self.az = 2 * np.pi * np.arange(cfg.azimuth_steps) / cfg.azimuth_steps
        self.l_dx, self.l_dy = np.cos(self.az).astype(np.float32), np.sin(self.az).astype(np.float32)
        self.l_dz = np.tan(self.el).astype(np.float32)  # the ray parameter is the horizontal distance s
        self.l_smax = cfg.range * np.cos(self.el)  # s at the end of the range, per channel
        s_ground = np.where(self.el < 0, cfg.z / np.maximum(-np.tan(self.el), 1e-12), np.inf)
        s_ground[s_ground > self.l_smax] = np.inf
        self.l_base = np.repeat(s_ground[:, None], cfg.azimuth_steps, axis=1).astype(np.float32)
        self.l_sec = (1.0 / np.cos(self.el)).astype(np.float32)

    def _init_bev(self, cfg: BevConfig) -> None:
        r = cfg.resolution
        self.bev_x = (cfg.pixels / 2.0 + cfg.ego_offset_px - np.arange(cfg.pixels) - 0.5) * r  # per row
        self.bev_y = (np.arange(cfg.pixels) + 0.5 - cfg.pixels / 2.0) * r  # per column
        # A raster at half the BEV's cell size with markings a cell and a half wide, so that sampling it at
        # the cell centres never drops a line.
        self.bev_raster = self.scene.raster(min(r / 2, 0.25), max(_MARKING_WIDTH, 1.5 * r))
        lut = np.zeros(256, dtype=np.uint8)
        for slot, c in _SLOT_TO_BEV.items():
            lut[slot * 32:(slot + 1) * 32] = c
        self.bev_lut = lut

    # ------------------------------------------------------------------ per frame
    def _boxes(self, snap: Snapshot) -> _Boxes:
        ego = snap.ego
        sc = self.scene
        actors = [a for a in snap.actors if a.id != 0]
        a_xyz = np.array([[a.x, a.y, a.z] for a in actors], dtype=np.float64).reshape(-1, 3)
        a_yaw = np.array([a.yaw for a in actors], dtype=np.float64)
        a_half = np.array([[a.length / 2, a.width / 2, a.height / 2] for a in actors]).reshape(-1, 3)
        a_cls = np.array([a.cls for a in actors], dtype=np.uint8)
        a_ids = np.array([a.id for a in actors], dtype=np.uint32)
        paint = a_cls.astype(np.int64)
        car = a_cls == sem.CAR
        paint[car] = _PAINT_CAR + (a_ids[car].astype(np.int64) * 2654435761 % 4093) % len(_CAR_RGB)
        a_faces = (_MAT_PAINT + 16 * paint[:, None] + _face_levels(a_yaw)).astype(np.uint16)
        s_faces = sc.static_faces
        if len(self._head_box):
            states = self._head_states(snap)
            if states is not None:
                s_faces = s_faces.copy()
                s_faces[self._head_box, 1] = _MAT_PAINT + 16 * states + 15  # lamps glow whatever the sun
        xyz = np.concatenate([a_xyz, sc.static_xyz])
        yaw = np.concatenate([a_yaw, sc.static_yaw])
        return _Boxes(
            xyz=world_to_ego(ego, xyz),
            yaw=np.radians(yaw - ego.yaw),
            half=np.concatenate([a_half, sc.static_half]),
            cls=np.concatenate([a_cls, sc.static_cls]),
            ids=np.concatenate([a_ids, np.zeros(len(sc.static_xyz), dtype=np.uint32)]),
            faces=np.concatenate([a_faces, s_faces]),
        )

    def _head_states(self, snap: Snapshot) -> np.ndarray | None:
        """Paint of every head's lamp face from the lights' states; a light is matched by id, else by place."""
        if not snap.lights:
            return None
        paint = np.full(len(self._head_box), _PAINT_LAMP["off"], dtype=np.uint16)
        order = {"off": 0, "red": 1, "yellow": 2, "green": 3}
        best = np.zeros(len(self._head_box), dtype=np.int64) - 1
        head_index = {int(h): i for i, h in enumerate(self._head_box)}
        for light in snap.lights:
            h = self._link_head.get(light.id)
            if h is None:
                d = np.hypot(self._head_xy[:, 0] - light.x, self._head_xy[:, 1] - light.y)
                if not len(d) or d.min() > 2.0:
                    continue
                i = int(d.argmin())
            else:
                i = head_index[h]
            rank = order.get(light.state, 0)
            if rank > best[i]:  # a lane with several links shows its most permissive one
                best[i] = rank
                paint[i] = _PAINT_LAMP.get(light.state, _PAINT_LAMP["off"])
        return paint

    def render(self, snap: Snapshot, timings: dict[str, float] | None = None) -> dict[str, tuple[np.ndarray, str]]:
        """Every sensor of the rig for one snapshot. `timings`, if given, receives seconds per part."""
        clock = time.perf_counter
        t0 = clock()
        boxes = self._boxes(snap)
        t1 = clock()
        out: dict[str, tuple[np.ndarray, str]] = {}
        times = {"boxes": t1 - t0}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for rays in self.cameras:
                t = clock()
                rgb, labels, depth = self._camera(rays, snap, boxes)
                name = rays.cam.name
                out[f"rgb_{name}"] = (rgb, "jpeg")
                out[f"semantics_{name}"] = (labels, "png")
                out[f"depth_{name}"] = (depth, "png")
                times[f"camera_{name}"] = clock() - t
            t = clock()
            points, labels = self._lidar(snap, boxes)
            out["lidar"] = (points, "zstd")
            out["lidar_labels"] = (labels, "zstd")
            times["lidar"] = clock() - t
            t = clock()
            out["bev"] = (self._bev(snap), "png")
            times["bev"] = clock() - t
        if timings is not None:
            timings.update(times)
        return out

    # ------------------------------------------------------------------ cameras
    def _camera(self, rays: _CameraRays, snap: Snapshot, boxes: _Boxes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cam = rays.cam
        ego = snap.ego
        g = self.scene.ground
        zb = rays.base_z.copy()
        mat = rays.base_mat.copy()
        if rays.h0 < cam.height:
            # Ground: the hit point of row i, column j is origin + t_i * (dx_j, dy_j); in raster pixels this
            # is an outer product plus a constant.
            c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
            ox, oy = rays.origin[0], rays.origin[1]
            col_d = (c * rays.dx - s * rays.dy) / g.res
            row_d = (s * rays.dx + c * rays.dy) / g.res
            col0 = (ego.x + c * ox - s * oy - g.x0) / g.res
            row0 = (ego.y + s * ox + c * oy - g.y0) / g.res
            t = rays.ground_t[:, None]
            cols = (t * col_d[None, :] + col0).astype(np.int32)
            rows = (t * row_d[None, :] + row0).astype(np.int32)
            h, w = g.codes.shape
            np.clip(cols, 0, w - 1, out=cols)
            np.clip(rows, 0, h - 1, out=rows)
            rows *= w
            rows += cols
            mat[rays.h0:] = g.codes.ravel().take(rows)
        self._cast_camera(rays, boxes, zb, mat)
        labels = self.cls_lut.take(mat)
        rgb = self.rgb_lut.take(mat, axis=0)
        cm = zb * np.float32(100.0)
        cm += np.float32(0.5)
        cm[cm > 70000.0] = 0.0  # the sky
        return rgb, labels, cm.astype(np.uint16)

    def _cast_camera(self, rays: _CameraRays, b: _Boxes, zb: np.ndarray, mat: np.ndarray) -> None:
        cam = rays.cam
        if not len(b.xyz):
            return
        # Cull to boxes near enough and inside the horizontal field of view (with their radius as margin).
        rx, ry = b.xyz[:, 0] - cam.x, b.xyz[:, 1] - cam.y
        fwd = rays.cam_c * rx + rays.cam_s * ry
        side = -rays.cam_s * rx + rays.cam_c * ry
        radius = np.sqrt((b.half ** 2).sum(1))
        keep = (np.hypot(fwd, side) < CAMERA_BOX_RANGE + radius) & (fwd > -radius)
        keep &= np.abs(side) * rays.cos_half - fwd * rays.tan_half * rays.cos_half < radius
        idx = np.flatnonzero(keep)
        if not len(idx):
            return
        # Corners in the camera frame (x depth, y right, z up), for each box's projected rectangle.
        phi = b.yaw[idx] - math.radians(cam.yaw)
        lx = _CORNER_SIGNS[None, :, 0] * b.half[idx, 0:1]
        ly = _CORNER_SIGNS[None, :, 1] * b.half[idx, 1:2]
        lz = _CORNER_SIGNS[None, :, 2] * b.half[idx, 2:3]
        cp, sp = np.cos(phi)[:, None], np.sin(phi)[:, None]
        cx = cp * lx - sp * ly + fwd[idx, None]
        cy = sp * lx + cp * ly + side[idx, None]
        cz = lz + (b.xyz[idx, 2] - cam.z)[:, None]
        dmin = cx.min(1)
        u = rays.cx + rays.f * cy / np.maximum(cx, _NEAR)
        v = rays.cy - rays.f * cz / np.maximum(cx, _NEAR)
        umin, umax, vmin, vmax = u.min(1), u.max(1), v.min(1), v.max(1)
        H, W = cam.height, cam.width
        order = np.argsort(np.maximum(dmin, 0.0), kind="stable")  # near first: far boxes hidden are skipped
        for o in order:
            k = idx[o]
            if dmin[o] <= _NEAR:  # the box reaches behind the camera: clip its edges at the near plane
                rect = _clipped_rect(cx[o], cy[o], cz[o], rays)
                if rect is None:
                    continue
                c0, c1, r0, r1 = rect
            else:
                c0, c1 = max(int(umin[o]), 0), min(int(math.ceil(umax[o])), W)
                r0, r1 = max(int(vmin[o]), 0), min(int(math.ceil(vmax[o])), H)
            if c0 >= c1 or r0 >= r1:
                continue
            zblk = zb[r0:r1, c0:c1]
            if dmin[o] > 0 and zblk.max() < dmin[o]:
                continue  # wholly behind what is already drawn
            # The camera's origin and the rays in the box's frame.
            # (Python floats, so that the float32 rays stay float32.)
            bx, by, bz = b.xyz[k].tolist()
            byaw = float(b.yaw[k])
            c, s = math.cos(byaw), math.sin(byaw)
            px, py = cam.x - bx, cam.y - by
            ox, oy, oz = c * px + s * py, -s * px + c * py, cam.z - bz
            hx, hy, hz = b.half[k].tolist()
            dxe, dye = rays.dx[c0:c1], rays.dy[c0:c1]
            dx = c * dxe + s * dye
            dy = c * dye - s * dxe
            faces = b.faces[k]
            txn, txf, tyn, tyf = _slab(dx, ox, hx), _slab_far(dx, ox, hx), _slab(dy, oy, hy), _slab_far(dy, oy, hy)
            side_n = np.maximum(txn, tyn)
            side_f = np.minimum(txf, tyf)
            side_mat = np.where(txn >= tyn, np.where(dx > 0, faces[1], faces[0]), np.where(dy > 0, faces[3], faces[2]))
            dz = rays.dz[r0:r1]
            tzn, tzf = _slab(dz, oz, hz), _slab_far(dz, oz, hz)
            z_mat = np.where(dz > 0, faces[5], faces[4])
            tn = np.maximum(tzn[:, None], side_n[None, :])
            hit = tn < np.minimum(tzf[:, None], side_f[None, :])
            if dmin[o] <= _NEAR:  # else every hit is in front of the camera
                hit &= tn > 0
            hit &= tn < zblk
            if not hit.any():
                continue
            np.copyto(zblk, tn, where=hit)
            np.copyto(mat[r0:r1, c0:c1], np.where(tzn[:, None] > side_n[None, :], z_mat[:, None], side_mat[None, :]),
                      where=hit)

    # ------------------------------------------------------------------ lidar
    def _lidar(self, snap: Snapshot, b: _Boxes) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.rig.lidar
        ego = snap.ego
        g = self.scene.ground
        A = cfg.azimuth_steps
        sbuf = self.l_base.copy()
        hitbox = np.full(sbuf.shape, -1, dtype=np.int32)
        self._cast_lidar(b, sbuf, hitbox)
        valid = sbuf <= self.l_smax[:, None].astype(np.float32)
        # No points from the ego's own box (rays that would pass through it).
        flat = np.flatnonzero(valid)
        row, col = np.divmod(flat, A)
        s = sbuf.ravel()[flat]
        x = cfg.x + s * self.l_dx[col]
        y = s * self.l_dy[col]
        z = cfg.z + s * self.l_dz[row]
        inside = (np.abs(x) <= ego.length / 2) & (np.abs(y) <= ego.width / 2) & (z <= ego.height)
        if inside.any():
            keep = ~inside
            flat, row, col, s, x, y, z = flat[keep], row[keep], col[keep], s[keep], x[keep], y[keep], z[keep]
        box = hitbox.ravel()[flat]
        cls = np.empty(len(flat), dtype=np.uint32)
        ids = np.zeros(len(flat), dtype=np.uint32)
        on_box = box >= 0
        cls[on_box] = b.cls[box[on_box]]
        ids[on_box] = b.ids[box[on_box]]
        ground = ~on_box
        if ground.any():
            c, sn = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
            gx, gy = x[ground].astype(np.float64), y[ground].astype(np.float64)
            cols = ((ego.x + c * gx - sn * gy - g.x0) / g.res).astype(np.int64)
            rows = ((ego.y + sn * gx + c * gy - g.y0) / g.res).astype(np.int64)
            np.clip(cols, 0, g.codes.shape[1] - 1, out=cols)
            np.clip(rows, 0, g.codes.shape[0] - 1, out=rows)
            cls[ground] = self.slot_cls[g.codes[rows, cols]]
        dist = s * self.l_sec[row]
        intensity = np.exp(np.float32(-0.02) * dist).astype(np.float32)
        points = np.stack([x, y, z, intensity], axis=1).astype(np.float32)
        return points, np.stack([cls, ids], axis=1)

    def _cast_lidar(self, b: _Boxes, sbuf: np.ndarray, hitbox: np.ndarray) -> None:
        cfg = self.rig.lidar
        if not len(b.xyz):
            return
        A, C = cfg.azimuth_steps, cfg.channels
        rx, ry = b.xyz[:, 0] - cfg.x, b.xyz[:, 1]
        radius = np.hypot(b.half[:, 0], b.half[:, 1])
        idx = np.flatnonzero(np.hypot(rx, ry) < cfg.range + radius)
        if not len(idx):
            return
        # Horizontal footprints' corners relative to the LiDAR: azimuth span and nearest/farthest distance.
        c, s = np.cos(b.yaw[idx])[:, None], np.sin(b.yaw[idx])[:, None]
        lx = _CORNER_SIGNS[None, :4, 0] * b.half[idx, 0:1]
        ly = _CORNER_SIGNS[None, :4, 1] * b.half[idx, 1:2]
        px = c * lx - s * ly + rx[idx, None]
        py = s * lx + c * ly + ry[idx, None]
        ang = np.arctan2(py, px)
        ref = ang[:, :1]
        rel = (ang - ref + np.pi) % (2 * np.pi) - np.pi
        dth = 2 * np.pi / A
        k0 = np.ceil((ref[:, 0] + rel.min(1)) / dth - 1e-9).astype(np.int64)
        k1 = np.floor((ref[:, 0] + rel.max(1)) / dth + 1e-9).astype(np.int64)
        # Origin in each box's frame, for the nearest horizontal distance and "inside the footprint".
        ox = c[:, 0] * -rx[idx] + s[:, 0] * -ry[idx]
        oy = -s[:, 0] * -rx[idx] + c[:, 0] * -ry[idx]
        dnear = np.hypot(np.maximum(np.abs(ox) - b.half[idx, 0], 0), np.maximum(np.abs(oy) - b.half[idx, 1], 0))
        dfar = np.hypot(px, py).max(1)
        inside = dnear <= 0
        k0[inside], k1[inside] = 0, A - 1
        ztop = b.xyz[idx, 2] + b.half[idx, 2] - cfg.z
        zbot = b.xyz[idx, 2] - b.half[idx, 2] - cfg.z
        el_max = np.arctan2(ztop, np.where(ztop > 0, np.maximum(dnear, 1e-6), dfar))
        el_min = np.arctan2(zbot, np.where(zbot < 0, np.maximum(dnear, 1e-6), dfar))
        step = max(self.el_step, 1e-12)
        r0 = np.clip(np.ceil((self.el[0] - el_max) / step - 1e-9), 0, C).astype(np.int64)
        r1 = np.clip(np.floor((self.el[0] - el_min) / step + 1e-9) + 1, 0, C).astype(np.int64)
        if C == 1:
            on = (el_min <= self.el[0]) & (self.el[0] <= el_max)
            r0, r1 = np.where(on, 0, 1), np.ones_like(r0)
        for o in np.argsort(dnear, kind="stable"):
            if r0[o] >= r1[o] or k1[o] < k0[o]:
                continue
            n = min(int(k1[o] - k0[o]) + 1, A)
            a = int(k0[o]) % A
            spans = [(a, a + n)] if a + n <= A else [(a, A), (0, a + n - A)]
            for a0, a1 in spans:
                self._cast_lidar_block(b, int(idx[o]), int(r0[o]), int(r1[o]), a0, a1, float(dnear[o]), sbuf, hitbox)

    def _cast_lidar_block(self, b: _Boxes, k: int, r0: int, r1: int, a0: int, a1: int, dnear: float,
                          sbuf: np.ndarray, hitbox: np.ndarray) -> None:
        cfg = self.rig.lidar
        sblk = sbuf[r0:r1, a0:a1]
        if dnear > 0 and sblk.max() < dnear:
            return
        bx, by, bz = b.xyz[k].tolist()
        byaw = float(b.yaw[k])
        c, s = math.cos(byaw), math.sin(byaw)
        px, py = cfg.x - bx, -by
        ox, oy, oz = c * px + s * py, -s * px + c * py, cfg.z - bz
        hx, hy, hz = b.half[k].tolist()
        dxe, dye = self.l_dx[a0:a1], self.l_dy[a0:a1]
        dx = c * dxe + s * dye
        dy = c * dye - s * dxe
        side_n = np.maximum(_slab(dx, ox, hx), _slab(dy, oy, hy))
        side_f = np.minimum(_slab_far(dx, ox, hx), _slab_far(dy, oy, hy))
        dz = self.l_dz[r0:r1]
        tn = np.maximum(_slab(dz, oz, hz)[:, None], side_n[None, :])
        hit = tn < np.minimum(_slab_far(dz, oz, hz)[:, None], side_f[None, :])
        hit &= tn > 0
        hit &= tn < sblk
        if hit.any():
            np.copyto(sblk, tn, where=hit)
            hitbox[r0:r1, a0:a1][hit] = k

    # ------------------------------------------------------------------ bev
    def _bev(self, snap: Snapshot) -> np.ndarray:
        cfg = self.rig.bev
        ego = snap.ego
        g = self.bev_raster
        c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
        # Cell (r, q) is at ego (bev_x[r], bev_y[q]); in raster pixels an outer sum of a row and a column term.
        cols = (((c * self.bev_x)[:, None] - (s * self.bev_y)[None, :]) + (ego.x - g.x0)) / g.res
        rows = (((s * self.bev_x)[:, None] + (c * self.bev_y)[None, :]) + (ego.y - g.y0)) / g.res
        h, w = g.codes.shape
        ci = np.clip(cols.astype(np.int32), 0, w - 1)
        ri = np.clip(rows.astype(np.int32), 0, h - 1)
        ri *= w
        ri += ci
        bev = self.bev_lut.take(g.codes.ravel().take(ri))
        # Rectangles on top, in this order: lights' stop lines, vehicles, the ego.
        reach = cfg.pixels * cfg.resolution  # farther than this from the ego is off the image
        state_cls = {"red": sem.BEV_LIGHT_RED, "yellow": sem.BEV_LIGHT_YELLOW, "green": sem.BEV_LIGHT_GREEN}
        rects = [(li.x, li.y, li.yaw, 1.0, li.width, state_cls[li.state]) for li in snap.lights
                 if li.state in state_cls and abs(li.x - ego.x) < reach and abs(li.y - ego.y) < reach]
        rects += [(a.x, a.y, a.yaw, a.length, a.width, sem.BEV_VEHICLE) for a in snap.actors
                  if a.id != 0 and abs(a.x - ego.x) < reach + a.length and abs(a.y - ego.y) < reach + a.length]
        rects.append((ego.x, ego.y, ego.yaw, ego.length, ego.width, sem.BEV_EGO))
        r = np.array(rects, dtype=np.float64)
        yaw = np.radians(r[:, 2] - ego.yaw)
        dx, dy = r[:, 0] - ego.x, r[:, 1] - ego.y
        cx, cy = c * dx + s * dy, -s * dx + c * dy  # centres in the ego frame
        hl = r[:, 3:4] / 2 * np.array([1, 1, -1, -1])
        hw = r[:, 4:5] / 2 * np.array([1, -1, -1, 1])
        cyaw, syaw = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        px = cx[:, None] + cyaw * hl - syaw * hw
        py = cy[:, None] + syaw * hl + cyaw * hw
        # PIL puts pixel centres on integer coordinates, our cells span [k, k+1): shift by half a cell.
        col = cfg.pixels / 2.0 + py / cfg.resolution - 0.5
        row = cfg.pixels / 2.0 + cfg.ego_offset_px - px / cfg.resolution - 0.5
        img = Image.fromarray(bev)
        draw = ImageDraw.Draw(img)
        for k in range(len(r)):
            draw.polygon(list(zip(col[k].tolist(), row[k].tolist(), strict=True)), fill=int(r[k, 5]))
        return np.array(img)


def _slab(d: np.ndarray, o: float, h: float) -> np.ndarray:
    """Entry parameter of rays o + t*d into the slab [-h, h] (one axis)."""
    return np.minimum((-h - o) / d, (h - o) / d)


def _slab_far(d: np.ndarray, o: float, h: float) -> np.ndarray:
    return np.maximum((-h - o) / d, (h - o) / d)


def _clipped_rect(cx: np.ndarray, cy: np.ndarray, cz: np.ndarray,
                  rays: _CameraRays) -> tuple[int, int, int, int] | None:
    """Pixel rectangle of a box that reaches behind the camera: its part in front of the near plane."""
    a, b = _BOX_EDGES[:, 0], _BOX_EDGES[:, 1]
    da, db = cx[a] - _NEAR, cx[b] - _NEAR
    cross = (da > 0) != (db > 0)
    t = da[cross] / (da[cross] - db[cross])
    px = np.concatenate([cx[cx > _NEAR], np.full(cross.sum(), _NEAR)])
    py = np.concatenate([cy[cx > _NEAR], cy[a][cross] + t * (cy[b][cross] - cy[a][cross])])
    pz = np.concatenate([cz[cx > _NEAR], cz[a][cross] + t * (cz[b][cross] - cz[a][cross])])
    if not len(px):
        return None
    u = rays.cx + rays.f * py / px
    v = rays.cy - rays.f * pz / px
    W, H = rays.cam.width, rays.cam.height
    c0, c1 = int(np.clip(np.floor(u.min()), 0, W)), int(np.clip(np.ceil(u.max()), 0, W))
    r0, r1 = int(np.clip(np.floor(v.min()), 0, H)), int(np.clip(np.ceil(v.max()), 0, H))
    return c0, c1, r0, r1


