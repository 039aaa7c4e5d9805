"""One array task of a SLURM collection wave (what slurm/collect.sbatch runs through bin/collect-task): its route
runs one after the other in a Collector of one worker (tools.collect.runner.workers), each driven as its spec says."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import read_routes, town_file
from tools.collect.base.spec import RunSpec
from tools.collect.carla.server import job_gpus, machine_gpus
from tools.collect.runner.jobs import Job
from tools.collect.runner.waves import SLURM_DIR, WAVES, Wave, run_key_of
from tools.collect.runner.workers import Collector, gpu_slots
from tools.collect.runner.world import world_for
from tools.core import cli
from tools.core.errors import ToolError
from tools.dataset.layout import Layout


def run_task(wave_file: str, index: Any) -> None:
    """One array task: the route runs of task `index` of a wave, one after the other, each claimed like a
    local collector does, its heartbeat watched; no retry here (the monitor's next wave retries)."""
    path = Path(cli.text(wave_file, "wave-file")).expanduser().absolute()
    wave = Wave.load(path)
    task = cli.integer(index, "index", 0, wave.n_tasks - 1)
    if path.parent.name != WAVES or path.parent.parent.name != SLURM_DIR:
        raise ToolError(f"{path}: not under ROOT/{SLURM_DIR}/{WAVES}/; give a wave file of a dataset root")
    layout = Layout(path.parent.parent.parent)
    settings = CollectSettings.from_flags(wave.settings)
    jobs = [Job.of(_task_spec(layout, entry, settings, path)) for entry in wave.task_runs(task)]
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    job = os.environ.get("SLURM_ARRAY_JOB_ID", "?") + "_" + os.environ.get("SLURM_ARRAY_TASK_ID", "?")
    gpus = gpu_slots(job_gpus() or machine_gpus(), wave.servers_per_gpu) if wave.servers_per_gpu else None
    at_once = f", {len(gpus)} at once on GPUs {', '.join(dict.fromkeys(gpus))}" if gpus else ""
    print(f"collect: task {task} of wave {wave.wave} (job {job} on {host}): {len(jobs)} route runs{at_once}",
          file=sys.stderr)
    c = Collector(layout, workers=1, max_attempts=wave.max_attempts, settings=settings, retry=False,
                  progress=False, py123d=wave.py123d, gpus=gpus)
    c.run(jobs)
    print(f"collect: task {task}: {len(c.finished)} finished, {len(c.failed)} failed, {c.skipped} already "
          f"finished, {len(c.busy)} running elsewhere, {len(c.given_up)} out of attempts", file=sys.stderr)


def _task_spec(layout: Layout, entry: dict[str, Any], settings: CollectSettings, wave: Path) -> RunSpec:
    """The spec of a wave's run, as the collection planned it (Layout.run_spec); planned again from the wave's entry
    and written when it is gone (bin/clean-failed removes a run's logs folder, the spec with it)."""
    key = run_key_of(entry)
    if layout.run_spec(key).is_file():
        return RunSpec.read(layout.run_spec(key))
    route_file = Path(entry["route"])
    route = next((r for r in read_routes(route_file) if r.id == str(entry["route_id"])), None)
    if route is None:
        raise ToolError(f"{route_file}: has no route {entry['route_id']} any more (wave {wave})")
    if entry.get("route_digest") and route.digest != entry["route_digest"]:  # the route as planned, or none
        raise ToolError(f"{route_file}: route {route.id} changed since the collection planned it (wave {wave}); "
                        "restore the file, or run the collection again (with --replace where finished runs drove the "
                        "old route)")
    world_for(settings.world).check_route(route_file, route)
    towns = Path(entry["towns"])
    spec = RunSpec.plan(key, route_file, route, towns, town_file(route_file, route, towns), int(entry["repetition"]),
                        settings)
    spec.write(layout.run_spec(key))
    return spec


