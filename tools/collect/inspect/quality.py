"""`validate`: check every frame of every finished route run of a root, and write its quality report.

    python -m tools.collect validate ROOT [--workers N] [--out DIR]      (bin/validate ROOT)

Every finished route run (tools.dataset.results.run_state) is read in worker processes, each frame checked by
tools.dataset.validate (decoding, schema and format version, indices, ticks and time, labels against each
other, the result file against the frames); a progress bar counts frames. The root is only read: the report
is the one thing written, as ROOT/reports/<date>/report.json and report.html (or under --out):

- runs, frames, failure rate and failure reasons per scenario type, town and weather (failed runs from their
  result files; crashed runs, which have none, as "crashed (no result)");
- distributions over the frames of finished runs: speed, acceleration, command, distance to the leader, the
  next light's state, and frames and stop fraction per bucket (the bucket rules of tools.dataset.bucket_rules);
- the expert's infractions per km driven, counted as the leaderboard counts them (tools.dataset.score);
- the integrity errors per run, and recommendations where the numbers call for them (thresholds below).

Exit status: 0 when every finished run is intact; EXIT_INVALID (1) when some run has integrity errors (listed
per run on stdout and in the report, which is written all the same); 2 for bad input (tools.core.errors):
a root with no finished runs, of a newer format version, an evaluation root, a report folder that cannot be
written. docs/quality.md describes the checks, the report's fields and the thresholds.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import math
import multiprocessing
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from tools.collect.base.routes import read_routes
from tools.collect.inspect.tables import known_runs
from tools.core import atomic, cli, files
from tools.core.errors import ToolError
from tools.dataset.bucket_rules import BEHAVIOUR_BUCKETS, BUCKETS, RULES, classify
from tools.dataset.frames import FrameError, read_measurements
from tools.dataset.layout import Layout, RunKey, open_root, unwritable
from tools.dataset.manifest import dataset_id, now_iso, planned_runs, read_manifest, tool_version
from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.results import DRIVING_STATUSES, INFRACTION_KEYS, RunState, is_failed, read_results
from tools.dataset.score import OUTSIDE_LANES, finite_number, km_driven, outside_lanes_km
from tools.dataset.validate import inspect_run
from tools.dataset.weather import weather_class

PROG = "validate"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
REPORT_FORMAT = 1
#: Exit status when some finished run has integrity errors (2, tools.core.errors, is bad input).
EXIT_INVALID = 1

# Recommendations: when a number crosses one of these, the report says what to do (docs/quality.md).
#: A bucket holding at least this share of the frames dominates training.
BUCKET_SHARE_MAX = 0.5
#: A scenario type, town or weather whose runs fail above this rate.
FAILURE_RATE_MAX = 0.10
#: The share of frames in which the ego stands still (speed below the bucket rules' stand_speed).
STAND_SHARE_MAX = 0.4
#: Infractions of one kind per km the expert may commit before its data is suspect.
EXPERT_INFRACTIONS_PER_KM_MAX = 0.1
#: Errors kept per run in the report (the count is always exact); the first few are printed.
ERRORS_KEPT = 200
ERRORS_PRINTED = 5

#: Histogram bins (values beyond the last edge are counted in the last bin).
SPEED_BINS = np.arange(0.0, 31.0, 1.0)  # m/s
ACCEL_BINS = np.arange(-10.0, 10.5, 0.5)  # m/s^2
LEADER_BINS = np.arange(0.0, 105.0, 5.0)  # m
NO_LEADER = "none"
NO_LIGHT = "none"
CRASHED_REASON = "crashed (no result)"
UNKNOWN = "unknown"


# ----------------------------------------------------------------------------- one run (in a worker)


@dataclass
class RunSummary:
    """What the report needs of one route run: where it belongs, its errors, its frames' numbers."""

    key: RunKey
    state: RunState
    town: str = UNKNOWN
    weather: str = UNKNOWN
    frames: int = 0
    unverified: int = 0  # frames without a checksum (recorded before dataset format 5)
    unplaced: int = 0  # frames that do not name their run (recorded before dataset format 6)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    # per frame (finished runs): speed, acceleration, command, leader gap (NaN: none), light state, bucket
    speed: list[float] = field(default_factory=list)
    acceleration: list[float] = field(default_factory=list)
    command: list[int] = field(default_factory=list)
    leader_gap: list[float] = field(default_factory=list)
    light: list[str] = field(default_factory=list)
    bucket: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None  # the leaderboard record of its result file


