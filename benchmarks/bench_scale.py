"""`bin/build-buckets` and `bin/progress` on a collection of 9,000 route runs, our users' unit of work.

The dataset root is synthetic but laid out as bin/collect lays it out: a manifest planning every run,
results/<Scenario>/<run>.json written from tools.dataset.results.RouteRecord, data/<Scenario>/<run>/run.json
(with a dense route of one point per metre, as real ones have) and frames written with
tools.dataset.frames.write_frame (realistic measurements and boxes; a small LiDAR-like sensor blob instead
of the ~150 kB of a real frame, and `--frames` frames a run instead of hundreds, so that the root builds in
a minute or two), logs/<Scenario>/<run>/attempt-NN.log. The runs are a mix over 12 scenario folders and 5
towns: finished, failed (a driving failure or a crash status), crashed (no result, writer gone), running
(their run.lock held by this benchmark while it measures), pending (planned, nothing on disk) and a few with
a damaged result file. The root is built once and kept under $TMPDIR (reused by the next run of the
benchmark with the same --runs and --frames).

Each command runs as a user runs it (the bin/ wrapper as a subprocess, wall time), 3 times, and the
median is printed against the goal:

- bin/build-buckets ROOT, a first build (ROOT/buckets/ removed before it): goal 10 s
- bin/build-buckets ROOT again, nothing new since that build: goal 10 s
- bin/progress ROOT: goal 5 s

    .venv/bin/python benchmarks/bench_scale.py [--runs 9000] [--frames 16] [--against CHECKOUT]

`--against` times another checkout's commands too, round by round with this one's (so a shared machine's
load falls on both alike), and prints the ratios: git archive HEAD | tar -x -C /tmp/head, link .venv, pass
/tmp/head.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.dataset.frames import fingerprint, pack_frame, write_packed, write_run_measurements  # noqa: E402
from tools.dataset.layout import Layout, RunKey  # noqa: E402
from tools.dataset.manifest import update_manifest  # noqa: E402
from tools.dataset.measurements import BoxLabel, Measurements, RoadOption  # noqa: E402
from tools.dataset.results import (  # noqa: E402
    COMPLETED,
    FAILED_BLOCKED,
    FAILED_SIMULATION,
    PERFECT,
    RouteRecord,
)

#: Bump when the synthetic root changes: a cached root of another version is built again.
ROOT_VERSION = 2  # 2: runs that ended write their measurements index, as the writers do

GOALS = {"build": 10.0, "rebuild": 10.0, "progress": 5.0}

SCENARIOS = ("Accident", "BlockedIntersection", "ConstructionObstacle", "DynamicObjectCrossing",
             "HazardAtSideLane", "NonSignalizedJunctionLeftTurn", "ParkedObstacle", "PedestrianCrossing",
             "SignalizedJunctionLeftTurn", "SignalizedJunctionRightTurn", "VehicleTurningRoutePedestrian",
             "YieldToEmergencyVehicle")
TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05")
KINDS = {"Accident": "obstacle", "ConstructionObstacle": "obstacle", "HazardAtSideLane": "obstacle",
         "ParkedObstacle": "obstacle", "DynamicObjectCrossing": "pedestrian", "PedestrianCrossing": "pedestrian",
         "VehicleTurningRoutePedestrian": "pedestrian"}

#: What becomes of the runs (fractions of --runs; the rest finish).
MIX = {"failed": 0.06, "crash_status": 0.02, "crashed": 0.04, "running": 0.02, "pending": 0.05, "damaged": 0.0005}


def run_keys(n: int) -> list[RunKey]:
    return [RunKey(SCENARIOS[i % len(SCENARIOS)], f"route_{i:05d}_rep0") for i in range(n)]


def fates(keys: list[RunKey]) -> dict[RunKey, str]:
    rng = random.Random(7)
    out = {}
    for key in keys:
        x, fate = rng.random(), "finished"
        for name, share in MIX.items():
            if x < share:
                fate = name
                break
            x -= share
        out[key] = fate
    return out


def measurements(rng: random.Random, i: int, scenario: str) -> Measurements:
    """One frame's measurements, shaped as the expert records them (docs/dataset-format.md)."""
    x, y, yaw = rng.uniform(-300, 300), rng.uniform(-300, 300), rng.choice((-90.0, 0.0, 90.0, 180.0))
    speed = rng.choice((0.0, 0.0, rng.uniform(0, 4), rng.uniform(4, 14)))
    target = max(0.0, speed + rng.choice((0.0, 0.4, 2.5, -1.0)))
    heading = math.radians(yaw)
    turn = rng.random() < 0.2
    route = [[round(x + 2 * k * math.cos(heading + (0.05 * k if turn else 0.0)), 3),
              round(y + 2 * k * math.sin(heading + (0.05 * k if turn else 0.0)), 3)] for k in range(1, 21)]
    leader = {"id": rng.randint(1, 40), "gap": round(rng.uniform(3, 60), 2), "speed": round(rng.uniform(0, 12), 2)} \
        if rng.random() < 0.4 else None
    reason = rng.choice(("", "", "curve", "leader", "light", "collision", "junction", "passing"))
    kind = KINDS.get(scenario, "junction")
    active = {"name": f"{scenario}_1", "type": scenario, "kind": kind, "actors": [rng.randint(1, 40)],
              "distance": round(rng.uniform(-20, 60), 2)} if rng.random() < 0.3 else None
    return Measurements(
        frame=i, tick=5 * i, time=0.25 * i,
        ego={"x": x, "y": y, "z": 0.75, "yaw": yaw, "speed": speed, "extent": [4.9, 2.1, 1.5]},
        speed=round(speed, 3), acceleration=round(rng.uniform(-3, 2), 3), target_speed=round(target, 3),
        speed_limit=13.89, command=rng.choice(list(RoadOption)[:4]).value, next_command=RoadOption.LANEFOLLOW.value,
        target_point=route[5], target_point_next=route[15], route=route, junction=rng.random() < 0.2,
        light_hazard=rng.random() < 0.1, vehicle_hazard=leader is not None and leader["gap"] < 8,
        command_name="LANEFOLLOW", target_point_ego=[10.2, -0.3], ego_opendrive={"x": x, "y": -y, "heading": 1.57},
        route_index=10 * i, route_completion=round(min(100.0, 2.5 * i), 3), lane="-179_0",
        light={"id": "8:3", "distance": 12.5, "state": "red"} if rng.random() < 0.3 else None, leader=leader,
        weather={"route_percentage": 0.0, "cloudiness": 20.0, "precipitation": 0.0, "fog_density": 5.0,
                 "sun_altitude_angle": 10.0},
        reason=reason, reason_detail=f"vehicle {leader['id']} at 9.1 m, 0.0 m/s" if leader and reason else "",
        control={"steer": 0.0, "throttle": 0.3, "brake": 0.0}, scenario=active)


