"""SUMO's cost per recorded frame and the traffic near the ego, town by town (issue 22: traffic where the ego is).

    python benchmarks/bench_traffic.py [TOWN ...] [--towns DIR] [--frames 300] [--vehicles 40]
                                       [--regional auto|on|off]

TOWN: an OpenDRIVE file, or a name looked up in --towns (default $DRIVEKIT_CARLA_TOWNS); default Town03 Town06.
For each town: a route of about 1.5 km is picked in SUMO's network (seeded; no carla.Map and no route planner,
so it runs on the towns the planner cannot route yet: Town12, Town13, Town15), the embedded world
(tools.collect.sim.world.SumoWorld) is started on it with the settings' `vehicles`, and the ego is driven along
it by the controllers' pure pursuit at 8 m/s (through traffic: the ego does not brake for it; SUMO's vehicles
brake for the ego) for --frames recorded frames (one every 5 ticks at 20 Hz). Printed per town: the world's
regional mode, ms per recorded frame of SUMO's step (world.step, the "world (SUMO)" stage of
tools.collect.sim.drive.StageClock) and of the snapshot, and the mean number of background vehicles within
VIEW_RADIUS_M (150 m, what the sensors and the expert see) and within REGION_RADIUS_M of the ego. The process
is pinned to one core. Big towns: cap and serialise them, e.g.
`flock /tmp/bigtown.lock prlimit --as=10000000000 python benchmarks/bench_traffic.py Town13`.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.collect.base.town import Town, sumo_binary  # noqa: E402
from tools.collect.sim.drive import StageClock  # noqa: E402
from tools.collect.sim.traffic import REGION_RADIUS_M  # noqa: E402
from tools.collect.sim.world import VIEW_RADIUS_M, SumoWorld  # noqa: E402
from tools.expert.control import Controller  # noqa: E402
from tools.expert.route import DenseRoute  # noqa: E402

TICKS_PER_FRAME = 5
SIM_HZ = 20
SPEED = 8.0


def sumo_route(town: Town, seed: int, length: float = 1500.0) -> DenseRoute:
    """A route of about `length` metres through SUMO's network (a libsumo session of its own), as a DenseRoute
    sampled every metre in CARLA's frame."""
    import random

    import libsumo

    rng = random.Random(seed)
    libsumo.start([sumo_binary("sumo"), "-n", str(town.net), "--no-step-log", "true", "--no-warnings", "true"])
    try:
        edges = [e for e in libsumo.edge.getIDList() if not e.startswith(":")
                 and libsumo.lane.getLength(f"{e}_0") > 20.0 and "passenger" in
                 (libsumo.lane.getAllowed(f"{e}_0") or ("passenger",))]
        mids = np.array([libsumo.simulation.convert2D(e, libsumo.lane.getLength(f"{e}_0") / 2, 0) for e in edges])
        (x0, y0), (x1, y1) = libsumo.simulation.getNetBoundary()
        # Start near the network's centre (the busy part of a town), end about `length` away in a straight line.
        order = np.argsort(np.hypot(mids[:, 0] - (x0 + x1) / 2, mids[:, 1] - (y0 + y1) / 2))
        best = None
        for a in order[:200].tolist():
            d = np.hypot(mids[:, 0] - mids[a, 0], mids[:, 1] - mids[a, 1])
            ends = np.flatnonzero((d > 0.6 * length) & (d < length))
            if not len(ends):
                ends = np.argsort(-d)[:20]
            for _ in range(10):
                b = int(ends[rng.randrange(len(ends))])
                found = libsumo.simulation.findRoute(edges[a], edges[b])
                if found.edges and found.length > 0.5 * length:
                    best = found
                    break
            if best is not None:
                break
        if best is None:
            raise SystemExit(f"{town.name}: no route of {length:.0f} m found")
        shape = np.concatenate([np.array(libsumo.lane.getShape(f"{e}_0"))[:, :2] for e in best.edges
                                if not e.startswith(":")])
    finally:
        libsumo.close()
    xy = town.sumo_to_carla(shape)
    keep = np.concatenate([[True], np.hypot(*np.diff(xy, axis=0).T) > 0.05])
    xy = xy[keep]
    seg = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
    s = np.arange(0.0, seg[-1], 1.0)
    dense = np.column_stack([np.interp(s, seg, xy[:, 0]), np.interp(s, seg, xy[:, 1])])
    d = np.diff(dense, axis=0, append=dense[-1:] + (dense[-1:] - dense[-2:-1]))
    yaw = np.degrees(np.arctan2(d[:, 1], d[:, 0]))
    return DenseRoute(xy=dense, yaw=yaw, option=np.full(len(s), 4), s=s, junction=np.zeros(len(s), dtype=bool))


