"""One attempt of a route run: check every argument, claim the run, drive it in its world (tools.collect.runner.world:
the embedded world, or with --world=carla a CARLA server under the leaderboard evaluator), and write its result.

The run is one RunSpec (tools.collect.base.spec): a collector planned it and wrote it (ROOT/logs/<Scenario>/<run>/
run-spec.json), and its child reads it (`run --spec FILE --attempt N`); a run alone (`run --route FILE`) builds the
same spec itself (`plan_alone`), checking its route as a collection's plan does.

Order of writes, so that a run killed at any point never looks complete:
  0. claim the run (tools.dataset.claims.claim_run: its lock, then the attempt), or take over the claim
     a collector made for us; the lock is held until the result is written
  1. discard what an earlier failed attempt left; write run.json
  2. per recorded frame: frames/<index>.msgpack (atomic, not fsynced); a heartbeat every few wall-clock seconds
     (tools.collect.base.recording.RunRecorder)
  3. at the end: one sync of the file system (the frames on disk), then the result file (fsynced), whose
     existence is what makes the run finished or failed

A full disk (ENOSPC) at any of 1 to 3 is not the route's fault: the attempt is taken back (its attempt log
renamed to logs/<Scenario>/<run>/disk-full.log, which counts no attempt; its frames discarded, by the
collector when one started us: it measures them first) and the process exits with one line
(EXIT_DISK_FULL) naming the folder, the free space and a route run's size (jobs.take_back).

Who drives is the caller's choice (`driver`): `python -m tools.collect run` drives with the expert,
`python -m tools.evaluate route` with a trained policy.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import check_routes, find_towns_dir, select_route, town_file
from tools.collect.base.spec import RunSpec, derive_seed
from tools.collect.base.town import Town, kept_town
from tools.collect.inspect.info import card_after_collection
from tools.collect.inspect.py123d_export import export_after_run, require_py123d
from tools.collect.runner.jobs import route_run_bytes, take_back
from tools.collect.runner.record import collection_record
from tools.collect.runner.world import World, world_for
from tools.collect.sim.drive import DriverFactory
from tools.core import atomic, cli, files
from tools.core.errors import DiskFull, ToolError, disk_full, is_disk_full
from tools.core.locks import require_flock
from tools.dataset import attempts, claims, results
from tools.dataset.layout import Layout, RunKey, check_root_writable, resolve_root
from tools.dataset.manifest import read_manifest, update_manifest
from tools.expert.drivers import make_expert

log = logging.getLogger("collect.run")

__all__ = ["derive_seed", "plan_alone", "route_run", "run_route"]  # derive_seed: the manifest's seed rule names it


def route_run(route: str | None = None, spec: str | None = None, root: str | None = None, repetition: int = 0,
              towns: str | None = None, route_id: str | None = None, attempt: int | None = None, force: bool = False,
              settings: dict | None = None, py123d: bool = False,
              driver: Callable[[CollectSettings], DriverFactory] | None = None) -> RunKey:
    """`python -m tools.collect run` and `python -m tools.evaluate route`: the run of `spec` (a run-spec.json a
    collector wrote; the settings, route and repetition flags are then refused), or of `route` alone (its spec
    built here: `plan_alone`). `driver` makes the driver from the run's settings (default: the expert)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    settings = settings or {}
    force = cli.switch(force, "force")
    py123d = cli.switch(py123d, "py123d")
    world = None
    if spec is not None:
        given = [f"--{name}" for name, value in (("route", route), ("towns", towns), ("route-id", route_id))
                 if value is not None] + [f"--{k.replace('_', '-')}" for k in settings]
        if given:
            raise ToolError(f"--spec and {', '.join(given)}: the run spec holds the route and its settings; give one")
        spec_path = Path(cli.text(spec, "spec")).expanduser().absolute()
        planned = RunSpec.read(spec_path)
        cfg = planned.settings
    else:
        cfg = CollectSettings.from_flags(settings)
    if cfg.agent == "policy" and driver is None:
        raise ToolError("--agent=policy: a trained policy's route run is driven by python -m tools.evaluate route "
                        "(the same flags and --checkpoint), or bin/evaluate --checkpoint RUN for a whole route folder")
    make_driver = make_expert if driver is None else driver(cfg)
    if py123d:  # the extra is there, before anything is claimed
        require_py123d("--py123d")
    if spec is None:
        if route is None or str(route) == "" or isinstance(route, bool):
            raise ToolError("--route missing: give a leaderboard 2.0 route file (or --spec FILE of a planned run)")
        repetition = cli.integer(repetition, "repetition", 0)
        world, planned = plan_alone(Path(cli.text(route, "route")), cli.optional_text(route_id, "route-id"), towns,
                                    repetition, cfg)
        layout = Layout(resolve_root(cli.optional_text(root, "root")))
    elif root is not None:
        layout = Layout(resolve_root(cli.optional_text(root, "root")))
    else:  # a collector's spec lies at its root's Layout.run_spec
        layout = Layout(spec_path.parents[3]) if len(spec_path.parents) > 3 else None
        if layout is None or layout.run_spec(planned.key) != spec_path:
            raise ToolError(f"--spec {spec_path}: not at ROOT/logs/<Scenario>/<run>/run-spec.json of its run "
                            f"{planned.key}; give --root ROOT")
    return run_route(planned, layout, attempt=attempt, force=force, py123d=py123d, make_driver=make_driver,
                     world=world)


