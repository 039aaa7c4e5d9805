"""How well the expert drives, against SUMO's driver: finished route runs, route completion, infractions per km.

Builds its towns in a temporary folder: two grid towns made with SUMO (Grid4x4: 4x4 junctions, 2 lanes per
direction; Grid3x3: 3x3, 1 lane) and CARLA's real towns (OpenDRIVE taken from the py123d wheel, Town01 to
Town07 and Town10HD), writes --routes-per-town routes for each with our generator (tools.collect.base.route_gen), and
drives every route once with the expert (tools/expert), without frames, so that only the driving is measured:

    python -m tools.collect collect ROUTES --root ROOT --workers N --max-attempts 1 --record=False

With --baseline-tree it drives the very same route files with SUMO's own driver as well: the `collect` of a
checkout that still has it (8fe4aa1, the commit before the expert), run with that tree's code (cwd and
PYTHONPATH set to it; checked, since the virtual environment installs this checkout in editable mode). That
tree has no --record=False: it runs with --record_every=1000 (a frame every 50 simulated seconds), which
leaves SUMO's driving as it is (rendering reads the world, never changes it) and saves most of the time.

It prints, per town group and driver: runs, finished (Perfect or Completed) in percent, runs by status,
mean route completion, km driven (the leaderboard's: route length times completion), infractions per km
(collisions, red lights, blocked, deviations, timeouts) and simulated seconds per wall second of one run;
finished runs per town; every failed run with its status and first infraction; and a verdict per goal:

  - generated towns: the expert finishes at least 95% of the runs;
  - real towns: the expert finishes at least 90% of the runs, and no fewer than SUMO's driver.

Each driver is judged by its own tree's referee: the expert's collisions and red lights from geometry (the
ego's box against the others', its front crossing a red stop line), SUMO's driver's from SUMO (collision
detection, the next signal before and after a step) plus a SUMO teleport of the ego counted as blocked.

    git worktree add /tmp/base 8fe4aa1      # once: a checkout with SUMO's driver (run with this .venv's python)
    .venv/bin/python benchmarks/bench_expert.py --baseline-tree /tmp/base
    .venv/bin/python benchmarks/bench_expert.py --routes-per-town 2 --towns Grid3x3,Town01 --keep

The full run (10 towns, 10 routes each, both drivers, --workers 2) takes about 7 minutes on 2 idle cores
(16 on 2 cores shared with other work).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.collect.base.route_gen import generate_routes  # noqa: E402
from tools.collect.base.routes import read_routes  # noqa: E402
from tools.collect.base.town import CARLA_TOWNS, carla_towns, make_town  # noqa: E402
from tools.dataset.layout import Layout, RunKey  # noqa: E402
from tools.dataset.results import CRASH_STATUSES, SUCCESS_STATUSES  # noqa: E402

#: The generated towns: name -> (grid, lanes per direction).
GENERATED = {"Grid4x4": ("4x4", 2), "Grid3x3": ("3x3", 1)}
GROUPS = ("generated", "real")
#: The goals of the issue: finished share of the expert's runs per town group.
GOAL = {"generated": 0.95, "real": 0.90}
#: Infractions per km, as printed: column -> the result file's infraction keys.
KINDS = {
    "collisions": ("collisions_vehicle", "collisions_pedestrian", "collisions_layout"),
    "red lights": ("red_light",),
    "blocked": ("vehicle_blocked",),
    "deviations": ("route_dev",),
    "timeouts": ("route_timeout",),
}
#: SUMO's driver runs in a tree that records frames: one every this many ticks (50 simulated s at 20 Hz).
BASELINE_RECORD_EVERY = 1000


@dataclass
class Run:
    """One route run as read from its result file (status None: no result file)."""

    group: str
    town: str
    route_file: Path
    status: str | None = None
    completion: float = 0.0  # percent
    length: float = 0.0  # metres
    sim_s: float = 0.0
    wall_s: float = 0.0
    infractions: dict[str, list[str]] = field(default_factory=dict)
    log_tail: str = ""  # the last line of the run's attempt log (why a crashed run crashed)
    scenarios: dict[str, str] = field(default_factory=dict)  # what became of its scenario blocks (meta.scenarios)

    @property
    def finished(self) -> bool:
        return self.status in SUCCESS_STATUSES

    @property
    def crashed(self) -> bool:
        return self.status is None or self.status in CRASH_STATUSES

    @property
    def why(self) -> str:
        """The first infraction; for a crashed run the last line of its log."""
        found = [m for items in self.infractions.values() for m in items]
        return found[0] if found else (self.log_tail or "-")


def build_towns(folder: Path, towns: list[str], seed: int, wheel: Path | None) -> list[tuple[str, Path]]:
    """The towns as OpenDRIVE files in folder/<group>/towns/ (where collect finds them): (group, xodr) each."""
    generated = [t for t in towns if t in GENERATED]
    real = [t for t in towns if t not in GENERATED]
    xodrs: list[tuple[str, Path]] = []
    for name in generated:
        grid, lanes = GENERATED[name]
        xodrs.append(("generated", make_town(folder / "generated" / "towns" / f"{name}.xodr", grid=grid, seed=seed,
                                             lanes=lanes)))
    if real:  # extracted straight into the folder collect reads, so the SUMO network cached beside is reused
        xodrs += [("real", p) for p in carla_towns(folder / "real" / "towns", tuple(real), wheel)]
    return xodrs


def build_routes(folder: Path, towns: list[str], count: int, seed: int, wheel: Path | None) -> dict[Path, tuple]:
    """Towns and route files under folder/<group>/ (each group's towns in its towns/ folder, where collect finds
    them). Returns route file -> (group, town)."""
    files: dict[Path, tuple] = {}
    for i, (group, xodr) in enumerate(build_towns(folder, towns, seed, wheel)):
        with contextlib.redirect_stdout(sys.stderr):
            written = generate_routes(town=str(xodr), count=count, out=str(folder / group), seed=seed + i)
        files.update({p: (group, xodr.stem) for p in written})
    return files


def check_baseline(tree: Path) -> str:
    """The baseline tree's commit (or "not a git checkout"); an error unless its `tools` is its own and its ego is
    SUMO's."""
    if not (tree / "tools" / "collect" / "__main__.py").is_file():
        sys.exit(f"bench_expert: --baseline-tree {tree}: not a drivekit checkout (no tools/collect/__main__.py)")
    if (tree / "tools" / "expert").exists():
        sys.exit(f"bench_expert: --baseline-tree {tree}: has tools/expert, so SUMO does not drive its ego; check out "
                 "8fe4aa1 (git worktree add /tmp/base 8fe4aa1)")
    probe = subprocess.run([sys.executable, "-c", "import tools; print(tools.__file__)"], cwd=tree, env=child_env(tree),
                           capture_output=True, text=True)
    imported = Path(probe.stdout.strip() or "?").resolve()
    if probe.returncode != 0 or tree.resolve() not in imported.parents:
        sys.exit(f"bench_expert: --baseline-tree {tree}: its python imports tools from {imported}, not from the tree "
                 f"({probe.stderr.strip()[-300:]})")
    return commit_of(tree)