def check_finished(root: str, key: RunKey) -> RunSummary:
    """Read and check every frame of a finished run (runs in a worker process)."""
    layout = Layout(Path(root))
    out = RunSummary(key, RunState.FINISHED)
    try:
        found = inspect_run(layout, key)
    except Exception as e:  # noqa: BLE001 (a run that breaks the checker is listed with the run, not a crash)
        found = None
        out.errors, out.error_count = [f"could not be checked ({type(e).__name__}: {e})"], 1
    if found is None:
        return out
    out.errors, out.error_count = found.problems[:ERRORS_KEPT], len(found.problems)
    out.frames, out.unverified, out.unplaced = found.frames, found.unverified, found.unplaced
    out.town = str(found.run.get("town") or UNKNOWN)
    ms = found.measurements
    if ms:
        out.weather = weather_class(ms[0].weather)
    for m in ms:
        out.speed.append(float(m.speed))
        out.acceleration.append(float(m.acceleration))
        out.command.append(int(m.command))
        out.leader_gap.append(_gap(m))
        out.light.append(str(m.light.get("state")) if isinstance(m.light, dict) else NO_LIGHT)
        out.bucket.append(classify(m))
    return out


def _gap(m: Measurements) -> float:
    try:
        return float(m.leader["gap"]) if isinstance(m.leader, dict) else math.nan
    except (KeyError, TypeError, ValueError):
        return math.nan


def _context(layout: Layout, key: RunKey, planned: dict[str, Any]) -> tuple[str, str]:
    """(town, weather) of a run that is not checked (failed, crashed): its run.json and first frame, else its
    route file (named in the manifest), else UNKNOWN."""
    town, weather = UNKNOWN, UNKNOWN
    try:
        town = str(files.read_json(layout.run_settings(key)).get("town") or UNKNOWN)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        weather = weather_class(read_measurements(layout.frame_path(key, 0)).weather)
    except (OSError, FrameError):
        pass
    if UNKNOWN in (town, weather) and planned.get("route"):
        try:
            route = next(r for r in read_routes(Path(planned["route"])) if r.id == str(planned.get("route_id")))
        except (ToolError, OSError, StopIteration, ValueError):
            return town, weather
        town = route.town if town == UNKNOWN else town
        weather = weather_class(route.weathers[0] if route.weathers else {}) if weather == UNKNOWN else weather
    return town, weather


# ----------------------------------------------------------------------------- the command


