"""Who drives the ego in a route run (the `agent` collection setting): the expert, or a trained policy.

A driver's `step(world, inputs)` returns a tools.expert.expert.Decision (its control and why) every
tick; `world` is a tools.expert.expert.WorldView. `inputs` is (sensors, measurements) of a frame tick
for a driver that sees sensors (`needs_sensors`), else None. Both turn their plan into a control with
the same controllers (tools.expert.control.Controller).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tools.collect.config import CollectSettings
from tools.collect.planner import DenseRoute
from tools.dataset.geometry import ego_to_world
from tools.dataset.measurements import Measurements
from tools.dataset.rig import RigConfig
from tools.expert.control import Controller
from tools.expert.expert import Decision, Expert, WorldView


class ExpertDriver:
    """The privileged expert (tools.expert.expert): it sees the world state, no sensors."""

    needs_sensors = False
    rig: RigConfig | None = None

    def __init__(self, route: DenseRoute, dt: float, carla_map: Any):
        self.expert = Expert(route, dt, carla_map)

    def step(self, world: WorldView, inputs: Any = None) -> Decision:
        return self.expert.step(world)


class PolicyDriver:
    """A trained checkpoint (tools.evaluate.policy): waypoints and a target speed predicted from the frame's
    sensors at every frame tick, tracked by the controllers until the next one."""

    needs_sensors = True

    def __init__(self, checkpoint: str, dt: float):
        from tools.evaluate.policy import load_policy

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


def make_driver(settings: CollectSettings, route: DenseRoute, dt: float, carla_map: Any
                ) -> ExpertDriver | PolicyDriver:
    if settings.agent == "policy":
        return PolicyDriver(settings.checkpoint, dt)
    return ExpertDriver(route, dt, carla_map)