def bench(xodr: Path, frames: int, vehicles: int, regional: bool | None, seed: int) -> dict:
    t0 = time.perf_counter()
    town = Town(xodr)
    route = sumo_route(town, seed)
    world = SumoWorld(town, route, seed=seed, vehicles=vehicles, sim_hz=SIM_HZ, regional=regional)
    setup = time.perf_counter() - t0
    controller = Controller(1.0 / SIM_HZ)
    clock = StageClock()
    index, n_frames, near_view, near_region = 0, 0, [], []
    try:
        while n_frames < frames:
            e = world.ego
            index, _ = route.advance(index, e.x, e.y, 20.0)
            if index >= len(route.s) - 10:
                break
            if world.tick % TICKS_PER_FRAME == 0:
                clock.lap("other")
                snap = world.snapshot()
                clock.lap("snapshot")
                n_frames += 1
                near_view.append(sum(math.hypot(b.x - e.x, b.y - e.y) < VIEW_RADIUS_M for b in snap.actors))
                bg = world.background.positions()
                near_region.append(sum(math.hypot(x - e.x, y - e.y) < REGION_RADIUS_M for x, y in bg.values()))
                clock.lap("counting")
            control = controller(e.x, e.y, e.yaw, e.speed, route.xy[index:index + 40], SPEED)
            clock.lap("other")
            world.step(control)
            clock.lap("world (SUMO)")
        regional_mode = world.background.regional
    finally:
        world.close()
    (x0, y0, x1, y1) = (float(route.xy[:, 0].min()), float(route.xy[:, 1].min()), float(route.xy[:, 0].max()),
                        float(route.xy[:, 1].max()))
    return {"town": town.name, "regional": regional_mode, "frames": n_frames, "setup_s": setup,
            "sumo_ms": 1000 * clock.seconds.get("world (SUMO)", 0.0) / max(n_frames, 1),
            "snapshot_ms": 1000 * clock.seconds.get("snapshot", 0.0) / max(n_frames, 1),
            "near_view": float(np.mean(near_view)) if near_view else 0.0,
            "near_region": float(np.mean(near_region)) if near_region else 0.0,
            "route_box": (x1 - x0, y1 - y0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("towns", nargs="*", default=["Town03", "Town06"])
    parser.add_argument("--towns", dest="folder", default=os.environ.get("DRIVEKIT_CARLA_TOWNS", "."))
    parser.add_argument("--frames", type=int, default=300, help="recorded frames per town (default 300)")
    parser.add_argument("--vehicles", type=int, default=40, help="the settings' vehicles (default 40)")
    parser.add_argument("--regional", choices=("auto", "on", "off"), default="auto",
                        help="SumoWorld's regional traffic: auto (large towns only), on, off")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    regional = {"auto": None, "on": True, "off": False}[args.regional]
    print(f"{'town':<10} {'regional':>8} {'frames':>6} {'SUMO ms/frame':>14} {'snapshot ms':>12} "
          f"{'near<150m':>10} {'near<250m':>10} {'setup s':>8}")
    for name in args.towns:
        xodr = Path(name) if name.endswith(".xodr") else Path(args.folder) / f"{name}.xodr"
        r = bench(xodr, args.frames, args.vehicles, regional, args.seed)
        print(f"{r['town']:<10} {str(r['regional']):>8} {r['frames']:>6} {r['sumo_ms']:>14.2f} "
              f"{r['snapshot_ms']:>12.2f} {r['near_view']:>10.1f} {r['near_region']:>10.1f} {r['setup_s']:>8.1f}",
              flush=True)


if __name__ == "__main__":
    main()
