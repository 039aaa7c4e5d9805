"""Every CARLA town, in the embedded world: set-up, memory, world speed and the expert's finish rate per town.

For each town (OpenDRIVE from `make towns`, .cache/carla-towns/ or --towns-dir) it writes --routes routes of 150 to
700 m with one scenario each (tools.collect.base.route_gen, the leaderboard's placeable types), then drives them the way
a worker does: one `python -m tools.collect collect --workers 1` over the town's routes, whose route runs are forked
from the worker's zygote of the town (tools.collect.runner.zygote), with the default rig, recording frames. The towns
are used where they are (--towns-dir), so their derived files (SUMO network, lane graph, bounds, scenes) are made
once there and kept, as on a cluster. Per town it prints:

  - set-up seconds of the first route run in the worker (the zygote's load of the town: imports, carla.Map, lane
    graph, SUMO lanes, junctions and signals; then the run's own until its first tick) and the median of the later
    ones (a forked run's own: its plan, its regional scene, SUMO's start), both from the runs' logs;
  - the peak resident memory of any route run (its own ru_maxrss, which counts the pages it shares with the zygote);
  - simulated seconds per wall second: over the worker's route runs with their set-up (the zygote's load charged to
    the first), over the later runs alone (what each further route of the town costs), and of the drive loops alone;
  - the expert's finish rate (Perfect or Completed) and the statuses.

    .venv/bin/python benchmarks/bench_towns.py                          # all twelve towns, 10 routes each
    .venv/bin/python benchmarks/bench_towns.py --towns Town03,Town13 --routes 3

Goals (issue 22): first set-up at most 60 s and later ones at most 5 s on Town12 and Town13; a route run on Town13
under 3 GB; at least 15 times real time with set-up on Town12/13; the expert finishes at least 90% on every town.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.collect.base.scenario_types import PLACEABLE  # noqa: E402
from tools.dataset.layout import Layout  # noqa: E402
from tools.dataset.results import SUCCESS_STATUSES, read_status  # noqa: E402

TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05", "Town06", "Town07", "Town10HD", "Town11", "Town12",
         "Town13", "Town15")
#: "<key>: <status>, N frames, P% of L m in S s simulated (W s wall, T s of it set-up; peak M MB)"
#: (tools.collect.sim.drive's closing line; W and T count from the route run's process start, its fork).
DRIVE_LINE = re.compile(r", \d+ frames, .* in (?P<sim>[\d.]+) s simulated "
                        r"\((?P<wall>[\d.]+) s wall, (?P<setup>[\d.]+) s of it set-up; peak (?P<peak>[\d.]+) MB\)")
#: The zygote's line at the head of a forked run's log (tools.collect.runner.zygote).
FORKED = re.compile(r"# town \S+ loaded once by this worker \(zygote pid \d+\) in (?P<load>[\d.]+) s: .*; "
                    r"route run (?P<n>\d+) forked from it")


@dataclass
class Run:
    route: str
    status: str
    wall: float  # the route run's process, fork to exit (the first also pays the zygote's load: `load`)
    setup: float  # until its first tick (likewise)
    simulated: float
    peak_mb: float
    load: float  # the zygote's load of the town, charged to the worker's first run in the town (0 for the others)

    @property
    def drive_wall(self) -> float:
        return self.wall - self.setup


def drive_town(routes: Path, towns: Path, root: Path, log: Path) -> tuple[list[Run], float]:
    """The town's routes driven by one worker (collect --workers 1); its runs in the order driven, and the
    collection's whole wall time (its start-up's checks included)."""
    started = time.perf_counter()
    with open(log, "wb") as out:
        subprocess.run([sys.executable, "-m", "tools.collect", "collect", str(routes), "--root", str(root),
                        "--towns", str(towns), "--workers", "1", "--max-attempts", "1"], cwd=REPO, stdout=out,
                       stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - started
    layout = Layout(root)
    runs = []
    for key in layout.iter_runs():
        text = "".join(p.read_text(errors="replace") for p in layout.attempt_logs(key))
        m, f = DRIVE_LINE.search(text), FORKED.search(text)
        status = read_status(layout.result_path(key)) or "no result"
        n = int(f["n"]) if f else 0
        load = float(f["load"]) if f and n == 1 else 0.0
        if m is None:
            runs.append((n, Run(str(key), status, float("nan"), float("nan"), 0.0, float("nan"), load)))
            continue
        runs.append((n, Run(str(key), status, float(m["wall"]) + load, float(m["setup"]) + load, float(m["sim"]),
                            float(m["peak"]), load)))
    return [r for _, r in sorted(runs, key=lambda nr: nr[0])], wall


def town_rows(name: str, xodr: Path, work: Path, routes: int, seed: int) -> list[Run]:
    folder = work / name
    (folder / "routes").mkdir(parents=True, exist_ok=True)
    # One route of each placeable type in turn (a type that has no place in this town is skipped), until `routes`.
    made, tried = 0, 0
    while made < routes and tried < len(PLACEABLE) + routes:
        kind = PLACEABLE[tried % len(PLACEABLE)]
        gen = subprocess.run([sys.executable, "-m", "tools.collect", "routes", "--town",
                              str(xodr), "--count", "1", "--seed",
                              str(seed + tried), "--min-length", "150", "--max-length", "700",
                              "--out", str(folder / "gen" / str(tried)), "--scenarios", kind],
                             cwd=REPO, capture_output=True, text=True)
        tried += 1
        if gen.returncode != 0:
            continue
        for path in (folder / "gen" / str(tried - 1)).rglob("*.xml"):
            if "towns" not in path.parts:
                target = folder / "routes" / path.parent.name / f"{name}_{made:04d}.xml"
                target.parent.mkdir(parents=True, exist_ok=True)
                path.rename(target)
                made += 1
    runs, wall = drive_town(folder / "routes", xodr.parent, folder / "root", folder / "collect.log")
    for r in runs:
        town = f", {r.load:.1f} s of it the town's load" if r.load else ""
        print(f"  {name} {r.route}: {r.status}, {r.wall:.1f} s ({r.setup:.1f} s set-up{town}), {r.peak_mb:.0f} MB",
              file=sys.stderr, flush=True)
    print(f"  {name}: the worker's collection took {wall:.1f} s (its route checks included)", file=sys.stderr)
    return runs


def summary(name: str, runs: list[Run]) -> str:
    if not runs:
        return f"{name:9s} no routes"
    later = runs[1:]
    finished = sum(r.status in SUCCESS_STATUSES for r in runs)
    statuses = ", ".join(f"{s} {n}" for s, n in sorted(Counter(r.status for r in runs).items()))

    def speed(rs: list[Run], wall: str) -> float:
        walls = sum(getattr(r, wall) for r in rs)
        return sum(r.simulated for r in rs) / walls if rs and walls > 0 else float("nan")

    later_setup = statistics.median(r.setup for r in later) if later else float("nan")
    return (f"{name:9s} {runs[0].setup:7.1f} {later_setup:7.1f} "
            f"{max(r.peak_mb for r in runs):8.0f} {speed(runs, 'wall'):8.1f} {speed(later, 'wall'):8.1f} "
            f"{speed(runs, 'drive_wall'):8.1f} {100.0 * finished / len(runs):6.0f}%  {statuses}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--towns", default=",".join(TOWNS), help="comma-separated town names (default: all twelve)")
    parser.add_argument("--towns-dir", type=Path,
                        default=Path(os.environ.get("DRIVEKIT_CARLA_TOWNS", REPO / ".cache" / "carla-towns")),
                        help="folder of <Town>.xodr (default: $DRIVEKIT_CARLA_TOWNS, else .cache/carla-towns)")
    parser.add_argument("--routes", type=int, default=10, help="routes per town (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the routes")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    names = [t for t in args.towns.split(",") if t]
    missing = [t for t in names if not (args.towns_dir / f"{t}.xodr").is_file()]
    if missing:
        parser.error(f"--towns-dir {args.towns_dir}: no {', '.join(missing)} (make towns extracts all twelve)")
    work = Path(tempfile.mkdtemp(prefix="bench-towns-"))
    rows = []
    try:
        for name in names:
            rows.append(summary(name, town_rows(name, args.towns_dir / f"{name}.xodr", work, args.routes, args.seed)))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'town':9s} {'setup1 s':>7s} {'later s':>7s} {'peak MB':>8s} {'x real':>8s} {'x later':>8s} "
          f"{'x drive':>8s} {'finish':>7s}  statuses")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