def commit_of(tree: Path) -> str:
    """The short hash of a checkout's HEAD, with "+ changes" when its tracked files differ from it."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "not a git checkout"
    dirty = subprocess.run(["git", "-C", str(tree), "diff", "--quiet", "HEAD", "--"], capture_output=True).returncode
    return f"commit {head.stdout.strip()}" + (" + changes" if dirty else "")


def child_env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def drive(tree: Path, routes: Path, root: Path, workers: int, settings: list[str]) -> float:
    """Drive every route under `routes` once with `tree`'s collect into `root`; the wall seconds it took."""
    argv = [sys.executable, "-m", "tools.collect", "collect", str(routes), "--root", str(root), "--workers",
            str(workers), "--max-attempts", "1", *settings]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=tree, env=child_env(tree), stdout=sys.stderr)
    if proc.returncode != 0:
        sys.exit(f"bench_expert: {' '.join(argv)} (in {tree}) exited with {proc.returncode}")
    return time.perf_counter() - t0


def read_runs(root: Path, files: dict[Path, tuple]) -> list[Run]:
    """Every planned run of a collect root; a run without a result file counts as crashed."""
    layout = Layout(root)
    runs = []
    for path, (group, town) in sorted(files.items()):
        route = read_routes(path)[0]
        key = RunKey.for_route(route.scenario, path.stem, route.id, 0)
        run = Run(group, town, path)
        result = layout.result_path(key)
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            record = json.loads(result.read_text())["_checkpoint"]["records"][0]
            meta = record["meta"]
            run.status, run.completion, run.infractions = record["status"], record["scores"]["score_route"], \
                record["infractions"]
            run.length, run.sim_s, run.wall_s = meta["route_length"], meta["duration_game"], meta["duration_system"]
            run.scenarios = meta.get("scenarios", {})
        logs = layout.attempt_logs(key)
        if run.crashed and logs:
            lines = [line.strip() for line in logs[-1].read_text(errors="replace").splitlines() if line.strip()]
            run.log_tail = lines[-1][:160] if lines else ""
        runs.append(run)
    return runs


