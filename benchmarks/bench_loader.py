"""Samples per second per core that a training loader gets, and bytes per sample on disk.

One loader's per-sample work, on ONE CPU core (affinity and every thread pool set to one): read the
sample's file(s) and decode them into the numpy sample dict of tools/dataset/samples.py at the model's
input size, from

  (a) raw    the route folders: read_frame + the cache builder's preprocessing (resize, label mapping,
             LiDAR rasterization, BEV resampling, waypoints; the run's poses are loaded beforehand)
  (b) ours   the cache: tools.dataset.cache.read_record (msgpack + zstd, RGB as JPEG)
  (c) LEAD   a LEAD-style cache built here from the same samples: one file per sample, an LZMA-compressed
             pickle of RGB as JPEG (quality 90), semantics and BEV as 8-bit PNG, depth as 8-bit PNG
             (clipped at 50 m, as LEAD's encode_depth_8bit), the LiDAR BEV as 16-bit PNG, boxes and
             vectors as raw float32 arrays

The dataset is a 3x3 town with 3 routes driven in the embedded world (or the root given by --root);
the caches are built with the default CacheSettings. Every file is read once before timing, so all
three read from the page cache: the figures compare decoding work, not the disk.

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
    from tools.collect.routes import generate_routes
    from tools.collect.run import run_route
    from tools.collect.town import make_town

    logging.disable(logging.INFO)
    xodr = make_town(tmp / "routes" / "towns" / "town.xodr", grid="3x3")
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        files = generate_routes(town=str(xodr), count=routes, out=str(tmp / "routes"), seed=5, min_length=150,
                                max_length=250)
    for f in files:
        run_route(route=str(f), root=str(tmp / "root"), repetition=0, towns=str(tmp / "routes" / "towns"),
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


def rates(loaders: dict[str, tuple[list, object]], passes: int, chunk: int = 25) -> dict[str, float]:
    """Samples/s of each loader: `work(item)` over all its items, best of `passes` passes. The loaders take
    turns every `chunk` samples, so that other load on the machine slows all of them alike."""
    best = dict.fromkeys(loaders, 0.0)
    for _ in range(passes):
        spent = dict.fromkeys(loaders, 0.0)
        n = max(len(items) for items, _ in loaders.values())
        for start in range(0, n, chunk):
            for name, (items, work) in loaders.items():
                t = time.perf_counter()
                for item in items[start: start + chunk]:
                    work(item)
                spent[name] += time.perf_counter() - t
        for name, (items, _) in loaders.items():
            best[name] = max(best[name], len(items) / spent[name])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", help="an existing dataset root (default: collect a small one in a temporary folder)")
    parser.add_argument("--routes", type=int, default=3, help="routes to drive when no --root (default 3)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per loader; the best counts (default 3)")
    args = parser.parse_args()
    cpu = pin_one_core()

    from tools.cache.build import build_cache, cacheable_runs, read_run_source
    from tools.cache.preprocess import Preprocessor
    from tools.dataset.cache import cache_dir, read_record, record_path, run_rel
    from tools.dataset.frames import read_frame, read_measurements
    from tools.dataset.layout import Layout
    from tools.dataset.samples import CacheSettings

    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp_name:
        tmp = Path(tmp_name)
        if args.root:
            # the caches go to a copy-free place: ours into ROOT/cache (as a user would), LEAD's into tmp
            root = Path(args.root).absolute()
        else:
            root = make_dataset(tmp, args.routes)
        settings = CacheSettings()
        with redirect_stderr(io.StringIO()):
            build_cache(root=str(root), settings={})
        layout = Layout(root)
        folder = cache_dir(layout, settings)

        raw_items, ours, lead = [], [], []
        for key in cacheable_runs(layout):
            frames = layout.frame_paths(key)
            measurements = [read_measurements(p) for p in frames]
            pre = Preprocessor(settings, read_run_source(layout, key).rig)
            for i, p in enumerate(frames):
                future = [measurements[j] if j < len(frames) else None for j in range(i + 1, i + 1 + settings.horizon)]
                raw_items.append((p, pre, future))
                rec = record_path(folder, run_rel(key), i)
                ours.append(rec)
                lead_path = tmp / "lead" / run_rel(key) / f"{i:05d}.xz"
                lead_path.parent.mkdir(parents=True, exist_ok=True)
                lead_path.write_bytes(lead_encode(read_record(rec)))
                lead.append(lead_path)
        n = len(ours)
        for p in [item[0] for item in raw_items] + ours + lead:  # into the page cache
            p.read_bytes()

        def load_raw(item) -> dict:
            path, pre, future = item
            return pre(read_frame(path, sensors=pre.sensor_names), future)

        # the three decode to the same keys, dtypes and shapes
        a, b, c = load_raw(raw_items[0]), read_record(ours[0]), lead_decode(lead[0].read_bytes())
        for k in b:
            assert a[k].dtype == b[k].dtype == c[k].dtype and a[k].shape == b[k].shape == c[k].shape, k

        r = rates({"raw": (raw_items, load_raw), "ours": (ours, read_record),
                   "lead": (lead, lambda p: lead_decode(p.read_bytes()))}, args.passes)
        r_raw, r_ours, r_lead = r["raw"], r["ours"], r["lead"]
        size_raw = sum(item[0].stat().st_size for item in raw_items) / n
        size_ours = sum(p.stat().st_size for p in ours) / n
        size_lead = sum(p.stat().st_size for p in lead) / n

    s = settings
    print(f"training loader, 1 core (cpu {cpu}), {n} samples, input {s.image_width}x{s.image_height}, "
          f"grid {s.bev_pixels}x{s.bev_pixels}, best of {args.passes} interleaved passes, files in the page cache")
    print(f"  {'source':<34} {'samples/s':>10} {'KiB/sample':>11}")
    print(f"  {'(a) raw route folders':<34} {r_raw:>10.0f} {size_raw / 1024:>11.1f}")
    print(f"  {'(b) our cache (msgpack+zstd)':<34} {r_ours:>10.0f} {size_ours / 1024:>11.1f}")
    print(f"  {'(c) LEAD-style (lzma pickle)':<34} {r_lead:>10.0f} {size_lead / 1024:>11.1f}")
    print(f"  (b)/(c) speed {r_ours / r_lead:.1f}x (goal: 3x or more); (b)/(a) speed {r_ours / r_raw:.1f}x; "
          f"(b)/(c) size {size_ours / size_lead:.2f} (goal: 1.00 or less)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
