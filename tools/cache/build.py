"""Build and check the persistent training cache: every frame of every finished route run, preprocessed once.

`Preprocessor` turns one recorded frame (and the poses of the frames after it) into the training sample
of tools.dataset.samples; `build_cache` runs it over a dataset root into ROOT/cache/<settings.key()>/;
`verify_cache` checks every record's checksum and can rebuild the damaged ones. Record format and
layout: tools.dataset.cache and docs/cache.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from tools.dataset import atomic
from tools.dataset.cache import (
    MIN_RECORD_BYTES,
    CacheRecordError,
    cache_dir,
    check_record,
    read_cache_settings,
    record_path,
    run_key,
    run_rel,
    settings_path,
    write_record,
)
from tools.dataset.errors import ToolError
from tools.dataset.frames import FrameError, read_frame
from tools.dataset.layout import Layout, RunKey, resolve_root
from tools.dataset.manifest import read_manifest
from tools.dataset.results import RunState, run_state
from tools.dataset.samples import CACHE_FORMAT, SEMANTIC_TO_TRAIN, CacheSettings

PROG = "cache"
_SEM_LUT = np.array(SEMANTIC_TO_TRAIN, dtype=np.uint8)
#: A temporary file older than this in a cache folder was left by a killed builder: removed.
_STALE_TMP_S = 600.0


def _log(message: str) -> None:
    tqdm.write(f"{PROG}: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------- settings and flags


def parse_settings(overrides: dict[str, Any], flags: Iterable[str] = ()) -> CacheSettings:
    """CacheSettings from `--name=value` overrides, each converted to its field's type.

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
        values[name] = _convert(name, fields[name].type, value)
    try:
        return CacheSettings(**values)
    except ValueError as e:
        raise ToolError(f"{e}; see tools/dataset/samples.py CacheSettings") from None


def _convert(name: str, kind: Any, value: Any) -> Any:
    """Fire guesses types ("64" is an int, "1e3" a float): give each setting its declared type, so that
    equal settings always hash to the same cache folder."""
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    try:
        if isinstance(value, bool) or value is None or isinstance(value, list | tuple | dict):
            raise ValueError
        if kind == "int":
            number = float(value)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if kind == "float":
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            return number
        return str(value)
    except (TypeError, ValueError):
        expected = {"int": "an integer", "float": "a number"}.get(kind, "a string")
        raise ToolError(f"--{name}={value!r}: expected {expected}") from None


def parse_shard(shard: Any) -> tuple[int, int]:
    """`--shard I/N` -> (I, N) with 0 <= I < N; None -> (0, 1)."""
    if shard is None:
        return 0, 1
    text = str(shard).strip()
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
    rel, sep, index = str(only).rpartition(":")
    try:
        if not sep:
            raise ValueError
        run_key(rel)
        i = int(index)
        if i < 0:
            raise ValueError
    except ValueError:
        raise ToolError(f"--only {only}: expected data/<Scenario>/<run>:INDEX, e.g. "
                        "--only data/NoScenario/town_0000_route0_rep0:12") from None
    return rel.strip("/"), i


def shard_of(rel: str, n: int) -> int:
    """The shard of a route run: a stable hash of its name (the same on every machine and Python)."""
    return int.from_bytes(hashlib.sha256(rel.encode()).digest()[:8], "big") % n


def _as_flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ToolError(f"--{name} takes no value (got {value!r}): write --{name} alone")


# ----------------------------------------------------------------------------- preprocessing


def to_ego(points: np.ndarray, ego: dict[str, Any]) -> np.ndarray:
    """World points (N, 2), CARLA frame, into the ego frame of pose `ego` (x, y, yaw in degrees): x forward,
    y right. CARLA's yaw turns from +x towards +y, so the rotation is the plain 2D one."""
    yaw = math.radians(float(ego["yaw"]))
    c, s = math.cos(yaw), math.sin(yaw)
    d = np.asarray(points, dtype=np.float64).reshape(-1, 2) - (float(ego["x"]), float(ego["y"]))
    return np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]], axis=1)


def _nearest(n_out: int, start: int, n_in: int) -> np.ndarray:
    """Source indices of nearest-neighbour resampling of `n_in` pixels from `start` onto `n_out`."""
    return start + np.minimum(((np.arange(n_out) + 0.5) * n_in / n_out).astype(np.int64), n_in - 1)


