"""Where a dataset root stands (`progress`), and removal of its failed route runs (`clean-failed`).

Both ask `tools.dataset.results.run_state`, the one definition of a failed route run (in bulk: `run_states`,
the same states from one listing of results/).
"""

from __future__ import annotations

import sys

from tools.collect.inspect.tables import count_states, crash_lines, format_table, known_runs
from tools.core import cli
from tools.core.errors import ToolError
from tools.dataset.claims import attempts, discard_run, exclusive, finish_deletes, trash_text
from tools.dataset.layout import SLURM, Layout, RunKey, open_root
from tools.dataset.manifest import read_manifest
from tools.dataset.results import FAILED_STATES, RunState, held_run_state, is_failed, read_status, run_states


def _open_root(root: str | None) -> tuple[Layout, list[RunKey]]:
    """The root's layout and every run it knows: planned in the manifest or present on disk."""
    layout = open_root(root)
    return layout, known_runs(layout, read_manifest(layout))


def print_progress(root: str | None) -> None:
    """Print a table per scenario type: total, finished, failed, running, pending, failure rate; then the routes
    that crash the same way on every attempt, and how many crashed and then finished (crash_lines)."""
    layout, keys = _open_root(root)
    states = run_states(layout, keys)
    table = count_states(layout, keys, states)
    print(f"dataset root {layout.root}")
    print(format_table(table))
    failed = sum(states[s] for states in table.values() for s in FAILED_STATES)
    if failed:
        print(f"failed counts crashed runs too; bin/clean-failed {layout.root} lists them")
    for line in crash_lines(layout, states):
        print(line)
    queue = _slurm_queue(layout)
    if queue is not None:
        waiting = sum(1 for key in queue.live if states.get(key) is not RunState.RUNNING)
        print(f"SLURM: {queue.queued_tasks} array tasks queued, {queue.running_tasks} running; {waiting} route runs "
              f"wait in the queue (pending or failed, to be retried) (ROOT/slurm/waves)")
    damaged = [key for key, state in states.items() if state is RunState.DAMAGED]
    if damaged:
        shown = ", ".join(str(k) for k in damaged[:5]) + (", ..." if len(damaged) > 5 else "")
        print(f"{len(damaged)} route runs have a damaged result file (counted in none of the columns): {shown}; "
              f"bin/clean-failed {layout.root} names them")
    trash = layout.leftover_trash()
    if trash:
        print(f"{trash_text(layout, trash)} (counted in none of the columns); bin/clean-failed {layout.root} --yes, "
              "or the next bin/collect, finishes deleting them")


def _slurm_queue(layout: Layout, strict: bool = False):
    """The SLURM tasks of a root collected with --slurm (one scheduler query), else None. `strict`: a root
    with SLURM waves whose queue cannot be read is an error (clean-failed must not guess)."""
    if not (layout.root / SLURM).exists():  # tools.collect.runner.waves.SLURM_DIR: never collected on SLURM
        return None  # (known without importing the SLURM module: 0.37 s, most of progress's start-up)
    from tools.collect.runner.slurm import live_runs  # not a cycle: deferred for progress's speed
    from tools.collect.runner.waves import load_waves

    try:
        queue = live_runs(layout)
    except ToolError as e:
        if strict:
            raise ToolError(f"{layout.root} was collected on SLURM but its queue cannot be read ({e}); run "
                            "clean-failed where squeue works, so that no queued run is deleted") from None
        print(f"collect: the SLURM queue could not be read ({e}); showing what is on disk", file=sys.stderr)
        return None
    if queue is None and strict and load_waves(layout):
        raise ToolError(f"{layout.root} was collected on SLURM, and squeue is not on PATH here; run clean-failed "
                        "on the cluster's login node, so that no queued run is deleted")
    return queue


def _describe(layout: Layout, key: RunKey, state: RunState) -> str:
    status = read_status(layout.result_path(key)) if state is RunState.FAILED else "no result (crashed)"
    return f"{key}  {state.value}  attempts={attempts(layout, key)}  status={status}"


def _damaged_note(layout: Layout, damaged: list[RunKey]) -> None:
    for key in damaged:
        print(f"{key}  damaged  result file {layout.result_path(key)} is not a readable result: not deleted; "
              "look at it (its frames may be good), then delete the result file by hand to have the run redone")


def clean_failed_runs(root: str | None, yes: bool = False) -> None:
    """List failed and crashed route runs; with `yes`, delete their result, data and logs, and finish the deletes a
    killed clean-failed or collector left half done (claims.finish_deletes). Runs with a damaged result file are
    named and never deleted."""
    yes = cli.switch(yes, "yes")
    layout, keys = _open_root(root)
    states = run_states(layout, keys)
    queue = _slurm_queue(layout, strict=True)
    queued = queue.live if queue is not None else set()
    for key in sorted(k for k in queued if is_failed(states[k]) if k in states):
        print(f"{key}  {states[key].value}  queued for another attempt in a SLURM array task: left alone")
    failed = [(key, state) for key, state in states.items() if is_failed(state) and key not in queued]
    damaged = [key for key, state in states.items() if state is RunState.DAMAGED]
    _damaged_note(layout, damaged)
    if yes:  # a lock that is a FIFO or a link, a folder this user may not change: one line before anything is deleted
        layout.check_access((), delete=[key for key, _ in failed])
    # deletes a killed clean-failed (or collector) left half done: the user asked for them already
    trash = finish_deletes(layout) if yes else layout.leftover_trash()
    if trash:
        print(f"finished deleting {trash_text(layout, trash)}" if yes else
              f"{trash_text(layout, trash)}; --yes finishes deleting them")
    if not failed:
        print(f"no failed route runs under {layout.root}")
        return
    for key, state in failed:
        print(_describe(layout, key, state))
    if not yes:
        print(f"{len(failed)} failed route runs would be deleted (result, data folder and logs, so their "
              f"attempts start over). To delete them: bin/clean-failed {layout.root} --yes")
        return
    deleted = 0
    for key, _ in failed:
        # Under the run's lock, look again: a collector may have started or finished it meanwhile.
        with exclusive(layout, key) as mine:
            now = held_run_state(layout, key) if mine else RunState.RUNNING
            if not is_failed(now):
                print(f"{key}: now {now.value}, left alone", file=sys.stderr)
                continue
            discard_run(layout, key, logs=True)  # result first, then the data and log folders
        deleted += 1
    print(f"deleted {deleted} failed route runs; bin/collect with the same ROUTES_DIR and --root "
          f"{layout.root} collects them again")
