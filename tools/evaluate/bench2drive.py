"""Bench2Drive's metrics over an evaluation root (`python -m tools.evaluate score --bench2drive`).

Read from Thinklab-SJTU/Bench2Drive at commit 7ec25d1c9f75 (release 0.0.4; the three scripts unchanged since
c644989, v0.0.3): tools/merge_route_json.py, tools/ability_benchmark.py, tools/efficiency_smoothness_benchmark.py
and its leaderboard fork's leaderboard/utils/statistics_manager.py. Our own code; nothing of theirs is copied.

- **Success** (merge_route_json.py, ability_benchmark.py `get_infraction_status`): a run whose status is Perfect
  or Completed and whose record has no infraction but min-speed ones. **Success rate** = successes / N, and
  **driving score** = sum of score_composed / N (theirs divide by their 220 routes; we by the N planned runs,
  crashed and missing runs counted as failures with score 0, as in the aggregate: tools.dataset.score).
- **Abilities** (ability_benchmark.py): each run counts toward every ability whose list holds its scenario type
  (the type of its route's first scenario, which ability_benchmark.py reads from the route XML and we file the
  run under: `RunKey.scenario`); an ability's figure is its successes / its runs, and `mean` the mean of the five.
  A run of a Traffic_Signs type that is no success still counts as one for Traffic_Signs when it drove past the
  route's first junction: route completion / 100 > (waypoints up to and including the first junction one + 8) /
  all waypoints, on the route traced at 1 m by CARLA's GlobalRoutePlanner, with no red-light and no stop
  infraction. We take the route the run drove from its run.json (`dense_route`: points and their junction flags,
  written by either world) and measure it in metres, which is that count on a 1 m trace: (s_junction + 1 + 8) /
  (length + 1). A Traffic_Signs run whose route has no junction or no run.json gets no such credit (theirs raise
  an error); the summary counts them. An ability without a run has no figure (theirs divide by zero), and `mean`
  is then over the abilities that have runs; the summary says so.
- **Efficiency** (efficiency_smoothness_benchmark.py): per run with min-speed infractions, the mean of the
  percentages their messages name ("Average speed is X% of the surrounding traffic's one": the ego's speed over
  the background traffic's), values above 1000% left out; then the mean over those runs. Bench2Drive's fork
  records a min-speed event at every checkpoint whatever its value (statistics_manager.py marks the penalty
  'unused'); the upstream leaderboard 2.0 records only checkpoints under 100%, and the embedded world judges no
  minimum speed at all: without a min-speed message in any run, efficiency is not computed, and the summary says why.
- **Smoothness** is not computed: theirs is a per-tick comfort test (Savitzky-Golay filtered longitudinal and
  lateral acceleration, jerk, yaw rate and yaw acceleration against nuPlan's bounds, over 20-tick windows at 10 Hz)
  of each run's metric_info.json (acceleration and angular-velocity vectors, forward and right vectors, location,
  rotation per tick), which their agents write. An evaluation run records no per-frame measurements
  (`record=false`), so there is nothing to compute it from; the summary and merged.json say so.

Written: ROOT/bench2drive/merged.json, the keys and shape merge_route_json.py writes (`_checkpoint.records` without
`index`, sorted by route_id descending; `driving score`, `success rate`, `eval num`), each record's route_id in the
leaderboard's form `RouteScenario_<id>_rep<K>` (ability_benchmark.py matches `route_id.split('_')[1]` against the
route XML's ids) with `scenario_name`, `town_name` and `save_name` as Bench2Drive's records carry them; plus our
keys `score_version`, `driving efficiency`, `driving smoothness` and `not computed`. ROOT/bench2drive/
merged_ability.json: what ability_benchmark.py writes for it (the five abilities as fractions, `mean`, `crashed`:
the runs counted as failures because they crashed or have no result yet, which theirs leave out instead).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tools.core import atomic, files
from tools.dataset.layout import Layout
from tools.dataset.results import SUCCESS_STATUSES
from tools.dataset.score import Aggregate, RunScore

#: Bench2Drive's scenario types of each ability, in its order: `Ability` of tools/ability_benchmark.py at 7ec25d1c.
ABILITIES: dict[str, frozenset[str]] = {
    "Overtaking": frozenset({
        "Accident", "AccidentTwoWays", "ConstructionObstacle", "ConstructionObstacleTwoWays",
        "HazardAtSideLaneTwoWays", "HazardAtSideLane", "ParkedObstacleTwoWays", "ParkedObstacle",
        "VehicleOpensDoorTwoWays"}),
    "Merging": frozenset({
        "CrossingBicycleFlow", "EnterActorFlow", "HighwayExit", "InterurbanActorFlow", "HighwayCutIn",
        "InterurbanAdvancedActorFlow", "MergerIntoSlowTrafficV2", "MergerIntoSlowTraffic",
        "NonSignalizedJunctionLeftTurn", "NonSignalizedJunctionRightTurn", "NonSignalizedJunctionLeftTurnEnterFlow",
        "ParkingExit", "SequentialLaneChange", "SignalizedJunctionLeftTurn", "SignalizedJunctionRightTurn",
        "SignalizedJunctionLeftTurnEnterFlow"}),
    "Emergency_Brake": frozenset({
        "BlockedIntersection", "DynamicObjectCrossing", "HardBreakRoute", "OppositeVehicleTakingPriority",
        "OppositeVehicleRunningRedLight", "ParkingCutIn", "PedestrianCrossing", "ParkingCrossingPedestrian",
        "StaticCutIn", "VehicleTurningRoute", "VehicleTurningRoutePedestrian", "ControlLoss"}),
    "Give_Way": frozenset({"InvadingTurn", "YieldToEmergencyVehicle"}),
    "Traffic_Signs": frozenset({
        "BlockedIntersection", "OppositeVehicleTakingPriority", "OppositeVehicleRunningRedLight", "PedestrianCrossing",
        "VehicleTurningRoute", "VehicleTurningRoutePedestrian", "EnterActorFlow", "CrossingBicycleFlow",
        "NonSignalizedJunctionLeftTurn", "NonSignalizedJunctionRightTurn", "NonSignalizedJunctionLeftTurnEnterFlow",
        "SignalizedJunctionLeftTurn", "SignalizedJunctionRightTurn", "SignalizedJunctionLeftTurnEnterFlow",
        "T_Junction", "VanillaNonSignalizedTurn", "VanillaSignalizedTurnEncounterGreenLight",
        "VanillaSignalizedTurnEncounterRedLight", "VanillaNonSignalizedTurnEncounterStopsign"}),
}
#: The ability whose failed runs may still count when they passed the first junction without a red light or stop.
TRAFFIC_SIGNS = "Traffic_Signs"
#: ability_benchmark.py: waypoints (1 m apart) past the first junction waypoint the route must be completed beyond.
JUNCTION_MARGIN_WAYPOINTS = 8
#: Bench2Drive's success ignores these infractions (its fork records a min-speed event at every checkpoint).
IGNORED_FOR_SUCCESS = frozenset({"min_speed_infractions"})
#: efficiency_smoothness_benchmark.py: a min-speed percentage above this is left out.
EFFICIENCY_MAX_PERCENT = 1000.0
#: efficiency_smoothness_benchmark.py's pattern of a min-speed message's percentage.
_PERCENT = re.compile(r"\b\d+\.?\d*%")
#: How Bench2Drive's leaderboard names a run's record (leaderboard/utils/route_parser.py: RouteScenario_<id>).
ROUTE_ID = "RouteScenario_{route_id}"

SMOOTHNESS_NOT_COMPUTED = ("Bench2Drive computes it from each run's per-tick metric_info.json (acceleration and "
                           "angular velocity vectors, forward and right vectors); an evaluation run records no "
                           "per-frame measurements")
EFFICIENCY_NOT_COMPUTED = ("no run recorded a minimum-speed checkpoint (the embedded world judges no minimum speed; "
                           "runs under the CARLA leaderboard record them)")


def is_success(record: dict[str, Any]) -> bool:
    """Bench2Drive's success: Perfect or Completed, and no infraction but min-speed ones."""
    return record["status"] in SUCCESS_STATUSES and not any(
        messages for kind, messages in record["infractions"].items() if kind not in IGNORED_FOR_SUCCESS)


