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
- **Driving score** as Bench2Drive's fork scores a run: its leaderboard marks the min-speed penalty 'unused'
  (statistics_manager.py), so a run with min-speed events has the `--score` version's penalty recomputed from its
  other infractions (tools.dataset.leaderboard_scores); a run without one keeps its own scores.
- **Efficiency** (efficiency_smoothness_benchmark.py): per run, the mean of its min-speed checkpoints' percentages (the
  ego's mean speed over the background traffic's), values above 1000% left out; then the mean over the runs that have
  some. Bench2Drive's fork of MinimumSpeedRouteTest (its route_scenario.py: `checkpoints=20`) records every checkpoint;
  our referee judges that one too and keeps it in the record's meta (`bench2drive_min_speed`,
  tools.collect.base.referee), which is what we average. A record without it (a CARLA run: the upstream leaderboard 2.0,
  4 checkpoints, only those under 100% recorded) gives its min-speed messages instead: the mean of the slow
  checkpoints, not comparable with Bench2Drive's figures (the summary counts such runs).
- **Smoothness** (efficiency_smoothness_benchmark.py, `seg_compute_comfort_metric`): each run's metric_info.json (the
  ego's acceleration, angular velocity, forward and right vectors at every tick: tools.dataset.metric_info) cut into
  complete windows of 20 ticks (a run of at most 20 ticks is one window); a window is comfortable when, after a
  Savitzky-Golay filter (window 7 or the window's length if shorter, order 2, scipy's `interp` edges), the longitudinal
  and lateral accelerations (the 2D acceleration on the forward and right vectors), the magnitude and longitudinal
  jerks (the filter's first derivative of the filtered accelerations, spacing 0.1 s), the yaw rate (the z angular
  velocity, phase-unwrapped by 2 pi) and their yaw "acceleration" stay strictly within nuPlan's bounds. As their script
  does: the spacing is 0.1 s while the ticks are 0.05 s apart (their agents store every 20 Hz tick, as we do), so the
  jerks are half the physical ones; the angular velocity is CARLA's degrees per second against bounds in radians per
  second (0.95 and 1.93), so any turn faster than 0.95 deg/s is uncomfortable; the yaw acceleration is the filtered
  yaw rate itself (no derivative). A run's smoothness is its share of comfortable windows; the figure, a fraction as
  theirs prints it, the mean over the runs with a metric_info.json of at least 3 ticks (theirs raise on a missing
  file or a shorter one; the summary counts the runs left out). The Savitzky-Golay filter is our numpy one
  (`savgol_filter`: scipy is no dependency of ours), the least-squares polynomial of each window as scipy's.

Written: ROOT/bench2drive/merged.json, the keys and shape merge_route_json.py writes (`_checkpoint.records` without
`index`, sorted by route_id descending; `driving score`, `success rate`, `eval num`), each record's route_id in the
leaderboard's form `RouteScenario_<id>_rep<K>` (ability_benchmark.py matches `route_id.split('_')[1]` against the
route XML's ids) with `scenario_name`, `town_name` and `save_name` ("<Scenario>/<run>": with `-m ROOT/data`
efficiency_smoothness_benchmark.py finds each run's metric_info.json) as Bench2Drive's records carry them, and as
their fork would have recorded them: `min_speed_infractions` Bench2Drive's checkpoints where the run has them, `scores`
without the min-speed penalty; plus `driving efficiency` (percent), `driving smoothness` (a fraction), our
`score_version`, and `not computed` (why, for a figure that is null; absent when both are computed).
ROOT/bench2drive/merged_ability.json: what ability_benchmark.py writes for it (the five abilities as fractions, `mean`,
`crashed`: the runs counted as failures because they crashed or have no result yet, which theirs leave out instead).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.collect.base.routes import RouteError, read_routes
from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset.layout import Layout
from tools.dataset.leaderboard_scores import (
    MIN_SPEED,
    MIN_SPEED_MESSAGE,
    composed,
    penalty_20,
    penalty_21,
)
from tools.dataset.metric_info import read_metric_info
from tools.dataset.results import SUCCESS_STATUSES
from tools.dataset.score import Aggregate, RunScore

