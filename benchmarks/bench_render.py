"""Time per rendered frame of the default rig, per sensor: a 4x4 SUMO town, 30 actors, all its structures.

    .venv/bin/python benchmarks/bench_render.py [--frames 200] [--grid 4x4] [--actors 30]

Each frame puts the ego on a random lane of the town with 8 vehicles around it (same and neighbouring
lanes, ahead and behind) and the rest spread over the town, every traffic light set. Prints the mean,
median and 90th percentile in milliseconds per part, and, for information, the time to encode the
sensors with the frame codecs (paid by the writer, not by `render`).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from tools.collect.base.town import Town, make_town
from tools.collect.sensors.render import Renderer
from tools.collect.sensors.scene import Scene
from tools.dataset import semantics as sem
from tools.dataset.codec import encode_array
from tools.dataset.rig import JPEG_QUALITY, RigConfig
from tools.expert.state import Box, Light, Snapshot


def lane_pose(line: np.ndarray, s: float) -> tuple[float, float, float]:
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    k = int(np.clip(np.searchsorted(arc, s), 1, len(line) - 1))
    yaw = math.degrees(math.atan2(line[k, 1] - line[k - 1, 1], line[k, 0] - line[k - 1, 0]))
    return float(np.interp(s, arc, line[:, 0])), float(np.interp(s, arc, line[:, 1])), yaw


def snapshots(town: Town, scene: Scene, frames: int, actors: int, seed: int = 0) -> list[Snapshot]:
    rng = np.random.default_rng(seed)
    lanes = [lane for lane in town.lanes if not lane.internal]
    by_id = {lane.id: lane for lane in lanes}
    length = {lane.id: float(np.hypot(*np.diff(lane.centerline, axis=0).T).sum()) for lane in lanes}
    states = ["red", "yellow", "green"]
    out = []
    for i in range(frames):
        lane = lanes[rng.integers(len(lanes))]
        s0 = float(rng.uniform(5.0, length[lane.id] - 5.0))
        x, y, yaw = lane_pose(lane.centerline, s0)
        ego = Box(0, sem.CAR, x, y, 0.75, yaw, 4.8, 2.0, 1.5, 8.0)
        boxes = []
        neighbours = [by_id.get(f"{lane.edge}_{k}") for k in range(lane.lanes_in_edge)]
        for k in range(actors):
            if k < 8:  # around the ego
                other = neighbours[k % len(neighbours)] or lane
                s = float(np.clip(s0 + rng.uniform(-15.0, 45.0), 0.0, length[other.id]))
            else:
                other = lanes[rng.integers(len(lanes))]
                s = float(rng.uniform(0.0, length[other.id]))
            ax, ay, ayaw = lane_pose(other.centerline, s)
            cls = sem.CAR if rng.random() < 0.85 else (sem.TRUCK if rng.random() < 0.6 else sem.BUS)
            size = {sem.CAR: (4.6, 2.0, 1.5), sem.TRUCK: (8.0, 2.5, 3.2), sem.BUS: (11.0, 2.6, 3.3)}[cls]
            boxes.append(Box(k + 1, cls, ax, ay, size[2] / 2, ayaw, *size, speed=5.0))
        lights = [Light(link, s.x, s.y, s.yaw, s.width, states[(i // 20 + j) % 3])
                  for j, s in enumerate(scene.signals) for link in s.links]
        out.append(Snapshot(time=i * 0.1, ego=ego, actors=boxes, lights=lights))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--grid", default="4x4")
    parser.add_argument("--actors", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        t = time.perf_counter()
        town = Town(make_town(Path(tmp) / "town.xodr", grid=args.grid))
        _ = town.lanes
        t_town = time.perf_counter() - t
        t = time.perf_counter()
        scene = Scene(town)
        t_scene = time.perf_counter() - t
        t = time.perf_counter()
        renderer = Renderer(scene, RigConfig())
        t_renderer = time.perf_counter() - t
        snaps = snapshots(town, scene, args.frames, args.actors)
        for snap in snaps[:5]:  # warm up
            renderer.render(snap)
        rows: dict[str, list[float]] = {}
        encode = []
        for i, snap in enumerate(snaps):
            parts: dict[str, float] = {}
            t = time.perf_counter()
            out = renderer.render(snap, timings=parts)
            parts["total"] = time.perf_counter() - t
            for name, sec in parts.items():
                rows.setdefault(name, []).append(sec * 1000.0)
            if i < 30:
                t = time.perf_counter()
                for array, codec in out.values():
                    encode_array(array, codec, jpeg_quality=JPEG_QUALITY)
                encode.append((time.perf_counter() - t) * 1000.0)

    print(f"town {args.grid}: {len(town.lanes)} lanes, made in {t_town:.2f} s; scene {t_scene:.2f} s "
          f"({len(scene.static_boxes)} structures, raster {scene.ground.codes.shape[1]}x{scene.ground.codes.shape[0]} "
          f"at {scene.resolution:.2f} m); renderer {t_renderer:.2f} s")
    print(f"{args.frames} frames, {args.actors} actors, default rig (camera 512x256, LiDAR 32x720, BEV 256x256)")
    print(f"{'ms per frame':<16}{'mean':>8}{'median':>8}{'p90':>8}")
    for name, ms in rows.items():
        ms_arr = np.array(ms)
        print(f"{name:<16}{ms_arr.mean():8.2f}{np.median(ms_arr):8.2f}{np.percentile(ms_arr, 90):8.2f}")
    print(f"{'(encode)':<16}{np.mean(encode):8.2f}{np.median(encode):8.2f}{np.percentile(encode, 90):8.2f}"
          "   jpeg/png/zstd of all sensors, paid by write_frame")


if __name__ == "__main__":
    main()
