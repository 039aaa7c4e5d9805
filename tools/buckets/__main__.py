"""python -m tools.buckets COMMAND: index the frames of finished route runs into buckets, per collection.

Commands:
  build   write ROOT/buckets/<collection>.json (pretrain, posttrain): behaviour buckets, a held-out val split,
          a weight schedule per bucket
  show    a table per collection: bucket, split, frames, weights per epoch; fresh or stale

Training loads a collection with tools.dataset.buckets.load_collection, which rebuilds a missing or
stale one by itself. docs/buckets.md describes the buckets and the file format.
`python -m tools.buckets COMMAND --help` explains each command.
"""

from __future__ import annotations

from tools.dataset import cli


def build(root: str | None = None, collection: str = "all", holdout: str | None = None, weights: str | None = None,
          horizon: int | None = None, force: bool = False) -> None:
    """Index the frames of every finished route run into buckets and write the collections' bucket files.

    Each frame goes to one behaviour bucket (stop, start, hazard, turn, junction, follow: the rules of
    tools/buckets/rules.py, docs/buckets.md). pretrain holds every readable frame; posttrain the frames
    with a full future horizon (not the first 4 nor the last --horizon of a run). Both have a train and a
    held-out val split. Only frames of new or redone route runs are read; an up-to-date file is left
    alone. Without --holdout, --weights and --horizon, a rebuild keeps those the existing file was built
    with. Training (tools.dataset.buckets.load_collection) rebuilds posttrain with the --horizon of the
    cache it reads when the file's differs.

    Holdout rules (the val split):
      auto            a town when there are 2 or more (the alphabetically last), else the scenario type
                      with the fewest frames, else every 5th route run
      town:NAME       every route run in that town
      scenario:TYPE   every route run of that scenario type
      every:N         every N-th route run by sorted name

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        collection: pretrain, posttrain or all.
        holdout: the holdout rule of the val split (above); default auto, or the rule of the existing file.
        weights: a JSON file {bucket: weight or [weight of epoch 0, epoch 1, ...]} (the last one holds on)
            replacing the default weights of the buckets it names.
        horizon: posttrain only: the future frames (waypoints) a frame needs, the `horizon` of the cache
            training reads; default the existing file's, else CacheSettings().horizon (8).
        force: rebuild even an up-to-date file, and replace one built from another dataset or unreadable
            (its holdout rule and weights are not kept).
    """
    from tools.buckets.build import build as run

    run(root=root, collection=collection, holdout=holdout, weights=weights, horizon=horizon, force=force)


def show(root: str | None = None, collection: str = "all") -> None:
    """Print a table per collection: bucket, split, frames, weight per epoch; and fresh or stale.

    Args:
        root: dataset root (default: $DATA_ROOT, else ./data).
        collection: pretrain, posttrain or all.
    """
    from tools.buckets.build import show as run

    run(root=root, collection=collection)


COMMANDS = {"build": build, "show": show}

if __name__ == "__main__":
    cli.main("buckets", COMMANDS, name="python -m tools.buckets")
