"""Bucket files: which recorded frames a training phase uses, grouped into buckets mixed per epoch.

    ROOT/buckets/<collection>.json     one file per collection (COLLECTIONS), written by `tools.buckets build`
    ROOT/buckets/index.json            the builder's per-frame index (behaviour of every frame of every run)

A collection holds buckets; a bucket is (name, split) with its frames and a per-epoch weight schedule. The
splits are train, val and test (SPLITS); training reads train and val only (TRAINING_SPLITS): a collection is
loaded with the splits its reader asks for, and training never asks for test, so no test frame is even in
its memory.
Frames are named portably, relative to ROOT: ("data/<Scenario>/<run>", frame index). A file records the
state of the dataset it was built from (`dataset_state`): which finished route runs, their result files'
content hash and frame counts. `load_collection` compares it with the root now and rebuilds a stale
file (routes added or removed since), a posttrain file made for another horizon than the caller's cache,
or a file of an older format (format 1: no test split), by running the builder, so that nobody has to
remember to.

The readers of this module (cache, train) never decide which route runs are usable or what a bucket
means: that is the builder's job (tools/buckets) and docs/buckets.md describes the file format.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core import files
from tools.core.errors import ToolError
from tools.dataset import layout as _layout
from tools.dataset.layout import Layout
from tools.dataset.manifest import dataset_id
from tools.dataset.results import RunState, read_results

run_rel = _layout.run_rel  # the one definition lives in layout.py; re-exported
run_key = _layout.run_key

#: Bump when the content or meaning of a bucket file changes. 2: a test split, the stratified split rule and
#: the balance table (`splits`). 3: the file's checksum (`sha256`), so that an edited file (a test split
#: relabelled as train) is refused, not trained on.
BUCKETS_FORMAT = 3
#: Formats read (an older one reads without what it lacks, and load_collection rebuilds it); others are refused.
READABLE_FORMATS = (1, 2, 3)
#: Why a file of an older format is rebuilt.
_OLDER = {1: "no test split, no balance table, no checksum", 2: "no checksum"}

COLLECTIONS = ("pretrain", "posttrain")
SPLITS = ("train", "val", "test")
#: What training reads: never the test split.
TRAINING_SPLITS = ("train", "val")

Frame = tuple[str, int]  # ("data/<Scenario>/<run>", frame index)


# ----------------------------------------------------------------------------- names


def frame_file(layout: Layout, frame: Frame) -> Path:
    """The frame file of ("data/<Scenario>/<run>", index) under this root."""
    return layout.frame_path(run_key(frame[0]), int(frame[1]))


def collection_path(layout: Layout, name: str) -> Path:
    """ROOT/buckets/<name>.json."""
    return layout.collection_file(name)


def check_collection(name: Any) -> str:
    if name not in COLLECTIONS:
        raise ToolError(f"--collection {name}: unknown collection; choose one of {', '.join(COLLECTIONS)}")
    return str(name)


# ----------------------------------------------------------------------------- dataset state


def run_fingerprints(layout: Layout) -> dict[str, dict[str, Any]]:
    """The fingerprint of every FINISHED route run (tools.dataset.results.run_state, the one definition, asked
    in bulk: run_states), sorted: "data/<Scenario>/<run>" -> {"result": content hash of its result file,
    "frames": frame files}. Cheap: reads each result file once (its status and its hash from the same bytes),
    counts frame files from one listing per run, decodes no frame."""
    runs = {}
    for key, (state, text) in read_results(layout).items():
        if state is not RunState.FINISHED:
            continue
        if text is None:  # its result appeared after the listing: run_state read it
            try:
                text = files.read_bytes(layout.result_path(key), files.MAX_JSON_BYTES)
            except FileNotFoundError:  # deleted since: no longer finished
                continue
        runs[run_rel(key)] = {"result": hashlib.sha256(text).hexdigest()[:16], "frames": layout.frame_count(key)}
    return runs


def dataset_state(layout: Layout) -> dict[str, Any]:
    """{"dataset_id", "fingerprint", "runs", "frames"} over the root's finished route runs.

    `fingerprint` changes whenever a finished run is added, removed, or redone (its result or frame
    count changed); `dataset_id` (manifest) tells this dataset from another one."""
    runs = run_fingerprints(layout)
    text = json.dumps(runs, sort_keys=True, separators=(",", ":"))
    return {
        "dataset_id": dataset_id(layout),
        "fingerprint": hashlib.sha256(text.encode()).hexdigest()[:16],
        "runs": runs,
        "frames": sum(r["frames"] for r in runs.values()),
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def describe_change(built_from: dict[str, Any], now: dict[str, Any]) -> str | None:
    """None when `now` is the state a file was built from, else "3 route runs added, 1 removed"."""
    if built_from.get("fingerprint") == now["fingerprint"]:
        return None
    old, new = built_from.get("runs") or {}, now["runs"]
    added = len(new.keys() - old.keys())
    removed = len(old.keys() - new.keys())
    changed = sum(1 for k in new.keys() & old.keys() if new[k] != old[k])
    parts = []
    if added:
        parts.append(f"{_plural(added, 'route run')} added")
    if removed:
        parts.append(f"{removed} removed" if parts else f"{_plural(removed, 'route run')} removed")
    if changed:
        parts.append(f"{changed} redone" if parts else f"{_plural(changed, 'route run')} redone")
    return ", ".join(parts) or "the dataset changed"


# ----------------------------------------------------------------------------- collections


@dataclass
class Bucket:
    """Frames of one behaviour in one split, and its weight schedule: epoch e uses
    weights[min(e, len(weights) - 1)]; the weight is per frame (weight 2: each frame twice as often)."""

    name: str
    split: str  # "train" | "val" | "test"
    frames: list[Frame]
    weights: list[float] = field(default_factory=lambda: [1.0])

    def weight(self, epoch: int) -> float:
        return float(self.weights[min(int(epoch), len(self.weights) - 1)])


@dataclass
class Collection:
    name: str
    buckets: list[Bucket]
    built_from: dict[str, Any]  # dataset_state at build time
    holdout: str  # the split rule applied: "stratified", "town:NAME", "scenario:TYPE" or "every:N"
    settings: dict[str, Any]  # the builder's settings (split rule asked for, seed, fractions, horizon (posttrain),
    # rules, weights)
    format: int = BUCKETS_FORMAT  # the file's format (READABLE_FORMATS)
    splits: tuple[str, ...] = SPLITS  # the splits read from the file (read_collection's `splits`)

    @property
    def horizon(self) -> int | None:
        """The future frames every frame of this collection has (posttrain); None when it does not say."""
        value = self.settings.get("horizon")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def frames(self, split: str) -> list[Frame]:
        """Every frame of a split, sorted by run and index. ValueError for a split not read from the file."""
        self._check_loaded(split)
        return sorted(f for b in self.buckets if b.split == split for f in b.frames)

    def _check_loaded(self, split: str) -> None:
        _check_split(split)
        if split not in self.splits:
            raise ValueError(f"collection {self.name}: the {split} split was not read (splits={self.splits}); "
                             f"load_collection(..., splits=...) reads it")

    def epoch_samples(self, split: str, epoch: int, seed: int) -> list[Frame]:
        """One epoch's samples. train: as many as the split has frames, each bucket contributing in
        proportion to (its weight this epoch) x (its frames), drawn without repetition within a bucket
        until it is exhausted, shuffled; a pure function of (file, seed, epoch). val, test: every frame, sorted."""
        import numpy as np

        self._check_loaded(split)
        if split != "train":
            return self.frames(split)
        epoch, seed = int(epoch), int(seed)
        if epoch < 0 or seed < 0:
            raise ValueError(f"epoch ({epoch}) and seed ({seed}) must not be negative")
        buckets = [b for b in self.buckets if b.split == split and b.frames]
        total = sum(len(b.frames) for b in buckets)
        mass = [b.weight(epoch) * len(b.frames) for b in buckets]
        if total == 0:
            return []
        if sum(mass) <= 0:
            raise ValueError(f"collection {self.name}: every {split} bucket has weight 0 in epoch {epoch}")
        # Largest-remainder rounding: the counts add up to `total` exactly.
        exact = [total * m / sum(mass) for m in mass]
        counts = [int(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
        for i in by_remainder[: total - sum(counts)]:
            counts[i] += 1
        rng = np.random.default_rng([seed, epoch])
        picks, offset = [], 0
        for bucket, count in zip(buckets, counts, strict=True):
            size = len(bucket.frames)
            passes, rest = divmod(count, size)
            picks += [offset + rng.permutation(size) for _ in range(passes)] + [offset + rng.permutation(size)[:rest]]
            offset += size
        chosen = np.concatenate(picks)
        flat = [f for b in buckets for f in b.frames]  # bucket frames are sorted when read from the file
        return [flat[i] for i in chosen[rng.permutation(len(chosen))].tolist()]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: choose one of {', '.join(SPLITS)}")


def _ranges(indices: list[int]) -> list[list[int]]:
    """Sorted frame indices as half-open [start, stop) ranges: [0, 1, 2, 7] -> [[0, 3], [7, 8]]."""
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def bucket_to_json(bucket: Bucket) -> dict[str, Any]:
    runs: dict[str, list[int]] = {}
    for rel, index in bucket.frames:
        runs.setdefault(rel, []).append(int(index))
    return {
        "name": bucket.name,
        "split": bucket.split,
        "weights": [float(w) for w in bucket.weights],
        "count": len(bucket.frames),
        "frames": {rel: _ranges(idx) for rel, idx in sorted(runs.items())},
    }


#: The most frames a route run may have in a bucket file (a 69-hour drive at 4 Hz): what bounds a hostile file.
MAX_RUN_FRAMES = 1_000_000


def _bucket_from_json(data: dict[str, Any], counts: dict[str, int]) -> Bucket:
    """A bucket of a bucket file; each frame range must lie within the frames its run had when the file was
    built (`counts`: built_from's runs), checked before any frame is listed (ValueError naming the range)."""
    frames = []
    for rel, ranges in data["frames"].items():
        run_key(rel)  # refuses absolute paths and ".." in a file from elsewhere
        rel = sys.intern(rel)
        for start, stop in ranges:
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in (start, stop)) or \
                    not 0 <= start < stop <= counts.get(rel, 0):
                raise ValueError(f"bucket {str(data.get('name'))[:40]!r}: frame range [{str(start)[:20]}, "
                                 f"{str(stop)[:20]}) of {rel} is not within its {counts.get(rel, 0)} frames")
            frames.extend((rel, i) for i in range(start, stop))
    weights = [float(w) for w in data["weights"]]
    if data["split"] not in SPLITS or not weights or min(weights) < 0:
        raise ValueError(f"bucket {data.get('name')!r}: bad split or weights")
    return Bucket(str(data["name"]), str(data["split"]), sorted(frames), weights)


