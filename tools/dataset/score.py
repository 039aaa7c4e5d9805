"""The aggregate of an evaluation root: ROOT/result.json, a leaderboard 2.0 checkpoint JSON over EVERY route
run the manifest plans, computed as the leaderboard 2.0 statistics manager computes it.

Followed: carla-simulator/leaderboard, branch leaderboard-2.0 (a87a341), leaderboard/utils/statistics_manager.py,
`StatisticsManager.compute_global_statistics`. With N the planned runs (its `_total_routes`, routes x
repetitions) and the sums over the runs' records:

    driving score        DS = sum(score_composed) / N        score_composed = score_route * score_penalty
    route completion     RC = sum(score_route) / N           percent of the route driven
    infraction score     IS = sum(score_penalty) / N         the product of the run's penalty factors
    standard deviations  sqrt(sum((x - mean)^2) / (N - 1)), 0 when N = 1
    km driven            max(sum(route_length / 1000 * score_route / 100), 0.001)
    infractions per km   count of each infraction kind / km driven; outside_route_lanes is the km driven
                         outside the route's lanes (read from its message) and is not divided
    global status        Perfect, downgraded to Completed, then to Failed by the worst run; the failed runs
                         are listed in meta.exceptions as (route_id, index, status)

Rounded as the leaderboard rounds: means to 6 digits, standard deviations and per-km values to 3.

What the leaderboard leaves to chance we fix: a run with no result (pending, running, or its process died) and
a run whose final result is a crash (tools.dataset.results.CRASH_STATUSES) count as the leaderboard's empty
record: every score 0, no infraction, never dropped. The means therefore always divide by all N planned runs.
`entry_status` is Started while a run has no result yet, Crashed when a run crashed, else Finished; only
Finished is `eligible` (the leaderboard's ELIGIBLE_VALUES).

Intervals (not the leaderboard's: ours, printed beside its means): a 95% Student-t interval of the mean,
mean +- t(0.975, n-1) * s / sqrt(n), over the n planned runs (routes x seeds) and, per route, over its seeds
(`mean_interval`). `bin/evaluate compare` takes the same interval of paired differences.

Leaderboard 2.1 (`--score 2.1`): the same aggregate over each run's 2.1 scores, recomputed from its infractions
(tools.dataset.leaderboard_scores); result.json then says `"score_version": "2.1"` (without that key it is 2.0).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset.layout import Layout, RunKey
from tools.dataset.leaderboard_scores import DEFAULT_VERSION, VERSIONS, ScoreVersion
from tools.dataset.manifest import planned_runs, read_manifest
from tools.dataset.results import INFRACTION_KEYS, RunState, run_state

ROUND_DIGITS = 3
ROUND_DIGITS_SCORE = 6
ELIGIBLE = {"Started": False, "Finished": True, "Rejected": False, "Crashed": False, "Invalid": False}
#: The leaderboard's status of a route that has no outcome (its RouteRecord before statistics are computed).
NO_OUTCOME = "Started"
SCORE_KEYS = ("score_composed", "score_route", "score_penalty")
OUTSIDE_LANES = "outside_route_lanes"

#: `values` and `labels` of the leaderboard, in its order.
LABELS = (
    ("Avg. driving score", "score_composed"),
    ("Avg. route completion", "score_route"),
    ("Avg. infraction penalty", "score_penalty"),
    ("Collisions with pedestrians", "collisions_pedestrian"),
    ("Collisions with vehicles", "collisions_vehicle"),
    ("Collisions with layout", "collisions_layout"),
    ("Red lights infractions", "red_light"),
    ("Stop sign infractions", "stop_infraction"),
    ("Off-road infractions", "outside_route_lanes"),
    ("Route deviations", "route_dev"),
    ("Route timeouts", "route_timeout"),
    ("Agent blocked", "vehicle_blocked"),
    ("Yield emergency vehicles infractions", "yield_emergency_vehicle_infractions"),
    ("Scenario timeouts", "scenario_timeouts"),
    ("Min speed infractions", "min_speed_infractions"),
)

#: t(0.975, df) for df = 1..30 (Student's t table); above 30, the Cornish-Fisher expansion in `t_quantile_975`.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

#: How the leaderboard's OutsideRouteLanesTest words it: "Agent went outside its route lanes for about X meters ...".
_OUTSIDE_METRES = re.compile(r"for about ([0-9]+(?:\.[0-9]*)?) meters")


@dataclass(frozen=True)
class RunScore:
    """One planned route run as the aggregate counts it."""

    key: RunKey
    state: RunState
    record: dict[str, Any]  # the leaderboard record counted (zeros for a crashed or missing run)
    counted: str  # "scored" (its own record), "crashed" or "missing" (counted as the empty record)

    @property
    def shown_status(self) -> str:
        """The status for a person: the record's, or why there is none."""
        if self.counted == "missing":
            return f"no result ({self.state})"
        if self.state is RunState.CRASHED:
            return "no result (crashed)"
        if self.state is RunState.DAMAGED:
            return "damaged result file"
        return str(self.record["status"])


