"""Buckets: bin/build-buckets and tools.dataset.buckets on a real collected dataset root (real files, real
subprocesses): every frame in one bucket, the posttrain horizon, the train / val / test splits (stratified,
whole routes, reproducible from a seed, a balance table; test never read by training), the other split rules,
portable files, the epoch sampler, stale, outdated and foreign files, and each bad input as one line with
nothing on disk changed."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import msgpack
import pytest
from conftest import PYTHON, REPO, copy_root, run_bin, run_tool, tree

from tools.buckets.plans import DEFAULT_WEIGHTS
from tools.buckets.splits import SplitSettings, assign, route_of, stratified
from tools.core import atomic
from tools.core.errors import ToolError
from tools.dataset.bucket_rules import BEHAVIOUR_BUCKETS, BUCKETS, RULES, SCENARIO_BUCKETS, classify
from tools.dataset.buckets import (
    BUCKETS_FORMAT,
    COLLECTIONS,
    SPLITS,
    Bucket,
    Collection,
    collection_path,
    frame_file,
    load_collection,
    read_collection,
    run_key,
    run_rel,
)
from tools.dataset.frames import read_frame
from tools.dataset.layout import Layout
from tools.dataset.manifest import dataset_id, update_manifest
from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.results import RouteRecord, RunState, read_status, run_state
from tools.dataset.samples import CacheSettings
from tools.dataset.weather import weather_class

HORIZON = CacheSettings().horizon


def build_buckets(*args: str) -> subprocess.CompletedProcess:
    return run_bin("build-buckets", *args)


def finished_frames(root: Path) -> dict[str, int]:
    """Frames per finished run, by "data/<Scenario>/<run>"."""
    layout = Layout(root)
    return {run_rel(k): len(layout.frame_paths(k)) for k in layout.iter_runs()
            if run_state(layout, k) is RunState.FINISHED}


def add_run_copy(root: Path, rel: str, new_name: str) -> str:
    """A new finished route run: a copy of run `rel`'s folder and result under another name."""
    layout, key = Layout(root), run_key(rel)
    new = run_key(f"data/{key.scenario}/{new_name}")
    shutil.copytree(layout.run_dir(key), layout.run_dir(new))
    shutil.copy2(layout.result_path(key), layout.result_path(new))
    return run_rel(new)