def validate_root(root: str | None = None, workers: int | None = None, out: str | None = None) -> dict[str, Any]:
    """Check every finished route run of ROOT and write the quality report (see the module's docstring).
    Returns the report; exits with EXIT_INVALID after writing it when a run has integrity errors."""
    layout = open_root(root)
    manifest = read_manifest(layout)  # a newer format version: one line here, before anything is read
    if layout.is_evaluation:
        raise ToolError(f"--root {layout.root}: an evaluation root ({layout.evaluation.name}) records no frames; "
                        "validate the root bin/collect wrote")
    n_workers = cli.integer(workers, "workers", 1, 1024) if workers is not None else _cpus()
    report_dir = Path(cli.text(out, "out")).expanduser().absolute() if out is not None else \
        layout.reports / datetime.date.today().isoformat()
    _check_writable(report_dir, "--out" if out is not None else f"the report folder of --root {layout.root}")

    planned = planned_runs(manifest)
    found = read_results(layout, known_runs(layout, manifest))
    states = {key: state for key, (state, _) in found.items()}
    finished = [key for key, state in states.items() if state is RunState.FINISHED]
    if not finished:
        counts = Counter(s.value for s in states.values())
        shown = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
        raise ToolError(f"--root {layout.root}: no finished route runs to validate (route runs: {shown}); collect "
                        f"first (bin/collect ROUTES_DIR --root {layout.root}), or wait for running runs to finish")

    started = time.monotonic()
    summaries = _check_all(layout, finished, n_workers)
    seconds = time.monotonic() - started
    for key, state in states.items():
        if is_failed(state):
            town, weather = _context(layout, key, planned.get(str(key)) or {})
            summaries[key] = RunSummary(key, state, town=town, weather=weather)
        if key in summaries:
            summaries[key].result = _record(found[key][1])

    report = build_report(layout, manifest, states, summaries, seconds, n_workers)
    _write(report_dir, report)
    frames = report["validation"]["frames"]
    bad = report["validation"]["errors"]
    for name, errors in bad.items():
        print(f"{name}: {errors['count']} integrity errors")
        for problem in errors["first"][:ERRORS_PRINTED]:
            print(f"  {problem}")
        if errors["count"] > ERRORS_PRINTED:
            print(f"  ... {errors['count'] - ERRORS_PRINTED} more in {report_dir / REPORT_JSON}")
    for rec in report["recommendations"]:
        print(f"recommendation: {rec['message']}")
    unverified = report["validation"]["unverified_frames"]
    if unverified:
        print(f"validate: {unverified} of {frames} frames carry no checksum (frame format 1, recorded before dataset "
              "format 5): their bytes cannot be verified, only whether they decode; runs collected again get one")
    unplaced = report["validation"]["unplaced_frames"]
    if unplaced:
        print(f"validate: {unplaced} of {frames} frames do not name their run (frame formats 1 and 2, recorded before "
              "dataset format 6): unverified whether each lies in the run it was recorded in (their index is "
              "checked); runs collected again name theirs")
    print(f"validate: {len(finished)} finished route runs, {frames} frames read in {seconds:.1f} s with {n_workers} "
          f"worker processes: {report['validation']['frames_per_s']:.0f} frames/s; {len(bad)} runs with integrity "
          f"errors. Report: {report_dir / REPORT_HTML} (open it in a browser) and {report_dir / REPORT_JSON}")
    if bad:
        print(f"{PROG}: {len(bad)} of {len(finished)} finished route runs have integrity errors (listed above)",
              file=sys.stderr)
        sys.exit(EXIT_INVALID)
    return report


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _check_writable(folder: Path, what: str) -> None:
    """ToolError when `folder` cannot be made or written (checked before the long read, nothing created)."""
    why = unwritable(folder)
    if why:
        raise ToolError(f"{what}: cannot write the report into {folder}: {why}; give --out a folder you can "
                        "write to")


def _check_all(layout: Layout, keys: list[RunKey], workers: int) -> dict[RunKey, RunSummary]:
    """check_finished of every run, in `workers` processes, with a progress bar counting frames."""
    sizes = {key: layout.frame_count(key) for key in keys}
    out: dict[RunKey, RunSummary] = {}
    bar = tqdm(total=sum(sizes.values()), unit="frame", desc=PROG, file=sys.stderr, dynamic_ncols=True,
               mininterval=0.5)
    root = str(layout.root)
    try:
        if workers == 1 or len(keys) == 1:
            for key in keys:
                out[key] = check_finished(root, key)
                bar.update(sizes[key])
        else:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(workers, len(keys)), mp_context=context) as pool:
                futures = {pool.submit(check_finished, root, key): key for key in keys}
                for future in as_completed(futures):
                    key = futures[future]
                    try:
                        out[key] = future.result()
                    except BrokenProcessPool:
                        raise ToolError(f"a worker process died while reading {key} (out of memory?); rerun with "
                                        f"fewer --workers than {workers}") from None
                    bar.update(sizes[key])
    finally:
        bar.close()
    return dict(sorted(out.items()))


def _record(text: bytes | None) -> dict[str, Any] | None:
    try:
        record = files.loads(text or b"")["_checkpoint"]["records"][0]
        return record if isinstance(record, dict) else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


