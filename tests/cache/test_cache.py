"""The cache stage: building, resuming, concurrent builders, damaged records, settings, the session cache,
bad input. Real dataset roots (the collected fixture), real processes, real files."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import PYTHON, REPO, copy_root, run_tool, tree
from tools.core.errors import ToolError
from tools.dataset.cache import (
    CacheRecordError,
    SessionCache,
    cache_dir,
    read_frame_dt,
    read_record,
    rebuild_record,
    record_path,
    run_rel,
)
from tools.dataset.frames import read_frame
from tools.dataset.layout import Layout
from tools.dataset.results import RouteRecord, RunState, run_state
from tools.dataset.samples import BEV_CLASSES, CACHE_FORMAT, TRAIN_CLASSES, CacheSettings

BUILD_CACHE = str(REPO / "bin" / "build-cache")
SMALL_FRAMES = 20  # frames kept per run in the small root


def cache_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_tool(PYTHON, "-m", "tools.cache", *args, check=check)


def schema(s: CacheSettings) -> dict[str, tuple[type, tuple]]:
    """The table of tools/dataset/samples.py: key -> (dtype, shape); None for a free dimension."""
    h, w, g = s.image_height, s.image_width, s.bev_pixels
    return {
        "rgb": (np.uint8, (h, w, 3)),
        "semantics": (np.uint8, (h, w)),
        "depth": (np.float16, (h, w)),
        "lidar_bev": (np.uint8, (2, g, g)),
        "bev": (np.uint8, (g, g)),
        "waypoints": (np.float32, (s.horizon, 2)),
        "waypoints_valid": (np.bool_, (s.horizon,)),
        "route": (np.float32, (s.route_points, 2)),
        "target_point": (np.float32, (2,)),
        "command": (np.int64, ()),
        "speed": (np.float32, ()),
        "target_speed": (np.float32, ()),
        "light_hazard": (np.bool_, ()),
        "vehicle_hazard": (np.bool_, ()),
        "overtake_offset": (np.float32, ()),
        "boxes": (np.float32, (None, 8)),
    }


def expected_records(root: Path, settings: CacheSettings | None = None) -> set[Path]:
    """One record per frame of every finished route run."""
    layout = Layout(root)
    folder = cache_dir(layout, settings or CacheSettings())
    return {record_path(folder, run_rel(key), int(p.stem))
            for key in layout.iter_runs() if run_state(layout, key) is RunState.FINISHED
            for p in layout.frame_paths(key)}


def records(root: Path, settings: CacheSettings | None = None) -> set[Path]:
    return set(cache_dir(Layout(root), settings or CacheSettings()).rglob("*.rec"))


def temporary_files(root: Path) -> list[Path]:
    return [p for p in (root / "cache").rglob("*") if p.name.startswith(".tmp-")]


def ego_frame(point, ego) -> np.ndarray:
    """Independent of the builder: the inverse of the ego's pose as a rotation matrix (CARLA: yaw turns +x
    towards +y, vehicle frame x forward, y right)."""
    yaw = math.radians(ego["yaw"])
    rotation = np.array([[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]])  # ego -> world
    return rotation.T @ (np.asarray(point, dtype=float) - [ego["x"], ego["y"]])


@pytest.fixture(scope="module")
def built(tmp_path_factory, collected_root) -> Path:
    """A copy of the collected root with its default cache built by `python -m tools.cache build`."""
    root = copy_root(collected_root, tmp_path_factory.mktemp("built") / "root")
    proc = cache_cli("build", "--root", str(root))
    (root.parent / "build.stderr").write_text(proc.stderr)
    return root


@pytest.fixture(scope="module")
def small_root(tmp_path_factory, collected_root) -> Path:
    """A copy of the collected root with only the first SMALL_FRAMES frames of each run (still finished)."""
    root = copy_root(collected_root, tmp_path_factory.mktemp("small") / "root")
    layout = Layout(root)
    for key in layout.iter_runs():
        for p in layout.frame_paths(key)[SMALL_FRAMES:]:
            p.unlink()
    return root


@pytest.fixture(scope="module")
def small_built(tmp_path_factory, small_root) -> Path:
    root = copy_root(small_root, tmp_path_factory.mktemp("small-built") / "root")
    cache_cli("build", "--root", str(root))
    return root


# ----------------------------------------------------------------------------- building


def test_build_writes_one_record_per_frame_of_every_finished_run_matching_the_sample_schema(built):
    settings = CacheSettings()
    folder = cache_dir(Layout(built), settings)
    stderr = (built.parent / "build.stderr").read_text()
    assert f"using cache {folder}: settings" in stderr  # the tool says which cache it uses
    assert "samples/s" in stderr and "KiB per sample" in stderr
    assert json.loads((folder / "settings.json").read_text())["frame_dt"] == 0.25  # 20 Hz, every 5th tick
    expected = expected_records(built)
    assert len(expected) > 400
    assert records(built) == expected
    assert not temporary_files(built)
    want = schema(settings)
    commands = set()
    for path in sorted(expected):
        sample = read_record(path)
        assert set(sample) == set(want), path
        for key, (dtype, shape) in want.items():
            value = sample[key]
            assert value.dtype == dtype, (path, key, value.dtype)
            assert len(value.shape) == len(shape) and all(a is None or a == b for a, b in zip(shape, value.shape,
                                                                                              strict=True)), key
        assert sample["semantics"].max() < len(TRAIN_CLASSES)
        assert sample["bev"].max() < len(BEV_CLASSES)
        assert sample["lidar_bev"].sum() > 1000  # the LiDAR sees the road around the ego
        assert np.isfinite(sample["depth"]).all() and sample["depth"].min() >= 0
        assert sample["rgb"].std() > 5
        commands.add(int(sample["command"]))
    assert commands <= set(range(6))


def test_future_waypoints_are_the_later_recorded_poses_in_the_frame_ego_frame(built):
    layout = Layout(built)
    settings = CacheSettings()
    folder = cache_dir(layout, settings)
    moving = 0
    for key in layout.iter_runs():
        frames = layout.frame_paths(key)
        measurements = [read_frame(p, sensors=False)["measurements"] for p in frames]
        boxes_of = {i: read_frame(frames[i], sensors=False)["boxes"] for i in (0, len(frames) // 2)}
        for i in range(0, len(frames), 7):
            sample = read_record(record_path(folder, run_rel(key), i))
            ego = measurements[i]["ego"]
            for k in range(settings.horizon):
                j = i + 1 + k
                assert sample["waypoints_valid"][k] == (j < len(frames))
                if j < len(frames):
                    later = measurements[j]["ego"]
                    np.testing.assert_allclose(sample["waypoints"][k], ego_frame([later["x"], later["y"]], ego),
                                               atol=1e-3)
            # the collector wrote the target point in the ego frame itself: an independent check of the frame
            np.testing.assert_allclose(sample["target_point"], measurements[i]["target_point_ego"], atol=0.01)
            if measurements[i]["speed"] > 1.0 and sample["waypoints_valid"][0]:  # (a run ends moving: the last
                moving += 1                                                      # frame has no next position)
                assert sample["waypoints"][0, 0] > 0  # a moving ego's next position lies ahead
                assert abs(sample["waypoints"][0, 1]) < sample["waypoints"][0, 0]
            if i in boxes_of:
                want = [[*b["center_ego"], *b["extent"], math.radians(b["yaw_ego"]), b["class"]] for b in boxes_of[i]]
                np.testing.assert_allclose(sample["boxes"], np.array(want, dtype=np.float32).reshape(-1, 8),
                                           atol=1e-4)
        last = read_record(record_path(folder, run_rel(key), len(frames) - 1))
        assert not last["waypoints_valid"].any()  # nothing after the last frame of a run
    assert moving > 10


def test_bev_and_lidar_grids_put_the_ego_and_other_vehicles_where_their_boxes_are(built):
    s = CacheSettings()
    cell = s.bev_range / s.bev_pixels
    ego_row, ego_col = int(s.bev_ahead / cell), s.bev_pixels // 2  # the cell just behind/right of the ego centre

    def cell_of(x: float, y: float) -> tuple[int, int]:  # row 0 farthest ahead, column 0 farthest left
        return int((s.bev_ahead - x) // cell), int((y + s.bev_range / 2) // cell)

    hits = seen = 0
    for path in sorted(records(built))[::5]:
        sample = read_record(path)
        assert (sample["bev"][ego_row - 1: ego_row + 1, ego_col - 1: ego_col + 1] == 4).all()  # BEV_EGO
        for x, y, *_ in sample["boxes"]:
            row, col = cell_of(x, y)
            if 2 <= row < s.bev_pixels - 2 and 2 <= col < s.bev_pixels - 2 and math.hypot(x, y) < 30:
                seen += 1
                near = np.s_[row - 2: row + 3, col - 2: col + 3]
                hits += sample["bev"][row, col] == 3 and sample["lidar_bev"][1][near].sum() > 0  # BEV_VEHICLE
    assert seen > 20 and hits >= 0.8 * seen, (hits, seen)


def test_rebuild_skips_every_record_already_cached(built):
    before = {p: p.stat().st_mtime_ns for p in records(built)}
    proc = cache_cli("build", "--root", str(built))
    assert f"0 samples built, {len(before)} skipped" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in records(built)} == before


def test_an_interrupted_build_leaves_no_temporary_files_and_resumes(tmp_path, small_root):
    root = copy_root(small_root, tmp_path / "root")
    folder = cache_dir(Layout(root), CacheSettings())
    proc = subprocess.Popen([PYTHON, "-m", "tools.cache", "build", "--root", str(root)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list(folder.rglob("*.rec"))) < 5 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # what scancel and a SLURM time limit send
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0, "the build finished before it could be interrupted"
    assert "run the same command again to resume" in stderr
    assert not temporary_files(root)
    done = len(records(root))
    assert 0 < done < len(expected_records(root))
    resumed = cache_cli("build", "--root", str(root))
    assert f"{done} skipped" in resumed.stderr
    assert records(root) == expected_records(root)


@pytest.mark.parametrize("shards", [("0/2", "1/2"), (None, None)], ids=["sharded", "unsharded-racing"])
def test_two_builders_at_once_leave_a_complete_valid_cache(tmp_path, small_root, shards):
    root = copy_root(small_root, tmp_path / "root")
    procs = []
    for shard in shards:
        args = [PYTHON, "-m", "tools.cache", "build", "--root", str(root)] + (["--shard", shard] if shard else [])
        procs.append(subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    assert records(root) == expected_records(root)
    assert not temporary_files(root)
    for path in records(root):
        read_record(path)
    cache_cli("verify", "--root", str(root))


# ----------------------------------------------------------------------------- damaged records


def test_damaged_records_are_named_by_read_record_and_verify_and_repaired(tmp_path, small_built):
    root = copy_root(small_built, tmp_path / "root")
    flipped, truncated = sorted(records(root))[3], sorted(records(root))[17]
    original = {p: p.read_bytes() for p in (flipped, truncated)}
    data = bytearray(original[flipped])
    data[len(data) // 2: len(data) // 2 + 8] = bytes(b ^ 0xFF for b in data[len(data) // 2: len(data) // 2 + 8])
    flipped.write_bytes(bytes(data))
    truncated.write_bytes(original[truncated][: len(original[truncated]) // 3])

    for path in (flipped, truncated):
        with pytest.raises(CacheRecordError) as err:
            read_record(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert "checksum" in str(pytest.raises(CacheRecordError, read_record, flipped).value)
    with pytest.raises(CacheRecordError, match="missing"):
        read_record(flipped.with_name("99999.rec"))

    report = cache_cli("verify", "--root", str(root), check=False)
    assert report.returncode != 0
    assert str(flipped) in report.stderr and str(truncated) in report.stderr
    assert "2 damaged" in report.stderr

    cache_cli("verify", "--root", str(root), "--repair")
    for path, content in original.items():
        assert path.read_bytes() == content  # the build is deterministic: the same record again
    assert "0 damaged, 0 missing" in cache_cli("verify", "--root", str(root)).stderr


def test_rebuild_record_restores_a_damaged_record_in_a_subprocess(tmp_path, small_built):
    root = copy_root(small_built, tmp_path / "root")
    layout = Layout(root)
    key = next(k for k in layout.iter_runs() if run_state(layout, k) is RunState.FINISHED)
    path = record_path(cache_dir(layout, CacheSettings()), run_rel(key), 5)
    content = path.read_bytes()
    path.write_bytes(content[:100] + b"\0" * 64 + content[164:])
    with pytest.raises(CacheRecordError):
        read_record(path)
    others = {p: p.stat().st_mtime_ns for p in records(root) if p != path}
    rebuild_record(root, CacheSettings(), run_rel(key), 5)
    assert path.read_bytes() == content
    assert {p: p.stat().st_mtime_ns for p in records(root) if p != path} == others  # only that one
    with pytest.raises(CacheRecordError, match="rebuilding"):
        rebuild_record(root, CacheSettings(), run_rel(key), 10_000)


def _as_before_identity(root: Path) -> Path:
    """`root` as a drivekit of dataset format 5 and cache format 2 left it: frames of format 2 (no run), measurements
    indexes without fingerprints, its cache a folder of format 2 (records without source, index and frame)."""
    import zlib

    import msgpack

    from tools.dataset.frames import seal

    layout = Layout(root)
    for key in layout.iter_runs():
        for path in [*layout.frame_paths(key), layout.run_measurements(key)]:
            if path.exists():
                fields = msgpack.unpackb(path.read_bytes(), raw=False)
                for name in ("crc32", "run", "fingerprints"):
                    fields.pop(name, None)
                path.write_bytes(seal({**fields, "format": 2}))
    manifest = json.loads(layout.manifest.read_text())
    layout.manifest.write_text(json.dumps({**manifest, "format_version": 5}))
    old = layout.cache_folder(CacheSettings().key(2))
    cache_dir(layout, CacheSettings()).rename(old)
    settings = json.loads((old / "settings.json").read_text())
    (old / "settings.json").write_text(json.dumps({**settings, "format": 2, "key": old.name}))
    for path in old.rglob("*.rec"):
        outer = msgpack.unpackb(path.read_bytes(), raw=False)
        path.write_bytes(msgpack.packb({"format": 2, "run": outer["run"], "crc32": zlib.crc32(outer["body"]),
                                        "body": outer["body"]}, use_bin_type=True))
    return root


def test_a_root_and_cache_from_before_frame_identity_train_unverified_said_once_per_tool(tmp_path, small_built,
                                                                                         capsys):
    """Frames that do not name their run (frame format 2) and records that do not name their frame (cache format 2)
    cannot be checked for their place: each tool reads them and says so in one line, never refuses them."""
    from tools.cache.build import cacheable_runs
    from tools.dataset.validate import inspect_run
    from tools.train import data

    root = _as_before_identity(copy_root(small_built, tmp_path / "root"))
    layout = Layout(root)
    # training: the format-2 cache, read whole, said once
    folder, settings = data.find_cache(layout)
    assert folder == layout.cache_folder(CacheSettings().key(2))
    items = [(run_rel(k), i) for k in cacheable_runs(layout) for i in range(layout.frame_count(k))]
    fingerprints = data.run_fingerprints(layout, items)
    data.check_cache_complete(folder, layout, items, fingerprints)
    assert data.frame_fingerprints(layout, items) == {}
    loader = data.RecordDataset(items, root, folder, settings, None, fingerprints, {})
    assert all(loader[i]["rebuilt"] == loader[i]["replaced"] == 0 for i in range(len(loader)))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cache {folder} is of format 2" in err[0] and "unverified" in err[0], err
    # verify: the same line once, every record's checksum checked
    proc = cache_cli("verify", "--root", str(root))
    assert proc.stderr.count("is of format 2") == 1 and f"{len(items)} records checked: 0 damaged" in proc.stderr
    # validate: nothing wrong with their place, every frame counted as not naming its run
    key = cacheable_runs(layout)[0]
    found = inspect_run(layout, key)
    assert found.unplaced == found.frames == SMALL_FRAMES and not [p for p in found.problems if "holds" in p]
    # build-cache: a cache of format 3 beside the old one (which training then reads), one line on the frames
    proc = cache_cli("build", "--root", str(root))
    assert proc.stderr.count("do not name their run") == 1
    assert f"{len(items)} of {len(items)} frames built do not name their run" in proc.stderr
    assert data.find_cache(layout)[0] == cache_dir(layout, CacheSettings()) != folder


# ----------------------------------------------------------------------------- settings


def test_a_settings_change_builds_a_second_folder_and_leaves_the_first_intact(tmp_path, small_built):
    root = copy_root(small_built, tmp_path / "root")
    first = cache_dir(Layout(root), CacheSettings())
    before = tree(first)
    proc = run_tool(BUILD_CACHE, "--root", str(root), "--image_width=128", check=True)
    narrow = CacheSettings(image_width=128)
    second = cache_dir(Layout(root), narrow)
    assert second != first and f"using cache {second}" in proc.stderr
    assert sorted(p.name for p in (root / "cache").iterdir()) == sorted([first.name, second.name])
    assert tree(first) == before
    assert records(root, narrow) == expected_records(root, narrow)
    assert read_record(sorted(records(root, narrow))[0])["rgb"].shape == (128, 128, 3)
    # a float setting typed as an integer is the same setting: the same folder, nothing to build
    again = run_tool(BUILD_CACHE, "--root", str(root), "--image_width=128", "--bev_range=64", check=True)
    assert f"using cache {second}" in again.stderr and "0 samples built" in again.stderr
    assert f'"format": {CACHE_FORMAT}' in (second / "settings.json").read_text()


def set_record_every(root: Path, key, record_every: int) -> None:
    """Make a run's run.json say it recorded every `record_every`-th of its 20 Hz ticks."""
    path = Layout(root).run_settings(key)
    run = json.loads(path.read_text())
    run["settings"]["record_every"] = record_every
    path.write_text(json.dumps(run))


