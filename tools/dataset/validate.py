"""Integrity of a recorded route run, whichever world recorded it (the embedded one or CARLA).

`check_run` reads every frame of a run and lists what is wrong, changing nothing (`inspect_run` returns the
frames' measurements with it, for the quality report of tools.collect.inspect.quality):

- files: frames that do not decode, or of another frame format than run.json names (frames.FRAME_FORMAT);
  frame indices that are not 0, 1, 2, ... (file names and contents); a frame that names another run or index
  than where it lies (frames.misplaced: copied, swapped or renamed); ticks that do not advance by the
  recording rate's `record_every` (a frame lost); simulated time that does not increase;
- schema (`check_schema`): the frame's keys, the measurements' and boxes' fields of the right types
  (finite numbers, commands that are RoadOption values, classes that are semantic ids);
- sensors and labels (`check_frame`): a sensor the run's rig names missing, or of another dtype or shape than
  tools.dataset.rig's table says; a LiDAR point labelled with an actor outside that actor's box; an actor box
  whose centre the BEV does not draw as an actor; an actor box that does not project onto pixels of its class
  in a camera (`camera_problems`, where the box is visible);
- the run: measurements.msgpack (what the bucket builder reads instead of the frames) that disagrees with the
  frames, and a result file that disagrees with them (`check_result`: duration, route completion, route length).

Every threshold is a constant below; docs/quality.md explains each check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.core import files
from tools.dataset import semantics
from tools.dataset.frames import (
    FRAME_FORMAT,
    READABLE_FRAME_FORMATS,
    FrameError,
    identified,
    misplaced,
    read_boxes,
    read_frame,
    read_run_measurements,
)
from tools.dataset.geometry import BevGrid, Pose, camera_intrinsics, ego_to_camera, project, world_to_ego
from tools.dataset.layout import FRAME_NAME, Layout, RunKey
from tools.dataset.measurements import BoxLabel, Measurements, RoadOption
from tools.dataset.rig import BEV, DEPTH, LIDAR, LIDAR_LABELS, SEMANTICS, RigConfig, run_rate, run_rig

#: A label may lie this far outside its box (metres): LiDAR points and depth pixels sit on the surface, and a
#: CARLA mesh may reach a little beyond its bounding box.
BOX_MARGIN_M = 0.3
#: BEV classes an actor's cell may show (actors drawn later may cover an earlier one's centre).
_ACTOR_CELLS = frozenset({semantics.BEV_VEHICLE, semantics.BEV_PEDESTRIAN, semantics.BEV_OBSTACLE,
                          semantics.BEV_EGO})
#: Camera classes that may show where a box of a class is visible: a vehicle box any vehicle class (CARLA tags
#: some vans as trucks), a pedestrian or cyclist any vulnerable class, a prop a static or dynamic object.
_SAME_KIND = {**{c: frozenset(semantics.VEHICLES) for c in semantics.VEHICLES},
              **{c: frozenset(semantics.VULNERABLE) for c in semantics.VULNERABLE},
              semantics.STATIC: frozenset({semantics.STATIC, semantics.DYNAMIC}),
              semantics.DYNAMIC: frozenset({semantics.STATIC, semantics.DYNAMIC})}
#: Classes whose shape does not fill their box (CARLA's bicycles and motorbikes: a ray through the box's
#: centre may pass between the frame's tubes): not checked against camera pixels.
HOLLOW_CLASSES = frozenset({semantics.BICYCLE, semantics.MOTORCYCLE})
#: Nearest box centre (metres along the camera's axis) checked against camera pixels.
CAMERA_NEAR_M = 0.5
#: The last frame and the result's duration_game may differ by one frame interval and this much (seconds).
RESULT_TIME_SLACK_S = 2.0
#: The last frame's route completion and the result's may differ by this many percentage points.
RESULT_COMPLETION_SLACK = 5.0
#: run.json's route length and the result's may differ by this fraction (and at least 5 m).
RESULT_LENGTH_SLACK = 0.05

#: Keys of a frame file (tools.dataset.frames.pack_frame; `run` from frame format 3 on, checked by
#: frames.misplaced); read_frame adds `sensor_names`, `verified` and `fingerprint`.
FRAME_KEYS = ("format", "index", "measurements", "boxes", "sensors")


# ----------------------------------------------------------------------------- schema


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _vector(v: Any, n: int) -> bool:
    return isinstance(v, list | tuple) and len(v) == n and all(_number(x) for x in v)


def _points(v: list) -> bool:
    """A list of [x, y] of finite numbers (checked as one array: a route holds dozens of points per frame)."""
    if not v:
        return True
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.ndim == 2 and a.shape[1] == 2 and bool(np.isfinite(a).all()) and \
        not any(isinstance(x, bool) for p in v for x in p)


_COMMANDS = frozenset(int(o) for o in RoadOption)
#: Measurements fields and the test their values pass (the fields with defaults are checked when present).
_MEASUREMENT_TYPES: dict[str, tuple[str, Any]] = {
    "frame": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "tick": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "time": ("a finite number", _number),
    "ego": ("a map with numbers x, y, z, yaw, speed and a 3-number extent",
            lambda v: isinstance(v, dict) and all(_number(v.get(k)) for k in ("x", "y", "z", "yaw", "speed"))
            and _vector(v.get("extent"), 3)),
    "speed": ("a finite number", _number),
    "acceleration": ("a finite number", _number),
    "target_speed": ("a finite number", _number),
    "speed_limit": ("a finite number", _number),
    "command": ("a RoadOption value", lambda v: v in _COMMANDS and not isinstance(v, bool)),
    "next_command": ("a RoadOption value", lambda v: v in _COMMANDS and not isinstance(v, bool)),
    "target_point": ("[x, y]", lambda v: _vector(v, 2)),
    "target_point_next": ("[x, y]", lambda v: _vector(v, 2)),
    "route": ("a list of [x, y]", lambda v: isinstance(v, list) and _points(v)),
    "junction": ("true or false", lambda v: isinstance(v, bool)),
    "light_hazard": ("true or false", lambda v: isinstance(v, bool)),
    "vehicle_hazard": ("true or false", lambda v: isinstance(v, bool)),
    "route_completion": ("a finite number", _number),
    "light": ("null or a map with a state and a distance",
              lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("state"), str)
                                      and _number(v.get("distance")))),
    "leader": ("null or a map with an id and a gap", lambda v: v is None or (isinstance(v, dict) and "id" in v
                                                                          and _number(v.get("gap")))),
    "weather": ("a map", lambda v: isinstance(v, dict)),
    "scenario": ("null or a map", lambda v: v is None or isinstance(v, dict)),
}


def check_schema(frame: dict) -> list[str]:
    """What is wrong with a frame's keys and the types of its measurements and boxes (read_frame's dict)."""
    missing = [k for k in FRAME_KEYS if k not in frame]
    if missing:
        return [f"frame has no {', '.join(missing)}"]
    problems = []
    if frame["format"] not in READABLE_FRAME_FORMATS:
        problems.append(f"frame format {frame['format']}, this tool reads format {FRAME_FORMAT}")
    m = frame["measurements"]
    try:
        Measurements.from_dict(m)
    except ValueError as e:
        return [*problems, str(e)]
    for name, (what, ok) in _MEASUREMENT_TYPES.items():
        if name in m and not ok(m[name]):
            problems.append(f"measurements.{name} is {_short(m[name])}, expected {what}")
    boxes = frame["boxes"]
    if not isinstance(boxes, list):
        return [*problems, f"boxes is {_short(boxes)}, expected a list"]
    ids: set[Any] = set()
    for i, b in enumerate(boxes):
        try:
            box = BoxLabel.from_dict(b)
        except (TypeError, ValueError) as e:
            problems.append(f"boxes[{i}]: {e}")
            continue
        bad = _box_fields(box)
        if bad:
            problems.append(f"boxes[{i}] (actor {_short(box.id)}): {bad}")
        elif box.id in ids:
            problems.append(f"boxes[{i}]: actor {box.id} has two boxes")
        ids.add(box.id)
    return problems


def _box_fields(box: BoxLabel) -> str:
    """What is wrong with a box's fields ("" when nothing)."""
    if not isinstance(box.id, int) or isinstance(box.id, bool) or box.id <= 0:
        return f"id {_short(box.id)}, expected a positive integer (0 is the ego, which has no box)"
    if box.cls not in semantics.NAMES:
        return f"class {_short(box.cls)} is not a semantic class id (tools.dataset.semantics)"
    for name, n in (("center", 3), ("extent", 3), ("center_ego", 3)):
        if not _vector(getattr(box, name), n):
            return f"{name} {_short(getattr(box, name))}, expected {n} finite numbers"
    if min(box.extent) <= 0:
        return f"extent {box.extent}, expected positive sizes"
    for name in ("yaw", "yaw_ego", "speed"):
        if not _number(getattr(box, name)):
            return f"{name} {_short(getattr(box, name))}, expected a finite number"
    return ""


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ----------------------------------------------------------------------------- one frame's sensors and labels


