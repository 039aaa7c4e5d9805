"""One recorded frame to one training sample: the centre of the cache stage.

`Preprocessor(settings, rig)` makes the sample of tools.dataset.samples from a frame read with
tools.dataset.frames.read_frame (the sensors `Preprocessor.sensor_names`) and the measurements of the
frames after it. What a frame holds is the frame contract of tools/dataset: sensor names from the rig
(tools.dataset.rig), measurement keys and the command numbering from tools.dataset.measurements, the ego
frame and the BEV grids from tools.dataset.geometry. docs/cache.md says how each key is made.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image

from tools.cache.kernels import label_samples, lanczos_resize, lidar_counts, resize_is_pillows
from tools.core.errors import ToolError
from tools.dataset import rig as R
from tools.dataset.frames import FrameError, read_boxes
from tools.dataset.geometry import BevGrid, left_of, world_to_ego
from tools.dataset.measurements import Measurements, command_index
from tools.dataset.samples import OVERTAKE_AHEAD_M, SEMANTIC_TO_TRAIN, CacheSettings

_SEM_LUT = np.array(SEMANTIC_TO_TRAIN, dtype=np.uint8)
#: Recorded depth (uint16 centimetres) to the sample's float16 metres, every value converted once: numpy's
#: float16 conversion is software, and a lookup gives the same bits 4 times faster.
_DEPTH_M = (np.arange(1 << 16, dtype=np.uint16).astype(np.float32) / 100.0).astype(np.float16)


def _nearest(n_out: int, start: int, n_in: int) -> np.ndarray:
    """Source indices of nearest-neighbour resampling of `n_in` pixels from `start` onto `n_out`."""
    return start + np.minimum(((np.arange(n_out) + 0.5) * n_in / n_out).astype(np.int64), n_in - 1)


#: How many later frames' measurements the cache builder gives a sample for its overtake label: the expert stands
#: behind an obstacle for tools.expert PASS_AFTER_S (6 s) and may wait longer for the oncoming lane to clear; 40 s at
#: the 4 Hz recording rate.
OVERTAKE_FRAMES = 160


def overtake_offset(m: Measurements, future: list[Measurements | None]) -> float:
    """How far left of the route (`m.route`, the map's route points ahead) the expert's driven path lies
    OVERTAKE_AHEAD_M along it from the ego (metres; right: negative): the label of the overtake head. Passing an
    obstacle the expert leaves the route's lane for the next one, and the driven path says so from where it stands
    behind the obstacle, which the route points do not. 0.0 when the run ends (or a frame is unreadable) before
    the ego has driven that far, or without route points."""
    if not m.route:
        return 0.0
    here, travelled = np.array(m.ego_xy, dtype=np.float64), 0.0
    for later in future:
        if later is None:
            return 0.0
        there = np.array(later.ego_xy, dtype=np.float64)
        travelled += float(np.hypot(*(there - here)))
        here = there
        if travelled >= OVERTAKE_AHEAD_M:
            return left_of(np.array(m.route, dtype=np.float64)[:, :2], here)
    return 0.0


class Preprocessor:
    """Recorded frame -> training sample (the schema of tools.dataset.samples) for one run's rig."""

    def __init__(self, settings: CacheSettings, rig: R.RigConfig):
        self.settings, self.rig = settings, rig
        try:
            rig.camera(settings.camera)
        except ValueError as e:
            raise ToolError(f"{e}; pick one with --camera=NAME") from None
        self.rgb, self.semantics, self.depth = R.camera_sensors(settings.camera)
        #: what read_frame must decode for __call__
        self.sensor_names = [self.rgb, self.semantics, self.depth, R.LIDAR, R.BEV]
        self.grid = settings.grid()
        self.recorded_grid = BevGrid.of_rig(rig.bev)
        self._bev_index = self.grid.resample_index(self.recorded_grid)

    def _crop(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The largest centred (left, top, crop width, crop height) with the model input's aspect ratio."""
        s = self.settings
        cw = min(width, round(height * s.image_width / s.image_height))
        ch = min(height, round(width * s.image_height / s.image_width))
        return (width - cw) // 2, (height - ch) // 2, cw, ch

    def camera(self, rgb: np.ndarray, semantics: np.ndarray, depth_cm: np.ndarray) -> dict[str, np.ndarray]:
        s = self.settings
        h, w = rgb.shape[:2]
        left, top, cw, ch = self._crop(w, h)
        size, box = (s.image_width, s.image_height), (left, top, left + cw, top + ch)
        if rgb.dtype == np.uint8 and resize_is_pillows(rgb.shape, size, box):
            image = lanczos_resize(rgb, size, box)  # Pillow's pixels, 2 to 2.5 times faster (kernels.py)
        else:
            image = np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.LANCZOS, box=box), dtype=np.uint8)
        rows, cols = _nearest(s.image_height, top, ch), _nearest(s.image_width, left, cw)
        labels, depth = label_samples(semantics, depth_cm, rows, cols, _SEM_LUT, _DEPTH_M.view(np.uint16))
        return {"rgb": image, "semantics": labels, "depth": depth.view(np.float16)}

    def lidar_bev(self, points: np.ndarray) -> np.ndarray:
        """Points per cell of the settings' grid, below and above `lidar_split_height`, saturated at 255."""
        g = self.grid
        return lidar_counts(np.asarray(points, dtype=np.float32), g.width / 2.0, g.ahead, g.resolution,
                            np.float32(self.settings.lidar_split_height), g.pixels)

    def bev(self, recorded: np.ndarray) -> np.ndarray:
        """The recorded BEV raster (its grid: rig.bev) resampled (nearest) onto the settings' grid; cells
        outside the recorded raster are BEV_EMPTY (0)."""
        n = self.recorded_grid.pixels
        if recorded.shape != (n, n):
            raise FrameError(f"bev sensor of shape {recorded.shape}, the run's rig says {n} x {n}")
        rows, cols, row_ok, col_ok = self._bev_index
        out = recorded[rows][:, cols].astype(np.uint8)
        out[~row_ok, :] = 0
        out[:, ~col_ok] = 0
        return out

    def __call__(self, frame: dict[str, Any], future: list[Measurements | None]) -> dict[str, np.ndarray]:
        """The sample of `frame` (read_frame with self.sensor_names); `future` holds the measurements of the
        frames after it (None past the end of the run or where unreadable): the first `horizon` give the waypoints,
        as many as there are (OVERTAKE_FRAMES: the builder's) the overtake label (`overtake_offset`)."""
        s, m = self.settings, Measurements.from_dict(frame["measurements"])
        sensors = frame["sensors"]
        missing = [n for n in self.sensor_names if n not in sensors]
        if missing:
            raise FrameError(f"frame {m.frame}: no {', '.join(missing)} sensor")
        sample = self.camera(sensors[self.rgb], sensors[self.semantics], sensors[self.depth])
        sample["lidar_bev"] = self.lidar_bev(sensors[R.LIDAR])
        sample["bev"] = self.bev(sensors[R.BEV])

        waypoints = np.zeros((s.horizon, 2), dtype=np.float32)
        valid = np.zeros(s.horizon, dtype=bool)
        known = [k for k, later in enumerate(future[: s.horizon]) if later is not None]
        if known:
            waypoints[known] = world_to_ego(m.ego, np.array([future[k].ego_xy for k in known], dtype=np.float64))
            valid[known] = True
        sample["waypoints"], sample["waypoints_valid"] = waypoints, valid

        target = world_to_ego(m.ego, np.array([m.target_point], dtype=np.float64)).astype(np.float32)[0]
        route_world = list(m.route)[: s.route_points]
        route = world_to_ego(m.ego, np.array(route_world, dtype=np.float64)).astype(np.float32) if route_world \
            else target[None, :]
        if len(route) < s.route_points:  # near the end of the route: repeat its last point
            route = np.concatenate([route, np.repeat(route[-1:], s.route_points - len(route), axis=0)])
        sample["route"], sample["target_point"] = route, target
        sample["overtake_offset"] = np.array(overtake_offset(m, future), dtype=np.float32)

        sample["command"] = np.array(command_index(m.command), dtype=np.int64)
        sample["speed"] = np.array(m.speed, dtype=np.float32)
        sample["target_speed"] = np.array(m.target_speed, dtype=np.float32)
        sample["light_hazard"] = np.array(bool(m.light_hazard), dtype=bool)
        sample["vehicle_hazard"] = np.array(bool(m.vehicle_hazard), dtype=bool)
        rows = []
        for b in read_boxes(frame):
            if b.id == 0:
                continue
            if len(b.center_ego) < 3:
                raise FrameError(f"frame {m.frame}: box {b.id} has no center_ego")
            rows.append([*b.center_ego[:3], *b.extent[:3], math.radians(b.yaw_ego), b.cls])
        sample["boxes"] = np.array(rows, dtype=np.float32).reshape(-1, 8)
        return sample
