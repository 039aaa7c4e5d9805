"""The route planner on CARLA's real towns: walking each town's lane graph, keeping it, planning routes with it.

For each town, in a child process of its own (capped by --memory; a crash of the carla client is one town's
row, not the end of the benchmark), from the town's OpenDRIVE file:

  - map: seconds to build `carla.Map` (needed by every route run anyway);
  - walk: seconds to walk every lane of the map into the planner's lane graph (LaneGraph.build: what a town
    costs once, after which Town.lane_graph reads it from beside the town), its segments and samples;
  - rss: the child's peak resident memory, GB;
  - npz / read: the size of the kept graph and seconds to read it back;
  - routes: --routes routes shaped like the field's (a waypoint every 2 m, none inside junctions, some lane
    changes: tests/expert/test_planner_towns.py field_route), planned: milliseconds a route, and the range of planned
    length over the waypoints' polyline (1.0: the route follows its waypoints; a loop round a block: 1.2 and up).

With --old it also walks every lane as the planner before did (`Waypoint.next_until_lane_end`), in another
child, and says how that ended: "ok" or the signal that killed it (SIGSEGV on Town12, Town13 and Town15 with
the carla 0.9.16 client).

    .venv/bin/python benchmarks/bench_lane_graph.py                       # the twelve towns of `make towns`
    .venv/bin/python benchmarks/bench_lane_graph.py --towns Town12,Town13 --old
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOWNS = "Town01,Town02,Town03,Town04,Town05,Town06,Town07,Town10HD,Town11,Town12,Town13,Town15"

_CHILD = """
import json, os, random, resource, sys, tempfile, time
from pathlib import Path
import carla, numpy as np
sys.path.insert(0, sys.argv[3])
from test_planner_towns import field_route, polyline
from tools.expert.lanes import LaneGraph
from tools.expert.planner import RoutePlanner
from tools.expert.route import NoRoute

xodr, n = Path(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
cmap = carla.Map(xodr.stem, xodr.read_text(errors="replace"))
t1 = time.perf_counter()
graph = LaneGraph.build(cmap)
t2 = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    graph.save(Path(tmp) / "lanes.npz")
    size = (Path(tmp) / "lanes.npz").stat().st_size
    t3 = time.perf_counter()
    graph = LaneGraph.load(Path(tmp) / "lanes.npz")
    t4 = time.perf_counter()
planner = RoutePlanner(cmap, graph=graph)
starts = [w for w in cmap.generate_waypoints(10.0) if not w.is_junction]
rng, ratios, errors, plan_s = random.Random(22), [], [], 0.0
while len(ratios) + len(errors) < n:
    pts = field_route(cmap, rng, starts)
    if len(pts) < 50:
        continue
    t = time.perf_counter()
    try:
        ratios.append(planner.trace(pts).length / polyline(pts))
    except NoRoute as e:
        errors.append(str(e))
    plan_s += time.perf_counter() - t
print(json.dumps({"map_s": t1 - t0, "walk_s": t2 - t1, "segments": graph.n_segments, "samples": len(graph.xy),
                  "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "npz_mb": size / 1e6,
                  "read_s": t4 - t3, "ms_route": 1000 * plan_s / n, "ratio_min": min(ratios, default=0),
                  "ratio_max": max(ratios, default=0), "errors": errors}))
"""

_OLD = """
import sys
from pathlib import Path
import carla
xodr = Path(sys.argv[1])
cmap = carla.Map(xodr.stem, xodr.read_text(errors="replace"))
topology = cmap.get_topology()
for i, (entry, _) in enumerate(topology):
    print(i, entry.road_id, entry.lane_id, flush=True)
    entry.next_until_lane_end(1.0)
print("ok", len(topology))
"""


def child(code: str, args: list[str], memory_gb: float, timeout: float) -> subprocess.CompletedProcess:
    def limit() -> None:
        cap = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit)


def how_it_ended(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode < 0:
        return signal.Signals(-proc.returncode).name
    return "ok" if proc.returncode == 0 else f"exit {proc.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--towns", default=TOWNS, help="comma-separated town names (default: all twelve)")
    parser.add_argument("--towns-dir", type=Path,
                        default=Path(os.environ.get("DRIVEKIT_CARLA_TOWNS") or REPO / ".cache" / "carla-towns"),
                        help="folder of <town>.xodr files (default: $DRIVEKIT_CARLA_TOWNS, else .cache/carla-towns)")
    parser.add_argument("--routes", type=int, default=10, help="field-shaped routes planned per town")
    parser.add_argument("--memory", type=float, default=8.0, help="address space of each child, GB")
    parser.add_argument("--old", action="store_true", help="also walk with next_until_lane_end, as before")
    args = parser.parse_args()

    head = (f"{'town':9} {'segments':>8} {'samples':>9} {'map s':>6} {'walk s':>6} {'rss GB':>6} {'npz MB':>6} "
            f"{'read s':>6} {'ms/route':>8} {'planned/polyline':>17}" + ("  old walk" if args.old else ""))
    print(head)
    for name in args.towns.split(","):
        xodr = args.towns_dir / f"{name}.xodr"
        if not xodr.is_file():
            print(f"{name:9} no {xodr} (make towns)")
            continue
        proc = child(_CHILD, [str(xodr), str(args.routes), str(REPO / "tests")], args.memory, 1800)
        old = ""
        if args.old:
            walked = child(_OLD, [str(xodr)], args.memory, 1800)
            lines = walked.stdout.strip().splitlines()
            old = f"  {how_it_ended(walked)}" + (f" at segment {lines[-1]}" if walked.returncode and lines else "")
        if proc.returncode != 0:
            print(f"{name:9} {how_it_ended(proc)}: {proc.stderr.strip().splitlines()[-1:]}{old}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        ratios = f"{r['ratio_min']:.3f}..{r['ratio_max']:.3f}" + (f" ({len(r['errors'])} refused)" if r["errors"]
                                                                  else "")
        print(f"{name:9} {r['segments']:8d} {r['samples']:9d} {r['map_s']:6.1f} {r['walk_s']:6.1f} {r['rss_gb']:6.2f} "
              f"{r['npz_mb']:6.1f} {r['read_s']:6.2f} {r['ms_route']:8.0f} {ratios:>17}{old}")
        for e in r["errors"]:
            print(f"          refused: {e}")


if __name__ == "__main__":
    main()