# ----------------------------------------------------------------------------- the report


def build_report(layout: Layout, manifest: dict[str, Any] | None, states: dict[RunKey, RunState],
                 summaries: dict[RunKey, RunSummary], seconds: float, workers: int) -> dict[str, Any]:
    """report.json's content (docs/quality.md)."""
    finished = [s for s in summaries.values() if s.state is RunState.FINISHED]
    frames = sum(s.frames for s in finished)
    errors = {str(s.key): {"count": s.error_count, "first": s.errors} for s in finished if s.error_count}
    report: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "root": str(layout.root),
        "dataset_id": dataset_id(layout) if manifest is not None else None,
        "format_version": (manifest or {}).get("format_version"),
        "created": now_iso(),
        "tool": tool_version(),
        "runs": {state.value: sum(1 for s in states.values() if s is state) for state in RunState},
        "validation": {
            "runs_checked": len(finished),
            "frames": frames,
            "seconds": round(seconds, 3),
            "workers": workers,
            "frames_per_s": round(frames / max(seconds, 1e-9), 1),
            "unverified_frames": sum(s.unverified for s in finished),
            "unplaced_frames": sum(s.unplaced for s in finished),
            "runs_with_errors": len(errors),
            "errors": errors,
        },
        "groups": {dim: _groups(summaries.values(), dim) for dim in ("scenario", "town", "weather")},
        "distributions": _distributions(finished),
        "buckets": _buckets(finished),
        "infractions": _infractions(summaries.values()),
    }
    report["recommendations"] = recommendations(report)
    return report


def _label(s: RunSummary, dim: str) -> str:
    return s.key.scenario if dim == "scenario" else getattr(s, dim)


def failure_reason(s: RunSummary) -> str:
    """Why a failed run failed: its result's status (a plain "Failed" with the infraction kinds it committed),
    or CRASHED_REASON for a run with no result."""
    if s.result is None:
        return CRASHED_REASON
    status = str(s.result.get("status"))
    infractions = s.result.get("infractions") if isinstance(s.result.get("infractions"), dict) else {}
    kinds = sorted(k for k, v in infractions.items() if v)
    return f"{status} ({', '.join(kinds)})" if status == "Failed" and kinds else status


def _groups(summaries: Any, dim: str) -> dict[str, dict[str, Any]]:
    """Per value of `dim` (scenario type, town, weather): runs that ended (finished + failed), finished, failed,
    frames (of finished runs), failure rate failed / runs, and the failure reasons with their counts."""
    rows: dict[str, dict[str, Any]] = {}
    for s in sorted(summaries, key=lambda s: s.key):
        row = rows.setdefault(_label(s, dim), {"runs": 0, "finished": 0, "failed": 0, "frames": 0,
                                               "failure_rate": 0.0, "failure_reasons": Counter()})
        row["runs"] += 1
        if s.state is RunState.FINISHED:
            row["finished"] += 1
            row["frames"] += s.frames
        else:
            row["failed"] += 1
            row["failure_reasons"][failure_reason(s)] += 1
    for row in rows.values():
        row["failure_rate"] = round(row["failed"] / row["runs"], 4)
        row["failure_reasons"] = dict(row["failure_reasons"].most_common())
    return dict(sorted(rows.items()))


def _histogram(values: np.ndarray, edges: np.ndarray) -> dict[str, Any]:
    values = values[np.isfinite(values)]
    counts, _ = np.histogram(np.clip(values, edges[0], edges[-1]), bins=edges)
    stats = {"mean": round(float(values.mean()), 3), "p5": round(float(np.percentile(values, 5)), 3),
             "p50": round(float(np.percentile(values, 50)), 3),
             "p95": round(float(np.percentile(values, 95)), 3)} if len(values) else {}
    return {"edges": [round(float(e), 3) for e in edges], "counts": counts.tolist(), "frames": int(len(values)),
            **stats}


