"""A training run names the data it read: the dataset_id, the bucket file's fingerprints and the cache key, in
config.json (the run folder's and every checkpoint's, under `trained_on`) and in the TensorBoard run (text tag
"data"), read back with TensorBoard's own event reader.

The runs are the session's tiny pre-training and post-training runs (conftest.py: `pretrained`, `posttrained`)
on a real collected root with buckets and cache built by their tools (`train_root`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tools.dataset.layout import Layout
from tools.dataset.manifest import dataset_id
from tools.train import checkpoint
from tools.train.data import find_cache


def text_summaries(logdir: Path, tag: str) -> dict[int, str]:
    """step -> the text TensorBoard shows under `tag` (SummaryWriter.add_text), read with its event reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    return {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors(f"{tag}/text_summary")}


def expected(root: Path, collection: str) -> dict:
    """What a run on `root` reading `collection` must name, found here from the files themselves."""
    layout = Layout(root)
    bucket_file = root / "buckets" / f"{collection}.json"
    built_from = json.loads(bucket_file.read_text())["built_from"]
    return {"dataset_id": dataset_id(layout), "file": f"buckets/{collection}.json",
            "sha256": hashlib.sha256(bucket_file.read_bytes()).hexdigest(), "built_from": built_from["fingerprint"],
            "runs": len(built_from["runs"]), "cache": find_cache(layout)[0].name}


def test_config_and_every_checkpoint_name_the_dataset_buckets_and_cache(pretrained, train_root):
    want = expected(train_root, "pretrain")
    assert want["dataset_id"] == json.loads((train_root / "manifest.json").read_text())["dataset_id"]
    configs = [pretrained / "config.json"] + [p / "config.json" for p in checkpoint.complete_checkpoints(pretrained)]
    assert len(configs) == 3  # the run folder, step 2 and step 4
    for path in configs:
        recorded = json.loads(path.read_text())["trained_on"]
        assert recorded["dataset_id"] == want["dataset_id"], path
        bucket = recorded["buckets"]["pretrain"]
        assert {k: bucket[k] for k in ("file", "sha256", "built_from", "runs")} == \
            {k: want[k] for k in ("file", "sha256", "built_from", "runs")}, path
        assert bucket["frames"]["train"] > 0 and bucket["frames"]["val"] > 0
        assert recorded["cache"] == want["cache"], path
        assert (train_root / "cache" / recorded["cache"] / "settings.json").is_file()
        assert "started_from" not in recorded  # a pre-training run starts from scratch


def test_the_tensorboard_run_names_the_dataset_buckets_and_cache(pretrained, train_root):
    want = expected(train_root, "pretrain")
    texts = text_summaries(pretrained, "data")
    assert list(texts) == [0]  # written once, when the run started
    for value in (want["dataset_id"], want["file"], want["sha256"], want["built_from"], want["cache"]):
        assert value in texts[0], value


def test_post_training_names_its_own_data_and_what_its_pre_training_checkpoint_read(posttrained, pretrained,
                                                                                    train_root):
    recorded = json.loads((posttrained / "config.json").read_text())["trained_on"]
    want = expected(train_root, "posttrain")
    assert recorded["dataset_id"] == want["dataset_id"]
    assert recorded["buckets"]["posttrain"]["sha256"] == want["sha256"]
    assert recorded["buckets"]["posttrain"]["built_from"] == want["built_from"]
    assert recorded["cache"] == want["cache"]
    start = recorded["started_from"]
    newest = checkpoint.complete_checkpoints(pretrained)[-1]
    assert Path(start["checkpoint"]) == newest
    assert start["buckets"] == json.loads((newest / "config.json").read_text())["trained_on"]["buckets"]
    assert start["dataset_id"] == want["dataset_id"] and start["cache"] == want["cache"]
    text = text_summaries(posttrained, "data")[0]
    assert want["sha256"] in text and str(newest) in text
