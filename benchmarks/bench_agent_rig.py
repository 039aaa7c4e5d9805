"""What a researcher's sensor rig costs in the embedded world: `bin/evaluate --agent-file` over the same routes with
one agent that follows the route with GNSS, IMU and speedometer (docs/examples/gnss_agent.py: a trivial run_step)
and declares, besides those, nothing (`gnss`), TransFuser++'s rig (`tfpp`: one 1024 x 512 camera at fov 110 and the
leaderboard's LiDAR, as carla_garage's leaderboard 2.0 config mounts them) or Bench2Drive's six-camera rig (`b2d6`:
six 1600 x 900 cameras, fov 70 and the back one 110, as Bench2DriveZoo's UniAD and VAD agents mount them). Every
sensor is rendered every 20 Hz tick and handed to run_step, as the leaderboard does.

    .venv/bin/python benchmarks/bench_agent_rig.py                               # 4 routes on Town03, 2 workers
    .venv/bin/python benchmarks/bench_agent_rig.py --routes B2D220/ --rigs tfpp  # a whole route set

Prints, per rig: wall time, simulated time, the real-time factor per core (simulated seconds over wall seconds x
workers) and the cost against `gnss`; the statuses of the runs (the agent follows the route; it does not avoid
anything).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "gnss_agent.py"


def camera(cam_id: str, x: float, y: float, z: float, yaw: float, width: int, height: int, fov: float) -> dict:
    return {"type": "sensor.camera.rgb", "id": cam_id, "x": x, "y": y, "z": z, "roll": 0.0, "pitch": 0.0,
            "yaw": yaw, "width": width, "height": height, "fov": fov}


LIDAR = {"type": "sensor.lidar.ray_cast", "id": "lidar", "x": 0.0, "y": 0.0, "z": 2.5, "roll": 0.0, "pitch": 0.0,
         "yaw": -90.0}
RIGS: dict[str, list[dict]] = {
    "gnss": [],
    "tfpp": [camera("rgb", -1.5, 0.0, 2.0, 0.0, 1024, 512, 110.0), LIDAR],
    "b2d6": [camera("CAM_FRONT", 0.80, 0.0, 1.60, 0.0, 1600, 900, 70.0),
             camera("CAM_FRONT_LEFT", 0.27, -0.55, 1.60, -55.0, 1600, 900, 70.0),
             camera("CAM_FRONT_RIGHT", 0.27, 0.55, 1.60, 55.0, 1600, 900, 70.0),
             camera("CAM_BACK", -2.0, 0.0, 1.60, 180.0, 1600, 900, 110.0),
             camera("CAM_BACK_LEFT", -0.32, -0.55, 1.60, -110.0, 1600, 900, 70.0),
             camera("CAM_BACK_RIGHT", -0.32, 0.55, 1.60, 110.0, 1600, 900, 70.0)],
}


def write_agent(folder: Path, rig: str) -> Path:
    """An agent file: the example GNSS agent with the rig's sensors added (they are rendered and handed over)."""
    path = folder / f"{rig}_agent.py"
    path.write_text(textwrap.dedent(f"""\
        import importlib.util

        _spec = importlib.util.spec_from_file_location("gnss_agent", {str(EXAMPLE)!r})
        _example = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_example)


        def get_entry_point():
            return "RigAgent"


        class RigAgent(_example.GnssAgent):
            def sensors(self):
                return super().sensors() + {RIGS[rig]!r}
        """))
    return path


def default_routes(out: Path) -> Path:
    towns = Path(os.environ.get("DRIVEKIT_CARLA_TOWNS", REPO / ".cache" / "carla-towns"))
    town = towns / "Town03.xodr"
    if not town.is_file():
        sys.exit(f"bench_agent_rig: {town}: no such town; run `make towns` or give --routes")
    routes = out / "routes"
    subprocess.run([sys.executable, "-m", "tools.collect", "routes", "--town", str(town), "--count", "4", "--out",
                    str(routes), "--min-length", "300", "--max-length", "500", "--seed", "7"], check=True,
                   cwd=REPO, stdout=subprocess.DEVNULL)
    return routes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routes", help="a folder of route files (default: 4 routes of 300 to 500 m on Town03)")
    ap.add_argument("--towns", help="the towns folder, as bin/evaluate's --towns")
    ap.add_argument("--rigs", default=",".join(RIGS), help=f"which rigs, comma-separated ({', '.join(RIGS)})")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", help="a new folder for the evaluation roots (default: a temporary one)")
    a = ap.parse_args()
    rigs = [r for r in a.rigs.split(",") if r]
    unknown = [r for r in rigs if r not in RIGS]
    if unknown:
        sys.exit(f"bench_agent_rig: --rigs {','.join(unknown)}: unknown (rigs: {', '.join(RIGS)})")
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="bench-agent-rig-"))
    out.mkdir(parents=True, exist_ok=True)
    routes = Path(a.routes) if a.routes else default_routes(out)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rows = {}
    for rig in rigs:
        agent = write_agent(out, rig)
        cmd = [str(REPO / "bin" / "evaluate"), "--agent-file", str(agent), str(routes), "--root", str(out / rig),
               "--workers", str(a.workers), "--max-attempts", "1", *(["--towns", a.towns] if a.towns else [])]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        records = json.loads((out / rig / "result.json").read_text())["_checkpoint"]["records"]
        sim = sum(r["meta"].get("duration_game", 0.0) for r in records)
        rows[rig] = (wall, sim, len(records), Counter(r["status"] for r in records))
    print(f"\n{len(rows)} rigs over the routes of {routes}, {a.workers} workers:")
    print(f"  {'rig':6s} {'runs':>5s} {'wall':>9s} {'simulated':>10s} {'x real time a core':>19s} {'cost':>6s}"
          "  statuses")
    base = rows.get("gnss")
    for rig, (wall, sim, n, statuses) in rows.items():
        factor = sim / (wall * a.workers)
        cost = f"{wall / base[0]:5.1f}x" if base else "    -"
        print(f"  {rig:6s} {n:5d} {wall:8.0f}s {sim:9.0f}s {factor:19.1f} {cost}  "
              + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))


if __name__ == "__main__":
    main()
