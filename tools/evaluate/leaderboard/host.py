"""A researcher's own leaderboard 2.0 agent as the ego's driver (tools.expert.drivers.Driver) in the embedded world,
driven as the leaderboard 2.0 evaluator drives it (leaderboard-2.0 leaderboard/leaderboard_evaluator.py
`_load_and_run_scenario`, leaderboard/scenarios/scenario_manager.py `_tick_scenario`):

1. the agent file is imported by path (its folder first on sys.path, as the evaluator does), and the class its
   `get_entry_point()` names is built with (host, port, debug);
2. `set_global_plan(gps_plan, world_plan)`: the plan the leaderboard builds: the route's waypoints joined on the
   carla.Map about 1 m apart with their RoadOptions (tools.expert.planner's dense route, the evaluator's
   `interpolate_trajectory`), in world coordinates (carla.Transform) and GPS (geo.plan_gps); the base class keeps a
   downsampled copy;
3. `setup(config path)`, then `sensors()`, checked with the leaderboard's rules for the agent's track
   (sensors.validate) and what the embedded world can render (sensors.suite);
4. every 20 Hz tick: the game time and the hero's state advance, the tick's sensor data goes into the agent's
   sensor interface, and the agent is called (`agent()`: its base class's `__call__`, which calls
   `run_step(input_data, timestamp)`); its carla.VehicleControl drives the ego;
5. `destroy()` at the end, whatever the end.

The leaderboard, scenario_runner and CARLA agents modules the agent imports are the user's when LEADERBOARD_ROOT,
SCENARIO_RUNNER_ROOT (and an importable `agents`) are set, else drivekit's stand-ins (compat/: written for the
embedded world, without a CARLA server). Failures end the run as the leaderboard ends it, in one line naming the
agent file and the route: "Failed - Agent couldn't be set up" (no import, no entry point, the constructor,
set_global_plan or setup raising or taking longer than the timeout), "Failed - Agent's sensors were invalid",
"Failed - Agent crashed" (run_step raising, a world call the embedded world refuses, a control that is not a
carla.VehicleControl), "Failed - Agent timed out" (one call of the agent longer than the timeout).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import carla
import numpy as np

from tools.dataset import results
from tools.dataset.metric_info import kinematics
from tools.evaluate.leaderboard import geo
from tools.evaluate.leaderboard.sensors import SensorReader, SensorsInvalid, suite, validate
from tools.evaluate.leaderboard.world import EmbeddedWorld, Hero, HeroState
from tools.expert.control import Control
from tools.expert.drivers import DriverFailed
from tools.expert.expert import Decision, WorldView
from tools.expert.route import DenseRoute

log = logging.getLogger("evaluate.leaderboard")

#: drivekit's stand-in roots (module docstrings there say what each holds).
COMPAT = Path(__file__).resolve().parent / "compat"
#: What the evaluator passes the agent's constructor (leaderboard_evaluator.py's defaults).
HOST, PORT = "localhost", 2000
#: The evaluator's --timeout default (seconds): the longest set-up and the longest call of the agent.
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class AgentSettings:
    """One leaderboard agent run: the agent file, its configuration (the evaluator's --agent-config), the track it
    is submitted to (the evaluator's --track; "": the agent's own, as if --track named it), the sensors' noise (the
    leaderboard's; off for checks), the watchdog's seconds."""

    agent_file: str
    agent_config: str = ""
    track: str = ""
    noise: bool = True
    timeout_s: float = TIMEOUT_S
    debug: int = 0
    seed: int = 0


def roots(environ: dict[str, str] | None = None) -> list[Path]:
    """The folders put first on sys.path for the agent's imports: the user's LEADERBOARD_ROOT and
    SCENARIO_RUNNER_ROOT when set, else our stand-ins; our stand-in of CARLA's `agents` when none is importable."""
    env = os.environ if environ is None else environ
    out = [Path(env["LEADERBOARD_ROOT"]) if env.get("LEADERBOARD_ROOT") else COMPAT / "leaderboard_root",
           Path(env["SCENARIO_RUNNER_ROOT"]) if env.get("SCENARIO_RUNNER_ROOT") else COMPAT / "scenario_runner_root"]
    if importlib.util.find_spec("agents") is None:
        out.append(COMPAT / "carla_agents_root")
    return out


def install_roots(environ: dict[str, str] | None = None) -> None:
    for root in reversed(roots(environ)):
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))