#: Where a Bench2Drive checkout keeps its benchmark's 220 routes (one file; Thinklab-SJTU/Bench2Drive).
ROUTES_IN_CHECKOUT = "leaderboard/data/bench2drive220.xml"
#: bin/demo's field protocol: the fewest training routes a town gets (a town the benchmark drives little or not).
LEAST_ROUTES_PER_TOWN = 2

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

#: efficiency_smoothness_benchmark.py's comfort bounds (nuPlan's): longitudinal acceleration (m/s^2), lateral
#: acceleration, magnitude jerk and longitudinal jerk (m/s^3), yaw acceleration (rad/s^2) and yaw rate (rad/s).
MIN_LON_ACCEL, MAX_LON_ACCEL = -4.05, 2.40
MAX_ABS_LAT_ACCEL = 4.89
MAX_ABS_MAG_JERK = 8.37
MAX_ABS_LON_JERK = 4.13
MAX_ABS_YAW_ACCEL = 1.93
MAX_ABS_YAW_RATE = 0.95
#: Its Savitzky-Golay filter: window (at most), polynomial order, and the spacing of the derivative (its
#: `time_interval`, seconds; the ticks it reads are 0.05 s apart).
SAVGOL_WINDOW, SAVGOL_ORDER, JERK_SPACING_S = 7, 2, 0.1
#: Ticks per comfort window (its `per_step`).
COMFORT_WINDOW_TICKS = 20

SMOOTHNESS_NOT_COMPUTED = ("no run has a metric_info.json of at least 3 ticks (an evaluation in the embedded world "
                           "writes one per run: ROOT/data/<Scenario>/<run>/metric_info.json)")
EFFICIENCY_NOT_COMPUTED = "no run recorded a minimum-speed checkpoint"


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


def bench2drive_scores(record: dict[str, Any], version_name: str) -> dict[str, float]:
    """A record's scores as Bench2Drive's fork gives them: its penalty recomputed from its infractions without the
    min-speed events (leaderboard_scores.penalty_20, or penalty_21 for 2.1). A record without a min-speed event: its
    scores as they are."""
    scores = record["scores"]
    if not record["infractions"].get(MIN_SPEED):
        return dict(scores)
    others = {k: v for k, v in record["infractions"].items() if k != MIN_SPEED}
    return composed(scores["score_route"], penalty_21(others) if version_name == "2.1" else penalty_20(others))


# ----------------------------------------------------------------------------------------------------------- smoothness
def _savgol_matrix(window: int, order: int, deriv: int, delta: float, at: np.ndarray) -> np.ndarray:
    """(len(at), window): row i gives, from a window's `window` values, the `deriv`-th derivative (per `delta` of
    spacing) at position at[i] (0 .. window - 1) of their least-squares polynomial of degree `order`."""
    centre = (window - 1) / 2
    t = np.arange(window, dtype=np.float64) - centre  # centred: a well-conditioned fit
    fit = np.linalg.pinv(t[:, None] ** np.arange(order + 1))  # (order + 1, window): values -> coefficients
    powers = np.arange(order + 1)
    x = np.asarray(at, dtype=np.float64)[:, None] - centre
    scale = np.ones(order + 1)
    for k in range(deriv):  # d^deriv/dx^deriv of x^p is p (p - 1) ... (p - deriv + 1) x^(p - deriv)
        scale *= powers - k
    rows = scale * x ** np.maximum(powers - deriv, 0) * (powers >= deriv)
    return rows @ fit / delta ** deriv


