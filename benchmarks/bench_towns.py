"""Every CARLA town, in the embedded world: set-up, memory, world speed and the expert's finish rate per town.

For each town (OpenDRIVE from `make towns`, .cache/carla-towns/ or --towns-dir) it writes --routes routes of 150 to
700 m with one scenario each (tools.collect.routes, the leaderboard's placeable types), then drives them one after
the other, each as its own `python -m tools.collect run` (the unit a worker or a SLURM task runs), with the default
rig, recording frames. Per town it prints:

  - set-up seconds of the first route run (the town's derived files made: SUMO network, lane graph, scene, unless an
    earlier run left them in the user cache) and the median of the later ones: a route run's wall time until its
    first tick (the child's wall time less its drive loop's, as its log says);
  - the peak resident memory of any route run (the child's own ru_maxrss);
  - simulated seconds per wall second, with set-up (the child's whole wall time) and of the drive loop alone;
  - the expert's finish rate (Perfect or Completed) and the statuses.

    .venv/bin/python benchmarks/bench_towns.py                          # all twelve towns, 10 routes each
    .venv/bin/python benchmarks/bench_towns.py --towns Town03,Town13 --routes 2

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

from tools.collect.scenario_types import PLACEABLE  # noqa: E402
from tools.dataset.layout import Layout  # noqa: E402
from tools.dataset.results import SUCCESS_STATUSES, read_status  # noqa: E402

TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05", "Town06", "Town07", "Town10HD", "Town11", "Town12",
         "Town13", "Town15")
#: "<key>: <status>, N frames, P% of L m in S s simulated (W s wall, T s of it set-up)" (tools.collect.sim.drive's
#: closing line).
DRIVE_LINE = re.compile(r", \d+ frames, .* in (?P<sim>[\d.]+) s simulated "
                        r"\((?P<wall>[\d.]+) s wall, (?P<setup>[\d.]+) s of it set-up\)")


@dataclass
class Run:
    route: Path
    status: str
    wall: float  # the child's whole wall time
    drive_wall: float  # its drive loop's (from its first tick)
    simulated: float
    peak_mb: float

    @property
    def setup(self) -> float:
        return self.wall - self.drive_wall


def drive(route: Path, root: Path, log: Path) -> Run:
    """One route run as a child process; its wall time, peak memory, and what its log and result say."""
    started = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tools.collect", "run", "--route", str(route),
                                 "--root", str(root)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    m = DRIVE_LINE.search(log.read_text(errors="replace"))
    layout = Layout(root)
    keys = list(layout.iter_runs())
    status = (read_status(layout.result_path(keys[0])) if keys else None) or "no result"
    drive_wall = float(m.group("wall")) - float(m.group("setup")) if m else wall
    return Run(route, status, wall, drive_wall, float(m.group("sim")) if m else 0.0, usage.ru_maxrss / 1024.0)


def town_rows(name: str, xodr: Path, work: Path, routes: int, seed: int) -> list[Run]:
    folder = work / name
    (folder / "routes" / "towns").mkdir(parents=True, exist_ok=True)
    shutil.copy(xodr, folder / "routes" / "towns" / f"{name}.xodr")
    # One route of each placeable type in turn (a type that has no place in this town is skipped), until `routes`.
    made, tried = 0, 0
    while made < routes and tried < len(PLACEABLE) + routes:
        kind = PLACEABLE[tried % len(PLACEABLE)]
        gen = subprocess.run([sys.executable, "-m", "tools.collect", "routes", "--town",
                              str(folder / "routes" / "towns" / f"{name}.xodr"), "--count", "1", "--seed",
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
    files = sorted(p for p in (folder / "routes").rglob("*.xml") if "towns" not in p.parts)
    runs = []
    for i, route in enumerate(files):
        runs.append(drive(route, folder / f"root-{i}", folder / f"run-{i}.log"))
        r = runs[-1]
        print(f"  {name} {route.parent.name}/{route.name}: {r.status}, {r.wall:.1f} s ({r.setup:.1f} s set-up), "
              f"{r.peak_mb:.0f} MB", file=sys.stderr, flush=True)
    return runs


def summary(name: str, runs: list[Run]) -> str:
    if not runs:
        return f"{name:9s} no routes"
    later = [r.setup for r in runs[1:]]
    finished = sum(r.status in SUCCESS_STATUSES for r in runs)
    sim = sum(r.simulated for r in runs)
    statuses = ", ".join(f"{s} {n}" for s, n in sorted(Counter(r.status for r in runs).items()))
    return (f"{name:9s} {runs[0].setup:7.1f} {statistics.median(later) if later else float('nan'):7.1f} "
            f"{max(r.peak_mb for r in runs):8.0f} {sim / sum(r.wall for r in runs):8.1f} "
            f"{sim / sum(r.drive_wall for r in runs):8.1f} {100.0 * finished / len(runs):6.0f}%  {statuses}")


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
    print(f"{'town':9s} {'setup1 s':>7s} {'later s':>7s} {'peak MB':>8s} {'x real':>8s} {'x drive':>8s} {'finish':>7s}"
          "  statuses")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
