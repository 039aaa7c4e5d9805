"""The embedded world's ego: a kinematic bicycle moved by a control (tools.expert.control.Control).

SUMO does not drive the ego: each tick this model turns the driver's control into a new pose, and the
world places the ego there (tools.collect.sim.world). The same numbers as the controllers' (wheelbase,
steer range, acceleration limits), so that a planned acceleration is the one the car makes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tools.expert.control import MAX_ACCEL, MAX_DECEL, MAX_STEER_DEG, WHEELBASE_M, Control

#: Rolling resistance and drag at zero throttle, m/s^2 (a coasting car slows down slowly).
COAST_DECEL = 0.3
#: How fast the front wheels turn, degrees per second (the steering is not instantaneous).
STEER_RATE_DEG = 120.0
#: Top speed, m/s.
MAX_SPEED = 30.0


@dataclass
class Bicycle:
    """Pose of the box centre (world frame, yaw in degrees), speed along the heading, front-wheel angle."""

    x: float
    y: float
    yaw: float
    speed: float = 0.0
    wheel_deg: float = 0.0
    accel: float = 0.0  # the last tick's acceleration, m/s^2

    def step(self, control: Control, dt: float) -> None:
        target = max(-1.0, min(1.0, control.steer)) * MAX_STEER_DEG
        change = max(-STEER_RATE_DEG * dt, min(STEER_RATE_DEG * dt, target - self.wheel_deg))
        self.wheel_deg += change
        accel = control.throttle * MAX_ACCEL - control.brake * MAX_DECEL - (COAST_DECEL if self.speed > 0 else 0.0)
        speed = min(max(self.speed + accel * dt, 0.0), MAX_SPEED)
        self.accel = (speed - self.speed) / dt
        mean = 0.5 * (speed + self.speed)
        # Rear-axle bicycle, integrated at the box centre (half a wheelbase ahead of the rear axle).
        yaw = math.radians(self.yaw)
        slip = math.atan(0.5 * math.tan(math.radians(self.wheel_deg)))
        self.x += mean * math.cos(yaw + slip) * dt
        self.y += mean * math.sin(yaw + slip) * dt
        self.yaw = math.degrees(yaw + mean / (WHEELBASE_M / 2) * math.sin(slip) * dt)
        self.yaw = (self.yaw + 180.0) % 360.0 - 180.0
        self.speed = speed
