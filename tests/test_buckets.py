"""Buckets: bin/build-buckets and tools.dataset.buckets on a real collected dataset root (real files, real
subprocesses): every frame in one bucket, the posttrain horizon, the held-out split, portable files, the
epoch sampler, stale and foreign files, and each bad input as one line with nothing on disk changed."""

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

from tools.buckets.build import DEFAULT_WEIGHTS
from tools.buckets.rules import BEHAVIOUR_BUCKETS, BUCKETS, RULES, SCENARIO_BUCKETS, classify
from tools.dataset import atomic
from tools.dataset.buckets import (
    COLLECTIONS,
    Bucket,
    Collection,
    collection_path,
    frame_file,
    load_collection,
    run_key,
    run_rel,
)
from tools.dataset.errors import ToolError
from tools.dataset.frames import read_frame
from tools.dataset.layout import Layout
from tools.dataset.manifest import dataset_id, update_manifest
from tools.dataset.measurements import Measurements, RoadOption
from tools.dataset.results import RouteRecord, RunState, read_status, run_state
from tools.dataset.samples import CacheSettings

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


def test_every_frame_of_every_finished_run_is_in_exactly_one_pretrain_bucket(built):
    layout = Layout(built)
    coll = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False)
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
    coll = load_collection(Layout(built), "posttrain", horizon=HORIZON, rebuild=False)
    by_run: dict[str, set[int]] = {}
    for split in ("train", "val"):
        for rel, index in coll.frames(split):
            by_run.setdefault(rel, set()).add(index)
    runs = finished_frames(built)
    assert by_run.keys() == runs.keys()
    for rel, n in runs.items():
        assert by_run[rel] == set(range(4, n - HORIZON)), rel
    assert coll.settings["horizon"] == HORIZON and coll.settings["skip_first"] == 4


def test_auto_holdout_puts_the_scenario_type_with_fewest_frames_in_val_only(built):
    per_scenario = Counter()
    for rel, n in finished_frames(built).items():
        per_scenario[run_key(rel).scenario] += n
    assert len(per_scenario) == 2  # one town, two scenario types: a scenario type is held out
    fewest = min(per_scenario, key=lambda s: (per_scenario[s], s))
    for name in COLLECTIONS:
        coll = load_collection(Layout(built), name, horizon=HORIZON, rebuild=False)
        assert coll.holdout == f"scenario:{fewest}" and coll.settings["holdout"] == "auto"
        assert coll.frames("val") and {run_key(rel).scenario for rel, _ in coll.frames("val")} == {fewest}
        assert coll.frames("train") and fewest not in {run_key(rel).scenario for rel, _ in coll.frames("train")}


def test_bucket_files_are_relative_and_still_load_after_the_root_moves(built, tmp_path):
    original = {name: load_collection(Layout(built), name, horizon=HORIZON, rebuild=False) for name in COLLECTIONS}
    moved = Path(shutil.move(copy_root(built, tmp_path / "a"), tmp_path / "elsewhere" / "b"))
    for name in COLLECTIONS:
        text = collection_path(Layout(moved), name).read_text()
        assert str(built) not in text and str(tmp_path) not in text
        assert all(rel.startswith("data/") for b in json.loads(text)["buckets"] for rel in b["frames"])
        coll = load_collection(Layout(moved), name, horizon=HORIZON, rebuild=False)  # fresh: no rebuild needed
        assert coll.frames("train") == original[name].frames("train")
        assert coll.frames("val") == original[name].frames("val")


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


def test_adding_or_removing_a_run_makes_load_collection_say_stale_and_rebuild(built, tmp_path, capsys):
    root = copy_root(built, tmp_path / "root")
    layout = Layout(root)
    before = load_collection(layout, "posttrain", horizon=HORIZON, rebuild=False)
    train_rel = before.frames("train")[0][0]
    new = add_run_copy(root, train_rel, "town_9999_route9_rep1")

    after = load_collection(layout, "posttrain", horizon=HORIZON)
    err = capsys.readouterr().err
    assert f"{collection_path(layout, 'posttrain')} is stale: 1 route run added since it was built; rebuilding" in err
    assert "1 read, 4 unchanged" in err  # only the new run's frames were read
    n = finished_frames(root)[new]
    assert len(after.frames("train")) == len(before.frames("train")) + n - 4 - HORIZON
    assert new in after.built_from["runs"] and after.holdout == before.holdout
    fresh = load_collection(layout, "posttrain", horizon=HORIZON)  # fresh now: no rebuild
    assert fresh.frames("train") == after.frames("train")
    assert "stale" not in capsys.readouterr().err
    counts_after = json.loads(collection_path(layout, "posttrain").read_text())["counts"]

    key = run_key(train_rel)
    layout.result_path(key).unlink()
    atomic.remove_tree(layout.run_dir(key))
    again = load_collection(layout, "posttrain", horizon=HORIZON)
    assert "is stale: 1 route run removed since it was built; rebuilding" in capsys.readouterr().err
    assert train_rel not in {rel for rel, _ in again.frames("train")}
    assert len(again.frames("train")) == len(after.frames("train")) - (n - 4 - HORIZON)
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

    coll = load_collection(layout, "posttrain", horizon=longer)
    assert f"horizon {HORIZON}, the cache being read has horizon {longer}; rebuilding" in capsys.readouterr().err
    assert coll.settings["horizon"] == longer and coll.horizon == longer
    indices: dict[str, set[int]] = {}
    for rel, index in coll.frames("train") + coll.frames("val"):
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
    "unknown_scenario_holdout": ("built", ["--holdout", "scenario:Nope"], "scenario types: SignalizedJunction"),
    "unknown_town_holdout": ("built", ["--holdout", "town:Town99"], "towns: town"),
    "holdout_leaving_no_training_frames": ("built", ["--holdout", "town:town"], "leaves no training frames"),
    "malformed_holdout": ("built", ["--holdout", "sideways"], "expected auto, town:NAME"),
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
    pre = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False)
    post = load_collection(layout, "posttrain", horizon=HORIZON, rebuild=False)
    pre_idx = {i for split in ("train", "val") for r, i in pre.frames(split) if r == rel}
    post_idx = {i for split in ("train", "val") for r, i in post.frames(split) if r == rel}
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
    with_index = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False)
    # An index that lists other frames than the run has (one frame too few) is ignored: its frames are read.
    rel = next(iter(finished))
    index = read_run_measurements(layout.run_measurements(run_key(rel)))
    write_run_measurements(layout.run_measurements(run_key(rel)), "nowhere", index.measurements[:-1])
    for other in list(finished)[1:]:
        layout.run_measurements(run_key(other)).unlink()
    assert build_buckets("--root", str(root), "--force").returncode == 0
    from_frames = load_collection(layout, "pretrain", horizon=HORIZON, rebuild=False)
    for split in ("train", "val"):
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
    ({"speed": 0.0, "target_speed": 1.0}, 15.5, "follow"),  # pulling away, outside the window (a light before it)
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
              "no_boxes_no_sensor_arrays": pack_frame(5, m, [], {})}
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
