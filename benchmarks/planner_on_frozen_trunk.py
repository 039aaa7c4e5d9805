"""Retrain only the planner of a post-trained checkpoint on its frozen trunk: what docs/training.md ("Why the
policy stopped") measured each planner change with, where a whole posttrain did not fit the machine's time.

1. The pooled trunk features (camera and BEV, as the planner sees them) of every posttrain train and val
   frame of ROOT under CHECKPOINT's trunk, kept in FEATURES (.npz; made once, reused when it exists).
2. A new planner trained as posttrain trains it: 1,200 steps of batch 8 in the epoch order of ROOT's
   posttrain buckets (tools.dataset.buckets), AdamW lr 2e-3 (weight decay 0.01 on the matrices), 30 warmup
   steps then cosine to lr/10, gradient norm clipped at 1, the loss weights of TrainConfig; the target-speed
   head `classes` (tools.train.model.SPEED_CLASSES) or `l1` (the regression before them).
3. Printed: the held-out (val) ADE beside constant velocity, and the predicted target speed on the standing
   frames (< 0.5 m/s) where the expert pulls away (target > 0.5 m/s) and where it waits.
4. OUT/checkpoints/step-N: CHECKPOINT with this planner, for bin/evaluate --checkpoint OUT.

    .venv/bin/python benchmarks/planner_on_frozen_trunk.py ROOT CHECKPOINT FEATURES OUT classes|l1
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tools

from tools.dataset.buckets import load_collection  # noqa: E402
from tools.dataset.layout import Layout  # noqa: E402
from tools.train import checkpoint, data  # noqa: E402
from tools.train.config import TrainConfig  # noqa: E402
from tools.train.model import LIDAR_SCALE, SPEED_CLASSES, ModelConfig, Planner, TransFuser, two_hot  # noqa: E402
from tools.train.validate import constant_velocity  # noqa: E402

KEYS = ("target_point", "speed", "command", "waypoints", "waypoints_valid", "target_speed", "route")


def features(root: Path, model: TransFuser, out: Path) -> dict[str, np.ndarray]:
    if out.exists():
        return dict(np.load(out))
    layout = Layout(root)
    cache_root, settings = data.find_cache(layout)
    col = load_collection(layout, "posttrain", horizon=settings.horizon)
    items = sorted(set(col.frames("train")) | set(col.frames("val")))
    dataset = data.RecordDataset(items, layout.root, cache_root, settings)
    parts: dict[str, list] = {k: [] for k in (*KEYS, "pooled")}
    with torch.inference_mode():
        for i in range(0, len(items), 32):
            b = data.collate([dataset[j] for j in range(i, min(i + 32, len(items)))])
            img = (b["rgb"].permute(0, 3, 1, 2).float() - model.rgb_mean) / model.rgb_std
            bev = b["lidar_bev"].float().clamp(max=LIDAR_SCALE) / LIDAR_SCALE
            for s, (a, c) in enumerate(zip(model.image_encoder.stages, model.bev_encoder.stages, strict=True)):
                img, bev = a(img), c(bev)
                if str(s) in model.fusions:
                    img, bev = model.fusions[str(s)](img, bev)
            parts["pooled"].append(torch.cat([img.mean(dim=(2, 3)), bev.mean(dim=(2, 3))], 1).numpy())
            for k in KEYS:
                parts[k].append(b[k].numpy())
            print(f"features: {min(i + 32, len(items))} of {len(items)} frames", file=sys.stderr, flush=True)
    f = {"runs": np.array([r for r, _ in items]), "index": np.array([x for _, x in items]),
         **{k: np.concatenate(v) for k, v in parts.items()}}
    np.savez(out, **f)
    return f


def main(root: str, ckpt: str, feature_file: str, out: str, head: str) -> None:
    torch.manual_seed(0)
    step = checkpoint.resolve(Path(ckpt))
    stored = checkpoint.load_model_only(step)
    trunk_cfg = ModelConfig.from_dict(stored["model_config"])
    model = TransFuser(trunk_cfg, planner=True)
    model.load_state_dict(stored["model"])
    model.eval()
    f = features(Path(root), model, Path(feature_file))
    row = {(r, int(i)): k for k, (r, i) in enumerate(zip(f["runs"], f["index"], strict=True))}
    t = {k: torch.from_numpy(f[k]) for k in (*KEYS, "pooled")}
    col = load_collection(Layout(Path(root)), "posttrain", horizon=trunk_cfg.horizon)
    mcfg = dataclasses.replace(trunk_cfg, speed_classes=SPEED_CLASSES if head == "classes" else ())
    planner, c = Planner(mcfg), mcfg.channels[-1]

    def run(idx: torch.Tensor, train: bool) -> dict[str, torch.Tensor]:
        planner.train(train)
        p = t["pooled"][idx]  # pooled already: 1 x 1 maps
        return planner(p[:, :c, None, None], p[:, c:, None, None], t["target_point"][idx].float(),
                       t["speed"][idx].float(), t["command"][idx].long())

    cfg = TrainConfig()
    matrices = [p for p in planner.parameters() if p.ndim > 1]
    rest = [p for p in planner.parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": cfg.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=cfg.lr)
    steps, warm = cfg.max_steps, cfg.warmup_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / warm if s < warm else
                                              0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / (steps - warm))))
    order, epoch = [], 0
    for _ in range(steps):
        if len(order) < cfg.batch_size:
            order += [row[(r, int(i))] for r, i in col.epoch_samples("train", epoch, cfg.seed)]
            epoch += 1
        idx, order = torch.tensor(order[:cfg.batch_size]), order[cfg.batch_size:]
        o = run(idx, True)
        valid = t["waypoints_valid"][idx].bool()
        loss_wp = ((o["waypoints"] - t["waypoints"][idx].float()).abs().sum(-1) * valid).sum() / valid.sum().clamp(1)
        speed = t["target_speed"][idx].float()
        if "target_speed_logits" in o:
            label = two_hot(speed, o["target_speed_classes"][0])
            loss_ts = -(label * o["target_speed_logits"].log_softmax(-1)).sum(-1).mean()
        else:
            loss_ts = F.l1_loss(o["target_speed"], speed)
        loss = (cfg.w_waypoints * loss_wp + cfg.w_target_speed * loss_ts
                + cfg.w_route * F.l1_loss(o["route"], t["route"][idx].float()))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(planner.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()

    with torch.inference_mode():
        val = torch.tensor([row[(r, int(i))] for r, i in col.frames("val")])
        o, valid, true = run(val, False), t["waypoints_valid"][val].bool(), t["waypoints"][val].float()
        error = (o["waypoints"] - true).norm(dim=-1)
        error_cv = (constant_velocity(t["speed"][val].float(), mcfg.horizon, mcfg.frame_dt) - true).norm(dim=-1)
        predicted = run(torch.arange(len(t["speed"])), False)["target_speed"]
        stand, wanted = t["speed"].float() < 0.5, t["target_speed"].float() > 0.5
        go, wait = stand & wanted, stand & ~wanted
        print(json.dumps({"head": head, "val_ade": round(float((error * valid).sum() / valid.sum()), 3),
                          "val_ade_constant_velocity": round(float((error_cv * valid).sum() / valid.sum()), 3),
                          "standing_go": [int(go.sum()), round(float(predicted[go].mean()), 3)],
                          "standing_wait": [int(wait.sum()), round(float(predicted[wait].mean()), 3)]}))

    dest = Path(out) / "checkpoints" / step.name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(step, dest)
    weights = torch.load(dest / "model.pt", weights_only=True)
    weights = {k: v for k, v in weights.items() if not k.startswith("planner.")}
    weights.update({f"planner.{k}": v for k, v in planner.state_dict().items()})
    torch.save(weights, dest / "model.pt")
    state = torch.load(dest / "state.pt", weights_only=True)
    state["model_config"] = mcfg.to_dict()
    torch.save(state, dest / "state.pt")
    marker = json.loads((dest / checkpoint.MARKER).read_text())
    marker["sha256"] = {name: hashlib.sha256((dest / name).read_bytes()).hexdigest() for name in marker["sha256"]}
    (dest / checkpoint.MARKER).write_text(json.dumps(marker))
    print(f"checkpoint: {dest}")


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[5] not in ("classes", "l1"):
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    main(*sys.argv[1:])
