"""The policy agent's oracle (issue 31): our policy's leaderboard agent file, driven by `bin/evaluate --agent-file`,
against `bin/evaluate --checkpoint` on the same routes: the records (status, DS, RC, the count of each infraction)
route by route, with the leaderboard's sensor noise off (the same sensor data reach the model both ways, but the
LiDAR: docs/leaderboard-agent.md) and, with --noise, on as well.

    .venv/bin/python benchmarks/policy_agent_oracle.py --checkpoint demo/outputs/posttrain \
        --routes demo/eval-routes/town --out /tmp/oracle [--noise] [--workers 2]

Prints one row per route and the count of routes whose records agree; exit status 0 however many differ (a
measurement, not a test: tests/evaluate/test_policy_agent.py holds the asserted part).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "tools" / "evaluate" / "leaderboard" / "agent_file" / "policy_agent.py"
sys.path[:0] = [str(REPO)]


def outcome(record: dict) -> str:
    """A route's record as compared: status, DS, RC and the count of each infraction."""
    counts = {k: len(v) for k, v in record["infractions"].items() if v}
    return (f"{record['status']}, DS {record['scores']['score_composed']:.2f}, RC "
            f"{record['scores']['score_route']:.2f}, {counts or 'no infractions'}")


def evaluate(root: Path, routes: Path, workers: int, *args: str) -> tuple[dict[str, dict], float]:
    from tools.dataset.layout import Layout

    t0 = time.perf_counter()
    cmd = [str(REPO / "bin" / "evaluate"), *args, str(routes), "--root", str(root), "--workers", str(workers)]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    records = json.loads(Layout(root).evaluation_result.read_text())["_checkpoint"]["records"]
    return {r["route_id"]: r for r in records}, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a post-training run or step folder")
    ap.add_argument("--routes", required=True, help="a folder of route files (the demo's held-out eval-routes/town)")
    ap.add_argument("--out", required=True, help="a new folder for the evaluation roots")
    ap.add_argument("--noise", action="store_true", help="also the agent file with the leaderboard's sensor noise")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    out, routes = Path(a.out), Path(a.routes)
    runs = {"--checkpoint": ["--checkpoint", a.checkpoint],
            "agent file, noise off": ["--agent-file", str(AGENT), "--agent-config", a.checkpoint,
                                      "--no-sensor-noise"]}
    if a.noise:
        runs["agent file, noise on"] = ["--agent-file", str(AGENT), "--agent-config", a.checkpoint]
    results = {name: evaluate(out / f"root{i}", routes, a.workers, *args)
               for i, (name, args) in enumerate(runs.items())}
    base, _ = results["--checkpoint"]
    for name, (records, seconds) in results.items():
        print(f"{name}: {len(records)} route runs in {seconds:.0f} s")
    for name, (records, _) in results.items():
        if name == "--checkpoint":
            continue
        same = sum(outcome(records[k]) == outcome(base[k]) for k in base)
        print(f"\n{name} against --checkpoint: the same records on {same} of {len(base)} routes")
        for k in sorted(base):
            mark = "same" if outcome(records[k]) == outcome(base[k]) else "DIFFER"
            print(f"  {k:24s} {mark:6s} --checkpoint: {outcome(base[k])}\n  {'':31s} {name}: {outcome(records[k])}")


if __name__ == "__main__":
    main()