def load_entry_class(agent_file: Path) -> type:
    """The agent class of a leaderboard agent file, imported as the evaluator imports it (its folder first on
    sys.path, the module by its file name). Exceptions name what is wrong."""
    if not agent_file.is_file():
        raise FileNotFoundError(f"no such agent file {agent_file}")
    folder, name = str(agent_file.parent.resolve()), agent_file.stem
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = importlib.import_module(name)
    if not hasattr(module, "get_entry_point"):
        raise AttributeError(f"{agent_file.name} defines no get_entry_point()")
    entry = module.get_entry_point()
    if not hasattr(module, str(entry)):
        raise AttributeError(f"get_entry_point() names {entry!r}, which {agent_file.name} does not define")
    return getattr(module, str(entry))


def plans(route: DenseRoute, carla_map: Any) -> tuple[list, list]:
    """The leaderboard's (gps_plan, world_plan) of a dense route: [({'lat', 'lon', 'z'}, RoadOption)] and
    [(carla.Transform, RoadOption)], on the ground of the flat embedded world (z 0)."""
    from agents.navigation.local_planner import RoadOption

    lat_ref, lon_ref = geo.latlon_ref(carla_map.to_opendrive())
    gps, world = [], []
    for (x, y), yaw, option in zip(route.xy.tolist(), route.yaw.tolist(), route.option.tolist(), strict=True):
        command = RoadOption(int(option))
        world.append((carla.Transform(carla.Location(x=x, y=y, z=0.0), carla.Rotation(yaw=yaw)), command))
        gps.append((geo.plan_gps(lat_ref, lon_ref, x, y, 0.0), command))
    return gps, world


