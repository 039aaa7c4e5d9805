"""Scheduler calls and monitor cost of a 9,000-route collection on SLURM, and planning / progress at that scale.

The scheduler here is a RECORDING STAND-IN (no SLURM commands run): it plays a cluster that runs at most
`--throttle` array tasks at once, each task ending by the next poll, and writes each route run's result
file as its task ends; `--fail` of the runs fail their first attempt. Everything else is the real code:
route files parsed and checked against a real town, waves written, the monitor's poll and resubmission
logic, run_state on 9,000 runs, `bin/progress` on the root. It prints

- how many sbatch, sacct (one query per poll with accounting) and scontrol calls the whole collection takes,
  beside LEAD's pattern (one sbatch per route, a squeue every 50 ms while throttled);
- the monitor's CPU seconds per poll at 9,000 runs, and per hour at one poll every 30 s;
- the time to plan and write the wave file for 9,000 routes, and of bin/progress on 9,000 runs.

    .venv/bin/python benchmarks/bench_slurm.py [--routes 9000] [--throttle 90] [--fail 0.1]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.collect.base.routes import find_route_files  # noqa: E402
from tools.collect.runner.jobs import plan  # noqa: E402
from tools.collect.runner.slurm import Monitor, Scheduler  # noqa: E402
from tools.collect.runner.slurm_options import SlurmOptions  # noqa: E402
from tools.dataset.claims import claim_run  # noqa: E402
from tools.dataset.layout import Layout  # noqa: E402
from tools.dataset.manifest import update_manifest  # noqa: E402
from tools.dataset.results import FAILED, PERFECT, RouteRecord, write_result  # noqa: E402


class RecordingScheduler(Scheduler):
    """A stand-in for sbatch/sacct/scontrol that records calls and plays the arrays forward, one step a poll."""

    def __init__(self, layout: Layout, throttle: int, fail: float, seed: int = 0):
        super().__init__()
        self.layout, self.throttle, self.fail = layout, throttle, fail
        self.rng = random.Random(seed)
        self.arrays: dict[str, dict] = {}  # job id -> {"wave", "first", "count", "next", "ended": set}
        self.failed_once: set[str] = set()
        self.spent = 0.0  # CPU seconds the stand-in spent playing the cluster (not the monitor's)

    def require(self) -> None:
        pass

    def max_array_size(self) -> int:
        self.calls["scontrol"] += 1
        return 1001

    @property
    def accounting(self) -> bool:
        if self._accounting is None:
            self.calls["sacct"] += 1
            self._accounting = True
        return self._accounting

    def submit(self, argv: list[str]) -> str:
        self.calls["sbatch"] += 1
        job = str(len(self.arrays) + 1)
        count = int(re.search(r"--array=0-(\d+)", " ".join(argv)).group(1)) + 1
        self.arrays[job] = {"wave": Path(argv[-2]), "first": int(argv[-1]), "count": count, "done": 0}
        return job

    def find_by_name(self, name: str, accounting: bool) -> str | None:
        self.calls["squeue"] += 1
        return None

    def task_states(self, job_ids: list[str], accounting: bool) -> dict[tuple[str, int], str]:
        c0 = time.process_time()
        try:
            return self._play(job_ids)
        finally:
            self.spent += time.process_time() - c0

    def _play(self, job_ids: list[str]) -> dict[tuple[str, int], str]:
        self.calls["sacct"] += 1
        from tools.collect.runner.waves import Wave

        budget = self.throttle
        states = {}
        for job in job_ids:
            a = self.arrays[job]
            wave = Wave.load(a["wave"])
            for t in range(a["count"]):
                states[(job, t)] = "COMPLETED" if t < a["done"] else "PENDING"
            n = min(budget, a["count"] - a["done"])
            for t in range(a["done"], a["done"] + n):  # these tasks ran and ended since the last poll
                for entry in wave.task_runs(a["first"] + t):
                    self._drive(entry)
                states[(job, t)] = "COMPLETED"
            a["done"] += n
            budget -= n
        return states

    def _drive(self, entry: dict) -> None:
        from tools.collect.runner.waves import run_key_of

        key = run_key_of(entry)
        claim = claim_run(self.layout, key)
        fail = key.name not in self.failed_once and self.rng.random() < self.fail
        if fail:
            self.failed_once.add(key.name)
        write_result(self.layout, key, RouteRecord(str(entry["route_id"]), FAILED if fail else PERFECT,
                                                   route_completion=50.0 if fail else 100.0))
        claim.release()


def make_routes(folder: Path, n: int) -> Path:
    """n route files (copies of a few generated routes, each its own id) and their town."""
    from tools.collect.base.route_gen import generate_routes
    from tools.collect.base.town import make_town

    xodr = make_town(folder / "seed" / "towns" / "town.xodr", grid="3x3")
    generate_routes(town=str(xodr), count=8, out=str(folder / "seed"), seed=1, min_length=120, max_length=250)
    seeds = [p for p in find_route_files(folder / "seed")]
    routes = folder / "routes"
    shutil.copytree(folder / "seed" / "towns", routes / "towns")
    (routes / "Bench").mkdir(parents=True)
    for i in range(n):
        text = seeds[i % len(seeds)].read_text()
        text = text.replace('id="', f'id="r{i:05d}" old="', 1)
        (routes / "Bench" / f"route_{i:05d}.xml").write_text(text)
    return routes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", type=int, default=9000)
    parser.add_argument("--throttle", type=int, default=90)
    parser.add_argument("--fail", type=float, default=0.1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        tmp = Path(tmp)
        routes = make_routes(tmp, args.routes)
        layout = Layout(tmp / "root")

        t0 = time.perf_counter()
        jobs = plan(find_route_files(routes), None, 1)
        t_plan = time.perf_counter() - t0
        update_manifest(layout, {"bench": True}, {str(j.key): {"route": str(j.route_file), "route_id": j.route.id,
                                                              "repetition": 0} for j in jobs})
        planned = [{"key": str(j.key), "route": str(j.route_file), "route_id": j.route.id, "repetition": 0,
                    "towns": str(j.towns)} for j in jobs]
        sched = RecordingScheduler(layout, args.throttle, args.fail)
        monitor = Monitor(layout, SlurmOptions(throttle=args.throttle, poll=1e-3), sched, {}, max_attempts=3,
                          log=lambda message: None)
        update_manifest(Layout(tmp / "scratch"), {"bench": True}, {})
        scratch = Monitor(Layout(tmp / "scratch"), SlurmOptions(throttle=args.throttle), sched, {}, max_attempts=3,
                          log=lambda message: None)
        t0 = time.perf_counter()
        scratch.new_wave(planned)  # what the monitor's first poll writes, timed alone
        t_wave = time.perf_counter() - t0

        polls, cpu = [], []
        real_poll = monitor.poll

        real_look = monitor.look

        def timed_poll(waves, act=True):  # the monitor's own CPU per poll: its query, closing, bookkeeping
            c0, s0 = time.process_time(), sched.spent
            out = real_poll(waves, act)
            polls.append(1)
            cpu.append(time.process_time() - c0 - (sched.spent - s0))
            return out

        def timed_look(planned, live):  # and its pass over the runs' states on disk
            c0 = time.process_time()
            out = real_look(planned, live)
            cpu[-1] += time.process_time() - c0
            return out

        monitor.poll, monitor.look = timed_poll, timed_look
        t0 = time.perf_counter()
        outcome = monitor.run(planned)
        t_total = time.perf_counter() - t0

        # progress reads the disk; with SLURM state it adds one queue query (there is no cluster here)
        shutil.move(layout.root / "slurm", tmp / "slurm-aside")
        t0 = time.perf_counter()
        proc = subprocess.run([str(REPO / "bin" / "progress"), str(layout.root)], capture_output=True, text=True)
        t_progress = time.perf_counter() - t0
        assert proc.returncode == 0, proc.stderr

    calls = Counter(outcome["calls"])
    n_polls = len(polls)
    per_poll = max(cpu) if cpu else 0.0
    print(f"{args.routes} routes, throttle {args.throttle}, {args.fail:.0%} failing once (recording stand-in "
          "for the SLURM commands)")
    print(f"  result: {outcome['counts']}")
    print(f"  scheduler calls: {calls['sbatch']} sbatch, {calls['sacct']} sacct, {calls['scontrol']} scontrol, "
          f"{calls['squeue']} squeue over {n_polls} polls (one query per poll)")
    lead_sbatch = args.routes + round(args.routes * args.fail)
    print(f"  LEAD's pattern: {lead_sbatch} sbatch (one per route run), squeue every 50 ms while throttled: "
          "72,000 per hour")
    print(f"  monitor CPU per poll at {args.routes} runs: mean {sum(cpu) / max(n_polls, 1):.3f} s, max "
          f"{per_poll:.3f} s -> at one poll every 30 s: {per_poll * 120:.0f} CPU s per hour (max)")
    print(f"  plan {args.routes} routes (parse + check on the town): {t_plan:.2f} s; write the wave file: "
          f"{t_wave:.2f} s; plan + wave: {t_plan + t_wave:.2f} s")
    print(f"  bin/progress on {args.routes} route runs: {t_progress:.2f} s (the disk; plus one queue query on a "
          "cluster)")
    print(f"  the whole simulated collection took {t_total:.1f} s of wall time here")
    json.dumps(outcome)


if __name__ == "__main__":
    main()
