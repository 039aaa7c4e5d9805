"""Validation and pictures: what the loop measures on held-out frames and what it draws.

    validate              semantics and BEV mIoU, the losses, and (with a planner) waypoint ADE / FDE in
                          metres next to the constant-velocity baseline on the same frames; all ranks
    train_images          TensorBoard images of a training batch (true next to predicted)
    write_predictions     predictions.png: one held-out frame, camera, semantics, depth, BEV, waypoints

The waypoints of a sample are one recorded frame apart; the baseline converts steps to seconds with
the model's `frame_dt` (ModelConfig, from the training cache), never with an assumed rate.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from tools.core import atomic
from tools.dataset.samples import CacheSettings, goes_round
from tools.train import data, pictures
from tools.train.config import TrainConfig, loss_names
from tools.train.model import DEPTH_UNIT, LIGHT_STOP_P, OVERTAKE_P, TransFuser, compute_losses
from tools.train.runtime import Runtime

if TYPE_CHECKING:
    from torch.utils.data import Dataset

#: Held-out frames among which predictions.png shows the one that turns most.
PICTURE_CANDIDATES = 32


def constant_velocity(speed: torch.Tensor, horizon: int, frame_dt: float) -> torch.Tensor:
    """The baseline planner: the current speed straight ahead along x, one waypoint per frame, frames
    `frame_dt` seconds apart. (B,) speeds in m/s -> (B, horizon, 2) ego-frame waypoints in metres."""
    t = torch.arange(1, horizon + 1, dtype=torch.float32, device=speed.device) * frame_dt
    wp = torch.zeros(speed.shape[0], horizon, 2, device=speed.device)
    wp[:, :, 0] = speed.float()[:, None] * t
    return wp


def confusion(pred: torch.Tensor, true: torch.Tensor, n: int) -> torch.Tensor:
    """The n x n confusion matrix (rows: true class, columns: predicted), on the CPU."""
    return torch.bincount((true.long() * n + pred.long()).flatten(), minlength=n * n).view(n, n).cpu()


def miou(conf: torch.Tensor) -> float:
    """Mean intersection over union over the classes present in the labels or the predictions."""
    conf = conf.double()
    inter = conf.diag()
    union = conf.sum(0) + conf.sum(1) - inter
    present = union > 0
    return float((inter[present] / union[present]).mean()) if present.any() else float("nan")


@torch.no_grad()
def validate(model: TransFuser, items: Sequence[data.Item], rt: Runtime, cfg: TrainConfig,
             make_dataset: Callable[[list[data.Item]], Dataset]) -> dict[str, float]:
    """Held-out metrics over `items`, each rank taking its share; sums are reduced over all ranks.

    frames, miou_semantics, miou_bev, loss and loss_<name> (means per frame); with a light head, how its calls
    (a light holds the ego: probability above LIGHT_STOP_P) match the frames' light_hazard: light_accuracy over all
    frames, light_recall over the frames a light holds, light_precision over the frames called so (absent without
    such frames); with an overtake head, the same of its calls (probability above OVERTAKE_P) against the frames
    whose overtake_offset is a pass (goes_round) (overtake_accuracy, overtake_recall, overtake_precision); with a
    planner: ade, fde (metres, over valid waypoints; fde over frames whose last waypoint is
    valid) and the same of the constant-velocity baseline (ade_constant_velocity, fde_constant_velocity)."""
    model.eval()
    mc = model.cfg
    planner, light, overtake = model.planner is not None, model.light is not None, model.overtake is not None
    losses = ("loss", *loss_names(planner, light, overtake))
    heads = [head for head, has in (("light", light), ("overtake", overtake)) if has]  # the heads that call
    conf_sem = torch.zeros(mc.semantic_classes, mc.semantic_classes, dtype=torch.long)
    conf_bev = torch.zeros(mc.bev_classes, mc.bev_classes, dtype=torch.long)
    sums = dict.fromkeys(("frames", *(f"loss/{k}" for k in losses), "waypoints", "error", "error_cv",
                          "final_waypoints", "final_error", "final_error_cv",
                          *(f"{head}_{k}" for head in heads for k in ("true", "called", "hits", "right"))), 0.0)
    mine = list(items)[rt.rank::rt.world]
    if mine:
        for batch in data.loader(make_dataset(mine), cfg.batch_size, cfg.num_workers, drop_last=False):
            batch = data.to_device(batch, rt.device)
            with rt.autocast():
                out = model(batch)
                batch_losses = compute_losses(out, batch, cfg.loss_weights())
            n = batch["rgb"].shape[0]
            sums["frames"] += n
            for k in losses:
                sums[f"loss/{k}"] += float(batch_losses[k]) * n
            conf_sem += confusion(out["semantics"].argmax(1), batch["semantics"], mc.semantic_classes)
            conf_bev += confusion(out["bev"].argmax(1), batch["bev"], mc.bev_classes)
            calls = {}
            if light:
                calls["light"] = out["light"].float().sigmoid() > LIGHT_STOP_P, batch["light_hazard"].bool()
            if overtake:
                calls["overtake"] = (out["overtake"].float().sigmoid() > OVERTAKE_P,
                                     goes_round(batch["overtake_offset"].float()))
            for head, (called, true) in calls.items():
                sums[f"{head}_true"] += float(true.sum())
                sums[f"{head}_called"] += float(called.sum())
                sums[f"{head}_hits"] += float((called & true).sum())
                sums[f"{head}_right"] += float((called == true).sum())
            if planner:
                valid = batch["waypoints_valid"].bool()
                true = batch["waypoints"].float()
                error = (out["waypoints"].float() - true).norm(dim=-1)
                error_cv = (constant_velocity(batch["speed"], mc.horizon, mc.frame_dt) - true).norm(dim=-1)
                last = valid[:, -1]
                sums["waypoints"] += float(valid.sum())
                sums["error"] += float((error * valid).sum())
                sums["error_cv"] += float((error_cv * valid).sum())
                sums["final_waypoints"] += float(last.sum())
                sums["final_error"] += float(error[:, -1][last].sum())
                sums["final_error_cv"] += float(error_cv[:, -1][last].sum())
    conf_sem, conf_bev = rt.all_sum(conf_sem), rt.all_sum(conf_bev)
    sums = rt.all_sum_named(sums)
    model.train()

    frames = max(1.0, sums["frames"])
    metrics = {"frames": int(sums["frames"]), "miou_semantics": miou(conf_sem), "miou_bev": miou(conf_bev)}
    metrics.update({k if k == "loss" else f"loss_{k}": sums[f"loss/{k}"] / frames for k in losses})
    for head in heads:
        shares = {f"{head}_accuracy": (f"{head}_right", "frames"), f"{head}_recall": (f"{head}_hits", f"{head}_true"),
                  f"{head}_precision": (f"{head}_hits", f"{head}_called")}
        metrics.update({name: sums[part] / sums[whole] for name, (part, whole) in shares.items() if sums[whole] > 0})
    if planner and sums["waypoints"] > 0:
        waypoints, final = sums["waypoints"], max(1.0, sums["final_waypoints"])
        metrics.update(ade=sums["error"] / waypoints, ade_constant_velocity=sums["error_cv"] / waypoints,
                       fde=sums["final_error"] / final, fde_constant_velocity=sums["final_error_cv"] / final)
    return metrics


def train_images(out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor], settings: CacheSettings,
                 frame_dt: float) -> dict[str, np.ndarray]:
    """TensorBoard images of the first sample of a training batch: true above (or left of) predicted."""
    sem_true = batch["semantics"][0].cpu().numpy()
    sem_pred = out["semantics"][0].argmax(0).cpu().numpy()
    bev_true = batch["bev"][0].cpu().numpy()
    bev_pred = out["bev"][0].argmax(0).cpu().numpy()
    images = {
        "semantics": np.concatenate([pictures.colour_semantics(sem_true), pictures.colour_semantics(sem_pred)], 0),
        "bev": np.concatenate([pictures.colour_bev(bev_true), pictures.colour_bev(bev_pred)], 1),
    }
    if "waypoints" in out:
        valid = batch["waypoints_valid"][0].cpu().numpy().astype(bool)
        baseline = constant_velocity(batch["speed"][:1], out["waypoints"].shape[1], frame_dt)[0]
        images["waypoints"] = pictures.bev_with_waypoints(
            bev_true, settings, true=batch["waypoints"][0].cpu().numpy()[valid],
            pred=out["waypoints"][0].detach().float().cpu().numpy(), baseline=baseline.cpu().numpy())
    return images


def picture_frame(dataset: Dataset) -> dict[str, Any]:
    """The frame of the predictions picture: among a few held-out frames, the one that turns most
    (else drives farthest), where a planner has the most to show against the baseline."""
    def interest(sample: dict[str, Any]) -> float:
        wp = sample["waypoints"][sample["waypoints_valid"].astype(bool)]
        return float(abs(wp[-1, 1]) + 0.2 * wp[-1, 0]) if len(wp) else -1.0

    return max((dataset[i] for i in range(len(dataset))), key=interest)


def predictions_picture(model: TransFuser, sample: dict[str, Any], rt: Runtime,
                        settings: CacheSettings) -> np.ndarray:
    """One frame's camera, semantics, depth and BEV with true / predicted / baseline waypoints."""
    batch = data.to_device(data.collate([{**sample, "rebuilt": 0, "replaced": 0}]), rt.device)
    model.eval()
    with torch.no_grad(), rt.autocast():
        out = model(batch)
    model.train()
    pred = {"semantics": out["semantics"].argmax(1)[0].cpu().numpy(), "bev": out["bev"].argmax(1)[0].cpu().numpy(),
            "depth": out["depth"][0].float().cpu().numpy() * DEPTH_UNIT}
    baseline = None
    if "waypoints" in out:
        pred["waypoints"] = out["waypoints"][0].float().cpu().numpy()
        baseline = constant_velocity(batch["speed"], model.cfg.horizon, model.cfg.frame_dt)[0].cpu().numpy()
    return pictures.prediction_panel(sample, pred, settings, baseline)


def write_predictions(path: Path, model: TransFuser, items: Sequence[data.Item], rt: Runtime,
                      settings: CacheSettings, make_dataset: Callable[[list[data.Item]], Dataset]) -> Path:
    """predictions.png at `path`: the frame of `picture_frame` among PICTURE_CANDIDATES spread over `items`."""
    sample = picture_frame(make_dataset(data.val_items(items, PICTURE_CANDIDATES)))
    png = io.BytesIO()
    Image.fromarray(predictions_picture(model, sample, rt, settings)).save(png, format="PNG")
    atomic.write_bytes(path, png.getvalue())
    return path
