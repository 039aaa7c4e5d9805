"""Integrity of a recorded route run, whichever world recorded it (the embedded one or CARLA).

`check_run` reads every frame of a run and lists what is wrong, changing nothing: frames that do not
decode or are of another format; frame indices that are not 0, 1, 2, ... (file names and contents);
simulated time that does not increase; a sensor the run's rig names missing, or of another dtype or shape
than tools.dataset.rig's table says; labels that disagree with each other: a LiDAR point labelled with an
actor outside that actor's box, an actor box whose centre the BEV does not draw as an actor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tools.dataset import semantics
from tools.dataset.frames import FrameError, read_boxes, read_frame
from tools.dataset.geometry import BevGrid, Pose, world_to_ego
from tools.dataset.layout import FRAME_NAME, Layout, RunKey
from tools.dataset.measurements import BoxLabel, Measurements
from tools.dataset.rig import BEV, DEPTH, LIDAR, LIDAR_LABELS, RGB, SEMANTICS, RigConfig, run_rig

#: A LiDAR point labelled with an actor may lie this far outside its box (metres): points sit on the surface.
BOX_MARGIN_M = 0.3
#: BEV classes an actor's cell may show (actors drawn later may cover an earlier one's centre).
_ACTOR_CELLS = frozenset({semantics.BEV_VEHICLE, semantics.BEV_PEDESTRIAN, semantics.BEV_OBSTACLE,
                          semantics.BEV_EGO})


def expected_arrays(rig: RigConfig) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """Each recorded sensor's dtype and shape ((N, k) arrays: the shape's None entry is free)."""
    out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for cam in rig.cameras:
        out[RGB.format(camera=cam.name)] = ("uint8", (cam.height, cam.width, 3))
        out[SEMANTICS.format(camera=cam.name)] = ("uint8", (cam.height, cam.width))
        out[DEPTH.format(camera=cam.name)] = ("uint16", (cam.height, cam.width))
    out[LIDAR] = ("float32", (-1, 4))
    out[LIDAR_LABELS] = ("uint32", (-1, 2))
    out[BEV] = ("uint8", (rig.bev.pixels, rig.bev.pixels))
    return out


def _shape_ok(shape: tuple[int, ...], want: tuple[int, ...]) -> bool:
    return len(shape) == len(want) and all(w == -1 or s == w for s, w in zip(shape, want, strict=True))


def check_frame(frame: dict, rig: RigConfig, grid: BevGrid) -> list[str]:
    """What is wrong with one decoded frame (read_frame with its sensors)."""
    problems = []
    sensors = frame["sensors"]
    for name, (dtype, shape) in expected_arrays(rig).items():
        a = sensors.get(name)
        if a is None:
            problems.append(f"sensor {name} missing")
        elif str(a.dtype) != dtype or not _shape_ok(a.shape, shape):
            problems.append(f"sensor {name} is {a.dtype} {a.shape}, expected {dtype} {shape}")
    if problems:
        return problems
    boxes = {b.id: b for b in read_boxes(frame)}
    points, labels = sensors[LIDAR], sensors[LIDAR_LABELS]
    if len(points) != len(labels):
        return [f"{LIDAR} has {len(points)} points, {LIDAR_LABELS} {len(labels)} labels"]
    for actor in np.unique(labels[:, 1]):
        box = boxes.get(int(actor))
        if actor == 0 or box is None:
            continue
        outside = _outside(box, points[labels[:, 1] == actor, :3])
        if outside:
            problems.append(f"{outside} LiDAR points of actor {int(actor)} lie outside its box")
    bev = sensors[BEV]
    for box in boxes.values():
        col, row = grid.ego_to_pixel(np.array(box.center_ego[:2]))
        if 0 <= row < bev.shape[0] and 0 <= col < bev.shape[1] and int(bev[int(row), int(col)]) not in _ACTOR_CELLS:
            problems.append(f"the BEV shows {semantics.BEV_NAMES.get(int(bev[int(row), int(col)]))} at the centre "
                            f"of actor {box.id} ({semantics.NAMES.get(box.cls, box.cls)})")
    return problems


def _outside(box: BoxLabel, pts_ego: np.ndarray) -> int:
    """How many ego-frame points lie farther than BOX_MARGIN_M outside the box."""
    cx, cy, cz = box.center_ego
    local = world_to_ego(Pose(cx, cy, box.yaw_ego), np.asarray(pts_ego, dtype=np.float64))  # the box's frame
    local[:, 2] -= cz
    half = np.asarray(box.extent, dtype=np.float64) / 2 + BOX_MARGIN_M
    return int((np.abs(local) > half).any(axis=1).sum())


def check_run(layout: Layout, key: RunKey) -> list[str]:
    """Every integrity problem of a run's frames ("frames/0003.msgpack: ..."); [] when there is none."""
    try:
        rig = run_rig(json.loads(layout.run_settings(key).read_text()))
    except (OSError, ValueError) as e:
        return [f"{layout.run_settings(key)}: unreadable run.json or rig ({e})"]
    grid = BevGrid.of_rig(rig.bev)
    problems: list[str] = []
    last_time = -np.inf
    for i, path in enumerate(layout.frame_paths(key)):
        where = f"{Path(path).parent.name}/{Path(path).name}"
        if Path(path).name != FRAME_NAME.format(index=i):
            problems.append(f"{where}: expected {FRAME_NAME.format(index=i)} (frame indices must be 0, 1, 2, ...)")
            break
        try:
            frame = read_frame(path)
            m = Measurements.from_dict(frame["measurements"])
        except (FrameError, ValueError, KeyError) as e:
            problems.append(f"{where}: {e}")
            continue
        if frame.get("index") != i or m.frame != i:
            problems.append(f"{where}: holds frame {frame.get('index')} (measurements: {m.frame})")
        if not m.time > last_time:
            problems.append(f"{where}: time {m.time} does not increase (previous {last_time})")
        last_time = m.time
        problems += [f"{where}: {p}" for p in check_frame(frame, rig, grid)]
    return problems