def run_json(rng: random.Random, key: RunKey, town: str) -> dict:
    """run.json with the keys and sizes of a real one (a ~400 m dense route, one point per metre)."""
    n = 400
    return {
        "route": key.name, "town": town, "town_file": f"/routes/towns/{town}.xodr", "scenario": key.scenario,
        "repetition": 0, "seed": rng.randint(0, 2**31), "attempt": 1, "host": "node001", "pid": 4242,
        "started": "2026-11-22T21:40:00+0000", "settings": {"sim_hz": 20, "record_every": 5, "vehicles": 30},
        "frame_dt": 0.25, "rig": {"cameras": [{"name": "front", "width": 512, "height": 256, "fov": 110}]},
        "route_length": float(n),
        "dense_route": {"xy": [[round(rng.uniform(-300, 300), 3), round(rng.uniform(-300, 300), 3)] for _ in range(n)],
                        "yaw": [round(rng.uniform(-180, 180), 3) for _ in range(n)],
                        "option": [4] * n, "junction": [False] * n},
        "target_indices": list(range(0, n, 25)), "format": 1,
    }


def make_runs(root: str, items: list[tuple[RunKey, str]], frames: int, lidar_points: int) -> None:
    """Write the runs `items` [(key, fate)] under `root` (one worker's share)."""
    layout = Layout(Path(root))
    for key, fate in items:
        rng = random.Random(f"{key}")
        if fate == "pending":
            continue
        town = TOWNS[rng.randrange(len(TOWNS))]
        layout.frames_dir(key).mkdir(parents=True, exist_ok=True)
        layout.run_settings(key).write_text(json.dumps(run_json(rng, key, town)))
        layout.log_dir(key).mkdir(parents=True, exist_ok=True)
        layout.attempt_log(key, 1).write_text("attempt 1\n")
        n = frames if fate in ("finished", "damaged") else rng.randint(1, frames)
        recorded, prints = [], []
        for i in range(n):
            boxes = [BoxLabel(id=rng.randint(1, 40), cls=14, center=[1.0, 2.0, 0.75], yaw=90.0, extent=[4.6, 1.9, 1.5],
                              speed=3.0, center_ego=[5.0, -3.0, 0.75], yaw_ego=-3.8) for _ in range(rng.randint(0, 6))]
            lidar = np.random.default_rng(i).normal(0, 10, (lidar_points, 4)).astype(np.float32)
            recorded.append(measurements(rng, i, key.scenario))
            data = pack_frame(i, recorded[-1], boxes, {"lidar": (lidar, "zstd")}, run=str(key))
            write_packed(layout.frame_path(key, i), data)
            prints.append(fingerprint(data))
        if fate in ("crashed", "running"):
            layout.heartbeat(key).write_text(json.dumps({"host": "node001", "pid": 4242, "time": 0.0, "tick": 10}))
            continue
        write_run_measurements(layout.run_measurements(key), town, recorded,  # a run that ended writes its index
                               fingerprints=prints)
        status = {"finished": rng.choice((PERFECT, COMPLETED)), "failed": FAILED_BLOCKED,
                  "crash_status": FAILED_SIMULATION, "damaged": PERFECT}[fate]
        record = RouteRecord(key.name, status, route_completion=100.0 if status in (PERFECT, COMPLETED) else 40.0,
                             route_length=400.0, duration_game=90.0, duration_system=30.0,
                             scenarios={f"{key.scenario}_1": "done"})
        text = json.dumps(record.to_result(), indent=2)
        path = layout.result_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text[: len(text) // 2] if fate == "damaged" else text)


def build_root(folder: Path, n_runs: int, frames: int, lidar_points: int) -> Path:
    """The synthetic root of `n_runs` runs under `folder` (kept; reused when complete)."""
    root, done = folder / "root", folder / "complete"
    if done.exists():
        return root
    shutil.rmtree(folder, ignore_errors=True)
    layout = Layout(root)
    keys = run_keys(n_runs)
    plan = fates(keys)
    update_manifest(layout, {"routes_dir": "/routes", "repetitions": 1, "settings": {}, "argv": []},
                    {str(k): {"route": f"/routes/{k.scenario}/{k.name[:-5]}.xml", "route_id": k.name[:-5],
                              "repetition": 0} for k in keys})
    t0 = time.perf_counter()
    items = list(plan.items())
    workers = max(1, min(4, os.cpu_count() or 1))
    chunks = [items[i::workers * 8] for i in range(workers * 8)]
    print(f"building a synthetic root of {n_runs} route runs in {root} (once; kept for the next run)", file=sys.stderr)
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(make_runs, [str(root)] * len(chunks), chunks, [frames] * len(chunks),
                      [lidar_points] * len(chunks)))
    done.write_text(json.dumps({"runs": n_runs, "frames": frames, "seconds": round(time.perf_counter() - t0, 1)}))
    return root


