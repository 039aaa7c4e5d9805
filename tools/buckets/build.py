"""Build bucket files: put every frame of every finished route run in one bucket, scenario or behaviour (the
rules of tools/dataset/bucket_rules.py), then write the collections (pretrain, posttrain) with train, val and test
splits (tools/buckets/splits.py), a balance table and a weight schedule per bucket.

    ROOT/buckets/index.json        bucket of every frame and weather, per run (reused for runs unchanged since)
    ROOT/buckets/<collection>.json the collections (tools.dataset.buckets reads them; docs/buckets.md)

The frame index makes a rebuild after new routes cheap: only frames of new or redone runs are read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tools.buckets import splits as _splits
from tools.buckets.splits import STRATIFIED, Assignment, SplitSettings, assign, balance, balance_lines, routes_of
from tools.dataset import atomic, cli, files
from tools.dataset.bucket_rules import BUCKETS, RULES, classify
from tools.dataset.buckets import (
    BUCKETS_FORMAT,
    COLLECTIONS,
    SPLITS,
    Bucket,
    Collection,
    bucket_to_json,
    check_same_dataset,
    dataset_state,
    describe_change,
    outdated,
    read_collection,
    run_key,
)
from tools.dataset.errors import ToolError, space_for
from tools.dataset.frames import FrameError, indexed_measurements, read_measurements, read_run_head
from tools.dataset.layout import FRAME_SUFFIX, Layout
from tools.dataset.manifest import now_iso, tool_version, user_at_host
from tools.dataset.results import RunState, is_failed, run_states
from tools.dataset.samples import CacheSettings
from tools.dataset.weather import WEATHER_CLASSES, weather_class

# ----------------------------------------------------------------------------- collection settings

#: Default weight schedules. Pre-training (perception) sees every frame once per epoch; post-training
#: (planning) sees the rare manoeuvres (the scenario buckets among them) twice as often and the long waits
#: at red lights half as often.
DEFAULT_WEIGHTS: dict[str, dict[str, list[float]]] = {
    "pretrain": {name: [1.0] for name in BUCKETS},
    "posttrain": {"obstacle_passing": [2.0], "pedestrian_yielding": [2.0], "junction_flow": [2.0], "stop": [0.5],
                  "start": [2.0], "hazard": [2.0], "turn": [2.0], "junction": [1.0], "follow": [1.0]},
}

#: posttrain skips the first frames of a run (the ego starting from rest at the spawn point).
SKIP_FIRST = 4

#: posttrain's future horizon when neither --horizon nor an existing file gives one: the default cache's.
DEFAULT_HORIZON = CacheSettings().horizon

#: 2: each run's weather class.
INDEX_FORMAT = 2


# ----------------------------------------------------------------------------- the frame index


def _rle(labels: list[str | None]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    return out


def _unrle(pairs: list[list[Any]]) -> list[str | None]:
    return [label for label, count in pairs for _ in range(int(count))]


def read_town(layout: Layout, rel: str) -> str:
    """The town of a route run (its measurements index's, else its run.json `town`); ValueError when neither
    can say."""
    key = run_key(rel)
    head = read_run_head(layout.run_measurements(key))  # the run's measurements index, when it lists its frames
    if head is not None and head[1] == layout.frame_count(key):
        return head[0]
    path = layout.run_settings(key)
    try:
        # parse_float=str: the dense route's thousands of floats stay text (40% of the parse, the bulk of a
        # first build's time before frames are read); the document is checked as fully as before.
        return str(files.read_json(path, parse_float=str)["town"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: cannot read the run's town ({type(e).__name__}: {e})") from None


def label_run(layout: Layout, rel: str, town: str | None = None) -> dict[str, Any]:
    """Read one run's measurements: its town (`town`: known already), its weather class (of its first readable
    frame's `weather`: the route's, the same in every frame; "?" when no frame is readable) and the bucket of
    every frame (None: unreadable)."""
    key = run_key(rel)
    problems = []
    if town is None or town == "?":
        try:
            town = read_town(layout, rel)
        except ValueError as e:
            town = "?"
            problems.append(f"{e}; its frames are left out")
    folder = str(layout.frames_dir(key))
    names = layout.frame_names(key)  # without a Path object per frame (a third of the time per frame)
    # The run's measurements index, when it lists exactly its frames: one file read instead of one per frame.
    indexed = indexed_measurements(layout.run_measurements(key), names) if town != "?" else None
    if indexed is not None:
        weather = weather_class(indexed[0].weather) if indexed else "?"
        return {"town": town, "weather": weather, "labels": [classify(m) for m in indexed], "problems": problems}
    labels: list[str | None] = [None] * len(names)
    weather = "?"
    for name in names:
        try:
            index = int(name[: -len(FRAME_SUFFIX)])
        except ValueError:
            continue
        if index >= len(labels):  # numbering with a gap: the missing frames stay None
            labels.extend([None] * (index + 1 - len(labels)))
        if town == "?":
            continue
        path = os.path.join(folder, name)
        try:
            measurements = read_measurements(path)
            labels[index] = classify(measurements)
        except (OSError, FrameError, TypeError, ValueError) as e:
            problems.append(f"{path}: unreadable frame, left out ({type(e).__name__}: {e})")
            continue
        if weather == "?":
            weather = weather_class(measurements.weather)
    return {"town": town, "weather": weather, "labels": labels, "problems": problems}


def _label_chunk(layout: Layout, chunk: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
    return [label_run(layout, rel, town) for rel, town in chunk]


def _town_chunk(layout: Layout, rels: list[str]) -> list[str]:
    return [_town_or_unknown(layout, rel) for rel in rels]


#: Runs per task of the worker processes, and the fewest runs worth starting them for.
CHUNK = 32
PARALLEL_FROM = 64


def _workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def in_parallel(fn: Any, layout: Layout, items: list[Any]) -> Iterator[list[Any]]:
    """fn(layout, chunk) for chunks of `items` in order, in worker processes (reading measurements is CPU
    work: threads would share one core) when there are enough items and cores; else here."""
    chunks = [items[i: i + CHUNK] for i in range(0, len(items), CHUNK)]
    workers = _workers()
    if workers == 1 or len(items) < PARALLEL_FROM:
        yield from (fn(layout, chunk) for chunk in chunks)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(fn, [layout] * len(chunks), chunks)


def read_index(layout: Layout, this_id: str) -> dict[str, Any]:
    """The runs of ROOT/buckets/index.json that can be reused: same dataset, same rules. Else empty."""
    path = layout.bucket_index
    try:
        data = files.read_json(path)
        if data["format"] == INDEX_FORMAT and data["dataset_id"] == this_id and data["rules"] == RULES:
            return dict(data["runs"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {}


# ----------------------------------------------------------------------------- collections


def eligible(name: str, labels: list[str | None], horizon: int | None, skip_first: int) -> list[int]:
    """Frame indices of one run that belong to collection `name` (posttrain needs a `horizon`)."""
    if name == "pretrain":
        return [i for i, label in enumerate(labels) if label is not None]
    assert horizon is not None, "posttrain needs a horizon"
    # posttrain: the frame and its `horizon` future frames readable; not the first `skip_first`.
    readable = [label is not None for label in labels]
    return [i for i in range(skip_first, len(labels) - horizon) if all(readable[i: i + horizon + 1])]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to build for one collection, decided before anything is written."""

    name: str
    path: Path
    split: SplitSettings  # the split rule as asked (stratified, auto, town:..., ...), its seed and fractions
    weights: dict[str, list[float]]
    horizon: int | None  # posttrain: future frames a frame needs; pretrain: None (it takes every frame)
    origin: str  # where the split rule, weights and horizon come from, for messages
    up_to_date: bool

    @property
    def skip_first(self) -> int:
        return SKIP_FIRST if self.name == "posttrain" else 0

    @property
    def settings(self) -> dict[str, Any]:
        """What the file records under `settings` (and what makes an existing file up to date)."""
        out: dict[str, Any] = self.split.to_settings()
        if self.horizon is not None:
            out["horizon"] = self.horizon
        return {**out, "skip_first": self.skip_first, "rules": RULES, "weather": WEATHER_CLASSES,
                "weights": self.weights}


