"""Speed of the embedded world with the default rig, on one core.

Generates a 4x4 town and routes, drives them with `tools.collect run` in this process (pinned to one
CPU core, one thread), and prints simulated seconds per wall second and recorded frames per second.
The wall time includes everything a route run does: SUMO, the expert, rendering, encoding and writing
frames (the town's static scene, kept beside the town after its first use, is built before the clock
starts); the breakdown per recorded frame (tools.collect.sim.drive.StageClock) shows where it goes. The
routes are driven --repeat times (default 3, each into a fresh root); the figures are the median of
the repeats (this machine is shared and noisy).

    .venv/bin/python benchmarks/bench_world.py [--routes 3] [--repeat 3]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", type=int, default=3, help="routes to drive (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="drive them this many times, report the median")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    from tools.collect.base.route_gen import generate_routes
    from tools.collect.base.town import Town, make_town
    from tools.collect.runner.attempt import run_route
    from tools.collect.sensors.scene import Scene
    from tools.collect.sim import drive
    from tools.dataset.layout import Layout

    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="bench-world-") as tmp:
        tmp = Path(tmp)
        xodr = make_town(tmp / "towns" / "town.xodr", grid="4x4")
        files = generate_routes(town=str(xodr), count=args.routes, out=str(tmp / "routes"), seed=7,
                                min_length=300, max_length=500)
        # A town's static scene is built on its first use and kept beside it (tools.collect.sensors.scene): a
        # collection of thousands of routes builds it once, so it is built here, before the clock starts.
        Scene(Town(tmp / "routes" / "towns" / "town.xodr"))
        figures = []
        for k in range(args.repeat):
            root = tmp / f"root{k}"
            stages: dict[str, float] = {}
            for f in files:
                run_route(route=str(f), root=str(root), repetition=0, towns=str(tmp / "routes" / "towns"),
                          route_id=None, attempt=None, force=False, settings={})
                for stage, seconds in drive.last_stages.items():
                    stages[stage] = stages.get(stage, 0.0) + seconds
            layout = Layout(root)
            sim = wall = 0.0
            n_frames = 0
            for key in layout.iter_runs():
                meta = json.loads(layout.result_path(key).read_text())["_checkpoint"]["records"][0]["meta"]
                sim += meta["duration_game"]
                wall += meta["duration_system"]
                n_frames += len(layout.frame_paths(key))
            size = sum(p.stat().st_size for key in layout.iter_runs() for p in layout.frame_paths(key))
            figures.append((sim / wall, n_frames / wall, sim, wall, n_frames, size, stages))
            print(f"  run {k + 1}: {sim / wall:.1f} simulated s per wall s, {n_frames / wall:.1f} frames/s", flush=True)
    speed, fps, sim, wall, n_frames, size, stages = sorted(figures, key=lambda f: f[0])[len(figures) // 2]
    print(f"embedded world, default rig, 1 core: {len(files)} routes, {sim:.0f} s simulated in {wall:.1f} s wall "
          f"(median of {len(figures)} runs)")
    print(f"  simulated seconds per wall second: {speed:.1f}  (goal: 25 or more)")
    print(f"  recorded frames per second:        {fps:.1f}  ({n_frames} frames, "
          f"{size / max(n_frames, 1) / 1024:.0f} KiB per frame; goal: no more than 152 KiB)")
    frames = max(stages.pop("frames", 0.0), 1.0)
    timed = sum(stages.values())
    print(f"  wall time per recorded frame, by stage ({1000 * wall / max(n_frames, 1):.1f} ms in all; the rest: "
          "setting up the town, the world and the route):")
    for stage, seconds in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"    {stage:<18} {1000 * seconds / frames:6.2f} ms  {100 * seconds / timed:5.1f}%")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