def check_frame(frame: dict, rig: RigConfig, grid: BevGrid) -> list[str]:
    """What is wrong with one decoded frame (read_frame with its sensors): schema, sensors, labels."""
    problems = check_schema(frame)
    if problems:
        return problems
    sensors = frame["sensors"]
    for name, spec in rig.array_specs().items():
        a = sensors.get(name)
        if a is None:
            problems.append(f"sensor {name} missing")
        elif not spec.allows(a.dtype.name, a.shape):
            problems.append(f"sensor {name} is {a.dtype} {a.shape}, expected {spec}")
    if problems:
        return problems
    boxes = {b.id: b for b in read_boxes(frame)}
    points, labels = sensors[LIDAR], sensors[LIDAR_LABELS]
    if len(points) != len(labels):
        return [f"{LIDAR} has {len(points)} points, {LIDAR_LABELS} {len(labels)} labels"]
    labelled = np.flatnonzero(labels[:, 1])  # the points of actors, grouped by actor with one sort
    order = labelled[np.argsort(labels[labelled, 1], kind="stable")]
    actors, starts = np.unique(labels[order, 1], return_index=True)
    for actor, group in zip(actors.tolist(), np.split(order, starts[1:]) if len(order) else [], strict=True):
        box = boxes.get(actor)
        if box is None:
            continue
        outside = _outside(box, points[group, :3])
        if outside:
            problems.append(f"{outside} LiDAR points of actor {actor} lie outside its box")
    bev = sensors[BEV]
    cells = grid.ego_to_pixel(np.array([b.center_ego[:2] for b in boxes.values()]).reshape(-1, 2))
    for box, (col, row) in zip(boxes.values(), cells.tolist(), strict=True):
        if 0 <= row < bev.shape[0] and 0 <= col < bev.shape[1] and int(bev[int(row), int(col)]) not in _ACTOR_CELLS:
            problems.append(f"the BEV shows {semantics.BEV_NAMES.get(int(bev[int(row), int(col)]))} at the centre "
                            f"of actor {box.id} ({semantics.NAMES.get(box.cls, box.cls)})")
    for cam in rig.cameras:
        problems += camera_problems(cam, list(boxes.values()), sensors[SEMANTICS.format(camera=cam.name)],
                                    sensors[DEPTH.format(camera=cam.name)])
    return problems