def load_weights(path: str) -> dict[str, list[float]]:
    """--weights FILE.json: {bucket: weight or [weight per epoch, ...]}; the last entry holds on."""
    if not path:
        raise ToolError("--weights needs a JSON file of {bucket: weight or [per-epoch weights]}")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ToolError(f"--weights {path}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict):
        raise ToolError(f"--weights {path}: expected a JSON object {{bucket: weight or [per-epoch weights]}}")
    out = {}
    for name, value in data.items():
        if name not in BUCKETS:
            raise ToolError(f"--weights {path}: unknown bucket {name!r}; buckets: {', '.join(BUCKETS)}")
        values = value if isinstance(value, list) else [value]
        good = values and all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 and math.isfinite(v)
                              for v in values)
        if not good:
            raise ToolError(f"--weights {path}: bucket {name!r}: {value!r} is not a weight >= 0 or a non-empty "
                            "list of them")
        out[name] = [float(v) for v in values]
    return out


def split_defaults(rule: str) -> SplitSettings:
    """The seed and fractions a rule takes when neither flags nor an existing file give them: stratified val
    and test shares; no test split for the other rules."""
    if rule == STRATIFIED:
        return SplitSettings(rule)
    return SplitSettings(rule, val_fraction=None, test_fraction=0.0)