def row(driver: str, runs: list[Run]) -> str:
    n = len(runs)
    statuses = Counter(r.status for r in runs)
    failed = sum(1 for r in runs if not r.finished and not r.crashed)
    crashed = sum(1 for r in runs if r.crashed)
    km = max(sum(r.length / 1000.0 * r.completion / 100.0 for r in runs), 0.001)
    per_km = [sum(len(r.infractions.get(k, [])) for r in runs for k in keys) / km for keys in KINDS.values()]
    wall = sum(r.wall_s for r in runs)
    speed = sum(r.sim_s for r in runs) / wall if wall else 0.0
    finished = sum(r.finished for r in runs)
    return (f"  {driver:<6} {n:>4} {100.0 * finished / max(n, 1):>8.1f}% {statuses['Perfect']:>7} "
            f"{statuses['Completed']:>9} {failed:>6} {crashed:>7} {sum(r.completion for r in runs) / max(n, 1):>7.1f}"
            f" {km:>6.2f} " + " ".join(f"{v:>{max(len(k), 6)}.3f}" for k, v in zip(KINDS, per_km, strict=True))
            + f" {speed:>8.1f}")


def share(runs: list[Run]) -> float:
    return sum(r.finished for r in runs) / max(len(runs), 1)


def parse_towns(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """--towns as a list of known town names (a usage error names the unknown ones)."""
    towns = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in towns if t not in GENERATED and t not in CARLA_TOWNS]
    if unknown or not towns:
        parser.error(f"--towns {text}: unknown {', '.join(unknown) or 'none given'}; "
                     f"choose from {', '.join([*GENERATED, *CARLA_TOWNS])}")
    return towns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes-per-town", type=int, default=10, help="routes generated per town (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="route runs driven at once (default 2)")
    parser.add_argument("--towns", default=",".join([*GENERATED, *CARLA_TOWNS]),
                        help=f"comma-separated towns: {', '.join(GENERATED)} (generated), {', '.join(CARLA_TOWNS)} "
                             "(real); default: all of them")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated towns and of the routes")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="a checkout with SUMO's driver (8fe4aa1) whose collect drives the same routes")
    parser.add_argument("--wheel", type=Path, default=None,
                        help="the py123d wheel holding CARLA's towns (default: pip download py123d==0.7.0)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (towns, routes, roots)")
    args = parser.parse_args()
    towns = parse_towns(parser, args.towns)
    if args.routes_per_town < 1 or args.workers < 1:
        parser.error("--routes-per-town and --workers must be at least 1")
    if args.wheel is not None and not args.wheel.is_file():
        parser.error(f"--wheel {args.wheel}: no such file")
    baseline = args.baseline_tree.resolve() if args.baseline_tree else None
    commits = {"expert": commit_of(REPO)}  # taken now: the tree may change while the routes are driven
    if baseline:
        commits["SUMO"] = check_baseline(baseline)

    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench-expert-"))
    try:
        files = build_routes(tmp / "routes", towns, args.routes_per_town, args.seed, args.wheel)
        drivers = {"expert": (REPO, ["--record=False"])}
        if baseline:
            drivers["SUMO"] = (baseline, [f"--record_every={BASELINE_RECORD_EVERY}"])
        runs, walls = {}, {}
        for driver, (tree, settings) in drivers.items():
            print(f"bench_expert: {driver}: {len(files)} routes ({tree})", file=sys.stderr)
            walls[driver] = drive(tree, tmp / "routes", tmp / driver, args.workers, settings)
            runs[driver] = read_runs(tmp / driver, files)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    title = " vs ".join("SUMO's driver" if d == "SUMO" else d for d in runs)
    print(f"{title}: {len(files)} routes ({args.routes_per_town} per town, seed {args.seed}), one run each, "
          f"{args.workers} workers")
    for driver, wall in walls.items():
        print(f"  {driver}: {wall:.0f} s wall, {drivers[driver][0]} ({commits[driver]})")
    if commit_of(REPO) != commits["expert"]:
        print(f"  warning: this tree changed while the expert drove (now {commit_of(REPO)}): runs may mix versions")
    header = (f"  {'driver':<6} {'runs':>4} {'finished':>9} {'Perfect':>7} {'Completed':>9} {'Failed':>6} "
              f"{'Crashed':>7} {'RC %':>7} {'km':>6} " + " ".join(f"{k:>6}" for k in KINDS) + f" {'sim/wall':>8}")
    for group in GROUPS:
        names = [t for t in towns if (t in GENERATED) == (group == "generated")]
        if not names:
            continue
        print(f"\n{group} towns ({', '.join(names)}); infractions per km driven")
        print(header)
        for driver, found in runs.items():
            print(row(driver, [r for r in found if r.group == group]))
    print("\nfinished runs per town")
    print(f"  {'town':<9} {'routes':>6} " + " ".join(f"{d:>6}" for d in runs))
    for t in towns:
        n = sum(1 for _, name in files.values() if name == t)
        print(f"  {t:<9} {n:>6} " + " ".join(f"{sum(r.finished for r in found if r.town == t):>6}"
                                            for found in runs.values()))
    for driver, found in runs.items():
        failed = [r for r in found if not r.finished]
        if failed:
            print(f"\n{driver}: {len(failed)} failed runs (town, route file, status, completion, first infraction)")
        for r in failed:
            rel = r.route_file.relative_to(tmp / "routes")
            print(f"  {r.town:<8} {rel}  {r.status or 'no result'}  {r.completion:.0f}%  {r.why}")
    if args.keep:
        print(f"\nkept {tmp}: routes/, expert/ and SUMO/ roots; redo a run with frames: .venv/bin/python -m "
              f"tools.collect run --route {tmp}/routes/<group>/<Scenario>/<file>.xml --root {tmp}/frames")

    print()
    expert = runs["expert"]
    for group in GROUPS:
        mine = [r for r in expert if r.group == group]
        if mine:
            ok = share(mine) >= GOAL[group]
            print(f"verdict: {group} towns: the expert finished {share(mine):.1%} of {len(mine)} runs, goal "
                  f">= {GOAL[group]:.0%}: {'PASS' if ok else 'FAIL'}")
    real = [r for r in expert if r.group == "real"]
    if real and "SUMO" in runs:
        sumo = [r for r in runs["SUMO"] if r.group == "real"]
        ok = share(real) >= share(sumo)
        print(f"verdict: real towns: the expert finished {share(real):.1%}, SUMO's driver {share(sumo):.1%} of the "
              f"same routes, goal expert >= SUMO: {'PASS' if ok else 'FAIL'}")
    elif real:
        print("verdict: real towns, expert >= SUMO: not measured; give --baseline-tree PATH, a checkout with SUMO's "
              "driver (git worktree add /tmp/base 8fe4aa1)")
    print(f"\ntook {time.perf_counter() - t_start:.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
