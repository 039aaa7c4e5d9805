"""The embedded world's drive loop: one route driven once in SUMO's traffic, judged by the referee, recorded
frame by frame (tools.collect.base.recording). tools.collect.runner.attempt calls `drive` once it holds the run's
claim, and writes the result it returns."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tools.collect.base.config import CollectSettings
from tools.collect.base.film import RunFilm
from tools.collect.base.processes import peak_memory_mb, process_age
from tools.collect.base.recording import RunRecorder
from tools.collect.base.referee import Referee
from tools.collect.base.routes import Route
from tools.collect.base.town import Town
from tools.collect.sensors.render import Renderer
from tools.collect.sensors.scene import Scene
from tools.collect.sim.scenarios import Scenarios
from tools.collect.sim.world import SumoWorld
from tools.dataset import results
from tools.dataset.layout import Layout, RunKey
from tools.dataset.metric_info import MetricInfoTrack
from tools.expert.drivers import Driver, DriverFailed
from tools.expert.route import DenseRoute, stop_signs

log = logging.getLogger("collect.run")

#: Makes the ego's driver of a run: (dense route, seconds per tick, carla.Map) -> Driver. The expert's is
#: tools.expert.drivers.make_expert; a trained policy's is tools.evaluate's (python -m tools.evaluate route).
DriverFactory = Callable[[DenseRoute, float, Any], Driver]


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


#: Whether this process has driven a route run already (drive's set-up then counts from its own start).
_driven = False
#: The stage seconds of the last route run driven in this process (StageClock.seconds, plus "frames"): read by
#: benchmarks/bench_world.py.
last_stages: dict[str, float] = {}


def drive(layout: Layout, key: RunKey, route: Route, town: Town, settings: CollectSettings, repetition: int,
          seed: int, attempt: int, make_driver: DriverFactory) -> results.RouteRecord:
    """Drive the route with the driver `make_driver` makes; record frames (unless settings.record is off); in an
    evaluation root, film it (tools.collect.base.film: ROOT/results/<Scenario>/<run>.webp). Returns the record for the
    result file."""
    started = time.time()
    # The first route run of a process counts its set-up from the process's start (its imports and town included;
    # a worker's zygote forked it: tools.collect.runner.zygote); a later one in the same process from here.
    global _driven
    begun = started - (process_age() if not _driven else 0.0)
    _driven = True
    scenarios = Scenarios.for_route(route, town.carla_map, seed)
    dense = scenarios.route
    try:
        driver = make_driver(dense, 1.0 / settings.sim_hz, town.carla_map)
    except DriverFailed as e:  # a driver that could not be set up: the run ends before it starts
        log.error("%s: %s", key, e)
        return results.RouteRecord(route_id=route.id, status=e.status, route_length=dense.length,
                                   duration_system=time.time() - started)
    every_tick = getattr(driver, "sensors_every_tick", False)  # a leaderboard agent's sensors deliver every tick
    rig = driver.rig or settings.load_rig()
    needs_renderer = settings.record or driver.needs_sensors
    # On a large town the scene covers the route and the sensors' reach only (Scene's region).
    renderer = Renderer(Scene(town, seed=0, region=Scene.route_region(dense.xy)), rig) if needs_renderer else None
    recorder = RunRecorder(layout, key, route, dense, settings)
    recorder.start(town=town.name, town_file=town.xodr, rig=rig, repetition=repetition, seed=seed, attempt=attempt)
    world = SumoWorld(town, dense, seed=seed, vehicles=settings.vehicles, sim_hz=settings.sim_hz)
    referee = Referee(dense, settings, stop_signs(dense, town.carla_map))
    clock = StageClock()
    parts: dict[str, float] = {}
    # An evaluation's picture of the run: the policy's camera and BEV (or, for the expert, a top view) and plan.
    film = RunFilm(layout.film_path(key), rig if renderer is not None else None) if layout.is_evaluation else None
    # An evaluation's ego kinematics at every tick, for Bench2Drive's smoothness (tools.dataset.metric_info).
    metric = MetricInfoTrack(1.0 / settings.sim_hz) if layout.is_evaluation else None
    # Imports and the town (unless kept by the worker), planning, the driver, the scene and renderer, SUMO's start:
    # everything since the process began until the first tick.
    setup_s = time.time() - begun
    try:
        while referee.status is None and not referee.arrived:
            s_ego = float(dense.s[referee.index])
            if metric is not None:  # the state the driver is about to see, as a leaderboard agent's run_step reads it
                ego = world.ego_box()
                metric.add(ego.x, ego.y, ego.yaw, ego.speed)
            scenarios.update(world, s_ego)
            clock.lap("scenarios")
            snap = sensors = None
            if (recorder.due or every_tick) and renderer is not None:  # a frame tick: the state, scenario, sensors
                snap = dataclasses.replace(world.snapshot(), scenario=scenarios.active(world, s_ego))
                clock.lap("snapshot")
                # The BEV on frame ticks, and for the picture: an agent file's other ticks need none (a millisecond
                # or more a tick at its cameras' rate)
                bev = not every_tick or recorder.due or (film is not None and film.due(world.time))
                sensors = renderer.render(snap, parts, bev=bev)
                clock.add(parts)
            # A policy sees the frame's sensors and measurements (its inputs) before it decides.
            sees = snap is not None and driver.needs_sensors
            try:
                decision = driver.step(world, (sensors, recorder.measurements(snap, referee)) if sees else None)
            except DriverFailed as e:
                log.error("%s: %s", key, e)
                referee.status = e.status
                break
            clock.lap("driver")
            if film is not None and (snap is not None or renderer is None) and film.due(world.time):
                film.add(world.time, world.ego_box(), decision, sensors, world.actors() if renderer is None else None,
                         dense.xy)
                clock.lap("film")
            written: dict[str, float] = {}  # the frame's encoding and writing, if one was due
            recorder.add_frame(snap, referee, decision, sensors, written)
            clock.add(written)
            events = world.step(decision.control)
            clock.lap("world (SUMO)")
            ego = world.ego_box()
            judged = {k: len(v) for k, v in referee.infractions.items()}
            referee.update(world.time, np.array([ego.x, ego.y]), ego.speed, events)
            if film is not None and any(len(v) > judged[k] for k, v in referee.infractions.items()):
                film.add(world.time, ego, decision, None, world.actors(), dense.xy,
                         [k for k, v in referee.infractions.items() if len(v) > judged[k]])
            clock.lap("referee")
    finally:
        world.close()
        if callable(getattr(driver, "close", None)):
            driver.close()
    if film is not None:
        t = time.perf_counter()
        written = film.write()
        log.info("%s: picture %s: %d frames, %.1f s of wall time (%.1f s writing)", key, written, len(film.frames),
                 clock.seconds.get("film", 0.0) + time.perf_counter() - t, time.perf_counter() - t)
    recorder.finish()
    n_frames = recorder.frames
    global last_stages
    last_stages = dict(clock.seconds, frames=n_frames)
    if referee.arrived and referee.status is None:
        referee.index = len(dense.s) - 1
    referee.finish()
    if metric is not None:
        metric.write(layout.metric_info(key))
    record = results.RouteRecord(route_id=route.id, status=referee.final_status(), infractions=referee.infractions,
                                 route_completion=referee.completion, route_length=dense.length,
                                 duration_game=world.time, duration_system=time.time() - started,
                                 scenarios=scenarios.states(),
                                 bench2drive_min_speed=list(referee.min_speed_bench2drive.values),
                                 min_speed=list(referee.min_speed.values))
    if referee.stopped:
        log.info("%s: --stop-on-infraction: the run ends at its first infraction, %s", key, referee.stopped)
    log.info("%s: %s, %d frames, %.0f%% of %.0f m in %.1f s simulated (%.1f s wall, %.1f s of it set-up; "
             "peak %.0f MB)%s", key, record.status, n_frames, record.route_completion, dense.length, world.time,
             time.time() - begun, setup_s, peak_memory_mb(),
             f"; scenarios: {scenarios.summary()}" if route.scenarios else "")
    if n_frames:
        log.info("%s: wall time per recorded frame: %s", key, clock.per(n_frames))
    return record