def _distributions(finished: list[RunSummary]) -> dict[str, Any]:
    speed = np.array([v for s in finished for v in s.speed], dtype=np.float64)
    accel = np.array([v for s in finished for v in s.acceleration], dtype=np.float64)
    gaps = np.array([v for s in finished for v in s.leader_gap], dtype=np.float64)
    commands = Counter(_command_name(c) for s in finished for c in s.command)
    lights = Counter(v for s in finished for v in s.light)
    leader = _histogram(gaps, LEADER_BINS)
    leader[NO_LEADER] = int(np.isnan(gaps).sum())
    return {
        "speed": _histogram(speed, SPEED_BINS),
        "acceleration": _histogram(accel, ACCEL_BINS),
        "command": dict(commands.most_common()),
        "leader_distance": leader,
        "light_state": dict(lights.most_common()),
        "stand_fraction": round(float((speed < RULES["stand_speed"]).mean()), 4) if len(speed) else 0.0,
    }


def _command_name(value: int) -> str:
    try:
        return RoadOption(value).name
    except ValueError:
        return str(value)


def _buckets(finished: list[RunSummary]) -> dict[str, dict[str, Any]]:
    """Frames, share of all frames and stop fraction (speed below the rules' stand_speed) per bucket."""
    total = sum(len(s.bucket) for s in finished)
    out = {}
    for name in BUCKETS:
        speeds = [v for s in finished for b, v in zip(s.bucket, s.speed, strict=True) if b == name]
        out[name] = {"frames": len(speeds), "share": round(len(speeds) / total, 4) if total else 0.0,
                     "stop_fraction": round(sum(v < RULES["stand_speed"] for v in speeds) / len(speeds), 4)
                     if speeds else 0.0}
    return out


def _infractions(summaries: Any) -> dict[str, Any]:
    """The expert's infractions over every run it drove to an outcome (finished or failed driving, not crashed),
    per km driven as the leaderboard counts km (tools.dataset.score): route_length x route completion."""
    records = [s.result for s in summaries if s.result and s.result.get("status") in DRIVING_STATUSES]
    km = 0.0
    counts: Counter = Counter()
    outside_km = 0.0
    for r in records:
        meta, scores = r.get("meta") or {}, r.get("scores") or {}
        km += km_driven(finite_number(meta.get("route_length")), finite_number(scores.get("score_route")))
        infractions = r.get("infractions") or {}
        for k in INFRACTION_KEYS:
            items = infractions.get(k) or []
            if k == OUTSIDE_LANES:
                outside_km += outside_lanes_km(items)
            counts[k] += len(items)
    per_km = {k: round(counts[k] / max(km, 0.001), 3) for k in INFRACTION_KEYS if k != OUTSIDE_LANES}
    return {"runs": len(records), "km_driven": round(km, 3), "counts": {k: counts[k] for k in INFRACTION_KEYS},
            "per_km": per_km, "outside_route_lanes_km": round(outside_km, 3)}


