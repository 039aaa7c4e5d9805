"""A collection: check everything (routes against their towns, settings, the world's set-up: tools.collect.runner.world,
SLURM options), record it in the root's manifest, write each planned run's spec (tools.collect.base.spec.RunSpec), then
drive the route runs with local workers (tools.collect.runner.local) or as SLURM job arrays
(tools.collect.runner.slurm), and write the dataset card. `python -m tools.collect collect` and the
evaluation (`python -m tools.evaluate run`) both start here."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings, absolute_flags
from tools.collect.base.routes import find_route_files, town_file
from tools.collect.carla.server import job_gpus, machine_gpus
from tools.collect.inspect.info import card_after_collection
from tools.collect.runner.jobs import changed_routes, plan, replace_changed, write_specs
from tools.collect.runner.local import run_local
from tools.collect.runner.record import collection_record
from tools.collect.runner.slurm import Scheduler, collect_slurm, summary_line
from tools.collect.runner.slurm_options import check_options
from tools.collect.runner.workers import gpu_slots
from tools.collect.runner.world import world_for
from tools.core import cli
from tools.core.errors import ToolError
from tools.core.locks import require_flock
from tools.dataset.claims import finish_deletes, trash_text
from tools.dataset.layout import DATA, LOGS, RESULTS, Layout, check_root_writable, resolve_root
from tools.dataset.manifest import read_manifest, update_manifest


def collect_routes(routes_dir: str, root: str | None, towns: str | None, workers: int, repetitions: int,
                   max_attempts: int, settings: dict[str, Any], slurm: Any = None, py123d: bool = False,
                   servers_per_gpu: int | None = None, replace: bool = False) -> None:
    """Drive every route file under `routes_dir` `repetitions` times in `workers` local processes
    (tools.collect.runner.local), or, with `slurm` (tools.collect.runner.slurm_options.SlurmOptions), as SLURM job
    arrays watched by a monitor (tools.collect.runner.slurm). `servers_per_gpu` K (CARLA): a local worker per GPU slot,
    the machine's (or the job's) GPUs times K, each server on its slot's GPU; on SLURM, slurm.servers_per_gpu.
    `replace`: drive again the finished runs whose route changed since (refused otherwise: jobs.changed_routes)."""
    started = time.time()
    if routes_dir is None or str(routes_dir) == "" or isinstance(routes_dir, bool):
        raise ToolError("ROUTES_DIR missing: give the folder that holds the route files (*.xml)")
    routes_path = Path(cli.text(routes_dir, "routes-dir")).expanduser().absolute()
    workers = cli.integer(workers, "workers", 1)
    repetitions = cli.integer(repetitions, "repetitions", 1)
    max_attempts = cli.integer(max_attempts, "max-attempts", 1)
    if not routes_path.exists():
        raise ToolError(f"ROUTES_DIR {routes_path}: no such folder; give the folder that holds the route files")
    if not routes_path.is_dir():
        raise ToolError(f"ROUTES_DIR {routes_path}: not a folder; give the folder that holds the route files "
                        "(for one file: python -m tools.collect run --route FILE)")
    layout = Layout(resolve_root(cli.optional_text(root, "root")))
    check_root_writable(layout.root)
    settings = absolute_flags(settings)  # what every worker and SLURM task is passed: paths that mean the same there
    layout.check_no_links()
    require_flock(layout.root)  # without working locks two collectors would run the same route runs

    route_files = find_route_files(routes_path)
    if not route_files:
        raise ToolError(f"ROUTES_DIR {routes_path}: no route files (*.xml) in it or below it; make some with "
                        "python -m tools.collect routes --town FILE --count N --out DIR")
    resolved = CollectSettings.from_flags(settings)  # a typo fails here, not in every worker
    gpus = None
    if servers_per_gpu is not None:
        per_gpu = cli.integer(servers_per_gpu, "servers-per-gpu", 1, 16)
        if slurm is None:  # the GPUs this job may use (CUDA_VISIBLE_DEVICES, SLURM's), else all of the machine's
            gpus = gpu_slots(job_gpus() or machine_gpus(), per_gpu)
            workers = len(gpus)
    world = world_for(resolved.world)
    default_towns = world.check_setup(resolved)  # (a CARLA install, the rig it accepts) here, not in every worker
    jobs = plan(route_files, towns, repetitions, default_towns)
    for job in {(j.route_file, j.route.id): j for j in jobs}.values():  # each route once, not per repetition
        world.check_route(job.route_file, job.route)
    manifest = read_manifest(layout)  # a root of another format version is refused before anything is written
    changed, unverified = changed_routes(layout, jobs, manifest)
    if changed and not replace:
        job, driven = changed[0]
        raise ToolError(f"{job.route_file}: route {job.route.id} is not the route run {job.key} drove (finished"
                        f"{f', from {driven}' if driven else ''}; {len(changed)} planned runs differ so): a run is "
                        "its route's content, so collect these routes into a new --root, or pass --replace to drive "
                        "them again here")
    # settings, world, rate, seeds, rig (a bad --rig is refused here), expert, route set, towns: for the manifest
    record = collection_record(resolved, route_files, routes_path, {town_file(j.route_file, j.route, j.towns)
                                                                    for j in jobs})
    scheduler = None
    if slurm is not None:  # no sbatch, an unknown partition: refused before anything is written
        check_options(slurm)
        scheduler = Scheduler()
        scheduler.require()
        if slurm.partition:
            scheduler.check_partition(slurm.partition)

    # A run.lock that is a FIFO or a link, a file or folder of the root this user may not change (a root shared by a
    # group): one line, before the manifest is appended to
    layout.check_access([j.key for j in jobs], delete={j.key for j in jobs if not layout.result_path(j.key).exists()}
                        | {job.key for job, _ in changed}, also=[layout.root / top for top in (DATA, RESULTS, LOGS)])

    # Everything checked: from here on ROOT changes.
    try:
        layout.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ToolError(f"--root {layout.root}: cannot create it ({e.strerror})") from None
    finished = finish_deletes(layout)  # what a killed clean-failed (or collector) left half deleted
    if finished:
        print(f"collect: finished deleting {trash_text(layout, finished)}", file=sys.stderr)
    if changed:
        print(f"collect: --replace: {replace_changed(layout, changed)} of {len(changed)} finished runs whose route "
              "changed discarded, to be driven again", file=sys.stderr)
    if unverified:
        print(f"collect: {unverified} finished runs record no route (written before route digests): taken as the "
              "routes planned, not verified", file=sys.stderr)
    update_manifest(
        layout,
        collection={
            "routes_dir": str(routes_path),
            "repetitions": repetitions,
            "max_attempts": max_attempts,
            "workers": workers,
            "slurm": None if slurm is None else {k: v for k, v in vars(slurm).items() if k != "sbatch_args"},
            "argv": ["python", "-m", "tools.collect", *sys.argv[1:]],
            **record,  # docs/dataset-format.md
        },
        runs={str(j.key): {"route": str(j.route_file.resolve()), "route_id": j.route.id,
                           "route_digest": j.route.digest, "repetition": j.repetition} for j in jobs},
    )
    write_specs(layout, jobs, resolved)  # what each run's process reads (tools.collect.base.spec)
    n_routes = len({(j.route_file, j.route.id) for j in jobs})
    where = f"SLURM job arrays of at most {slurm.throttle} tasks at once" if slurm is not None else (
        f"{workers} workers on GPUs {', '.join(dict.fromkeys(gpus))} ({servers_per_gpu} per GPU)" if gpus
        else f"{workers} workers")
    print(f"collect: {len(jobs)} route runs ({n_routes} routes x {repetitions} repetitions) "
          f"into {layout.root}, {where}, at most {max_attempts} attempts each", file=sys.stderr)
    if slurm is not None:
        outcome = collect_slurm(layout, jobs, slurm, settings, max_attempts, scheduler, py123d=py123d)
        card_after_collection(layout)  # ROOT/README.md, from the manifest and the counts now
        print(summary_line(layout, outcome, slurm, time.time() - started), file=sys.stderr)
        return

    run_local(layout, jobs, workers, max_attempts, resolved, py123d, started, gpus)