def junction_fraction(run_json: dict[str, Any]) -> float | None:
    """The route completion (a fraction) a Traffic_Signs run must exceed: (s of its route's first junction point + 1
    + JUNCTION_MARGIN_WAYPOINTS) / (route length + 1), in metres (ability_benchmark.py's count on a 1 m trace);
    None when run.json has no dense route or the route no junction."""
    dense = run_json.get("dense_route") if isinstance(run_json, dict) else None
    try:
        xy = [(float(x), float(y)) for x, y in dense["xy"]]
        junction = [bool(j) for j in dense["junction"]]
    except (TypeError, KeyError, ValueError):
        return None
    if len(xy) < 2 or len(junction) != len(xy) or not any(junction):
        return None
    s = [0.0]
    for (x0, y0), (x1, y1) in zip(xy, xy[1:], strict=False):
        s.append(s[-1] + math.hypot(x1 - x0, y1 - y0))
    first = junction.index(True)
    return (s[first] + 1 + JUNCTION_MARGIN_WAYPOINTS) / (s[-1] + 1)


def run_efficiency(messages: list[Any]) -> float | None:
    """A run's efficiency: the mean of its min-speed messages' percentages up to EFFICIENCY_MAX_PERCENT; None when
    none names one."""
    values = []
    for message in messages:
        m = _PERCENT.search(str(message))
        if m and float(m.group().rstrip("%")) <= EFFICIENCY_MAX_PERCENT:
            values.append(float(m.group().rstrip("%")))
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class Bench2DriveMetrics:
    """Bench2Drive's metrics of an evaluation root, and what was written."""

    agg: Aggregate
    merged: dict[str, Any]  # merged.json
    ability: dict[str, Any]  # merged_ability.json
    counts: dict[str, tuple[int, int]]  # ability -> (successes, runs)
    junction_credit: int  # failed Traffic_Signs runs counted for passing their first junction
    no_junction: int  # failed, scored Traffic_Signs runs whose route had no junction (or no run.json): no credit
    efficiency_runs: int  # runs with min-speed percentages
    layout: Layout

    @property
    def success_rate(self) -> float:
        return self.merged["success rate"]

    def summary(self) -> str:
        n = self.merged["eval num"]
        successes = round(self.success_rate * n)
        lines = [f"Bench2Drive metrics over all {n} route runs (leaderboard {self.agg.version.name} scores; crashed "
                 "and missing runs count as failures)",
                 f"  driving score     {self.merged['driving score']:8.3f}",
                 f"  success rate      {100 * self.success_rate:8.3f} %  ({successes} of {n}: Perfect or Completed, "
                 "no infraction but min speed)"]
        for name, (ok, total) in self.counts.items():
            shown = f"{100 * ok / total:8.3f} %  ({ok} of {total})" if total else "     n/a    (no run of its types)"
            lines.append(f"  {name.replace('_', ' '):<17} {shown}")
        mean = self.ability["mean"]
        without = [k for k, (_, total) in self.counts.items() if not total]
        lines.append(f"  ability mean      {100 * mean:8.3f} %" if mean is not None else "  ability mean           n/a")
        if without and mean is not None:
            lines[-1] += f"  (over {len(self.counts) - len(without)} abilities: none of {', '.join(without)})"
        if self.junction_credit or self.no_junction:
            lines.append(f"  Traffic Signs: {self.junction_credit} failed runs counted for passing their first "
                         f"junction clean; {self.no_junction} failed runs' routes had no junction (no such credit)")
        eff = self.merged["driving efficiency"]
        lines.append(f"  efficiency        {eff:8.3f} %  (mean over the {self.efficiency_runs} runs with min-speed "
                     "checkpoints; upstream leaderboard 2.0 records only those under 100%, Bench2Drive's every one)"
                     if eff is not None else
                     f"  efficiency        not computed: {self.merged['not computed']['driving efficiency']}")
        lines.append(f"  smoothness        not computed: {self.merged['not computed']['driving smoothness']}")
        lines.append(f"bench2drive: {self.layout.bench2drive_merged} and {self.layout.bench2drive_ability.name}")
        return "\n".join(lines)