def content_sha256(data: dict[str, Any]) -> str:
    """The checksum a bucket file carries under `sha256`: of its content without that key, as canonical JSON
    (sorted keys, no spaces), so that it survives a rewrite that changes nothing but the layout."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_collection(path: Path, splits: tuple[str, ...] = SPLITS) -> tuple[Collection, dict[str, Any]]:
    """A bucket file as a Collection holding the buckets of `splits` only, and its raw JSON. ToolError (naming
    the file and the fix) for a file that is not a bucket file of a format this tool reads."""
    for split in splits:
        _check_split(split)
    fix = f"rebuild it: bin/build-buckets --root {path.parent.parent} --collection {path.stem} --force"
    try:
        data = files.read_json(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise ToolError(f"{path}: not a readable bucket file ({e}); {fix}") from None
    if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
        found = data.get("format") if isinstance(data, dict) else None
        raise ToolError(f"{path}: bucket file format {found}, this tool reads format "
                        f"{' or '.join(map(str, READABLE_FORMATS))}; {fix}")
    if data["format"] >= 3 and data.get("sha256") != content_sha256(data):
        raise ToolError(f"{path}: edited since it was built (its content no longer matches its sha256; only the "
                        f"builder writes bucket files: change the split or weights with its flags); {fix}")
    try:
        counts = {str(rel): run["frames"] for rel, run in data["built_from"]["runs"].items()}
        bad = [rel for rel, n in counts.items() if type(n) is not int or not 0 <= n <= MAX_RUN_FRAMES]
        if bad:
            raise ValueError(f"built_from says run {bad[0]} has {str(counts[bad[0]])[:20]} frames (at most "
                             f"{MAX_RUN_FRAMES})")
        collection = Collection(
            name=str(data["collection"]),
            buckets=[_bucket_from_json(b, counts) for b in data["buckets"] if b["split"] in splits],
            built_from=dict(data["built_from"]),
            holdout=str(data["holdout"]),
            settings=dict(data["settings"]),
            format=int(data["format"]),
            splits=tuple(splits),
        )
        missing = {"dataset_id", "fingerprint", "runs"} - collection.built_from.keys()
        if missing:
            raise KeyError(f"built_from lacks {', '.join(sorted(missing))}")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ToolError(f"{path}: not a valid bucket file ({type(e).__name__}: {e}); {fix}") from None
    return collection, data


def check_same_dataset(path: Path, layout: Layout, built_from: dict[str, Any], this_id: str) -> None:
    """ToolError when a bucket file was built from another dataset than the one in `layout`."""
    if built_from.get("dataset_id") != this_id:
        raise ToolError(
            f"{path} was built from another dataset (dataset_id {built_from.get('dataset_id')}, this root's is "
            f"{this_id}); it is left as it is. To replace it with buckets of this dataset: "
            f"bin/build-buckets --root {layout.root} --collection {path.stem} --force"
        )


def build_command(layout: Layout, name: str, horizon: int) -> list[str]:
    """The builder as a subprocess: stages share only tools/dataset and files."""
    return [sys.executable, "-m", "tools.buckets", "build", "--root", str(layout.root), "--collection", name,
            "--horizon", str(int(horizon))]


def _rebuild(layout: Layout, name: str, horizon: int) -> None:
    """Run the builder; forward its messages (the final state of its progress bar, its summary) on stderr.
    A failure becomes one ToolError line: the builder's own message."""
    proc = subprocess.run(build_command(layout, name, horizon), capture_output=True, text=True)
    lines = [line.rsplit("\r", 1)[-1] for line in proc.stderr.split("\n")]  # a progress bar: its last state
    lines = [line for line in lines if line.strip()]
    if proc.returncode != 0:
        last = lines[-1] if lines else f"exited {proc.returncode}"
        raise ToolError(last.removeprefix("buckets: "))
    for line in lines:
        print(line, file=sys.stderr)


