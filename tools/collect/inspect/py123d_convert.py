"""Py123D conversion, with py123d's own writers: a town's OpenDRIVE as a Py123D map (`export_town`:
`iter_xodr_map_objects` + `ArrowMapWriter`, after `py123d_xodr` made it readable to py123d's parser) and one
finished route run as a Py123D log (`write_log`: `ArrowLogWriter`), and where both go under a Py123D data root
(`log_dir`, `map_file`). Which runs are exported, when, and how a log is published whole is the command's
(tools.collect.inspect.py123d_export).

One frame of ours is one sync row: the ego (EgoStateSE3), the boxes (BoxDetectionsSE3), every camera of the
rig (its JPEG bytes copied as they are), the LiDAR (float32 points, intensity as uint8), the traffic light
the expert obeys (TrafficLightDetections, keyed by the lane of the converted map), and the run's route
(`set_route`). Timestamps are the simulated time of the frame (measurements `time`) in microseconds.

Frames. Ours are CARLA's (x east, y = -y of OpenDRIVE, z up, yaw clockwise in degrees); Py123D's are ISO
8855 (x forward, y left, z up; global = the OpenDRIVE frame, headings counter-clockwise in radians), as
py123d's CARLA-derived logs (LEAD's expert_py123d) write them: y negated, yaw negated. The ego's IMU frame
is our ego frame (ground under the ego box's centre), so LiDAR points and sensor mounts keep x and z and
negate y; a camera's frame is OpenCV's (x right, y down, z forward), its intrinsics our pinhole's
(tools.dataset.geometry.camera_intrinsics).
"""

from __future__ import annotations

import gzip
import math
import os
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset import semantics
from tools.dataset.codec import decode_array, encode_array
from tools.dataset.frames import FrameError, indexed_measurements, read_boxes, read_frame, read_measurements
from tools.dataset.geometry import camera_intrinsics, wrap_degrees
from tools.dataset.layout import Layout, RunKey
from tools.dataset.measurements import BoxLabel, Measurements
from tools.dataset.rig import JPEG_QUALITY, LIDAR, LIDAR_LABELS, RGB, CameraConfig, RigConfig, run_rig
from tools.expert.control import WHEELBASE_M

#: Py123D's dataset name of our logs and maps, and the split the logs go into (py123d finds a split by the
#: "train", "val" or "test" in its name).
DATASET = "drivekit"
SPLIT = f"{DATASET}_train"
#: The ego vehicle's name in the logs' EgoStateSE3Metadata.
EGO_NAME = "drivekit_ego"
#: Traffic lights: the lane taken through the junction is looked for this far past the stop line (metres),
#: and must run within MATCH_M of the route there and start within START_M of the stop line.
LIGHT_PROBES_M = (2.0, 4.0, 6.0, 8.0)
LIGHT_MATCH_M = 1.0
LIGHT_START_M = 4.0
#: ... and, where none is found there, this much further along the route (a far light's distance falls short).
LIGHT_LATE_M = (0.0, 4.0, 8.0)
#: paramPoly3 road geometries (netconvert's junction roads), which py123d does not read, become lines this long.
POLY_SEGMENT_M = 0.5

_LIGHT_STATES = {"green": "GREEN", "yellow": "YELLOW", "red": "RED", "off": "OFF"}
#: Our semantic class of a box -> py123d's DefaultBoxDetectionLabel name.
_BOX_LABELS = {semantics.CAR: "VEHICLE", semantics.TRUCK: "VEHICLE", semantics.BUS: "VEHICLE",
               semantics.MOTORCYCLE: "TWO_WHEELER", semantics.BICYCLE: "TWO_WHEELER", semantics.RIDER: "TWO_WHEELER",
               semantics.PEDESTRIAN: "PERSON", semantics.STATIC: "GENERIC_OBJECT",
               semantics.TRAFFIC_LIGHT: "TRAFFIC_LIGHT", semantics.TRAFFIC_SIGN: "TRAFFIC_SIGN"}


# ----------------------------------------------------------------------------- where things go


def log_name(key: RunKey) -> str:
    """A run's log name: `<Scenario>__<run>` (unique in the split, a plain folder name)."""
    return f"{key.scenario}__{key.name}"


