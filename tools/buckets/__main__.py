"""python -m tools.buckets COMMAND: index the frames of finished route runs into buckets, per collection.

Commands:
  build   write ROOT/buckets/<collection>.json (pretrain, posttrain): behaviour buckets, train / val / test
          splits stratified by town, scenario type and weather, a balance table, a weight schedule per bucket
  show    a table per collection: bucket, split, frames, weights per epoch; the split balance; fresh or stale

Training loads a collection's train and val splits (never test) with tools.dataset.buckets.load_collection,
which rebuilds a missing or stale one by itself. docs/buckets.md describes the buckets and the file format.
`python -m tools.buckets COMMAND --help` explains each command.
"""

from __future__ import annotations

from tools.core import cli


def build(root: str | None = None, collection: str = "all", holdout: str | None = None, weights: str | None = None,
          horizon: int | None = None, force: bool = False, split_seed: int | None = None,
          val_fraction: float | None = None, test_fraction: float | None = None) -> None:
    """Index the frames of every finished route run into buckets and write the collections' bucket files.

    Each frame goes to one scenario or behaviour bucket (the rules of tools/dataset/bucket_rules.py,
    docs/buckets.md). pretrain holds every readable frame; posttrain the frames with a full future horizon
    (not the first 4 nor the last --horizon of a run). Both have train, val and test splits of whole routes
    (a route's repetitions together) and print a balance table (routes, runs, frames, the share of each
    town, scenario type and weather per split), which the file keeps. Training reads train and val, never
    test. Only frames of new or redone route runs are read; an up-to-date file is left alone. Without
    --holdout, --split-seed, the fractions, --weights and --horizon, a rebuild keeps those the existing file
    was built with. Training (tools.dataset.buckets.load_collection) rebuilds posttrain with the --horizon
    of the cache it reads when the file's differs, and rebuilds a file of bucket format 1.

    Split rules (--holdout):
      stratified      (default) val and test take --val-fraction and --test-fraction of the routes (0.1
                      each; at least one route each from 3 routes on), in proportion from every stratum
                      (town, scenario type, weather); the same seed gives the same splits
      auto            val: a town when there are 2 or more (the alphabetically last), else the scenario
                      type with the fewest frames, else every 5th route
      town:NAME       val: every route run in that town
      scenario:TYPE   val: every route run of that scenario type
      every:N         val: every N-th route by sorted name
    The rules other than stratified make no test split unless --test-fraction is given: then it is drawn,
    stratified, from the routes the rule leaves for training.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        collection: pretrain, posttrain or all.
        holdout: the split rule (above); default stratified, or the rule of the existing file.
        weights: a JSON file {bucket: weight or [weight of epoch 0, epoch 1, ...]} (the last one holds on)
            replacing the default weights of the buckets it names.
        horizon: posttrain only: the future frames (waypoints) a frame needs, the `horizon` of the cache
            training reads; default the existing file's, else CacheSettings().horizon (8).
        force: rebuild even an up-to-date file, and replace one built from another dataset or unreadable
            (its split settings and weights are not kept).
        split_seed: seed of the stratified draw (default 0, or the existing file's).
        val_fraction: stratified only: share of the routes in val, above 0 and below 1 (default 0.1).
        test_fraction: share of the routes in test, above 0 and below 1 (default 0.1 with stratified, no
            test split with the other rules); val and test together below 1.
    """
    from tools.buckets.build import build as run

    run(root=root, collection=collection, holdout=holdout, weights=weights, horizon=horizon, force=force,
        split_seed=split_seed, val_fraction=val_fraction, test_fraction=test_fraction)


def show(root: str | None = None, collection: str = "all") -> None:
    """Print a table per collection: bucket, split, frames, weight per epoch; the split balance table (routes,
    runs, frames, the share of each town, scenario type and weather per split); fresh, stale or outdated.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        collection: pretrain, posttrain or all.
    """
    from tools.buckets.build import show as run

    run(root=root, collection=collection)


COMMANDS = {"build": build, "show": show}

if __name__ == "__main__":
    cli.main("buckets", COMMANDS, name="python -m tools.buckets")