def _outside(box: BoxLabel, pts_ego: np.ndarray) -> int:
    """How many ego-frame points lie farther than BOX_MARGIN_M outside the box."""
    cx, cy, cz = box.center_ego
    local = world_to_ego(Pose(cx, cy, box.yaw_ego), np.asarray(pts_ego, dtype=np.float64))  # the box's frame
    local[:, 2] -= cz
    half = np.asarray(box.extent, dtype=np.float64) / 2 + BOX_MARGIN_M
    return int((np.abs(local) > half).any(axis=1).sum())


def camera_problems(cam: Any, boxes: list[BoxLabel], classes: np.ndarray, depth_cm: np.ndarray) -> list[str]:
    """Boxes that do not project onto pixels of their class in one camera, where they are visible.

    The ray of the pixel a box's centre projects onto enters the box (with BOX_MARGIN_M) at depth t0 and
    leaves it at t1 (metres along the optical axis). The pixel's depth d says what the ray met first:
    d < t0: something in front of the box (occluded, not checked); t0 <= d <= t1: the box's surface, so the
    pixel must be of the box's class (or of a box overlapping it there); d > t1 or no depth (sky): the ray
    passed through the box without meeting it, so the box is not where the pixels show it.
    """
    if not boxes:
        return []
    centres = np.array([b.center_ego for b in boxes], dtype=np.float64)
    uv, depth = project(cam, Pose(0.0, 0.0, 0.0), centres)  # ego frame = the world frame of a pose at 0
    h, w = classes.shape
    k = camera_intrinsics(cam)
    problems = []
    for i in np.flatnonzero((depth > CAMERA_NEAR_M) & (uv[:, 0] >= 0) & (uv[:, 0] < w) & (uv[:, 1] >= 0)
                            & (uv[:, 1] < h)):
        box = boxes[i]
        if box.cls in HOLLOW_CLASSES:
            continue
        col, row = int(uv[i, 0]), int(uv[i, 1])
        # The pixel's ray in the camera frame (depth along the axis, right, up), per metre of depth.
        ray = np.array([1.0, (col + 0.5 - k[0, 2]) / k[0, 0], -(row + 0.5 - k[1, 2]) / k[1, 1]])
        span = _ray_span(cam, box, ray)
        if span is None:  # the pixel's ray misses the box (a box a pixel or two wide): nothing to compare
            continue
        t0, t1 = span
        d = float(depth_cm[row, col]) / 100.0
        seen = int(classes[row, col])
        name = f"actor {box.id} ({semantics.NAMES.get(box.cls, box.cls)})"
        if d == 0.0 or d > t1:
            met = f"{semantics.NAMES.get(seen, seen)} at {d:.1f} m" if d else semantics.NAMES.get(seen, str(seen))
            problems.append(f"camera {cam.name}: pixel (row {row}, col {col}) at the centre of {name} shows {met}, "
                            f"behind the box ({t0:.1f} to {t1:.1f} m): the box is not where the camera sees it")
        elif d >= t0 and seen not in _SAME_KIND.get(box.cls, {box.cls}):
            others = [b for j, b in enumerate(boxes) if j != i and seen in _SAME_KIND.get(b.cls, {b.cls})
                      and _ray_span(cam, b, ray, at=d)]
            if not others:
                problems.append(f"camera {cam.name}: pixel (row {row}, col {col}) at the centre of {name} shows "
                                f"{semantics.NAMES.get(seen, seen)} at {d:.1f} m, inside the box")
    return problems