def kept_split(existing: Collection) -> SplitSettings:
    """The split settings an existing file was built with. A format-1 file had no test split: its rule `auto`
    (the default then) becomes today's default, stratified; a rule it was given (town:NAME, ...) is kept."""
    settings = existing.settings
    rule = str(settings.get("holdout", STRATIFIED))
    if existing.format == 1 or "split_seed" not in settings:
        return split_defaults(STRATIFIED if rule == "auto" else rule)
    try:
        val = settings.get("val_fraction")
        return SplitSettings(rule, int(settings["split_seed"]), None if val is None else float(val),
                             float(settings.get("test_fraction") or 0.0))
    except (TypeError, ValueError):
        return split_defaults(rule)


def make_plans(layout: Layout, names: list[str], state: dict[str, Any], holdout: str | None,
               weights: dict[str, list[float]] | None, horizon: int | None, force: bool,
               split_flags: dict[str, Any] | None = None) -> list[Plan]:
    """Per collection: its settings (flags, else the existing file's, else defaults), refusing a file of
    another dataset or an unreadable one unless --force, bad fractions, and whether the file is already up
    to date. `split_flags`: {"seed", "val_fraction", "test_fraction"} given on the command line."""
    given = {k: v for k, v in (split_flags or {}).items() if v is not None}
    plans = []
    for name in names:
        path = layout.collection_file(name)
        existing = None
        if path.exists() and not force:
            existing, _ = read_collection(path)  # ToolError for an unreadable file: the message says --force
            check_same_dataset(path, layout, existing.built_from, state["dataset_id"])
        split, schedule, steps = split_defaults(STRATIFIED), dict(DEFAULT_WEIGHTS[name]), DEFAULT_HORIZON
        rule_from = weights_from = steps_from = "default"
        if existing is not None:
            split = kept_split(existing)
            kept = existing.settings.get("weights") or {}
            schedule.update({b: [float(x) for x in w] for b, w in kept.items() if b in BUCKETS})
            kept_horizon = existing.settings.get("horizon")
            if isinstance(kept_horizon, int) and not isinstance(kept_horizon, bool) and kept_horizon >= 1:
                steps, steps_from = kept_horizon, f"kept from {path.name}"
            rule_from = weights_from = f"kept from {path.name}"
            if existing.format == 1 and existing.settings.get("holdout") == "auto":
                rule_from = f"default (format-1 {path.name} had auto, the default before the test split)"
        if holdout is not None:
            split, rule_from = split_defaults(holdout), "from --holdout"
        if given:
            split = dataclasses.replace(split, **given)
            rule_from += ", " + ", ".join("--split-seed" if k == "seed" else f"--{k.replace('_', '-')}" for k in given)
        if weights is not None:
            schedule, weights_from = {**DEFAULT_WEIGHTS[name], **weights}, "from --weights"
        if horizon is not None:
            steps, steps_from = horizon, "from --horizon"
        _splits.check_fractions(split, f"{name}: split rule {rule_from}")
        origin = f"split rule {rule_from}, weights {weights_from}"
        if name == "posttrain":
            origin += f", horizon {steps} {steps_from}"
        plan = Plan(name, path, split, schedule, steps if name == "posttrain" else None, origin, up_to_date=False)
        if (existing is not None and describe_change(existing.built_from, state) is None
                and outdated(existing) is None and existing.settings == json.loads(json.dumps(plan.settings))):
            plan = dataclasses.replace(plan, up_to_date=True)
        plans.append(plan)
    return plans


