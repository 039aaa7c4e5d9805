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
planner's target speed alone ran red lights (docs/training.md "Red lights"). And the target speed is capped so that the
ego can stop before the first agent the model's BEV head predicts in its way (a vehicle, pedestrian or obstacle in a
corridor along the predicted route: `agent_gap`), braking at AGENT_DECEL: the planner's pooled features missed a truck
standing in the ego's lane 35 m ahead and drove into it at 8 m/s (docs/training.md "Vehicle collisions"). Where the
BEV head predicts a red or yellow stop line on the predicted route, the target speed is capped so that the ego stands
where the expert does (LIGHT_STOP_GAP before the line, the light in view), unless it is too close to stop before the
line: the light head alone fired too late at 11 m/s, and never on turns the training routes did not take
(docs/training.md "Red lights: the stop line in the BEV").
On a road (the command LANEFOLLOW), while the ego stands or crawls (below GO_BELOW), the planner's target speed counts
as at least GO_SPEED before those caps: at a crawl its expected speed stayed a crawl (0.5 m/s for 40 s on an empty road
of Bench2Drive: the inertia of behaviour cloning), and 33 of Bench2Drive's 220 routes ran out of time
(docs/training.md "The go rule"). Once the ego moves, slowing down is the planner's call: raised at any speed, the
target overrode its slowing for a light it saw and the light head did not.
While the model's overtake head says that the expert would go round an obstacle here (probability above OVERTAKE_P,
an offset of OVERTAKE_MIN_M or more, the command LANEFOLLOW), the wheel follows the predicted route moved over by the
head's offset, on the expert's ramp (tools.expert PASS_RAMP_M, begun PASS_RAMP_M / 3 behind), and the target speed is
at most the expert's PASS_SPEED; the agent rule then looks along that path, so it waits for a free lane. The route
head learns the map's route points, which stay in the blocked lane: the policy stood behind every obstacle of
Bench2Drive's Overtaking routes (docs/training.md "Overtaking").
DRIVEKIT_LIGHT_RULE=off, DRIVEKIT_AGENT_RULE=off, DRIVEKIT_LINE_RULE=off, DRIVEKIT_GO_RULE=off and
DRIVEKIT_OVERTAKE_RULE=off drive without each rule (the ablations of those tables), with the same checkpoint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from tools.dataset.geometry import ego_to_world, left_of
from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.samples import goes_round
from tools.evaluate.policy import Policy, load_policy
from tools.expert.control import Control, Controller
from tools.expert.expert import (
    A_LAT,
    IDM_DECEL,
    IDM_MIN_GAP,
    LIGHT_STOP_GAP,
    PASS_RAMP_M,
    PASS_SPEED,
    Decision,
    WorldView,
)
from tools.expert.route import DenseRoute
from tools.train.model import LIGHT_STOP_P, OVERTAKE_P

