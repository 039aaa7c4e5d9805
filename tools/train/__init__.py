"""The training stage: a TransFuser-like camera + LiDAR model, pre-training then post-training.

`python -m tools.train pretrain|posttrain [--key=value ...]` (or `bin/train`, which also launches torchrun).
The modules, in reading order: config (the one TrainConfig, the loss names), runtime (process group,
device, precision, signals), model, data, checkpoint, validate (held-out metrics, the constant-velocity
baseline, the pictures' calls), pictures, loop.
docs/training.md describes the whole stage.
"""
