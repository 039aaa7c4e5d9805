"""The one geometry of the dataset: world, ego, camera and BEV grid coordinates and the maps between them.

World frame: CARLA's: metres, x east, y = -y(OpenDRIVE) (left-handed), z up; yaw in degrees, turning
from +x towards +y (clockwise seen from above). The embedded world and CARLA both record in it.

Ego frame: origin on the ground under the ego box's centre, x forward, y right, z up (CARLA's vehicle
frame). Heights are not shifted: a world point's z is its ego-frame z (the embedded world is flat at z=0;
the CARLA agent records heights from the ground under the ego at each frame: tools.collect.carla.agent).

BEV grid (`BevGrid`): a square raster of `pixels` cells, `resolution` metres each, row 0 the farthest
ahead, column 0 the farthest left; it covers `ahead` metres in front of the ego and `width / 2` to each
side. Cell (row r, column c) spans ego x in (ahead - (r+1)*res, ahead - r*res], y in [-w/2 + c*res, ...):
`floor` of `ego_to_pixel` gives the cell a point falls in. The recorded BEV (rig.BevConfig) and the
training grid (samples.CacheSettings) are both BevGrids.

Camera: a level pinhole (rig.CameraConfig) at a mount in the ego frame, yaw to the right; image u to
the right, v down; pixel (row i, column j) spans [j, j+1) x [i, i+1); depth is along the optical axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tools.dataset.rig import BevConfig, CameraConfig


@dataclass(frozen=True)
class Pose:
    """A position and heading in the world frame (yaw in degrees)."""

    x: float
    y: float
    yaw: float

    @staticmethod
    def of(obj: Any) -> Pose:
        """The pose of anything with x, y, yaw: a Pose, a box, or a dict such as a frame's `ego`."""
        if isinstance(obj, Pose):
            return obj
        if isinstance(obj, dict):
            return Pose(float(obj["x"]), float(obj["y"]), float(obj["yaw"]))
        return Pose(float(obj.x), float(obj.y), float(obj.yaw))


def wrap_degrees(angle: float | np.ndarray) -> float | np.ndarray:
    """An angle in degrees brought into [-180, 180)."""
    return (np.asarray(angle) + 180.0) % 360.0 - 180.0 if isinstance(angle, np.ndarray) else \
        (float(angle) + 180.0) % 360.0 - 180.0


def world_to_ego(pose: Any, pts: np.ndarray) -> np.ndarray:
    """World points (..., 2) or (..., 3) into the ego frame of `pose` (Pose.of); z, if given, unchanged."""
    p = Pose.of(pose)
    pts = np.asarray(pts, dtype=np.float64)
    c, s = math.cos(math.radians(p.yaw)), math.sin(math.radians(p.yaw))
    dx, dy = pts[..., 0] - p.x, pts[..., 1] - p.y
    out = [c * dx + s * dy, -s * dx + c * dy]
    if pts.shape[-1] > 2:
        out.append(pts[..., 2])
    return np.stack(out, axis=-1)


def ego_to_world(pose: Any, pts: np.ndarray) -> np.ndarray:
    """Inverse of world_to_ego."""
    p = Pose.of(pose)
    pts = np.asarray(pts, dtype=np.float64)
    c, s = math.cos(math.radians(p.yaw)), math.sin(math.radians(p.yaw))
    x, y = pts[..., 0], pts[..., 1]
    out = [p.x + c * x - s * y, p.y + s * x + c * y]
    if pts.shape[-1] > 2:
        out.append(pts[..., 2])
    return np.stack(out, axis=-1)


