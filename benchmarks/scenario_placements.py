"""What the embedded world places against what scenario_runner's classes place, per scenario type: the table of
docs/scenarios.md ("Placements").

Reads the placements the real classes made for the recorded route blocks (tests/data/scenario_placements: the
route files and VERSION.json, recorded from a scenario_runner checkout; that folder's README.md says how), starts
the same blocks in the embedded world's scenarios against a recording stand-in world
(tools.collect.sim.placements.placements) and prints, per type, how far each of our actors and flows lies from
its counterpart of the same kind (nearest first; flows by source and sink): blocks, blocks skipped (the class or
ours could not build it), matched actors and flows, max and mean metres, max and mean degrees, and those that
have no counterpart on either side.

    .venv/bin/python benchmarks/scenario_placements.py
    .venv/bin/python benchmarks/scenario_placements.py --version v0.9.15 --towns .cache/carla-towns

About 10 s on this machine, most of it loading Town12 and Town13.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tools.collect.sim.placements import compare, differences, differences_markdown, recorded_pairs

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / "tests" / "data" / "scenario_placements")
    ap.add_argument("--towns", type=Path, default=REPO / ".cache" / "carla-towns",
                    help="folder of CARLA's towns as OpenDRIVE (make towns)")
    ap.add_argument("--version", default="v0.9.16", help="the scenario_runner tag recorded (VERSION.json)")
    ap.add_argument("--verbose", action="store_true", help="also every actor and flow beyond 1 m or 10 degrees")
    args = ap.parse_args()
    for need, what in ((args.data / f"{args.version}.json", "recorded placements"),
                       (args.towns / "Town03.xodr", "CARLA towns (make towns)")):
        if not need.exists():
            raise SystemExit(f"no {what}: {need} is missing")
    started = time.perf_counter()
    pairs = list(recorded_pairs(args.data, args.towns, args.version))
    if args.verbose:
        for ours, real in pairs:
            if real.get("error") or ours["state"] != "running":
                continue
            for m in compare(ours, real):
                if not m.within:
                    far = "-" if m.distance is None else f"{m.distance:.2f}"
                    turned = "-" if m.heading is None else f"{m.heading:.1f}"
                    print(f"{real['town']:<9} {real['name']:<34} {m.kind:<16} {far} m {turned} deg")
    print(differences_markdown(differences(pairs)), end="")
    print(f"\n{len(pairs)} blocks in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
