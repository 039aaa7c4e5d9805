"""The bucket rules: which behaviour bucket one recorded frame belongs to (docs/buckets.md, the table).

A frame goes to the first bucket of `BUCKETS` whose rule holds on its measurements
(tools.dataset.measurements.Measurements). The thresholds are `RULES`; every bucket file records them
under `settings.rules`, and the builder's frame index is reused only with the same rules, so changing
a threshold means bumping `RULES["version"]`: the next build reads every frame again.
"""

from __future__ import annotations

import math
from typing import Any

from tools.dataset.measurements import Measurements, RoadOption

#: Buckets in the order their rules are tried: a frame goes to the first whose rule holds.
BUCKETS = ("stop", "start", "hazard", "turn", "junction", "follow")

#: Thresholds of the rules (docs/buckets.md). Changing one changes `version`: the index is redone.
RULES: dict[str, Any] = {
    "version": 1,
    "stand_speed": 0.5,  # m/s: below it the ego stands
    "start_speed": 4.0,  # m/s: below it, with a target speed start_margin higher, the ego is starting
    "start_margin": 2.0,  # m/s
    "turn_angle": 30.0,  # degrees: the route turns by more than this within turn_ahead metres
    "turn_ahead": 20.0,  # metres
}

#: Commands that make a frame a turn whatever the route's shape.
TURN_COMMANDS = (RoadOption.LEFT, RoadOption.RIGHT)


def route_turn(route: list[list[float]], ahead: float) -> float:
    """Largest heading change (degrees) of the route within `ahead` metres, relative to its first segment."""
    headings, travelled = [], 0.0
    for (x0, y0), (x1, y1) in zip(route, route[1:], strict=False):
        if travelled > ahead:
            break
        step = math.hypot(x1 - x0, y1 - y0)
        if step > 1e-6:
            headings.append(math.atan2(y1 - y0, x1 - x0))
        travelled += step
    if len(headings) < 2:
        return 0.0
    return max(abs(math.degrees((h - headings[0] + math.pi) % (2 * math.pi) - math.pi)) for h in headings)


def classify(m: Measurements, rules: dict[str, Any] = RULES) -> str:
    """The behaviour bucket of one frame's measurements (the rules of docs/buckets.md, in order)."""
    speed, target = float(m.speed), float(m.target_speed)
    stand = rules["stand_speed"]
    if speed < stand and target < stand:
        return "stop"
    if speed < rules["start_speed"] and target > speed + rules["start_margin"]:
        return "start"
    if speed >= stand and (m.light_hazard or m.vehicle_hazard):
        return "hazard"
    junction = bool(m.junction)
    if m.command in TURN_COMMANDS:
        return "turn"
    if junction and route_turn(m.route, rules["turn_ahead"]) > rules["turn_angle"]:
        return "turn"
    if junction:
        return "junction"
    return "follow"
