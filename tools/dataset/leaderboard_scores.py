"""The two leaderboard scores of one route run, and the one place that picks between them (`score_version`).

A route run's record holds its route completion (`scores.score_route`, percent) and its infractions (one message
per event, `infractions[<kind>]`); each version turns them into the run's infraction penalty and driving score.

- **2.0** (carla-simulator/leaderboard, branch leaderboard-2.0, a87a341, leaderboard/utils/statistics_manager.py,
  `compute_route_statistics`): penalties multiply (pedestrian 0.5, vehicle 0.6, layout 0.65, red light 0.7, stop
  0.8, scenario timeout 0.7, emergency vehicle 0.7, min speed and off-lane by their percentage). The record's own
  scores are that computation, done by whoever wrote the record (our referee, or the CARLA leaderboard): they are
  taken as they are, so a 2.0 aggregate is what it always was.
- **2.1** (the same file on branch leaderboard-2.1, cfecdc8, 2025-03-06; the only change between the branches):
  penalties add up, `score_penalty = 1 / (1 + sum of values)` with pedestrian 1.0, vehicle 0.7, layout 0.6,
  red light 0.4, stop 0.25, scenario timeout 0.4, emergency vehicle 0.4, and each min-speed event
  0.4 x (1 - percentage / 100); the off-lane percentage still multiplies, `score_penalty *= 1 - percentage / 100`.
  A min-speed message at 100% or above adds 0: the leaderboard's own criterion records only checkpoints under 100%
  (its MinimumSpeedRouteTest), but Bench2Drive's fork records every checkpoint, up to 1000% and beyond, which
  0.4 x (1 - percentage / 100) would turn into a negative sum and a negative penalty.
  Recomputed here from the record's infraction messages: the percentages are read from the leaderboard's wording
  (scenario_runner's atomic_criteria.py, `MinimumSpeedRouteTest`: "Average speed is X% of the surrounding
  traffic's one"; `OutsideRouteLanesTest`: "... for about D meters (X% of the completed route)"). A min-speed
  message that names no percentage counts its full 0.4; an off-lane message that names none, nothing (as the 2.0
  aggregate reads 0 km from it).

Rounded as the leaderboard rounds a record's scores: 6 digits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools.core.errors import ToolError

ROUND_DIGITS_SCORE = 6
DEFAULT_VERSION = "2.0"

#: Leaderboard 2.0's PENALTY_VALUE_DICT, by record key: factors that multiply (min speed and off-lane: their own).
PENALTY_VALUES_20 = {
    "collisions_pedestrian": 0.5,
    "collisions_vehicle": 0.6,
    "collisions_layout": 0.65,
    "red_light": 0.7,
    "stop_infraction": 0.8,
    "scenario_timeouts": 0.7,
    "yield_emergency_vehicle_infractions": 0.7,
}
#: Leaderboard 2.1's PENALTY_VALUE_DICT, by record key (min speed is scaled by its percentage).
PENALTY_VALUES_21 = {
    "collisions_pedestrian": 1.0,
    "collisions_vehicle": 0.7,
    "collisions_layout": 0.6,
    "red_light": 0.4,
    "stop_infraction": 0.25,
    "scenario_timeouts": 0.4,
    "yield_emergency_vehicle_infractions": 0.4,
    "min_speed_infractions": 0.4,
}
MIN_SPEED = "min_speed_infractions"
OUTSIDE_LANES = "outside_route_lanes"
#: Leaderboard 2.0's PENALTY_PERC_DICT entry of a min-speed event: [0.7, 'decreases'], the factor
#: 1 - (1 - 0.7) x (1 - percentage / 100) per event.
MIN_SPEED_PENALTY_20 = 0.7
#: The wording of a min-speed event (scenario_runner's MinimumSpeedRouteTest, `set_message`), `percent` its value as
#: the criterion formats it (a float rounded to 2 digits, or the integer 100 when there was nothing to compare).
MIN_SPEED_MESSAGE = "Average speed is {percent}% of the surrounding traffic's one"

_MIN_SPEED_PERCENT = re.compile(r"is (-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)%")
_OUTSIDE_PERCENT = re.compile(r"\((-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)% of the completed route\)")


class ScoreVersion(Protocol):
    """How one leaderboard version scores a route run."""

    name: str
    #: Keys this version adds to ROOT/result.json (none for 2.0: its result.json is what it always was).
    result_fields: Mapping[str, Any]

    def scores(self, scores: Mapping[str, float], infractions: Mapping[str, Sequence[Any]]) -> dict[str, float]:
        """{score_route, score_penalty, score_composed} of a run from its record's `scores` (finite floats) and
        `infractions`."""
        ...


@dataclass(frozen=True)
class Leaderboard20:
    """The record's own scores: the leaderboard 2.0 computation its writer made."""

    name: str = "2.0"
    result_fields: Mapping[str, Any] = field(default_factory=dict)

    def scores(self, scores: Mapping[str, float], infractions: Mapping[str, Sequence[Any]]) -> dict[str, float]:
        return {k: scores[k] for k in ("score_route", "score_penalty", "score_composed")}


