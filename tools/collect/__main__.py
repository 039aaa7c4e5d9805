"""python -m tools.collect COMMAND: make towns and routes, drive routes and record them, inspect a dataset.

Commands:
  town      generate an OpenDRIVE grid town with SUMO
  routes    write leaderboard 2.0 route files for a town (one route per file, folders by scenario type)
  carla-towns  CARLA's real towns (OpenDRIVE) from the py123d wheel
  run       one route run: drive a route once and record it under ROOT (the unit a SLURM task runs)
  collect   every route file under a folder times K repetitions, in N local worker processes or on SLURM
  task      one array task of a SLURM collection wave (what slurm/collect.sbatch runs)
  progress  a table per scenario type: total, finished, failed, running, pending, failure rate
  clean-failed  list failed and unfinished route runs; delete them with --yes
  show      one picture of a recorded frame: camera, semantics, depth, LiDAR, BEV, boxes

`python -m tools.collect COMMAND --help` explains each one.
"""

from __future__ import annotations

from pathlib import Path

from tools.dataset import cli


def town(out: str, grid: str = "4x4", seed: int = 0, lanes: int = 2, block: float = 100.0) -> None:
    """Generate a grid town as OpenDRIVE with SUMO's netgenerate and netconvert.

    Args:
        out: the OpenDRIVE file to write (*.xodr).
        grid: junctions per side, COLSxROWS (2 to 30 each).
        seed: random seed of netgenerate.
        lanes: lanes per direction (1 to 4).
        block: distance between junctions, metres.
    """
    from pathlib import Path

    from tools.collect.town import Town, make_town

    path = make_town(Path(out), grid=str(grid), seed=int(seed), lanes=int(lanes), block=float(block))
    t = Town(path)
    xmin, ymin, xmax, ymax = t.bounds
    print(f"town {path}: {len(t.lanes)} lanes, {xmax - xmin:.0f} x {ymax - ymin:.0f} m; SUMO network {t.net}")


def carla_towns(out: str, towns: str = "", wheel: str | None = None) -> None:
    """Extract CARLA's real towns (OpenDRIVE) from the py123d wheel on PyPI into OUT, one <name>.xodr each.

    Only the wheel is downloaded (pip download --no-deps), none of py123d's dependencies. Towns already in
    OUT are kept. Use them as any town: tools.collect routes --town OUT/Town10HD.xodr ...

    Args:
        out: folder to write the towns into.
        towns: comma-separated names (default: Town01 to Town07 and Town10HD).
        wheel: a py123d wheel file already downloaded (default: pip download py123d==0.7.0).
    """
    from tools.collect.town import CARLA_TOWNS
    from tools.collect.town import carla_towns as extract

    listed = towns if isinstance(towns, list | tuple) else str(towns or "").split(",")  # fire splits a,b itself
    names = tuple(str(t).strip() for t in listed if str(t).strip()) or CARLA_TOWNS
    for path in extract(Path(cli.text(out, "out")), names, Path(wheel) if wheel else None):
        print(path)


def routes(town: str, count: int, out: str, seed: int = 0, min_length: float = 250.0,
           max_length: float = 700.0, scenarios: str | None = None) -> None:
    """Write `count` leaderboard 2.0 route files for a town, one route per file, in folders by scenario type.

    The town is copied to OUT/towns/, where `run` and `collect` look for it by default. Without
    --scenarios, a route is filed under the junction type of its first junction and runs no actors;
    with --scenarios=Accident,DynamicObjectCrossing the routes take the types in turn, each placed
    where it makes sense (obstacles on straight stretches with a lane to pass in, junction types
    before a junction of the right kind); docs/scenarios.md lists what each type does.

    Args:
        town: an OpenDRIVE file (*.xodr).
        count: number of routes.
        out: folder to write OUT/<ScenarioType>/<town>_<NNNN>.xml into.
        seed: random seed of the route sampler.
        min_length: shortest route, metres.
        max_length: longest route, metres.
        scenarios: comma-separated scenario types to place (tools.collect.scenarios.PLACEABLE).
    """
    from tools.collect.routes import generate_routes

    generate_routes(town=town, count=count, out=out, seed=seed, min_length=min_length, max_length=max_length,
                    scenarios=scenarios)


