"""What `tools.buckets build` makes of each collection (pretrain, posttrain): its plan (`make_plans`: the split
rule, weights and horizon from the flags, else the existing file's, else the defaults, decided before anything is
written or read) and the collection assembled from the labelled runs (`assemble`: the frames each split and bucket
takes, tools/buckets/splits.py's splits) as the text of its bucket file (`collection_text`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from tools.buckets import splits as _splits
from tools.buckets.splits import STRATIFIED, Assignment, SplitSettings, assign, balance, routes_of
from tools.core import files
from tools.core.errors import ToolError
from tools.dataset.bucket_rules import BUCKETS, RULES
from tools.dataset.buckets import (
    BUCKETS_FORMAT,
    SPLITS,
    Bucket,
    Collection,
    bucket_to_json,
    check_same_dataset,
    content_sha256,
    describe_change,
    outdated,
    read_collection,
    run_key,
)
from tools.dataset.layout import Layout
from tools.dataset.manifest import now_iso, tool_version, user_at_host
from tools.dataset.samples import CacheSettings
from tools.dataset.weather import WEATHER_CLASSES

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
        data = files.read_json(path)
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


def precheck(plan: Plan, meta: dict[str, dict[str, Any]]) -> None:
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
    data["sha256"] = content_sha256(data)
    return json.dumps(data, separators=(",", ":")) + "\n"
