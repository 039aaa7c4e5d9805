"""The training stage on real data: a collected root, its buckets and cache built by their own tools.

Every run is the tiny model on CPU, a few steps at batch 4, as a user runs it (`python -m tools.train`,
`bin/train`, `torchrun`), in a subprocess (`train`, and the fixtures train_root and pretrained: conftest.py).
The smoke path (STYLE.md 17): train 4 steps saving at 2, resume from 2, reach the same step-4 loss.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import PYTHON, REPO, TINY, copy_root, run_tool, train
from tools.core.errors import ToolError
from tools.core.options import field_docs, flag
from tools.dataset.cache import read_frame_dt, settings_path
from tools.dataset.layout import Layout
from tools.train import checkpoint
from tools.train.config import TrainConfig, help_text, parse_overrides
from tools.train.data import find_cache


def scalars(logdir: Path, tag: str) -> dict[int, float]:
    """step -> value of a TensorBoard scalar, as TensorBoard shows it (purged steps dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def tags(logdir: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return acc.Tags()


def steps_of(logdir: Path) -> list[int]:
    return [int(p.name.split("-")[1]) for p in checkpoint.complete_checkpoints(logdir)]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def set_frame_dt(root: Path, frame_dt: float | None) -> Path:
    """Make the cache of a (copied) root say its frames are `frame_dt` s apart (None: say nothing);
    returns its settings.json."""
    path = settings_path(find_cache(Layout(root))[0])
    settings = json.loads(path.read_text())
    settings.pop("frame_dt", None)
    path.write_text(json.dumps(settings if frame_dt is None else {**settings, "frame_dt": frame_dt}))
    return path


# ----------------------------------------------------------------------------- the smoke path


def test_resume_from_step_2_reaches_the_same_step_4_loss(pretrained, train_root, tmp_path):
    assert steps_of(pretrained) == [2, 4]
    # The interrupted run: only the step-2 checkpoint survived, and a step-3 folder was left incomplete.
    logdir = tmp_path / "resumed"
    shutil.copytree(pretrained / "checkpoints" / "step-00000002", logdir / "checkpoints" / "step-00000002")
    shutil.copytree(pretrained / "checkpoints" / "step-00000002", logdir / "checkpoints" / "step-00000003")
    (logdir / "checkpoints" / "step-00000003" / checkpoint.MARKER).unlink()
    proc = train("pretrain", train_root, logdir, "max_steps=4")
    assert proc.returncode == 0, proc.stderr
    assert "resuming " + str(logdir / "checkpoints" / "step-00000002") in proc.stderr
    resumed, uninterrupted = scalars(logdir, "train/loss"), scalars(pretrained, "train/loss")
    assert sorted(resumed) == [3, 4]
    assert resumed[3] == uninterrupted[3] and resumed[4] == uninterrupted[4]  # bitwise (as float32 in the events)
    state = torch.load(logdir / "checkpoints" / "step-00000004" / "state.pt", weights_only=True)
    assert state["loop"]["step"] == 4 and state["loop"]["samples"] == 16


def test_run_folder_holds_config_events_summary_and_picture(pretrained):
    config = json.loads((pretrained / "config.json").read_text())
    assert config["phase"] == "pretrain" and config["max_steps"] == 4 and config["collection"] == "pretrain"
    assert Path(config["root"]).is_absolute() and config["model_config"]["channels"] == [16, 32, 64, 128]
    assert config["model_config"]["frame_dt"] == read_frame_dt(find_cache(Layout(Path(config["root"])))[0]) == 0.25
    found = tags(pretrained)
    for tag in ("train/loss", "train/semantics", "train/depth", "train/bev", "train/light", "train/lr",
                "train/samples_per_s", "train/loader_wait", "train/skipped_steps", "val/miou_semantics",
                "val/miou_bev", "val/loss_light", "val/light_accuracy", "train/overtake", "val/loss_overtake",
                "val/overtake_accuracy"):
        assert tag in found["scalars"], tag
    assert {"images/semantics", "images/bev"} <= set(found["images"])
    summary = json.loads((pretrained / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["skipped_steps"] == 0 and summary["frame_dt"] == 0.25
    assert 0 <= summary["val"]["miou_semantics"] <= 1 and summary["val"]["frames"] == 8
    assert 0 <= summary["val"]["light_accuracy"] <= 1 and summary["final_train_losses"]["light"] > 0
    assert (pretrained / "predictions.png").stat().st_size > 0


def test_rerun_of_a_finished_run_trains_no_further_and_keeps_its_checkpoints(pretrained, train_root, tmp_path):
    logdir = tmp_path / "done"
    shutil.copytree(pretrained, logdir)
    proc = train("pretrain", train_root, logdir, "max_steps=4")
    assert proc.returncode == 0, proc.stderr
    assert steps_of(logdir) == [2, 4]
    assert json.loads((logdir / "summary.json").read_text())["steps"] == 4


# ----------------------------------------------------------------------------- checkpoints


def _save(logdir: Path, step: int, keep: int) -> Path:
    return checkpoint.save(logdir, step, {"w": torch.ones(2) * step}, {"state": {}}, {"loop": {"step": step}},
                           {"phase": "pretrain"}, keep)


def test_save_and_purge_keeps_last_k_checkpoints(tmp_path):
    for step in range(1, 6):
        _save(tmp_path, step, keep=2)
    assert steps_of(tmp_path) == [4, 5]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000004", "step-00000005"]
    loaded = checkpoint.load(checkpoint.latest(tmp_path))
    assert loaded["model"]["w"].tolist() == [5.0, 5.0] and loaded["state"]["loop"]["step"] == 5


def test_incomplete_checkpoint_folder_is_ignored(tmp_path):
    _save(tmp_path, 3, keep=3)
    half = checkpoint.step_dir(tmp_path, 7)
    shutil.copytree(checkpoint.step_dir(tmp_path, 3), half)
    (half / checkpoint.MARKER).unlink()
    assert checkpoint.latest(tmp_path) == checkpoint.step_dir(tmp_path, 3)
    assert checkpoint.resolve(half) is None


def test_checkpoint_is_loaded_without_unpickling_code(tmp_path):
    import datetime

    path = _save(tmp_path, 1, keep=1)
    torch.save({"x": datetime.datetime.now()}, path / "state.pt")  # any object that is not a tensor or container
    with pytest.raises(Exception, match="[Ww]eights only"):
        checkpoint.load(path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_during_training_writes_a_checkpoint_and_the_rerun_resumes(sig, train_root, tmp_path):
    logdir = tmp_path / "run"
    args = [PYTHON, "-m", "tools.train", "pretrain", f"root={train_root}", f"logdir={logdir}", *TINY,
            "max_steps=1000", "save_every=1000"]
    proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    deadline = time.time() + 120
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("step 2/"):
            proc.send_signal(sig)
            break
        assert time.time() < deadline, "".join(lines)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 128 + sig, "".join(lines) + rest
    assert f"stopped by signal {signal.Signals(sig).name}" in rest
    (stopped,) = steps_of(logdir)
    assert stopped >= 2
    again = train("pretrain", train_root, logdir, f"max_steps={stopped + 1}")
    assert again.returncode == 0, again.stderr
    assert f"resuming {checkpoint.step_dir(logdir, stopped)}" in again.stderr
    assert sorted(scalars(logdir, "train/loss"))[-1] == stopped + 1


# ----------------------------------------------------------------------------- the loop


def test_nan_loss_step_is_skipped_and_counted(train_root, tmp_path):
    logdir = tmp_path / "nan"
    proc = train("pretrain", train_root, logdir, "max_steps=3", "debug_nan_steps=2")
    assert proc.returncode == 0, proc.stderr
    assert "step 2: non-finite loss or gradient, step skipped (1 so far)" in proc.stderr
    assert json.loads((logdir / "summary.json").read_text())["skipped_steps"] == 1
    assert scalars(logdir, "train/skipped_steps") == {1: 0.0, 2: 1.0, 3: 1.0}


def test_posttrain_starts_from_the_pretrain_checkpoint_with_a_new_planner_at_step_0(pretrained, train_root,
                                                                                      tmp_path):
    logdir = tmp_path / "post"
    proc = train("posttrain", train_root, logdir, "max_steps=2", f"load={pretrained}")
    assert proc.returncode == 0, proc.stderr
    assert f"starting from {pretrained / 'checkpoints' / 'step-00000004'}; step 0/2, epoch 0" in proc.stderr
    assert steps_of(logdir) == [2]
    ckpt = checkpoint.load(checkpoint.latest(logdir))
    assert ckpt["state"]["loop"]["step"] == 2 and ckpt["config"]["collection"] == "posttrain"
    assert any(k.startswith("planner.") for k in ckpt["model"])
    for tag in ("train/waypoints", "train/target_speed", "train/route", "val/ade", "val/fde",
                "val/ade_constant_velocity", "val/fde_constant_velocity"):
        assert tag in tags(logdir)["scalars"], tag
    assert "images/waypoints" in tags(logdir)["images"]
    val = json.loads((logdir / "summary.json").read_text())["val"]
    for key in ("ade", "fde", "ade_constant_velocity", "fde_constant_velocity"):
        assert val[key] >= 0, key
    assert "waypoints ADE" in proc.stderr and "constant velocity: ADE" in proc.stderr


def test_posttrain_finds_the_newest_pretrain_checkpoint_under_outputs_by_default(pretrained, train_root, tmp_path):
    shutil.copytree(pretrained / "checkpoints", tmp_path / "outputs" / "pretrain" / "checkpoints")
    proc = train("posttrain", train_root, tmp_path / "post", "max_steps=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"starting from {tmp_path / 'outputs' / 'pretrain' / 'checkpoints' / 'step-00000004'}" in proc.stderr


def test_damaged_cache_record_mid_epoch_is_reported_rebuilt_and_training_completes(train_root, tmp_path):
    from tools.dataset.buckets import load_collection
    from tools.dataset.cache import read_record, record_path, run_key

    root = copy_root(train_root, tmp_path / "root")
    layout = Layout(root)
    cache_root, settings = find_cache(layout)
    order = load_collection(layout, "pretrain", horizon=settings.horizon, rebuild=False).epoch_samples("train", 0, 0)
    damaged, lost = order[5], order[9]  # read in steps 2 and 3 (batch 4)
    for run, index in (damaged, lost):
        path = record_path(cache_root, run, index)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    # `lost` cannot be rebuilt: its recorded frame is unreadable too, so another sample stands in.
    layout.frame_path(run_key(lost[0]), lost[1]).write_bytes(b"not a frame")
    proc = train("pretrain", root, tmp_path / "run", "max_steps=3", "val_samples=4", "num_workers=1")
    assert proc.returncode == 0, proc.stderr
    assert "checksum mismatch" in proc.stderr and "rebuilding it" in proc.stderr
    assert "the sample is replaced by another one" in proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rebuilt_records"] == 2 and summary["replaced_samples"] == 1
    read_record(record_path(cache_root, *damaged))  # good again


def test_ddp_two_cpu_processes_save_a_checkpoint_that_one_process_resumes(train_root, tmp_path):
    logdir = tmp_path / "ddp"
    env = {"DRIVEKIT_IMAGES": str(tmp_path / "no-images")}
    proc = run_tool(str(REPO / "bin" / "train"), "pretrain", "--nproc", "2", f"root={train_root}", f"logdir={logdir}",
                    *TINY, "max_steps=2", env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "2 process(es) on cpu" in proc.stderr
    assert steps_of(logdir) == [2]
    loop = checkpoint.load(checkpoint.latest(logdir))["state"]["loop"]
    assert loop["world"] == 2 and loop["samples"] == 16 and loop["consumed"] == 16
    one = train("pretrain", train_root, logdir, "max_steps=3")
    assert one.returncode == 0, one.stderr
    assert "world changed from 2 to 1" in one.stderr
    assert steps_of(logdir) == [2, 3]


# ----------------------------------------------------------------------------- bad input


def test_posttrain_without_a_pretrain_checkpoint_is_one_line_and_exit_2(train_root, tmp_path):
    proc = train("posttrain", train_root, tmp_path / "post", cwd=tmp_path)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith("train: no complete pre-training checkpoint at ")
    assert str(tmp_path / "outputs" / "pretrain") in line and "bin/train pretrain" in line and "load=" in line
    assert not (tmp_path / "post").exists()


def test_unknown_config_key_is_one_line_naming_the_near_match_and_exit_2(tmp_path):
    for spelling in (["max_stpes=3"], ["--max-stpes=3"], ["--max_stpes", "3"]):
        proc = run_tool(PYTHON, "-m", "tools.train", "pretrain", *spelling, cwd=tmp_path)
        assert proc.returncode == 2
        assert one_line(proc.stderr) == ("train: unknown flag --max-stpes; did you mean --max-steps? "
                                         "(see python -m tools.train --help)")


def test_bad_values_name_the_key():
    with pytest.raises(ToolError, match="^--lr 'abc': expected a finite number$"):
        parse_overrides("pretrain", ["lr=abc"])
    with pytest.raises(ToolError, match="^--batch-size=0: must be between 1 and 4096$"):
        parse_overrides("pretrain", ["--batch-size=0"])
    with pytest.raises(ToolError, match="^--model='huge': must be one of tiny, full$"):
        parse_overrides("pretrain", ["model=huge"])
    with pytest.raises(ToolError, match="only posttrain starts from a checkpoint"):
        parse_overrides("pretrain", ["load=x"])
    with pytest.raises(ToolError, match="^'lr': give options as --key=value"):
        parse_overrides("pretrain", ["lr"])


def test_keys_are_flags_in_every_spelling():
    """--key=value as every tool takes its flags; --key value; and key=value, which bin/train has always taken."""
    cfg = parse_overrides("posttrain", ["lr=3e-4", "debug_nan_steps=2,5", "--keep=5", "--max-steps", "7",
                                        "--grad_clip=0.5"])
    assert (cfg.lr, cfg.debug_nan_steps, cfg.keep, cfg.max_steps, cfg.grad_clip) == (3e-4, (2, 5), 5, 7, 0.5)


def test_empty_collection_or_missing_cache_is_one_line(train_root, tmp_path):
    root = copy_root(train_root, tmp_path / "root")
    shutil.rmtree(root / "cache")
    proc = train("pretrain", root, tmp_path / "run", "max_steps=1")
    assert proc.returncode == 2
    assert one_line(proc.stderr) == f"train: no cache under {root / 'cache'}: run bin/build-cache --root {root}"


def test_a_cache_lacking_records_is_one_line_naming_the_count(train_root, tmp_path):
    from tools.dataset.buckets import load_collection
    from tools.dataset.cache import record_path

    root = copy_root(train_root, tmp_path / "root")
    cache_root, settings = find_cache(Layout(root))
    for run, index in load_collection(Layout(root), "pretrain", horizon=settings.horizon,
                                      rebuild=False).frames("val")[:3]:
        record_path(cache_root, run, index).unlink()
    proc = train("pretrain", root, tmp_path / "run", "max_steps=1")
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith(f"train: cache {cache_root} lacks 3 of ")
    assert line.endswith(f"samples: run bin/build-cache --root {root}")


def test_help_lists_every_key_with_its_doc():
    text = help_text()
    docs = field_docs(TrainConfig)
    for name in TrainConfig.__dataclass_fields__:
        if name != "phase":
            assert f"  {flag(name)}=" in text and docs.get(name), name
    proc = run_tool(str(REPO / "bin" / "train"), "--help-keys")
    assert proc.returncode == 0 and "max_steps" in proc.stdout
    proc = run_tool(str(REPO / "bin" / "train"), "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: bin/train pretrain|posttrain")


def test_bin_train_runs_in_the_image_binding_key_paths_stub_apptainer(tmp_path):
    """No apptainer here: a stub on PATH prints the command line the wrapper builds."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "train.sif").write_text("")
    stub = tmp_path / "path" / "apptainer"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "apptainer $*"; env | grep TORCHELASTIC || true\n')
    stub.chmod(0o755)
    root = tmp_path / "data"
    env = {"PATH": f"{stub.parent}:{os.environ['PATH']}", "DRIVEKIT_IMAGES": str(images)}
    proc = run_tool(str(REPO / "bin" / "train"), "pretrain", f"root={root}", "max_steps=5", env=env, check=True)
    line = proc.stdout.splitlines()[0]
    assert line.startswith("apptainer exec --cleanenv --nv ")
    assert f"--bind {tmp_path} " in line  # the nearest existing parent of root=
    assert line.endswith(f"{images / 'train.sif'} python -m tools.train pretrain --root={root} max_steps=5")
    proc = run_tool(str(REPO / "bin" / "train"), "posttrain", "--nproc", "2", "lr=1e-3", env=env, check=True)
    assert proc.stdout.splitlines()[0].endswith(
        "python -m torch.distributed.run --standalone --nproc_per_node 2 -m tools.train posttrain lr=1e-3")
    assert "APPTAINERENV_TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1" in proc.stdout
    bad = run_tool(str(REPO / "bin" / "train"), "pretrain", "--nproc", "two", env=env)
    assert bad.returncode == 2 and "--nproc two" in bad.stderr


def test_session_cache_is_filled_during_the_first_epoch(train_root, tmp_path):
    proc = train("pretrain", train_root, tmp_path / "run", "max_steps=2", f"session_cache={tmp_path / 'local'}",
                 "session_cache_gb=0.5")
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "local").iterdir()
    import diskcache

    with diskcache.Cache(str(folder)) as cache:
        assert len(cache) >= 8  # 2 steps of 4 samples, and the held-out frames


def test_tiny_model_sizes():
    from tools.dataset.samples import BEV_CLASSES, TRAIN_CLASSES, CacheSettings
    from tools.train.model import TransFuser, count_parameters, model_config

    assert len(BEV_CLASSES) == 10 and len(TRAIN_CLASSES) == 9  # BEV: pedestrian and obstacle came with scenarios
    cfg = model_config("tiny", CacheSettings(), frame_dt=0.25)
    # Seeded, as training seeds the initialisation (`seed`): the light head's prior is its bias, and the highest of its
    # 2,048 places with weights drawn from whatever state the suite left the generator in once came to 0.51.
    torch.manual_seed(0)
    model = TransFuser(cfg, planner=True)
    batch = {"rgb": torch.zeros(2, 128, 256, 3, dtype=torch.uint8), "lidar_bev": torch.zeros(2, 2, 128, 128,
                                                                                               dtype=torch.uint8),
             "target_point": torch.zeros(2, 2), "speed": torch.zeros(2), "command": torch.zeros(2, dtype=torch.long)}
    out = model(batch)
    assert out["semantics"].shape == (2, len(TRAIN_CLASSES), 128, 256) and out["depth"].shape == (2, 128, 256)
    assert out["bev"].shape == (2, len(BEV_CLASSES), 128, 128) and out["waypoints"].shape == (2, 8, 2)
    assert out["route"].shape == (2, 10, 2) and out["target_speed"].shape == (2,) and out["light"].shape == (2,)
    assert (out["light"].sigmoid() < 0.5).all()  # untrained, the light head says "no light": the driver drives
    assert count_parameters(model) < 2_000_000


def test_the_light_head_learns_light_hazard_and_a_checkpoint_written_before_it_has_none():
    from tools.dataset.samples import CacheSettings
    from tools.train.config import loss_names
    from tools.train.model import ModelConfig, TransFuser, compute_losses, model_config

    cfg = model_config("tiny", CacheSettings(), frame_dt=0.25)
    assert cfg.light_head
    torch.manual_seed(0)
    model = TransFuser(cfg)
    batch = {"rgb": torch.zeros(2, 128, 256, 3, dtype=torch.uint8), "lidar_bev": torch.zeros(2, 2, 128, 128,
                                                                                               dtype=torch.uint8),
             "semantics": torch.zeros(2, 128, 256, dtype=torch.uint8),
             "bev": torch.zeros(2, 128, 128, dtype=torch.uint8),
             "depth": torch.zeros(2, 128, 256), "light_hazard": torch.tensor([True, False]),
             "overtake_offset": torch.zeros(2)}
    batch["rgb"][0, 10:20, 120:124, 0] = 255  # a red lamp in the first frame
    out = model(batch)
    weights = {name: 1.0 for name in loss_names(True)}
    losses = compute_losses(out, batch, weights)
    assert set(losses) == {"loss", *loss_names(False)} and "light" in losses
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out["light"], torch.tensor([1.0, 0.0]))
    assert torch.isclose(losses["light"], expected)
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("light_head", "light_input")}  # written before the head
    old_model = TransFuser(ModelConfig.from_dict(old))
    assert old_model.light is None and "light" not in old_model(batch)
    assert "light" not in compute_losses(old_model(batch), batch, weights) and "light" not in loss_names(True, False)


def test_the_lamp_head_sees_a_small_window_of_the_image_and_a_checkpoint_written_before_it_keeps_its_light_head():
    """The light head on the fused features learnt where the expert had stood at red lights, not the lamp
    (docs/training.md "Red lights: a lamp head"): each place of the lamp head sees 23 x 23 pixels of the image, and
    nothing else of the frame. A checkpoint written before it (no light_input) builds the head it was trained with."""
    from tools.dataset.samples import CacheSettings
    from tools.train.model import LampHead, LightHead, ModelConfig, TransFuser, model_config

    cfg = model_config("tiny", CacheSettings(), frame_dt=0.25)
    assert cfg.light_input == "image" and model_config("full", CacheSettings(), frame_dt=0.25).light_input == "image"
    torch.manual_seed(0)
    model = TransFuser(cfg)
    assert isinstance(model.light, LampHead)
    model.eval()  # BatchNorm of its running statistics (in training, a batch's statistics reach every place)
    rgb = torch.randn(1, 3, 128, 256, requires_grad=True)
    scores = model.light.scores(rgb)
    assert scores.shape == (1, 32, 64)
    scores[0, 10, 20].backward()  # the place at pixels (40, 80) of the image
    rows, cols = torch.nonzero(rgb.grad[0].abs().sum(0)).unbind(1)
    assert rows.max() - rows.min() + 1 <= 23 and cols.max() - cols.min() + 1 <= 23
    assert rows.min() <= 40 <= rows.max() and cols.min() <= 80 <= cols.max()
    batch = {"rgb": torch.zeros(2, 128, 256, 3, dtype=torch.uint8),
             "lidar_bev": torch.zeros(2, 2, 128, 128, dtype=torch.uint8)}
    lidar_only = {**batch, "lidar_bev": torch.full((2, 2, 128, 128), 5, dtype=torch.uint8)}
    with torch.no_grad():
        assert torch.equal(model(batch)["light"], model(lidar_only)["light"])  # the LiDAR does not reach it
    old = {k: v for k, v in cfg.to_dict().items() if k != "light_input"}  # written before the lamp head
    old_model = TransFuser(ModelConfig.from_dict(old))
    assert isinstance(old_model.light, LightHead) and old_model.cfg.light_input == "fused"
    assert {k for k in old_model.state_dict() if k.startswith("light.")} == {
        "light.score.0.0.weight", "light.score.0.1.weight", "light.score.0.1.bias", "light.score.0.1.running_mean",
        "light.score.0.1.running_var", "light.score.0.1.num_batches_tracked", "light.score.1.weight",
        "light.score.1.bias"}  # the keys of those checkpoints
    with pytest.raises(ValueError, match="light_input='crop'"):
        ModelConfig.from_dict({**cfg.to_dict(), "light_input": "crop"})


def test_the_overtake_head_learns_where_the_expert_goes_round_and_a_checkpoint_written_before_it_has_none():
    from tools.dataset.samples import OVERTAKE_MIN_M, CacheSettings
    from tools.train.config import loss_names
    from tools.train.model import OVERTAKE_P, ModelConfig, TransFuser, compute_losses, model_config

    cfg = model_config("tiny", CacheSettings(), frame_dt=0.25)
    assert cfg.overtake_head
    torch.manual_seed(0)
    model = TransFuser(cfg)
    batch = {"rgb": torch.zeros(3, 128, 256, 3, dtype=torch.uint8),
             "lidar_bev": torch.zeros(3, 2, 128, 128, dtype=torch.uint8),
             "semantics": torch.zeros(3, 128, 256, dtype=torch.uint8),
             "bev": torch.zeros(3, 128, 128, dtype=torch.uint8),
             "depth": torch.zeros(3, 128, 256), "light_hazard": torch.zeros(3, dtype=torch.bool),
             "overtake_offset": torch.tensor([0.2, 3.4, -3.1])}  # follows the route; goes round left; right
    batch["lidar_bev"][1, :, 40:50, 64:72] = 8  # an obstacle ahead, right of the lane's centre: round it to the left
    batch["lidar_bev"][2, :, 40:50, 54:62] = 8  # ... left of it: to the right
    out = model(batch)
    assert out["overtake"].shape == (3,) and out["overtake_offset"].shape == (3,)
    assert (out["overtake"].sigmoid() < OVERTAKE_P).all()  # untrained, it says "nothing to go round": the driver drives
    weights = {name: 1.0 for name in loss_names(True)}
    losses = compute_losses(out, batch, weights)
    assert set(losses) == {"loss", *loss_names(False)} and "overtake" in losses
    goes = (batch["overtake_offset"].abs() >= OVERTAKE_MIN_M).float()
    assert goes.tolist() == [0.0, 1.0, 1.0]
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out["overtake"], goes) + \
        (out["overtake_offset"] - batch["overtake_offset"]).abs()[1:].mean()  # the offset only where it goes round
    assert torch.isclose(losses["overtake"], expected)
    # A few steps on these three frames: it calls the two that go round, with their sides.
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        optimizer.zero_grad()
        compute_losses(model(batch), batch, weights)["overtake"].backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        out = model(batch)
    assert (out["overtake"].sigmoid() > OVERTAKE_P).tolist() == [False, True, True]
    assert out["overtake_offset"][1] > OVERTAKE_MIN_M and out["overtake_offset"][2] < -OVERTAKE_MIN_M
    old = {k: v for k, v in cfg.to_dict().items() if k != "overtake_head"}  # written before the head
    old_model = TransFuser(ModelConfig.from_dict(old))
    assert old_model.overtake is None and "overtake" not in old_model(batch)
    assert "overtake" not in compute_losses(old_model(batch), batch, weights)
    assert "overtake" not in loss_names(True, True, False)


def test_target_speed_is_a_distribution_over_classes_trained_two_hot_and_an_old_checkpoint_keeps_its_regression():
    from tools.dataset.samples import CacheSettings
    from tools.train.model import SPEED_CLASSES, ModelConfig, TransFuser, model_config, two_hot

    classes = torch.tensor(SPEED_CLASSES)
    speeds = torch.tensor([-1.0, 0.0, 0.25, 1.0, 5.0, 13.9, 30.0])
    label = two_hot(speeds, classes)
    assert torch.allclose(label.sum(-1), torch.ones(len(speeds)))
    assert torch.allclose(label @ classes, speeds.clamp(0, classes[-1]))  # the label's expectation is the speed
    assert (label > 0).sum(-1).max() <= 2  # on its two neighbouring classes
    cfg = model_config("tiny", CacheSettings(), frame_dt=0.25)
    assert cfg.speed_classes == SPEED_CLASSES
    head = TransFuser(cfg, planner=True).planner.target_speed
    assert head.out_features == len(SPEED_CLASSES)
    old = {k: v for k, v in cfg.to_dict().items() if k != "speed_classes"}  # written before the classes
    assert ModelConfig.from_dict(old).speed_classes == ()
    assert TransFuser(ModelConfig.from_dict(old), planner=True).planner.target_speed.out_features == 1
    with pytest.raises(ValueError, match="speed_classes"):
        ModelConfig.from_dict({**cfg.to_dict(), "speed_classes": [1.0, 0.5]})


# ----------------------------------------------------------------------------- the time between frames


def _cache_folder(folder: Path, frame_dt: float) -> Path:
    """A cache folder whose settings.json says its frames are `frame_dt` s apart (no records: read_frame_dt
    reads only the settings)."""
    from tools.dataset.samples import CACHE_FORMAT, CacheSettings

    settings_path(folder).parent.mkdir(parents=True, exist_ok=True)
    settings_path(folder).write_text(json.dumps({"format": CACHE_FORMAT, "settings": CacheSettings().to_dict(),
                                                 "frame_dt": frame_dt}))
    return folder


def test_frames_half_a_second_apart_give_a_constant_velocity_baseline_of_twice_the_step(tmp_path):
    from tools.dataset.samples import CacheSettings
    from tools.train.model import TransFuser, model_config
    from tools.train.validate import constant_velocity

    speed = torch.tensor([0.0, 4.0, 10.0])
    rollouts = {}
    for frame_dt in (0.25, 0.5):
        mcfg = model_config("tiny", CacheSettings(), read_frame_dt(_cache_folder(tmp_path / str(frame_dt), frame_dt)))
        assert mcfg.frame_dt == frame_dt and mcfg.step_scale == 10.0 * frame_dt
        rollouts[frame_dt] = constant_velocity(speed, mcfg.horizon, mcfg.frame_dt)
        # the untrained planner (zero corrections) drives the same baseline
        planner = TransFuser(mcfg, planner=True).planner.eval()
        with torch.no_grad():
            out = planner(torch.zeros(3, 128, 1, 1), torch.zeros(3, 128, 1, 1), torch.zeros(3, 2), speed,
                          torch.zeros(3, dtype=torch.long))
        torch.testing.assert_close(out["waypoints"], rollouts[frame_dt])
    assert rollouts[0.25][2, :3, 0].tolist() == [2.5, 5.0, 7.5]
    torch.testing.assert_close(rollouts[0.5], 2 * rollouts[0.25])


def test_a_cache_that_does_not_say_how_far_apart_its_frames_are_is_one_line_and_exit_2(train_root, tmp_path):
    root = copy_root(train_root, tmp_path / "root")
    settings = set_frame_dt(root, None)
    proc = train("pretrain", root, tmp_path / "run", "max_steps=1")
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith(f"train: {settings}: no usable frame_dt") and "bin/build-cache --force" in line
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_of_frames_another_time_apart_than_the_cache_is_one_line_on_resume_and_posttrain(
        pretrained, train_root, tmp_path):
    root = copy_root(train_root, tmp_path / "root")
    set_frame_dt(root, 0.5)
    cache_root = find_cache(Layout(root))[0]
    logdir = tmp_path / "resumed"
    shutil.copytree(pretrained, logdir)
    proc = train("pretrain", root, logdir, "max_steps=6")
    assert proc.returncode == 2
    assert one_line(proc.stderr) == (
        f"train: {checkpoint.step_dir(logdir, 4)} was trained on frames 0.25 s apart, the cache {cache_root} holds "
        "frames 0.5 s apart: train from scratch in a new --logdir=, or on the cache this run was trained on")
    assert steps_of(logdir) == [2, 4]
    proc = train("posttrain", root, tmp_path / "post", f"load={pretrained}")
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith(f"train: {checkpoint.step_dir(pretrained, 4)} was trained on frames 0.25 s apart, the "
                           f"cache {cache_root} holds frames 0.5 s apart: pre-train on this cache first")
    assert not (tmp_path / "post").exists()


class _Numbered(torch.utils.data.Dataset):
    """A stand-in dataset: sample i carries its item (an int) in every batch key."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import numpy as np

        from tools.train.data import BATCH_KEYS
        return {**{k: np.array([self.items[i]]) for k in BATCH_KEYS}, "rebuilt": 0, "replaced": 0}


def test_train_batches_with_workers_and_lookahead_are_those_of_a_resume_without_workers():
    """The next epoch's loader opened early (workers) gives the batches a resume from any point gives."""
    from tools.train.data import TrainBatches

    def epoch_samples(epoch):  # a different order every epoch, 14 samples: 3 batches of 4, 2 dropped
        return [(epoch * 7 + 3 * i) % 14 + 100 * epoch for i in range(14)]

    def batches(workers, epoch=0, consumed=0, n=10):
        it = TrainBatches(epoch_samples, _Numbered, batch_size=4, rank=0, world=1, num_workers=workers,
                          epoch=epoch, consumed=consumed)
        it.LOOKAHEAD = 1
        out = []
        for _ in range(n):
            out.append((it.epoch, it.consumed, it.next()["route"].flatten().tolist()))
            early.append(it._upcoming is not None)
        return out

    early = []

    with_workers = batches(2)
    assert early[1] and not early[0]  # opened one batch before the epoch's end
    plain = batches(0)
    assert with_workers == plain
    assert [b[0] for b in plain] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    epoch, consumed, _ = plain[4]
    assert batches(0, epoch, consumed, n=6) == plain[4:]
