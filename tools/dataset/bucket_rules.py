"""The bucket rules: which bucket one recorded frame belongs to (docs/buckets.md, the table).

A frame goes to the first bucket of `BUCKETS` whose rule holds on its measurements
(tools.dataset.measurements.Measurements): first the scenario buckets (`SCENARIO_BUCKETS`, only for frames
recorded while a route scenario runs, tools.collect.sim.scenarios), then the behaviour buckets, which every
frame falls through to. The thresholds are `RULES`; every bucket file records them
under `settings.rules`, and the builder's frame index is reused only with the same rules, so changing
a threshold means bumping `RULES["version"]`: the next build reads every frame again.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.semantics import ACTOR_KINDS

#: Scenario buckets, tried first: a frame of a running scenario (measurements `scenario`) where the ego
#: deals with it. They are rarer and more specific than the behaviour buckets.
SCENARIO_BUCKETS = ("obstacle_passing", "pedestrian_yielding", "junction_flow")
#: Behaviour buckets, from the measurements alone; every frame no scenario bucket takes ends in one.
BEHAVIOUR_BUCKETS = ("stop", "start", "hazard", "turn", "junction", "follow")
#: Buckets in the order their rules are tried: a frame goes to the first whose rule holds.
BUCKETS = SCENARIO_BUCKETS + BEHAVIOUR_BUCKETS

#: Thresholds of the rules (docs/buckets.md). Changing one changes `version`: the index is redone.
RULES: dict[str, Any] = {
    "version": 3,
    "stand_speed": 0.5,  # m/s: below it the ego stands
    "start_speed": 4.0,  # m/s: below it, with a target speed start_margin higher, the ego is starting
    # The expert's target is its speed plus half a second of acceleration, at most 1 m/s above it: a margin
    # of 2 m/s (version 2) left this bucket empty, and pulling away fell into follow, turn or junction.
    "start_margin": 0.5,  # m/s
    "turn_angle": 30.0,  # degrees: the route turns by more than this within turn_ahead metres
    "turn_ahead": 20.0,  # metres
    # obstacle_passing: the obstacle scenario's site (its last actor) at most obstacle_ahead metres ahead of
    # the ego and at most obstacle_behind metres behind it (scenario `distance` in [-behind, ahead])
    "obstacle_ahead": 30.0,
    "obstacle_behind": 10.0,
    # pedestrian_yielding: the crossing point at most pedestrian_ahead metres ahead and pedestrian_behind
    # behind, with the ego more than pedestrian_margin m/s below its target speed: pulling away (the expert's
    # target is its speed now plus half a second of acceleration, at most 1 m/s above it)
    "pedestrian_ahead": 15.0,
    "pedestrian_behind": 5.0,
    "pedestrian_margin": 0.5,  # m/s
}

#: Reasons (Measurements.reason) for which the expert slows or stands for an actor: the leader it follows,
#: or the actor its collision check says would meet it (both named in `reason_detail`).
YIELD_REASONS = ("leader", "collision", "junction")

#: How `reason_detail` names an actor: "vehicle 7 at 9.1 m, 0.0 m/s", "pedestrian 12 would meet the ego in
#: 1.5 s", "passing obstacle 3" (the actor's kind, tools.dataset.semantics.actor_kind, then its id).
_DETAIL_ACTOR = re.compile(rf"\b(?:{'|'.join(ACTOR_KINDS)}) (\d+)\b")

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


def scenario_bucket(m: Measurements, rules: dict[str, Any] = RULES) -> str | None:
    """The scenario bucket of one frame's measurements, or None: no scenario runs, or the ego is not dealing
    with it (docs/buckets.md, the scenario buckets)."""
    scenario = m.scenario
    if not isinstance(scenario, dict):  # None: no scenario runs (or a frame recorded before the field)
        return None
    kind = scenario.get("kind")
    try:
        actors = {int(a) for a in scenario.get("actors") or ()}
    except (TypeError, ValueError):
        actors = set()
    try:
        distance = float(scenario.get("distance"))
    except (TypeError, ValueError):
        distance = math.nan  # compares False: outside every window
    reacting = bool(actors & reacted_to(m))
    if kind == "obstacle":
        near = -rules["obstacle_behind"] <= distance <= rules["obstacle_ahead"]
        if m.reason == "passing" or reacting or near:
            return "obstacle_passing"
    elif kind == "pedestrian":
        near = -rules["pedestrian_behind"] <= distance <= rules["pedestrian_ahead"]
        pulling_away = float(m.speed) < float(m.target_speed) - rules["pedestrian_margin"]
        if reacting or (near and pulling_away):
            return "pedestrian_yielding"
    elif kind == "junction":
        if reacting:
            return "junction_flow"
    return None


def reacted_to(m: Measurements) -> set[int]:
    """Ids of the actors the expert slows or stands for in this frame (empty unless `reason` is one of
    YIELD_REASONS): the actor `reason_detail` names and, for "leader", the `leader`'s id. A leader recorded
    with another reason is only in the ego's path, not what limits its speed."""
    if m.reason not in YIELD_REASONS:
        return set()
    ids = {int(i) for i in _DETAIL_ACTOR.findall(m.reason_detail or "")}
    if m.reason == "leader" and isinstance(m.leader, dict):
        try:
            ids.add(int(m.leader["id"]))
        except (KeyError, TypeError, ValueError):
            pass
    return ids


def classify(m: Measurements, rules: dict[str, Any] = RULES) -> str:
    """The bucket of one frame's measurements (the rules of docs/buckets.md, in order): a scenario bucket
    when one holds, else a behaviour bucket."""
    bucket = scenario_bucket(m, rules)
    if bucket is not None:
        return bucket
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
