"""From a plan to a control: the lateral and longitudinal controllers every driver of the ego shares.

A plan is a path (world points ahead of the ego, in driving order) and a target speed. The expert
(tools.expert.expert) plans on the route's centreline; a trained policy (tools.evaluate.policy) plans
waypoints and a target speed. Both go through `Controller` so that they differ in what they plan,
not in how it is driven. The control is CARLA's `VehicleControl` vocabulary: steer in [-1, 1]
(positive to the right), throttle and brake in [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Front-wheel angle at full steer (steer = 1), degrees: a CARLA Lincoln MKZ's is about 70 at the
#: steering wheel's stop; what matters here is the bicycle's wheel angle, and 35 degrees turns a 2.9 m
#: wheelbase car on a 4 m radius, tighter than any junction needs.
MAX_STEER_DEG = 35.0
#: Wheelbase of the ego (front to rear axle), metres.
WHEELBASE_M = 2.9
#: Acceleration at full throttle and deceleration at full brake, m/s^2.
MAX_ACCEL = 3.5
MAX_DECEL = 8.0


@dataclass(frozen=True)
class Control:
    steer: float = 0.0  # [-1, 1], positive to the right
    throttle: float = 0.0  # [0, 1]
    brake: float = 0.0  # [0, 1]

    def to_dict(self) -> dict[str, float]:
        return {"steer": round(self.steer, 4), "throttle": round(self.throttle, 4), "brake": round(self.brake, 4)}


def pure_pursuit(x: float, y: float, yaw_deg: float, speed: float, path: np.ndarray) -> float:
    """Steer (in [-1, 1]) that puts a rear-axle bicycle at (x, y, yaw) on a circle through the path point
    one lookahead distance away. The path is (N, 2) world points in driving order."""
    if len(path) == 0:
        return 0.0
    yaw = math.radians(yaw_deg)
    c, s = math.cos(yaw), math.sin(yaw)
    rear_x, rear_y = x - c * WHEELBASE_M / 2, y - s * WHEELBASE_M / 2
    lookahead = min(max(3.0 + 0.35 * speed, 4.0), 12.0)
    d = np.hypot(path[:, 0] - rear_x, path[:, 1] - rear_y)
    ahead = np.nonzero(d >= lookahead)[0]
    goal = path[ahead[0]] if len(ahead) else path[-1]
    dx, dy = goal[0] - rear_x, goal[1] - rear_y
    lateral = -s * dx + c * dy  # ego frame y (right positive)
    dist2 = max(dx * dx + dy * dy, 1e-6)
    curvature = 2.0 * lateral / dist2
    angle = math.degrees(math.atan(WHEELBASE_M * curvature))
    return min(max(angle / MAX_STEER_DEG, -1.0), 1.0)


class Controller:
    """Lateral pure pursuit and a longitudinal PI controller on the speed error (per tick of `dt` s)."""

    KP = 1.5  # desired acceleration (m/s^2) per m/s of speed error
    KI = 0.2

    def __init__(self, dt: float):
        self.dt = dt
        self.integral = 0.0

    def __call__(self, x: float, y: float, yaw: float, speed: float, path: np.ndarray, target_speed: float
                 ) -> Control:
        steer = pure_pursuit(x, y, yaw, speed, path)
        error = float(target_speed) - speed
        if target_speed < 0.05 and speed < 0.5:  # hold still: full brake, no creeping
            self.integral = 0.0
            return Control(steer=steer, throttle=0.0, brake=1.0)
        self.integral = min(max(self.integral + error * self.dt, -2.0), 2.0)
        accel = self.KP * error + self.KI * self.integral
        if accel >= 0.0:
            return Control(steer=steer, throttle=float(min(accel / MAX_ACCEL, 1.0)), brake=0.0)
        if accel > -0.3:  # coast: rolling resistance slows the car a little
            return Control(steer=steer, throttle=0.0, brake=0.0)
        return Control(steer=steer, throttle=0.0, brake=float(min(-accel / MAX_DECEL, 1.0)))

    def reset(self) -> None:
        self.integral = 0.0
