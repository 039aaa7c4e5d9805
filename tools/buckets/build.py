"""Build bucket files: put every frame of every finished route run in one bucket, scenario or behaviour (the
rules of tools/dataset/bucket_rules.py), then write the collections (pretrain, posttrain) with train, val and test
splits (tools/buckets/splits.py), a balance table and a weight schedule per bucket.

    ROOT/buckets/index.json        bucket of every frame and weather, per run (reused for runs unchanged since)
    ROOT/buckets/<collection>.json the collections (tools.dataset.buckets reads them; docs/buckets.md)

The frame index makes a rebuild after new routes cheap: only frames of new or redone runs are read
(tools/buckets/index.py); what each collection takes and its file's text are tools/buckets/plans.py. This module
is the command: `build` (refuse early, one builder at a time, write every file, the summary) and `show`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from tools.buckets import splits as _splits
from tools.buckets.index import index_text, label_runs, read_index, run_towns
from tools.buckets.plans import Built, assemble, collection_text, load_weights, make_plans, precheck
from tools.buckets.splits import balance_lines
from tools.core import atomic, cli, files
from tools.core.errors import ToolError, space_for
from tools.dataset.bucket_rules import BUCKETS
from tools.dataset.buckets import COLLECTIONS, SPLITS, dataset_state, describe_change, outdated, read_collection
from tools.dataset.layout import Layout, open_root
from tools.dataset.results import RunState, is_failed, run_states

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
    with open(files.open_for_writing(layout.bucket_lock, os.O_WRONLY | os.O_CREAT), "a") as f:  # not via a link
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
    layout = open_root(root)
    state = dataset_state(layout)  # ToolError for a root without a manifest
    if not state["runs"]:
        raise _no_finished_runs(layout)

    # Everything that can be refused is refused before anything is written or frames are read.
    plans = make_plans(layout, names, state, rule, overrides, steps, force, split_flags)
    towns: dict[str, str] = {}
    if any(not p.up_to_date for p in plans):
        towns = run_towns(layout, state, read_index(layout, state["dataset_id"]))
        meta = {rel: {"town": towns[rel], "frames": r["frames"]} for rel, r in state["runs"].items()}
        for plan in plans:
            if not plan.up_to_date:
                precheck(plan, meta)
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
        runs, reused, unreadable = label_runs(layout, state, index, towns)
        built = [assemble(plan, runs, state) for plan in plans]
        # Every file is made in memory first: a full disk says exactly how much they need.
        files = [(layout.bucket_index, index_text(state, runs))] + \
            [(one.plan.path, collection_text(one, unreadable)) for one in built]
        need = sum(len(text.encode()) for _, text in files)
        with space_for(layout.buckets, f"the {len(files)} bucket files",
                       lambda: (need, "their exact size, made in memory before writing")):
            for path, text in files:
                atomic.write_text(path, text)
    _summary(built, state, reused, unreadable, time.monotonic() - start)


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
    layout = open_root(root)
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