@dataclass
class Preprocessor:
    """Recorded frame -> training sample (the schema of tools.dataset.samples) for one run's rig."""

    settings: CacheSettings
    rig: dict[str, Any]
    _bev_index: tuple[np.ndarray, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        cams = {c["name"]: c for c in self.rig.get("cameras", [])}
        cam = self.settings.camera
        if cam not in cams:
            raise ToolError(f"camera {cam!r} not in this run's rig (cameras: {', '.join(cams) or 'none'}); "
                            f"pick one with --camera=NAME")
        self.sensor_names = [f"rgb_{cam}", f"semantics_{cam}", f"depth_{cam}", "lidar", "bev"]

    def _crop(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The largest centred (left, top, crop width, crop height) with the model input's aspect ratio."""
        s = self.settings
        cw = min(width, round(height * s.image_width / s.image_height))
        ch = min(height, round(width * s.image_height / s.image_width))
        return (width - cw) // 2, (height - ch) // 2, cw, ch

    def camera(self, rgb: np.ndarray, semantics: np.ndarray, depth_cm: np.ndarray) -> dict[str, np.ndarray]:
        s = self.settings
        h, w = rgb.shape[:2]
        left, top, cw, ch = self._crop(w, h)
        image = Image.fromarray(rgb).resize((s.image_width, s.image_height), Image.Resampling.LANCZOS,
                                            box=(left, top, left + cw, top + ch))
        rows, cols = _nearest(s.image_height, top, ch), _nearest(s.image_width, left, cw)
        return {
            "rgb": np.asarray(image, dtype=np.uint8),
            "semantics": _SEM_LUT[semantics[rows][:, cols]],
            "depth": (depth_cm[rows][:, cols].astype(np.float32) / 100.0).astype(np.float16),
        }

    def lidar_bev(self, points: np.ndarray) -> np.ndarray:
        """Points per cell of the settings' grid (row 0 farthest ahead, column 0 farthest left), below and
        above `lidar_split_height`, saturated at 255."""
        s = self.settings
        g, cell = s.bev_pixels, s.bev_range / s.bev_pixels
        row = np.floor((s.bev_ahead - points[:, 0]) / cell).astype(np.int64)
        col = np.floor((points[:, 1] + s.bev_range / 2) / cell).astype(np.int64)
        inside = (row >= 0) & (row < g) & (col >= 0) & (col < g)
        channel = (points[:, 2] > s.lidar_split_height).astype(np.int64)
        cells = (channel * g * g + row * g + col)[inside]
        counts = np.bincount(cells, minlength=2 * g * g)
        return np.minimum(counts, 255).astype(np.uint8).reshape(2, g, g)

    def bev(self, recorded: np.ndarray) -> np.ndarray:
        """The recorded BEV raster (tools.collect.render.BevConfig) resampled (nearest) onto the settings'
        grid; cells outside the recorded raster are BEV_EMPTY (0)."""
        if self._bev_index is None or self._bev_index[0] != recorded.shape:
            s, b = self.settings, self.rig["bev"]
            pixels, res, offset = int(b["pixels"]), float(b["resolution"]), int(b["ego_offset_px"])
            g, cell = s.bev_pixels, s.bev_range / s.bev_pixels
            x = s.bev_ahead - (np.arange(g) + 0.5) * cell  # ego x of each row's centre
            y = -s.bev_range / 2 + (np.arange(g) + 0.5) * cell  # ego y of each column's centre
            rows = np.floor(pixels / 2 + offset - x / res).astype(np.int64)
            cols = np.floor(pixels / 2 + y / res).astype(np.int64)
            h, w = recorded.shape
            self._bev_index = (recorded.shape, np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1),
                               (rows >= 0) & (rows < h), (cols >= 0) & (cols < w))
        _, rows, cols, row_ok, col_ok = self._bev_index
        out = recorded[rows][:, cols].astype(np.uint8)
        out[~row_ok, :] = 0
        out[:, ~col_ok] = 0
        return out

    def __call__(self, frame: dict[str, Any], future: list[dict[str, Any] | None]) -> dict[str, np.ndarray]:
        """The sample of `frame` (read_frame with self.sensor_names); `future` holds the measurements of the
        next `horizon` frames (None past the end of the run)."""
        s, m = self.settings, frame["measurements"]
        sensors = frame["sensors"]
        missing = [n for n in self.sensor_names if n not in sensors]
        if missing:
            raise FrameError(f"frame {m.get('frame')}: no {', '.join(missing)} sensor")
        cam = s.camera
        sample = self.camera(sensors[f"rgb_{cam}"], sensors[f"semantics_{cam}"], sensors[f"depth_{cam}"])
        sample["lidar_bev"] = self.lidar_bev(sensors["lidar"])
        sample["bev"] = self.bev(sensors["bev"])

        ego = m["ego"]
        waypoints = np.zeros((s.horizon, 2), dtype=np.float32)
        valid = np.zeros(s.horizon, dtype=bool)
        for k, later in enumerate(future[: s.horizon]):
            if later is not None:
                waypoints[k] = to_ego([[later["ego"]["x"], later["ego"]["y"]]], ego)[0]
                valid[k] = True
        sample["waypoints"], sample["waypoints_valid"] = waypoints, valid

        target = to_ego([m["target_point"]], ego).astype(np.float32)[0]
        route_world = [p for p in m.get("route") or []][: s.route_points]
        route = to_ego(route_world, ego).astype(np.float32) if route_world else target[None, :]
        if len(route) < s.route_points:  # near the end of the route: repeat its last point
            route = np.concatenate([route, np.repeat(route[-1:], s.route_points - len(route), axis=0)])
        sample["route"], sample["target_point"] = route, target

        command = int(m["command"]) - 1
        sample["command"] = np.array(command if 0 <= command <= 5 else 3, dtype=np.int64)  # unknown: follow lane
        sample["speed"] = np.array(m["speed"], dtype=np.float32)
        sample["target_speed"] = np.array(m["target_speed"], dtype=np.float32)
        sample["light_hazard"] = np.array(bool(m["light_hazard"]), dtype=bool)
        sample["vehicle_hazard"] = np.array(bool(m["vehicle_hazard"]), dtype=bool)
        boxes = [b for b in frame.get("boxes") or [] if b.get("id") != 0]
        sample["boxes"] = np.array(
            [[*b["center_ego"][:3], *b["extent"][:3], math.radians(b["yaw_ego"]), b["class"]] for b in boxes],
            dtype=np.float32).reshape(-1, 8)
        return sample


def read_rig(layout: Layout, key: RunKey) -> dict[str, Any]:
    path = layout.run_settings(key)
    try:
        return json.loads(path.read_text())["rig"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FrameError(f"{path}: cannot read the run's rig ({e})") from None


# ----------------------------------------------------------------------------- the dataset side


def open_root(root: Any) -> Layout:
    """The dataset root's layout; ToolError when it is missing or not a dataset root."""
    layout = Layout(resolve_root(None if root is None else str(root)))  # fire makes "2024" an int
    if not layout.root.is_dir():
        raise ToolError(f"{layout.root}: no such dataset root; give the --root you collected into "
                        "(bin/collect ROUTES_DIR --root ROOT)")
    manifest = read_manifest(layout)
    if manifest is None and not (layout.root / "data").is_dir():
        raise ToolError(f"{layout.root}: not a dataset root (no {layout.manifest.name}, no data/); "
                        "collect into it first: bin/collect ROUTES_DIR --root ROOT")
    return layout


def finished_runs(layout: Layout) -> list[RunKey]:
    """Every FINISHED route run (tools.dataset.results.run_state, the one definition); ToolError when none."""
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


def prepare_cache_dir(layout: Layout, settings: CacheSettings) -> Path:
    """Create ROOT/cache/<key>/ with its settings.json (written first); refuse a folder of other settings."""
    folder = cache_dir(layout, settings)
    path = settings_path(folder)
    if path.exists():
        if read_cache_settings(folder) != settings:
            raise ToolError(f"{path}: holds other settings than its folder name says; move {folder} aside "
                            "and build again")
        return folder
    atomic.write_json(path, {"format": CACHE_FORMAT, "key": settings.key(), "settings": settings.to_dict()})
    return folder


def _describe(settings: CacheSettings) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.to_dict().items())


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds through atomic writes, which remove their temporary files


def _done(path: Path) -> bool:
    """The builder's cheap test of a finished record: it exists with a plausible size (writes are atomic,
    so a record is either whole or absent; `verify` checks checksums)."""
    try:
        return path.stat().st_size >= MIN_RECORD_BYTES
    except OSError:
        return False


def _remove_stale_tmp(folder: Path) -> None:
    if not folder.is_dir():
        return
    now = time.time()
    for p in folder.glob(".tmp-*"):
        try:
            if now - p.stat().st_mtime > _STALE_TMP_S:
                p.unlink()
        except OSError:
            pass


@dataclass
class _RunPlan:
    key: RunKey
    frames: dict[int, Path]  # index -> frame file
    todo: list[int]
    wanted: list[int]


def _build_run(layout: Layout, folder: Path, settings: CacheSettings, plan: _RunPlan, force: bool,
               bar: tqdm, stats: dict[str, int], preprocessors: dict[str, Preprocessor]) -> None:
    rel = run_rel(plan.key)
    _remove_stale_tmp(record_path(folder, rel, 0).parent)
    try:
        rig = read_rig(layout, plan.key)
    except FrameError as e:
        _log(f"{plan.key}: {e}; skipping its {len(plan.todo)} samples")
        stats["unreadable"] += len(plan.todo)
        bar.update(len(plan.todo))
        return
    rig_key = json.dumps(rig, sort_keys=True)
    if rig_key not in preprocessors:
        preprocessors[rig_key] = Preprocessor(settings, rig)
    pre = preprocessors[rig_key]
    # measurements first (poses of the frames i .. i+horizon), then each frame's sensors
    needed = sorted({j for i in plan.todo for j in range(i, i + settings.horizon + 1) if j in plan.frames})
    measurements: dict[int, dict[str, Any]] = {}
    for j in needed:
        try:
            measurements[j] = read_frame(plan.frames[j], sensors=False)["measurements"]
        except (FrameError, OSError) as e:
            _log(f"{plan.frames[j]}: unreadable frame ({e})")
    for i in plan.todo:
        path = record_path(folder, rel, i)
        if not force and _done(path):  # another builder made it meanwhile
            stats["skipped"] += 1
            bar.update(1)
            continue
        try:
            if i not in measurements:
                raise FrameError("unreadable measurements")
            frame = read_frame(plan.frames[i], sensors=pre.sensor_names)
            sample = pre(frame, [measurements.get(i + k) for k in range(1, settings.horizon + 1)])
        except (FrameError, OSError, KeyError, TypeError, ValueError) as e:
            _log(f"{plan.frames[i]}: cannot make its sample ({e.__class__.__name__}: {e})")
            stats["unreadable"] += 1
            bar.update(1)
            continue
        write_record(path, sample, settings.jpeg_quality)
        stats["built"] += 1
        bar.update(1)


def _plan(layout: Layout, folder: Path, runs: list[RunKey], force: bool,
          only: tuple[str, int] | None) -> list[_RunPlan]:
    plans = []
    for key in runs:
        frames = {}
        for p in layout.frame_paths(key):
            if p.stem.isdigit():
                frames[int(p.stem)] = p
        wanted = sorted(frames)
        if only is not None:
            if run_rel(key) != only[0]:
                continue
            wanted = [only[1]] if only[1] in frames else []
        rel = run_rel(key)
        todo = [i for i in wanted if force or only is not None or not _done(record_path(folder, rel, i))]
        plans.append(_RunPlan(key, frames, todo, wanted))
    return plans


def build_cache(root: Any = None, shard: Any = None, force: Any = False, only: Any = None,
                settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build (or complete) the cache of `settings` for a dataset root; returns the summary's figures."""
    force = _as_flag(force, "force")
    settings_ = parse_settings(settings or {}, flags=("root", "shard", "force", "only"))
    shard_i, shard_n = parse_shard(shard)
    only_ = parse_only(only)
    layout = open_root(root)
    runs = finished_runs(layout)
    if only_ is not None:
        key = run_key(only_[0])
        if key not in runs:
            raise ToolError(f"--only {only}: {layout.root / only_[0]} is not a finished route run of this root")
        frames = {int(p.stem) for p in layout.frame_paths(key) if p.stem.isdigit()}
        if only_[1] not in frames:
            raise ToolError(f"--only {only}: the run has no frame {only_[1]} (frames 0 to {len(frames) - 1})")
    mine = runs if only_ is not None else [k for k in runs if shard_of(run_rel(k), shard_n) == shard_i]

    folder = prepare_cache_dir(layout, settings_)
    _log(f"using cache {folder}: settings {_describe(settings_)} (format {CACHE_FORMAT})")
    if shard_n > 1:
        _log(f"shard {shard_i}/{shard_n}: {len(mine)} of {len(runs)} finished route runs")
    plans = _plan(layout, folder, mine, force, only_)
    n_wanted = sum(len(p.wanted) for p in plans)
    n_todo = sum(len(p.todo) for p in plans)
    stats = {"built": 0, "skipped": n_wanted - n_todo, "unreadable": 0}
    start = time.monotonic()
    preprocessors: dict[str, Preprocessor] = {}
    try:  # scancel / a SLURM time limit: stop cleanly (only the main thread may set a handler)
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:
        previous = None
    try:
        with tqdm(total=n_todo, unit="sample", desc=PROG, file=sys.stderr, dynamic_ncols=True, mininterval=0.5,
                  disable=n_todo == 0) as bar:
            for plan in plans:
                if plan.todo:
                    _build_run(layout, folder, settings_, plan, force or only_ is not None, bar, stats,
                               preprocessors)
    except KeyboardInterrupt:
        _log(f"interrupted after {stats['built']} samples built; run the same command again to resume")
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    elapsed = time.monotonic() - start
    size = 0
    for plan in plans:
        for i in plan.wanted:
            try:
                size += record_path(folder, run_rel(plan.key), i).stat().st_size
            except OSError:
                pass
    present = n_wanted - stats["unreadable"]
    rate = stats["built"] / elapsed if elapsed > 0 else 0.0
    summary = {"folder": str(folder), "runs": len(plans), "samples": n_wanted, "bytes": size, "seconds": elapsed,
               **stats}
    _log(f"{stats['built']} samples built, {stats['skipped']} skipped (already cached)"
         + (f", {stats['unreadable']} unreadable" if stats["unreadable"] else "")
         + f" in {elapsed:.1f} s ({rate:.1f} samples/s); {len(plans)} route runs, {present} records, "
         f"{size / 2**20:.1f} MiB on disk, {size / max(present, 1) / 1024:.1f} KiB per sample; in {folder}")
    if stats["unreadable"]:
        raise ToolError(f"{stats['unreadable']} samples could not be made (frames named above); "
                        "their records are missing")
    return summary


# ----------------------------------------------------------------------------- verify


def verify_cache(root: Any = None, repair: Any = False, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check the checksum of every record of the settings' cache; report damaged and missing records;
    `repair` rebuilds them. Returns the counts."""
    repair = _as_flag(repair, "repair")
    settings_ = parse_settings(settings or {}, flags=("root", "repair"))
    layout = open_root(root)
    folder = cache_dir(layout, settings_)
    if not settings_path(folder).exists():
        others = sorted(p.name for p in layout.cache.glob("*") if settings_path(p).exists()) \
            if layout.cache.is_dir() else []
        raise ToolError(f"{folder}: no cache of these settings ({_describe(settings_)}); build it with "
                        f"bin/build-cache --root {layout.root}" + (f" (caches here: {', '.join(others)})"
                                                                   if others else ""))
    read_cache_settings(folder)
    runs = finished_runs(layout)
    _log(f"verifying cache {folder}")
    damaged: list[tuple[RunKey, int]] = []
    missing: list[tuple[RunKey, int]] = []
    checked = 0
    plans = _plan(layout, folder, runs, force=True, only=None)
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
                try:
                    check_record(path)
                except CacheRecordError as e:
                    _log(f"damaged: {e}")
                    damaged.append((plan.key, i))
    repaired = 0
    if repair and (damaged or missing):
        todo: dict[RunKey, list[int]] = {}
        for key, i in damaged + missing:
            todo.setdefault(key, []).append(i)
        stats = {"built": 0, "skipped": 0, "unreadable": 0}
        by_key = {p.key: p for p in plans}
        with tqdm(total=len(damaged) + len(missing), unit="sample", desc=f"{PROG} repair", file=sys.stderr,
                  dynamic_ncols=True) as bar:
            for key, indices in todo.items():
                plan = dataclasses.replace(by_key[key], todo=sorted(indices))
                _build_run(layout, folder, settings_, plan, True, bar, stats, {})
        repaired = stats["built"]
    _log(f"{checked} records checked: {len(damaged)} damaged, {len(missing)} missing"
         + (f"; {repaired} rebuilt" if repair else "") + f"; cache {folder}")
    result = {"folder": str(folder), "checked": checked, "damaged": len(damaged), "missing": len(missing),
              "repaired": repaired}
    if not repair and (damaged or missing):
        raise ToolError(f"{len(damaged)} damaged and {len(missing)} missing records; rebuild them with "
                        f"python -m tools.cache verify --root {layout.root} --repair")
    if repair and repaired < len(damaged) + len(missing):
        raise ToolError(f"{len(damaged) + len(missing) - repaired} records could not be rebuilt (named above)")
    return result

