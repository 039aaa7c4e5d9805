"""Local collection: the planned route runs in N worker processes on this machine (tools.collect.runner.workers),
each driving in its world (tools.collect.runner.world: the embedded world, or a CARLA server of its own under the
leaderboard evaluator); then the closing summary."""

from __future__ import annotations

import sys
import time

from tools.collect.base.config import CollectSettings
from tools.collect.inspect.info import card_after_collection
from tools.collect.inspect.py123d_export import export_missing
from tools.collect.inspect.tables import crash_lines
from tools.collect.runner.jobs import Job, duration
from tools.collect.runner.workers import Collector
from tools.dataset.layout import Layout
from tools.dataset.results import run_states


def run_local(layout: Layout, jobs: list[Job], workers: int, max_attempts: int, settings: CollectSettings,
              py123d: bool, started: float, gpus: list[str] | None = None) -> None:
    """Run the planned route runs in `workers` local processes (with `gpus`, one a GPU slot: workers.gpu_slots),
    then print the closing summary."""
    c = Collector(layout, workers=workers, max_attempts=max_attempts, settings=settings, py123d=py123d, gpus=gpus)
    c.run(jobs)
    if py123d:  # finished runs without a current Py123D log: finished before, or their export was cut short
        export_missing(layout)
    card_after_collection(layout)  # ROOT/README.md, from the manifest and the counts now

    parts = [f"collect: {len(c.finished)} route runs finished and {len(c.failed)} failed in this invocation"]
    if c.retried:
        parts.append(f" ({c.retried} failed attempts were retried)")
    parts.append(f"; {c.skipped} skipped as already finished")
    if c.busy:
        parts.append(f", {len(c.busy)} skipped as running elsewhere")
    if c.damaged:
        parts.append(f", {len(c.damaged)} left alone with damaged result files (named above)")
    if c.given_up:
        parts.append(f", {len(c.given_up)} given up (failed {max_attempts} times before; bin/clean-failed "
                     f"{layout.root} --yes starts them over)")
    parts.append(f". {c.frames} frames recorded by the finished runs in {duration(time.time() - started)}. Data in "
                 f"{layout.root}/data, results in {layout.root}/results, logs in {layout.root}/logs; "
                 f"see bin/progress {layout.root}.")
    if c.failed or c.given_up:
        parts.append(" Some failed routes are normal (about 10%, more for hard scenario types): "
                     "collection still exits 0.")
    print("\n".join(["".join(parts), *crash_lines(layout, run_states(layout, [j.key for j in jobs]))]),
          file=sys.stderr)