def _check_weights(plan: Plan, train_buckets: Counter) -> None:
    """Every epoch must have some training bucket with frames and a weight above 0."""
    longest = max(len(w) for w in plan.weights.values())
    for epoch in range(longest):
        mass = sum(plan.weights[b][min(epoch, len(plan.weights[b]) - 1)] * n for b, n in train_buckets.items())
        if mass <= 0:
            raise ToolError(f"{plan.name}: every bucket with training frames has weight 0 in epoch {epoch} "
                            f"({plan.origin}); give some a weight above 0 with --weights FILE.json")


def _no_training(plan: Plan, assignment: Assignment, runs: dict[str, dict[str, Any]]) -> ToolError:
    towns = sorted({r["town"] for r in runs.values()})
    scenarios = sorted({run_key(rel).scenario for rel in runs})
    held = sum(1 for s in assignment.split.values() if s != "train")
    return ToolError(f"--holdout {plan.split.rule}: leaves no training frames in {plan.name} ({assignment.rule} "
                     f"holds out {held} of {len(runs)} finished route runs; {plan.origin}); choose another: "
                     f"stratified; towns {', '.join(towns)}; scenario types {', '.join(scenarios)}; or every:N")


def _precheck(plan: Plan, meta: dict[str, dict[str, Any]]) -> None:
    """Refuse a split rule, fractions or weights that cannot work, from the runs' towns and frame counts alone
    (all frames taken readable; weathers are not known yet, so a stratified draw is checked for its counts
    only)."""
    assignment = assign(plan.split, meta)  # ToolError: a town or type without runs, no training route
    if not plan.split.fractions:  # no draw: the training runs are known
        train = sum(len(eligible(plan.name, [""] * r["frames"], plan.horizon, plan.skip_first))
                    for rel, r in meta.items() if assignment.split[rel] == "train")
        if not train:
            raise _no_training(plan, assignment, meta)
    _check_weights(plan, Counter({b: 1 for b in BUCKETS}))


@dataclasses.dataclass(frozen=True)
class Built:
    """One collection assembled, before it is written."""

    plan: Plan
    collection: Collection
    counts: dict[str, dict[str, int]]  # frames per split and bucket
    assignment: Assignment
    balance: dict[str, Any]  # splits.balance


def assemble(plan: Plan, runs: dict[str, dict[str, Any]], state: dict[str, Any]) -> Built:
    """`plan`'s collection from the labelled runs {rel: {"town", "weather", "frames", "labels"}}. ToolError when
    its split leaves no training frame or its weights leave no training bucket."""
    assignment = assign(plan.split, runs)
    frames: dict[tuple[str, str], list[tuple[str, int]]] = {(b, s): [] for s in SPLITS for b in BUCKETS}
    per_run = {}
    for rel, run in runs.items():
        split = assignment.split[rel]
        labels = run["labels"]
        chosen = eligible(plan.name, labels, plan.horizon, plan.skip_first)
        per_run[rel] = len(chosen)
        for i in chosen:
            frames[(labels[i], split)].append((rel, i))
    counts = {s: {b: len(frames[(b, s)]) for b in BUCKETS} for s in SPLITS}
    if not sum(counts["train"].values()):
        raise _no_training(plan, assignment, runs)
    _check_weights(plan, Counter({b: n for b, n in counts["train"].items() if n}))
    buckets = [Bucket(b, s, frames[(b, s)], plan.weights[b]) for s in SPLITS for b in BUCKETS]
    collection = Collection(plan.name, buckets, state, assignment.rule, plan.settings)
    return Built(plan, collection, counts, assignment, balance(assignment, runs, per_run))


