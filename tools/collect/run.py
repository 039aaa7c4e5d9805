"""One route run: drive a route once in the embedded world (or, with --world=carla, in a CARLA server under the
leaderboard evaluator: tools.collect.carla_run) and record it, frame by frame.

Order of writes, so that a run killed at any point never looks complete:
  0. claim the run (tools.dataset.results.claim_run: its lock, then the attempt), or take over the claim
     a collector made for us; the lock is held until the result is written
  1. discard what an earlier failed attempt left; write run.json
  2. per recorded frame: frames/<index>.msgpack (atomic, not fsynced); a heartbeat every few wall-clock seconds
  3. at the end: one sync of the file system (the frames on disk), then the result file (fsynced), whose
     existence is what makes the run finished or failed
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import socket
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from tools.collect.config import CollectSettings
from tools.collect.planner import DenseRoute, RoutePlanner, stop_signs
from tools.collect.routes import Route, check_routes, find_towns_dir, read_routes, town_file
from tools.collect.state import Box, Snapshot
from tools.collect.town import Town
from tools.dataset import atomic, cli, frames, results
from tools.dataset.errors import ToolError
from tools.dataset.geometry import world_to_ego, yaw_to_ego
from tools.dataset.layout import Layout, RunKey, check_root_writable, resolve_root
from tools.dataset.manifest import read_manifest, update_manifest
from tools.dataset.measurements import BoxLabel, Measurements, RoadOption
from tools.dataset.rig import RigConfig
from tools.expert.expert import Decision

log = logging.getLogger("collect.run")

#: A target point is passed (and the next one becomes the target) this close to the ego, metres.
TARGET_REACHED_M = 7.5
#: Route points stored per frame are this far apart, metres.
ROUTE_AHEAD_SPACING_M = 2.0
#: Actors stored as boxes within this distance of the ego, metres.
BOX_RADIUS_M = 60.0
#: Wall-clock seconds between heartbeats (results.HEARTBEAT_STALE_S declares a writer gone).
HEARTBEAT_EVERY_S = 5.0
#: The referee looks for the ego's place on the route this far beyond the last one, metres.
PROGRESS_WINDOW_M = 30.0
#: Standing still within this distance (of the ego's centre) before a stop sign's line counts as stopping, metres.
STOP_AREA_M = 8.0
#: The ego whose place on the route is this close to its end has completed it, metres.
ARRIVAL_TOLERANCE_M = 2.0


def derive_seed(route_stem: str, route_id: str, repetition: int, offset: int) -> int:
    """The world's seed, from (route, repetition): identical runs for identical inputs."""
    digest = hashlib.sha256(f"{route_stem}/{route_id}/{repetition}/{offset}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class StageClock:
    """Wall seconds spent in each stage of a route run's loop (the world, the driver, each sensor, encoding,
    writing): the run's log ends with them per recorded frame, and benchmarks/bench_world.py prints them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        """Charge the time since the last lap to `stage`."""
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._last
        self._last = now

    def add(self, parts: dict[str, float]) -> None:
        """Charge a renderer's timings (Renderer.render) to its sensors, and restart the lap."""
        for stage, seconds in parts.items():
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        self._last = time.perf_counter()

    def per(self, frames: int) -> str:
        """"stage 1.2 ms, ..." per recorded frame, largest first."""
        return ", ".join(f"{stage} {1000 * t / frames:.1f} ms"
                         for stage, t in sorted(self.seconds.items(), key=lambda kv: -kv[1]))


#: The stage seconds of the last route run driven in this process (StageClock.seconds, plus "frames"): read by
#: benchmarks/bench_world.py.
last_stages: dict[str, float] = {}


def select_route(route_file: Path, route_id: str | None) -> Route:
    found = read_routes(route_file)
    if route_id is None:
        if len(found) > 1:
            ids = ", ".join(r.id for r in found)
            raise ToolError(f"{route_file}: holds {len(found)} routes ({ids}); pick one with --route-id")
        return found[0]
    for r in found:
        if r.id == str(route_id):
            return r
    raise ToolError(f"--route-id {route_id}: not in {route_file} (ids: {', '.join(r.id for r in found)})")


class Referee:
    """Route progress and infractions, as the leaderboard's criteria judge them."""

    def __init__(self, route: DenseRoute, settings: CollectSettings, stops: np.ndarray | None = None):
        self.route = route
        self.settings = settings
        #: Route distances of the stop signs' lines (planner.stop_signs); the next one to judge; whether the
        #: ego stood still near it.
        self.stops = np.zeros(0) if stops is None else np.asarray(stops, dtype=np.float64)
        self._next_stop = 0
        self._stood = False
        self.index = 0
        self.still_since: float | None = None
        self.infractions: dict[str, list[str]] = {k: [] for k in results.INFRACTION_KEYS}
        self.status: str | None = None  # set when the run must end with a failure
        self.budget = settings.timeout_base + route.length / settings.timeout_speed

    @property
    def completion(self) -> float:
        return 100.0 * float(self.route.s[self.index]) / max(self.route.length, 1e-6)

    def track(self, xy: np.ndarray) -> float:
        """Move the ego's place on the route (`index`) to `xy`; its distance from the route, metres. In CARLA
        this is all the referee does (the leaderboard judges the run)."""
        self.index, off = self.route.advance(self.index, float(xy[0]), float(xy[1]), PROGRESS_WINDOW_M)
        return off

    def update(self, t: float, xy: np.ndarray, speed: float, events) -> None:
        """Judge one tick: the ego at `xy` with `speed`, and what the world saw happen (world.StepEvents)."""
        off = self.track(xy)
        if off > self.settings.max_deviation:
            self.infractions["route_dev"].append(f"Agent deviated from the route at (x={xy[0]:.1f}, y={xy[1]:.1f})")
            self.status = results.FAILED_DEVIATED
        for other, kind in events.collisions:
            self.infractions[f"collisions_{kind}"].append(
                f"Agent collided against object with type={kind} and id={other} at (x={xy[0]:.1f}, y={xy[1]:.1f})")
        if events.ran_red_light:
            self.infractions["red_light"].append(
                f"Agent ran a red light {events.ran_red_light} at (x={xy[0]:.1f}, y={xy[1]:.1f})")
        self._judge_stop(speed, xy)
        if speed > 0.1:
            self.still_since = None
        elif self.still_since is None:
            self.still_since = t
        if self.still_since is not None and t - self.still_since > self.settings.blocked_after:
            self.infractions["vehicle_blocked"].append(f"Agent got blocked at (x={xy[0]:.1f}, y={xy[1]:.1f})")
            self.status = results.FAILED_BLOCKED
        if t > self.budget:
            self.infractions["route_timeout"].append("Route timeout.")
            self.status = results.FAILED

    def _judge_stop(self, speed: float, xy: np.ndarray) -> None:
        """A stop sign run: the ego's centre passed the stop line without standing still (below 0.1 m/s, the
        leaderboard's threshold) within STOP_AREA_M before it."""
        if self._next_stop >= len(self.stops):
            return
        line, s = float(self.stops[self._next_stop]), float(self.route.s[self.index])
        if line - STOP_AREA_M <= s and speed < 0.1:
            self._stood = True
        if s > line + 1.0:
            if not self._stood:
                self.infractions["stop_infraction"].append(
                    f"Agent ran a stop sign at (x={xy[0]:.1f}, y={xy[1]:.1f})")
            self._next_stop += 1
            self._stood = False

    @property
    def arrived(self) -> bool:
        """The ego reached the route's end."""
        return self.route.length - float(self.route.s[self.index]) < ARRIVAL_TOLERANCE_M

    def final_status(self) -> str:
        if self.status:
            return self.status
        if self.completion < 100.0 - 1e-6:
            return results.FAILED
        return results.COMPLETED if any(self.infractions.values()) else results.PERFECT


def _targets(route: DenseRoute, coarse: np.ndarray, index: int, xy: np.ndarray) -> tuple[int, int]:
    """Positions in `coarse` of the current and the next target point."""
    k = int(np.searchsorted(coarse, index, side="right"))
    while k < len(coarse) - 1 and math.dist(route.xy[coarse[k]], xy) < TARGET_REACHED_M:
        k += 1
    k = min(k, len(coarse) - 1)
    return k, min(k + 1, len(coarse) - 1)


def _r3(v: float) -> float:
    return round(float(v), 3)


def measurements(snap: Snapshot, route: DenseRoute, coarse: np.ndarray, referee: Referee, frame_index: int,
                 tick: int, ahead: int, weather: dict, speed_limit: float, lane: str, accel: float,
                 scenario: dict | None, decision: Decision | None) -> Measurements:
    """The measurements of the frame recorded now (tools.dataset.measurements); values rounded to millimetres.
    `decision` is what the driver decided at this frame (None: the policy's input, before it decides)."""
    ego = snap.ego
    xy = np.array([ego.x, ego.y])
    k, k2 = _targets(route, coarse, referee.index, xy)
    tp, tp_next = route.xy[coarse[k]], route.xy[coarse[k2]]
    s_ahead = route.s[referee.index] + ROUTE_AHEAD_SPACING_M * np.arange(ahead)
    route_ahead = np.stack([np.interp(s_ahead, route.s, route.xy[:, i]) for i in (0, 1)], axis=1)
    light = decision.light if decision else None
    leader = decision.leader if decision else None
    light_hazard = bool(light and light["state"] in ("red", "yellow") and light["distance"] < 25.0)
    vehicle_hazard = bool(leader and leader["gap"] < max(8.0, 2.0 * ego.speed + 4.0))
    heading = -math.radians(ego.yaw)  # OpenDRIVE frame: counter-clockwise from +x
    command = RoadOption(int(route.option[coarse[k]]))
    return Measurements(
        frame=frame_index,
        tick=tick,
        time=_r3(snap.time),
        ego={"x": _r3(ego.x), "y": _r3(ego.y), "z": _r3(ego.z), "yaw": _r3(ego.yaw), "speed": _r3(ego.speed),
             "extent": [ego.length, ego.width, ego.height]},
        ego_opendrive={"x": _r3(ego.x), "y": _r3(-ego.y), "heading": round(heading, 5)},
        speed=_r3(ego.speed),
        acceleration=_r3(accel),
        target_speed=_r3(decision.target_speed if decision else 0.0),
        speed_limit=_r3(speed_limit),
        command=int(command),
        next_command=int(route.option[coarse[k2]]),
        command_name=command.name,
        target_point=[_r3(tp[0]), _r3(tp[1])],
        target_point_next=[_r3(tp_next[0]), _r3(tp_next[1])],
        target_point_ego=[_r3(v) for v in world_to_ego(ego, tp[None, :2])[0]],
        route=np.round(route_ahead, 3).tolist(),
        route_index=referee.index,
        route_completion=_r3(referee.completion),
        junction=bool(route.junction[referee.index]),
        lane=lane,
        light=light,
        leader=leader,
        light_hazard=light_hazard,
        vehicle_hazard=vehicle_hazard,
        weather=weather,
        reason=decision.reason if decision else "",
        reason_detail=decision.detail if decision else "",
        control=decision.control.to_dict() if decision else {},
        scenario=scenario,
    )


def box_label(box: Box, ego: Box) -> BoxLabel:
    """The label of an actor's box in a frame whose ego is `ego`; values rounded to millimetres."""
    return _label(box, ego, world_to_ego(ego, np.array([box.x, box.y, box.z])).tolist())


def boxes(snap: Snapshot) -> list[BoxLabel]:
    """Labels of the actors within BOX_RADIUS_M of the ego."""
    ego = snap.ego
    near = [a for a in snap.actors if math.hypot(a.x - ego.x, a.y - ego.y) < BOX_RADIUS_M]
    if not near:
        return []
    centres = world_to_ego(ego, np.array([[a.x, a.y, a.z] for a in near])).tolist()
    return [_label(a, ego, c) for a, c in zip(near, centres, strict=True)]


def _label(box: Box, ego: Box, center_ego: list[float]) -> BoxLabel:
    return BoxLabel(id=box.id, cls=int(box.cls), center=[_r3(box.x), _r3(box.y), _r3(box.z)], yaw=_r3(box.yaw),
                    extent=[_r3(box.length), _r3(box.width), _r3(box.height)], speed=_r3(box.speed),
                    center_ego=[_r3(v) for v in center_ego], yaw_ego=_r3(yaw_to_ego(ego, box.yaw)))


def write_run_json(layout: Layout, key: RunKey, route: Route, town: str, town_file: Path, settings: CollectSettings,
                   rig: RigConfig, dense: DenseRoute, coarse: np.ndarray, repetition: int, seed: int, attempt: int
                   ) -> None:
    """The run's run.json (what every reader of the run looks up: rig, rate, route), from either world."""
    atomic.write_json(layout.run_settings(key), {
        "route": route.id, "town": town, "town_file": str(town_file), "scenario": route.scenario,
        "repetition": repetition, "seed": seed, "attempt": attempt,
        "host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # settings holds the recording rate (sim_hz, record_every: rig.run_rate); frame_dt for the reader.
        "settings": settings.to_dict(), "frame_dt": settings.rate.frame_dt, "rig": rig.to_dict(),
        "route_length": round(dense.length, 3),
        "dense_route": dense.to_dict(), "target_indices": coarse.tolist(), "format": frames.FRAME_FORMAT,
    })


def drive(layout: Layout, key: RunKey, route: Route, town: Town, settings: CollectSettings, repetition: int,
          seed: int, attempt: int) -> results.RouteRecord:
    """Drive the route with the settings' agent; record frames (unless settings.record is off). Returns the
    record for the result file."""
    from tools.collect.agents import make_driver
    from tools.collect.render import Renderer
    from tools.collect.scenarios import Scenarios
    from tools.collect.scene import Scene
    from tools.collect.world import SumoWorld

    started = time.time()
    dense = RoutePlanner(town.carla_map).trace(route.waypoints)
    coarse = dense.target_indices()
    driver = make_driver(settings, dense, 1.0 / settings.sim_hz, town.carla_map)
    rig = driver.rig or settings.load_rig()
    renderer = Renderer(Scene(town, seed=0), rig) if settings.record or driver.needs_sensors else None
    weather = route.weathers[0] if route.weathers else {}
    write_run_json(layout, key, route, town.name, town.xodr, settings, rig, dense, coarse, repetition, seed, attempt)
    results.write_heartbeat(layout, key, 0)
    last_beat = time.monotonic()
    world = SumoWorld(town, dense, seed=seed, vehicles=settings.vehicles, sim_hz=settings.sim_hz)
    referee = Referee(dense, settings, stop_signs(dense, town.carla_map))
    scenarios = Scenarios(route.scenarios, dense, town.carla_map, seed)
    n_frames = 0
    recorded: list[Measurements] = []  # the frames' measurements, for the run's measurements index
    clock = StageClock()
    parts: dict[str, float] = {}
    try:
        while referee.status is None and not referee.arrived:
            s_ego = float(dense.s[referee.index])
            scenarios.update(world, s_ego)
            due = world.tick % settings.record_every == 0 and renderer is not None
            clock.lap("scenarios")
            if due:  # a frame tick: the sensors, and the measurements but for what the driver decides
                snap = world.snapshot()
                clock.lap("snapshot")
                sensors = renderer.render(snap, parts)
                clock.add(parts)
                frame = functools.partial(measurements, snap, dense, coarse, referee, n_frames, world.tick,
                                          settings.route_ahead, weather, world.speed_limit(), world.lane(),
                                          world.ego.accel, scenarios.active(world, s_ego))
            # A policy sees the frame's sensors and measurements (its inputs) before it decides.
            decision = driver.step(world, (sensors, frame(None)) if due and driver.needs_sensors else None)
            clock.lap("driver")
            if due and settings.record:
                recorded.append(frame(decision))
                data = frames.pack_frame(n_frames, recorded[-1], boxes(snap), sensors)
                clock.lap("encoding")
                frames.write_packed(layout.frame_path(key, n_frames), data)
                clock.lap("writing")
                n_frames += 1
            events = world.step(decision.control)
            clock.lap("world (SUMO)")
            ego = world.ego_box()
            referee.update(world.time, np.array([ego.x, ego.y]), ego.speed, events)
            if time.monotonic() - last_beat > HEARTBEAT_EVERY_S:
                results.write_heartbeat(layout, key, world.tick)
                last_beat = time.monotonic()
            clock.lap("referee")
    finally:
        world.close()
    if recorded:  # after the last frame: what the bucket builder reads instead of every frame
        frames.write_run_measurements(layout.run_measurements(key), town.name, recorded)
    global last_stages
    last_stages = dict(clock.seconds, frames=n_frames)
    if referee.arrived and referee.status is None:
        referee.index = len(dense.s) - 1
    record = results.RouteRecord(route_id=route.id, status=referee.final_status(), infractions=referee.infractions,
                                 route_completion=referee.completion, route_length=dense.length,
                                 duration_game=world.time, duration_system=time.time() - started,
                                 scenarios=scenarios.states())
    log.info("%s: %s, %d frames, %.0f%% of %.0f m in %.1f s simulated (%.1f s wall)%s", key, record.status, n_frames,
             record.route_completion, dense.length, world.time, record.duration_system,
             f"; scenarios: {scenarios.summary()}" if route.scenarios else "")
    if n_frames:
        log.info("%s: wall time per recorded frame: %s", key, clock.per(n_frames))
    return record


def run_route(route: str, root: str | None, repetition: int, towns: str | None, route_id: str | None,
              attempt: int | None, force: bool, settings: dict, py123d: bool = False) -> RunKey:
    """Check every argument, claim an attempt, drive, write the result (and with `py123d`, once finished, the
    run's Py123D log: tools.collect.py123d_export). See `python -m tools.collect run`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    cfg = CollectSettings.from_flags(settings)
    route_path = Path(cli.text(route, "route"))
    if not route_path.is_file():
        raise ToolError(f"--route {route}: no such route file")
    repetition = cli.integer(repetition, "repetition", 0)
    force = cli.switch(force, "force")
    py123d = cli.switch(py123d, "py123d")
    if py123d:  # the extra is there, before anything is claimed
        from tools.collect.py123d_export import export_after_run, require_py123d

        require_py123d("--py123d")
    r = select_route(route_path, cli.optional_text(route_id, "route-id"))
    carla_setup = default_towns = None
    if cfg.world == "carla":  # the CARLA install, leaderboard, scenario_runner, client: before anything is claimed
        from tools.collect import carla_run

        carla_setup = carla_run.check_setup()
        carla_run.check_route(route_path, r)
        default_towns = carla_run.install_towns(carla_setup)
    towns_dir = find_towns_dir(route_path, towns, default_towns)
    xodr = town_file(route_path, r, towns_dir)
    check_routes([(route_path, r)], towns_dir)
    layout = Layout(resolve_root(cli.optional_text(root, "root")))
    check_root_writable(layout.root)
    layout.root.mkdir(parents=True, exist_ok=True)
    key = RunKey.for_route(r.scenario, route_path.stem, r.id, repetition)
    lone = attempt is None
    if lone:  # run alone: record it in the manifest (collect has done so for its runs)
        from tools.collect.info import collection_record

        routes = [route_path.absolute()]
        update_manifest(layout, {"command": "run", "argv": sys.argv[1:], "repetition": repetition,
                                 **collection_record(cfg, routes, routes[0].parent, [xodr])},
                        {str(key): {"route": str(route_path.absolute()), "route_id": r.id, "repetition": repetition}})
    else:
        read_manifest(layout)  # refuses a root of another format version

    if attempt is None:  # claim the run: its lock, then the attempt (tools.dataset.results.claim_run)
        claim = results.claim_run(layout, key, redo=force)
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
        claim = results.inherited_claim(layout, key, int(attempt))
    attempt = claim.attempt
    results.discard_run(layout, key)

    seed = derive_seed(route_path.stem, r.id, repetition, cfg.seed)
    log.info("%s: attempt %s, town %s, seed %d", key, attempt, xodr, seed)
    try:  # the claim (the run's lock) is held until the result is written
        try:
            if carla_setup is not None:
                record = carla_run.drive(layout, key, route_path.absolute(), r, cfg, repetition, seed, int(attempt),
                                         carla_setup)
            else:
                record = drive(layout, key, r, Town(xodr), cfg, repetition, seed, int(attempt))
        except ToolError as e:  # the attempt could not drive (a CARLA server that never came up, a town it lacks)
            log.error("%s: the attempt ends as %s (%s)", key, results.FAILED_SIMULATION, type(e).__name__)
            results.write_result(layout, key, results.RouteRecord(route_id=r.id, status=results.FAILED_SIMULATION))
            raise
        except Exception:
            log.error("%s: crashed\n%s", key, traceback.format_exc())
            results.write_result(layout, key, results.RouteRecord(route_id=r.id, status=results.FAILED_SIMULATION))
            raise SystemExit(1) from None
        if layout.frames_dir(key).is_dir():  # frames are written without fsync: durable before the result says so
            atomic.sync_filesystem(layout.frames_dir(key))
        if isinstance(record, Path):  # the CARLA leaderboard evaluator's own result, published unchanged
            if results.publish_checkpoint(layout, key, record) is None:
                results.write_result(layout, key, results.RouteRecord(route_id=r.id,
                                                                      status=results.FAILED_SIMULATION))
        else:
            results.write_result(layout, key, record)
        if py123d:  # a finished run's Py123D log, while the claim keeps others from redoing the run
            export_after_run(layout, key, heartbeat=True)
    finally:
        claim.release()
    if lone:  # a collector writes the dataset card when it ends
        from tools.collect.info import card_after_collection

        card_after_collection(layout)
    return key