def log_dir(out: Path, key: RunKey) -> Path:
    return Path(out) / "logs" / SPLIT / log_name(key)


def map_file(out: Path, town: str) -> Path:
    """Where py123d looks for the global map of a log of `town` (api.map.arrow.arrow_map_api.get_map_api_for_log)."""
    return Path(out) / "maps" / DATASET / f"{DATASET}_{town}.arrow"


# ----------------------------------------------------------------------------- the towns


def py123d_xodr(text: str) -> str:
    """OpenDRIVE text that py123d 0.7.0's parser reads, with the same roads: netconvert's towns use what it
    does not (paramPoly3 geometries: made lines of POLY_SEGMENT_M along the curve, keeping each road's s;
    signal ids that are not integers: numbered; controllers it does not use and cannot parse: dropped; no
    <laneOffset>: a zero one). CARLA's towns come out as they went in, but for unparsable controllers."""
    root = ET.fromstring(text)
    for controller in root.findall("controller"):
        if not str(controller.get("id", "")).lstrip("-").isdigit() or controller.get("sequence") is None:
            root.remove(controller)
    numbered: dict[str, int] = {}
    for tag in ("signal", "signalReference"):
        for e in root.iter(tag):
            if not str(e.get("id", "")).lstrip("-").isdigit():
                e.set("id", str(numbered.setdefault(str(e.get("id")), 1_000_000 + len(numbered))))
    for lanes in root.iter("lanes"):
        if lanes.find("laneOffset") is None:
            lanes.insert(0, ET.Element("laneOffset", s="0", a="0", b="0", c="0", d="0"))
    for plan in root.iter("planView"):
        for i, g in reversed(list(enumerate(plan))):
            if g.tag == "geometry" and g.find("paramPoly3") is not None:
                plan.remove(g)
                for j, line in enumerate(_lines_of_param_poly3(g)):
                    plan.insert(i + j, line)
    return ET.tostring(root, encoding="unicode")


def _lines_of_param_poly3(g: ET.Element) -> list[ET.Element]:
    """A paramPoly3 geometry as line geometries through points POLY_SEGMENT_M apart along it, their lengths
    scaled to sum to the geometry's length (the road's s stays where the lanes' polynomials expect it)."""
    poly = g.find("paramPoly3")
    s0, x0, y0, hdg, length = (float(g.get(k, 0.0)) for k in ("s", "x", "y", "hdg", "length"))
    c = {k: float(poly.get(k, 0.0)) for k in ("aU", "bU", "cU", "dU", "aV", "bV", "cV", "dV")}
    p = np.linspace(0.0, 1.0 if poly.get("pRange", "normalized") == "normalized" else length, 513)
    u = c["aU"] + c["bU"] * p + c["cU"] * p ** 2 + c["dU"] * p ** 3
    v = c["aV"] + c["bV"] * p + c["cV"] * p ** 2 + c["dV"] * p ** 3
    x = x0 + math.cos(hdg) * u - math.sin(hdg) * v
    y = y0 + math.sin(hdg) * u + math.cos(hdg) * v
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))])
    n = max(1, math.ceil(arc[-1] / POLY_SEGMENT_M))
    at = np.linspace(0.0, arc[-1], n + 1)
    xs, ys = np.interp(at, arc, x), np.interp(at, arc, y)
    chords = np.hypot(np.diff(xs), np.diff(ys))
    lengths = chords * (length / chords.sum()) if chords.sum() > 0 else np.full(n, length / n)
    starts = s0 + np.concatenate([[0.0], np.cumsum(lengths)[:-1]])
    out = []
    for k in range(n):
        line = ET.Element("geometry", s=f"{starts[k]:.8f}", x=f"{xs[k]:.8f}", y=f"{ys[k]:.8f}",
                          hdg=f"{math.atan2(ys[k + 1] - ys[k], xs[k + 1] - xs[k]):.8f}", length=f"{lengths[k]:.8f}")
        ET.SubElement(line, "line")
        out.append(line)
    return out


