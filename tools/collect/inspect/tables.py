"""The route runs a root knows and the one table layout of progress, dataset-info and validate: counts of route
runs per scenario type by state (tools.dataset.results.run_state, the one definition of a failed run)."""

from __future__ import annotations

from collections import Counter

from tools.core.errors import ToolError
from tools.dataset.attempts import crash_history
from tools.dataset.layout import Layout, RunKey
from tools.dataset.manifest import planned_runs
from tools.dataset.results import FAILED_STATES, RunState, run_state

COLUMNS = ("total", "finished", "failed", "running", "pending", "failure rate")
#: Routes named one by one under "crash the same way on every attempt" (the rest are counted).
CRASHES_NAMED = 20


def known_runs(layout: Layout, manifest: dict | None) -> list[RunKey]:
    """Every route run the manifest plans or the disk holds, sorted (what progress and info count)."""
    keys = set(layout.iter_runs())
    for name in planned_runs(manifest):
        scenario, _, run = name.partition("/")
        try:
            keys.add(RunKey(scenario, run))
        except ValueError as e:
            raise ToolError(f"{layout.manifest}: run {name[:60]!r}: not <scenario>/<run> of the layout ({e})") from None
    return sorted(keys)


def count_states(layout: Layout, keys: list[RunKey], states: dict[RunKey, RunState] | None = None
                 ) -> dict[str, Counter]:
    """Per scenario type: how many runs are in each RunState (`states`: already known ones)."""
    table: dict[str, Counter] = {}
    for key in keys:
        table.setdefault(key.scenario, Counter())[states[key] if states else run_state(layout, key)] += 1
    return table


def state_row(name: str, states: Counter) -> list[str]:
    """A table row: name, planned, finished, failed, running, pending, failure rate (COLUMNS)."""
    finished = states[RunState.FINISHED]
    failed = sum(states[s] for s in FAILED_STATES)
    ended = finished + failed
    rate = f"{100.0 * failed / ended:.1f}%" if ended else "-"
    return [name, str(sum(states.values())), str(finished), str(failed), str(states[RunState.RUNNING]),
            str(states[RunState.PENDING]), rate]


def text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a table: the first column left-aligned, the others right-aligned, a rule above the last
    row (the total) when there are rows besides it."""
    everything = [header, *rows]
    widths = [max(len(r[i]) for r in everything) for i in range(len(header))]
    lines = []
    for i, r in enumerate(everything):
        if i == len(everything) - 1 and len(everything) > 2:
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]))
    return lines


def format_table(table: dict[str, Counter]) -> str:
    rows = [state_row(name, states) for name, states in sorted(table.items())]
    rows.append(state_row("total", sum(table.values(), Counter())))
    return "\n".join(text_table(["scenario type", *COLUMNS], rows))


def crash_lines(layout: Layout, states: dict[RunKey, RunState]) -> list[str]:
    """What progress and a collection's summary say of crashes (tools.dataset.attempts.crash_history, from the
    runs' attempt records): the routes that crashed the same way on every attempt, each with its crash and its
    number of attempts (retrying them will not help: look at the crash), apart from the runs that crashed and
    then finished on a later attempt."""
    history = crash_history(layout, states)
    lines = []
    if history.repeated:
        lines.append(f"{len(history.repeated)} route runs crash the same way on every attempt (the same route, "
                     "the same crash: retrying will not help, look at their logs):")
        for key in sorted(history.repeated, key=lambda k: (k.scenario, k.name))[:CRASHES_NAMED]:
            n, message = history.repeated[key]
            lines.append(f"  {key}: {message} ({n} attempts; logs in {layout.log_dir(key)})")
        if len(history.repeated) > CRASHES_NAMED:
            lines.append(f"  ... and {len(history.repeated) - CRASHES_NAMED} more")
    if history.recovered:
        lines.append(f"{len(history.recovered)} route runs crashed, then finished on a later attempt")
    return lines
