"""Peak memory of the embedded world's static scene on a large CARLA town (issue 22), step by step.

    python benchmarks/bench_big_town.py /path/to/Town13.xodr [--route-m 1500] [--whole] [--map]

Builds the Town (netconvert once, kept), optionally its carla.Map, then the Scene for a route-sized region
(a square of --route-m metres round the lane nearest the town's centre, grown by the sensors' reach: what a
route run builds) or, with --whole, the whole town, then a Renderer with the default rig and one frame.
Prints the process's peak resident memory after each step. Run big towns under a cap, e.g.
`prlimit --as=12000000000 python benchmarks/bench_big_town.py ...`.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.collect.base.town import Town  # noqa: E402
from tools.collect.sensors.render import Renderer  # noqa: E402
from tools.collect.sensors.scene import Scene  # noqa: E402
from tools.dataset import semantics as sem  # noqa: E402
from tools.dataset.rig import RigConfig  # noqa: E402
from tools.expert.state import Box, Snapshot  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def route_lane(town: Town):
    """The normal lane nearest the centre of the town."""
    xmin, ymin, xmax, ymax = town.bounds
    centre = np.array([(xmin + xmax) / 2, (ymin + ymax) / 2])
    lanes = [lane for lane in town.lanes if not lane.internal and len(lane.centerline) >= 2]
    return min(lanes, key=lambda lane: float(np.hypot(*(lane.centerline.mean(0) - centre))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("town", type=Path)
    ap.add_argument("--route-m", type=float, default=1500.0, help="side of the route's square, metres")
    ap.add_argument("--whole", action="store_true", help="build the whole town's scene (no region)")
    ap.add_argument("--map", action="store_true", help="also build the town's carla.Map")
    args = ap.parse_args()
    t0 = time.perf_counter()

    def step(what: str) -> None:
        print(f"{what:44s} peak {peak_mb():7.0f} MB  {time.perf_counter() - t0:6.1f} s", flush=True)

    town = Town(args.town)
    step("Town (SUMO network)")
    if args.map:
        town.carla_map  # noqa: B018
        step("carla.Map")
    lane = route_lane(town)
    step(f"lanes ({len(town.lanes)}), bounds")
    mid = lane.centerline[len(lane.centerline) // 2]
    half = args.route_m / 2
    region = None if args.whole else Scene.route_region(np.array([mid - half, mid + half]))
    scene = Scene(town, seed=0) if region is None else Scene(town, seed=0, region=region)
    step(f"Scene {'whole' if region is None else 'region'} {scene.ground.codes.shape} "
         f"{scene.ground.res:.3f} m/px, {len(scene.static_boxes)} boxes")
    renderer = Renderer(scene, RigConfig())
    step(f"Renderer (BEV raster {renderer.bev_raster.codes.shape})")
    p0, p1 = lane.centerline[0], lane.centerline[1]
    yaw = float(np.degrees(np.arctan2(p1[1] - p0[1], p1[0] - p0[0])))
    renderer.render(Snapshot(time=0.0, ego=Box(0, sem.CAR, float(p0[0]), float(p0[1]), 0.75, yaw, 4.6, 2.0, 1.5)))
    step("one frame rendered")


if __name__ == "__main__":
    main()
