"""Samples per second per core that a training loader gets, and bytes per sample on disk; and the cache
builder's samples per second per core.

One loader's per-sample work, on ONE CPU core (affinity and every thread pool set to one): read the
sample's file(s) and decode them into the numpy sample dict of tools/dataset/samples.py at the model's
input size, from

  (a) raw    the route folders: read_frame + the cache builder's preprocessing (resize, label mapping,
             LiDAR rasterization, BEV resampling, waypoints; the run's poses are loaded beforehand)
  (b) ours   the cache as training reads it: tools.train.data.RecordDataset (msgpack + zstd, RGB as JPEG), every
             check in: the bounded regular-file read, the checksum, what the record was made from (its run's
             recorded attempt, its place: run and frame index, its frame's fingerprint), every array's dtype and
             shape against the cache settings
  (c) LEAD   a LEAD-style cache built here from the same samples: one file per sample, an LZMA-compressed
             pickle of RGB as JPEG (quality 90), semantics and BEV as 8-bit PNG, depth as 8-bit PNG
             (clipped at 50 m, as LEAD's encode_depth_8bit), the LiDAR BEV as 16-bit PNG, boxes and
             vectors as raw float32 arrays, decoded with Pillow
  (d) ceiling  the decoding no loader of our record can skip: the JPEG decode of the RGB image alone
             (tools.dataset.codec.decode_jpeg) plus zstd decompression of the other arrays alone (their
             raw bytes compressed as one zstd frame at the codec's level); (b)/(d) says how far the
             loader is from it

Each check of (b) is also timed alone over every record, taking turns with the loaders (microseconds per sample;
they are in (b)'s figure): what they cost, and how much faster (b) would be without them.

The cache build (`python -m tools.cache build`, the same function) is timed on the same core into a
fresh cache folder, then per stage over every sample: read (read_frame and its decoding), preprocess
(tools/cache/preprocess.py), encode (tools.dataset.cache.encode_record), write (the atomic file write).

The dataset is a 3x3 town with 3 routes driven in the embedded world (or the root given by --root, which
is only read: the caches go to a temporary copy of it made of hard links); the caches are built with
the default CacheSettings. Every file is read once before timing, so all loaders read from the page
cache: the figures compare decoding work, not the disk. Each figure is the median of --passes runs;
the loaders take turns every 25 samples so that other load on the machine slows all of them alike, and
the ratios are the medians of each run's own ratios.

    .venv/bin/python benchmarks/bench_loader.py [--root ROOT] [--routes 3] [--passes 3]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import lzma  # noqa: E402
import pickle  # noqa: E402  (the LEAD-style baseline only: the one place pickle appears in this project)
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from contextlib import redirect_stderr, redirect_stdout  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

LEAD_JPEG_QUALITY = 90
LEAD_DEPTH_MAX_M = 50.0  # LEAD's encode_depth_8bit: clip at 50 m, scale to 0..255


def pin_one_core() -> int:
    cpu = sorted(os.sched_getaffinity(0))[0]
    os.sched_setaffinity(0, {cpu})
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    return cpu


def make_dataset(tmp: Path, routes: int) -> Path:
    """A 3x3 town, `routes` routes, each driven once into tmp/root (the collect stage's own functions)."""
    from tools.collect.base.route_gen import generate_routes
    from tools.collect.base.town import make_town
    from tools.collect.runner.attempt import route_run

    logging.disable(logging.INFO)
    xodr = make_town(tmp / "routes" / "towns" / "town.xodr", grid="3x3")
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        files = generate_routes(town=str(xodr), count=routes, out=str(tmp / "routes"), seed=5, min_length=150,
                                max_length=250)
    for f in files:
        route_run(route=str(f), root=str(tmp / "root"), repetition=0, towns=str(tmp / "routes" / "towns"),
                  route_id=None, attempt=None, force=False, settings={})
    return tmp / "root"


# ----------------------------------------------------------------------------- (c) the LEAD-style baseline


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _png_decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.array(image)


def lead_encode(sample: dict[str, np.ndarray]) -> bytes:
    """One LEAD-style cache file: an LZMA-compressed pickle of a dict of encoded arrays."""
    buf = io.BytesIO()
    Image.fromarray(sample["rgb"]).save(buf, format="JPEG", quality=LEAD_JPEG_QUALITY)
    depth8 = (np.clip(sample["depth"].astype(np.float32), 0, LEAD_DEPTH_MAX_M) / LEAD_DEPTH_MAX_M * 255)
    g = sample["lidar_bev"].shape[-1]
    obj = {
        "image": buf.getvalue(),
        "semantic": _png(sample["semantics"]),
        "bev_semantic": _png(sample["bev"]),
        "depth": _png(depth8.astype(np.uint8)),
        "lidar_bev": _png(sample["lidar_bev"].reshape(2 * g, g).astype(np.uint16)),  # 16-bit PNG
        **{k: sample[k] for k in ("waypoints", "waypoints_valid", "route", "target_point", "command", "speed",
                                  "target_speed", "light_hazard", "vehicle_hazard", "boxes")},
    }
    return lzma.compress(pickle.dumps(obj, protocol=5))


def lead_decode(data: bytes) -> dict[str, np.ndarray]:
    obj = pickle.loads(lzma.decompress(data))  # the baseline only: never load pickle from a shared dataset
    lidar = _png_decode(obj.pop("lidar_bev"))
    sample = {
        "rgb": _png_decode(obj.pop("image")),
        "semantics": _png_decode(obj.pop("semantic")),
        "depth": (_png_decode(obj.pop("depth")).astype(np.float32) * (LEAD_DEPTH_MAX_M / 255)).astype(np.float16),
        "lidar_bev": lidar.astype(np.uint8).reshape(2, lidar.shape[1], lidar.shape[1]),
        "bev": _png_decode(obj.pop("bev_semantic")),
    }
    sample.update(obj)
    return sample


# ----------------------------------------------------------------------------- timing


def rates(loaders: dict[str, tuple[list, object]], passes: int, chunk: int = 25) -> list[dict[str, float]]:
    """Samples/s of each loader in each of `passes` runs: `work(item)` over all its items. The loaders take
    turns every `chunk` samples, so that other load on the machine slows all of them alike."""
    runs = []
    for _ in range(passes):
        spent = dict.fromkeys(loaders, 0.0)
        n = max(len(items) for items, _ in loaders.values())
        for start in range(0, n, chunk):
            for name, (items, work) in loaders.items():
                t = time.perf_counter()
                for item in items[start: start + chunk]:
                    work(item)
                spent[name] += time.perf_counter() - t
        runs.append({name: len(items) / spent[name] for name, (items, _) in loaders.items()})
    return runs


def median(values) -> float:
    return float(np.median(list(values)))


def shadow_root(root: Path, tmp: Path) -> Path:
    """A copy of dataset root `root` in `tmp` without its cache/, its files hard links where the file system
    allows (every tool refuses a root reached through a symbolic link, and writes only by renaming a new file into
    place, so `root` stays untouched)."""
    import shutil

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    return Path(shutil.copytree(root, tmp / "root", symlinks=True, copy_function=link,
                                ignore=lambda folder, names: ["cache"] if Path(folder) == root else []))


def time_build(root: Path, passes: int) -> list[float]:
    """Samples/s of `python -m tools.cache build` (its function) into a fresh cache folder, per run."""
    import shutil

    from tools.cache.build import build_cache

    runs = []
    for _ in range(passes):
        shutil.rmtree(root / "cache", ignore_errors=True)
        with redirect_stderr(io.StringIO()):
            summary = build_cache(root=str(root), settings={})
        runs.append(summary["built"] / summary["seconds"])
    return runs


def checks_of(dataset) -> dict[str, tuple[list, object]]:
    """Each check the training loader (`dataset`, a RecordDataset) makes, alone, as `rates` times a loader: (every
    record as the check needs it, the check of one)."""
    import stat
    import zlib

    import msgpack
    import zstandard

    from tools.dataset.cache import _bounds, record_path
    from tools.dataset.codec import declared, zstd_decompress

    specs, _ = _bounds(dataset.settings)
    records = []
    for run, index in dataset.items:
        path = record_path(dataset.cache_root, run, index)
        outer = msgpack.unpackb(path.read_bytes(), raw=False)
        listed = dataset.frames.get(run)
        records.append((path, (run, index), outer, msgpack.unpackb(zstd_decompress(outer["body"]), raw=False),
                        listed[index] if listed else None))

    def regular_file(item) -> None:  # what the bounded reader adds to a plain read: a regular file, its size bound
        fd = os.open(item[0], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 30:
                raise AssertionError(item[0])
            os.set_blocking(fd, True)
        finally:
            os.close(fd)

    def checksum(item) -> None:  # of what the record was made from and its body (as _open_record computes it)
        outer = item[2]
        made = msgpack.packb([outer["run"], outer["source"], outer["index"], outer["frame"]])
        assert zlib.crc32(outer["body"], zlib.crc32(made)) == outer["crc32"]

    def made_from(item) -> None:  # its run's recorded attempt, its place, its frame's fingerprint
        run, index = item[1]
        outer = item[2]
        listed = dataset.frames.get(run)
        frame = listed[index] if listed is not None and 0 <= index < len(listed) else None
        assert outer["run"] == dataset.fingerprints.get(run) and (outer["source"], outer["index"]) == item[1] \
            and (frame is None or outer["frame"] == frame)

    def shapes(item) -> None:  # every array's declared dtype and shape, and the body's declared size
        zstandard.frame_content_size(item[2]["body"])
        for name, blob in item[3].items():
            declared(blob, specs[name])

    return {name: (records, check) for name, check in (("bounded read", regular_file), ("checksum", checksum),
                                                       ("made from", made_from), ("dtypes and shapes", shapes))}


def build_stages(items: list, folder: Path) -> dict[str, float]:
    """Seconds per sample of each stage of the build over `items` (path, preprocessor, future, record path)."""
    from tools.core import atomic
    from tools.dataset.cache import encode_record
    from tools.dataset.frames import read_frame

    spent = dict.fromkeys(("read", "preprocess", "encode", "write"), 0.0)
    for path, pre, future, rec in items:
        t0 = time.perf_counter()
        frame = read_frame(path, sensors=pre.sensor_names)
        t1 = time.perf_counter()
        sample = pre(frame, future)
        t2 = time.perf_counter()
        data = encode_record(sample, pre.settings.jpeg_quality)
        t3 = time.perf_counter()
        atomic.write_bytes(folder / rec.relative_to(rec.parents[3]), data)
        t4 = time.perf_counter()
        for name, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[name] += dt
    return {name: dt / len(items) for name, dt in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", help="an existing dataset root, only read (default: collect a small one in a "
                        "temporary folder)")
    parser.add_argument("--routes", type=int, default=3, help="routes to drive when no --root (default 3)")
    parser.add_argument("--passes", type=int, default=3, help="timed runs of each; the median counts (default 3)")
    args = parser.parse_args()
    cpu = pin_one_core()

    from tools.cache.build import cacheable_runs, read_run_source
    from tools.cache.preprocess import Preprocessor
    from tools.dataset.cache import cache_dir, read_record, record_path, run_rel
    from tools.dataset.codec import ZSTD_LEVEL, decode_jpeg, encode_array, zstd_decompress
    from tools.dataset.frames import read_frame, read_measurements
    from tools.dataset.layout import Layout
    from tools.dataset.samples import CacheSettings
    from tools.train.data import RecordDataset, frame_fingerprints, run_fingerprints

    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp_name:
        tmp = Path(tmp_name)
        root = shadow_root(Path(args.root).absolute(), tmp) if args.root else make_dataset(tmp, args.routes)
        settings = CacheSettings()
        build = time_build(root, args.passes)  # leaves the cache of the last run for the loaders
        layout = Layout(root)
        folder = cache_dir(layout, settings)

        raw_items, ours, lead, ceiling = [], [], [], []
        import zstandard

        rest_c = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        for key in cacheable_runs(layout):
            frames = layout.frame_paths(key)
            measurements = [read_measurements(p) for p in frames]
            pre = Preprocessor(settings, read_run_source(layout, key).rig)
            for i, p in enumerate(frames):
                future = [measurements[j] if j < len(frames) else None for j in range(i + 1, i + 1 + settings.horizon)]
                rec = record_path(folder, run_rel(key), i)
                raw_items.append((p, pre, future, rec))
                ours.append(rec)
                sample = read_record(rec)
                lead_path = tmp / "lead" / run_rel(key) / f"{i:05d}.xz"
                lead_path.parent.mkdir(parents=True, exist_ok=True)
                lead_path.write_bytes(lead_encode(sample))
                lead.append(lead_path)
                jpeg = encode_array(sample["rgb"], "jpeg", jpeg_quality=settings.jpeg_quality, jpeg_optimize=True)
                rest = b"".join(np.ascontiguousarray(v).tobytes() for k, v in sample.items() if k != "rgb")
                ceiling.append((jpeg["data"], rest_c.compress(rest)))
        n = len(ours)
        for p in [item[0] for item in raw_items] + ours + lead:  # into the page cache
            p.read_bytes()
        # the training loader: what it checks each record against comes from the runs (their run.json and
        # measurements index), read once when training starts
        items = [(run_rel(key), i) for key in cacheable_runs(layout) for i in range(layout.frame_count(key))]
        loader = RecordDataset(items, root, folder, settings, None, run_fingerprints(layout, items),
                               frame_fingerprints(layout, items))
        assert len(loader.frames) == len({run for run, _ in items}), "runs without frame fingerprints"

        def load_raw(item) -> dict:
            path, pre, future, _ = item
            return pre(read_frame(path, sensors=pre.sensor_names), future)

        def decode_ceiling(item) -> None:
            decode_jpeg(item[0])
            zstd_decompress(item[1])

        # the three decode to the same keys, dtypes and shapes
        a, b, c = load_raw(raw_items[0]), read_record(ours[0]), lead_decode(lead[0].read_bytes())
        for k in b:
            assert a[k].dtype == b[k].dtype == c[k].dtype and a[k].shape == b[k].shape == c[k].shape, k

        checks = checks_of(loader)  # timed among the loaders, under the same load
        runs = rates({"raw": (raw_items, load_raw), "ours": (range(n), loader.__getitem__),
                      "lead": (lead, lambda p: lead_decode(p.read_bytes())),
                      "ceiling": (ceiling, decode_ceiling), **checks}, args.passes)
        r = {name: median(run[name] for run in runs) for name in runs[0]}
        ratio = {(x, y): median(run[x] / run[y] for run in runs)
                 for x, y in (("ours", "lead"), ("ours", "raw"), ("ours", "ceiling"))}
        size_raw = sum(item[0].stat().st_size for item in raw_items) / n
        size_ours = sum(p.stat().st_size for p in ours) / n
        size_lead = sum(p.stat().st_size for p in lead) / n
        size_ceiling = sum(len(j) + len(z) for j, z in ceiling) / n
        stages = build_stages(raw_items, tmp / "stages")
        cost = {name: median(1 / run[name] for run in runs) for name in checks}  # seconds per sample
        share = median(sum(1 / run[name] for name in checks) * run["ours"] for run in runs)

    s = settings
    print(f"training loader, 1 core (cpu {cpu}), {n} samples, input {s.image_width}x{s.image_height}, "
          f"grid {s.bev_pixels}x{s.bev_pixels}, median of {args.passes} interleaved runs, files in the page cache")
    print(f"  {'source':<34} {'samples/s':>10} {'KiB/sample':>11}")
    print(f"  {'(a) raw route folders':<34} {r['raw']:>10.0f} {size_raw / 1024:>11.1f}")
    print(f"  {'(b) our cache (msgpack+zstd)':<34} {r['ours']:>10.0f} {size_ours / 1024:>11.1f}")
    print(f"  {'(c) LEAD-style (lzma pickle)':<34} {r['lead']:>10.0f} {size_lead / 1024:>11.1f}")
    print(f"  {'(d) decode ceiling (JPEG + zstd)':<34} {r['ceiling']:>10.0f} {size_ceiling / 1024:>11.1f}")
    print(f"  (b)/(c) speed {ratio['ours', 'lead']:.1f}x (goal: 6x or more); "
          f"(b)/(a) speed {ratio['ours', 'raw']:.1f}x; (b)/(c) size {size_ours / size_lead:.2f} (goal: 1.00 or less)")
    print(f"  (b)/(d) {ratio['ours', 'ceiling']:.2f}: the loader takes {1 / ratio['ours', 'ceiling'] - 1:.0%} more "
          "time per sample than the decoding it cannot skip")
    print("  (b)'s checks, each timed alone among the loaders, per sample: "
          + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in cost.items())
          + f"; together {sum(cost.values()) * 1e6:.1f} us, {share:.1%} of (b)'s time (without them (b)/(c) would be "
          f"{ratio['ours', 'lead'] / (1 - share):.1f}x)")
    total = sum(stages.values())
    print(f"cache build, 1 core (cpu {cpu}), {n} samples into a fresh cache folder, median of {args.passes} runs")
    print(f"  {median(build):.0f} samples/s per core (runs: {', '.join(f'{b:.0f}' for b in build)}); per sample "
          f"{total * 1e3:.2f} ms: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in stages.items()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