@pytest.fixture(scope="module")
def built(collected_root, tmp_path_factory) -> Path:
    """A copy of the collected root with both collections built by bin/build-buckets. Read-only."""
    root = copy_root(collected_root, tmp_path_factory.mktemp("built") / "root")
    proc = build_buckets("--root", str(root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert f"-> {collection_path(Layout(root), 'pretrain')}" in proc.stderr  # the summary says where
    return root


def all_frames(coll: Collection) -> list[tuple[str, int]]:
    return sorted(f for split in SPLITS for f in coll.frames(split))


def test_every_frame_of_every_finished_run_is_in_exactly_one_pretrain_bucket(built):
    layout = Layout(built)
    coll = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    frames = [f for b in coll.buckets for f in b.frames]
    assert len(frames) == len(set(frames))
    expected = {(rel, i) for rel, n in finished_frames(built).items() for i in range(n)}
    assert len(finished_frames(built)) == 4 and len(expected) > 300
    assert set(frames) == expected
    assert {b.name for b in coll.buckets} == set(BUCKETS)
    # The rules hold on the measurements (docs/buckets.md), spot-checked on every 5th frame of a bucket.
    seen = Counter()
    for bucket in coll.buckets:
        for frame in bucket.frames[::5]:
            m = read_frame(frame_file(layout, frame), sensors=False)["measurements"]
            seen[bucket.name] += 1
            if bucket.name == "stop":
                assert m["speed"] < 0.5 and m["target_speed"] < 0.5
            elif bucket.name == "hazard":
                assert m["speed"] >= 0.5 and (m["light_hazard"] or m["vehicle_hazard"])
            elif bucket.name == "turn":
                assert m["command"] in (1, 2) or m["junction"]
            elif bucket.name == "junction":
                assert m["junction"]
            elif bucket.name in SCENARIO_BUCKETS:
                assert m["scenario"] and bucket.name.startswith(m["scenario"]["kind"])
    assert seen["stop"] and seen["follow"] and seen["junction"]


def test_posttrain_skips_the_first_4_and_last_horizon_frames_of_each_run(built):
    coll = load_collection(Layout(built), "posttrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    by_run: dict[str, set[int]] = {}
    for rel, index in all_frames(coll):
        by_run.setdefault(rel, set()).add(index)
    runs = finished_frames(built)
    assert by_run.keys() == runs.keys()
    for rel, n in runs.items():
        assert by_run[rel] == set(range(4, n - HORIZON)), rel
    assert coll.settings["horizon"] == HORIZON and coll.settings["skip_first"] == 4


def test_auto_holdout_puts_the_scenario_type_with_fewest_frames_in_val_only_and_makes_no_test_split(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    proc = build_buckets("--root", str(root), "--holdout", "auto")
    assert proc.returncode == 0, proc.stderr
    per_scenario = Counter()
    for rel, n in finished_frames(root).items():
        per_scenario[run_key(rel).scenario] += n
    assert len(per_scenario) == 2  # one town, two scenario types: a scenario type is held out
    fewest = min(per_scenario, key=lambda s: (per_scenario[s], s))
    for name in COLLECTIONS:
        coll = load_collection(Layout(root), name, horizon=HORIZON, rebuild=False, splits=SPLITS)
        assert coll.holdout == f"scenario:{fewest}" and coll.settings["holdout"] == "auto"
        assert coll.frames("val") and {run_key(rel).scenario for rel, _ in coll.frames("val")} == {fewest}
        assert coll.frames("train") and fewest not in {run_key(rel).scenario for rel, _ in coll.frames("train")}
        assert coll.frames("test") == []


def test_bucket_files_are_relative_and_still_load_after_the_root_moves(built, tmp_path):
    original = {name: load_collection(Layout(built), name, horizon=HORIZON, rebuild=False, splits=SPLITS)
                for name in COLLECTIONS}
    moved = Path(shutil.move(copy_root(built, tmp_path / "a"), tmp_path / "elsewhere" / "b"))
    for name in COLLECTIONS:
        text = collection_path(Layout(moved), name).read_text()
        assert str(built) not in text and str(tmp_path) not in text
        assert all(rel.startswith("data/") for b in json.loads(text)["buckets"] for rel in b["frames"])
        coll = load_collection(Layout(moved), name, horizon=HORIZON, rebuild=False, splits=SPLITS)  # fresh
        for split in SPLITS:
            assert coll.frames(split) == original[name].frames(split)


def test_epoch_samples_are_deterministic_per_seed_and_epoch_and_as_long_as_the_split(built):
    coll = load_collection(Layout(built), "posttrain", horizon=HORIZON, rebuild=False)
    train = coll.frames("train")
    first = coll.epoch_samples("train", 0, seed=7)
    assert len(first) == len(train) and set(first) <= set(train)
    again = load_collection(Layout(built), "posttrain", horizon=HORIZON, rebuild=False)  # read anew
    assert again.epoch_samples("train", 0, seed=7) == first
    assert coll.epoch_samples("train", 1, seed=7) != first
    assert coll.epoch_samples("train", 0, seed=8) != first
    assert coll.epoch_samples("val", 3, seed=7) == coll.frames("val")


def _synthetic(weights: dict[str, list[float]], per_bucket: int = 100) -> Collection:
    buckets = [Bucket(name, "train", [(f"data/S/{name}_route0_rep0", i) for i in range(per_bucket)], w)
               for name, w in weights.items()]
    return Collection("posttrain", buckets, {}, "every:5", {})


def test_epoch_samples_follow_the_weights_zero_never_three_about_three_times_as_often():
    coll = _synthetic({"turn": [3.0], "follow": [1.0], "stop": [0.0]})
    for epoch in range(3):
        counts = Counter(rel.split("/")[2].split("_")[0] for rel, _ in coll.epoch_samples("train", epoch, 0))
        assert counts["stop"] == 0
        assert sum(counts.values()) == 300
        assert 2.8 <= counts["turn"] / counts["follow"] <= 3.2  # both buckets hold 100 frames: per frame 3x


def test_a_weight_schedule_changes_the_mix_from_epoch_to_epoch_and_its_last_entry_holds():
    coll = _synthetic({"turn": [0.0, 1.0, 4.0], "follow": [1.0]})
    share = [Counter(r.startswith("data/S/turn") for r, _ in coll.epoch_samples("train", e, 1))[True]
             for e in range(5)]
    assert share[0] == 0 and share[1] == 100 and share[2] == share[3] == share[4] == 160


def test_weights_file_overrides_defaults_and_is_recorded(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"stop": 0, "follow": [3]}))
    proc = build_buckets("--root", str(root), "--collection", "posttrain", "--weights", str(weights))
    assert proc.returncode == 0, proc.stderr
    coll = load_collection(Layout(root), "posttrain", horizon=HORIZON, rebuild=False)
    assert coll.settings["weights"]["stop"] == [0.0] and coll.settings["weights"]["turn"] == [2.0]  # default kept
    sizes = {b.name: len(b.frames) for b in coll.buckets if b.split == "train"}
    assert sizes["stop"] and sizes["follow"] and sizes["junction"]
    samples = coll.epoch_samples("train", 0, seed=3)
    names = {f: b.name for b in coll.buckets if b.split == "train" for f in b.frames}
    per_frame = {name: n / sizes[name] for name, n in Counter(names[f] for f in samples).items()}
    assert "stop" not in per_frame
    assert 2.7 <= per_frame["follow"] / per_frame["junction"] <= 3.3


def split_of_runs(coll: Collection) -> dict[str, str]:
    """run -> split of a collection read with every split."""
    return {rel: b.split for b in coll.buckets for rel, _ in b.frames}


def test_adding_or_removing_a_run_makes_load_collection_say_stale_and_rebuild(built, tmp_path, capsys):
    root = copy_root(built, tmp_path / "root")
    layout = Layout(root)
    before = load_collection(layout, "posttrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    some_rel = before.frames("train")[0][0]
    new = add_run_copy(root, some_rel, "town_9999_route9_rep1")  # a new route of the same stratum

    after = load_collection(layout, "posttrain", horizon=HORIZON, splits=SPLITS)
    err = capsys.readouterr().err
    assert f"{collection_path(layout, 'posttrain')} is stale: 1 route run added since it was built; rebuilding" in err
    assert "1 read, 4 unchanged" in err  # only the new run's frames were read
    n = finished_frames(root)[new]
    assert len(all_frames(after)) == len(all_frames(before)) + n - 4 - HORIZON
    assert new in after.built_from["runs"] and after.holdout == before.holdout
    fresh = load_collection(layout, "posttrain", horizon=HORIZON, splits=SPLITS)  # fresh now: no rebuild
    assert all_frames(fresh) == all_frames(after)
    assert "stale" not in capsys.readouterr().err
    counts_after = json.loads(collection_path(layout, "posttrain").read_text())["counts"]

    key = run_key(some_rel)
    layout.result_path(key).unlink()
    atomic.remove_tree(layout.run_dir(key))
    again = load_collection(layout, "posttrain", horizon=HORIZON, splits=SPLITS)
    assert "is stale: 1 route run removed since it was built; rebuilding" in capsys.readouterr().err
    assert some_rel not in {rel for rel, _ in all_frames(again)}
    assert len(all_frames(again)) == len(all_frames(after)) - (n - 4 - HORIZON)
    assert json.loads(collection_path(layout, "posttrain").read_text())["counts"] != counts_after


def test_load_collection_without_rebuild_refuses_a_stale_file_in_one_line(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    add_run_copy(root, next(iter(finished_frames(root))), "town_9999_route9_rep1")
    with pytest.raises(ToolError, match="is stale: 1 route run added") as error:
        load_collection(Layout(root), "pretrain", horizon=HORIZON, rebuild=False)
    assert "\n" not in str(error.value) and "bin/build-buckets --root" in str(error.value)


def test_posttrain_follows_the_horizon_of_the_callers_cache_rebuilt_or_refused_in_one_line(built, tmp_path, capsys):
    root = copy_root(built, tmp_path / "root")
    layout, longer = Layout(root), HORIZON + 2
    with pytest.raises(ToolError) as error:
        load_collection(layout, "posttrain", horizon=longer, rebuild=False)
    message = str(error.value)
    assert "\n" not in message
    assert f"was built for horizon {HORIZON}, the cache being read has horizon {longer}" in message
    assert f"bin/build-buckets --root {root} --collection posttrain --horizon {longer}" in message
    pretrain = load_collection(layout, "pretrain", horizon=longer, rebuild=False)  # takes every frame: no horizon
    assert "horizon" not in pretrain.settings

    coll = load_collection(layout, "posttrain", horizon=longer, splits=SPLITS)
    assert f"horizon {HORIZON}, the cache being read has horizon {longer}; rebuilding" in capsys.readouterr().err
    assert coll.settings["horizon"] == longer and coll.horizon == longer
    indices: dict[str, set[int]] = {}
    for rel, index in all_frames(coll):
        indices.setdefault(rel, set()).add(index)
    assert indices == {rel: set(range(4, n - longer)) for rel, n in finished_frames(root).items()}
    # a later build without --horizon keeps the file's; --horizon sets it back
    kept = build_buckets("--root", str(root), "--collection", "posttrain")
    assert kept.returncode == 0 and "is up to date" in kept.stderr
    back = build_buckets("--root", str(root), "--collection", "posttrain", "--horizon", str(HORIZON))
    assert back.returncode == 0 and f"horizon {HORIZON} from --horizon" in back.stderr
    assert load_collection(layout, "posttrain", horizon=HORIZON, rebuild=False).horizon == HORIZON


def test_a_rebuild_keeps_the_holdout_rule_the_file_was_built_with(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    scenarios = sorted({run_key(rel).scenario for rel in finished_frames(root)})
    keep = f"scenario:{scenarios[-1]}"
    proc = build_buckets("--root", str(root), "--collection", "pretrain", "--holdout", keep)
    assert proc.returncode == 0, proc.stderr
    add_run_copy(root, next(iter(finished_frames(root))), "town_9999_route9_rep1")
    coll = load_collection(Layout(root), "pretrain", horizon=HORIZON)
    assert coll.holdout == keep and coll.settings["holdout"] == keep
    assert {run_key(rel).scenario for rel, _ in coll.frames("val")} == {scenarios[-1]}


def test_an_unchanged_root_is_left_alone_and_force_rebuilds(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    path = collection_path(Layout(root), "pretrain")
    mtime = path.stat().st_mtime_ns
    proc = build_buckets("--root", str(root), "--collection", "pretrain")
    assert proc.returncode == 0 and "is up to date" in proc.stderr
    assert path.stat().st_mtime_ns == mtime
    forced = build_buckets("--root", str(root), "--collection", "pretrain", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "4 read, 0 unchanged" in forced.stderr and path.stat().st_mtime_ns != mtime


def test_buckets_copied_from_another_dataset_are_refused_in_one_line_and_left_untouched(built, collected_root,
                                                                                        tmp_path):
    other = copy_root(collected_root, tmp_path / "other")
    manifest = Layout(other).manifest
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "dataset_id": uuid.uuid4().hex}))
    target = collection_path(Layout(other), "pretrain")
    target.parent.mkdir()
    shutil.copy2(collection_path(Layout(built), "pretrain"), target)
    content, before = target.read_bytes(), tree(other)

    with pytest.raises(ToolError) as error:
        load_collection(Layout(other), "pretrain", horizon=HORIZON)
    message = str(error.value)
    assert "\n" not in message and str(target) in message and "another dataset" in message
    assert f"bin/build-buckets --root {other} --collection pretrain --force" in message

    proc = build_buckets("--root", str(other), "--collection", "pretrain")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("buckets: ") and "--force" in proc.stderr
    assert target.read_bytes() == content and tree(other) == before

    forced = build_buckets("--root", str(other), "--collection", "pretrain", "--force")
    assert forced.returncode == 0, forced.stderr
    rebuilt = load_collection(Layout(other), "pretrain", horizon=HORIZON, rebuild=False)
    assert rebuilt.built_from["dataset_id"] == dataset_id(Layout(other))


def _only_failed(root: Path) -> None:
    layout = Layout(root)
    for key in layout.iter_runs():
        route_id = json.loads(layout.result_path(key).read_text())["_checkpoint"]["records"][0]["route_id"]
        atomic.write_json(layout.result_path(key), RouteRecord(route_id, "Failed").to_result())
        assert read_status(layout.result_path(key)) == "Failed"


BAD_INPUTS = {
    # name: (how to make the root from the collected one or None, extra args, expected in the message)
    "missing_root": ("absent", [], "no such dataset root"),
    "no_manifest": ("no-manifest", [], "no manifest.json"),
    "empty_dataset": ("empty", [], "no route runs in"),
    "only_failed_routes": ("failed", [], "no finished route runs in {root}: 4 failed; see bin/progress {root}"),
    "unknown_collection": ("built", ["--collection", "finetune"], "--collection finetune: unknown collection"),
    "unknown_scenario_holdout": ("built", ["--holdout", "scenario:Nope"],
                                 "scenario types: NoScenario, SignalizedJunctionRightTurn"),
    "unknown_town_holdout": ("built", ["--holdout", "town:Town99"], "towns: town"),
    "holdout_leaving_no_training_frames": ("built", ["--holdout", "town:town"], "leaves no training frames"),
    "malformed_holdout": ("built", ["--holdout", "sideways"], "--holdout sideways: unknown rule; expected stratified, "
                          "auto, town:NAME"),
    "fractions_adding_up_to_1": ("built", ["--val-fraction", "0.5", "--test-fraction", "0.5"],
                                 "add up to 1: they must leave routes for training"),
    "fraction_leaving_test_empty": ("built", ["--test-fraction", "0"], "--test-fraction 0.0: leaves that split empty"),
    "fraction_above_1": ("built", ["--val-fraction", "1.5"], "--val-fraction 1.5: expected a number from 0.0 to 1.0"),
    "val_fraction_with_a_val_rule": ("built", ["--holdout", "town:town", "--val-fraction", "0.2"],
                                     "--val-fraction 0.2: only with --holdout stratified"),
    "split_seed_not_an_integer": ("built", ["--split-seed", "x"], "--split-seed 'x': expected an integer"),
    "weights_of_an_unknown_bucket": ("built", ["--weights", "{weights}"], "unknown bucket 'cruise'"),
    "horizon_out_of_range": ("built", ["--horizon", "0"], "--horizon 0: expected an integer from 1 to 100"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_with_nonzero_exit_and_nothing_changed(case, built, collected_root, tmp_path):
    kind, args, expected = BAD_INPUTS[case]
    root = tmp_path / "root"
    if kind == "built":
        root = built
    elif kind == "no-manifest":
        (root / "data" / "S" / "town_0000_route0_rep0" / "frames").mkdir(parents=True)
    elif kind == "empty":
        update_manifest(Layout(root), {"routes_dir": "/routes"}, {})
    elif kind == "failed":
        copy_root(collected_root, root)
        _only_failed(root)
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"cruise": 2}))
    before = tree(root) if root.exists() else None
    proc = build_buckets("--root", str(root), *[a.format(weights=weights) for a in args])
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("buckets: "), proc.stderr
    assert expected.format(root=root) in proc.stderr
    assert (tree(root) if root.exists() else None) == before


def test_show_prints_the_buckets_of_each_collection_fresh_then_stale(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    proc = run_tool(PYTHON, "-m", "tools.buckets", "show", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    for name in COLLECTIONS:
        assert f"{collection_path(Layout(root), name)}: fresh" in proc.stdout
    coll = load_collection(Layout(root), "posttrain", horizon=HORIZON, rebuild=False)
    turn_train = next(b for b in coll.buckets if b.name == "turn" and b.split == "train")
    assert any(line.split() == ["turn", "train", str(len(turn_train.frames)), "2"] for line in proc.stdout.splitlines())
    add_run_copy(root, next(iter(finished_frames(root))), "town_9999_route9_rep1")
    stale = run_tool(PYTHON, "-m", "tools.buckets", "show", "--root", str(root), "--collection", "posttrain")
    assert "posttrain.json: stale: 1 route run added since it was built" in stale.stdout


def test_an_unreadable_frame_is_reported_and_left_out_with_the_posttrain_frames_that_need_it(collected_root,
                                                                                             tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    rel, n = max(finished_frames(root).items(), key=lambda item: item[1])
    broken = frame_file(layout, (rel, 30))
    broken.write_bytes(broken.read_bytes()[:100])
    layout.run_measurements(run_key(rel)).unlink()  # read frame by frame (its measurements index would be read)
    proc = build_buckets("--root", str(root))
    assert proc.returncode == 0, proc.stderr
    assert f"buckets: {broken}: unreadable frame, left out" in proc.stderr
    pre = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    post = load_collection(layout, "posttrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    pre_idx = {i for r, i in all_frames(pre) if r == rel}
    post_idx = {i for r, i in all_frames(post) if r == rel}
    assert pre_idx == set(range(n)) - {30}
    assert post_idx == set(range(4, n - HORIZON)) - set(range(30 - HORIZON, 31))


def test_the_measurements_index_gives_the_buckets_the_frames_give_and_one_that_lists_other_frames_is_ignored(
        collected_root, tmp_path):
    from tools.dataset.frames import read_measurements, read_run_measurements, write_run_measurements

    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    finished = finished_frames(root)
    for rel, n in finished.items():  # every run of the collection wrote its index: its frames' measurements
        index = read_run_measurements(layout.run_measurements(run_key(rel)))
        assert index is not None and len(index.measurements) == n
        assert index.measurements[n // 2] == read_measurements(frame_file(layout, (rel, n // 2)))
    assert build_buckets("--root", str(root)).returncode == 0
    with_index = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    # An index that lists other frames than the run has (one frame too few) is ignored: its frames are read.
    rel = next(iter(finished))
    index = read_run_measurements(layout.run_measurements(run_key(rel)))
    write_run_measurements(layout.run_measurements(run_key(rel)), "nowhere", index.measurements[:-1],
                           fingerprints=index.fingerprints[:-1])
    for other in list(finished)[1:]:
        layout.run_measurements(run_key(other)).unlink()
    assert build_buckets("--root", str(root), "--force").returncode == 0
    from_frames = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    for split in SPLITS:
        assert sorted(with_index.frames(split)) == sorted(from_frames.frames(split))
    assert "nowhere" not in layout.bucket_index.read_text()


def test_two_builders_at_once_leave_one_valid_file(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    cmd = [PYTHON, "-m", "tools.buckets", "build", "--root", str(root), "--collection", "posttrain"]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert load_collection(Layout(root), "posttrain", horizon=HORIZON, rebuild=False).frames("train")
    assert [p.name for p in (root / "buckets").iterdir() if p.name.startswith(".tmp-")] == [".tmp-build.lock"]


def test_a_new_manifest_gets_a_dataset_id_and_an_older_one_a_stable_derived_id(tmp_path):
    layout = Layout(tmp_path / "root")
    update_manifest(layout, {"routes_dir": "/r"}, {})
    made = json.loads(layout.manifest.read_text())["dataset_id"]
    assert len(made) == 32 and int(made, 16) >= 0 and dataset_id(layout) == made

    older = json.loads(layout.manifest.read_text())
    del older["dataset_id"]
    layout.manifest.write_text(json.dumps(older))
    derived = dataset_id(layout)
    assert derived != made and dataset_id(layout) == derived
    update_manifest(layout, {"routes_dir": "/r"}, {})  # the next collection records the same id
    assert json.loads(layout.manifest.read_text())["dataset_id"] == derived

    layout.manifest.unlink()
    with pytest.raises(ToolError, match="no manifest.json"):
        dataset_id(layout)


def test_help_of_the_wrapper_and_the_tool():
    proc = build_buckets("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: bin/build-buckets ")
    tool = run_tool(PYTHON, "-m", "tools.buckets", "build", "--help")
    text = tool.stdout + tool.stderr  # fire prints help on stderr when it is not a terminal
    assert tool.returncode == 0 and "--holdout" in text and "every:N" in text
    assert "stratified" in text and "--split-seed" in text and "--test-fraction" in text


# ----------------------------------------------------------------------------- splits


def test_default_splits_are_stratified_whole_routes_the_same_in_both_collections(built):
    layout = Layout(built)
    colls = {name: load_collection(layout, name, horizon=HORIZON, rebuild=False, splits=SPLITS) for name in COLLECTIONS}
    splits = {name: split_of_runs(c) for name, c in colls.items()}
    for coll in colls.values():
        assert coll.holdout == "stratified" and coll.settings["holdout"] == "stratified"
        assert coll.settings["split_seed"] == 0
        assert coll.settings["val_fraction"] == coll.settings["test_fraction"] == 0.1
        per_split = [{rel for rel, _ in coll.frames(s)} for s in SPLITS]
        assert all(per_split) and sum(map(len, per_split)) == 4  # 4 routes: train 2, val 1, test 1; no run in two
        assert [len(p) for p in per_split] == [2, 1, 1]
    assert splits["pretrain"] == splits["posttrain"]
    # a route's runs are together: repetitions share the split (here: one repetition each, every route whole)
    assert {route_of(rel) for rel in splits["pretrain"]} == {route_of(rel) for rel in finished_frames(built)}


def test_the_balance_table_is_stored_in_the_file_printed_by_build_and_show_and_agrees_with_the_frames(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    layout = Layout(root)
    proc = build_buckets("--root", str(root), "--force")
    assert proc.returncode == 0, proc.stderr
    show = run_tool(PYTHON, "-m", "tools.buckets", "show", "--root", str(root))
    assert show.returncode == 0, show.stderr
    index = json.loads(layout.bucket_index.read_text())["runs"]
    for rel in index:  # the weather class is that of the run's frames (every frame holds the route's weather)
        frame0 = read_frame(frame_file(layout, (rel, 0)), sensors=False)["measurements"]
        assert index[rel]["weather"] == weather_class(frame0["weather"]) != "Default"
    for name in COLLECTIONS:
        data = json.loads(collection_path(layout, name).read_text())
        coll = load_collection(layout, name, horizon=HORIZON, rebuild=False, splits=SPLITS)
        table = data["splits"]["balance"]
        assert data["format"] == BUCKETS_FORMAT == 3
        assert data["splits"]["rule"] == "stratified" and data["splits"]["seed"] == 0
        for split in SPLITS:
            frames = coll.frames(split)
            runs = {rel for rel, _ in frames}
            row = table[split]
            assert row["frames"] == len(frames) and row["runs"] == len(runs) == row["routes"]
            assert row["town"] == ({index[next(iter(runs))]["town"]: len(frames)} if frames else {})
            assert row["scenario"] == dict(Counter(run_key(rel).scenario for rel, _ in frames))
            assert row["weather"] == dict(Counter(index[rel]["weather"] for rel, _ in frames))
            assert data["splits"]["routes"][split] == len(runs)
        # printed: the routes, runs and frames rows with a column per split, then the shares
        for text in (proc.stderr, show.stdout):
            lines = text.splitlines()
            heads = [i for i, line in enumerate(lines) if line.split() == ["all", *SPLITS]]
            assert len(heads) == 2  # pretrain's table, then posttrain's
            start = heads[COLLECTIONS.index(name)]
            rows = {line.split()[0]: line.split()[1:] for line in lines[start + 1: start + 4]}
            assert rows["frames"] == [str(sum(table[s]["frames"] for s in SPLITS)), *(str(table[s]["frames"])
                                                                                        for s in SPLITS)]
            assert rows["routes"] == ["4", "2", "1", "1"]
            weather = next(iter(table["test"]["weather"]))
            assert any(line.split()[:2] == ["weather", weather] and line.split()[-1] == "100.0%"
                       for line in lines[start:])


def synthetic_runs(towns: int, scenarios: int, weathers: int, routes: int, repetitions: int = 2) -> dict:
    """{rel: {"town", "weather", "frames"}}: `routes` routes per stratum, each driven `repetitions` times."""
    runs = {}
    for t in range(towns):
        for s in range(scenarios):
            for w in range(weathers):
                for r in range(routes):
                    for k in range(repetitions):
                        runs[f"data/Scenario{s}/T{t}_w{w}_{r:03d}_rep{k}"] = {"town": f"Town{t}", "weather": f"W{w}",
                                                                              "frames": 50}
    return runs


def test_stratified_splits_keep_routes_whole_give_every_stratum_its_share_and_repeat_with_the_seed():
    runs = synthetic_runs(towns=3, scenarios=2, weathers=2, routes=20)
    first = assign(SplitSettings(), runs)
    by_route: dict[str, set[str]] = {}
    for rel, split in first.split.items():
        by_route.setdefault(route_of(rel), set()).add(split)
    assert len(by_route) == 240 and all(len(s) == 1 for s in by_route.values())  # repetitions together
    per_stratum: dict[tuple, Counter] = {}
    for rel, split in first.split.items():
        per_stratum.setdefault((runs[rel]["town"], run_key(rel).scenario, runs[rel]["weather"]), Counter())[split] += 1
    assert len(per_stratum) == 12
    for counts in per_stratum.values():  # 20 routes (40 runs) a stratum: 2 routes each in val and test
        assert counts["val"] == counts["test"] == 4 and counts["train"] == 32
    assert assign(SplitSettings(), dict(reversed(list(runs.items())))) == first  # not the listing order
    assert assign(SplitSettings(seed=0), runs) == first
    other = assign(SplitSettings(seed=1), runs)
    assert other.split != first.split and Counter(other.split.values()) == Counter(first.split.values())
    wider = assign(SplitSettings(val_fraction=0.25, test_fraction=0.25), runs)
    assert Counter(wider.split.values()) == {"train": 240, "val": 120, "test": 120}
    # A route added to one stratum moves routes of that stratum only: a growing dataset keeps its splits.
    grown = assign(SplitSettings(), {**runs, "data/Scenario1/T2_w0_999_rep0": {"town": "Town2", "weather": "W0",
                                                                               "frames": 50}})
    moved = {rel for rel in runs if grown.split[rel] != first.split[rel]}
    assert all((runs[rel]["town"], run_key(rel).scenario, runs[rel]["weather"]) == ("Town2", "Scenario1", "W0")
               for rel in moved)


def test_one_route_strata_go_whole_to_one_split_and_share_the_held_out_splits_between_them():
    # every stratum holds one route: a town and scenario type's 20 weathers share val and test evenly (2 each,
    # give or take one: the golden-ratio offsets), where independent draws would give anything from 0 to 6
    strata = {f"S/route{w:02d}": ("Town01", "S", f"W{w:02d}") for w in range(20)}
    seen = Counter()
    for seed in range(40):
        counts = Counter(stratified(strata, {"test": 0.1, "val": 0.1}, seed).values())
        assert 1 <= counts["val"] <= 3 and 1 <= counts["test"] <= 3 and sum(counts.values()) == 20, counts
        seen[(counts["test"], counts["val"])] += 1
    assert seen[(2, 2)] > 20


@pytest.mark.parametrize("routes,expected", [(1, {"train": 1}), (2, {"train": 1, "val": 1}),
                                             (3, {"train": 1, "val": 1, "test": 1}),
                                             (4, {"train": 2, "val": 1, "test": 1})])
def test_a_small_dataset_fills_train_first_then_val_then_test_and_says_which_split_stays_empty(routes, expected):
    runs = {f"data/S/r{i}_rep0": {"town": "t", "weather": "w", "frames": 10} for i in range(routes)}
    for seed in range(6):
        result = assign(SplitSettings(seed=seed), runs)
        assert Counter(result.split.values()) == expected
        empty = [s for s in ("val", "test") if s not in expected]
        assert [note.split("; the ")[-1] for note in result.notes] == [f"{s} split is empty" for s in empty]


def test_a_val_rule_with_a_test_fraction_draws_test_from_the_routes_the_rule_leaves(built, tmp_path):
    root = copy_root(built, tmp_path / "root")
    fewest = min(Counter(run_key(rel).scenario for rel in finished_frames(root)).items(), key=lambda x: (x[1], x[0]))[0]
    proc = build_buckets("--root", str(root), "--holdout", f"scenario:{fewest}", "--test-fraction", "0.3",
                         "--split-seed", "5")
    assert proc.returncode == 0, proc.stderr
    coll = load_collection(Layout(root), "pretrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    scenario = {s: {run_key(rel).scenario for rel, _ in coll.frames(s)} for s in SPLITS}
    assert scenario["val"] == {fewest} and scenario["test"] and fewest not in scenario["test"] | scenario["train"]
    assert coll.settings["test_fraction"] == 0.3 and coll.settings["split_seed"] == 5
    assert coll.settings["val_fraction"] is None
    again = build_buckets("--root", str(root), "--holdout", f"scenario:{fewest}", "--test-fraction", "0.3",
                          "--split-seed", "5", "--force")
    assert again.returncode == 0, again.stderr
    assert all_frames(load_collection(Layout(root), "pretrain", horizon=HORIZON, rebuild=False,
                                      splits=SPLITS)) == all_frames(coll)


def _as_format_1(path: Path) -> None:
    """Rewrite a bucket file as the builder before the test split wrote it: format 1, train and val only,
    holdout auto, no split settings and no balance table."""
    data = json.loads(path.read_text())
    for b in data["buckets"]:
        b["split"] = "train" if b["split"] == "test" else b["split"]
    merged: dict[tuple, dict] = {}
    for b in data["buckets"]:
        key = (b["name"], b["split"])
        if key in merged:
            merged[key]["frames"].update(b["frames"])
        else:
            merged[key] = b
    data["buckets"] = list(merged.values())
    for key in ("split_seed", "val_fraction", "test_fraction", "weather"):
        data["settings"].pop(key)
    data["settings"]["holdout"] = "auto"
    data.pop("splits")
    path.write_text(json.dumps({**data, "format": 1}))


def test_a_format_1_file_reads_and_is_rebuilt_as_outdated_with_one_line_and_a_newer_one_is_refused(built, tmp_path,
                                                                                                  capsys):
    root = copy_root(built, tmp_path / "root")
    layout = Layout(root)
    path = collection_path(layout, "posttrain")
    _as_format_1(path)
    old, _ = read_collection(path)  # readable: train and val as the old builder wrote them
    assert old.format == 1 and old.frames("val") and old.frames("train") and old.frames("test") == []
    with pytest.raises(ToolError) as error:
        load_collection(layout, "posttrain", horizon=HORIZON, rebuild=False, splits=("train", "val"))
    message = str(error.value)
    assert "\n" not in message
    assert "is of bucket file format 1 (no test split, no balance table, no checksum)" in message
    assert f"bin/build-buckets --root {root} --collection posttrain --horizon {HORIZON}" in message
    shown = run_tool(PYTHON, "-m", "tools.buckets", "show", "--root", str(root), "--collection", "posttrain")
    assert "posttrain.json: outdated: of bucket file format 1" in shown.stdout and "no balance table" in shown.stdout

    new = load_collection(layout, "posttrain", horizon=HORIZON, splits=SPLITS)
    err = capsys.readouterr().err
    assert f"{path} is of bucket file format 1 (no test split, no balance table, no checksum), this tool writes " \
           "format 3; rebuilding" in err
    assert "split rule default (format-1 posttrain.json had auto" in err
    assert new.format == 3 and new.holdout == "stratified" and new.frames("test")
    assert all_frames(new) == all_frames(load_collection(Layout(built), "posttrain", horizon=HORIZON, rebuild=False,
                                                         splits=SPLITS))

    path.write_text(json.dumps({**json.loads(path.read_text()), "format": 4}))
    with pytest.raises(ToolError, match="bucket file format 4, this tool reads format 1 or 2 or 3; rebuild it"):
        load_collection(layout, "posttrain", horizon=HORIZON)


def test_training_reads_train_and_val_frames_and_never_a_test_frame(train_root, tmp_path):
    """A tiny training run with every read of a sample recorded (RecordDataset._read, the one place training
    reads the cache): its training batches and its full validation touch train and val frames only."""
    from tools.train.data import find_cache

    layout = Layout(train_root)
    coll = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False, splits=SPLITS)
    test = set(coll.frames("test"))
    cache_root, _ = find_cache(layout)
    from tools.dataset.cache import record_path

    assert test and all(record_path(cache_root, run, i).is_file() for run, i in test)  # it could have been read
    seen = tmp_path / "seen.json"
    recorder = (
        "import atexit, json, runpy, sys\n"
        "import tools.train.data as data\n"
        "seen, original = set(), data.RecordDataset._read\n"
        "def _read(self, item):\n"
        "    seen.add((str(item[0]), int(item[1])))\n"
        "    return original(self, item)\n"
        "data.RecordDataset._read = _read\n"
        f"atexit.register(lambda: open({str(seen)!r}, 'w').write(json.dumps(sorted(seen))))\n"
        "sys.argv = ['tools.train', *sys.argv[1:]]\n"
        "runpy.run_module('tools.train', run_name='__main__')\n")
    proc = run_tool(PYTHON, "-c", recorder, "pretrain", f"root={train_root}", f"logdir={tmp_path / 'run'}",
                    "batch_size=4", "max_steps=3", "warmup_steps=1", "log_every=1", "image_every=0", "val_samples=0",
                    timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    read = {(run, i) for run, i in json.loads(seen.read_text())}
    assert not read & test
    assert read & set(coll.frames("train")) and set(coll.frames("val")) <= read  # every val frame: validation
    assert read <= set(coll.frames("train")) | set(coll.frames("val"))
    # and the collection training loads holds no test split at all
    with pytest.raises(ValueError, match="the test split was not read"):
        load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False).frames("test")


@pytest.mark.parametrize("weather,name", [
    ({"cloudiness": 5, "precipitation": 0, "fog_density": 0, "sun_altitude_angle": 60}, "ClearNoon"),
    ({"cloudiness": 60, "precipitation": 0, "fog_density": 10, "sun_altitude_angle": 30}, "CloudyNoon"),
    ({"cloudiness": 90, "precipitation": 60, "fog_density": 20, "sun_altitude_angle": 45}, "RainNoon"),
    ({"cloudiness": 20, "precipitation": 0, "fog_density": 5, "sun_altitude_angle": 10}, "ClearSunset"),
    ({"cloudiness": 10, "fog_density": 80, "sun_altitude_angle": -20}, "FogNight"),
    ({}, "Default"), (None, "Default"), ({"precipitation": "heavy", "sun_altitude_angle": 70}, "ClearNoon"),
])
def test_weather_classes_name_a_condition_and_a_time_of_day(weather, name):
    assert weather_class(weather) == name


# ----------------------------------------------------------------------------- the rules, frame by frame

#: Box ids of the scenario's actors in the synthetic frames below; 99 is background traffic.
ACTORS = [41, 42, 43]


def frame(scenario: dict | None = None, **values) -> Measurements:
    """A straight, lane-following frame cruising at 8 m/s, with `values` changed and `scenario` running."""
    m = {"frame": 10, "tick": 100, "time": 5.0, "ego": {"x": 0.0, "y": 0.0, "z": 0.0, "yaw": 0.0, "speed": 8.0},
         "speed": 8.0, "acceleration": 0.0, "target_speed": 8.0, "speed_limit": 8.0, "command": RoadOption.LANEFOLLOW,
         "next_command": RoadOption.LANEFOLLOW, "target_point": [10.0, 0.0], "target_point_next": [30.0, 0.0],
         "route": [[2.0 * i, 0.0] for i in range(20)], "junction": False, "light_hazard": False,
         "vehicle_hazard": False, "scenario": scenario, **values}
    return Measurements.from_dict(m)


def scenario(kind: str, distance: float, **values) -> dict:
    types = {"obstacle": "Accident", "pedestrian": "DynamicObjectCrossing", "junction": "NonSignalizedJunctionLeftTurn"}
    return {"name": f"{types[kind]}_1", "type": types[kind], "kind": kind, "actors": list(ACTORS),
            "distance": distance, **values}


STANDING = {"speed": 0.0, "target_speed": 0.0}


def test_scenario_buckets_are_tried_first_and_every_bucket_has_default_weights():
    assert BUCKETS == SCENARIO_BUCKETS + BEHAVIOUR_BUCKETS
    assert SCENARIO_BUCKETS == ("obstacle_passing", "pedestrian_yielding", "junction_flow")
    assert RULES["version"] >= 2
    for name, weights in DEFAULT_WEIGHTS.items():
        assert set(weights) == set(BUCKETS), name


@pytest.mark.parametrize("values, distance", [
    ({"reason": "passing", "reason_detail": "passing vehicle 42"}, 45.0),  # the pass, beyond the window
    ({**STANDING, "reason": "leader", "reason_detail": "vehicle 41 at 3.0 m, 0.0 m/s",
      "leader": {"id": 41, "gap": 3.0, "speed": 0.0}}, 40.0),  # standing behind the obstacle: not `stop`
    ({"speed": 5.0, "target_speed": 3.0, "reason": "leader", "leader": {"id": 43, "gap": 25.0, "speed": 0.0}},
     70.0),  # slowing towards it, its id only in `leader`
    ({**STANDING, "reason": "collision", "reason_detail": "vehicle 42 would meet the ego in 1.5 s"},
     50.0),  # waiting for a gap in the TwoWays oncoming flow
    ({}, 30.0), ({}, 0.0), ({}, -10.0),  # cruising beside the obstacle: the window
])
def test_obstacle_passing(values, distance):
    assert classify(frame(scenario("obstacle", distance), **values)) == "obstacle_passing"


@pytest.mark.parametrize("values, distance, behaviour", [
    ({}, 30.5, "follow"), ({}, -10.5, "follow"), ({}, 120.0, "follow"),  # outside the window, cruising
    ({**STANDING, "reason": "leader", "reason_detail": "vehicle 99 at 3.0 m, 0.0 m/s",
      "leader": {"id": 99, "gap": 3.0, "speed": 0.0}}, 60.0, "stop"),  # a background vehicle, not the obstacle
    ({"reason": "", "leader": {"id": 41, "gap": 60.0, "speed": 0.0}}, 80.0, "follow"),  # seen, not reacted to
    ({**STANDING, "reason": "junction", "reason_detail": "vehicle 99 would meet the ego in 4.5 s",
      "leader": {"id": 42, "gap": 55.0, "speed": 0.0}}, 64.0, "stop"),  # yielding to another; the obstacle only seen
    ({"speed": 2.0, "target_speed": 8.0, "reason": "light", "reason_detail": "light 12:3 green in 4.0 m"}, 60.0,
     "start"),
])
def test_an_obstacle_scenario_the_ego_is_not_dealing_with_leaves_the_frame_to_its_behaviour_bucket(values, distance,
                                                                                                   behaviour):
    assert classify(frame(scenario("obstacle", distance), **values)) == behaviour
    assert classify(frame(None, **values)) == behaviour


@pytest.mark.parametrize("values, distance", [
    ({"speed": 6.0, "target_speed": 0.0, "reason": "collision", "reason_detail": "vehicle 41 would meet the ego in "
      "1.2 s"}, 25.0),  # braking for the walker, before the window
    ({**STANDING, "reason": "junction", "reason_detail": "vehicle 42 would meet the ego in 0.8 s"},
     30.0),  # PedestrianCrossing: the walkers cross just after a junction
    ({**STANDING, "reason": "leader", "leader": {"id": 43, "gap": 3.0, "speed": 0.0},
      "reason_detail": "vehicle 43 at 3.0 m, 0.0 m/s"}, 8.0),  # the walker in the lane ahead
    ({"speed": 2.5, "target_speed": 3.4}, 5.0),  # pulling away once it has crossed
    ({"speed": 3.5, "target_speed": 4.4, "reason": "curve"}, -5.0),
    ({"speed": 0.0, "target_speed": 1.0}, 15.0),
])
def test_pedestrian_yielding(values, distance):
    assert classify(frame(scenario("pedestrian", distance), **values)) == "pedestrian_yielding"


@pytest.mark.parametrize("values, distance, behaviour", [
    ({}, 10.0, "follow"),  # at the crossing at its target speed: not yielding
    ({"speed": 7.5, "target_speed": 8.0}, 10.0, "follow"),  # below the target by no more than the margin
    ({"speed": 0.0, "target_speed": 1.0}, 15.5, "start"),  # pulling away, outside the window (a light before it)
    ({"speed": 1.0, "target_speed": 6.0}, -5.5, "start"),
    ({"speed": 3.0, "target_speed": 3.0, "reason": "curve", "leader": {"id": 41, "gap": 12.0, "speed": 1.0}}, 14.0,
     "follow"),  # the walker in the path, but the curve limits the speed
    ({"speed": 6.0, "target_speed": 0.0, "reason": "collision", "reason_detail": "vehicle 99 would meet the ego in "
      "1.2 s", "vehicle_hazard": True}, 40.0, "hazard"),  # braking for another actor
])
def test_a_pedestrian_scenario_without_yielding_leaves_the_frame_to_its_behaviour_bucket(values, distance, behaviour):
    assert classify(frame(scenario("pedestrian", distance), **values)) == behaviour
    assert classify(frame(None, **values)) == behaviour


def test_junction_flow_is_yielding_to_or_following_the_scenarios_traffic_and_nothing_else():
    flow = scenario("junction", 15.0)
    yielding = {**STANDING, "reason": "junction", "reason_detail": "vehicle 42 would meet the ego in 2.0 s",
                "junction": True}
    assert classify(frame(flow, **yielding)) == "junction_flow"
    assert classify(frame(flow, speed=5.0, target_speed=0.0, reason="collision",
                          reason_detail="vehicle 41 would meet the ego in 1.0 s")) == "junction_flow"
    assert classify(frame(flow, speed=4.0, target_speed=4.0, reason="leader",
                          leader={"id": 43, "gap": 8.0, "speed": 4.0})) == "junction_flow"
    # background traffic, a red light, crossing with nothing to yield to: the behaviour buckets
    assert classify(frame(flow, **{**yielding, "reason_detail": "vehicle 99 would meet the ego in 2.0 s"})) == "stop"
    assert classify(frame(flow, **STANDING, reason="light", reason_detail="light 12:3 red in 1.0 m",
                          light={"id": "12:3", "distance": 1.0, "state": "red"})) == "stop"
    assert classify(frame(flow, junction=True)) == "junction"
    assert classify(frame(flow, command=RoadOption.LEFT, reason="passing")) == "turn"  # passing: obstacles only


@pytest.mark.parametrize("values", [
    {"reason": "passing", "reason_detail": "passing vehicle 42"},
    {**STANDING, "reason": "leader", "leader": {"id": 41, "gap": 3.0, "speed": 0.0}},
    {**STANDING, "reason": "collision", "reason_detail": "vehicle 41 would meet the ego in 1.0 s"},
    {"speed": 1.0, "target_speed": 6.0, "reason": "junction", "reason_detail": "vehicle 42 would meet the ego in 1 s",
     "junction": True},
])
def test_a_frame_without_a_scenario_never_goes_to_a_scenario_bucket(values):
    assert classify(frame(None, **values)) in BEHAVIOUR_BUCKETS


def test_a_frame_recorded_before_the_scenario_field_still_classifies_as_before():
    old = frame(None, **STANDING).to_dict()
    del old["scenario"]
    m = Measurements.from_dict(old)
    assert m.scenario is None and classify(m) == "stop"
    moving = frame(None, reason="passing").to_dict()
    del moving["scenario"]
    assert classify(Measurements.from_dict(moving)) == "follow"


@pytest.mark.parametrize("broken", [
    {"kind": "obstacle"},  # no actors, no distance
    {"kind": "pedestrian", "actors": None, "distance": None},
    {"kind": "weather", "actors": ACTORS, "distance": 0.0},  # a kind no bucket knows
    {"kind": "junction", "actors": ["x"], "distance": "near"},
])
def test_a_scenario_measurement_missing_parts_falls_back_to_the_behaviour_buckets(broken):
    values = {**STANDING, "reason": "leader", "leader": {"id": 41, "gap": 3.0, "speed": 0.0}}
    assert classify(frame(broken, **values)) == "stop"


def test_the_measurement_reader_takes_and_refuses_the_frames_read_frame_does(collected_root, tmp_path):
    from tools.dataset.frames import FrameError, pack_frame, read_frame
    from tools.dataset.frames import read_measurements as builder_reads
    from tools.dataset.measurements import Measurements

    def frames_reads(path):  # what a full read makes of the frame's measurements
        try:
            return Measurements.from_dict(read_frame(path, sensors=False)["measurements"])
        except (KeyError, TypeError, ValueError) as e:
            raise FrameError(str(e)) from None

    layout = Layout(collected_root)
    rel = next(iter(finished_frames(collected_root)))
    good = frame_file(layout, (rel, 5)).read_bytes()
    assert builder_reads(frame_file(layout, (rel, 5))) == frames_reads(frame_file(layout, (rel, 5)))
    m = frames_reads(frame_file(layout, (rel, 5)))
    cases = {f"truncated_{n}": good[:n] for n in (0, 1, 50, len(good) // 2, len(good) - 1)}
    cases |= {"extra_bytes": good + b"\x00", "not_msgpack": b"\xc1" * 40, "a_list": msgpack.packb([1, 2]),
              "other_format": msgpack.packb({"format": 2, "measurements": m.to_dict(), "sensors": {}}),
              "no_sensors": msgpack.packb({"format": 1, "measurements": m.to_dict()}),
              "measurements_missing_a_key": msgpack.packb({"format": 1, "measurements": {"speed": 1.0}, "sensors": {}}),
              "no_boxes_no_sensor_arrays": pack_frame(5, m, [], {}, run="NoScenario/r_rep0")}
    for name, data in cases.items():
        path = tmp_path / f"{name}.msgpack"
        path.write_bytes(data)
        try:
            expected = frames_reads(path)
        except FrameError:
            expected = FrameError
        except KeyError:  # read_frame without a sensors map: the builder calls that unreadable too
            expected = FrameError
        try:
            got = builder_reads(path)
        except FrameError as e:
            assert str(path) in str(e) and "\n" not in str(e)
            got = FrameError
        assert got == expected, name
    assert builder_reads(tmp_path / "no_boxes_no_sensor_arrays.msgpack") == m


def test_frame_count_is_the_number_of_frame_paths(tmp_path):
    from tools.dataset.layout import RunKey

    layout, key = Layout(tmp_path), RunKey("S", "town_0000_route0_rep0")
    assert layout.frame_count(key) == len(layout.frame_paths(key)) == 0
    layout.frames_dir(key).mkdir(parents=True)
    for name in ("00000.msgpack", "00001.msgpack", ".hidden.msgpack", ".tmp-00002.msgpack", "notes.txt"):
        (layout.frames_dir(key) / name).write_bytes(b"x")
    (layout.frames_dir(key) / "00003.msgpack").mkdir()
    assert layout.frame_count(key) == len(layout.frame_paths(key)) == 4