#: The environment variables that turn the light, agent, stop-line, go and overtake rules off ("off"; anything else,
#: or unset: on).
LIGHT_RULE_ENV = "DRIVEKIT_LIGHT_RULE"
AGENT_RULE_ENV = "DRIVEKIT_AGENT_RULE"
LINE_RULE_ENV = "DRIVEKIT_LINE_RULE"
GO_RULE_ENV = "DRIVEKIT_GO_RULE"
OVERTAKE_RULE_ENV = "DRIVEKIT_OVERTAKE_RULE"
#: On a road (command LANEFOLLOW), the planner's target speed counts as at least this, m/s, before the curve, light,
#: agent and stop-line caps ...
GO_SPEED = 3.0
#: ... while the ego is slower than this, m/s (standing or crawling; faster, the planner's slowing down stands).
GO_BELOW = 1.0
#: How far the ego's front is ahead of its centre, metres (about half a car's length).
EGO_FRONT_M = 2.5
#: The corridor along the predicted route in which a predicted agent is in the ego's way: half its width, metres
#: (the ego's half width and 0.05 m; at 1.4 m a car standing in the next lane beside the ego's front held it for
#: good, and the car waited for the ego).
CORRIDOR_HALF_WIDTH_M = 1.1
#: How far ahead of the ego's centre the corridor reaches, metres: the predicted route (20 m), then straight on.
CORRIDOR_M = 40.0
#: Agent cells nearer than this along the route (from the ego's centre) are the ego's own or beside it: its front is
#: 2.4 m ahead, and a cell is 0.5 m.
AGENT_FROM_M = 3.0
#: The ego stops with its centre this far before an agent in its way, metres: its front (about 2.5 m ahead of the
#: centre) the expert's standstill gap short of it.
AGENT_STOP_M = EGO_FRONT_M + IDM_MIN_GAP
#: The ego stops with its centre this far before a red or yellow stop line in its way, metres: its front where the
#: expert stands (LIGHT_STOP_GAP short of the line, the light in view).
LINE_STOP_M = EGO_FRONT_M + LIGHT_STOP_GAP
#: Nearer than this (from the ego's centre, metres) a stop line is the light head's to judge: it learnt the light's
#: state where the expert stands, and the BEV head's colour of a line that near is not to be trusted (standing at a
#: green light, it still predicted the line red and held the ego for good).
LINE_HANDOVER_M = LINE_STOP_M + 2.0
#: The deceleration the target speed allows towards those stops, m/s^2: below the expert's 3, as the controller
#: follows a falling target late (at 3, stopping 1.6 m short, the ego met a standing truck at 2.5 m/s).
AGENT_DECEL = 2.0
#: Consecutive route points closer than this, metres, are one (the route's end repeats its last point): no heading.
SAME_POINT_M = 0.2
#: Fewer agent cells than this in the corridor are noise; the gap is to the AGENT_MIN_CELLS-th nearest.
AGENT_MIN_CELLS = 2


def rule_on(env: str) -> bool:
    """Whether drivers apply the rule that the environment variable `env` can turn off (it is not "off")."""
    return os.environ.get(env, "on").strip().lower() != "off"


def light_rule_on() -> bool:
    """Whether drivers stop for the light head (LIGHT_RULE_ENV is not "off")."""
    return rule_on(LIGHT_RULE_ENV)


def agent_gap(route: np.ndarray, agents: np.ndarray) -> float:
    """How far along `route` ((R, 2) ego frame, in driving order from the ego; straight on past its end, up to
    CORRIDOR_M) the agents ((N, 2) ego frame) in the ego's way begin: the distance from the ego's centre to the
    AGENT_MIN_CELLS-th nearest of those within CORRIDOR_HALF_WIDTH_M of the line and beyond AGENT_FROM_M; inf when
    fewer are."""
    if len(agents) < AGENT_MIN_CELLS:
        return math.inf
    line = np.concatenate([np.zeros((1, 2)), np.asarray(route, dtype=np.float64).reshape(-1, 2)])
    step = np.diff(line, axis=0)
    keep = np.hypot(step[:, 0], step[:, 1]) > SAME_POINT_M
    line = np.concatenate([line[:1], line[1:][keep]])
    if len(line) < 2:
        line = np.array([[0.0, 0.0], [1.0, 0.0]])  # no route: straight on
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    if s[-1] < CORRIDOR_M:
        heading = (line[-1] - line[-2]) / (s[-1] - s[-2])
        line = np.concatenate([line, line[-1:] + (CORRIDOR_M - s[-1]) * heading])
        s = np.append(s, CORRIDOR_M)
    start, seg, length = line[:-1], np.diff(line, axis=0), np.diff(s)
    rel = np.asarray(agents, dtype=np.float64)[:, None, :] - start[None]  # (N, S, 2)
    t = np.clip((rel * seg[None]).sum(-1) / length[None] ** 2, 0.0, 1.0)
    off = rel - t[..., None] * seg[None]
    dist = np.hypot(off[..., 0], off[..., 1])
    nearest = dist.argmin(axis=1)
    rows = np.arange(len(agents))
    along = s[nearest] + t[rows, nearest] * length[nearest]
    ahead = np.sort(along[(dist[rows, nearest] < CORRIDOR_HALF_WIDTH_M) & (along > AGENT_FROM_M)])
    return float(ahead[AGENT_MIN_CELLS - 1]) if len(ahead) >= AGENT_MIN_CELLS else math.inf