@pytest.mark.parametrize("cached", [False, True], ids=["new-cache", "existing-cache"])
def test_a_run_recorded_at_another_rate_is_one_line_naming_it_and_both_rates_and_nothing_is_written(
        tmp_path, small_root, small_built, cached):
    root = copy_root(small_built if cached else small_root, tmp_path / "root")
    odd = sorted(k for k in Layout(root).iter_runs())[-1]
    set_record_every(root, odd, 2)  # 0.1 s between frames instead of 0.25
    before = tree(root)
    proc = run_tool(BUILD_CACHE, "--root", str(root))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cache: {odd}: frames recorded 0.1 s apart"), proc.stderr
    assert "--record_every=2" in lines[0] and "0.25 s apart" in lines[0] and "dataset root of their own" in lines[0]
    if cached:
        assert str(cache_dir(Layout(root), CacheSettings())) in lines[0]
    assert tree(root) == before


def test_a_cache_built_before_frame_dt_was_recorded_gets_it_from_the_runs_without_rebuilding(tmp_path, small_built):
    root = copy_root(small_built, tmp_path / "root")
    folder = cache_dir(Layout(root), CacheSettings())
    settings = json.loads((folder / "settings.json").read_text())
    del settings["frame_dt"]
    (folder / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(ToolError, match="no usable frame_dt"):
        read_frame_dt(folder)
    proc = cache_cli("build", "--root", str(root))
    assert "recorded frame_dt 0.25 s" in proc.stderr and "0 samples built" in proc.stderr
    assert read_frame_dt(folder) == 0.25


# ----------------------------------------------------------------------------- the session cache


def test_session_cache_round_trips_bytes_and_stays_within_its_size_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_TMPDIR", str(tmp_path / "slurm"))
    limit = 2_000_000
    cache = SessionCache("abc123", size_limit=limit)
    assert cache.path == tmp_path / "slurm" / f"drivekit-session-{os.getuid()}-abc123"
    rng = np.random.default_rng(0)
    values = {f"data/S/run:{i}": rng.bytes(60_000) for i in range(100)}  # 6 MB offered, 2 MB allowed
    stored = [k for k, v in values.items() if cache.set(k, v)]
    assert 20 <= len(stored) < 100
    for k in stored:
        assert cache.get(k) == values[k]
    assert cache.get("data/S/run:never") is None
    stats = cache.stats()
    assert stats["volume"] <= limit and stats["size_limit"] == limit
    assert stats["items"] == len(stored) and stats["skipped_full"] == 100 - len(stored)
    assert stats["hits"] == len(stored) and stats["misses"] == 1
    cache.close()
    explicit = SessionCache("abc123", size_limit=limit, folder=tmp_path / "local")  # the flag wins
    assert explicit.path == tmp_path / "local" / f"drivekit-session-{os.getuid()}-abc123"


# ----------------------------------------------------------------------------- bad input


def _failed_only(root: Path) -> None:
    layout = Layout(root)
    for key in layout.iter_runs():
        path = layout.result_path(key)
        route_id = key.name.split("_route")[1].split("_rep")[0]
        path.write_text(json.dumps(RouteRecord(route_id, "Failed").to_result()))


@pytest.mark.parametrize("case, args, message", [
    ("empty", [], "the dataset is empty"),
    ("failed", [], "no finished route runs to cache"),
    ("shard", ["--shard", "2/2"], "--shard 2/2"),
    ("shard-format", ["--shard", "half"], "--shard half: expected I/N"),
    ("setting", ["--image_widht=128"], "did you mean --image_width"),
    ("setting-range", ["--jpeg_quality=10"], "jpeg_quality=10 is out of range"),
    ("only", ["--only", "data/Nope/run_route0_rep0:3"], "not a finished route run"),
    ("missing", [], "no such dataset root"),
])
def test_bad_input_is_one_line_and_a_failure_and_changes_nothing(tmp_path, small_root, case, args, message):
    if case == "empty":
        root = tmp_path / "root"
        root.mkdir()
        shutil.copy(small_root / "manifest.json", root / "manifest.json")
    elif case == "failed":
        root = copy_root(small_root, tmp_path / "root")
        _failed_only(root)
    elif case == "missing":
        root = tmp_path / "nowhere"
    else:
        root = small_root
    before = tree(root) if root.exists() else None
    proc = run_tool(BUILD_CACHE, "--root", str(root), *args)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert lines[0].startswith("cache: ")
    if case == "failed":
        assert "bin/progress" in lines[0]
    if before is not None:
        assert tree(root) == before
    else:
        assert not root.exists()


# ----------------------------------------------------------------------------- decoders and kernels (same pixels)


def _pillow_decode(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.array(image)


def test_jpeg_decoding_gives_pillows_pixels_exactly_for_records_and_recorded_frames(small_built):
    """The JPEG decoder (simplejpeg) against the one it replaced (Pillow), on every cached RGB image and every
    recorded camera image of the small root: tolerance 0 (max abs pixel difference), so caches built before
    read back the same samples and the cache format did not change."""
    import msgpack

    from tools.dataset.codec import decode_array, decode_jpeg, encode_array, zstd_decompress

    folder = cache_dir(Layout(small_built), CacheSettings())
    blobs = [msgpack.unpackb(zstd_decompress(msgpack.unpackb(p.read_bytes())["body"]))["rgb"]
             for p in sorted(folder.rglob("*.rec"))]
    layout = Layout(small_built)
    for key in layout.iter_runs():
        for p in layout.frame_paths(key)[:5]:
            blobs.append(msgpack.unpackb(p.read_bytes())["sensors"]["rgb_front"])
    assert len(blobs) > 20
    for blob in blobs:
        ours, pillow = decode_array(blob), _pillow_decode(blob["data"])
        assert ours.dtype == pillow.dtype and ours.shape == pillow.shape and ours.flags.writeable
        assert int(np.abs(ours.astype(int) - pillow).max()) == 0
    grey = (np.arange(24 * 40) % 251).astype(np.uint8).reshape(24, 40)
    blob = encode_array(grey, "jpeg", jpeg_quality=90)
    assert np.array_equal(decode_array(blob), _pillow_decode(blob["data"]))
    with pytest.raises(ValueError):
        decode_jpeg(blob["data"][:40])  # truncated: an error, not a grey picture


def test_the_numba_lanczos_resize_gives_pillows_pixels_where_it_is_used_and_pillow_is_kept_elsewhere():
    """tools/cache/kernels.py against Pillow's resize: bit-identical (tolerance 0) for the crops and sizes the
    builder uses on the default rig, and for other downscales that pass `resize_is_pillows`; a geometry
    that fails the check (Pillow takes the passes in the other order) keeps Pillow's resize."""
    from PIL import Image

    from tools.cache.kernels import lanczos_resize, resize_is_pillows
    from tools.cache.preprocess import Preprocessor
    from tools.dataset.rig import RigConfig

    rng = np.random.default_rng(3)
    lanczos = Image.Resampling.LANCZOS
    geometries = [((256, 512, 3), (256, 128), (0, 0, 512, 256)), ((256, 512, 3), (320, 160), (0, 0, 512, 256)),
                  ((256, 512, 3), (128, 128), (128, 0, 384, 256)), ((300, 400, 3), (200, 100), (0, 50, 400, 250)),
                  ((64, 80), (40, 30), (3, 4, 75, 58))]
    for shape, size, box in geometries:
        assert resize_is_pillows(shape, size, box), (shape, size, box)
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        assert np.array_equal(lanczos_resize(image, size, box),
                              np.asarray(Image.fromarray(image).resize(size, lanczos, box=box)))
    # the Preprocessor's camera() on the default rig: the same rgb as Pillow's resize of the same crop
    pre = Preprocessor(CacheSettings(), RigConfig())
    cam = pre.rig.camera("front")
    rgb = rng.integers(0, 256, (cam.height, cam.width, 3), dtype=np.uint8)
    zeros = np.zeros((cam.height, cam.width), np.uint8)
    left, top, cw, ch = pre._crop(cam.width, cam.height)
    s = pre.settings
    expected = Image.fromarray(rgb).resize((s.image_width, s.image_height), lanczos, box=(left, top, left + cw,
                                                                                          top + ch))
    assert np.array_equal(pre.camera(rgb, zeros, zeros.astype(np.uint16))["rgb"], np.asarray(expected))
    # a geometry where the order of the passes differs: detected, so the caller falls back to Pillow
    assert not resize_is_pillows((30, 32, 3), (55, 6), (1, 12, 11, 27))


def test_lidar_rasterization_counts_every_point_in_its_cell_as_the_numpy_version_did():
    """tools.cache.kernels.lidar_counts against the numpy expression it replaced: identical counts, points
    outside the grid left out, saturation at 255, heights at the split compared in float32 as numpy does."""
    from tools.cache.preprocess import Preprocessor
    from tools.dataset.rig import RigConfig

    pre = Preprocessor(CacheSettings(), RigConfig())
    rng = np.random.default_rng(4)
    split = np.float32(CacheSettings().lidar_split_height)  # z at the split height and one float32 either side
    at_split = [[5.0, 1.0, z] for z in (np.nextafter(split, -1), split, np.nextafter(split, 1), 0.2)]
    points = np.concatenate([rng.uniform(-80, 80, (20000, 3)), np.tile([[10.0, 0.0, 1.0]], (300, 1)),
                             np.tile(at_split, (5, 1))])
    points = np.concatenate([points, rng.uniform(0, 1, (len(points), 1))], axis=1).astype(np.float32)
    g = pre.grid.pixels
    col, row = np.floor(pre.grid.ego_to_pixel(points[:, :2])).astype(np.int64).T
    inside = (row >= 0) & (row < g) & (col >= 0) & (col < g)
    channel = (points[:, 2] > pre.settings.lidar_split_height).astype(np.int64)
    counts = np.bincount((channel * g * g + row * g + col)[inside], minlength=2 * g * g)
    expected = np.minimum(counts, 255).astype(np.uint8).reshape(2, g, g)
    got = pre.lidar_bev(points)
    assert got.dtype == np.uint8 and np.array_equal(got, expected) and got.max() == 255


def test_the_overtake_label_is_how_far_left_of_the_route_the_expert_drove_six_metres_on():
    """tools.cache.preprocess.overtake_offset: the expert stands behind an obstacle, then moves a lane over (left in
    CARLA's world, whose y points right: y < 0). The route points stay in its lane; the driven path says so."""
    from types import SimpleNamespace

    from tools.cache.preprocess import OVERTAKE_FRAMES, overtake_offset
    from tools.dataset.samples import OVERTAKE_AHEAD_M, OVERTAKE_MIN_M

    here = SimpleNamespace(route=[[x, 0.0, 0.0] for x in np.arange(2.0, 22.0, 2.0)], ego_xy=(0.0, 0.0))

    def at(x: float, y: float) -> SimpleNamespace:
        return SimpleNamespace(ego_xy=(x, y))

    standing = [at(0.0, 0.0)] * 24  # the expert's 6 s behind the obstacle: the label looks past them
    out = [at(x, -3.5 * min(1.0, (x + 4.0) / 12.0)) for x in np.arange(0.5, 20.0, 0.5)]  # its ramp into the next lane
    label = overtake_offset(here, standing + out)
    assert OVERTAKE_MIN_M < label < 3.5
    travelled = np.cumsum([0.0] + [float(np.hypot(b.ego_xy[0] - a.ego_xy[0], b.ego_xy[1] - a.ego_xy[1]))
                                   for a, b in zip(out, out[1:], strict=False)]) + float(np.hypot(*out[0].ego_xy))
    first = int(np.argmax(travelled >= OVERTAKE_AHEAD_M))
    assert label == pytest.approx(-out[first].ego_xy[1])  # the point OVERTAKE_AHEAD_M along the driven path
    assert overtake_offset(here, [at(x, 3.2) for x in np.arange(1.0, 12.0)]) == pytest.approx(-3.2)  # to the right
    straight = [at(x, 0.1) for x in np.arange(1.0, 12.0)]
    assert abs(overtake_offset(here, straight)) < OVERTAKE_MIN_M  # following the route
    assert overtake_offset(here, straight[:4]) == 0.0  # the run ends first
    assert overtake_offset(here, straight[:3] + [None] + straight[3:]) == 0.0  # an unreadable frame on the way
    assert overtake_offset(SimpleNamespace(route=[], ego_xy=(0.0, 0.0)), straight) == 0.0
    assert len(standing) + 16 < OVERTAKE_FRAMES  # the builder gives a sample this many later frames