def left_of(line: np.ndarray, point: np.ndarray) -> float:
    """How far `point` lies left of the polyline `line` ((N, 2), in driving order), metres (right: negative), in a
    frame whose y points right (the ego frame, or CARLA's world): its distance to the nearest point of the line (its
    first and last segments drawn on without end), signed by the side of that segment. 0.0 for an empty line; for one
    point, its offset across the x axis."""
    line = np.asarray(line, dtype=np.float64).reshape(-1, 2)
    p = np.asarray(point, dtype=np.float64)
    if len(line) == 0:
        return 0.0
    if len(line) == 1:
        return float(line[0, 1] - p[1])
    a, seg = line[:-1], np.diff(line, axis=0)
    length2 = (seg**2).sum(-1)
    lo, hi = np.zeros(len(seg)), np.ones(len(seg))
    lo[0], hi[-1] = -np.inf, np.inf
    t = np.clip(((p - a) * seg).sum(-1) / np.maximum(length2, 1e-12), lo, hi)
    off = p - (a + t[:, None] * seg)
    dist = np.hypot(off[:, 0], off[:, 1])
    k = int(dist.argmin())
    cross = seg[k, 0] * (p[1] - a[k, 1]) - seg[k, 1] * (p[0] - a[k, 0])  # > 0: right of the segment (y right)
    return float(-np.sign(cross) * dist[k]) if cross != 0 else 0.0


def yaw_to_ego(pose: Any, yaw: float) -> float:
    """A world heading (degrees) as seen from the ego of `pose`, in [-180, 180)."""
    return float(wrap_degrees(float(yaw) - Pose.of(pose).yaw))


class OrientedBoxes(NamedTuple):
    """Top-view oriented boxes as the separating-axis test (`oriented_overlap`) reads them: the centres, the
    headings' cosine and sine and the half extents, arrays broadcast against each other (a number for what
    all the boxes share)."""

    x: np.ndarray
    y: np.ndarray
    cos: np.ndarray
    sin: np.ndarray
    half_length: np.ndarray
    half_width: np.ndarray

    @staticmethod
    def of(rows: np.ndarray) -> OrientedBoxes:
        """The boxes of (..., 5) rows of (x, y, yaw in degrees, length, width)."""
        rows = np.asarray(rows, dtype=np.float64)
        yaw = np.radians(rows[..., 2])
        return OrientedBoxes(rows[..., 0], rows[..., 1], np.cos(yaw), np.sin(yaw), rows[..., 3] / 2, rows[..., 4] / 2)


def boxes_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether top-view oriented boxes overlap, pairwise: `a` and `b` are (..., 5) rows of
    (x, y, yaw in degrees, length, width), broadcast against each other (`oriented_overlap`)."""
    return oriented_overlap(OrientedBoxes.of(a), OrientedBoxes.of(b))


def oriented_overlap(a: OrientedBoxes, b: OrientedBoxes) -> np.ndarray:
    """Whether boxes `a` and `b` overlap, pairwise (broadcast against each other). The separating-axis
    test on the four edge directions; touching boxes overlap."""
    ca, sa, la, wa = a.cos, a.sin, a.half_length, a.half_width
    cb, sb, lb, wb = b.cos, b.sin, b.half_length, b.half_width
    dx, dy = b.x - a.x, b.y - a.y
    cos_d = np.abs(ca * cb + sa * sb)  # |cos| and |sin| of the yaw difference
    sin_d = np.abs(sa * cb - ca * sb)
    apart = np.abs(dx * ca + dy * sa) > la + lb * cos_d + wb * sin_d  # along a's length
    if apart.all():  # every pair apart already (most often along one of a's axes): the others change nothing
        return ~apart
    apart |= np.abs(-dx * sa + dy * ca) > wa + lb * sin_d + wb * cos_d  # along a's width
    if apart.all():
        return ~apart
    apart |= np.abs(dx * cb + dy * sb) > lb + la * cos_d + wa * sin_d  # along b's length
    apart |= np.abs(-dx * sb + dy * cb) > wb + la * sin_d + wa * cos_d  # along b's width
    return ~apart


# ----------------------------------------------------------------------------- cameras


def camera_intrinsics(cam: CameraConfig) -> np.ndarray:
    """3x3 K of a camera: square pixels, principal point at the image centre."""
    f = cam.width / 2.0 / math.tan(math.radians(cam.fov) / 2.0)
    return np.array([[f, 0.0, cam.width / 2.0], [0.0, f, cam.height / 2.0], [0.0, 0.0, 1.0]])


def ego_to_camera(cam: CameraConfig, pts_ego: np.ndarray) -> np.ndarray:
    """Ego-frame points (N, 3) in the camera's frame: (depth along the axis, right, up)."""
    p = np.asarray(pts_ego, dtype=np.float64)
    c, s = math.cos(math.radians(cam.yaw)), math.sin(math.radians(cam.yaw))
    rx, ry, rz = p[..., 0] - cam.x, p[..., 1] - cam.y, p[..., 2] - cam.z
    return np.stack([c * rx + s * ry, -s * rx + c * ry, rz], axis=-1)