def _merged_record(layout: Layout, run: RunScore) -> dict[str, Any]:
    record = {k: v for k, v in run.record.items() if k != "index"}
    record["route_id"] = ROUTE_ID.format(route_id=record["route_id"])
    run_json = _run_json(layout, run)
    record.update(scenario_name=run.key.scenario, town_name=str(run_json.get("town", "")), save_name=str(run.key))
    return record


def _run_json(layout: Layout, run: RunScore) -> dict[str, Any]:
    try:
        data = files.read_json(layout.run_settings(run.key))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def bench2drive_metrics(layout: Layout, agg: Aggregate) -> Bench2DriveMetrics:
    """Bench2Drive's metrics of the runs of `agg` (an aggregate of `layout`), nothing written."""
    n = len(agg.runs)
    counts = {name: [0, 0] for name in ABILITIES}
    junction_credit = no_junction = 0
    efficiencies = []
    for run in agg.runs:
        record = run.record
        success = is_success(record)
        for name, types in ABILITIES.items():
            if run.key.scenario in types:
                counts[name][1] += 1
                counts[name][0] += success
        if run.key.scenario in ABILITIES[TRAFFIC_SIGNS] and not success and run.counted == "scored":
            fraction = junction_fraction(_run_json(layout, run))
            if fraction is None:
                no_junction += 1
            elif (record["scores"]["score_route"] / 100 > fraction and not record["infractions"]["stop_infraction"]
                  and not record["infractions"]["red_light"]):
                counts[TRAFFIC_SIGNS][0] += 1
                junction_credit += 1
        eff = run_efficiency(record["infractions"].get("min_speed_infractions") or [])
        if eff is not None:
            efficiencies.append(eff)

    figures = {name: (ok / total if total else None) for name, (ok, total) in counts.items()}
    present = [v for v in figures.values() if v is not None]
    ability = {**figures, "mean": sum(present) / len(present) if present else None,
               "crashed": [[r.key.scenario, ROUTE_ID.format(route_id=r.record["route_id"])]
                           for r in agg.runs if r.counted != "scored"]}
    records = sorted((_merged_record(layout, r) for r in agg.runs), key=lambda d: d["route_id"], reverse=True)
    efficiency = sum(efficiencies) / len(efficiencies) if efficiencies else None
    not_computed = {"driving smoothness": SMOOTHNESS_NOT_COMPUTED}
    if efficiency is None:
        not_computed["driving efficiency"] = EFFICIENCY_NOT_COMPUTED
    merged = {
        "_checkpoint": {"records": records},
        "driving score": sum(r.record["scores"]["score_composed"] for r in agg.runs) / n,
        "success rate": sum(is_success(r.record) for r in agg.runs) / n,
        "eval num": n,
        "score_version": agg.version.name,
        "driving efficiency": efficiency,
        "driving smoothness": None,
        "not computed": not_computed,
    }
    return Bench2DriveMetrics(agg, merged, ability, {k: (ok, total) for k, (ok, total) in counts.items()},
                              junction_credit, no_junction, len(efficiencies), layout)


def write_bench2drive(layout: Layout, agg: Aggregate) -> Bench2DriveMetrics:
    """Compute Bench2Drive's metrics and write ROOT/bench2drive/merged.json and merged_ability.json (atomically)."""
    metrics = bench2drive_metrics(layout, agg)
    atomic.write_json(layout.bench2drive_merged, metrics.merged)
    atomic.write_json(layout.bench2drive_ability, metrics.ability)
    return metrics