class _TimedOut(BaseException):
    """The watchdog's interruption (a BaseException, so the agent's own `except Exception` cannot swallow it)."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` of wall time (SIGALRM, in the main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread() or not seconds or seconds <= 0:
        yield
        return

    def fire(signum, frame):
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class LeaderboardAgentDriver:
    """The agent of `settings.agent_file` driving the ego of one route run (the Driver protocol)."""

    needs_sensors = True
    #: The drive loop renders this driver's rig every tick (the leaderboard's sensors deliver every tick).
    sensors_every_tick = True

    def __init__(self, settings: AgentSettings, route: DenseRoute, dt: float, carla_map: Any, route_id: str = ""):
        self.settings = settings
        # The drive loop's line names the run (its key); the route id, when given, is said too.
        self.where = f"{settings.agent_file}: route {route_id}" if route_id else str(settings.agent_file)
        self.dt = dt
        self.map = carla_map
        self.agent: Any = None
        self.ticks = 0
        self._destroyed = False
        self._reverse_warned = False
        self.rig = None
        try:
            with watchdog(settings.timeout_s):
                self._set_up(route)
        except DriverFailed:
            self.close()
            raise
        except _TimedOut:
            self.close()
            raise self._fail(results.FAILED_SETUP,
                             f"the agent took longer than {settings.timeout_s:g} s to set up") from None
        except (Exception, SystemExit) as e:  # an agent that exits fails, the run goes on
            self.close()
            raise self._fail(results.FAILED_SETUP, _one_line(e)) from None

    def _fail(self, status: str, why: str) -> DriverFailed:
        return DriverFailed(status, f"{self.where}: {status}: {why}")

    def _set_up(self, route: DenseRoute) -> None:
        s = self.settings
        install_roots()
        cls = load_entry_class(Path(s.agent_file))
        self.agent = cls(HOST, PORT, s.debug)
        gps, world_plan = plans(route, self.map)
        self.agent.set_global_plan(gps, world_plan)
        self.agent.setup(s.agent_config)
        sensor_list = self.agent.sensors()
        try:
            track = getattr(self.agent, "track", "SENSORS")
            validate(sensor_list, track, s.track or str(getattr(track, "value", track)))
            specs, self.rig = suite(sensor_list, self.dt)
        except SensorsInvalid as e:
            raise self._fail(results.FAILED_SENSORS, str(e)) from None
        self.reader = SensorReader(specs, self.rig, self.map, self.dt, s.noise, s.seed)
        for spec in specs:
            self.agent.sensor_interface.register_sensor(spec.id, spec.type, spec)
        # The world as CarlaDataProvider hands it out, and the game time, in whichever modules the agent got.
        from srunner.scenariomanager.carla_data_provider import CarlaDataProvider
        from srunner.scenariomanager.timer import GameTime

        self.cdp, self.game_time = CarlaDataProvider, GameTime
        self.world = EmbeddedWorld(self.map, self.dt)
        self._previous: HeroState | None = None
        self.hero: Hero | None = None
        GameTime.restart()
        CarlaDataProvider._world = self.world
        CarlaDataProvider._map = self.map
        CarlaDataProvider._sync_flag = True
        CarlaDataProvider._carla_actor_pool = {}

    def _advance(self, world: WorldView) -> HeroState:
        """The hero's state at this tick (velocity along the heading, acceleration and yaw rate by difference)."""
        ego = world.ego_box()
        p = self._previous
        (vx, vy), (ax, ay), yaw_rate = kinematics(ego.yaw, ego.speed,
                                                  (p.velocity[0], p.velocity[1], p.yaw) if p else None, self.dt)
        state = HeroState(ego.x, ego.y, ego.yaw, (vx, vy, 0.0), (ax, ay, 0.0), yaw_rate, ego.speed)
        self._previous = state
        if self.hero is None:
            self.hero = Hero(ego, self.world)
            self.world.hero = self.hero
            self.cdp._carla_actor_pool[self.hero.id] = self.hero
        self.hero.state = state
        self.hero.speed_limit_kmh = float(world.speed_limit()) * 3.6
        return state

    def step(self, world: WorldView, inputs: Any = None) -> Decision:
        if inputs is None:
            raise RuntimeError("the leaderboard agent driver needs the rig rendered every tick "
                               "(the drive loop's sensors_every_tick)")
        rendered, _ = inputs
        self.ticks += 1
        frame = self.ticks
        hero = self._advance(world)
        timestamp = self.world.tick_to(frame, world.time + self.dt)
        self.game_time.on_carla_tick(timestamp)
        for name, value in (("_actor_location_map", self.hero.get_location()),
                            ("_actor_transform_map", self.hero.get_transform()),
                            ("_actor_velocity_map", math.hypot(*hero.velocity))):
            if isinstance(getattr(self.cdp, name, None), dict):
                getattr(self.cdp, name)[self.hero] = value
        for tag, (f, data) in self.reader.read(rendered, hero, frame).items():
            self.agent.sensor_interface.update_sensor(tag, data, f)
        try:
            with watchdog(self.settings.timeout_s):
                control = self.agent()
        except _TimedOut:
            raise self._fail(results.FAILED_TIMEOUT, f"one call of the agent took longer than "
                                                     f"{self.settings.timeout_s:g} s (tick {frame})") from None
        except (Exception, SystemExit) as e:
            raise self._fail(results.FAILED_AGENT, f"{_one_line(e)} (tick {frame})") from None
        if not isinstance(control, carla.VehicleControl):
            raise self._fail(results.FAILED_AGENT, f"run_step returned {type(control).__name__}, not a "
                                                   f"carla.VehicleControl (tick {frame})")
        self.hero.control = control
        return Decision(control=self._control(control), target_speed=float(hero.speed), reason="")

    def _control(self, c: carla.VehicleControl) -> Control:
        """Our control of a carla.VehicleControl: steer, throttle, brake clipped to CARLA's ranges; the hand brake
        as full brake; reverse is not modelled (said once)."""
        if c.reverse and not self._reverse_warned:
            log.warning("%s: the agent asks for reverse, which the embedded world's ego does not model", self.where)
            self._reverse_warned = True
        brake = 1.0 if c.hand_brake else float(np.clip(c.brake, 0.0, 1.0))
        return Control(steer=float(np.clip(c.steer, -1.0, 1.0)), throttle=float(np.clip(c.throttle, 0.0, 1.0)),
                       brake=brake)

    def close(self) -> None:
        """The agent's destroy(), once, whatever ended the run; its error is logged, not raised."""
        if self._destroyed or self.agent is None:
            return
        self._destroyed = True
        try:
            with watchdog(self.settings.timeout_s):
                self.agent.destroy()
        except (Exception, _TimedOut) as e:
            log.error("%s: the agent's destroy() failed: %s", self.where, _one_line(e))
        cleanup = getattr(getattr(self, "cdp", None), "cleanup", None)
        if callable(cleanup):
            with contextlib.suppress(Exception):
                cleanup()


def agent_factory(settings: AgentSettings, route_id: str = "") -> Callable[[DenseRoute, float, Any],
                                                                          LeaderboardAgentDriver]:
    """The driver factory (tools.collect.sim.drive.DriverFactory) of a leaderboard agent."""
    return lambda route, dt, carla_map: LeaderboardAgentDriver(settings, route, dt, carla_map, route_id)
