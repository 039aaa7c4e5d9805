"""Presets: small runs before big ones. One table of values per stage, and one rule to apply them.

    tiny    the whole chain (routes, collection, buckets, cache, pretrain, posttrain) in about a minute on
            2 cores: 4 short routes, a few training steps; to check that everything runs
    small   about ten minutes on 2 cores: 24 routes, a few hundred training steps; to see that it learns
    medium  about half an hour on 2 cores: 128 routes, 1,200 training steps a phase; with bin/demo, three
            training seeds evaluated on held-out routes of the generated town and of a real CARLA town: a
            result with intervals (docs/training.md "The medium preset")
    bench2drive  the field's protocol with bin/demo (docs/training.md "The field's protocol"): routes with every
            scenario type on CARLA's twelve towns, three training seeds of medium's model and batch at four times
            its steps (4,800 a phase: docs/training.md "Four times the steps"), evaluated on Bench2Drive-220
            (bin/demo --bench2drive PATH) with Bench2Drive's metrics, the expert beside them
    full    each tool's defaults (what runs without --preset)

The rule (`resolve`): a value given explicitly (a flag, a key=value) wins; else the preset's; else, without
a preset, the `full` column, which holds the tools' defaults (tests/core/test_presets.py checks that it does).
A preset sets only the keys its stage's table names; the buckets and the cache have no preset (their
defaults cost what the data costs). `python -m tools.collect routes --help`, `... collect --help`,
`bin/train --help-keys` and `bin/pipeline --help-flags` print their table (`table_text`).
"""

from __future__ import annotations

from typing import Any

from tools.core.errors import ToolError

PRESETS = ("tiny", "small", "medium", "bench2drive", "full")

#: Per stage: key -> value per preset (tiny, small, medium, bench2drive, full). None: not set by that preset.
#: routes: python -m tools.collect routes (count has no default: full sets none).
#: bench2drive: its count is the total bin/demo shares over the towns, its lengths those of Bench2Drive's routes.
ROUTES: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    "count": (4, 24, 128, 192, None),
    "min_length": (120.0, 150.0, 150.0, 100.0, 150.0),
    "max_length": (200.0, 350.0, 350.0, 300.0, 700.0),
}
#: collect: bin/collect, python -m tools.collect collect (vehicles: the embedded world's background traffic; a
#: CARLA world decides its own, so a preset leaves it out there).
COLLECT: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    "workers": (2, 2, 2, 2, 1),
    "vehicles": (10, 20, 20, 20, 40),
}
#: train: bin/train pretrain|posttrain preset=NAME (the TrainConfig keys).
TRAIN: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    "max_steps": (20, 600, 1200, 4800, 1200),
    "batch_size": (4, 8, 8, 8, 8),
    "warmup_steps": (2, 30, 30, 30, 30),
    "log_every": (5, 50, 50, 50, 10),
    "image_every": (0, 200, 400, 400, 100),
    "val_samples": (16, 128, 256, 256, 0),
    "save_every": (20, 200, 400, 400, 200),
}
#: demo: bin/demo --preset NAME (train_seeds: trainings with seeds 0..K-1, each evaluated; eval_routes: held-out
#: routes per town, 0 none; real_town: a CARLA town (the py123d wheel's) whose held-out routes are driven too, ""
#: none; towns: where the training routes are, "generated" (a town of ours) or "carla" (CARLA's twelve, every
#: scenario type each has a place for; bin/demo --train-towns picks); benchmark: "bench2drive" to require
#: --bench2drive PATH, whose routes are then driven with Bench2Drive's metrics; scenarios: the types the generated
#: town's training routes take in turn (tools.collect routes --scenarios), "" the route tool's own choice (the
#: junction flow of a route's first turn). `make demo` (the last column) trains on turns at signalized junctions,
#: left and right: its 8 routes of the route tool's choice took no left turn at a light, and 2 of its 4 held-out
#: routes do (docs/training.md "Red lights: the stop line in the BEV").
DEMO: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    "train_seeds": (1, 1, 3, 3, 1),
    "eval_routes": (4, 4, 8, 0, 4),
    "real_town": ("", "", "Town03", "", ""),
    "towns": ("generated", "generated", "generated", "carla", "generated"),
    "benchmark": ("", "", "", "bench2drive", ""),
    "scenarios": ("", "", "", "", "SignalizedJunctionLeftTurn,SignalizedJunctionRightTurn"),
}
TABLES = {"routes": ROUTES, "collect": COLLECT, "train": TRAIN, "demo": DEMO}


def check_preset(preset: Any, flag: str = "--preset") -> str | None:
    """None (no preset) or one of PRESETS; ToolError naming the flag otherwise."""
    if preset is None or preset == "":
        return None
    if not isinstance(preset, str) or preset not in PRESETS:
        given = f"{flag}{preset}" if flag.endswith("=") else f"{flag} {preset}"
        raise ToolError(f"{given}: unknown preset; choose one of {', '.join(PRESETS)}")
    return preset


def resolve(table: dict[str, tuple[Any, ...]], preset: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """Every key of `table`: the value in `given` when it is not None (explicit), else the preset's (`full`
    without one). A key the preset leaves None stays None (the tool's own rule applies)."""
    column = PRESETS.index(preset or "full")
    return {key: given[key] if given.get(key) is not None else values[column] for key, values in table.items()}


def table_text(stage: str, indent: str = "  ") -> str:
    """The preset table of a stage, for --help: a row per key, a column per preset."""
    table = TABLES[stage]
    rows = [["", *PRESETS]] + [[key.replace("_", "-") if stage != "train" else key,
                                *("-" if v in (None, "") else f"{v:g}" if isinstance(v, float) else str(v)
                                  for v in values)]
                               for key, values in table.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(indent + "  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:],
                                                                                              strict=True))]).rstrip()
                     for r in rows)


def with_table(stage: str):
    """Decorator: put the stage's preset table into a command's docstring (its --help) where it says {presets}."""

    def decorate(fn):
        indent = "      "  # the placeholder's own: a docstring's 4 spaces and 2 more
        fn.__doc__ = (fn.__doc__ or "").replace("{presets}", table_text(stage, indent)[len(indent):])
        return fn

    return decorate