def collection_text(built: Built, unreadable: list[str]) -> str:
    """The bucket file of a built collection (written by `build`, after every text is made)."""
    collection, assignment, split = built.collection, built.assignment, built.plan.split
    data = {
        "format": BUCKETS_FORMAT,
        "collection": collection.name,
        "created": now_iso(),
        "created_by": user_at_host(),
        "tool": tool_version(),
        "built_from": collection.built_from,
        "holdout": collection.holdout,
        "holdout_reason": assignment.why,
        "settings": collection.settings,
        "splits": {"rule": assignment.rule, "seed": split.seed, "fractions": split.fractions,
                   "routes": {s: len(routes_of({r: 0 for r, x in assignment.split.items() if x == s})) for s in SPLITS},
                   "notes": list(assignment.notes), "balance": built.balance},
        "counts": built.counts,
        "unreadable": unreadable,
        "buckets": [bucket_to_json(b) for b in collection.buckets],
    }
    return json.dumps(data, separators=(",", ":")) + "\n"


# ----------------------------------------------------------------------------- the command


def _collections(name: str) -> list[str]:
    if name == "all":
        return list(COLLECTIONS)
    if name not in COLLECTIONS:
        raise ToolError(f"--collection {name}: unknown collection; choose {', '.join(COLLECTIONS)} or all")
    return [name]


def _no_finished_runs(layout: Layout) -> ToolError:
    states = Counter(run_states(layout).values())
    if not states:
        return ToolError(f"no route runs in {layout.root}: collect into it first (bin/collect ROUTES_DIR --root "
                         f"{layout.root})")
    failed = sum(n for s, n in states.items() if is_failed(s))
    running = f", {states[RunState.RUNNING]} still running" if states[RunState.RUNNING] else ""
    return ToolError(f"no finished route runs in {layout.root}: {failed} failed{running}; see bin/progress "
                     f"{layout.root}")


@contextlib.contextmanager
def build_lock(layout: Layout) -> Iterator[bool]:
    """One builder at a time per root (DDP ranks may all find a stale file at once): the others wait,
    then find the file up to date. Where the file system has no locks, go on without. Yields whether it
    waited for another builder."""
    layout.buckets.mkdir(parents=True, exist_ok=True)
    waited = False
    with open(layout.bucket_lock, "a") as f:
        try:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"buckets: waiting for another builder in {layout.buckets}", file=sys.stderr)
                waited = True
                fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:  # e.g. ENOLCK on an NFS mount without a lock daemon
            print(f"buckets: no file lock in {layout.buckets} ({e.strerror}); going on without", file=sys.stderr)
        yield waited