def run(route: str, root: str | None = None, repetition: int = 0, towns: str | None = None,
        route_id: str | None = None, attempt: int | None = None, force: bool = False, **settings) -> None:
    """Drive one route once (one repetition) in the embedded world and record it under ROOT.

    With --world=carla the route is driven in a CARLA server started for this run, by the CARLA
    leaderboard 2.0 evaluator with our agent; it needs CARLA_ROOT, LEADERBOARD_ROOT and
    SCENARIO_RUNNER_ROOT (set in the CARLA image) and a GPU; its result is the evaluator's own
    (docs/carla.md).

    Skips a run that already finished (unless --force); refuses one that is running elsewhere;
    discards and redoes a failed or crashed one. Exits 0 when a result file was written, whether
    the route succeeded or failed; non-zero when the run itself crashed.

    Args:
        route: a leaderboard 2.0 route XML file.
        root: dataset root (default: $DATA_ROOT, else ./data).
        repetition: repetition index K; the world is seeded from (route, K).
        towns: folder of OpenDRIVE towns (default: the nearest towns/ folder above the route file).
        route_id: which route of the file (default: the only one).
        attempt: attempt number already claimed by a caller (tools.collect collect); else claimed here.
        force: redo a run that already finished.
        settings: collection settings as --key=value (see tools/collect/config.py), e.g. --vehicles=40,
            --world=carla (a CARLA server under the leaderboard evaluator instead of the embedded world).
    """
    from tools.collect.run import run_route

    run_route(route=route, root=root, repetition=repetition, towns=towns, route_id=route_id,
              attempt=attempt, force=force, settings=settings)


def collect(routes_dir: str, root: str | None = None, towns: str | None = None, workers: int = 1,
            repetitions: int = 1, max_attempts: int = 3, slurm: bool = False, partition: str | None = None,
            account: str | None = None, time: str = "01:00:00", throttle: int = 48, cpus: int = 1, mem: str = "4G",
            gpus: int | None = None, runs_per_task: int = 1, sbatch_args: str = "", watch: bool = True,
            poll: float = 30.0, **settings) -> None:
    """Drive every route file under ROUTES_DIR K times, in N parallel local worker processes, or as SLURM
    job arrays (--slurm).

    Rerunning skips finished route runs and retries failed or crashed ones until --max-attempts
    attempts (counted on disk). A progress bar shows runs done; a summary ends the run. Every route
    is checked before ROOT is touched. Exits 0 even when some routes failed.

    --world=carla drives every run in a CARLA server of its own (one per worker: --workers N needs N
    servers' worth of GPU memory) under the CARLA leaderboard 2.0 evaluator; it needs CARLA_ROOT,
    LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT (the CARLA image sets them), checked before anything
    starts, and --slurm asks for 1 GPU per task. docs/carla.md explains it.

    With --slurm, the route runs still to do go into a wave (ROOT/slurm/waves/) submitted as job arrays of
    slurm/collect.sbatch (split at the cluster's MaxArraySize, at most --throttle tasks at once); the
    monitor polls the scheduler every --poll seconds (sacct, or squeue and scontrol without accounting),
    records runs whose task died as crashed, and resubmits failed runs in a new wave until --max-attempts.
    Kill it or log out at any time: the same command adopts the live arrays and submits nothing twice.
    A new --throttle updates live arrays. docs/slurm.md explains it all.

    Args:
        routes_dir: folder searched recursively for route files (*.xml; hidden files and towns/ skipped).
        root: dataset root (default: $DATA_ROOT, else ./data).
        towns: folder of OpenDRIVE towns (default: the nearest towns/ folder above each route file).
        workers: parallel worker processes (local collection).
        repetitions: runs of each route (K), seeded differently.
        max_attempts: attempts per route run before it is left failed.
        slurm: run the route runs as SLURM array tasks instead of local workers.
        partition: SLURM partition (default: the cluster's default).
        account: SLURM account to charge.
        time: time limit of one array task (SLURM format, e.g. 01:00:00).
        throttle: array tasks running at once (--array=...%K); changes live arrays when rerun.
        cpus: CPUs per task.
        mem: memory per task (e.g. 4G).
        gpus: GPUs per task (default: 0 for the embedded world; a CARLA world asks for 1).
        runs_per_task: route runs one task drives one after the other (for clusters with a job limit).
        sbatch_args: more sbatch options, as one quoted string, passed as they are.
        watch: keep monitoring until every route run ended (--no-watch: submit and exit).
        poll: seconds between two looks at the scheduler (30; tests use less).
        settings: collection settings passed to every run, e.g. --vehicles=40, --world=carla.
    """
    from tools.collect.local import collect_local
    from tools.collect.slurm import options_from_flags

    options = options_from_flags(slurm=slurm, partition=partition, account=account, time=time, throttle=throttle,
                                 cpus=cpus, mem=mem, gpus=gpus, runs_per_task=runs_per_task, sbatch_args=sbatch_args,
                                 watch=watch, poll=poll, settings=settings)
    collect_local(routes_dir=routes_dir, root=root, towns=towns, workers=workers, repetitions=repetitions,
                  max_attempts=max_attempts, settings=settings, slurm=options)


