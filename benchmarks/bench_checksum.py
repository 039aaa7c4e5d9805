"""What the frame checksum (frame format 2: a CRC-32 of the file's bytes, tools.dataset.frames.seal) costs: when
a frame is recorded, and when validate reads it.

Over every frame of a root (recorded frames, as they are on disk), on one core, the mean per frame of

  record   msgpack.packb of the frame's map (format 1: no checksum) against frames.seal (format 2: the same map
           packed entry by entry, plus the CRC-32 of its bytes)
  read     frames.check_seal alone (the CRC-32 over the file's bytes) against what validate does with a frame:
           read_frame (checksum, decoding bounded by the rig) and check_frame (schema, sensors, labels)

Each frame's time is the least of --passes passes (on a shared machine the least is the work itself, the rest is
waiting for a core); the variants take turns frame by frame.

    .venv/bin/python benchmarks/bench_checksum.py --root ROOT [--passes 5]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import msgpack  # noqa: E402

from tools.dataset.frames import check_seal, read_frame, seal  # noqa: E402
from tools.dataset.geometry import BevGrid  # noqa: E402
from tools.dataset.layout import Layout  # noqa: E402
from tools.dataset.results import RunState, run_state  # noqa: E402
from tools.dataset.rig import run_rig  # noqa: E402
from tools.dataset.validate import check_frame  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="a dataset root (only read)")
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass
    layout = Layout(Path(args.root))
    frames = []
    for key in sorted(layout.iter_runs()):
        if run_state(layout, key) is not RunState.FINISHED:
            continue
        rig = run_rig(json.loads(layout.run_settings(key).read_text()))
        frames += [(path, rig) for path in layout.frame_paths(key)]
    if not frames:
        raise SystemExit(f"{args.root}: no frames")
    contents = []
    for path, _ in frames:
        data = path.read_bytes()
        frame = msgpack.unpackb(data, raw=False)
        frame.pop("crc32", None)
        contents.append((seal(frame), frame))  # the bytes format 2 writes (a root of format 4 or older works too)
    size = statistics.mean(len(d) for d, _ in contents)
    names = ("pack", "seal", "crc", "validate")
    least = [dict.fromkeys(names, float("inf")) for _ in frames]
    for _ in range(args.passes):
        for best, (path, rig), (data, frame) in zip(least, frames, contents, strict=True):
            t0 = time.perf_counter()
            msgpack.packb(frame, use_bin_type=True)
            t1 = time.perf_counter()
            seal(frame)
            t2 = time.perf_counter()
            check_seal(data, path)
            t3 = time.perf_counter()
            check_frame(read_frame(path, rig=rig), rig, BevGrid.of_rig(rig.bev))
            t4 = time.perf_counter()
            for name, dt in zip(names, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                best[name] = min(best[name], dt)
    ms = {name: statistics.mean(best[name] for best in least) * 1e3 for name in names}
    print(f"{len(frames)} frames of {args.root}, {size / 1024:.0f} KiB each on average; one core, the least of "
          f"{args.passes} passes per frame, mean ms per frame:")
    print(f"  record:   pack (format 1) {ms['pack']:.3f}   seal (format 2) {ms['seal']:.3f}   "
          f"checksum cost {ms['seal'] - ms['pack']:+.3f}")
    print(f"  validate: CRC-32 check {ms['crc']:.3f} of read_frame + check_frame {ms['validate']:.3f} "
          f"({100 * ms['crc'] / ms['validate']:.1f}%)")


if __name__ == "__main__":
    main()