def recommendations(report: dict[str, Any]) -> list[dict[str, str]]:
    """What to do where the numbers cross a threshold (docs/quality.md): [{"kind", "message"}]."""
    out = []

    def say(kind: str, message: str) -> None:
        out.append({"kind": kind, "message": message})

    bad = report["validation"]["runs_with_errors"]
    if bad:
        say("integrity", f"{bad} finished route runs have integrity errors: look at them (python -m tools.collect "
                         "show RUN --frame N), then delete their result files: they count as crashed, and "
                         "bin/clean-failed --yes and bin/collect (with enough --max-attempts) collect them again")
    for name, b in report["buckets"].items():
        if b["share"] >= BUCKET_SHARE_MAX:
            say("bucket_share", f"bucket {name} holds {100 * b['share']:.0f}% of the frames (at least "
                                f"{100 * BUCKET_SHARE_MAX:.0f}%): lower its weight in the bucket collections, or "
                                "collect routes whose scenario types fill the other buckets")
    empty = [name for name in BEHAVIOUR_BUCKETS if report["buckets"][name]["frames"] == 0]
    if empty:
        which = f"buckets {', '.join(empty)} hold" if len(empty) > 1 else f"bucket {empty[0]} holds"
        say("empty_buckets", f"{which} no frames: the training sampler has nothing to weight there; collect "
                             "routes that make the ego do it (turns, junctions, lights, starts from standing)")
    for dim, rows in report["groups"].items():
        for name, row in rows.items():
            if row["failure_rate"] > FAILURE_RATE_MAX:
                reasons = ", ".join(f"{r} ({n})" for r, n in row["failure_reasons"].items())
                say("failure_rate", f"{dim} {name} fails in {100 * row['failure_rate']:.0f}% of its runs "
                                    f"({row['failed']} of {row['runs']}, above {100 * FAILURE_RATE_MAX:.0f}%): "
                                    f"{reasons}; read their logs (bin/clean-failed lists them) and fix the routes "
                                    "or the expert before training on the rest")
    for dim in ("town", "weather"):
        rows = report["groups"][dim]
        if len(rows) == 1 and sum(r["runs"] for r in rows.values()) > 1:
            only = next(iter(rows))
            say(f"one_{dim}", f"every run has the same {dim} ({only}): "
                + ("a model cannot be validated on a held-out town; collect routes in more towns" if dim == "town"
                   else "vary the routes' <weathers> so that a model sees more than one"))
    stand = report["distributions"]["stand_fraction"]
    if stand >= STAND_SHARE_MAX:
        say("standing", f"the ego stands still in {100 * stand:.0f}% of the frames (at least "
                        f"{100 * STAND_SHARE_MAX:.0f}%): weight the stop bucket down, or shorten waits at lights")
    inf = report["infractions"]
    for kind, value in inf["per_km"].items():
        if value > EXPERT_INFRACTIONS_PER_KM_MAX:
            say("expert_infractions", f"the expert commits {value:g} {kind} per km ({inf['counts'][kind]} in "
                                      f"{inf['km_driven']:g} km, above {EXPERT_INFRACTIONS_PER_KM_MAX:g}): its "
                                      "frames near them teach the model the infraction; look at those runs")
    return out


# ----------------------------------------------------------------------------- writing


def _write(folder: Path, report: dict[str, Any]) -> None:
    try:
        atomic.write_json(folder / REPORT_JSON, report)
        atomic.write_text(folder / REPORT_HTML, render_html(report))
    except OSError as e:
        raise ToolError(f"cannot write the report into {folder} ({e.strerror or e}); give --out a folder you can "
                        "write to") from None


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(title: str) -> tuple[Any, Any]:
    from matplotlib.figure import Figure  # (no pyplot: no global state, no display needed)

    fig = Figure(figsize=(5.0, 3.0))
    ax = fig.subplots()
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return fig, ax


def _hist_plot(title: str, h: dict[str, Any], xlabel: str) -> str:
    fig, ax = _figure(title)
    edges = np.array(h["edges"])
    ax.bar(edges[:-1], h["counts"], width=np.diff(edges), align="edge", color="#4c72b0")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("frames")
    return _png(fig)


def _bar_plot(title: str, counts: dict[str, float], ylabel: str, line: float | None = None) -> str:
    fig, ax = _figure(title)
    names = list(counts)
    ax.bar(range(len(names)), list(counts.values()), color="#55a868")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    if line is not None:
        ax.axhline(line, color="#c44e52", linestyle="--", linewidth=1)
    return _png(fig)


def plots(report: dict[str, Any]) -> dict[str, str]:
    """The report's plots as base64 PNGs, by title."""
    d, b = report["distributions"], report["buckets"]
    return {
        "Speed": _hist_plot("Speed", d["speed"], "m/s"),
        "Acceleration": _hist_plot("Acceleration", d["acceleration"], "m/s²"),
        "Command": _bar_plot("Command", d["command"], "frames"),
        "Distance to the leader": _hist_plot(f"Distance to the leader ({d['leader_distance'][NO_LEADER]} frames "
                                             "without one)", d["leader_distance"], "m"),
        "Next light": _bar_plot("Next light's state", d["light_state"], "frames"),
        "Frames per bucket": _bar_plot("Frames per bucket", {k: v["frames"] for k, v in b.items()}, "frames"),
        "Stop fraction per bucket": _bar_plot("Stop fraction per bucket", {k: v["stop_fraction"] for k, v in b.items()},
                                              "share of frames standing"),
        "Failure rate per scenario type": _bar_plot(
            "Failure rate per scenario type", {k: v["failure_rate"] for k, v in report["groups"]["scenario"].items()},
            "failed / runs", line=FAILURE_RATE_MAX),
        "Expert infractions per km": _bar_plot("Expert infractions per km", report["infractions"]["per_km"], "per km"),
    }


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


_STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f0f0f0}.plots img{margin:4px;border:1px solid #ddd}
.rec{background:#fff4d6;padding:0.5em 1em;border-left:4px solid #e0a800}.ok{color:#2a7a2a}.bad{color:#b00020}"""


def render_html(report: dict[str, Any]) -> str:
    """One self-contained page: recommendations, validation, groups, distributions, buckets, infractions."""
    v, esc = report["validation"], html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Dataset quality: {esc(report['root'])}</title>"
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>Dataset quality report</h1><p>{esc(report['root'])} (dataset {esc(str(report['dataset_id']))}, "
             f"format {esc(str(report['format_version']))}), {esc(report['created'])}, {esc(report['tool'])}</p>",
             "<h2>Recommendations</h2>"]
    recs = report["recommendations"]
    parts += [f"<p class='rec'>{esc(r['message'])}</p>" for r in recs] or ["<p class='ok'>None: no number crosses "
                                                                             "a threshold.</p>"]
    status = "<span class='ok'>every finished run is intact</span>" if not v["runs_with_errors"] else \
        f"<span class='bad'>{v['runs_with_errors']} runs with integrity errors</span>"
    parts.append(f"<h2>Validation</h2><p>{v['runs_checked']} finished route runs, {v['frames']} frames read in "
                 f"{v['seconds']:.1f} s with {v['workers']} worker processes ({v['frames_per_s']:.0f} frames/s): "
                 f"{status}. Route runs by state: "
                 f"{esc(', '.join(f'{k} {n}' for k, n in report['runs'].items() if n))}.</p>")
    for name, errors in v["errors"].items():
        more = f" (first {len(errors['first'])} shown)" if errors["count"] > len(errors["first"]) else ""
        parts.append(f"<h3>{esc(name)}: {errors['count']} errors{more}</h3><ul>"
                     + "".join(f"<li>{esc(p)}</li>" for p in errors["first"]) + "</ul>")
    for dim, title in (("scenario", "Scenario type"), ("town", "Town"), ("weather", "Weather")):
        rows = [[name, r["runs"], r["finished"], r["failed"], r["frames"], f"{100 * r['failure_rate']:.1f}%",
                 "; ".join(f"{k} ({n})" for k, n in r["failure_reasons"].items())]
                for name, r in report["groups"][dim].items()]
        parts.append(f"<h2>Per {title.lower()}</h2>" + _table(
            [title, "runs", "finished", "failed", "frames", "failure rate", "failure reasons"], rows))
    parts.append("<h2>Buckets</h2>" + _table(
        ["bucket", "frames", "share", "stop fraction"],
        [[k, b["frames"], f"{100 * b['share']:.1f}%", f"{100 * b['stop_fraction']:.1f}%"]
         for k, b in report["buckets"].items()]))
    inf = report["infractions"]
    parts.append(f"<h2>Expert infractions</h2><p>{inf['runs']} runs driven to an outcome, {inf['km_driven']:g} km "
                 f"driven; {inf['outside_route_lanes_km']:g} km outside the route's lanes.</p>" + _table(
                     ["infraction", "count", "per km"],
                     [[k, inf["counts"][k], inf["per_km"][k]] for k in inf["per_km"]]))
    parts.append("<h2>Distributions (frames of finished runs)</h2><div class='plots'>")
    parts += [f"<img alt='{esc(title)}' title='{esc(title)}' src='data:image/png;base64,{png}'>"
              for title, png in plots(report).items()]
    parts.append("</div></body></html>")
    return "\n".join(parts)