@dataclass(frozen=True)
class Aggregate:
    """The aggregate of an evaluation root: what result.json holds, and the runs it was computed from."""

    path: Path
    runs: list[RunScore]
    data: dict[str, Any]  # result.json
    km_driven: float  # before the 0.001 floor
    version: ScoreVersion = VERSIONS[DEFAULT_VERSION]  # the leaderboard score (tools.dataset.leaderboard_scores)

    @property
    def global_record(self) -> dict[str, Any]:
        return self.data["_checkpoint"]["global_record"]

    @property
    def driving_score(self) -> float:
        return self.global_record["scores_mean"]["score_composed"]

    @property
    def route_completion(self) -> float:
        return self.global_record["scores_mean"]["score_route"]

    @property
    def infraction_score(self) -> float:
        return self.global_record["scores_mean"]["score_penalty"]

    @property
    def entry_status(self) -> str:
        return self.data["entry_status"]

    def count(self, counted: str) -> int:
        return sum(r.counted == counted for r in self.runs)

    def summary(self, what: str, notes: list[str] | None = None) -> str:
        """The summary a person reads: what was evaluated, the three scores with their 95% intervals over the
        runs (routes x seeds), infractions per km, statuses, the runs counted as 0, `notes`, per route the
        means over its seeds (when a route has several), a table of every run with its picture (relative to
        the root, where one was written: tools.collect.base.film), where result.json is."""
        g = self.global_record
        std = g["scores_std_dev"]
        n = len(self.runs)
        by_route: dict[str, list[RunScore]] = {}
        for r in self.runs:
            by_route.setdefault(r.key.route, []).append(r)
        seeds = sorted({len(v) for v in by_route.values()})
        shape = f"{len(by_route)} routes x {seeds[0]} seeds" if len(seeds) == 1 else f"{len(by_route)} routes"
        lines = [f"evaluation of {what} on {n} route runs ({shape}): leaderboard {self.version.name} scores, means "
                 f"over all {n} "
                 "with their 95% t-intervals (std over runs)"]
        for label, k in (("driving score", "score_composed"), ("route completion", "score_route"),
                         ("infraction score", "score_penalty")):
            mean, half = mean_interval([r.record["scores"][k] for r in self.runs])
            lines.append(f"  {label:<17} {format_interval(mean, half)}  (std {std[k]:.3f})")
        per_km = ", ".join(f"{k} {v:g}" for k, v in g["infractions"].items() if v and k != OUTSIDE_LANES) or "none"
        lines.append(f"  infractions per km ({self.km_driven:.3f} km driven): {per_km}")
        if g["infractions"].get(OUTSIDE_LANES):
            lines.append(f"  outside the route's lanes: {g['infractions'][OUTSIDE_LANES]:g} km")
        statuses = Counter(r.shown_status for r in self.runs)
        lines.append("  statuses: " + ", ".join(f"{s} {c}" for s, c in statuses.most_common()))
        crashed, missing = self.count("crashed"), self.count("missing")
        if crashed or missing:
            lines.append(f"  counted with score 0: {crashed} crashed, {missing} without a result yet"
                         + ("; rerun the same command to retry crashed runs (up to --max-attempts attempts each)"
                            if crashed else ""))
        lines += [f"  {note}" for note in notes or []]
        if max(seeds) > 1:  # per route over its seeds: how much one route's score varies with the world
            rwidth = max(len("route"), *(len(k) for k in by_route))
            lines.append(f"  {'route':<{rwidth}}  {'seeds':>5}  {'DS (95% interval)':>20}  {'RC (95% interval)':>20}")
            for route, runs in by_route.items():
                ds = format_interval(*mean_interval([r.record["scores"]["score_composed"] for r in runs]), width=7)
                rc = format_interval(*mean_interval([r.record["scores"]["score_route"] for r in runs]), width=7)
                lines.append(f"  {route:<{rwidth}}  {len(runs):>5}  {ds:>20}  {rc:>20}")
        width = max(len("route run"), *(len(str(r.key)) for r in self.runs))
        swidth = max(len("status"), *(len(r.shown_status) for r in self.runs))
        lines.append(f"  {'route run':<{width}}  {'status':<{swidth}}  {'DS':>7}  {'RC':>7}  picture")
        for r in self.runs:
            s = r.record["scores"]
            film = Layout(self.path.parent).film_path(r.key)
            shown = str(film.relative_to(self.path.parent)) if film.is_file() else "-"
            lines.append(f"  {str(r.key):<{width}}  {r.shown_status:<{swidth}}  {s['score_composed']:7.2f}  "
                         f"{s['score_route']:7.2f}  {shown}")
        partial = f"; {missing} runs have no result yet, so it is partial" if missing else ""
        lines.append(f"result: {self.path} (entry_status {self.entry_status}{partial})")
        return "\n".join(lines)


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (df >= 1): the 3-digit table to 30, then
    the Cornish-Fisher expansion (within 1e-3 of the exact value throughout)."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = 1.959963984540054, float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


