"""A trained policy as the ego's driver of a route run (tools.expert.drivers.Driver), for closed-loop evaluation.

`python -m tools.evaluate route` drives one route run with it: the embedded world's attempt and drive loop
(tools.collect.runner.attempt, tools.collect.sim.drive) with this driver in place of the expert. Collection
never imports it (nothing under tools/collect imports torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tools.dataset.geometry import ego_to_world
from tools.dataset.measurements import Measurements
from tools.evaluate.policy import load_policy
from tools.expert.control import Controller
from tools.expert.expert import Decision, WorldView
from tools.expert.planner import DenseRoute


class PolicyDriver:
    """A trained checkpoint (tools.evaluate.policy): waypoints and a target speed predicted from the frame's
    sensors at every frame tick, tracked by the controllers until the next one."""

    needs_sensors = True

    def __init__(self, checkpoint: str, dt: float):
        self.policy = load_policy(checkpoint)
        self.rig = self.policy.rig
        self.controller = Controller(dt)
        self.path = np.zeros((0, 2))
        self.target_speed = 0.0

    def step(self, world: WorldView, inputs: tuple[dict, Measurements] | None = None) -> Decision:
        ego = world.ego_box()
        if inputs is not None:
            sensors, m = inputs  # the renderer's {name: (array, codec)}: the policy takes the arrays
            plan = self.policy.predict({name: array for name, (array, _) in sensors.items()}, m)
            self.path = ego_to_world(ego, np.asarray(plan.waypoints, dtype=np.float64))
            self.target_speed = float(plan.target_speed)
        control = self.controller(ego.x, ego.y, ego.yaw, ego.speed, self.path, self.target_speed)
        return Decision(control=control, target_speed=self.target_speed, reason="policy", path=self.path)


def policy_factory(checkpoint: str) -> Callable[[DenseRoute, float, Any], PolicyDriver]:
    """The driver factory (tools.collect.sim.drive.DriverFactory) of a checkpoint: the policy ignores the route
    and the map, it sees the frame's sensors and measurements."""
    return lambda route, dt, carla_map: PolicyDriver(checkpoint, dt)