def overtaking_route(route: np.ndarray, offset: float) -> np.ndarray:
    """`route` ((R, 2) ego frame, x forward, y right) moved `offset` metres to its left (right: negative) as the expert
    moves its path round an obstacle: from where the ego is now (its own offset from the route, so a pass under way
    goes on straight) to the whole offset over PASS_RAMP_M of the route, the ramp begun PASS_RAMP_M / 3 behind the
    ego."""
    route = np.asarray(route, dtype=np.float64).reshape(-1, 2)
    if len(route) == 0:
        return route
    step = np.diff(np.concatenate([np.zeros((1, 2)), route]), axis=0)
    s = np.cumsum(np.hypot(step[:, 0], step[:, 1]))  # each point's distance along the route from the ego
    # The route's direction at each point (towards the next; the last point's, the segment before it); repeated
    # points (the route's end repeats its last) take the direction before them.
    ahead = np.diff(route, axis=0)
    direction = np.concatenate([ahead, ahead[-1:]]) if len(ahead) else np.array([[1.0, 0.0]])
    for k in range(len(direction)):
        if np.hypot(*direction[k]) <= SAME_POINT_M:
            direction[k] = direction[k - 1] if k > 0 else [1.0, 0.0]
    left = np.stack([direction[:, 1], -direction[:, 0]], axis=-1) / np.hypot(direction[:, :1], direction[:, 1:])
    now = left_of(route, np.zeros(2))
    shift = now + (offset - now) * np.clip((s + PASS_RAMP_M / 3) / PASS_RAMP_M, 0.0, 1.0)
    return route + shift[:, None] * left


def stop_speed(distance: float) -> float:
    """The highest speed (m/s) from which the ego stops within `distance` metres (none left: 0), braking at
    AGENT_DECEL."""
    return math.sqrt(2 * AGENT_DECEL * max(distance, 0.0))


def agent_speed(gap: float) -> float:
    """The highest speed (m/s) from which the ego stops AGENT_STOP_M before an agent `gap` metres ahead of its centre,
    braking at AGENT_DECEL."""
    return stop_speed(gap - AGENT_STOP_M)


def line_speed(gap: float, speed: float) -> float:
    """The highest speed (m/s) from which the ego stops LINE_STOP_M before a red or yellow stop line `gap` metres ahead
    of its centre, braking at AGENT_DECEL; inf (no cap) when the line is nearer than LINE_HANDOVER_M (the light head
    judges it there), or when, at `speed` m/s, even the expert's IDM_DECEL would no longer stop the ego's front before
    the line: as the expert drives through a yellow light (tools.expert.expert stops_for), and a red one is better
    crossed than stood at in the junction."""
    if gap < LINE_HANDOVER_M or speed * speed > 2 * IDM_DECEL * (gap - EGO_FRONT_M):
        return math.inf
    return stop_speed(gap - LINE_STOP_M)