def mean_interval(values: list[float]) -> tuple[float, float | None]:
    """(mean, half-width of its 95% t-interval); the half-width is None for fewer than 2 values (no interval)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    return mean, t_quantile_975(n - 1) * sd / math.sqrt(n)


def format_interval(mean: float, half: float | None, width: int = 8) -> str:
    """"  50.000 ± 12.345" (the interval "n/a" when there is none)."""
    return f"{mean:{width}.3f} ± {half:.3f}" if half is not None else f"{mean:{width}.3f} ± n/a"


def km_driven(route_length_m: float, score_route: float) -> float:
    """The km a run counts as driven, as the leaderboard counts them: its route's length times its route
    completion (score_route, percent)."""
    return route_length_m / 1000 * score_route / 100


def outside_lanes_km(messages: list[Any]) -> float:
    """The km a run drove outside its route's lanes, from the first message of that infraction (as the
    leaderboard reads it: the metres the message names / 1000); 0 when none names a distance."""
    if not messages:
        return 0.0
    m = _OUTSIDE_METRES.search(str(messages[0]))
    return float(m.group(1)) / 1000 if m else 0.0


def _empty_record(index: int, route_id: str, run: str, status: str, meta: dict[str, Any] | None) -> dict[str, Any]:
    """The leaderboard's RouteRecord before statistics: every score 0, no infraction."""
    meta = meta or {}
    return {
        "index": index, "route_id": route_id, "run": run, "status": status, "num_infractions": 0,
        "infractions": {k: [] for k in INFRACTION_KEYS},
        "scores": {"score_route": 0.0, "score_penalty": 0.0, "score_composed": 0.0},
        "meta": {k: finite_number(meta.get(k)) for k in ("route_length", "duration_game", "duration_system")},
    }