def outdated(collection: Collection) -> str | None:
    """Why a file of an older format must be rebuilt; None for the current format."""
    if collection.format == BUCKETS_FORMAT:
        return None
    return (f"is of bucket file format {collection.format} ({_OLDER.get(collection.format, 'older')}), this tool "
            f"writes format {BUCKETS_FORMAT}")


def load_collection(layout: Layout, name: str, *, horizon: int, rebuild: bool = True,
                    splits: tuple[str, ...] = TRAINING_SPLITS) -> Collection:
    """The collection `name` of this root with the buckets of `splits` (default: train and val, what training
    reads; the test split only when asked for by name), built or rebuilt first when it is missing, stale,
    of an older format or made for another horizon.

    `horizon` is the future horizon of the cache the caller reads (CacheSettings.horizon): posttrain
    frames must have that many readable frames after them. pretrain takes every frame and ignores it.

    Missing, stale (finished route runs added, removed or redone since it was built), of an older format
    or, for posttrain, built for another horizon: say so on stderr and run the builder (`python -m
    tools.buckets build --horizon H`), unless `rebuild` is False (then ToolError). Built from another
    dataset: ToolError naming the file and the fix; never overwritten."""
    check_collection(name)
    horizon = int(horizon)
    path = collection_path(layout, name)
    fix = f"bin/build-buckets --root {layout.root} --collection {name}" + (
        f" --horizon {horizon}" if name == "posttrain" else "")
    this_id = dataset_id(layout)
    try:
        collection, _ = read_collection(path, splits)
    except FileNotFoundError:
        if not rebuild:
            raise ToolError(f"{path}: no such bucket file; build it: {fix}") from None
        print(f"{path} does not exist yet; building it", file=sys.stderr)
        _rebuild(layout, name, horizon)
        return read_collection(path, splits)[0]
    check_same_dataset(path, layout, collection.built_from, this_id)
    change = describe_change(collection.built_from, dataset_state(layout))
    if change is not None:
        reason = f"is stale: {change} since it was built"
    elif outdated(collection):
        reason = outdated(collection)
    elif name == "posttrain" and collection.horizon != horizon:
        reason = f"was built for horizon {collection.horizon}, the cache being read has horizon {horizon}"
    else:
        return collection
    if not rebuild:
        raise ToolError(f"{path} {reason}; rebuild it: {fix}")
    print(f"{path} {reason}; rebuilding", file=sys.stderr)
    _rebuild(layout, name, horizon)
    return read_collection(path, splits)[0]