def build(root: Any = None, collection: Any = "all", holdout: Any = None, weights: Any = None,
          horizon: Any = None, force: Any = False, split_seed: Any = None, val_fraction: Any = None,
          test_fraction: Any = None) -> None:
    """See `python -m tools.buckets build --help`."""
    force = cli.switch(force, "force")
    names = _collections(cli.text(collection, "collection"))
    rule = None if holdout is None else _splits.parse_rule(cli.text(holdout, "holdout"))
    overrides = None if weights is None else load_weights(cli.text(weights, "weights"))
    steps = None if horizon is None else cli.integer(horizon, "horizon", 1, 100)
    split_flags = {
        "seed": None if split_seed is None else cli.integer(split_seed, "split-seed", 0, 2**31 - 1),
        "val_fraction": None if val_fraction is None else cli.number(val_fraction, "val-fraction", 0.0, 1.0),
        "test_fraction": None if test_fraction is None else cli.number(test_fraction, "test-fraction", 0.0, 1.0),
    }
    layout = cli.open_root(root)
    state = dataset_state(layout)  # ToolError for a root without a manifest
    if not state["runs"]:
        raise _no_finished_runs(layout)

    # Everything that can be refused is refused before anything is written or frames are read.
    plans = make_plans(layout, names, state, rule, overrides, steps, force, split_flags)
    towns: dict[str, str] = {}
    if any(not p.up_to_date for p in plans):
        towns = _towns(layout, state, read_index(layout, state["dataset_id"]))
        meta = {rel: {"town": towns[rel], "frames": r["frames"]} for rel, r in state["runs"].items()}
        for plan in plans:
            if not plan.up_to_date:
                _precheck(plan, meta)
    todo = [p for p in plans if not p.up_to_date]
    for plan in plans:
        if plan.up_to_date:
            print(f"buckets: {plan.path} is up to date (built from the same {len(state['runs'])} finished route "
                  f"runs, same settings); --force rebuilds it", file=sys.stderr)
    if not todo:
        return
    folder = layout.buckets if layout.buckets.exists() else layout.root
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ToolError(f"{folder} is not writable: the bucket files of {layout.root} cannot be (re)built by you; "
                        f"ask its owner to run bin/build-buckets --root {layout.root}")

    start = time.monotonic()
    with build_lock(layout) as waited:
        if waited:
            # Another builder may have finished while we waited: decide again on what is on disk now.
            state = dataset_state(layout)
            plans = [p for p in make_plans(layout, [p.name for p in todo], state, rule, overrides, steps, force,
                                           split_flags) if not p.up_to_date]
            if not plans:
                print(f"buckets: {', '.join(p.path.name for p in todo)} built meanwhile by another builder; up to "
                      "date", file=sys.stderr)
                return
        else:
            plans = todo
        index = {} if force else read_index(layout, state["dataset_id"])  # --force reads every frame again
        runs, reused, unreadable = _label_runs(layout, state, index, towns)
        built = [assemble(plan, runs, state) for plan in plans]
        # Every file is made in memory first: a full disk says exactly how much they need.
        files = [(layout.bucket_index, json.dumps({
            "format": INDEX_FORMAT, "dataset_id": state["dataset_id"], "rules": RULES,
            "runs": {rel: {**state["runs"][rel], "town": r["town"], "weather": r["weather"],
                           "labels": _rle(r["labels"])} for rel, r in runs.items()},
        }, separators=(",", ":")) + "\n")] + [(one.plan.path, collection_text(one, unreadable)) for one in built]
        need = sum(len(text.encode()) for _, text in files)
        with space_for(layout.buckets, f"the {len(files)} bucket files",
                       lambda: (need, "their exact size, made in memory before writing")):
            for path, text in files:
                atomic.write_text(path, text)
    _summary(built, state, reused, unreadable, time.monotonic() - start)


def _towns(layout: Layout, state: dict[str, Any], index: dict[str, Any]) -> dict[str, str]:
    """The town of every finished run ("?" when its run.json cannot say): from the index when the run is
    unchanged since, else from its run.json."""
    towns, todo = {}, []
    for rel, r in state["runs"].items():
        if _unchanged(index.get(rel), r):
            towns[rel] = index[rel]["town"]
        else:
            todo.append(rel)
    for rels, found in zip([todo[i: i + CHUNK] for i in range(0, len(todo), CHUNK)],
                           in_parallel(_town_chunk, layout, todo), strict=True):
        towns.update(zip(rels, found, strict=True))
    return towns


