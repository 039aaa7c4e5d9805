"""Which route runs go to which split (train, val, test), and the balance table that shows what came out.

The unit is the route: every repetition of a route (its runs `<route>_rep<K>`, tools.dataset.layout
RunKey.for_route) goes to the same split, so no frame of a route is in two splits.

    stratified (default)  val and test drawn from every stratum (town, scenario type, weather) in proportion
                          (`stratified`), reproducible from --split-seed
    auto, town:NAME, scenario:TYPE, every:N
                          the val split by a rule (`resolve_holdout`); no test split unless --test-fraction,
                          which draws one the stratified way from the routes the rule leaves for training

docs/buckets.md ("Splits") explains the rules, small strata and the balance table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from typing import Any

from tools.core.errors import ToolError
from tools.dataset.buckets import SPLITS, run_key

STRATIFIED = "stratified"
RULES_TEXT = "stratified, auto, town:NAME, scenario:TYPE or every:N (N >= 2)"

#: Default shares of the routes in val and test (stratified), and the seed of the draw.
VAL_FRACTION = 0.1
TEST_FRACTION = 0.1
SPLIT_SEED = 0

#: What the balance table breaks each split down by (keys of a run's meta; the scenario type is its folder's).
DIMENSIONS = ("town", "scenario", "weather")

#: The golden ratio's fractional part: the sequence frac(start + j * PHI) spreads any number of consecutive
#: terms evenly over [0, 1) (a low-discrepancy sequence).
PHI = (math.sqrt(5.0) - 1.0) / 2.0


def parse_rule(text: str) -> str:
    """--holdout RULE, checked: stratified, auto, town:NAME, scenario:TYPE or every:N."""
    kind, _, value = text.partition(":")
    ok = text in (STRATIFIED, "auto") or (kind in ("town", "scenario") and value) or (
        kind == "every" and value.isdigit() and int(value) >= 2)
    if not ok:
        raise ToolError(f"--holdout {text}: unknown rule; expected {RULES_TEXT}")
    return text


@dataclasses.dataclass(frozen=True)
class SplitSettings:
    """How the splits are drawn: the rule, and for the stratified draw its seed and fractions (of the routes).
    `val_fraction` is None for a rule that picks val itself; `test_fraction` 0 means no test split."""

    rule: str = STRATIFIED
    seed: int = SPLIT_SEED
    val_fraction: float | None = VAL_FRACTION
    test_fraction: float = TEST_FRACTION

    def to_settings(self) -> dict[str, Any]:
        """What a bucket file records under `settings` (and compares to decide whether it is up to date)."""
        return {"holdout": self.rule, "split_seed": self.seed, "val_fraction": self.val_fraction,
                "test_fraction": self.test_fraction}

    @property
    def fractions(self) -> dict[str, float]:
        """The held-out splits drawn the stratified way and their shares, test first."""
        out = {"test": self.test_fraction} if self.test_fraction else {}
        if self.rule == STRATIFIED:
            out["val"] = float(self.val_fraction or 0.0)
        return out


def check_fractions(s: SplitSettings, origin: str = "") -> None:
    """Each fraction above 0 and below 1, together below 1 (a test fraction of 0 is no test split, for the rules
    that pick val themselves); ToolError naming the flags otherwise."""
    where = f" ({origin})" if origin else ""
    if s.rule != STRATIFIED and s.val_fraction is not None:
        raise ToolError(f"--val-fraction {s.val_fraction:g}: only with --holdout stratified; the rule {s.rule} picks "
                        "the val split itself")
    named = {"test-fraction": s.test_fraction} if s.rule == STRATIFIED or s.test_fraction else {}
    if s.rule == STRATIFIED:
        named = {"val-fraction": s.val_fraction, **named}
    for flag, value in named.items():
        if value is None or not 0.0 < value < 1.0:
            how = "leaves that split empty" if value == 0 else "is not a share"
            no_test = "; for no test split use a --holdout rule (auto, town:NAME, ...) without --test-fraction" \
                if flag == "test-fraction" else ""
            raise ToolError(f"--{flag} {value}: {how}: give a share of the routes above 0 and below 1{no_test}{where}")
    if sum(v for v in named.values() if v) >= 1.0:
        raise ToolError(f"--val-fraction {s.val_fraction} and --test-fraction {s.test_fraction} add up to "
                        f"{sum(named.values()):g}: they must leave routes for training (sum below 1){where}")


# ----------------------------------------------------------------------------- routes


def route_of(rel: str) -> str:
    """The route of a route run "data/<Scenario>/<stem>[_route<id>]_rep<K>": "<Scenario>/<stem>[_route<id>]"
    (RunKey.for_route's rule read backwards): what every repetition of the route has in common."""
    key = run_key(rel)
    base, sep, rep = key.name.rpartition("_rep")
    return f"{key.scenario}/{base if sep and rep.isdigit() else key.name}"


def routes_of(runs: dict[str, Any]) -> dict[str, list[str]]:
    """route -> its runs (sorted), for the runs {rel: ...}."""
    out: dict[str, list[str]] = {}
    for rel in sorted(runs):
        out.setdefault(route_of(rel), []).append(rel)
    return out


def _unit(seed: int, text: str) -> float:
    """A number in [0, 1) from (seed, text): the same on every machine and Python (not hash())."""
    digest = hashlib.sha256(f"{int(seed)}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def stratified(strata: dict[str, tuple[str, str, str]], fractions: dict[str, float], seed: int) -> dict[str, str]:
    """route -> split for routes {route: (town, scenario type, weather)}: each split of `fractions` (in order)
    about its share of every stratum, the rest "train". A pure function of (routes, strata, fractions, seed).

    A stratum of n routes lists them in the order of a hash of (seed, route) and gives route k the value
    (k + u) / n, u in [0, 1) the stratum's offset: values evenly spaced over [0, 1). A route goes to the first
    split of `fractions` when its value is below that split's fraction, to the second when below the sum of
    the two, else to train. So a stratum gives each split its share of routes rounded down or up (by u; on
    average exactly), and a stratum of one route goes whole to a held-out split with the probability of its
    fraction. The offsets of the strata of one town and scenario type (their weathers, sorted) are spread
    by the golden-ratio sequence from a hash of (seed, town, scenario type), so that small strata of one
    kind share the held-out splits evenly rather than by chance. Adding routes to a stratum changes only
    the splits of that stratum's routes (and, with a new weather, of its town and scenario type).

    Then, so that small datasets still get every split: an empty train takes the held-out route with the
    largest value; an empty held-out split takes the training route with the smallest value while train keeps
    one, else from a later held-out split (3 routes give every split one; 2 give train and val, the last split
    of `fractions`)."""
    members: dict[tuple[str, str, str], list[str]] = {}
    for route, stratum in strata.items():
        members.setdefault(stratum, []).append(route)
    kinds: dict[tuple[str, str], list[str]] = {}
    for town, scenario, weather in sorted(members):
        kinds.setdefault((town, scenario), []).append(weather)
    value: dict[str, float] = {}
    for (town, scenario), weathers in kinds.items():
        start = _unit(seed, f"{town}\0{scenario}")
        for j, weather in enumerate(weathers):
            offset = (start + j * PHI) % 1.0
            routes = sorted(members[(town, scenario, weather)], key=lambda r: (_unit(seed, r), r))
            value.update((r, (k + offset) / len(routes)) for k, r in enumerate(routes))
    bounds, total = [], 0.0
    for split, fraction in fractions.items():
        total += fraction
        bounds.append((total, split))
    out = {r: next((split for bound, split in bounds if v < bound), "train") for r, v in value.items()}

    def members_of(split: str) -> list[str]:
        return sorted((r for r, s in out.items() if s == split), key=lambda r: (value[r], r))

    order = list(reversed(list(fractions)))  # val before test: training validates on val
    if out and not members_of("train"):
        out[members_of(next(s for s in order if members_of(s)))[-1]] = "train"
    for i, split in enumerate(order):
        if members_of(split):
            continue
        train = members_of("train")
        donor = train[0] if len(train) > 1 else next((members_of(s)[0] for s in order[i + 1:] if members_of(s)), None)
        if donor is not None:
            out[donor] = split
    return out


# ----------------------------------------------------------------------------- the rules


def resolve_holdout(rule: str, runs: dict[str, dict[str, Any]]) -> tuple[str, set[str], str]:
    """(rule applied, val runs, why) of a val rule (auto, town:NAME, scenario:TYPE, every:N) over the
    finished runs {rel: {"town", "frames"}}. every:N counts routes (their repetitions together)."""
    towns = sorted({r["town"] for r in runs.values()})
    scenario_frames: Counter = Counter()
    for rel, r in runs.items():
        scenario_frames[run_key(rel).scenario] += r["frames"]
    scenarios = sorted(scenario_frames)
    why = "as asked"
    if rule == "auto":
        if len(towns) >= 2:
            rule, why = f"town:{towns[-1]}", f"auto: {len(towns)} towns, the alphabetically last held out"
        elif len(scenarios) >= 2:
            fewest = min(scenarios, key=lambda s: (scenario_frames[s], s))
            rule = f"scenario:{fewest}"
            why = f"auto: one town, {len(scenarios)} scenario types, the one with the fewest frames held out"
        else:
            rule, why = "every:5", "auto: one town and one scenario type, every 5th route held out"
    kind, _, value = rule.partition(":")
    if kind == "town":
        if value not in towns:
            raise ToolError(f"--holdout {rule}: no finished route run in town {value!r}; towns: {', '.join(towns)}")
        held = {rel for rel, r in runs.items() if r["town"] == value}
    elif kind == "scenario":
        if value not in scenarios:
            raise ToolError(f"--holdout {rule}: no finished route run of scenario type {value!r}; scenario types: "
                            f"{', '.join(scenarios)}")
        held = {rel for rel in runs if run_key(rel).scenario == value}
    else:
        n, routes = int(value), routes_of(runs)
        names = sorted(routes)
        chosen = {r for i, r in enumerate(names) if (i + 1) % n == 0}
        if not chosen and len(names) >= 2:  # fewer routes than N: hold out the last one
            chosen = {names[-1]}
        held = {rel for r in chosen for rel in routes[r]}
    return rule, held, why


@dataclasses.dataclass(frozen=True)
class Assignment:
    """The split of every finished run, and how it came about."""

    rule: str  # the rule applied: "stratified", "town:NAME", ...
    why: str
    split: dict[str, str]  # rel -> "train" | "val" | "test"
    notes: tuple[str, ...] = ()  # splits left empty by too few routes


def _stratum(meta: dict[str, Any], rel: str) -> tuple[str, str, str]:
    return (str(meta.get("town", "?")), run_key(rel).scenario, str(meta.get("weather", "?")))


def assign(s: SplitSettings, runs: dict[str, dict[str, Any]]) -> Assignment:
    """The split of each run of {rel: {"town", "weather", "frames"}} under `s`. A route's stratum is its first
    run's (its repetitions share town, scenario type and weather). ToolError for a rule naming nothing."""
    fractions = s.fractions
    if s.rule == STRATIFIED:
        held: set[str] = set()
        rule, why = STRATIFIED, (f"seed {s.seed}: about val {s.val_fraction:g}, test {s.test_fraction:g} of the "
                                 "routes of every (town, scenario type, weather)")
    else:
        rule, held, why = resolve_holdout(s.rule, runs)
        if fractions:
            why += f"; test {s.test_fraction:g} of the other routes (seed {s.seed}, stratified)"
    split = dict.fromkeys(held, "val")
    rest = routes_of({rel: m for rel, m in runs.items() if rel not in held})
    drawn = stratified({route: _stratum(runs[rels[0]], rels[0]) for route, rels in rest.items()}, fractions,
                       s.seed) if fractions else dict.fromkeys(rest, "train")
    for route, rels in rest.items():
        split.update(dict.fromkeys(rels, drawn[route]))
    notes = []
    routes = len(routes_of(runs))
    for name in (s for s in SPLITS if s in fractions):
        if name not in split.values():
            notes.append(f"{routes} route{'s' if routes != 1 else ''}: too few for a {name} split (the draw needs "
                         f"{len(fractions) + 1}, one per split); the {name} split is empty")
    return Assignment(rule, why, split, tuple(notes))


# ----------------------------------------------------------------------------- the balance table


def balance(assignment: Assignment, runs: dict[str, dict[str, Any]], frames: dict[str, int]) -> dict[str, Any]:
    """Per split: routes, runs, frames (`frames`: the collection's frames of each run) and the frames per town,
    scenario type and weather. What a bucket file stores under `splits.balance`."""
    out: dict[str, Any] = {}
    for split in SPLITS:
        rels = sorted(rel for rel, s in assignment.split.items() if s == split)
        row: dict[str, Any] = {"routes": len({route_of(r) for r in rels}), "runs": len(rels),
                               "frames": sum(frames.get(r, 0) for r in rels)}
        for key in DIMENSIONS:
            counts: Counter = Counter()
            for rel in rels:
                value = run_key(rel).scenario if key == "scenario" else str(runs[rel].get(key, "?"))
                counts[value] += frames.get(rel, 0)
            row[key] = dict(sorted(counts.items()))
        out[split] = row
    return out


def balance_lines(table: dict[str, Any]) -> list[str]:
    """The balance table as text: routes, runs and frames per split (and all), then each town, scenario type
    and weather as its share of the split's frames."""
    splits = [s for s in SPLITS if s in table]
    total = {k: sum(table[s][k] for s in splits) for k in ("routes", "runs", "frames")}
    rows = [["", "all", *splits]]
    for k in ("routes", "runs", "frames"):
        rows.append([k, str(total[k]), *(str(table[s][k]) for s in splits)])
    for key in DIMENSIONS:
        values = sorted({v for s in splits for v in table[s].get(key, {})})
        for value in values:
            counts = [table[s].get(key, {}).get(value, 0) for s in splits]
            cells = [_share(c, table[s]["frames"]) for c, s in zip(counts, splits, strict=True)]
            rows.append([f"{key} {value}", _share(sum(counts), total["frames"]), *cells])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))])
            .rstrip() for r in rows]


def _share(count: int, of: int) -> str:
    return f"{100.0 * count / of:.1f}%" if of else "-"