def _ray_span(cam: Any, box: BoxLabel, ray: np.ndarray, at: float | None = None) -> Any:
    """(t0, t1): the depths between which the camera ray `ray` (per metre of depth, camera frame) lies in the box
    grown by BOX_MARGIN_M; None when it misses. With `at`: whether the ray's point at that depth is in it."""
    centre = ego_to_camera(cam, np.array(box.center_ego, dtype=np.float64))  # (depth, right, up)
    pose = Pose(float(centre[0]), float(centre[1]), float(box.yaw_ego) - cam.yaw)  # the box in the camera frame
    pts = np.array([[0.0, 0.0, 0.0], ray]) if at is None else ray[None, :] * at
    local = world_to_ego(pose, pts)  # into the box's frame
    local[:, 2] -= centre[2]
    half = np.asarray(box.extent, dtype=np.float64) / 2 + BOX_MARGIN_M
    if at is not None:
        return bool((np.abs(local[0]) <= half).all())
    origin, step = local[0], local[1] - local[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = (-half - origin) / step, (half - origin) / step
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    parallel = step == 0  # a ray parallel to a pair of faces: inside their slab or missing the box
    if (parallel & (np.abs(origin) > half)).any():
        return None
    t0, t1 = float(np.max(np.where(parallel, -np.inf, lo))), float(np.min(np.where(parallel, np.inf, hi)))
    return (max(t0, 0.0), t1) if t0 <= t1 and t1 > 0 else None


# ----------------------------------------------------------------------------- the run


def check_result(result: dict, run: dict, measurements: list[Measurements]) -> list[str]:
    """Where a run's result file (leaderboard 2.0 JSON) disagrees with its frames' measurements and run.json:
    the last frame's time against `duration_game`, its route completion against `score_route`, run.json's
    route length against `route_length`."""
    try:
        record = result["_checkpoint"]["records"][0]
        completion = float(record["scores"]["score_route"])
        duration = float(record["meta"]["duration_game"])
        length = float(record["meta"]["route_length"])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        return [f"result: no record with scores.score_route, meta.duration_game and meta.route_length ({e!r})"]
    if not measurements:
        return []
    problems = []
    last = measurements[-1]
    frame_dt = run_rate(run).frame_dt
    if last.time > duration + frame_dt + RESULT_TIME_SLACK_S:
        problems.append(f"result: duration_game {duration:.2f} s, but frames run to {last.time:.2f} s")
    elif duration - last.time > frame_dt + RESULT_TIME_SLACK_S:
        problems.append(f"result: duration_game {duration:.2f} s, but the last frame ({last.frame}) is at "
                        f"{last.time:.2f} s: frames missing at the end?")
    if abs(completion - float(last.route_completion)) > RESULT_COMPLETION_SLACK:
        problems.append(f"result: route completion {completion:.1f}%, the last frame's {last.route_completion:.1f}%")
    planned = run.get("route_length")
    if _number(planned) and abs(length - planned) > max(RESULT_LENGTH_SLACK * planned, 5.0):
        problems.append(f"result: route_length {length:.1f} m, run.json's route {planned:.1f} m: the result of "
                        "another route?")
    return problems


@dataclass
class RunCheck:
    """What `inspect_run` found: the problems, and the measurements of the frames that decoded, in order."""

    problems: list[str] = field(default_factory=list)
    measurements: list[Measurements] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)  # run.json
    frames: int = 0  # frame files of the run
    unverified: int = 0  # frames that carry no checksum (frame format 1, recorded before dataset format 5)
    unplaced: int = 0  # frames that do not name their run (frame formats 1, 2: recorded before dataset format 6)
    fingerprints: dict[int, int | None] = field(default_factory=dict)  # index -> fingerprint of the frames read


