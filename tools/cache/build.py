"""Build and check the persistent training cache: every frame of every finished route run, preprocessed once.

`build_cache` runs tools.cache.preprocess.Preprocessor (frame -> training sample of
tools.dataset.samples) over a dataset root into ROOT/cache/<settings.key()>/, and records in its
settings.json how far apart the frames are (`frame_dt`, from the runs' run.json: one rate per cache);
`verify_cache` checks every record's checksum and can rebuild the damaged ones. Record format and
layout: tools.dataset.cache and docs/cache.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import math
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tools.cache.preprocess import OVERTAKE_FRAMES, Preprocessor
from tools.core import atomic, cli, files
from tools.core.errors import ToolError, human, space_for
from tools.dataset.cache import (
    CacheRecordError,
    Made,
    StaleRecordError,
    cache_dir,
    cache_format,
    check_record,
    older_cache_line,
    read_cache_settings,
    readable_cache_dir,
    record_path,
    record_run,
    recorded_frame_dt,
    run_fingerprint,
    run_key,
    run_rel,
    settings_path,
    write_record,
)
from tools.dataset.frames import (
    FrameError,
    identified,
    indexed_run,
    misplaced,
    read_fingerprint,
    read_frame,
    read_measurements,
)
from tools.dataset.layout import FRAME_SUFFIX, Layout, RunKey, open_root
from tools.dataset.manifest import read_manifest
from tools.dataset.measurements import Measurements
from tools.dataset.results import RunState, run_state
from tools.dataset.rig import RecordingRate, RigConfig, run_rate, run_rig
from tools.dataset.samples import CACHE_FORMAT, CacheSettings

PROG = "cache"


def _log(message: str) -> None:
    tqdm.write(f"{PROG}: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------- settings and flags

_CONVERT = {"int": cli.integer, "float": cli.number, "str": cli.text}


def parse_settings(overrides: dict[str, Any], flags: Iterable[str] = ()) -> CacheSettings:
    """CacheSettings from `--name=value` overrides, each converted to its field's type (fire guesses types:
    "64" is an int, "1e3" a float; equal settings must hash to the same cache folder).

    An unknown name is an error listing the near matches (among settings and the command's `flags`).
    """
    fields = {f.name: f for f in dataclasses.fields(CacheSettings)}
    values: dict[str, Any] = {}
    for raw_name, value in overrides.items():
        name = raw_name.replace("-", "_")
        if name not in fields:
            near = difflib.get_close_matches(name, [*fields, *flags], n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join('--' + n for n in near)}?" if near else ""
            raise ToolError(f"unknown setting --{raw_name}{hint} (settings: {', '.join(fields)})")
        kind = fields[name].type
        values[name] = _CONVERT[kind if isinstance(kind, str) else kind.__name__](value, name)
    try:
        return CacheSettings(**values)
    except ValueError as e:
        raise ToolError(f"{e}; see tools/dataset/samples.py CacheSettings") from None


def parse_shard(shard: Any) -> tuple[int, int]:
    """`--shard I/N` -> (I, N) with 0 <= I < N; None -> (0, 1)."""
    if shard is None:
        return 0, 1
    text = cli.text(shard, "shard").strip()
    parts = text.split("/")
    try:
        if len(parts) != 2:
            raise ValueError
        i, n = int(parts[0]), int(parts[1])
    except ValueError:
        raise ToolError(f"--shard {text}: expected I/N (this process takes slice I of N, 0 <= I < N), "
                        "e.g. --shard 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ToolError(f"--shard {text}: expected I/N with N >= 1 and 0 <= I < N, e.g. --shard 0/{max(n, 1)}")
    return i, n


def parse_only(only: Any) -> tuple[str, int] | None:
    """`--only data/<Scenario>/<run>:INDEX` -> (run_rel, index)."""
    if only is None:
        return None
    text = cli.text(only, "only")
    rel, sep, index = text.rpartition(":")
    try:
        if not sep:
            raise ValueError
        run_key(rel)
        i = int(index)
        if i < 0:
            raise ValueError
    except ValueError:
        raise ToolError(f"--only {text}: expected data/<Scenario>/<run>:INDEX, e.g. "
                        "--only data/NoScenario/town_0000_route0_rep0:12") from None
    return rel.strip("/"), i


def shard_of(rel: str, n: int) -> int:
    """The shard of a route run: a stable hash of its name (the same on every machine and Python)."""
    return int.from_bytes(hashlib.sha256(rel.encode()).digest()[:8], "big") % n


# ----------------------------------------------------------------------------- the dataset side


def cacheable_runs(layout: Layout) -> list[RunKey]:
    """The keys of every FINISHED route run (tools.dataset.results.run_state, the one definition), sorted;
    ToolError when there is none."""
    states = {key: run_state(layout, key) for key in layout.iter_runs()}
    runs = [key for key, state in states.items() if state is RunState.FINISHED]
    if not states:
        raise ToolError(f"{layout.root}: the dataset is empty (no route runs); collect first: "
                        f"bin/collect ROUTES_DIR --root {layout.root}")
    if not runs:
        counts: dict[str, int] = {}
        for state in states.values():
            counts[state.value] = counts.get(state.value, 0) + 1
        table = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        raise ToolError(f"{layout.root}: no finished route runs to cache ({table}); see bin/progress {layout.root}")
    return runs


@dataclass(frozen=True)
class RunSource:
    """What the cache needs of a route run's run.json: its rig (sensor names, BEV grid), its rate, and which
    recorded attempt of the run it is (cache.run_fingerprint: every record made from it names it)."""

    key: RunKey
    rig: RigConfig
    rate: RecordingRate
    fingerprint: str


def read_run_source(layout: Layout, key: RunKey) -> RunSource:
    """The rig and recording rate of a route run; FrameError when its run.json cannot say."""
    path = layout.run_settings(key)
    try:
        raw = files.read_bytes(path, files.MAX_JSON_BYTES)
        run = files.loads(raw)
        return RunSource(key, run_rig(run), run_rate(run), run_fingerprint(raw))
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise FrameError(f"{path}: cannot read the run's rig and recording rate ({e})") from None


def read_run_sources(layout: Layout, keys: list[RunKey]) -> tuple[dict[RunKey, RunSource], dict[RunKey, str]]:
    """(sources of the readable runs, why each other one is unreadable)."""
    sources, problems = {}, {}
    for key in keys:
        try:
            sources[key] = read_run_source(layout, key)
        except FrameError as e:
            problems[key] = str(e)
    return sources, problems


def _rate_text(rate: RecordingRate) -> str:
    return f"{rate.frame_dt:g} s apart (--sim_hz={rate.sim_hz} --record_every={rate.record_every})"


def common_frame_dt(folder: Path, cached: float | None, sources: Iterable[RunSource]) -> float | None:
    """The time between frames all `sources` share, and the cache folder's `cached` one if it records one.

    A cache holds one recording rate (the time step of its waypoints): a run of another rate is one
    ToolError naming it, both rates and the fix. None when there is nothing to go by."""
    fix = ("a cache holds one recording rate (its waypoints' time step): collect the run again at that rate, "
           "or give runs of another rate a dataset root of their own")
    reference: RunSource | None = None
    for source in sorted(sources, key=lambda src: src.key):
        dt = source.rate.frame_dt
        if cached is not None and not math.isclose(dt, cached, rel_tol=1e-9):
            raise ToolError(f"{source.key}: frames recorded {_rate_text(source.rate)}, but the cache {folder} holds "
                            f"frames {cached:g} s apart; {fix}")
        if reference is not None and not math.isclose(dt, reference.rate.frame_dt, rel_tol=1e-9):
            raise ToolError(f"{source.key}: frames recorded {_rate_text(source.rate)}, but those of {reference.key} "
                            f"{_rate_text(reference.rate)}; {fix}")
        reference = reference or source
    if cached is not None:
        return cached
    return None if reference is None else reference.rate.frame_dt


def _create(path: Path, content: dict[str, Any]) -> bool:
    """Write `content` as JSON at `path` unless a file is there already (then False): of builders racing
    on a new folder, exactly one writes its settings.json."""
    tmp = path.with_name(f"{atomic.TMP_PREFIX}{path.name}.{os.getpid()}")
    atomic.write_json(tmp, content)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: the last writer wins
        if path.exists():
            return False
        os.replace(tmp, path)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def prepare_cache_dir(layout: Layout, settings: CacheSettings, sources: Iterable[RunSource]
                      ) -> tuple[Path, float | None]:
    """ROOT/cache/<key>/ with its settings.json (written first, with the runs' frame_dt), and that frame_dt.

    Refuses a folder of other settings and runs of another rate than each other or than the folder,
    before anything is written; adds frame_dt to the settings.json of a folder built before it was
    recorded. Without any run to go by (an empty shard), writes nothing."""
    folder = cache_dir(layout, settings)
    path = settings_path(folder)
    sources = list(sources)
    for _ in range(2):  # a second time when another builder created settings.json meanwhile
        cached = None
        if path.exists():
            if read_cache_settings(folder) != settings:
                raise ToolError(f"{path}: holds other settings than its folder name says; move {folder} aside "
                                "and build again")
            cached = recorded_frame_dt(folder)
        frame_dt = common_frame_dt(folder, cached, sources)
        if cached is not None or frame_dt is None:
            return folder, frame_dt
        if path.exists():  # built before frame_dt was recorded: add it, the runs agree
            atomic.write_json(path, {**files.read_json(path), "frame_dt": frame_dt})
            _log(f"{path}: recorded frame_dt {frame_dt:g} s (from the runs' run.json)")
            return folder, frame_dt
        content = {"format": CACHE_FORMAT, "key": settings.key(), "settings": settings.to_dict(), "frame_dt": frame_dt}
        if _create(path, content):
            return folder, frame_dt
    raise ToolError(f"{path}: changed while this builder was starting; run it again")


def _describe(settings: CacheSettings) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.to_dict().items())


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds through atomic writes, which remove their temporary files


def _done(path: Path, run: str | None) -> bool:
    """The builder's cheap test of a finished record: its first bytes say it was made from the run's recorded
    attempt `run` (None: the run.json is unreadable, nothing is done). Writes are atomic, so a record is either
    whole or absent; `verify` checks checksums."""
    return run is not None and record_run(path) == run


def _remove_stale_tmp(folder: Path) -> int:
    """Delete the temporary files of builders killed mid-write in one run's record folder; their count."""
    removed = 0
    for p in atomic.stale_temporaries(folder):
        try:
            p.unlink()
            removed += 1
        except OSError:
            pass
    return removed


@dataclass
class _RunPlan:
    key: RunKey
    frames: dict[int, Path]  # index -> frame file
    todo: list[int]
    wanted: list[int]
    names: list[str]  # the frame files' names (Layout.frame_names)
    index: Path  # the run's measurements index (Layout.run_measurements)
    run: str | None = None  # the fingerprint of its recorded attempt (None: its run.json is unreadable)
    stale: int = 0  # records of `wanted` made from an earlier recording of the run


def _frame_problem(frame: dict[str, Any], plan: _RunPlan, index: int, listed: list[int] | None) -> str:
    """Why frame `index` of a run may not make its record: it names another place (frames.misplaced, the rule
    validate applies), or its bytes are not those the run's measurements index lists for it (`listed`); ""."""
    wrong = misplaced(frame, str(plan.key), index)
    if wrong:
        return wrong
    if listed is not None and frame["fingerprint"] != listed[index]:
        return (f"its bytes are not those its run recorded (fingerprint {frame['fingerprint']}, the run's "
                f"{plan.index.name} lists {listed[index]}): a frame replaced since; record the run again (delete "
                "its result file, then bin/collect)")
    return ""


def _build_run(folder: Path, settings: CacheSettings, plan: _RunPlan, pre: Preprocessor, force: bool,
               bar: tqdm, stats: dict[str, int]) -> None:
    rel = run_rel(plan.key)
    # measurements first (poses of the frames i .. i+ahead: the waypoints' and the overtake label's): from the run's
    # index when it lists exactly its frames (one read instead of one per frame; with its frames' fingerprints from
    # format 3 on), else from the frames; then each frame's sensors
    summary = indexed_run(plan.index, plan.names)
    indexed = None if summary is None else summary.measurements
    listed = None if summary is None else summary.fingerprints
    measurements: dict[int, Measurements] = dict(enumerate(indexed or []))
    ahead = max(settings.horizon, OVERTAKE_FRAMES)
    if indexed is None:
        for j in sorted({j for i in plan.todo for j in range(i, i + ahead + 1) if j in plan.frames}):
            try:
                measurements[j] = read_measurements(plan.frames[j])
            except (FrameError, OSError) as e:
                _log(f"{plan.frames[j]}: unreadable frame ({e})")
    for i in plan.todo:
        path = record_path(folder, rel, i)
        if not force and _done(path, plan.run):  # another builder made it meanwhile
            stats["skipped"] += 1
            bar.update(1)
            continue
        try:
            if i not in measurements:
                raise FrameError("unreadable measurements")
            frame = read_frame(plan.frames[i], sensors=pre.sensor_names, rig=pre.rig)  # checksum; bounded decode
            wrong = _frame_problem(frame, plan, i, listed)
            if wrong:
                raise FrameError(wrong)
            stats["unplaced"] += not identified(frame)
            sample = pre(frame, [measurements.get(i + k) for k in range(1, ahead + 1)])
        except (FrameError, OSError, KeyError, TypeError, ValueError) as e:
            _log(f"{plan.frames[i]}: cannot make its sample ({e.__class__.__name__}: {e})")
            path.unlink(missing_ok=True)  # a record there was made from another frame than the one there now
            stats["unreadable"] += 1
            bar.update(1)
            continue
        write_record(path, sample, settings.jpeg_quality, Made(rel, i, plan.run or "", frame["fingerprint"]))
        stats["built"] += 1
        bar.update(1)


def preprocessors_for(settings: CacheSettings, sources: dict[RunKey, RunSource]) -> dict[RunKey, Preprocessor]:
    """The Preprocessor of each run (one per distinct rig); ToolError, before anything is built, when a
    run's rig lacks the settings' camera."""
    by_rig: dict[RigConfig, Preprocessor] = {}
    out = {}
    for key, source in sources.items():
        if source.rig not in by_rig:
            try:
                by_rig[source.rig] = Preprocessor(settings, source.rig)
            except ToolError as e:
                raise ToolError(f"{key}: {e}") from None
        out[key] = by_rig[source.rig]
    return out


def _space_needed(folder: Path, plans: list[_RunPlan], left: int) -> tuple[int, str] | None:
    """What `left` more records take: their count times the mean size of up to 100 of the records there are."""
    sizes: list[int] = []
    for plan in plans:
        for i in plan.wanted:
            with contextlib.suppress(OSError):
                sizes.append(record_path(folder, run_rel(plan.key), i).stat().st_size)
            if len(sizes) == 100:
                break
        if len(sizes) == 100:
            break
    if not sizes:
        return None
    mean = sum(sizes) / len(sizes)
    return int(left * mean), f"{left} records of {human(mean)}, the mean of {len(sizes)} records of this cache"


def _build_runs(folder: Path, settings: CacheSettings, plans: list[_RunPlan], pres: dict[RunKey, Preprocessor],
                force: bool, bar: tqdm, stats: dict[str, int]) -> None:
    """Build the records `plans` name; a run without a Preprocessor (its run.json is unreadable) counts
    its records unreadable."""
    for plan in plans:
        if not plan.todo:
            continue
        if plan.key not in pres:
            _log(f"{plan.key}: skipping its {len(plan.todo)} samples (its run.json is unreadable)")
            stats["unreadable"] += len(plan.todo)
            bar.update(len(plan.todo))
            continue
        _build_run(folder, settings, plan, pres[plan.key], force, bar, stats)


def _read_sources(layout: Layout, keys: list[RunKey]) -> dict[RunKey, RunSource]:
    """The sources of the runs whose run.json is readable; the others are named on stderr."""
    sources, problems = read_run_sources(layout, keys)
    for why in problems.values():
        _log(why)
    return sources


def _plan(layout: Layout, folder: Path, runs: list[RunKey], force: bool, only: tuple[str, int] | None,
          sources: dict[RunKey, RunSource]) -> list[_RunPlan]:
    """What to build of each run: every frame whose record is missing, damaged at its start, or made from an
    earlier recording of the run (stale: counted); with `force` or `only`, every wanted frame."""
    plans = []
    for key in runs:
        frames = {}
        names = layout.frame_names(key)
        frames_dir = layout.frames_dir(key)
        for name in names:
            stem = name[: -len(FRAME_SUFFIX)]
            if stem.isdigit():
                frames[int(stem)] = frames_dir / name
        wanted = sorted(frames)
        if only is not None:
            if run_rel(key) != only[0]:
                continue
            wanted = [only[1]] if only[1] in frames else []
        rel = run_rel(key)
        run = sources[key].fingerprint if key in sources else None
        made = {i: record_run(record_path(folder, rel, i)) for i in wanted} if not force and only is None else {}
        todo = [i for i in wanted if made.get(i) is None or made[i] != run]
        stale = sum(1 for i in todo if made.get(i) is not None)
        plans.append(_RunPlan(key, frames, todo, wanted, names, layout.run_measurements(key), run, stale))
    return plans


def build_cache(root: Any = None, shard: Any = None, force: Any = False, only: Any = None,
                settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build (or complete) the cache of `settings` for a dataset root; returns the summary's figures."""
    force = cli.switch(force, "force")
    settings_ = parse_settings(settings or {}, flags=("root", "shard", "force", "only"))
    shard_i, shard_n = parse_shard(shard)
    only_ = parse_only(only)
    layout = open_root(root)
    read_manifest(layout)  # refuses a root of another dataset format
    runs = cacheable_runs(layout)
    if only_ is not None:
        key = run_key(only_[0])
        if key not in runs:
            raise ToolError(f"--only {only}: {layout.root / only_[0]} is not a finished route run of this root")
        frames = {int(p.stem) for p in layout.frame_paths(key) if p.stem.isdigit()}
        if only_[1] not in frames:
            raise ToolError(f"--only {only}: the run has no frame {only_[1]} (frames 0 to {len(frames) - 1})")
        mine = [key]
    else:
        mine = [k for k in runs if shard_of(run_rel(k), shard_n) == shard_i]

    # Everything that can be refused (a rig without the camera, another recording rate) is refused here,
    # before anything is written.
    sources = _read_sources(layout, mine)
    pres = preprocessors_for(settings_, sources)
    target = cache_dir(layout, settings_)
    while not target.exists():  # the nearest folder there is: where the builder would create its own
        target = target.parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise ToolError(f"--root {layout.root}: {target} is not writable (a read-only root?); build the cache "
                        "where you can write, or copy the root")
    folder, frame_dt = prepare_cache_dir(layout, settings_, sources.values())
    rate = "" if frame_dt is None else f"; frames {frame_dt:g} s apart"
    _log(f"using cache {folder}: settings {_describe(settings_)} (format {CACHE_FORMAT}){rate}")
    if shard_n > 1:
        _log(f"shard {shard_i}/{shard_n}: {len(mine)} of {len(runs)} finished route runs")
    plans = _plan(layout, folder, mine, force, only_, sources)
    n_wanted = sum(len(p.wanted) for p in plans)
    n_todo = sum(len(p.todo) for p in plans)
    stale_runs = [p for p in plans if p.stale]
    if stale_runs:
        _log(f"{sum(p.stale for p in stale_runs)} records of {len(stale_runs)} route runs were made from an earlier "
             f"recording of their run (recorded again since: {', '.join(str(p.key) for p in stale_runs[:3])}"
             f"{' ...' if len(stale_runs) > 3 else ''}): rebuilding them")
    stats = {"built": 0, "skipped": n_wanted - n_todo, "unreadable": 0,
             "stale": sum(p.stale for p in plans), "unplaced": 0}
    stale = sum(_remove_stale_tmp(record_path(folder, run_rel(p.key), 0).parent) for p in plans)
    if stale:
        _log(f"removed {stale} temporary files left by builders killed mid-write")
    start = time.monotonic()
    try:  # scancel / a SLURM time limit: stop cleanly (only the main thread may set a handler)
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:
        previous = None
    try:
        with tqdm(total=n_todo, unit="sample", desc=PROG, file=sys.stderr, dynamic_ncols=True, mininterval=0.5,
                  disable=n_todo == 0) as bar, \
                space_for(folder, "the records still to build",
                          lambda: _space_needed(folder, plans, bar.total - bar.n)):
            _build_runs(folder, settings_, plans, pres, force or only_ is not None, bar, stats)
    except KeyboardInterrupt:
        _log(f"interrupted after {stats['built']} samples built; run the same command again to resume")
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if stats["built"]:  # records are written without fsync: on disk when the builder says it is done
            atomic.sync_filesystem(folder)
    elapsed = time.monotonic() - start
    size = 0
    for plan in plans:
        for i in plan.wanted:
            try:
                size += record_path(folder, run_rel(plan.key), i).stat().st_size
            except OSError:
                pass
    present = n_wanted - stats["unreadable"]
    speed = stats["built"] / elapsed if elapsed > 0 else 0.0
    summary = {"folder": str(folder), "runs": len(plans), "samples": n_wanted, "bytes": size, "seconds": elapsed,
               **stats}
    _log(f"{stats['built']} samples built, {stats['skipped']} skipped (already cached)"
         + (f", {stats['unreadable']} unreadable" if stats["unreadable"] else "")
         + f" in {elapsed:.1f} s ({speed:.1f} samples/s); {len(plans)} route runs, {present} records, "
         f"{size / 2**20:.1f} MiB on disk, {size / max(present, 1) / 1024:.1f} KiB per sample; in {folder}")
    if stats["unplaced"]:
        _log(f"{stats['unplaced']} of {stats['built']} frames built do not name their run (frame formats 1 and 2, "
             "recorded before dataset format 6): unverified whether each lies in the run it was recorded in (their "
             "index is checked)")
    if stats["unreadable"]:
        raise ToolError(f"{stats['unreadable']} samples could not be made (frames named above); "
                        "their records are missing")
    return summary


# ----------------------------------------------------------------------------- verify


def verify_cache(root: Any = None, repair: Any = False, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check the checksum of every record of the settings' cache; report damaged and missing records;
    `repair` rebuilds them. Returns the counts."""
    repair = cli.switch(repair, "repair")
    settings_ = parse_settings(settings or {}, flags=("root", "repair"))
    layout = open_root(root)
    folder = readable_cache_dir(layout, settings_)  # of an older format where that is the one there
    if not settings_path(folder).exists():
        others = sorted(p.name for p in layout.cache.glob("*") if settings_path(p).exists()) \
            if layout.cache.is_dir() else []
        raise ToolError(f"{folder}: no cache of these settings ({_describe(settings_)}); build it with "
                        f"bin/build-cache --root {layout.root}" + (f" (caches here: {', '.join(others)})"
                                                                   if others else ""))
    read_cache_settings(folder)
    fmt = cache_format(folder)
    if fmt != CACHE_FORMAT:
        if repair:
            raise ToolError(f"--repair: {older_cache_line(folder)}; repairs write records of format "
                            f"{CACHE_FORMAT}, so build that cache (bin/build-cache --root {layout.root})")
        _log(older_cache_line(folder))
    runs = cacheable_runs(layout)
    _log(f"verifying cache {folder}")
    damaged: list[tuple[RunKey, int]] = []
    missing: list[tuple[RunKey, int]] = []
    outdated: list[tuple[RunKey, int]] = []  # made from an earlier recording of their run
    checked = 0
    sources = _read_sources(layout, runs)
    plans = _plan(layout, folder, runs, True, None, sources)
    stale = [p for plan in plans for p in atomic.stale_temporaries(record_path(folder, run_rel(plan.key), 0).parent)]
    for p in stale:
        _log(f"left by a builder killed mid-write: {p}" + (" (removed)" if repair else ""))
        if repair:
            p.unlink(missing_ok=True)
    with tqdm(total=sum(len(p.wanted) for p in plans), unit="record", desc=PROG, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5) as bar:
        for plan in plans:
            for i in plan.wanted:
                path = record_path(folder, run_rel(plan.key), i)
                bar.update(1)
                if not path.exists():
                    missing.append((plan.key, i))
                    continue
                checked += 1
                try:  # what it was made from: the run's recorded attempt, this frame of it, the frame's bytes
                    check_record(path, plan.run, (run_rel(plan.key), i), read_fingerprint(plan.frames[i]), fmt)
                except StaleRecordError as e:
                    if not outdated or outdated[-1][0] != plan.key:  # one line per run
                        _log(f"{e}" + (" (and the run's other records)" if len(plan.wanted) > 1 else ""))
                    outdated.append((plan.key, i))
                except CacheRecordError as e:
                    _log(f"damaged: {e}")
                    damaged.append((plan.key, i))
    repaired = 0
    bad = damaged + missing + outdated
    if repair and bad:
        todo: dict[RunKey, list[int]] = {}
        for key, i in bad:
            todo.setdefault(key, []).append(i)
        stats = {"built": 0, "skipped": 0, "unreadable": 0, "unplaced": 0}
        by_key = {p.key: p for p in plans}
        mine = {key: sources[key] for key in todo if key in sources}
        pres = preprocessors_for(settings_, mine)
        common_frame_dt(folder, recorded_frame_dt(folder), mine.values())  # same rate as the cache
        repairs = [dataclasses.replace(by_key[key], todo=sorted(indices)) for key, indices in todo.items()]
        with tqdm(total=len(bad), unit="sample", desc=f"{PROG} repair", file=sys.stderr, dynamic_ncols=True) as bar:
            _build_runs(folder, settings_, repairs, pres, True, bar, stats)
        repaired = stats["built"]
    _log(f"{checked} records checked: {len(damaged)} damaged, {len(missing)} missing, {len(outdated)} stale (made "
         "from an earlier recording of their run, or from another frame than the one there now)"
         + (f"; {repaired} rebuilt" if repair else "")
         + (f"; {len(stale)} temporary files of killed builders" + (" removed" if repair else
            " (harmless; --repair or the next build removes them)") if stale else "") + f"; cache {folder}")
    result = {"folder": str(folder), "checked": checked, "damaged": len(damaged), "missing": len(missing),
              "stale_records": len(outdated), "repaired": repaired, "stale_temporary": len(stale)}
    if not repair and bad:
        raise ToolError(f"{len(damaged)} damaged, {len(missing)} missing and {len(outdated)} stale records; rebuild "
                        f"them with python -m tools.cache verify --root {layout.root} --repair (or bin/build-cache)")
    if repair and repaired < len(bad):
        raise ToolError(f"{len(bad) - repaired} records could not be rebuilt (named above)")
    return result