def curve_speed(route: np.ndarray) -> float:
    """The highest speed (m/s) from which the ego can brake at IDM_DECEL into every curve of `route` ((N, 2),
    ego frame, in driving order) at a lateral acceleration of A_LAT; inf when it is straight or too short."""
    step = np.diff(np.concatenate([np.zeros((1, 2)), route]), axis=0)
    length = np.hypot(step[:, 0], step[:, 1])
    keep = length > SAME_POINT_M
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
        self.agent_rule = rule_on(AGENT_RULE_ENV)
        self.line_rule = rule_on(LINE_RULE_ENV)
        self.go_rule = rule_on(GO_RULE_ENV)
        self.overtake_rule = rule_on(OVERTAKE_RULE_ENV)
        self.planned = 0.0  # the planner's target speed in the latest plan
        self.goes = False  # the go rule raised it to GO_SPEED
        self.light: float | None = None  # the light head's probability in the latest plan (None: no head)
        self.gap = math.inf  # agent_gap of the latest plan
        self.line_gap = math.inf  # how far ahead a red or yellow stop line is (agent_gap of its cells)
        self.line_cap = math.inf  # line_speed of the latest plan
        self.overtake: float | None = None  # the overtake head's probability in the latest plan (None: no head)
        self.overtake_offset = 0.0  # ... and its offset, metres left of the route
        self.overtakes = False  # the latest plan goes round an obstacle (the overtake rule)

    def plan(self, sensors: dict[str, np.ndarray], m: Measurements, pose: Any) -> None:
        """A new plan from one frame's sensors (arrays by the rig's names) and measurements; `pose` (x, y, yaw) is
        where the ego is, to put the predicted route into the world."""
        plan = self.policy.predict(sensors, m)
        route = np.asarray(plan.route, dtype=np.float64)
        self.overtake, self.overtake_offset = plan.overtake, plan.overtake_offset
        self.overtakes = (self.overtake_rule and plan.overtake is not None and plan.overtake > OVERTAKE_P
                          and goes_round(plan.overtake_offset) and m.command == RoadOption.LANEFOLLOW)
        if self.overtakes:
            route = overtaking_route(route, plan.overtake_offset)  # round the obstacle, as the expert
        self.path = ego_to_world(pose, route)
        self.planned = float(plan.target_speed)
        self.goes = (self.go_rule and m.command == RoadOption.LANEFOLLOW and m.speed < GO_BELOW
                     and self.planned < GO_SPEED)
        self.target_speed = min(GO_SPEED if self.goes else self.planned, curve_speed(route))
        if self.overtakes:
            self.target_speed = min(self.target_speed, PASS_SPEED)
        self.light = plan.light
        if self.stops_for_light():
            self.target_speed = 0.0  # a red or yellow light holds the ego: stop
        self.gap = agent_gap(route, plan.agents)
        if self.agent_rule:
            self.target_speed = min(self.target_speed, agent_speed(self.gap))  # stop before an agent in the way
        self.line_gap = agent_gap(route, plan.red_lines)
        self.line_cap = line_speed(self.line_gap, m.speed)
        if self.line_rule:
            self.target_speed = min(self.target_speed, self.line_cap)  # stand before a red stop line

    def stops_for_light(self) -> bool:
        """Whether the latest plan stops for a light: the light head says one holds the ego, and the rule is on."""
        return self.light_rule and self.light is not None and self.light > LIGHT_STOP_P

    def detail(self) -> str:
        """What the latest plan says about a crawling planner, lights and agents in the way, for the run's pictures (a
        frame's reason_detail)."""
        parts = [f"planner {self.planned:.1f} m/s: goes"] if self.goes else []
        if self.overtake is not None and self.overtake > OVERTAKE_P:  # so whenever it goes round
            side = "left" if self.overtake_offset >= 0 else "right"
            parts.append(f"overtake head {self.overtake:.2f}, {abs(self.overtake_offset):.1f} m {side}"
                         + (": goes round" if self.overtakes else ""))
        if self.light is not None:
            parts.append(f"light head {self.light:.2f}" + (": stops" if self.stops_for_light() else ""))
        if math.isfinite(self.line_gap):
            capped = self.line_rule and self.line_cap < self.target_speed + 1e-6
            parts.append(f"red line in {self.line_gap:.1f} m" + (": slows" if capped else ""))
        if math.isfinite(self.gap):
            capped = self.agent_rule and agent_speed(self.gap) < self.target_speed + 1e-6
            parts.append(f"agent in {self.gap:.1f} m" + (": slows" if capped else ""))
        return ", ".join(parts)

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
