"""A trained checkpoint as a driving policy (tools/evaluate/policy.py), on real checkpoints of the tiny model:
the session's `posttrained` run (2 steps from `pretrained`, conftest.py) and edited copies of it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tools.core.errors import ToolError
from tools.dataset.cache import read_cache_settings, read_record, record_path
from tools.dataset.frames import read_frame
from tools.dataset.layout import Layout, run_rel
from tools.dataset.measurements import Measurements
from tools.dataset.rig import RigConfig
from tools.evaluate.policy import AGENT_CLASSES, AGENT_P, HOLD_CLASSES, Plan, load_policy
from tools.train import checkpoint
from tools.train.data import collate, find_cache
from tools.train.model import ModelConfig, TransFuser


@pytest.fixture(scope="module")
def policy(posttrained):
    return load_policy(posttrained)


@pytest.fixture(scope="module")
def recorded(train_root, policy):
    """(run key, frame index, frame read with the policy's sensors) of a frame in the middle of a run."""
    layout = Layout(train_root)
    key = sorted(layout.iter_runs())[0]
    index = len(layout.frame_paths(key)) // 2
    return key, index, read_frame(layout.frame_path(key, index), sensors=policy.sensor_names)


def step_copy(policy, tmp_path: Path) -> Path:
    """A private copy of the policy's step folder."""
    return Path(shutil.copytree(policy.path, tmp_path / "checkpoints" / policy.path.name))


def edit_config(step: Path, change) -> None:
    """Change a checkpoint's config.json as an older or another writer would have written it: `change` edits
    the dict, and the marker's checksum is made to match (the checkpoint stays intact)."""
    config = json.loads((step / "config.json").read_text())
    change(config)
    (step / "config.json").write_text(json.dumps(config))
    marker = json.loads((step / checkpoint.MARKER).read_text())
    marker["sha256"]["config.json"] = hashlib.sha256((step / "config.json").read_bytes()).hexdigest()
    (step / checkpoint.MARKER).write_text(json.dumps(marker))


def refused(path: Path) -> str:
    """The message of the ToolError load_policy raises for `path`: one line."""
    with pytest.raises(ToolError) as e:
        load_policy(path)
    message = str(e.value)
    assert "\n" not in message and "--checkpoint" in message, message
    return message


# ----------------------------------------------------------------------------- loading


def test_run_folder_and_its_step_folder_load_the_same_checkpoint_with_what_training_recorded(posttrained, train_root,
                                                                                              policy):
    step = checkpoint.step_dir(posttrained, 2)
    assert policy.path == step and load_policy(step).path == step
    run = json.loads(Layout(train_root).run_settings(sorted(Layout(train_root).iter_runs())[0]).read_text())
    assert policy.rig == RigConfig.from_dict(run["rig"])
    assert policy.frame_dt == 0.25
    assert policy.towns == {run["town"]}
    assert policy.sensor_names == ["rgb_front", "semantics_front", "depth_front", "lidar", "bev"]
    assert set(policy.sensor_names) <= set(policy.rig.sensor_names())


def test_training_records_the_cache_settings_rig_and_training_towns_in_every_checkpoint(posttrained, pretrained,
                                                                                        train_root):
    cache_root, settings = find_cache(Layout(train_root))
    layout = Layout(train_root)
    towns = sorted({json.loads(layout.run_settings(k).read_text())["town"] for k in layout.iter_runs()})
    for run in (posttrained, pretrained):
        for step in checkpoint.complete_checkpoints(run):
            recorded = json.loads((step / "config.json").read_text())["trained_on"]
            assert recorded["cache"] == cache_root.name
            assert recorded["cache_settings"] == read_cache_settings(cache_root).to_dict() == settings.to_dict()
            assert RigConfig.from_dict(recorded["rig"]) == RigConfig()
            assert recorded["towns"] == towns
        assert json.loads((run / "config.json").read_text())["trained_on"] == recorded


# ----------------------------------------------------------------------------- predicting


def test_predict_on_a_recorded_frame_is_finite_deterministic_and_the_model_on_its_cache_record(policy, recorded,
                                                                                               train_root):
    key, index, frame = recorded
    m = Measurements.from_dict(frame["measurements"])
    plan = policy.predict(frame["sensors"], m)
    assert isinstance(plan, Plan) and plan.waypoints.shape == (8, 2) and np.isfinite(plan.waypoints).all()
    assert plan.target_speed >= 0 and np.isfinite(plan.target_speed)
    again = policy.predict(frame["sensors"], m)
    assert np.array_equal(again.waypoints, plan.waypoints) and again.target_speed == plan.target_speed
    # The same preprocessing as the cache: the model on the frame's cache record gives the same plan.
    stored = checkpoint.load_model_only(policy.path)
    model = TransFuser(ModelConfig.from_dict(stored["model_config"]), planner=True)
    model.load_state_dict(stored["model"])
    model.eval()
    cache_root = find_cache(Layout(train_root))[0]
    sample = read_record(record_path(cache_root, run_rel(key), index))
    with torch.inference_mode():
        out = model(collate([{**sample, "rebuilt": 0, "replaced": 0}]))
    np.testing.assert_allclose(plan.waypoints, out["waypoints"][0].double().numpy(), rtol=0, atol=1e-6)
    # The agents and the red stop lines: the centres of the BEV cells whose agent classes (red and yellow stop-line
    # classes) the BEV head gives AGENT_P or more, ego frame (the two models agree to 1e-6, so a cell within 1e-5 of
    # AGENT_P may go either way).
    grid = read_cache_settings(cache_root).grid()
    for found, classes in ((plan.agents, AGENT_CLASSES), (plan.red_lines, HOLD_CLASSES)):
        p = out["bev"][0].softmax(0)[list(classes)].sum(0).numpy()
        cells = np.floor(grid.ego_to_pixel(found)).astype(int).reshape(-1, 2)  # (column, row)
        assert found.shape[1] == 2 and len({tuple(c) for c in cells}) == len(cells)
        assert (p[cells[:, 1], cells[:, 0]] >= AGENT_P - 1e-5).all()
        rows, cols = np.nonzero(p >= AGENT_P + 1e-5)
        assert set(zip(cols.tolist(), rows.tolist(), strict=True)) <= {tuple(c) for c in cells.tolist()}


def test_predict_on_sensors_rendered_for_a_snapshot_of_a_recorded_pose(policy, recorded, train_root):
    from tools.collect.base.town import Town
    from tools.collect.sensors.render import Renderer
    from tools.collect.sensors.scene import Scene
    from tools.dataset import semantics as sem
    from tools.expert.state import Box, Snapshot

    key, _, frame = recorded
    run = json.loads(Layout(train_root).run_settings(key).read_text())
    town = Town(Path(run["town_file"]))
    assert town.name in policy.towns
    m = Measurements.from_dict(frame["measurements"])
    e = m.ego
    ego = Box(0, sem.CAR, e["x"], e["y"], e["z"], e["yaw"], *e["extent"], e["speed"])
    rendered = Renderer(Scene(town, seed=0), policy.rig).render(Snapshot(time=m.time, ego=ego))
    plan = policy.predict({name: array for name, (array, _codec) in rendered.items()}, m)
    assert plan.waypoints.shape == (8, 2) and np.isfinite(plan.waypoints).all() and plan.target_speed >= 0
    assert plan.route.shape == (10, 2) and np.isfinite(plan.route).all()


def test_predict_without_a_sensor_the_policy_needs_is_one_line(policy, recorded):
    _, _, frame = recorded
    sensors = {k: v for k, v in frame["sensors"].items() if k != "lidar"}
    with pytest.raises(ToolError, match="no lidar sensor; render the sensors of its rig") as e:
        policy.predict(sensors, Measurements.from_dict(frame["measurements"]))
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- bad input


def test_a_missing_path_is_one_line(tmp_path):
    message = refused(tmp_path / "nowhere")
    assert message.startswith(f"--checkpoint {tmp_path / 'nowhere'}: no such file or folder")


def test_a_folder_without_a_complete_checkpoint_is_one_line(policy, tmp_path):
    step = step_copy(policy, tmp_path)
    (step / checkpoint.MARKER).unlink()  # a save that never finished
    assert refused(tmp_path).startswith(f"--checkpoint {tmp_path}: no complete intact checkpoint under it")


def test_a_damaged_checkpoint_is_one_line(policy, tmp_path):
    step = step_copy(policy, tmp_path)
    data = bytearray((step / "model.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (step / "model.pt").write_bytes(bytes(data))
    message = refused(step)
    assert message.startswith("--checkpoint: damaged checkpoint: ") and "checksum mismatch" in message


def test_a_pretraining_checkpoint_has_no_planner(pretrained):
    message = refused(pretrained)
    assert message.startswith(f"--checkpoint {checkpoint.step_dir(pretrained, 4)}: a pre-training checkpoint")
    assert "no planner" in message and "bin/train posttrain" in message


def test_a_checkpoint_whose_rig_lacks_the_camera_its_preprocessing_reads_is_one_line(policy, tmp_path):
    step = step_copy(policy, tmp_path)
    rear = {"name": "rear", "yaw": 180.0, "x": -2.2}
    edit_config(step, lambda c: c["trained_on"]["rig"].update(cameras=[rear]))
    message = refused(step)
    assert message.startswith(f"--checkpoint {step}: its rig cannot feed its preprocessing: camera 'front' is not "
                              "in the rig (cameras: rear)")
    assert "camera=front" in message


def test_a_checkpoint_written_before_checkpoints_recorded_their_settings_is_one_line(policy, tmp_path):
    step = step_copy(policy, tmp_path)
    edit_config(step, lambda c: c.pop("trained_on"))
    message = refused(step)
    assert message.startswith(f"--checkpoint {step}: the checkpoint does not record the preprocessing settings and "
                              "rig it was trained with")
    assert "retrain it (bin/train posttrain)" in message
