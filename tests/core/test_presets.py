"""Presets (tools/core/presets.py): the tiny chain end to end as a user runs it (routes --preset tiny, then
bin/pipeline --preset tiny: collection, buckets, cache, pretrain, posttrain), explicit values winning over a
preset's, the full column being each tool's defaults, the tables in --help, and bad presets as one line."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
from conftest import BIN, PYTHON, run_bin, run_tool

from tools.collect.base.config import CollectSettings
from tools.collect.base.route_gen import generate_routes
from tools.collect.base.routes import read_routes
from tools.core.errors import ToolError
from tools.core.options import build
from tools.core.presets import COLLECT, PRESETS, ROUTES, TRAIN, resolve
from tools.dataset.buckets import COLLECTIONS, SPLITS, load_collection
from tools.dataset.layout import Layout
from tools.dataset.results import RunState, run_state
from tools.dataset.samples import CacheSettings
from tools.pipeline.chain import PipelineFlags, parse_options, stages
from tools.train.config import TrainConfig, parse_overrides

FULL = PRESETS.index("full")


def test_the_full_column_is_each_tools_default():
    defaults = TrainConfig()
    assert {k: v[FULL] for k, v in TRAIN.items()} == {k: getattr(defaults, k) for k in TRAIN}
    assert COLLECT["vehicles"][FULL] == CollectSettings().vehicles
    signature = inspect.signature(generate_routes).parameters
    assert ROUTES["min_length"][FULL] == signature["min_length"].default
    assert ROUTES["max_length"][FULL] == signature["max_length"].default
    assert ROUTES["count"][FULL] is None  # --count has no default: without a preset it must be given
    assert set(TRAIN) <= {f.name for f in dataclasses.fields(TrainConfig)}


def test_an_explicit_value_wins_over_the_preset_and_no_preset_is_full():
    tiny = parse_overrides("pretrain", ["preset=tiny", "max_steps=7"])
    assert tiny.preset == "tiny" and tiny.max_steps == 7 and tiny.batch_size == TRAIN["batch_size"][0]
    assert tiny.val_samples == TRAIN["val_samples"][0] and tiny.lr == TrainConfig().lr  # not in the table
    assert parse_overrides("pretrain", ["max_steps=7"]) == TrainConfig(max_steps=7)
    assert resolve(COLLECT, "small", {"workers": 1, "vehicles": None}) == {"workers": 1, "vehicles": 20}
    assert resolve(COLLECT, None, {"workers": None, "vehicles": None}) == {"workers": 1, "vehicles": 40}
    with pytest.raises(ToolError,
                       match="^--preset huge: unknown preset; choose one of tiny, small, medium, bench2drive, full$"):
        parse_overrides("pretrain", ["preset=huge"])


def test_routes_take_the_presets_count_and_lengths_and_a_flag_wins(town_xodr, tmp_path):
    proc = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", town_xodr, "--preset", "tiny", "--count", "2",
                    "--out", tmp_path / "routes")
    assert proc.returncode == 0, proc.stderr
    files = [p for p in (tmp_path / "routes").rglob("*.xml") if "towns" not in p.parts]
    assert len(files) == 2  # --count wins over the preset's 4
    missing = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", town_xodr, "--out", tmp_path / "none")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "collect: --count missing: give --count N, or --preset tiny|small|medium|bench2drive (4, 24, 128 or 192 "
        "routes)")
    bad = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", town_xodr, "--preset", "huge", "--out",
                   tmp_path / "none")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("--preset huge: unknown preset; choose one of tiny, "
                                                               "small, medium, bench2drive, full")
    assert not (tmp_path / "none").exists()


def test_the_pipeline_passes_its_preset_before_the_stages_own_arguments(tmp_path):
    options = parse_options(tmp_path, tmp_path / "root", build(PipelineFlags, {
        "outputs": tmp_path / "out", "shards": 1, "collect_args": "--workers 1", "pretrain_args": "max_steps=3",
        "posttrain_args": "", "preset": "tiny"}))
    commands = {s.name: s.command for s in stages(options)}
    assert commands["collect"][-4:] == ["--preset", "tiny", "--workers", "1"]
    assert commands["pretrain"][-2:] == ["preset=tiny", "max_steps=3"] and commands["posttrain"][-1] == "preset=tiny"
    assert "--preset" not in commands["buckets"] + commands["cache"]
    plain = parse_options(tmp_path, tmp_path / "root", PipelineFlags(outputs=str(tmp_path / "out"), shards=1))
    assert not any("preset" in word for s in stages(plain) for word in s.command)
    for stage, words in (("collect", "--preset small"), ("pretrain", "preset=small"), ("pretrain", "--preset small"),
                         ("pretrain", "--preset=small")):
        with pytest.raises(ToolError, match=f"--{stage}-args: {words.split()[0]}.* is set by the pipeline; use "
                                            "bin/pipeline --preset"):
            build(PipelineFlags, {f"{stage}_args": words, "preset": "tiny"})


def test_help_prints_each_stages_preset_table():
    texts = {
        "routes": run_tool(PYTHON, "-m", "tools.collect", "routes", "--help"),
        "collect": run_tool(PYTHON, "-m", "tools.collect", "collect", "--help"),
        "train": run_bin("train", "--help-keys"),
        "pipeline": run_bin("pipeline", "--help-flags"),
    }
    for name, proc in texts.items():
        text = proc.stdout + proc.stderr  # fire prints help on stderr when it is not a terminal
        assert proc.returncode == 0, (name, text)
        assert any(line.split() == list(PRESETS) for line in text.splitlines()), (name, text)
    train = texts["train"].stdout.splitlines()
    assert any(line.split() == ["max_steps", *map(str, TRAIN["max_steps"])] for line in train)
    assert any(line.split() == ["vehicles", *map(str, COLLECT["vehicles"])]
               for line in (texts["collect"].stdout + texts["collect"].stderr).splitlines())


@pytest.mark.timeout(300)
def test_the_tiny_chain_runs_every_stage_with_the_expected_counts(town_xodr, tmp_path):
    """What a newcomer runs first: 4 short routes, then bin/pipeline --preset tiny (about a minute on 2 cores)."""
    routes, root, outputs = tmp_path / "routes", tmp_path / "root", tmp_path / "outputs"
    made = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", town_xodr, "--preset", "tiny", "--out", routes)
    assert made.returncode == 0, made.stderr
    files = [p for p in routes.rglob("*.xml") if "towns" not in p.parts]
    assert len(files) == ROUTES["count"][0]
    lengths = [sum(float(((b - a) ** 2).sum()) ** 0.5 for a, b in zip(r.waypoints, r.waypoints[1:], strict=False))
               for f in files for r in read_routes(f)]
    assert all(length <= ROUTES["max_length"][0] + 1.0 for length in lengths), lengths

    proc = run_tool(BIN / "pipeline", routes, "--root", root, "--outputs", outputs, "--preset", "tiny", timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "every stage done" in proc.stderr

    layout = Layout(root)
    runs = list(layout.iter_runs())
    assert len(runs) == 4 and all(run_state(layout, k) is RunState.FINISHED for k in runs)
    assert {json.loads(layout.run_settings(k).read_text())["settings"]["vehicles"] for k in runs} == {10}
    frames = sum(layout.frame_count(k) for k in runs)
    for name in COLLECTIONS:  # every split has routes; together they hold every run once
        coll = load_collection(layout, name, horizon=CacheSettings().horizon, rebuild=False, splits=SPLITS)
        per_split = [{rel for rel, _ in coll.frames(s)} for s in SPLITS]
        assert all(per_split) and sum(map(len, per_split)) == 4
    records = [p for p in layout.cache.rglob("*.rec")]
    assert len(records) == frames > 100
    for phase in ("pretrain", "posttrain"):
        summary = json.loads((outputs / phase / "summary.json").read_text())
        config = json.loads((outputs / phase / "config.json").read_text())
        assert summary["steps"] == TRAIN["max_steps"][0] and config["preset"] == "tiny"
        assert config["batch_size"] == TRAIN["batch_size"][0]
        assert Path(summary["checkpoints"]).is_dir()
    assert json.loads((outputs / "posttrain" / "summary.json").read_text())["val"]["ade"] > 0
