"""`bin/evaluate compare ROOT_A ROOT_B`: the paired difference B - A of two evaluations of the same routes.

Runs pair by (route, repetition K) where both roots planned the run: with the same --seed, the same world (the
traffic is seeded from route, K and --seed: tools.collect.runner.attempt.derive_seed), so the difference is
the policies', not the worlds'. Crashed and missing runs count with score 0 on either side, as in the
aggregate (tools.dataset.score). Intervals are 95% Student-t intervals of the mean difference
(tools.dataset.score.mean_interval): per route over its paired seeds, overall over every paired run.
"""

from __future__ import annotations

from tools.core import cli, files
from tools.core.errors import ToolError
from tools.dataset.layout import Layout, resolve_root
from tools.dataset.score import Aggregate, RunScore, aggregate, format_interval, mean_interval

#: The scores compared: (label, leaderboard key).
COMPARED = (("DS", "score_composed"), ("RC", "score_route"))


def _root(value: str | None, flag: str) -> Layout:
    if value is None or isinstance(value, bool) or str(value) == "":
        raise ToolError(f"{flag} missing: bin/evaluate compare ROOT_A ROOT_B (two roots bin/evaluate wrote)")
    layout = Layout(resolve_root(cli.text(value, flag)))
    if not layout.root.is_dir():
        raise ToolError(f"{flag} {layout.root}: no such folder; give a --root that bin/evaluate wrote")
    return layout


def _runs(agg: Aggregate) -> dict[tuple[str, int], RunScore]:
    return {(r.key.route, r.key.repetition): r for r in agg.runs}


def _seed_offset(layout: Layout) -> object:
    try:
        return (files.read_json(layout.evaluation).get("settings") or {}).get("seed")
    except (OSError, ValueError, AttributeError):
        return None


def compare_roots(root_a: str | None, root_b: str | None) -> str:
    """The comparison's text (see the module's docstring); ToolError for roots that cannot be compared."""
    a_layout, b_layout = _root(root_a, "ROOT_A"), _root(root_b, "ROOT_B")
    a, b = aggregate(a_layout), aggregate(b_layout)  # ToolError for a root that is not an evaluation root
    a_runs, b_runs = _runs(a), _runs(b)
    a_routes, b_routes = {k for k, _ in a_runs}, {k for k, _ in b_runs}
    if a_routes != b_routes:
        only_a, only_b = sorted(a_routes - b_routes), sorted(b_routes - a_routes)
        raise ToolError(f"ROOT_A {a_layout.root} and ROOT_B {b_layout.root} evaluated different routes "
                        f"({len(only_a)} only in A, e.g. {(only_a or ['-'])[0]}; {len(only_b)} only in B, e.g. "
                        f"{(only_b or ['-'])[0]}); compare roots evaluated on the same route folder")
    pairs = sorted(set(a_runs) & set(b_runs))
    if not pairs:
        raise ToolError(f"ROOT_A {a_layout.root} and ROOT_B {b_layout.root} share no repetition of any route; "
                        "evaluate both with the same --seeds")
    lines = [f"paired difference B - A over {len(pairs)} route runs ({len(a_routes)} routes) in both roots, "
             "means with 95% t-intervals",
             f"  A: {a_layout.root}", f"  B: {b_layout.root}"]
    unpaired = len(a_runs) + len(b_runs) - 2 * len(pairs)
    if unpaired:
        lines.append(f"  {unpaired} runs planned in one root only (other seeds) are left out")
    if _seed_offset(a_layout) != _seed_offset(b_layout):
        lines.append(f"  note: --seed differs ({_seed_offset(a_layout)} and {_seed_offset(b_layout)}): paired runs "
                     "drove different worlds, so the pairing removes less of the world's noise")

    def diffs(keys: list[tuple[str, int]], score: str) -> list[float]:
        return [b_runs[k].record["scores"][score] - a_runs[k].record["scores"][score] for k in keys]

    for label, score in COMPARED:
        mean_a = sum(a_runs[k].record["scores"][score] for k in pairs) / len(pairs)
        mean_b = sum(b_runs[k].record["scores"][score] for k in pairs) / len(pairs)
        diff = format_interval(*mean_interval(diffs(pairs, score)))
        lines.append(f"  {label}: A {mean_a:.3f}, B {mean_b:.3f}, B - A {diff}")
    width = max(len("route"), *(len(route) for route, _ in pairs))
    lines.append(f"  {'route':<{width}}  {'seeds':>5}  {'DS A':>7}  {'DS B':>7}  {'DS B - A (95%)':>19}  "
                 f"{'RC B - A (95%)':>19}")
    for route in sorted(a_routes):
        keys = [k for k in pairs if k[0] == route]
        if not keys:
            continue
        ds_a = sum(a_runs[k].record["scores"]["score_composed"] for k in keys) / len(keys)
        ds_b = sum(b_runs[k].record["scores"]["score_composed"] for k in keys) / len(keys)
        ds = format_interval(*mean_interval(diffs(keys, "score_composed")), width=7)
        rc = format_interval(*mean_interval(diffs(keys, "score_route")), width=7)
        lines.append(f"  {route:<{width}}  {len(keys):>5}  {ds_a:7.2f}  {ds_b:7.2f}  {ds:>19}  {rc:>19}")
    partial = [str(r) for r, agg in (("A", a), ("B", b)) if agg.entry_status != "Finished"]
    if partial:
        lines.append(f"  note: root {' and '.join(partial)} not finished (runs without a result or crashed count 0)")
    return "\n".join(lines)
