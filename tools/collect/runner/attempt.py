"""One attempt of a route run: check every argument, claim the run, drive it in the embedded world
(tools.collect.sim.drive) or, with --world=carla, in a CARLA server under the leaderboard evaluator
(tools.collect.carla.run), and write its result.

Order of writes, so that a run killed at any point never looks complete:
  0. claim the run (tools.dataset.results.claim_run: its lock, then the attempt), or take over the claim
     a collector made for us; the lock is held until the result is written
  1. discard what an earlier failed attempt left; write run.json
  2. per recorded frame: frames/<index>.msgpack (atomic, not fsynced); a heartbeat every few wall-clock seconds
     (tools.collect.recording.RunRecorder)
  3. at the end: one sync of the file system (the frames on disk), then the result file (fsynced), whose
     existence is what makes the run finished or failed

A full disk (ENOSPC) at any of 1 to 3 is not the route's fault: the attempt is taken back (its attempt log
renamed to logs/<Scenario>/<run>/disk-full.log, which counts no attempt; its frames discarded, by the
collector when one started us: it measures them first) and the process exits with one line
(EXIT_DISK_FULL) naming the folder, the free space and a route run's size (jobs.take_back).

Who drives is the caller's choice (`make_driver`): `python -m tools.collect run` drives with the expert,
`python -m tools.evaluate route` with a trained policy.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import traceback
from pathlib import Path

from tools.collect.carla import run as carla_run
from tools.collect.carla.agent import check_rig
from tools.collect.config import CollectSettings
from tools.collect.inspect.info import card_after_collection
from tools.collect.inspect.py123d_export import export_after_run, require_py123d
from tools.collect.routes import check_routes, find_towns_dir, select_route, town_file
from tools.collect.runner.jobs import route_run_bytes, take_back
from tools.collect.runner.record import collection_record
from tools.collect.sim.drive import DriverFactory, drive
from tools.collect.town import Town, keep_town, kept_town, open_town
from tools.dataset import atomic, attempts, claims, cli, results
from tools.dataset.errors import DiskFull, ToolError, disk_full, is_disk_full
from tools.dataset.layout import Layout, RunKey, check_root_writable, resolve_root
from tools.dataset.locks import require_flock
from tools.dataset.manifest import read_manifest, update_manifest
from tools.expert.drivers import make_expert

log = logging.getLogger("collect.run")


def derive_seed(route_stem: str, route_id: str, repetition: int, offset: int) -> int:
    """The world's seed, from (route, repetition): identical runs for identical inputs."""
    digest = hashlib.sha256(f"{route_stem}/{route_id}/{repetition}/{offset}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def run_route(route: str, root: str | None, repetition: int, towns: str | None, route_id: str | None,
              attempt: int | None, force: bool, settings: dict, py123d: bool = False,
              make_driver: DriverFactory = make_expert) -> RunKey:
    """Check every argument, claim an attempt, drive, write the result (and with `py123d`, once finished, the
    run's Py123D log: tools.collect.inspect.py123d_export). See `python -m tools.collect run`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    cfg = CollectSettings.from_flags(settings)
    if cfg.agent == "policy" and make_driver is make_expert:
        raise ToolError("--agent=policy: a trained policy's route run is driven by python -m tools.evaluate route "
                        "(the same flags and --checkpoint), or bin/evaluate --checkpoint RUN for a whole route folder")
    route_path = Path(cli.text(route, "route"))
    if not route_path.is_file():
        raise ToolError(f"--route {route}: no such route file")
    repetition = cli.integer(repetition, "repetition", 0)
    force = cli.switch(force, "force")
    py123d = cli.switch(py123d, "py123d")
    if py123d:  # the extra is there, before anything is claimed
        require_py123d("--py123d")
    r = select_route(route_path, cli.optional_text(route_id, "route-id"))
    carla_setup = default_towns = None
    if cfg.world == "carla":  # the CARLA install, leaderboard, scenario_runner, client: before anything is claimed
        carla_setup = carla_run.check_setup()
        carla_run.check_route(route_path, r)
        check_rig(cfg.load_rig())  # sensors the leaderboard would refuse end every attempt: refused here
        default_towns = carla_run.install_towns(carla_setup)
    towns_dir = find_towns_dir(route_path, towns, default_towns)
    xodr = town_file(route_path, r, towns_dir)
    town, kept = None, kept_town(xodr) is not None
    if carla_setup is None:  # the town kept by the worker that forked us (tools.collect.runner.zygote), else loaded
        town = open_town(xodr)
        keep_town(town)  # the route's check below reads the same carla.Map
    check_routes([(route_path, r)], towns_dir)
    layout = Layout(resolve_root(cli.optional_text(root, "root")))
    check_root_writable(layout.root)
    try:
        key = RunKey.for_route(r.scenario, route_path.stem, r.id, repetition)
    except ValueError as e:
        raise ToolError(f"{route_path}: route {r.id}: {e}") from None
    layout.check_no_links()
    layout.check_run_paths(key)
    require_flock(layout.root)
    layout.root.mkdir(parents=True, exist_ok=True)
    lone = attempt is None
    if lone:  # run alone: record it in the manifest (collect has done so for its runs)
        routes = [route_path.absolute()]
        update_manifest(layout, {"command": "run", "argv": sys.argv[1:], "repetition": repetition,
                                 **collection_record(cfg, routes, routes[0].parent, [xodr])},
                        {str(key): {"route": str(route_path.absolute()), "route_id": r.id, "repetition": repetition}})
    else:
        read_manifest(layout)  # refuses a root of another format version

    if attempt is None:  # claim the run: its lock, then the attempt (tools.dataset.results.claim_run)
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
        handler = logging.FileHandler(claim.log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
    else:  # a collector claimed it and handed us the lock
        claim = claims.inherited_claim(layout, key, int(attempt))
    attempt = claim.attempt
    seed = derive_seed(route_path.stem, r.id, repetition, cfg.seed)
    try:  # the claim (the run's lock) is held until the result is written
        try:
            _attempt(layout, key, r, route_path, xodr, town, kept, cfg, repetition, seed, int(attempt), carla_setup,
                     make_driver, claim.log)
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


def _attempt(layout: Layout, key: RunKey, r, route_path: Path, xodr: Path, town: Town | None, kept: bool,
             cfg: CollectSettings, repetition: int, seed: int, attempt: int, carla_setup, make_driver: DriverFactory,
             attempt_log: Path) -> None:
    """Steps 1 to 3 of an attempt (module docstring), under the claim; the attempt's record (its status, and for a
    crash what crashed) in the run's attempts record."""
    claims.discard_run(layout, key)
    log.info("%s: attempt %s, town %s (%s), seed %d", key, attempt, xodr,
             "kept by this worker" if kept else "loaded by this route run", seed)

    def crashed(message: str) -> None:  # the attempt's result and record, when it could not drive
        results.write_result(layout, key, results.RouteRecord(route_id=r.id, status=results.FAILED_SIMULATION))
        attempts.record_attempt(layout, key, attempt, results.FAILED_SIMULATION, message)

    why = ""
    try:
        if carla_setup is not None:
            record, why = carla_run.drive(layout, key, route_path.absolute(), r, cfg, repetition, seed, int(attempt),
                                          carla_setup)
        else:
            record = drive(layout, key, r, town, cfg, repetition, seed, int(attempt), make_driver)
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
        attempts.record_attempt(layout, key, attempt, status, *attempts.crash_message(attempt_log, why))
    else:
        attempts.record_attempt(layout, key, attempt, status)