def project(cam: CameraConfig, pose: Any, pts_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World points (N, 3) to pixels: uv (N, 2) and depth along the optical axis (N,).

    A point behind the camera has depth <= 0 and uv NaN.
    """
    depth, right, up = np.moveaxis(ego_to_camera(cam, world_to_ego(pose, pts_world)), -1, 0)
    k = camera_intrinsics(cam)
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(depth > 1e-9, depth, np.nan)
        uv = np.stack([k[0, 2] + k[0, 0] * right / safe, k[1, 2] - k[1, 1] * up / safe], axis=-1)
    return uv, depth


# ----------------------------------------------------------------------------- the BEV grid


@dataclass(frozen=True)
class BevGrid:
    """A square ego-centred top-view grid (see the module's docstring)."""

    pixels: int
    resolution: float  # metres per cell
    ahead: float  # metres of the grid in front of the ego

    @property
    def width(self) -> float:
        return self.pixels * self.resolution

    @staticmethod
    def of_rig(bev: BevConfig) -> BevGrid:
        """The grid of a recorded BEV: the ego's centre at pixel (pixels/2 + ego_offset_px, pixels/2)."""
        return BevGrid(bev.pixels, bev.resolution, (bev.pixels / 2.0 + bev.ego_offset_px) * bev.resolution)

    def ego_to_pixel(self, pts_ego: np.ndarray) -> np.ndarray:
        """Ego-frame points (..., 2) to continuous (column, row); floor gives the cell."""
        pts = np.asarray(pts_ego, dtype=np.float64)
        col = (pts[..., 1] + self.width / 2.0) / self.resolution
        row = (self.ahead - pts[..., 0]) / self.resolution
        return np.stack([col, row], axis=-1)

    def pixel_to_ego(self, col: np.ndarray, row: np.ndarray) -> np.ndarray:
        """Continuous (column, row) to ego-frame points (..., 2); cell centres are at col, row + 0.5."""
        col, row = np.asarray(col, dtype=np.float64), np.asarray(row, dtype=np.float64)
        return np.stack([self.ahead - row * self.resolution, col * self.resolution - self.width / 2.0], axis=-1)

    def cell_centres(self) -> tuple[np.ndarray, np.ndarray]:
        """(ego x of each row's centre, ego y of each column's centre)."""
        k = np.arange(self.pixels) + 0.5
        return self.ahead - k * self.resolution, k * self.resolution - self.width / 2.0

    def resample_index(self, source: BevGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Nearest-cell resampling of a raster on `source` onto this grid: (rows, cols) into the source
        (clipped) and the masks of rows and columns that fall inside it."""
        x, y = self.cell_centres()
        cols = np.floor(source.ego_to_pixel(np.stack([np.zeros_like(y), y], axis=-1))[:, 0]).astype(np.int64)
        rows = np.floor(source.ego_to_pixel(np.stack([x, np.zeros_like(x)], axis=-1))[:, 1]).astype(np.int64)
        n = source.pixels
        return np.clip(rows, 0, n - 1), np.clip(cols, 0, n - 1), (rows >= 0) & (rows < n), (cols >= 0) & (cols < n)