def _read_xodr(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def export_town(out: Path, town: str, xodr: Path, force: bool = False) -> bool:
    """Convert a town's OpenDRIVE into OUT's Py123D map of `town` with py123d's OpenDRIVE map conversion, unless
    it is there (or `force`). Written to a temporary file and renamed. Returns whether it was written."""
    from py123d.api.map.arrow.arrow_map_writer import ArrowMapWriter
    from py123d.datatypes import MapMetadata
    from py123d.parser.opendrive.opendrive_map_parser import iter_xodr_map_objects

    target = map_file(out, town)
    if target.is_file() and not force:
        return False
    try:
        text = py123d_xodr(_read_xodr(xodr))
    except (OSError, UnicodeDecodeError, ET.ParseError) as e:
        raise ToolError(f"{xodr}: cannot read the town {town!r} as OpenDRIVE ({e})") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomic.temporary_dir(out, f"map-{town}")
    try:
        source = tmp / f"{town}.xodr"
        source.write_text(text)
        writer = ArrowMapWriter(force_map_conversion=True, maps_root=tmp / "maps", logs_root=tmp / "logs")
        writer.reset(MapMetadata(dataset=DATASET, location=town, map_has_z=True, map_is_per_log=False))
        try:
            for map_object in iter_xodr_map_objects(source):
                writer.write_map_object(map_object)
            writer.close()
        except Exception as e:  # py123d's parser meets what it does not read
            raise ToolError(f"{xodr}: py123d cannot convert the town {town!r} ({type(e).__name__}: {e})") from None
        os.replace(map_file(tmp, town), target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


# ----------------------------------------------------------------------------- one run


@dataclass
class _Frame:
    """One frame file read once: its measurements, boxes and sensor blobs (undecoded)."""

    measurements: Measurements
    boxes: list[BoxLabel]
    blobs: dict[str, dict[str, Any]]


def _read_frame(path: Path) -> _Frame:
    """A frame file with its sensors left encoded (the JPEG bytes are copied as they are); FrameError as
    read_frame raises it."""
    frame = read_frame(path, sensors=False, blobs=True)
    try:
        return _Frame(Measurements.from_dict(frame.get("measurements")), read_boxes(frame), frame["blobs"])
    except (KeyError, TypeError, ValueError) as e:
        raise FrameError(f"{path}: {e}") from None


def _quat_z(yaw: float) -> tuple[float, float, float, float]:
    """(qw, qx, qy, qz) of a rotation by `yaw` radians about z."""
    return math.cos(yaw / 2.0), 0.0, 0.0, math.sin(yaw / 2.0)


def _iso_yaw(yaw_deg: float) -> float:
    """Our heading (degrees, clockwise: CARLA) as Py123D's (radians, counter-clockwise: ISO 8855)."""
    return -math.radians(float(wrap_degrees(yaw_deg)))


def camera_to_imu(cam: CameraConfig):
    """A rig camera's extrinsic in Py123D: the OpenCV camera frame (x right, y down, z forward) in the IMU
    (our ego) frame, y negated; the camera is level and turned by its yaw (positive to the right)."""
    from py123d.geometry import PoseSE3

    yaw = -math.radians(cam.yaw)
    forward = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    right = np.array([math.sin(yaw), -math.cos(yaw), 0.0])
    matrix = np.eye(4)
    matrix[:3, :3] = np.stack([right, [0.0, 0.0, -1.0], forward], axis=1)  # columns: camera x, y, z in the IMU
    matrix[:3, 3] = [cam.x, -cam.y, cam.z]
    return PoseSE3.from_transformation_matrix(matrix)


def _camera_ids(rig: RigConfig) -> dict[str, Any]:
    """A py123d CameraID for each rig camera, by where it looks: front, back, left (L0..L2 outwards), right."""
    from py123d.datatypes import CameraID

    order = sorted(rig.cameras, key=lambda c: abs(float(wrap_degrees(c.yaw))))
    wanted = {"front": [CameraID.PCAM_F0], "back": [CameraID.PCAM_B0],
              "left": [CameraID.PCAM_L0, CameraID.PCAM_L1, CameraID.PCAM_L2],
              "right": [CameraID.PCAM_R0, CameraID.PCAM_R1, CameraID.PCAM_R2]}
    spare = [CameraID.PCAM_STEREO_L, CameraID.PCAM_STEREO_R, CameraID.PCAM_D0]
    used: set = set()
    out = {}
    for cam in order:
        yaw = float(wrap_degrees(cam.yaw))
        side = "front" if abs(yaw) <= 45 else "back" if abs(yaw) >= 135 else "left" if yaw < 0 else "right"
        free = [i for i in wanted[side] + [i for ids in wanted.values() for i in ids] + spare if i not in used]
        if not free:
            raise ToolError(f"the rig has {len(rig.cameras)} cameras, more than py123d has pinhole camera ids")
        out[cam.name] = free[0]
        used.add(free[0])
    return out


def _route_s(xy: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))]) if len(xy) else np.zeros(0)


