"""How the expert copes with each leaderboard 2.0 scenario type the embedded world runs: finished route runs and
infractions per type, on generated towns and on CARLA's real towns.

Builds the towns as bench_expert does (the SUMO grid towns Grid4x4 and Grid3x3, CARLA's Town01 to Town07 and
Town10HD from the py123d wheel), then, for every town and every type of --types (default: every type the route
generator can place, tools.collect.base.scenario_types.PLACEABLE), writes --routes-per-type routes of 150-350 m with
that one scenario (tools.collect.base.route_gen.generate_routes(..., scenarios=TYPE), one call per town and type). A
type that has no place in a town is recorded as "no site" there, not an error: TwoWays types and InvadingTurn
need an oncoming lane beside the ego's (none in the grid towns and Town06), the other obstacles a second lane
of the ego's direction (none in Grid3x3, Town01, Town02, Town07), junction types a junction of their kind
(Grid3x3 has no traffic lights; Town01 and Town02 no junction without). Every route is then driven once by
the expert, without frames:

    python -m tools.collect collect ROUTES --root ROOT --workers N --max-attempts 1 --record=False

It prints one table, a row per type in the catalogue's order with its handling (executed, approximated), and
per town group: runs, finished (Perfect or Completed) in percent, crashed runs, infractions counted
(collisions with vehicles, pedestrians, the layout; red lights; blocked; route timeouts; deviations; other:
stop signs, outside lanes, min speed, scenario timeouts, emergency vehicles) and the towns without a site;
then a verdict per type: the expert finishes at least 85% of its runs (both groups together), or the failed
runs (run, status, first infraction); and the wall time. --out DIR keeps everything in DIR and writes the
table as DIR/summary.json.

    .venv/bin/python benchmarks/bench_scenarios.py
    .venv/bin/python benchmarks/bench_scenarios.py --towns Grid4x4,Town03 --types Accident,DynamicObjectCrossing \\
        --routes-per-type 1 --out /tmp/bench-scenarios

A route run takes 1 to 30 s of wall time. On 2 cores with --workers 2 the small run above (4 runs) takes
about 25 s, the full run (10 towns, 22 types, 2 routes each: 354 runs once the towns without a site are left
out) about 13 minutes. A run whose scenario found no place on its route when driven (the run's log says why,
its result's meta.scenarios says "failed") is counted apart (skp), not as a run of the type.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_expert import GENERATED, GROUPS, Run, build_towns, commit_of, drive, parse_towns, read_runs  # noqa: E402

from tools.collect.base.route_gen import generate_routes  # noqa: E402
from tools.collect.base.routes import RouteError, read_routes  # noqa: E402
from tools.collect.base.scenario_types import CATALOGUE, PLACEABLE  # noqa: E402
from tools.collect.base.town import CARLA_TOWNS  # noqa: E402
from tools.dataset.layout import RunKey  # noqa: E402
from tools.dataset.results import INFRACTION_KEYS  # noqa: E402

#: The goal: share of a type's runs the expert finishes (Perfect or Completed).
GOAL = 0.85
#: Infractions counted, as printed: column -> the result file's infraction keys.
KINDS = {
    "veh": ("collisions_vehicle",),
    "ped": ("collisions_pedestrian",),
    "lay": ("collisions_layout",),
    "red": ("red_light",),
    "blk": ("vehicle_blocked",),
    "tmo": ("route_timeout",),
    "dev": ("route_dev",),
}
KINDS["oth"] = tuple(k for k in INFRACTION_KEYS if not any(k in keys for keys in KINDS.values()))
#: The names of the columns in summary.json.
KIND_NAMES = {"veh": "collisions_vehicle", "ped": "collisions_pedestrian", "lay": "collisions_layout",
              "red": "red_light", "blk": "blocked", "tmo": "route_timeouts", "dev": "deviations", "oth": "other"}


def group_of(town: str) -> str:
    return "generated" if town in GENERATED else "real"


def route_seed(seed: int, town: str, name: str) -> int:
    """The generator's seed for a town and type: the same whatever else --towns and --types select."""
    return seed + int(hashlib.sha1(f"{town}/{name}".encode()).hexdigest()[:8], 16)