def inspect_run(layout: Layout, key: RunKey) -> RunCheck:
    """Read every frame of a run and check it, its measurements index and its result file (when it has one)."""
    out = RunCheck()
    try:
        out.run = files.read_json(layout.run_settings(key))
        rig, rate = run_rig(out.run), run_rate(out.run)
    except (OSError, ValueError, AttributeError) as e:
        out.problems.append(f"{layout.run_settings(key).name}: unreadable run.json or rig ({e})")
        return out
    if out.run.get("format", FRAME_FORMAT) not in READABLE_FRAME_FORMATS:
        out.problems.append(f"run.json: frame format {out.run.get('format')}, this tool reads format {FRAME_FORMAT}")
    grid = BevGrid.of_rig(rig.bev)
    problems = out.problems
    last_time, last_tick = -np.inf, None
    paths = layout.frame_paths(key)
    out.frames = len(paths)
    for i, path in enumerate(paths):
        where = f"{Path(path).parent.name}/{Path(path).name}"
        if Path(path).name != FRAME_NAME.format(index=i):
            problems.append(f"{where}: expected {FRAME_NAME.format(index=i)} (frame indices must be 0, 1, 2, ...)")
            break
        try:
            frame = read_frame(path, rig=rig)  # its checksum, and every blob bounded by the rig's shapes
        except FrameError as e:
            problems.append(f"{where}: {str(e).removeprefix(f'{path}: ')}")
            last_tick = None  # (the next frame's tick cannot be compared)
            continue
        out.unverified += not frame["verified"]
        out.fingerprints[i] = frame["fingerprint"]
        out.unplaced += not identified(frame)
        wrong_place = misplaced(frame, str(key), i)  # the one rule of a frame's place (the cache builder's too)
        if wrong_place:
            problems.append(f"{where}: {wrong_place}")
            last_tick = None
            continue
        found = check_frame(frame, rig, grid)
        problems += [f"{where}: {p}" for p in found]
        try:
            m = Measurements.from_dict(frame["measurements"])
        except (KeyError, ValueError):
            m = None  # (check_schema said why)
        if m is None or any(p.startswith("measurements") for p in found):
            last_tick = None
            continue
        out.measurements.append(m)
        if m.frame != i:
            problems.append(f"{where}: its measurements are of frame {m.frame}")
        if not m.time > last_time:
            problems.append(f"{where}: time {m.time} does not increase (previous {last_time})")
        if last_tick is not None and m.tick - last_tick != rate.record_every:
            problems.append(f"{where}: tick {m.tick} after tick {last_tick}, expected {last_tick + rate.record_every} "
                            f"(a frame every {rate.record_every} ticks): a frame lost?")
        last_time, last_tick = m.time, m.tick
    problems += _index_problems(layout, key, out)
    result_path = layout.result_path(key)
    if result_path.exists():
        try:
            result = files.read_json(result_path)
        except (OSError, ValueError) as e:
            problems.append(f"result: unreadable {result_path.name} ({e})")
        else:
            if not out.measurements and out.frames == 0 and (out.run.get("settings") or {}).get("record", True):
                problems.append("no frames, but the run recorded (settings.record) and has a result")
            problems += check_result(result, out.run, out.measurements if len(out.measurements) == out.frames
                                     else [])
    return out