def savgol_filter(y: np.ndarray, window: int, order: int, deriv: int = 0, delta: float = 1.0) -> np.ndarray:
    """scipy.signal.savgol_filter(y, window, order, deriv, delta) with its default mode 'interp', for a 1-D `y`:
    each value replaced by the least-squares polynomial of degree `order` through the `window` values centred on it
    (or its derivative); the first and last window // 2 values by the polynomial through the first and last `window`
    values. An even `window` only as long as `y` (all of it one polynomial), as efficiency_smoothness_benchmark.py
    can give it."""
    y = np.asarray(y, dtype=np.float64)
    n, half = len(y), window // 2
    if not order < window <= n:
        raise ValueError(f"savgol_filter: need order < window <= len(y), got {order}, {window}, {n}")
    if window % 2 == 0 and window != n:
        raise ValueError(f"savgol_filter: an even window ({window}) only as long as the values ({n})")
    out = np.empty(n)
    if n - 2 * half > 0:
        centre = _savgol_matrix(window, order, deriv, delta, np.array([half]))[0]
        out[half:n - half] = np.lib.stride_tricks.sliding_window_view(y, window) @ centre
    ends = _savgol_matrix(window, order, deriv, delta, np.arange(window))
    out[:half] = ends[:half] @ y[:window]
    out[n - half:] = ends[window - half:] @ y[n - window:]
    return out


def _phase_unwrap(values: np.ndarray) -> np.ndarray:
    """efficiency_smoothness_benchmark.py's `_phase_unwrap`: consecutive values brought within pi of each other by
    whole turns of 2 pi (applied, as theirs, to the angular velocity in degrees per second)."""
    turns = np.zeros_like(values)
    turns[1:] = np.cumsum(np.round(np.diff(values) / (2 * np.pi)))
    return values - 2 * np.pi * turns


def _within(values: np.ndarray, low: float, high: float) -> bool:
    return bool(np.all((values > low) & (values < high)))


def window_comfortable(info: dict[str, np.ndarray]) -> bool:
    """One window's comfort (efficiency_smoothness_benchmark.py's `compute_comfort_metric`): the filtered
    longitudinal and lateral accelerations, magnitude and longitudinal jerks, yaw rate and yaw "acceleration" all
    strictly within their bounds. `info`: tools.dataset.metric_info.read_metric_info's arrays (at least 3 ticks)."""
    window = min(SAVGOL_WINDOW, len(info["acceleration"]))

    def smooth(y: np.ndarray, deriv: int = 0) -> np.ndarray:
        return savgol_filter(y, window, SAVGOL_ORDER, deriv, JERK_SPACING_S if deriv else 1.0)

    acc = info["acceleration"][:, :2]
    lon = smooth(np.einsum("ij,ij->i", acc, info["forward_vector"][:, :2]))
    lat = smooth(np.einsum("ij,ij->i", acc, info["right_vector"][:, :2]))
    magnitude = smooth(np.hypot(acc[:, 0], acc[:, 1]))
    yaw_rate = smooth(_phase_unwrap(info["angular_velocity"][:, 2]))  # theirs: also their yaw "acceleration"
    return (_within(lon, MIN_LON_ACCEL, MAX_LON_ACCEL) and _within(lat, -MAX_ABS_LAT_ACCEL, MAX_ABS_LAT_ACCEL)
            and _within(smooth(magnitude, 1), -MAX_ABS_MAG_JERK, MAX_ABS_MAG_JERK)
            and _within(smooth(lon, 1), -MAX_ABS_LON_JERK, MAX_ABS_LON_JERK)
            and _within(yaw_rate, -MAX_ABS_YAW_ACCEL, MAX_ABS_YAW_ACCEL)
            and _within(yaw_rate, -MAX_ABS_YAW_RATE, MAX_ABS_YAW_RATE))


def run_smoothness(info: dict[str, np.ndarray]) -> float | None:
    """A run's smoothness (`seg_compute_comfort_metric`): its share of comfortable complete windows of
    COMFORT_WINDOW_TICKS ticks; a run of at most that many ticks is one window (1.0 or 0.0). None under 3 ticks
    (theirs raise)."""
    n = len(info["angular_velocity"])
    if n < SAVGOL_ORDER + 1:
        return None
    if n <= COMFORT_WINDOW_TICKS:
        return 1.0 if window_comfortable(info) else 0.0
    windows = [{k: v[i:i + COMFORT_WINDOW_TICKS] for k, v in info.items()}
               for i in range(0, n - COMFORT_WINDOW_TICKS + 1, COMFORT_WINDOW_TICKS)]
    return sum(window_comfortable(w) for w in windows) / len(windows)