def make_routes(folder: Path, xodrs: list[tuple[str, Path]], types: list[str], count: int, seed: int,
                min_length: float, max_length: float) -> tuple[dict[Path, tuple], dict[tuple, dict]]:
    """Route files for every town and type under folder/<group>/<Type>/<town>_NNNN.xml, beside the group's
    towns/ folder (so the town is not copied and its cached SUMO network is reused). A type's files have their
    own folder, so one call per type and town names no file twice. Returns route file -> (group, town), and
    (town, type) -> {"sites": routes written, "why": the generator's reason when it found fewer than asked}."""
    files: dict[Path, tuple] = {}
    sites: dict[tuple, dict] = {}
    for group, xodr in xodrs:
        town = xodr.stem
        for name in types:
            why = ""
            with contextlib.redirect_stdout(sys.stderr):
                try:
                    written = generate_routes(town=str(xodr), count=count, out=str(folder / group),
                                              seed=route_seed(seed, town, name), min_length=min_length,
                                              max_length=max_length, scenarios=name)
                except RouteError as e:  # no (or too few) places for the type: keep what it wrote before
                    why = str(e)
                    written = sorted((folder / group / name).glob(f"{town}_*.xml"))
            files.update({p: (group, town) for p in written})
            sites[town, name] = {"sites": len(written), "why": why}
            print(f"bench_scenarios: {town} {name}: {len(written)} of {count} routes"
                  + (f" ({why})" if why else ""), file=sys.stderr)
    return files, sites


def tree_state() -> str:
    """A fingerprint of this checkout's code as it is on disk (HEAD, changes, untracked files of tools/): it tells
    whether the code changed while the routes were driven, which the commit alone does not once the tree has
    changes."""
    def git(*argv: str) -> bytes:
        return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True).stdout

    digest = hashlib.sha1(git("rev-parse", "HEAD") + git("diff", "HEAD", "--", "tools"))
    for name in sorted(git("ls-files", "-o", "--exclude-standard", "--", "tools").decode().split()):
        with contextlib.suppress(OSError):
            digest.update(name.encode() + (REPO / name).read_bytes())
    return digest.hexdigest()


def run_key(run: Run) -> str:
    route = read_routes(run.route_file)[0]
    return str(RunKey.for_route(route.scenario, run.route_file.stem, route.id, 0))


def counts(runs: list[Run]) -> dict[str, int]:
    return {col: sum(len(r.infractions.get(k, [])) for r in runs for k in keys) for col, keys in KINDS.items()}


def ran(run: Run) -> bool:
    """Whether the run's scenario ran (started, whatever came of the drive); a crashed run counts as run."""
    return run.crashed or any(state in ("running", "done") for state in run.scenarios.values())


def cell(runs: list[Run], no_site: list[str], skipped: int = 0) -> dict:
    """One type's figures in one town group: `runs` those whose scenario ran; `skipped` finished runs whose
    scenario found no place at run time (not counted in runs)."""
    n = len(runs)
    finished = sum(r.finished for r in runs)
    return {"runs": n, "finished": finished, "finished_pct": round(100.0 * finished / n, 1) if n else None,
            "crashed": sum(r.crashed for r in runs),
            "infractions": {KIND_NAMES[c]: v for c, v in counts(runs).items()}, "skipped": skipped,
            "no_site": no_site}