@dataclass(frozen=True)
class Leaderboard21:
    """Leaderboard 2.1: the penalty recomputed from the infractions (module docstring)."""

    name: str = "2.1"
    result_fields: Mapping[str, Any] = field(default_factory=lambda: {"score_version": "2.1"})

    def scores(self, scores: Mapping[str, float], infractions: Mapping[str, Sequence[Any]]) -> dict[str, float]:
        return composed(scores["score_route"], penalty_21(infractions))


def min_speed_percent(message: Any) -> float | None:
    """The percentage a min-speed message names ("Average speed is 63.5% of ..."); None when it names none."""
    m = _MIN_SPEED_PERCENT.search(str(message))
    return float(m.group(1)) if m else None


def min_speed_factor_20(message: Any) -> float:
    """Leaderboard 2.0's penalty factor of one min-speed event: 1 - (1 - 0.7) x (1 - percentage / 100), 1 at 100% or
    above (the leaderboard records no such event; Bench2Drive's fork records them unpenalised), 0.7 for a message
    that names no percentage."""
    percent = min_speed_percent(message)
    shortfall = 1.0 if percent is None else max(1 - percent / 100, 0.0)
    return 1 - (1 - MIN_SPEED_PENALTY_20) * shortfall


def outside_lanes_percent(message: Any) -> float | None:
    """The percentage of the completed route an off-lane message names ("(12.5% of the completed route)")."""
    m = _OUTSIDE_PERCENT.search(str(message))
    return float(m.group(1)) if m else None


def infraction_value_21(kind: str, message: Any) -> float:
    """What one infraction adds to leaderboard 2.1's sum (0 for kinds that add nothing)."""
    value = PENALTY_VALUES_21.get(kind, 0.0)
    if kind == MIN_SPEED:
        percent = min_speed_percent(message)
        return value if percent is None else value * max(1 - percent / 100, 0.0)
    return value


def composed(route: float, penalty: float) -> dict[str, float]:
    """A run's scores from its route completion and a recomputed penalty, rounded as the leaderboard rounds them."""
    return {"score_route": route, "score_penalty": round(penalty, ROUND_DIGITS_SCORE),
            "score_composed": round(max(route * penalty, 0.0), ROUND_DIGITS_SCORE)}


def penalty_20(infractions: Mapping[str, Sequence[Any]]) -> float:
    """Leaderboard 2.0's score_penalty of one run (unrounded): the product of PENALTY_VALUES_20 per event, of each
    min-speed event's factor (min_speed_factor_20) and of each off-lane event's 1 - percentage / 100."""
    penalty = 1.0
    for kind, messages in infractions.items():
        for message in messages or ():
            if kind == MIN_SPEED:
                penalty *= min_speed_factor_20(message)
            elif kind == OUTSIDE_LANES:
                penalty *= max(1 - (outside_lanes_percent(message) or 0.0) / 100, 0.0)
            else:
                penalty *= PENALTY_VALUES_20.get(kind, 1.0)
    return penalty


def penalty_21(infractions: Mapping[str, Sequence[Any]]) -> float:
    """Leaderboard 2.1's score_penalty of one run (unrounded): the off-lane factors times 1 / (1 + sum)."""
    total, factor = 0.0, 1.0
    for kind, messages in infractions.items():
        for message in messages or ():
            if kind == OUTSIDE_LANES:
                percent = outside_lanes_percent(message)
                factor *= max(1 - (percent or 0.0) / 100, 0.0)
            else:
                total += infraction_value_21(kind, message)
    return factor / (1 + total)


#: The versions `--score` takes, by name.
VERSIONS: dict[str, ScoreVersion] = {v.name: v for v in (Leaderboard20(), Leaderboard21())}


def score_version(name: Any = DEFAULT_VERSION) -> ScoreVersion:
    """The version called `name` ("2.0", "2.1"; Fire may hand 2.1 over as a float); ToolError naming --score."""
    key = f"{name:.1f}" if isinstance(name, float) else str(name)
    if isinstance(name, bool) or key not in VERSIONS:
        raise ToolError(f"--score {name}: unknown leaderboard score; give --score {' or --score '.join(VERSIONS)}")
    return VERSIONS[key]
