"""A trained policy as the ego's driver of a route run (tools.expert.drivers.Driver), for closed-loop evaluation.

`python -m tools.evaluate route` drives one route run with it: the embedded world's attempt and drive loop
(tools.collect.runner.attempt, tools.collect.sim.drive) with this driver in place of the expert. Collection
never imports it (nothing under tools/collect imports torch).

How the plan becomes controls (as TransFuser++'s agent, Jaeger et al., ICCV 2023): the wheel follows the
predicted route (the path ahead, whatever the speed), the pedal the predicted target speed, capped by what
the route's curves allow (the expert's curve rule: lateral acceleration A_LAT, braking at IDM_DECEL towards
each curve). Steering along the speed-dependent waypoints instead went straight through junctions: coming
too fast, the planner's waypoints hardly bend (docs/training.md, "Why the policy stopped"). While the model's light
head says that a red or yellow light holds the ego (probability above LIGHT_STOP_P), the target speed is 0: the
planner's target speed alone ran red lights (docs/training.md "Red lights"). DRIVEKIT_LIGHT_RULE=off drives without
that rule (the ablation of that table), with the same checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from tools.dataset.geometry import ego_to_world
from tools.dataset.measurements import Measurements
from tools.evaluate.policy import Policy, load_policy
from tools.expert.control import Control, Controller
from tools.expert.expert import A_LAT, IDM_DECEL, Decision, WorldView
from tools.expert.route import DenseRoute
from tools.train.model import LIGHT_STOP_P

#: The environment variable that turns the light rule off ("off"; anything else, or unset: on).
LIGHT_RULE_ENV = "DRIVEKIT_LIGHT_RULE"


def light_rule_on() -> bool:
    """Whether drivers stop for the light head (LIGHT_RULE_ENV is not "off")."""
    return os.environ.get(LIGHT_RULE_ENV, "on").strip().lower() != "off"


def curve_speed(route: np.ndarray) -> float:
    """The highest speed (m/s) from which the ego can brake at IDM_DECEL into every curve of `route` ((N, 2),
    ego frame, in driving order) at a lateral acceleration of A_LAT; inf when it is straight or too short."""
    step = np.diff(np.concatenate([np.zeros((1, 2)), route]), axis=0)
    length = np.hypot(step[:, 0], step[:, 1])
    keep = length > 0.2  # repeated points (the route's end) have no heading
    if keep.sum() < 3:
        return float("inf")
    step, length = step[keep], length[keep]
    heading = np.unwrap(np.arctan2(step[:, 1], step[:, 0]))
    s = np.cumsum(length)
    # Curvature over two segments (about 4 m: the expert's +-3 m), at the distance of the middle point.
    curvature = np.abs(heading[2:] - heading[:-2]) / np.maximum(s[2:] - s[:-2], 1e-3)
    speed = np.sqrt(A_LAT / np.maximum(curvature, 1e-4))
    return float(np.sqrt(speed**2 + 2 * IDM_DECEL * s[1:-1]).min())


class Pilot:
    """A checkpoint at the wheel, whoever hands it its inputs: the plan (a route and a target speed) predicted from a
    frame's sensors and measurements, tracked by the controllers at every tick until the next one. The embedded
    world's PolicyDriver and the leaderboard agent file of our policy (tools/evaluate/leaderboard/policy_agent.py)
    both drive with it."""

    def __init__(self, policy: Policy, dt: float):
        self.policy = policy
        self.controller = Controller(dt)
        self.path = np.zeros((0, 2))
        self.target_speed = 0.0
        self.light_rule = light_rule_on()
        self.light: float | None = None  # the light head's probability in the latest plan (None: no head)

    def plan(self, sensors: dict[str, np.ndarray], m: Measurements, pose: Any) -> None:
        """A new plan from one frame's sensors (arrays by the rig's names) and measurements; `pose` (x, y, yaw) is
        where the ego is, to put the predicted route into the world."""
        plan = self.policy.predict(sensors, m)
        route = np.asarray(plan.route, dtype=np.float64)
        self.path = ego_to_world(pose, route)
        self.target_speed = min(float(plan.target_speed), curve_speed(route))
        self.light = plan.light
        if self.stops_for_light():
            self.target_speed = 0.0  # a red or yellow light holds the ego: stop

    def stops_for_light(self) -> bool:
        """Whether the latest plan stops for a light: the light head says one holds the ego, and the rule is on."""
        return self.light_rule and self.light is not None and self.light > LIGHT_STOP_P

    def detail(self) -> str:
        """What the latest plan says about lights, for the run's pictures (a frame's reason_detail)."""
        if self.light is None:
            return ""
        return f"light head {self.light:.2f}" + (": stops" if self.stops_for_light() else "")

    def control(self, x: float, y: float, yaw: float, speed: float) -> Control:
        """This tick's control: the ego at (x, y) heading `yaw` (degrees) at `speed` (m/s) on the plan."""
        return self.controller(x, y, yaw, speed, self.path, self.target_speed)


class PolicyDriver:
    """A trained checkpoint (tools.evaluate.policy) driving the embedded world's ego: its Pilot sees the rendered
    rig and the frame's measurements at every frame tick."""

    needs_sensors = True

    def __init__(self, checkpoint: str, dt: float):
        self.policy = load_policy(checkpoint)
        self.rig = self.policy.rig
        self.pilot = Pilot(self.policy, dt)

    def step(self, world: WorldView, inputs: tuple[dict, Measurements] | None = None) -> Decision:
        ego = world.ego_box()
        if inputs is not None:
            sensors, m = inputs  # the renderer's {name: (array, codec)}: the policy takes the arrays
            self.pilot.plan({name: array for name, (array, _) in sensors.items()}, m, ego)
        control = self.pilot.control(ego.x, ego.y, ego.yaw, ego.speed)
        return Decision(control=control, target_speed=self.pilot.target_speed, reason="policy",
                        detail=self.pilot.detail(), path=self.pilot.path)


def policy_factory(checkpoint: str) -> Callable[[DenseRoute, float, Any], PolicyDriver]:
    """The driver factory (tools.collect.sim.drive.DriverFactory) of a checkpoint: the policy ignores the route
    and the map, it sees the frame's sensors and measurements."""
    return lambda route, dt, carla_map: PolicyDriver(checkpoint, dt)