def _place_on_route(xy: np.ndarray, s: np.ndarray, ego: tuple[float, float], index: int) -> float:
    """The ego's distance along the route: its projection near the recorded route index (route_index lags by
    a point at the first frame)."""
    lo, hi = max(0, index - 30), min(len(xy), index + 31)
    k = lo + int(np.hypot(xy[lo:hi, 0] - ego[0], xy[lo:hi, 1] - ego[1]).argmin())
    if k + 1 < len(xy):
        seg = xy[k + 1] - xy[k]
        t = float(np.clip(np.dot(np.asarray(ego) - xy[k], seg) / max(float(seg @ seg), 1e-9), 0.0, 1.0))
        return float(s[k] + t * (s[k + 1] - s[k]))
    return float(s[k])


class _LightLanes:
    """The lane of the converted map that a frame's traffic light guards: the one the route takes through the
    junction after the light's stop line (an intersection lane starting at the line, running along the route)."""

    def __init__(self, map_api: Any, route_xy: np.ndarray):
        import shapely.geometry as geom

        self.api, self.geom = map_api, geom
        self.od = route_xy * np.array([1.0, -1.0])  # OpenDRIVE frame
        self.s = _route_s(route_xy)
        self.xy = route_xy
        self.cache: dict[tuple[str, int], int | None] = {}

    def _at(self, s: float) -> np.ndarray:
        return np.array([np.interp(s, self.s, self.od[:, 0]), np.interp(s, self.s, self.od[:, 1])])

    def lane(self, m: Measurements) -> int | None:
        from py123d.datatypes import MapLayer

        if len(self.s) < 2:
            return None
        s_ego = _place_on_route(self.xy, self.s, m.ego_xy, int(m.route_index))
        s_stop = s_ego + float(m.ego["extent"][0]) / 2.0 + float(m.light["distance"])
        key = (str(m.light.get("id")), int(round(s_stop / 5.0)))  # one light, a stop line within metres
        if key in self.cache:
            return self.cache[key]
        if s_stop + max(LIGHT_PROBES_M) > self.s[-1]:  # the route ends before it: which lane it guards is unknown
            return None
        best: tuple[float, int] | None = None
        # A light first seen at the end of the expert's path (about 80 m ahead) is recorded up to a few metres short
        # of its stop line: the line looked for there, then a little further on.
        for late in LIGHT_LATE_M:
            at = s_stop + late
            if best is not None or at + max(LIGHT_PROBES_M) > self.s[-1]:
                break
            probes = [self.geom.Point(*self._at(at + d)) for d in LIGHT_PROBES_M]
            stop = self.geom.Point(*self._at(at))
            for lane_id in self.api.query_object_ids(probes[0], [MapLayer.LANE],
                                                     predicate="intersects")[MapLayer.LANE]:
                lane = self.api.get_map_object_in_layer(lane_id, MapLayer.LANE)
                group = lane.lane_group if lane is not None else None
                if group is None or group.intersection_id is None:
                    continue
                line = lane.centerline.linestring
                off = float(np.mean([line.distance(p) for p in probes]))
                if off <= LIGHT_MATCH_M and self.geom.Point(line.coords[0]).distance(stop) <= LIGHT_START_M:
                    if best is None or off < best[0]:
                        best = (off, int(lane_id))
        self.cache[key] = None if best is None else best[1]
        return self.cache[key]


def _yaw_rates(measurements: list[Measurements]) -> np.ndarray:
    """Yaw rate of the ego at each frame (rad/s, ISO 8855: counter-clockwise), by differences of the recorded
    headings (central inside, one-sided at the ends)."""
    n = len(measurements)
    if n < 2:
        return np.zeros(n)
    t = np.array([m.time for m in measurements], dtype=np.float64)
    yaw = np.unwrap(np.array([_iso_yaw(m.ego["yaw"]) for m in measurements]))
    return np.gradient(yaw, t) if np.all(np.diff(t) > 0) else np.zeros(n)