def task(wave_file: str, index: int) -> None:
    """One array task of a SLURM collection wave: drive its route runs (what slurm/collect.sbatch runs).

    Each run is claimed like a local collector claims it (its lock, then an attempt), its heartbeat
    watched; a failed run is not retried here: the monitor's next wave does. Run it by hand to redo one
    task while debugging: bin/collect-task ROOT/slurm/waves/wave-0001.json 7.

    Args:
        wave_file: ROOT/slurm/waves/wave-NNNN.json.
        index: the task's index in the wave (the array's first task + SLURM_ARRAY_TASK_ID).
    """
    from tools.collect.slurm import run_task

    run_task(wave_file, index)


def progress(root: str | None = None) -> None:
    """Print a table per scenario type: total, finished, failed, running, pending, failure rate.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
    """
    from tools.collect.progress import print_progress

    print_progress(root)


def clean_failed(root: str | None = None, yes: bool = False) -> None:
    """List failed and unfinished (crashed) route runs; delete their data, result and logs with --yes.

    Runs still in progress are never touched.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        yes: actually delete (default: only list).
    """
    from tools.collect.progress import clean_failed_runs

    clean_failed_runs(root, yes=yes)


def show(path: str, frame: int | str = 0, out: str | None = None) -> None:
    """One picture of a recorded frame: camera, semantics, depth, LiDAR from above, BEV raster, boxes.

    Args:
        path: a route-run folder, its frames/ folder, or a frame file.
        frame: frame index within the run (ignored for a frame file); "scenario": the frame where an actor of
            the route's scenario is nearest ahead (docs/scenarios.md).
        out: PNG to write (default: <run>/frame-<I>.png... in the current folder: frame-<I>.png).
    """
    from tools.collect.show import show_frame

    show_frame(path=path, frame=frame, out=out)


COMMANDS = {
    "town": town,
    "routes": routes,
    "carla-towns": carla_towns,
    "carla_towns": carla_towns,
    "run": run,
    "collect": collect,
    "task": task,
    "progress": progress,
    "clean-failed": clean_failed,
    "clean_failed": clean_failed,
    "show": show,
}

if __name__ == "__main__":
    cli.main("collect", COMMANDS, name="python -m tools.collect")