def _unchanged(indexed: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """An index entry still describes a run: same result file, same frame count."""
    return indexed is not None and all(indexed.get(k) == v for k, v in now.items())


def _town_or_unknown(layout: Layout, rel: str) -> str:
    try:
        return read_town(layout, rel)
    except ValueError:
        return "?"


def _label_runs(layout: Layout, state: dict[str, Any], index: dict[str, Any], towns: dict[str, str]
                ) -> tuple[dict[str, dict[str, Any]], int, list[str]]:
    """{rel: {"town", "weather", "frames", "labels"}} for every finished run: from the index when the run is
    unchanged since, else read from its frames (in worker processes; `towns`: those read already)."""
    runs, todo = {}, []
    for rel, r in state["runs"].items():
        old = index.get(rel)
        if _unchanged(old, r):
            runs[rel] = {"town": old["town"], "weather": old["weather"], "frames": r["frames"],
                         "labels": _unrle(old["labels"])}
        else:
            todo.append((rel, towns.get(rel)))
    reused = len(runs)
    bar = tqdm(total=len(state["runs"]), initial=reused, unit="run", desc="buckets", file=sys.stderr,
               dynamic_ncols=True)
    chunks = [todo[i: i + CHUNK] for i in range(0, len(todo), CHUNK)]
    for chunk, results in zip(chunks, in_parallel(_label_chunk, layout, todo), strict=True):
        for (rel, _), result in zip(chunk, results, strict=True):
            for problem in result["problems"]:
                tqdm.write(f"buckets: {problem}", file=sys.stderr)
            runs[rel] = {"town": result["town"], "weather": result["weather"], "frames": state["runs"][rel]["frames"],
                         "labels": result["labels"]}
        bar.update(len(chunk))
    bar.close()
    unreadable = sorted(layout.frame_path(run_key(rel), i).relative_to(layout.root).as_posix()
                        for rel, r in runs.items() for i, label in enumerate(r["labels"]) if label is None)
    return dict(sorted(runs.items())), reused, unreadable


def _summary(built: list[Built], state: dict[str, Any], reused: int, unreadable: list[str], seconds: float) -> None:
    n_runs = len(state["runs"])
    lines = [f"buckets: indexed {n_runs} finished route runs ({n_runs - reused} read, {reused} unchanged since the "
             f"last build), {state['frames']} frames, {len(unreadable)} unreadable left out, in {seconds:.1f} s"]
    for one in built:
        plan, counts = one.plan, one.counts
        total = {s: sum(counts[s].values()) for s in SPLITS}
        lines.append(f"buckets: {plan.name}: {sum(total.values())} frames, "
                     + ", ".join(f"{s} {total[s]}" for s in SPLITS)
                     + f"; split {one.assignment.rule} ({one.assignment.why}; {plan.origin}) -> {plan.path}")
        lines.append("  " + "  ".join(f"{b} {'/'.join(str(counts[s][b]) for s in SPLITS)} x{_schedule(plan.weights[b])}"
                                      for b in BUCKETS) + "   (train/val/test frames x weight)")
        lines += balance_lines(one.balance)
        lines += [f"buckets: {plan.name}: {note}" for note in one.assignment.notes]
        if not total["val"] and not any("val split" in note for note in one.assignment.notes):
            lines.append(f"buckets: {plan.name}: the val split is empty")
    print("\n".join(lines), file=sys.stderr)


def _schedule(weights: list[float]) -> str:
    return ",".join(f"{w:g}" for w in weights)


# ----------------------------------------------------------------------------- show


def show(root: Any = None, collection: Any = "all") -> None:
    """See `python -m tools.buckets show --help`."""
    names = _collections(cli.text(collection, "collection"))
    layout = cli.open_root(root)
    state = dataset_state(layout)
    for name in names:
        path = layout.collection_file(name)
        if not path.exists():
            print(f"{path}: not built; bin/build-buckets --root {layout.root} --collection {name}")
            continue
        coll, data = read_collection(path)
        if coll.built_from.get("dataset_id") != state["dataset_id"]:
            status = "from another dataset (bin/build-buckets --force replaces it)"
        else:
            change = describe_change(coll.built_from, state)
            status = "fresh" if change is None else f"stale: {change} since it was built"
            if change is None and outdated(coll):
                status = f"outdated: {outdated(coll).removeprefix('is ')}; bin/build-buckets rebuilds it"
        print(f"{path}: {status}; built {data.get('created', '?')}; split {coll.holdout} "
              f"(rule {coll.settings.get('holdout', '?')}; {data.get('holdout_reason', '')})")
        rows = [["bucket", "split", "frames", "weights per epoch"]]
        for b in coll.buckets:
            rows.append([b.name, b.split, str(len(b.frames)), _schedule(b.weights)])
        for split in SPLITS:
            rows.append(["total", split, str(sum(len(b.frames) for b in coll.buckets if b.split == split)), ""])
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].rjust(widths[2]), r[3]]
            print(("  " + "  ".join(cells)).rstrip())
        splits = data.get("splits")
        if isinstance(splits, dict) and isinstance(splits.get("balance"), dict):
            print("split balance (frames of this collection; shares of each split's frames):")
            print("\n".join(balance_lines(splits["balance"])))
            for note in splits.get("notes") or []:
                print(f"note: {note}")
        else:
            print(f"no balance table (bucket file format {coll.format}); bin/build-buckets --root {layout.root} "
                  f"rebuilds it")