def _index_problems(layout: Layout, key: RunKey, found: RunCheck) -> list[str]:
    """Where measurements.msgpack (when there is one) disagrees with the frames read."""
    path = layout.run_measurements(key)
    if not path.exists():
        return []
    try:
        index = read_run_measurements(path)
    except FrameError as e:
        return [f"{path.name}: {str(e).removeprefix(f'{path}: ')}"]
    if index is None:
        return [f"{path.name}: unreadable, or of another format"]
    if len(index.measurements) != found.frames:
        return [f"{path.name}: lists {len(index.measurements)} frames, the run has {found.frames}"]
    if len(found.measurements) == found.frames:
        for m, listed in zip(found.measurements, index.measurements, strict=True):
            if m != listed:
                return [f"{path.name}: frame {m.frame}'s measurements differ from the frame file's"]
    for i, fingerprint in enumerate(index.fingerprints or []):  # (an index of frame format 3 lists them)
        if i in found.fingerprints and found.fingerprints[i] != fingerprint:
            return [f"{path.name}: frame {i}'s fingerprint is {fingerprint}, the frame file's {found.fingerprints[i]}: "
                    "the frame was replaced since its run recorded it"]
    return []


def check_run(layout: Layout, key: RunKey) -> list[str]:
    """Every integrity problem of a run ("frames/00003.msgpack: ..."); [] when there is none."""
    return inspect_run(layout, key).problems
