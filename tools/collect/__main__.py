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
  validate  check every frame of every finished route run; the quality report under ROOT/reports/<date>/
  info      the dataset's manifest with counts and sizes (bin/dataset-info)
  export-py123d  every finished route run as a Py123D log
  carla-check  our CARLA backend against the real leaderboard 2.0 and scenario_runner (no server)
  scenario-placements  what the real scenario classes place for each block of route files, as JSON (no server)

`python -m tools.collect COMMAND --help` explains each one.
"""

from __future__ import annotations

from pathlib import Path

from tools.collect.runner.slurm_options import SlurmOptions, slurm_flags
from tools.core import cli
from tools.core.errors import ToolError
from tools.core.presets import with_table


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

    from tools.collect.base.town import Town, make_town

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
    from tools.collect.base.town import CARLA_TOWNS
    from tools.collect.base.town import carla_towns as extract

    listed = towns if isinstance(towns, list | tuple) else str(towns or "").split(",")  # fire splits a,b itself
    names = tuple(str(t).strip() for t in listed if str(t).strip()) or CARLA_TOWNS
    for path in extract(Path(cli.text(out, "out")), names, Path(wheel) if wheel else None):
        print(path)


@with_table("routes")
def routes(town: str, count: int | None = None, out: str | None = None, seed: int = 0,
           min_length: float | None = None, max_length: float | None = None, scenarios: str | None = None,
           preset: str | None = None, spacing: float = 2.0) -> None:
    """Write `count` leaderboard 2.0 route files for a town, one route per file, in folders by scenario type.

    Routes have the shape of the leaderboard 2.0 training and benchmark routes: one route per file, 150 to
    700 m by default, dense waypoints (one every --spacing metres; none inside a junction, where lanes
    overlap) and exactly one <scenario> block. The town is copied to OUT/towns/, where `run` and `collect`
    look for it by default. Without --scenarios, a route takes the junction flow of its first junction's turn
    (SignalizedJunctionLeftTurn, ...; going straight, none: filed under NoScenario); with
    --scenarios=Accident,DynamicObjectCrossing the routes take the types in turn, one per route, each placed
    where it makes sense (obstacles on straight stretches with a lane to pass in, junction types before a
    junction of the right kind; --scenarios=all: every placeable type the town has a place for);
    docs/scenarios.md lists what each type does. Every block carries the
    parameters its leaderboard class reads; waypoints carry the road's z. A town file that is not OpenDRIVE
    text is refused before anything is written.

    --preset sets the count and lengths (a flag given explicitly wins; full: the defaults):
      {presets}

    Args:
        town: an OpenDRIVE file (*.xodr).
        count: number of routes (required without --preset).
        out: folder to write OUT/<ScenarioType>/<town>_<NNNN>.xml into.
        seed: random seed of the route sampler.
        min_length: shortest route, metres (default 150).
        max_length: longest route, metres (default 700).
        scenarios: comma-separated scenario types to place, one per route (tools.collect.base.scenario_types.PLACEABLE);
            "all": every placeable type the town has a place for (the summary names those it has none for).
        preset: tiny, small, medium, bench2drive or full (the table above; tools/core/presets.py).
        spacing: metres between two route waypoints (2 to 50; default 2, as leaderboard 2.0's route files).
    """
    from tools.collect.base.route_gen import generate_routes
    from tools.core.presets import ROUTES, check_preset, resolve

    chosen = resolve(ROUTES, check_preset(preset), {"count": count, "min_length": min_length, "max_length": max_length})
    if chosen["count"] is None:
        raise ToolError("--count missing: give --count N, or --preset tiny|small|medium|bench2drive (4, 24, 128 or 192 "
                        "routes)")
    if out is None:
        raise ToolError("--out missing: give the folder to write the route files into")
    town = cli.text(town, "town")
    generate_routes(town=town, out=out, seed=cli.integer(seed, "seed"), scenarios=scenarios,
                    spacing=cli.number(spacing, "spacing", 2.0, 50.0), **chosen)


def run(route: str | None = None, root: str | None = None, repetition: int = 0, towns: str | None = None,
        route_id: str | None = None, attempt: int | None = None, force: bool = False, py123d: bool = False,
        spec: str | None = None, **settings) -> None:
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
        py123d: once the run is finished, also write it as a Py123D log under ROOT/py123d (docs/py123d.md;
            needs the extra: pip install '.[py123d]').
        spec: a run spec a collection planned (ROOT/logs/<Scenario>/<run>/run-spec.json: the route as planned,
            its town, repetition, seed and settings) instead of --route and the settings; what collect's workers
            and SLURM tasks give (tools/collect/base/spec.py).
        settings: collection settings as --key=value (see tools/collect/base/config.py), e.g. --vehicles=40,
            --world=carla (a CARLA server under the leaderboard evaluator instead of the embedded world).
    """
    from tools.collect.runner.attempt import route_run

    route_run(route=route, spec=spec, root=root, repetition=repetition, towns=towns, route_id=route_id,
              attempt=attempt, force=force, settings=settings, py123d=py123d)


@with_table("collect")
@slurm_flags
def collect(routes_dir: str, root: str | None = None, towns: str | None = None, workers: int | None = None,
            repetitions: int = 1, max_attempts: int = 3, slurm: SlurmOptions | None = None, py123d: bool = False,
            preset: str | None = None, servers_per_gpu: int | None = None, replace: bool = False,
            **settings) -> None:
    """Drive every route file under ROUTES_DIR K times, in N parallel local worker processes, or as SLURM
    job arrays (--slurm).

    Rerunning skips finished route runs and retries failed or crashed ones until --max-attempts
    attempts (counted on disk). A route run is its route's content: a planned run whose route differs
    from the one its finished run drove (routes written again under the same names) is refused in one
    line; --replace drives such runs again. A progress bar shows runs done; a summary ends the run. Every route
    is checked before ROOT is touched. Exits 0 even when some routes failed. ROOT/manifest.json records
    the collection (code version and commit, settings, route set hash, machine); at the end the dataset
    card ROOT/README.md is written from it (bin/dataset-info prints it all).

    --world=carla drives every run in a CARLA server of its own (one per worker: --workers N needs N
    servers' worth of GPU memory) under the CARLA leaderboard 2.0 evaluator; it needs CARLA_ROOT,
    LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT (the CARLA image sets them), checked before anything
    starts, and --slurm asks for 1 GPU per task. docs/carla.md explains it.

    --servers-per-gpu K (--world=carla) runs K CARLA servers on each GPU at once (each takes 4 to 8 GB): the
    workers are the GPUs times K, each server on its own GPU (-graphicsadapter) and its own ports. The GPUs are
    those CUDA_VISIBLE_DEVICES or SLURM names, else every GPU nvidia-smi lists. With --slurm each task runs
    --gpus G x K servers at once (give --runs-per-task of at least that).

    With --slurm, the route runs still to do go into a wave (ROOT/slurm/waves/) submitted as job arrays of
    slurm/collect.sbatch (split at the cluster's MaxArraySize, at most --throttle tasks at once); the
    monitor polls the scheduler every --poll seconds (sacct, or squeue and scontrol without accounting),
    records runs whose task died as crashed, and resubmits failed runs in a new wave until --max-attempts.
    Kill it or log out at any time: the same command adopts the live arrays and submits nothing twice.
    A new --throttle updates live arrays. docs/slurm.md explains it all.

    --py123d also writes every finished route run as a Py123D log under ROOT/py123d (its town as a Py123D
    map), in the run's own process, local or SLURM task; a local collection ends by writing those of runs
    finished before. It needs the py123d extra (pip install '.[py123d]'), checked before anything starts.
    docs/py123d.md explains the logs.

    --preset sets the workers and the embedded world's traffic (a flag given explicitly wins; with
    --world=carla the leaderboard decides the traffic; full: the defaults):
      {presets}

    Args:
        routes_dir: folder searched recursively for route files (*.xml; hidden files and towns/ skipped).
        root: dataset root (default: $DATA_ROOT, else ./data).
        towns: folder of OpenDRIVE towns (default: the nearest towns/ folder above each route file).
        workers: parallel worker processes (local collection; default 1, or the preset's; with
            --servers-per-gpu: the GPUs x K).
        repetitions: runs of each route (K), seeded differently.
        max_attempts: attempts per route run before it is left failed.
        py123d: also write each finished route run as a Py123D log under ROOT/py123d.
        preset: tiny, small, medium, bench2drive or full (the table above; tools/core/presets.py).
        servers_per_gpu: CARLA servers at once on each GPU (--world=carla; 1 to 16): K x the GPUs workers locally,
            --gpus x K runs at once in each SLURM task.
        replace: discard and drive again the finished runs whose route file now holds another route.
        settings: collection settings passed to every run, e.g. --vehicles=40, --world=carla,
            --stop-on-infraction (end a run at the expert's first infraction, Failed with it in its record,
            so it is retried; both worlds).
    """
    from tools.collect.runner.collection import collect_routes
    from tools.collect.runner.world import world_for
    from tools.core.presets import COLLECT, check_preset, resolve

    preset = check_preset(preset)
    world = world_for(settings.get("world", "sim"))
    if servers_per_gpu is not None and not world.servers_on_gpus:
        raise ToolError(f"--servers-per-gpu {servers_per_gpu}: only with --world=carla (the embedded world renders "
                        "on the CPU); give --workers N")
    if servers_per_gpu is not None and workers is not None:
        raise ToolError(f"--workers {workers} and --servers-per-gpu {servers_per_gpu}: give one (with "
                        "--servers-per-gpu K the workers are the GPUs x K)")
    chosen = resolve(COLLECT, preset, {"workers": workers, "vehicles": settings.get("vehicles")})
    workers = chosen["workers"]
    if preset and world.sets_traffic:
        settings = {**settings, "vehicles": chosen["vehicles"]}

    py123d = cli.switch(py123d, "py123d")
    if py123d:  # the extra is there, before anything starts
        from tools.collect.inspect.py123d_export import require_py123d

        require_py123d("--py123d")
    if servers_per_gpu is not None:
        servers_per_gpu = cli.integer(servers_per_gpu, "servers-per-gpu", 1, 16)
    if slurm is not None:
        slurm = slurm.settled(world.gpus_per_task, servers_per_gpu)
    collect_routes(routes_dir=routes_dir, root=root, towns=towns, workers=workers, repetitions=repetitions,
                   max_attempts=max_attempts, settings=settings, slurm=slurm, py123d=py123d,
                   servers_per_gpu=servers_per_gpu, replace=cli.switch(replace, "replace"))


def task(wave_file: str, index: int) -> None:
    """One array task of a SLURM collection wave: drive its route runs (what slurm/collect.sbatch runs).

    Each run is claimed like a local collector claims it (its lock, then an attempt), its heartbeat
    watched; a failed run is not retried here: the monitor's next wave does. Run it by hand to redo one
    task while debugging: bin/collect-task ROOT/slurm/waves/wave-0001.json 7.

    Args:
        wave_file: ROOT/slurm/waves/wave-NNNN.json.
        index: the task's index in the wave (the array's first task + SLURM_ARRAY_TASK_ID).
    """
    from tools.collect.runner.slurm_task import run_task

    run_task(wave_file, index)


def progress(root: str | None = None) -> None:
    """Print a table per scenario type: total, finished, failed, running, pending, failure rate; then the route
    runs that crash the same way on every attempt (the crash, N attempts), apart from those that crashed and
    then finished (from their attempt records, logs/<Scenario>/<run>/attempts.json).

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
    """
    from tools.collect.runner.progress import print_progress

    print_progress(root)


def clean_failed(root: str | None = None, yes: bool = False) -> None:
    """List failed and unfinished (crashed) route runs; delete their data, result and logs with --yes.

    Runs still in progress are never touched. With --yes, run folders a killed clean-failed left half deleted
    are finished too.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        yes: actually delete (default: only list).
    """
    from tools.collect.runner.progress import clean_failed_runs

    clean_failed_runs(root, yes=yes)


def show(path: str, frame: int | str = 0, out: str | None = None) -> None:
    """One picture of a recorded frame: camera, semantics, depth, LiDAR from above, BEV raster, boxes.

    Args:
        path: a route-run folder, its frames/ folder, or a frame file.
        frame: frame index within the run (ignored for a frame file); "scenario": the frame where an actor of
            the route's scenario is nearest ahead (docs/scenarios.md).
        out: PNG to write (default: <run>/frame-<I>.png... in the current folder: frame-<I>.png).
    """
    from tools.collect.inspect.show import show_frame

    show_frame(path=path, frame=frame, out=out)


def validate(root: str | None = None, workers: int | None = None, out: str | None = None) -> None:
    """Check every frame of every finished route run and write the dataset's quality report.

    Every finished run is read in worker processes (a progress bar counts frames) and each frame checked:
    decodable, schema and format version, indices, ticks and time, labels against each other (LiDAR points
    and camera pixels of an actor in its box, the BEV at box centres), the result file against the frames.
    Integrity errors are listed per run. The report, ROOT/reports/<date>/report.json and report.html (one page
    with plots), gives runs, frames and failures per scenario type, town and weather, distributions, buckets,
    the expert's infractions per km and recommendations. Nothing else in ROOT changes. Exit status 0: every
    finished run intact; 1: integrity errors (the report is written all the same); 2: bad input.
    docs/quality.md explains it.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        workers: processes reading runs in parallel (default: the CPUs this process may use).
        out: report folder (default: ROOT/reports/<date>/).
    """
    from tools.collect.inspect.quality import validate_root

    validate_root(root=root, workers=workers, out=out)


def info(root: str | None = None) -> None:
    """Print the dataset's manifest (format, code version, settings, route set, machine) with counts and sizes.

    Prints the dataset_id and format version, a table of the collections (time, user, command, route set hash,
    code version and git commit, settings changed from the defaults) and the latest one in full (rig, rate,
    seeds, world, expert, machine, package versions), the route runs per scenario type (planned, finished,
    failed, running, pending, failure rate, frames) and per town, and the size on disk of data/, results/,
    logs/, buckets/, cache/ and the rest. Then writes the dataset card ROOT/README.md from the same facts (a
    collection writes it too, without the sizes; not in an evaluation root). Reads each result file once and
    lists each finished run's frames once; sizes are walked with 8 threads. A root without a manifest, or of
    another format version, is one line and exit 2. docs/dataset-format.md describes every field.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
    """
    from tools.collect.inspect.info import print_info

    print_info(root)


def export_py123d(root: str | None = None, out: str | None = None, workers: int | None = None,
                  force: bool = False) -> None:
    """Convert every finished route run of ROOT into a Py123D log under OUT, and each run's town into a
    Py123D map, with the py123d package's own writers (the extra: pip install '.[py123d]').

    OUT becomes a Py123D data root: OUT/logs/drivekit_train/<Scenario>__<run>/ and
    OUT/maps/drivekit/drivekit_<town>.arrow; read it with PY123D_DATA_ROOT=OUT (docs/py123d.md). Runs that
    are not finished are listed and left out. Rerunning skips logs already written for the run as it is
    now; a log is renamed into place complete, so an interrupted export leaves none half written.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        out: the Py123D data root to write logs/ and maps/ into (outside ROOT, or ROOT/py123d).
        workers: processes writing logs in parallel, one run each (default: one for a few thousand frames,
            else the CPUs this process may use, at most 8; each holds about 0.4 GB).
        force: write every log and map again.
    """
    from tools.collect.inspect.py123d_export import export_root

    export_root(root=root, out=out, workers=workers, force=force)


def carla_check(routes: str | None = None, rig: str | None = None) -> None:
    """Check our CARLA backend against the real leaderboard 2.0 and scenario_runner of this install (no server).

    Needs LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT (the pinned commits: docs/carla.md), CARLA_ROOT (its
    PythonAPI/carla holds the `agents` package both import) and the leaderboard's Python requirements; the CARLA
    image has them all and runs this at build time. Checks: our agent file loads as the evaluator loads it and its
    sensors pass the real validate_sensor_configuration (and our own check before a run agrees with it); every
    scenario type of our catalogue is a scenario_runner class reading the parameters the catalogue names; route
    files parse with the real RouteParser and every scenario carries a trigger point and the parameters its class
    reads; every scenario block builds with its class against a stand-in of the server (one the leaderboard would
    skip, "due to setup error", fails); our evaluator command line parses with the evaluator's argparse;
    checkpoints the real StatisticsManager writes read as our results. One line per check, exit 1 when one fails.

    Args:
        routes: a route file or a folder of them to check (default: routes generated now by `routes`, one per
            placeable scenario type and four without --scenarios, on a small generated town).
        rig: a rig file (collect --rig) whose sensors to check (default: the default rig).
    """
    from tools.collect.base.config import CollectSettings
    from tools.collect.carla.check import carla_check as check

    rig_config = CollectSettings(rig=cli.optional_text(rig, "rig") or "").load_rig()
    report = check(cli.optional_text(routes, "routes"), rig_config)
    if report.failed:
        raise SystemExit(1)


def scenario_placements(routes: str, out: str, towns: str | None = None) -> None:
    """Record what the real scenario_runner classes place for each scenario block of route files, without a CARLA
    server: each class built as the leaderboard builds it against a stand-in of the server that records its spawns
    and flows (tools/collect/carla/scenario_build.py says what it models), or the error it raises. Needs
    LEADERBOARD_ROOT, SCENARIO_RUNNER_ROOT and CARLA_ROOT as carla-check does. The format:
    tests/data/scenario_placements/README.md.

    Args:
        routes: a route file or a folder of them.
        out: the JSON file to write.
        towns: the folder of the routes' towns (default: a towns/ folder above each route file).
    """
    from tools.collect.carla.placements import record

    record(Path(cli.text(routes, "routes")), Path(cli.text(out, "out")),
           Path(towns) if cli.optional_text(towns, "towns") else None)


def _setting_switches() -> set[str]:
    from tools.collect.base.config import setting_switches  # here, not at the top: --help stays light

    return setting_switches()


run.setting_switches = collect.setting_switches = _setting_switches


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
    "validate": validate,
    "info": info,
    "export-py123d": export_py123d,
    "export_py123d": export_py123d,
    "carla-check": carla_check,
    "carla_check": carla_check,
    "scenario-placements": scenario_placements,
    "scenario_placements": scenario_placements,
}

if __name__ == "__main__":
    cli.main("collect", COMMANDS, name="python -m tools.collect")