def fmt_cell(c: dict) -> str:
    pct = "-" if c["finished_pct"] is None else f"{c['finished_pct']:.0f}"
    values = [c["infractions"][KIND_NAMES[k]] for k in KINDS]
    return (f"{c['runs']:>4} {pct:>4} {c['crashed']:>3} " + " ".join(f"{v:>3}" for v in values)
            + f" {c['skipped']:>3} {len(c['no_site']):>4}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--towns", default=",".join([*GENERATED, *CARLA_TOWNS]),
                        help=f"comma-separated towns: {', '.join(GENERATED)} (generated), {', '.join(CARLA_TOWNS)} "
                             "(real); default: all of them")
    parser.add_argument("--types", default=",".join(PLACEABLE),
                        help="comma-separated scenario types (default: every placeable type)")
    parser.add_argument("--routes-per-type", type=int, default=2, help="routes per town and type (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated towns and of the routes")
    parser.add_argument("--workers", type=int, default=2, help="route runs driven at once (default 2)")
    parser.add_argument("--min-length", type=float, default=150.0, help="shortest route, metres (default 150)")
    parser.add_argument("--max-length", type=float, default=350.0, help="longest route, metres (default 350)")
    parser.add_argument("--wheel", type=Path, default=None,
                        help="the py123d wheel holding CARLA's towns (default: pip download py123d==0.7.0)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (towns, routes, root)")
    parser.add_argument("--out", type=Path, default=None,
                        help="work in this new (or empty) folder instead of a temporary one, keep it, and write "
                             "the table to OUT/summary.json")
    args = parser.parse_args()
    towns = parse_towns(parser, args.towns)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for name in types:
        if name not in PLACEABLE:
            why = (f"{CATALOGUE[name].handling}: {CATALOGUE[name].why}" if name in CATALOGUE
                   else "not a leaderboard 2.0 type")
            parser.error(f"--types {name}: the embedded world cannot place it ({why}); choose from "
                         f"{', '.join(PLACEABLE)}")
    if not types:
        parser.error("--types: none given")
    types = [t for t in CATALOGUE if t in types]  # the catalogue's order, each once
    if args.routes_per_type < 1 or args.workers < 1:
        parser.error("--routes-per-type and --workers must be at least 1")
    if not 20.0 <= args.min_length <= args.max_length:
        parser.error("--min-length and --max-length: need 20 <= min <= max")
    if args.wheel is not None and not args.wheel.is_file():
        parser.error(f"--wheel {args.wheel}: no such file")
    if args.out is not None and args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"--out {args.out}: exists and is not an empty folder")
    commit, state = commit_of(REPO), tree_state()  # taken now: the tree may change while the routes are driven

    t_start = time.perf_counter()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        work = args.out.resolve()
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-scenarios-"))
    keep = args.keep or args.out is not None
    wall = 0.0
    try:
        xodrs = build_towns(work / "routes", towns, args.seed, args.wheel)
        files, sites = make_routes(work / "routes", xodrs, types, args.routes_per_type, args.seed,
                                   args.min_length, args.max_length)
        runs: list[Run] = []
        if files:
            print(f"bench_scenarios: expert: {len(files)} routes", file=sys.stderr)
            wall = drive(REPO, work / "routes", work / "expert", args.workers, ["--record=False"])
            runs = read_runs(work / "expert", files)
        keys = {r.route_file: run_key(r) for r in runs}
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)

    summary: dict = {"commit": commit, "towns": {g: [t for t in towns if group_of(t) == g] for g in GROUPS},
                     "routes_per_type": args.routes_per_type, "seed": args.seed, "workers": args.workers,
                     "length_m": [args.min_length, args.max_length], "goal_finished_pct": 100.0 * GOAL,
                     "types": []}
    for name in types:
        every = [r for r in runs if r.route_file.parent.name == name]
        mine = [r for r in every if ran(r)]
        skipped = [r for r in every if not ran(r)]
        entry: dict = {"type": name, "handling": CATALOGUE[name].handling, "groups": {}}
        for group in GROUPS:
            names = summary["towns"][group]
            if names:
                no_site = [t for t in names if sites[t, name]["sites"] == 0]
                entry["groups"][group] = cell([r for r in mine if r.group == group], no_site,
                                              sum(r.group == group for r in skipped))
        finished = sum(r.finished for r in mine)
        entry["runs"], entry["finished"] = len(mine), finished
        entry["finished_pct"] = round(100.0 * finished / len(mine), 1) if mine else None
        entry["verdict"] = "not measured" if not mine else "PASS" if finished >= GOAL * len(mine) else "FAIL"
        entry["failed"] = [{"run": keys[r.route_file], "town": r.town, "status": r.status or "no result",
                            "completion_pct": round(r.completion, 1), "first_infraction": r.why}
                           for r in mine if not r.finished]
        entry["skipped"] = [{"run": keys[r.route_file], "town": r.town, "scenarios": r.scenarios} for r in skipped]
        entry["sites"] = {t: sites[t, name]["sites"] for t in towns}
        entry["no_site"] = {t: sites[t, name]["why"] for t in towns if sites[t, name]["sites"] == 0}
        summary["types"].append(entry)
    summary["drive_wall_s"] = round(wall, 1)
    summary["wall_s"] = round(time.perf_counter() - t_start, 1)

    print(f"the expert on leaderboard 2.0 scenario types: {len(files)} routes ({args.routes_per_type} per town and "
          f"type, {args.min_length:.0f}-{args.max_length:.0f} m, seed {args.seed}), one run each, {args.workers} "
          f"workers; {REPO} ({commit})")
    if tree_state() != state:
        print(f"  warning: tools/ changed on disk while the expert drove (now {commit_of(REPO)}): runs may mix "
              "versions of the code")
    groups = [g for g in GROUPS if summary["towns"][g]]
    for g in groups:
        print(f"  {g} towns: {', '.join(summary['towns'][g])}")
    print("  per group: runs, finished %, crashed runs, infractions counted (collisions: veh vehicle, ped "
          "pedestrian, lay layout; red light; blk blocked; tmo route timeout; dev deviation; oth other), skp runs "
          "whose scenario found no place when driven (not in runs), towns without a site")
    width = len(fmt_cell(cell([], [])))
    print(f"\n{'':<31} {'':<12} " + " | ".join(f"{g + ' towns':^{width}}" for g in groups))
    sub = f"{'runs':>4} {'fin%':>4} {'crs':>3} " + " ".join(f"{k:>3}" for k in KINDS) + f" {'skp':>3} {'nosite':>4}"
    print(f"{'type':<31} {'handling':<12} " + " | ".join(sub for _ in groups))
    for entry in summary["types"]:
        print(f"{entry['type']:<31} {entry['handling']:<12} "
              + " | ".join(fmt_cell(entry["groups"][g]) for g in groups))
    no_site = [e for e in summary["types"] if e["no_site"]]
    if no_site:
        print()
    for entry in no_site:
        print(f"no site: {entry['type']}: {', '.join(entry['no_site'])}")
    for entry in summary["types"]:
        for r in entry["skipped"]:
            print(f"not run when driven: {r['run']}: {r['scenarios']} (the run's log says why)")
    for entry in summary["types"]:
        few = [f"{t} ({n} of {args.routes_per_type})" for t, n in entry["sites"].items()
               if 0 < n < args.routes_per_type]
        if few:
            print(f"fewer sites than routes asked: {entry['type']}: {', '.join(few)}")
    if keep:
        print(f"\nkept {work}: routes/, expert/ (the collect root); redo a run with frames: .venv/bin/python -m "
              f"tools.collect run --route {work}/routes/<group>/<Type>/<file>.xml --root {work}/frames")

    print()
    for entry in summary["types"]:
        name = entry["type"]
        if entry["verdict"] == "not measured":
            print(f"verdict: {name}: not measured (no site in {', '.join(towns)})")
            continue
        print(f"verdict: {name}: finished {entry['finished']} of {entry['runs']} runs ({entry['finished_pct']:.0f}%), "
              f"goal >= {GOAL:.0%}: {entry['verdict']}")
        for f in entry["failed"]:
            print(f"    {f['run']}  {f['status']}  {f['completion_pct']:.0f}%  {f['first_infraction']}")
    if args.out is not None:
        (work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"\nwrote {work / 'summary.json'}")
    print(f"\ntook {summary['wall_s']:.0f} s ({summary['drive_wall_s']:.0f} s driving)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
