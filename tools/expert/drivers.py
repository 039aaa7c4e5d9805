"""Who drives the ego in a route run: the `Driver` protocol and the expert's driver.

A driver's `step(world, inputs)` returns a tools.expert.expert.Decision (its control and why) every
tick; `world` is a tools.expert.expert.WorldView. `inputs` is (sensors, measurements) of a frame tick
for a driver that sees sensors (`needs_sensors`), else None. A trained policy's driver lives with the
evaluation (tools.evaluate.driver.PolicyDriver); both turn their plan into a control with the same
controllers (tools.expert.control.Controller).

A driver may also have `sensors_every_tick` (true: the drive loop renders its rig on every tick, not only on frame
ticks, and passes it as `inputs`) and `close()` (called once when the run ends, however it ends); a driver that
cannot go on raises DriverFailed with the run's status (a leaderboard agent's: tools.evaluate.leaderboard.host).
"""

from __future__ import annotations

from typing import Any, Protocol

from tools.dataset.rig import RigConfig
from tools.expert.expert import Decision, Expert, WorldView
from tools.expert.route import DenseRoute


class DriverFailed(Exception):
    """The driver cannot drive on: the run ends with `status` (a tools.dataset.results status); the message is one
    line naming what failed."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class Driver(Protocol):
    """What the drive loops need of a driver (the embedded world's and our CARLA agent's)."""

    needs_sensors: bool
    rig: RigConfig | None  # the rig the driver needs (a policy's), or None: the collection's

    def step(self, world: WorldView, inputs: Any = None) -> Decision: ...


class ExpertDriver:
    """The privileged expert (tools.expert.expert): it sees the world state, no sensors."""

    needs_sensors = False
    rig: RigConfig | None = None

    def __init__(self, route: DenseRoute, dt: float, carla_map: Any):
        self.expert = Expert(route, dt, carla_map)

    def step(self, world: WorldView, inputs: Any = None) -> Decision:
        return self.expert.step(world)


def make_expert(route: DenseRoute, dt: float, carla_map: Any) -> ExpertDriver:
    """The driver factory of collection (tools.collect.sim.drive.DriverFactory): the expert on `route`."""
    return ExpertDriver(route, dt, carla_map)