def _run_smoothness(layout: Layout, run: RunScore) -> float | None:
    try:
        info = read_metric_info(layout.metric_info(run.key))
    except (OSError, ValueError):
        return None
    return run_smoothness(info)


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
    efficiency_upstream: int  # of those, runs whose percentages are the upstream leaderboard's slow checkpoints only
    smoothness_runs: int  # runs with a metric_info.json of at least 3 ticks
    layout: Layout

    @property
    def success_rate(self) -> float:
        return self.merged["success rate"]

    def summary(self) -> str:
        n = self.merged["eval num"]
        successes = round(self.success_rate * n)
        lines = [f"Bench2Drive metrics over all {n} route runs (leaderboard {self.agg.version.name} scores, min speed "
                 "unpenalised as Bench2Drive's; crashed and missing runs count as failures)",
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
        if eff is None:
            lines.append(f"  driving efficiency  not computed: {self.merged['not computed']['driving efficiency']}")
        else:
            line = (f"  driving efficiency {eff:8.3f} %  (the ego's speed over the traffic's at the min-speed "
                    f"checkpoints, mean over {self.efficiency_runs} runs)")
            if self.efficiency_upstream:
                line += (f"; {self.efficiency_upstream} of them with the upstream leaderboard's checkpoints under 100% "
                         "only, not comparable")
            lines.append(line)
        smooth = self.merged["driving smoothness"]
        if smooth is None:
            lines.append(f"  driving smoothness  not computed: {self.merged['not computed']['driving smoothness']}")
        else:
            lines.append(f"  driving smoothness {100 * smooth:8.3f} %  (1 s windows within nuPlan's comfort bounds, "
                         f"mean over {self.smoothness_runs} runs with a metric_info.json"
                         + (f"; {n - self.smoothness_runs} runs without one left out)" if self.smoothness_runs < n
                            else ")"))
        lines.append(f"bench2drive: {self.layout.bench2drive_merged} and {self.layout.bench2drive_ability.name}")
        return "\n".join(lines)


def _result_meta(layout: Layout, run: RunScore) -> dict[str, Any]:
    """The meta of the run's own result record (the aggregate keeps only its lengths and durations)."""
    if run.counted != "scored":
        return {}
    try:
        meta = files.read_json(layout.result_path(run.key))["_checkpoint"]["records"][0]["meta"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _bench2drive_checkpoints(meta: dict[str, Any]) -> list[float] | None:
    """meta.bench2drive_min_speed: the percentages of Bench2Drive's checkpoints, None when absent or not numbers."""
    values = meta.get("bench2drive_min_speed")
    if not isinstance(values, list) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                               for v in values):
        return None
    return values


def _merged_record(layout: Layout, run: RunScore, version_name: str, checkpoints: list[float] | None
                   ) -> dict[str, Any]:
    record = {k: v for k, v in run.record.items() if k != "index"}
    record["route_id"] = ROUTE_ID.format(route_id=record["route_id"])
    record["scores"] = bench2drive_scores(run.record, version_name)
    if checkpoints is not None:  # as Bench2Drive's fork records them: every checkpoint
        record["infractions"] = {**record["infractions"],
                                 MIN_SPEED: [MIN_SPEED_MESSAGE.format(percent=v) for v in checkpoints]}
        record["num_infractions"] = sum(len(v) for v in record["infractions"].values())
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
    junction_credit = no_junction = upstream = 0
    efficiencies, smoothness, records = [], [], []
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
        checkpoints = _bench2drive_checkpoints(_result_meta(layout, run))
        merged = _merged_record(layout, run, agg.version.name, checkpoints)
        records.append(merged)
        eff = run_efficiency(merged["infractions"].get(MIN_SPEED) or [])
        if eff is not None:
            efficiencies.append(eff)
            upstream += checkpoints is None
        smooth = _run_smoothness(layout, run)
        if smooth is not None:
            smoothness.append(smooth)

    figures = {name: (ok / total if total else None) for name, (ok, total) in counts.items()}
    present = [v for v in figures.values() if v is not None]
    ability = {**figures, "mean": sum(present) / len(present) if present else None,
               "crashed": [[r.key.scenario, ROUTE_ID.format(route_id=r.record["route_id"])]
                           for r in agg.runs if r.counted != "scored"]}
    records.sort(key=lambda d: d["route_id"], reverse=True)
    efficiency = sum(efficiencies) / len(efficiencies) if efficiencies else None
    smooth_figure = sum(smoothness) / len(smoothness) if smoothness else None
    not_computed = {}
    if efficiency is None:
        not_computed["driving efficiency"] = EFFICIENCY_NOT_COMPUTED
    if smooth_figure is None:
        not_computed["driving smoothness"] = SMOOTHNESS_NOT_COMPUTED
    merged = {
        "_checkpoint": {"records": records},
        "driving score": sum(r["scores"]["score_composed"] for r in records) / n,
        "success rate": sum(is_success(r.record) for r in agg.runs) / n,
        "eval num": n,
        "score_version": agg.version.name,
        "driving efficiency": efficiency,
        "driving smoothness": smooth_figure,
    }
    if not_computed:
        merged["not computed"] = not_computed
    return Bench2DriveMetrics(agg, merged, ability, {k: (ok, total) for k, (ok, total) in counts.items()},
                              junction_credit, no_junction, len(efficiencies), upstream, len(smoothness), layout)


def write_bench2drive(layout: Layout, agg: Aggregate) -> Bench2DriveMetrics:
    """Compute Bench2Drive's metrics and write ROOT/bench2drive/merged.json and merged_ability.json (atomically)."""
    metrics = bench2drive_metrics(layout, agg)
    atomic.write_json(layout.bench2drive_merged, metrics.merged)
    atomic.write_json(layout.bench2drive_ability, metrics.ability)
    return metrics


# ----------------------------------------------------------------------------- the field's protocol (bin/demo)


def benchmark_routes(path: Any, flag: str = "--bench2drive") -> Path:
    """The benchmark's route file: `path` itself (a route file) or, for a Bench2Drive checkout, its
    ROUTES_IN_CHECKOUT; parsed, so a bad file is one ToolError line naming `flag` before any work starts."""
    given = Path(str(path)).expanduser()
    file = given / ROUTES_IN_CHECKOUT if given.is_dir() else given
    if not file.is_file():
        what = f"no {ROUTES_IN_CHECKOUT} in that folder" if given.is_dir() else "no such file or folder"
        raise ToolError(f"{flag} {given}: {what}; give your Bench2Drive checkout (git clone "
                        "https://github.com/Thinklab-SJTU/Bench2Drive) or a route file of its shape")
    try:
        read_routes(file)  # (a file without a route is a RouteError too)
    except RouteError as e:
        raise ToolError(f"{flag} {e}; give Bench2Drive's {ROUTES_IN_CHECKOUT} or a route file of its shape") from None
    return file


def routes_per_town(benchmark: Path | None, towns: list[str], total: int) -> dict[str, int]:
    """How many of `total` training routes each of `towns` gets: its share of the benchmark's routes (the field
    trains where it is tested: most of Bench2Drive-220 is on Town12 and Town13), at least LEAST_ROUTES_PER_TOWN;
    a town the benchmark does not drive gets that least; without a benchmark, equal shares. The counts sum to about
    `total` (rounded)."""
    by_town: dict[str, int] = {}
    for route in read_routes(benchmark) if benchmark is not None else []:
        by_town[route.town] = by_town.get(route.town, 0) + 1
    if not by_town:
        by_town = dict.fromkeys(towns, 1)
    driven = sum(by_town.get(t, 0) for t in towns) or 1
    return {t: max(LEAST_ROUTES_PER_TOWN, round(total * by_town.get(t, 0) / driven)) for t in towns}