def finite_number(value: Any) -> float:
    """A result field as a finite float; 0 for anything else (missing, text, NaN, infinite)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return 0.0
    return out if math.isfinite(out) else 0.0


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = files.read_json(path)["_checkpoint"]["records"][0]
        return record if isinstance(record, dict) else None
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _run_score(layout: Layout, index: int, name: str, planned: dict[str, Any], version: ScoreVersion) -> RunScore:
    scenario, _, run = name.partition("/")
    key = RunKey(scenario, run)
    route_id = f"{planned.get('route_id', run)}_rep{planned.get('repetition', 0)}"
    state = run_state(layout, key)
    record = _read_record(layout.result_path(key)) if state in (RunState.FINISHED, RunState.FAILED) else None
    if state is RunState.FINISHED and record is not None:
        scores = record.get("scores") or {}
        infractions = record.get("infractions") or {}
        counted = {
            "index": index, "route_id": route_id, "run": name, "status": str(record.get("status")),
            "infractions": {k: list(infractions.get(k) or []) for k in INFRACTION_KEYS},
            "scores": version.scores({k: finite_number(scores.get(k)) for k in ("score_route", "score_penalty",
                                                                                 "score_composed")},
                                     {k: list(infractions.get(k) or []) for k in INFRACTION_KEYS}),
            "meta": {k: finite_number((record.get("meta") or {}).get(k))
                     for k in ("route_length", "duration_game", "duration_system")},
        }
        counted["num_infractions"] = sum(len(v) for v in counted["infractions"].values())
        return RunScore(key, state, counted, "scored")
    if state in (RunState.PENDING, RunState.RUNNING):
        return RunScore(key, state, _empty_record(index, route_id, name, NO_OUTCOME, None), "missing")
    # FAILED (a crash status in an evaluation root), CRASHED (no result, its process gone), DAMAGED
    status = str(record.get("status")) if record else NO_OUTCOME
    meta = record.get("meta") if record and isinstance(record.get("meta"), dict) else None
    return RunScore(key, state, _empty_record(index, route_id, name, status, meta), "crashed")


def aggregate(layout: Layout, version: ScoreVersion = VERSIONS[DEFAULT_VERSION]) -> Aggregate:
    """Compute the aggregate of an evaluation root over every planned run (nothing written), each run scored as
    leaderboard `version` scores it (2.0: the record's own scores; tools.dataset.leaderboard_scores)."""
    if not layout.is_evaluation:
        raise ToolError(f"--root {layout.root}: not an evaluation root (no {layout.evaluation.name}); "
                        "give the --root that bin/evaluate wrote")
    planned = planned_runs(read_manifest(layout))
    if not planned:
        raise ToolError(f"--root {layout.root}: no route runs planned in {layout.manifest.name} yet; run "
                        "bin/evaluate ... --root ROOT first")
    runs = [_run_score(layout, i, name, entry, version) for i, (name, entry) in enumerate(sorted(planned.items()))]
    records = [r.record for r in runs]
    total = len(records)

    mean = {k: round(sum(r["scores"][k] for r in records) / total, ROUND_DIGITS_SCORE) for k in SCORE_KEYS}
    if total == 1:
        std = dict.fromkeys(SCORE_KEYS, 0.0)
    else:
        std = {k: round(math.sqrt(sum((r["scores"][k] - mean[k]) ** 2 for r in records) / (total - 1)),
                        ROUND_DIGITS) for k in SCORE_KEYS}

    status, exceptions = "Perfect", []
    for r in records:
        result = "Failed" if "Failed" in r["status"] or r["status"] == NO_OUTCOME else r["status"]
        if result == "Failed":
            exceptions.append((r["route_id"], r["index"], r["status"]))
            status = "Failed"
        elif status == "Perfect" and result != "Perfect":
            status = result

    km = sum(km_driven(r["meta"]["route_length"], r["scores"]["score_route"]) for r in records)
    per_km = {}
    for k in INFRACTION_KEYS:
        if k == OUTSIDE_LANES:
            per_km[k] = round(sum(outside_lanes_km(r["infractions"][k]) for r in records), ROUND_DIGITS)
        else:
            per_km[k] = round(sum(len(r["infractions"][k]) for r in records) / max(km, 0.001), ROUND_DIGITS)

    if any(r.counted == "missing" for r in runs):
        entry_status = "Started"
    elif any(r.counted == "crashed" for r in runs):
        entry_status = "Crashed"
    else:
        entry_status = "Finished"
    global_record = {
        "index": -1, "route_id": -1, "status": status, "infractions": per_km,
        "scores_mean": mean, "scores_std_dev": std,
        "meta": {
            "total_length": round(sum(r["meta"]["route_length"] for r in records), ROUND_DIGITS),
            "duration_game": round(sum(r["meta"]["duration_game"] for r in records), ROUND_DIGITS),
            "duration_system": round(sum(r["meta"]["duration_system"] for r in records), ROUND_DIGITS),
            "exceptions": exceptions,
            "km_driven": round(km, ROUND_DIGITS),
            "runs": {"total": total, "scored": sum(r.counted == "scored" for r in runs),
                     "crashed": sum(r.counted == "crashed" for r in runs),
                     "missing": sum(r.counted == "missing" for r in runs)},
        },
    }
    values = [mean[k] if k in mean else per_km[k] for _, k in LABELS]
    data = {
        "_checkpoint": {
            "global_record": global_record,
            "progress": [sum(r.state not in (RunState.PENDING, RunState.RUNNING, RunState.CRASHED) for r in runs),
                         total],
            "records": records,
        },
        "entry_status": entry_status,
        "eligible": ELIGIBLE[entry_status],
        "sensors": [],
        "values": [str(v) for v in values],
        "labels": [label for label, _ in LABELS],
        **version.result_fields,
    }
    return Aggregate(layout.evaluation_result, runs, data, km, version)


def score_root(layout: Layout, version: ScoreVersion = VERSIONS[DEFAULT_VERSION]) -> Aggregate:
    """Aggregate an evaluation root and write ROOT/result.json (atomically); the aggregate for printing."""
    agg = aggregate(layout, version)
    atomic.write_json(agg.path, agg.data)
    return agg