def hold_running(layout: Layout, keys: list[RunKey]) -> list[int]:
    """Lock the run.lock of the running runs, as the collector running them would, for as long as we measure."""
    fds = []
    for key in keys:
        fd = os.open(layout.run_lock(key), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fds.append(fd)
    return fds


def timed(argv: list[str]) -> tuple[float, str]:
    """Wall time of one run of `argv` as a user runs it, and its output."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}")
    return seconds, proc.stderr + proc.stdout


def measure(checkout: Path, layout: Layout) -> dict[str, tuple[float, str]]:
    """One round of the three commands of `checkout` on the root: (seconds, output) each."""
    shutil.rmtree(layout.buckets, ignore_errors=True)
    build = [str(checkout / "bin" / "build-buckets"), str(layout.root)]
    return {"build": timed(build), "rebuild": timed(build),
            "progress": timed([str(checkout / "bin" / "progress"), str(layout.root)])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9000, help="route runs in the root (default 9000)")
    parser.add_argument("--frames", type=int, default=16,
                        help="frames of a finished route run (default 16; a posttrain frame needs 13)")
    parser.add_argument("--lidar-points", type=int, default=250, help="points of the frames' LiDAR-like sensor blob")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the commands; the median is printed")
    parser.add_argument("--workdir", default=None, help="where the root is kept (default $TMPDIR)")
    parser.add_argument("--against", default=None, metavar="CHECKOUT",
                        help="also time the bin/ commands of another checkout (say the last commit's, from git "
                             "archive), round by round with this one's, and print the ratios")
    args = parser.parse_args()
    base = Path(args.workdir or tempfile.gettempdir())
    folder = base / f"drivekit-bench-scale-v{ROOT_VERSION}-{args.runs}x{args.frames}x{args.lidar_points}"
    root = build_root(folder, args.runs, args.frames, args.lidar_points)
    layout = Layout(root)
    running = [k for k, fate in fates(run_keys(args.runs)).items() if fate == "running"]
    checkouts = [REPO] + ([Path(args.against).resolve()] if args.against else [])
    rounds: dict[Path, list[dict[str, tuple[float, str]]]] = {c: [] for c in checkouts}
    fds = hold_running(layout, running)
    try:
        for i in range(args.repeats):
            # Alternate who goes first: the second one reads frames the first one left in the page cache.
            for checkout in (checkouts if i % 2 == 0 else checkouts[::-1]):
                rounds[checkout].append(measure(checkout, layout))
    finally:
        for fd in fds:
            os.close(fd)
    index = json.loads(layout.bucket_index.read_text())
    frames = sum(r["frames"] for r in index["runs"].values())
    print(f"bench_scale: {args.runs} route runs ({len(index['runs'])} finished, {frames} frames of "
          f"~{(args.lidar_points * 16 + 2500) // 1000} kB), {len(running)} running; wall time of each command as "
          f"a user runs it, median of {args.repeats}")
    names = {"build": "bin/build-buckets ROOT, first build", "rebuild": "bin/build-buckets ROOT, nothing new",
             "progress": "bin/progress ROOT"}
    medians = {c: {k: statistics.median(r[k][0] for r in rounds[c]) for k in GOALS} for c in checkouts}
    for checkout in checkouts:
        if len(checkouts) > 1:
            print(f"  {checkout}:")
        for key, goal in GOALS.items():
            each = ", ".join(f"{r[key][0]:.2f}" for r in rounds[checkout])
            verdict = "ok" if medians[checkout][key] <= goal else "OVER"
            print(f"  {names[key]:<40} {medians[checkout][key]:6.2f} s   goal {goal:4.0f} s   {verdict:<4}  ({each})")
    if len(checkouts) > 1:
        other = checkouts[1]
        print("  " + ", ".join(f"{k} {medians[other][k] / medians[REPO][k]:.1f}x faster" for k in GOALS)
              + f" than {other}")
    last = rounds[REPO][-1]
    total = next((line for line in last["progress"][1].splitlines() if line.startswith("total")), "")
    print(f"  progress total row: {' '.join(total.split())}")
    if "up to date" not in last["rebuild"][1]:
        print("  note: the second build did not find the files up to date", file=sys.stderr)


if __name__ == "__main__":
    main()