def write_log(layout: Layout, key: RunKey, tmp: Path, town: str, map_api: Any) -> int:
    """Write one finished run's Py123D log under `tmp` (logs root) with py123d's ArrowLogWriter; `map_api`: its
    town's converted map (py123d's ArrowMapAPI), None without one. Returns the frames written."""
    from py123d.api.scene.arrow.arrow_log_writer import ArrowLogWriter
    from py123d.api.scene.arrow.utils.log_writer_config import LogWriterConfig
    from py123d.datatypes import (
        BoxDetectionAttributes,
        BoxDetectionSE3,
        BoxDetectionsSE3,
        BoxDetectionsSE3Metadata,
        DefaultBoxDetectionLabel,
        DynamicStateSE3,
        EgoStateSE3,
        EgoStateSE3Metadata,
        Lidar,
        LidarFeature,
        LidarID,
        LidarMetadata,
        LogMetadata,
        MapMetadata,
        PinholeCameraMetadata,
        PinholeDistortion,
        PinholeIntrinsics,
        Timestamp,
        TrafficLightDetection,
        TrafficLightDetections,
        TrafficLightStatus,
    )
    from py123d.geometry import BoundingBoxSE3, PoseSE3, Vector3D
    from py123d.geometry.transform import rel_to_abs_se3
    from py123d.parser.base_dataset_parser import ModalitiesSync, ParsedCamera


    run = files.read_json(layout.run_settings(key))
    rig = run_rig(run)
    paths = layout.frame_paths(key)
    measurements = indexed_measurements(layout.run_measurements(key), [p.name for p in paths]) or \
        [read_measurements(p) for p in paths]
    length, width, height = (float(v) for v in measurements[0].ego["extent"])
    ego_meta = EgoStateSE3Metadata(
        vehicle_name=EGO_NAME, width=width, length=length, height=height, wheel_base=WHEELBASE_M,
        center_to_imu_se3=PoseSE3(0.0, 0.0, height / 2.0, 1.0, 0.0, 0.0, 0.0),  # the IMU: ground under the centre
        rear_axle_to_imu_se3=PoseSE3(-WHEELBASE_M / 2.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0))
    box_meta = BoxDetectionsSE3Metadata(box_detection_label_class=DefaultBoxDetectionLabel)
    ids = _camera_ids(rig)
    cameras = [(cam, PinholeCameraMetadata(
        camera_name=cam.name, camera_id=ids[cam.name], intrinsics=PinholeIntrinsics.from_camera_matrix(
            camera_intrinsics(cam)), distortion=PinholeDistortion(0.0, 0.0, 0.0, 0.0, 0.0), width=cam.width,
        height=cam.height, camera_to_imu_se3=camera_to_imu(cam), is_undistorted=True)) for cam in rig.cameras]
    lidar_meta = LidarMetadata(lidar_name=LIDAR, lidar_id=LidarID.LIDAR_TOP,
                               lidar_to_imu_se3=PoseSE3(rig.lidar.x, 0.0, rig.lidar.z, 1.0, 0.0, 0.0, 0.0))
    labels = {cls: getattr(DefaultBoxDetectionLabel, name) for cls, name in _BOX_LABELS.items()}
    route_xy = np.asarray((run.get("dense_route") or {}).get("xy") or np.zeros((0, 2)), dtype=np.float64)
    lights = _LightLanes(map_api, route_xy) if map_api is not None else None
    yaw_rates = _yaw_rates(measurements)

    writer = ArrowLogWriter(LogWriterConfig(force_log_conversion=True, camera_store_option="jpeg_binary",
                                            lidar_store_option="binary", lidar_codec="ipc_zstd"),
                            logs_root=tmp, sensors_root=tmp)
    writer.reset(LogMetadata(dataset=DATASET, split=SPLIT, log_name=log_name(key), location=town,
                             map_metadata=MapMetadata(dataset=DATASET, location=town, map_has_z=True,
                                                      map_is_per_log=False) if map_api is not None else None))
    ground = []
    for i, path in enumerate(paths):
        frame = _read_frame(path)
        m = frame.measurements
        ts = Timestamp.from_us(int(round(float(m.time) * 1e6)))
        e = m.ego
        ground.append(float(e["z"]) - height / 2.0)
        yaw = _iso_yaw(e["yaw"])
        imu = PoseSE3(float(e["x"]), -float(e["y"]), ground[-1], *_quat_z(yaw))
        ego = EgoStateSE3.from_imu(imu, ego_meta, ts, dynamic_state_se3=DynamicStateSE3(
            velocity=Vector3D(float(m.speed), 0.0, 0.0), acceleration=Vector3D(float(m.acceleration), 0.0, 0.0),
            angular_velocity=Vector3D(0.0, 0.0, float(yaw_rates[i]))))
        modalities: list[Any] = [ego]

        lidar = decode_array(frame.blobs[LIDAR]) if LIDAR in frame.blobs else np.zeros((0, 4), np.float32)
        actors = decode_array(frame.blobs[LIDAR_LABELS])[:, 1] if LIDAR_LABELS in frame.blobs else np.zeros(0)
        ids_hit, hits = np.unique(actors[actors > 0], return_counts=True)
        points_of = dict(zip(ids_hit.tolist(), hits.tolist(), strict=True))
        boxes = []
        for b in frame.boxes:
            b_yaw = _iso_yaw(b.yaw)
            boxes.append(BoxDetectionSE3(
                attributes=BoxDetectionAttributes(label=labels.get(int(b.cls), DefaultBoxDetectionLabel.OTHER),
                                                  track_token=str(b.id), num_lidar_points=points_of.get(b.id, 0)),
                bounding_box_se3=BoundingBoxSE3(PoseSE3(float(b.center[0]), -float(b.center[1]), float(b.center[2]),
                                                        *_quat_z(b_yaw)),
                                                length=float(b.extent[0]), width=float(b.extent[1]),
                                                height=float(b.extent[2])),
                velocity_3d=Vector3D(float(b.speed) * math.cos(b_yaw), float(b.speed) * math.sin(b_yaw), 0.0)))
        modalities.append(BoxDetectionsSE3(box_detections=boxes, timestamp=ts, metadata=box_meta))

        for cam, meta in cameras:
            blob = frame.blobs[RGB.format(camera=cam.name)]
            jpeg = blob["data"] if blob["codec"] == "jpeg" else \
                encode_array(decode_array(blob), "jpeg", jpeg_quality=JPEG_QUALITY)["data"]
            modalities.append(ParsedCamera(metadata=meta, timestamp=ts, byte_string=bytes(jpeg),
                                           camera_to_global_se3=rel_to_abs_se3(imu, meta.camera_to_imu_se3)))

        xyz = np.array(lidar[:, :3], dtype=np.float32)
        xyz[:, 1] *= -1.0
        intensity = np.round(np.clip(lidar[:, 3], 0.0, 1.0) * 255.0).astype(np.uint8)
        modalities.append(Lidar(timestamp=ts, timestamp_end=ts, metadata=lidar_meta, point_cloud_3d=xyz,
                                point_cloud_features={LidarFeature.INTENSITY.serialize(): intensity}))

        if lights is not None:
            detections = []
            if m.light and m.light.get("state") is not None:
                lane = lights.lane(m)
                if lane is not None:
                    status = getattr(TrafficLightStatus, _LIGHT_STATES.get(str(m.light["state"]), "UNKNOWN"))
                    detections.append(TrafficLightDetection(lane_id=lane, status=status))
            modalities.append(TrafficLightDetections(detections=detections, timestamp=ts))
        writer.write_sync(ModalitiesSync(timestamp=ts, modalities=modalities))

    if len(route_xy) >= 2:  # the planned route (run.json), at the height of the ground the ego drove on
        at = np.array([_place_on_route(route_xy, _route_s(route_xy), mm.ego_xy, int(mm.route_index))
                       for mm in measurements])
        z = np.interp(_route_s(route_xy), at, ground) if np.all(np.diff(at) >= 0) else np.full(len(route_xy), ground[0])
        writer.set_route(np.column_stack([route_xy[:, 0], -route_xy[:, 1], z]))
    writer.close()
    return len(paths)