def plan_alone(route_path: Path, route_id: str | None, towns: str | None, repetition: int,
               cfg: CollectSettings) -> tuple[World, RunSpec]:
    """The spec of a run alone (`run --route FILE`), checked as a collection's plan checks its runs: the route file,
    the world's set-up and what it needs of the route, the town. Returns the world (its set-up checked) too."""
    if not route_path.is_file():
        raise ToolError(f"--route {route_path}: no such route file")
    r = select_route(route_path, route_id)
    world = world_for(cfg.world)
    default_towns = world.check_setup(cfg)  # before anything is claimed (a CARLA install, the rig it accepts)
    world.check_route(route_path, r)
    towns_dir = find_towns_dir(route_path, towns, default_towns)
    xodr = town_file(route_path, r, towns_dir)
    try:
        key = RunKey.for_route(r.scenario, route_path.stem, r.id, repetition)
    except ValueError as e:
        raise ToolError(f"{route_path}: route {r.id}: {e}") from None
    return world, RunSpec.plan(key, route_path, r, towns_dir, xodr, repetition, cfg)


def run_route(spec: RunSpec, layout: Layout, attempt: int | None = None, force: bool = False, py123d: bool = False,
              make_driver: DriverFactory = make_expert, world: World | None = None) -> RunKey:
    """Claim an attempt of the run `spec` under `layout` (or, with `attempt`, take over the one a collector claimed
    and handed us), drive it, write the result (and with `py123d`, once finished, the run's Py123D log:
    tools.collect.inspect.py123d_export). `world`: its set-up already checked (else checked here). See
    `python -m tools.collect run`."""
    cfg, key = spec.settings, spec.key
    if world is None:
        world = world_for(cfg.world)
        world.check_setup(cfg)  # before anything is claimed
    lone = attempt is None
    kept = kept_town(spec.town_file) is not None
    town = world.open_town(spec.town_file)  # the town kept by the worker that forked us (runner.zygote), else loaded
    if lone:  # a run alone checks its route (a collection checked its runs' routes when it planned them)
        check_routes([(spec.route_file, spec.route)], spec.towns)
    check_root_writable(layout.root)
    layout.check_no_links()
    layout.check_run_paths(key)
    require_flock(layout.root)
    layout.root.mkdir(parents=True, exist_ok=True)
    if lone:  # run alone: record it in the manifest (collect has done so for its runs)
        routes = [spec.route_file.absolute()]
        update_manifest(layout, {"command": "run", "argv": sys.argv[1:], "repetition": spec.repetition,
                                 **collection_record(cfg, routes, routes[0].parent, [spec.town_file])},
                        {str(key): {"route": str(spec.route_file.absolute()), "route_id": spec.route.id,
                                    "repetition": spec.repetition}})
    else:
        read_manifest(layout)  # refuses a root of another format version

    if attempt is None:  # claim the run: its lock, then the attempt (tools.dataset.claims.claim_run)
        claim = claims.claim_run(layout, key, redo=force)
        if claim is results.RunState.FINISHED:
            print(f"{key}: already finished; --force redoes it", file=sys.stderr)
            if py123d:  # its Py123D log, unless there is a current one
                export_after_run(layout, key)
            return key
        if claim is results.RunState.RUNNING:
            raise ToolError(f"{key}: running in another process (its lock {layout.run_lock(key)} is held); "
                            "not touching it")
        if claim is results.RunState.DAMAGED:
            raise ToolError(f"{key}: its result file {layout.result_path(key)} is damaged; look at it, then "
                            "--force redoes the run")
        # the attempt log claim_run created, appended to as itself (logging.FileHandler would follow a link)
        handler = logging.StreamHandler(open(files.open_for_writing(claim.log, os.O_WRONLY | os.O_APPEND), "a"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
    else:  # a collector claimed it and handed us the lock
        claim = claims.inherited_claim(layout, key, int(attempt))
    where = "kept by this worker" if kept else "loaded by this route run"
    try:  # the claim (the run's lock) is held until the result is written
        try:
            _attempt(layout, spec, int(claim.attempt), world, town, where, make_driver, claim.log)
        except (OSError, DiskFull) as e:
            if not isinstance(e, DiskFull) and not is_disk_full(e):
                raise
            raise _take_back(layout, key, claim, lone) from None
        if py123d:  # a finished run's Py123D log, while the claim keeps others from redoing the run
            export_after_run(layout, key, heartbeat=True)
    finally:
        claim.release()
    if lone:  # a collector writes the dataset card when it ends
        card_after_collection(layout)
    return key


def _take_back(layout: Layout, key: RunKey, claim: claims.RunClaim, lone: bool) -> DiskFull:
    """The disk filled during an attempt: uncount it (its log renamed to disk-full.log) and, run alone, discard
    what it wrote (a collector does, after measuring it). Returns the one line."""
    try:
        claim.log.replace(layout.disk_full_log(key))
    except OSError:
        claim.log.unlink(missing_ok=True)
    error = take_back(layout, key) if lone else disk_full(layout.data, "a route run", route_run_bytes(layout, key))
    log.error("%s: %s; this attempt is not counted", key, error)
    return error


def _attempt(layout: Layout, spec: RunSpec, attempt: int, world: World, town: Town | None, town_note: str,
             make_driver: DriverFactory, attempt_log: Path) -> None:
    """Steps 1 to 3 of an attempt (module docstring), under the claim; the attempt's record (its status, and for a
    crash what crashed) in the run's attempts record."""
    key, r = spec.key, spec.route
    claims.discard_run(layout, key)
    log.info("%s: attempt %s, town %s (%s), seed %d", key, attempt, spec.town_file, town_note, spec.seed)

    def crashed(message: str) -> None:  # the attempt's result and record, when it could not drive
        results.write_result(layout, key, results.RouteRecord(route_id=r.id, status=results.FAILED_SIMULATION))
        attempts.record_attempt(layout, key, attempt, results.FAILED_SIMULATION, message, route=r.digest)

    try:
        record, why = world.drive(layout, spec, attempt, town, make_driver)
    except DiskFull:
        raise
    except ToolError as e:  # the attempt could not drive (a CARLA server that never came up, a town it lacks)
        log.error("%s: the attempt ends as %s (%s)", key, results.FAILED_SIMULATION, type(e).__name__)
        crashed(str(e))
        raise
    except Exception as e:
        if is_disk_full(e):
            raise
        log.error("%s: crashed\n%s", key, traceback.format_exc())
        crashed(f"{type(e).__name__}: {e}")
        raise SystemExit(1) from None
    if layout.frames_dir(key).is_dir():  # frames are written without fsync: durable before the result says so
        atomic.sync_filesystem(layout.frames_dir(key))
    if isinstance(record, Path):  # the CARLA leaderboard evaluator's own result, published unchanged
        status = results.publish_checkpoint(layout, key, record)
        if status is None:
            status = results.FAILED_SIMULATION
            results.write_result(layout, key, results.RouteRecord(route_id=r.id, status=status))
    else:
        results.write_result(layout, key, record)
        status = record.status
    if status in results.CRASH_STATUSES:  # what crashed: the evaluator's last exception, how it ended
        attempts.record_attempt(layout, key, attempt, status, *attempts.crash_message(attempt_log, why), route=r.digest)
    else:
        attempts.record_attempt(layout, key, attempt, status, route=r.digest)
