"""The training loop: read top to bottom. Setup, init or resume, one `while` loop, a summary.

    setup      process group (torchrun), device, precision, signals
    model      resume from LOGDIR's newest complete checkpoint, else (posttrain) the pre-training
               checkpoint plus a new planner, else a fresh model
    data       the collection's bucket files and the cache: epoch order, position in the epoch
    loop       lr, forward/backward, skip a non-finite step, clip, step, log, images, eval, save
    end        validation, summary.json, predictions.png

The loop's state is a small dict (`loop`): step, epoch, samples consumed in the epoch and counters.
Together with the model, optimizer, scheduler, scaler and RNG states it is all a resume needs.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image
from torch.nn.parallel import DistributedDataParallel

from tools.dataset import atomic
from tools.dataset.errors import ToolError
from tools.dataset.layout import Layout
from tools.dataset.samples import CacheSettings
from tools.train import checkpoint, data, pictures
from tools.train.config import TrainConfig
from tools.train.model import ModelConfig, TransFuser, compute_losses, count_parameters, model_config

#: Seconds between two recorded frames (20 Hz simulation, every 5th tick recorded): the waypoints'
#: spacing in time, which the constant-velocity baseline needs.
FRAME_DT = 0.25

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- setup


@dataclass
class Runtime:
    rank: int
    local_rank: int
    world: int
    device: torch.device
    precision: str  # fp32 | bf16 | fp16

    @property
    def main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            t = t.to(self.device)
            dist.all_reduce(t)
        return t.cpu()


def setup(cfg: TrainConfig) -> Runtime:
    """The process group under torchrun (RANK / WORLD_SIZE set), the device, and the precision."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cfg.device == "auto":
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ToolError(f"device={cfg.device}: CUDA is not available here; use device=auto or device=cpu")
    if device.type == "cuda":
        if device.index is None:
            device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
    # bf16 where the device supports it (asked of the device, not of a list of GPU names); else fp16 with a
    # grad scaler on CUDA; fp32 on CPU, where autocast buys nothing for convolutions.
    precision = cfg.precision
    if precision == "auto":
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if device.type == "cuda" else "fp32"
    if precision != "fp32" and device.type != "cuda":
        raise ToolError(f"precision={precision}: mixed precision needs a CUDA device; use precision=auto or fp32")
    if world > 1:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Runtime(rank, local_rank, world, device, precision)


class StopFlag:
    """SIGTERM / SIGUSR1 set a flag; the loop finishes the step, checkpoints and exits 128 + signal."""

    def __init__(self) -> None:
        self.signum = 0
        for s in SIGNALS:
            signal.signal(s, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signum = signum


# ----------------------------------------------------------------------------- model source


def find_pretrain(cfg: TrainConfig) -> Path:
    """The pre-training checkpoint posttrain starts from (load=, else the newest under outputs/pretrain)."""
    where = Path(cfg.load) if cfg.load else Path("outputs/pretrain").absolute()
    found = checkpoint.resolve(where)
    if found is None:
        hint = "pass load=PATH of an existing checkpoint" if cfg.load else \
            "run bin/train pretrain first, or pass load=PATH"
        raise ToolError(f"no complete pre-training checkpoint at {where}: {hint}")
    return found


def lr_lambda(cfg: TrainConfig):
    """Linear warmup to lr, then cosine decay to lr / 10 at max_steps (a factor of cfg.lr)."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / (cfg.warmup_steps + 1)
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    # Weight decay on weight matrices and kernels only, not on biases, norms and position embeddings.
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.endswith(".pos")]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.endswith(".pos"))]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=device.type == "cuda")


def loss_weights(cfg: TrainConfig) -> dict[str, float]:
    return {"semantics": cfg.w_semantics, "depth": cfg.w_depth, "bev": cfg.w_bev, "waypoints": cfg.w_waypoints,
            "target_speed": cfg.w_target_speed, "route": cfg.w_route}


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# ----------------------------------------------------------------------------- validation


def constant_velocity(speed: torch.Tensor, horizon: int) -> torch.Tensor:
    """The baseline planner: the current speed, straight ahead along x, one waypoint per frame."""
    t = torch.arange(1, horizon + 1, dtype=torch.float32, device=speed.device) * FRAME_DT
    wp = torch.zeros(speed.shape[0], horizon, 2, device=speed.device)
    wp[:, :, 0] = speed.float()[:, None] * t
    return wp


def confusion(pred: torch.Tensor, true: torch.Tensor, n: int) -> torch.Tensor:
    return torch.bincount((true.long() * n + pred.long()).flatten(), minlength=n * n).view(n, n).cpu()


def miou(conf: torch.Tensor) -> float:
    """Mean intersection over union over the classes present in the labels or the predictions."""
    conf = conf.double()
    inter = conf.diag()
    union = conf.sum(0) + conf.sum(1) - inter
    present = union > 0
    return float((inter[present] / union[present]).mean()) if present.any() else float("nan")


@torch.no_grad()
def validate(model: TransFuser, items: list, rt: Runtime, cfg: TrainConfig, make_dataset) -> dict[str, float]:
    """Held-out metrics: semantics and BEV mIoU, and (with a planner) waypoint ADE / FDE in metres
    next to the constant-velocity baseline on the same frames. Sums are reduced over all ranks."""
    model.eval()
    mc = model.cfg
    conf_sem = torch.zeros(mc.semantic_classes, mc.semantic_classes, dtype=torch.long)
    conf_bev = torch.zeros(mc.bev_classes, mc.bev_classes, dtype=torch.long)
    # sums: frames, ade, cv ade, valid waypoints, fde, cv fde, frames with a final waypoint, losses...
    sums = torch.zeros(7, dtype=torch.float64)
    loss_sums: dict[str, float] = {}
    mine = items[rt.rank::rt.world]
    if mine:
        for batch in data.loader(make_dataset(mine), cfg.batch_size, cfg.num_workers, drop_last=False):
            batch = to_device(batch, rt.device)
            with rt.autocast():
                out = model(batch)
                losses = compute_losses(out, batch, loss_weights(cfg))
            n = batch["rgb"].shape[0]
            for k, v in losses.items():
                loss_sums[k] = loss_sums.get(k, 0.0) + float(v) * n
            conf_sem += confusion(out["semantics"].argmax(1), batch["semantics"], mc.semantic_classes)
            conf_bev += confusion(out["bev"].argmax(1), batch["bev"], mc.bev_classes)
            sums[0] += n
            if "waypoints" in out:
                valid = batch["waypoints_valid"].bool()
                true = batch["waypoints"].float()
                err = (out["waypoints"].float() - true).norm(dim=-1)
                err_cv = (constant_velocity(batch["speed"], mc.horizon) - true).norm(dim=-1)
                last = valid[:, -1]
                sums[1] += float((err * valid).sum())
                sums[2] += float((err_cv * valid).sum())
                sums[3] += float(valid.sum())
                sums[4] += float(err[:, -1][last].sum())
                sums[5] += float(err_cv[:, -1][last].sum())
                sums[6] += float(last.sum())
    names = sorted(["loss", "semantics", "bev", "depth"] + (["waypoints", "target_speed", "route"]
                                                             if model.planner is not None else []))
    loss_vec = torch.tensor([loss_sums.get(k, 0.0) for k in names], dtype=torch.float64)
    conf_sem, conf_bev = rt.all_sum(conf_sem), rt.all_sum(conf_bev)
    sums, loss_vec = rt.all_sum(sums), rt.all_sum(loss_vec)
    model.train()
    frames = max(1.0, float(sums[0]))
    metrics = {"frames": int(sums[0]), "miou_semantics": miou(conf_sem), "miou_bev": miou(conf_bev)}
    metrics.update({k if k == "loss" else f"loss_{k}": float(v) / frames
                    for k, v in zip(names, loss_vec, strict=True)})
    if model.planner is not None and sums[3] > 0:
        metrics.update(ade=float(sums[1] / sums[3]), ade_constant_velocity=float(sums[2] / sums[3]),
                       fde=float(sums[4] / max(1.0, float(sums[6]))),
                       fde_constant_velocity=float(sums[5] / max(1.0, float(sums[6]))))
    return metrics


def predictions_picture(model: TransFuser, sample: dict[str, Any], rt: Runtime, settings: CacheSettings) -> np.ndarray:
    """One frame's camera, semantics, depth and BEV with true / predicted / baseline waypoints."""
    batch = to_device(data.collate([{**sample, "rebuilt": 0, "replaced": 0}]), rt.device)
    model.eval()
    with torch.no_grad(), rt.autocast():
        out = model(batch)
    model.train()
    pred = {"semantics": out["semantics"].argmax(1)[0].cpu().numpy(), "bev": out["bev"].argmax(1)[0].cpu().numpy(),
            "depth": out["depth"][0].float().cpu().numpy() * 10.0}
    baseline = None
    if "waypoints" in out:
        pred["waypoints"] = out["waypoints"][0].float().cpu().numpy()
        baseline = constant_velocity(batch["speed"], model.cfg.horizon)[0].cpu().numpy()
    return pictures.prediction_panel(sample, pred, settings, baseline)


def picture_frame(dataset) -> dict[str, Any]:
    """The frame of the predictions picture: among a few held-out frames, the one that turns most
    (else drives farthest), where a planner has the most to show against the baseline."""
    def interest(sample: dict[str, Any]) -> float:
        wp = sample["waypoints"][sample["waypoints_valid"].astype(bool)]
        return float(abs(wp[-1, 1]) + 0.2 * wp[-1, 0]) if len(wp) else -1.0

    return max((dataset[i] for i in range(len(dataset))), key=interest)


def train_images(out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                 settings: CacheSettings) -> dict[str, np.ndarray]:
    """TensorBoard images of the first sample of a training batch: true above predicted."""
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
        images["waypoints"] = pictures.bev_with_waypoints(
            bev_true, settings, true=batch["waypoints"][0].cpu().numpy()[valid],
            pred=out["waypoints"][0].detach().float().cpu().numpy(),
            baseline=constant_velocity(batch["speed"][:1], out["waypoints"].shape[1])[0].cpu().numpy())
    return images


# ----------------------------------------------------------------------------- training


def train(cfg: TrainConfig) -> int:
    """Train (or resume) per `cfg`; returns the exit status: 0, or 128 + the signal that stopped it."""
    cfg = cfg.resolved()
    rt = setup(cfg)
    stop = StopFlag()
    logdir = Path(cfg.logdir)
    t_start = time.time()

    # --- where the weights come from: our own newest checkpoint, else the pre-training one, else fresh
    resume = checkpoint.latest(logdir)
    ckpt, start = None, None
    if resume is not None:
        ckpt = checkpoint.load(resume)
        if ckpt["config"].get("phase") != cfg.phase:
            raise ToolError(f"logdir {logdir} holds {ckpt['config'].get('phase')} checkpoints, not {cfg.phase}: "
                            "give another logdir=")
    elif cfg.phase == "posttrain":
        start = checkpoint.load_model_only(find_pretrain(cfg))

    # --- data: the collection's bucket files (rebuilt when stale) and the cache
    from tools.dataset.buckets import load_collection

    layout = Layout(Path(cfg.root))
    if not rt.main:
        rt.barrier()  # rank 0 first: it may rebuild stale bucket files
    collection = load_collection(layout, cfg.collection)
    cache_root, settings = data.find_cache(layout)
    val_frames = data.val_items(collection.frames("val"), cfg.val_samples)
    if rt.main:
        data.check_cache_complete(cache_root, layout, collection.frames("train") + collection.frames("val"))
        rt.barrier()
    session = None
    if cfg.session_cache:
        from tools.dataset.cache import SessionCache

        # "auto": SessionCache picks $SLURM_TMPDIR, else $TMPDIR (node-local disk)
        folder = None if cfg.session_cache == "auto" else Path(cfg.session_cache).expanduser().absolute()
        session = SessionCache(cache_root.name, int(cfg.session_cache_gb * 2**30), folder)

    def make_dataset(items):
        return data.RecordDataset(items, layout.root, cache_root, settings, session)

    # --- model
    if ckpt is not None:
        mcfg = ModelConfig.from_dict(ckpt["state"]["model_config"])
        if ckpt["config"].get("model") != cfg.model:
            data.warn(f"model={cfg.model} ignored: resuming the {ckpt['config'].get('model')} model of {resume}")
            cfg.model = ckpt["config"]["model"]
    elif start is not None:
        mcfg = ModelConfig.from_dict(start["model_config"])
        cfg.model = start["config"].get("model", cfg.model)
    else:
        mcfg = model_config(cfg.model, settings)
    expected = model_config("tiny", settings)
    for name in ("image_size", "bev_pixels", "horizon", "route_points"):
        if getattr(mcfg, name) != getattr(expected, name):
            raise ToolError(f"the checkpoint's model takes {name}={getattr(mcfg, name)}, the cache "
                            f"{cache_root} holds {getattr(expected, name)}: train from scratch in a new logdir")
    torch.manual_seed(cfg.seed)
    model = TransFuser(mcfg, planner=cfg.phase == "posttrain")
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
    elif start is not None:
        missing, unexpected = model.load_state_dict(start["model"], strict=False)
        if unexpected or any(not k.startswith("planner.") for k in missing):
            raise ToolError(f"{start['path']} does not hold weights of this model (missing {len(missing)}, "
                            f"unexpected {len(unexpected)} tensors): pass load= of a drivekit pre-training checkpoint")
    model.to(rt.device)
    optimizer = make_optimizer(model, cfg, rt.device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    scaler = torch.amp.GradScaler("cuda") if rt.precision == "fp16" else None
    loop = {"step": 0, "epoch": 0, "consumed": 0, "skipped": 0, "rebuilt": 0, "replaced": 0, "samples": 0,
            "world": rt.world, "batch_size": cfg.batch_size}
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["state"]["scheduler"])
        if scaler is not None and ckpt["state"].get("scaler"):
            scaler.load_state_dict(ckpt["state"]["scaler"])
        checkpoint.set_rng_state(ckpt["state"]["rng"])
        old = ckpt["state"]["loop"]
        for name, now in (("batch_size", cfg.batch_size), ("world", rt.world)):
            if old.get(name) != now:
                data.warn(f"{name} changed from {old.get(name)} to {now} since {resume.name}: the sample order "
                          "continues from the same position but the loss curve will not match exactly")
        loop.update({k: v for k, v in old.items() if k in loop})
        loop.update(world=rt.world, batch_size=cfg.batch_size)
    ddp = DistributedDataParallel(model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None) \
        if rt.world > 1 else model
    batches = data.TrainBatches(lambda e: collection.epoch_samples("train", e, cfg.seed), make_dataset,
                                cfg.batch_size, rt.rank, rt.world, cfg.num_workers, loop["epoch"], loop["consumed"])

    writer = None
    if rt.main:
        from torch.utils.tensorboard import SummaryWriter

        logdir.mkdir(parents=True, exist_ok=True)
        atomic.write_json(logdir / "config.json", {**cfg.to_dict(), "model_config": mcfg.to_dict()})
        # purge_step: events a killed run logged after its last checkpoint are dropped from the curves
        writer = SummaryWriter(str(logdir), purge_step=loop["step"] + 1 if loop["step"] else None)
        how = f"resuming {resume}" if ckpt else (f"starting from {start['path']}" if start else "from scratch")
        log(f"train {cfg.phase}: {cfg.model} model, {count_parameters(model):,} parameters, {how}; "
            f"step {loop['step']}/{cfg.max_steps}, epoch {loop['epoch']}; {rt.world} process(es) on {rt.device} "
            f"({rt.precision}); collection {cfg.collection}: {len(collection.frames('train'))} train / "
            f"{len(val_frames)} val frames; cache {cache_root}; logdir {logdir}")

    def save() -> Path | None:
        path = None
        if rt.main:
            loop.update(batches.state())
            state = {"scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler else {},
                     "rng": checkpoint.rng_state(), "loop": dict(loop), "model_config": mcfg.to_dict()}
            path = checkpoint.save(logdir, loop["step"], model.state_dict(), optimizer.state_dict(), state,
                                   cfg.to_dict(), cfg.keep)
        rt.barrier()
        return path

    weights = loss_weights(cfg)
    window = {"t": time.time(), "steps": 0, "finite": 0, "sums": {}}  # what the next log line averages
    last_losses: dict[str, float] = {}
    val_metrics: dict[str, float] = {}
    stopped_by = 0
    saved_at = loop["step"] if ckpt is not None else -1

    # --- the loop
    while loop["step"] < cfg.max_steps and not (cfg.epochs and batches.epoch >= cfg.epochs):
        step = loop["step"] + 1  # the number of the step being taken (the checkpoint after it is step-<step>)
        batch = to_device(batches.next(), rt.device)
        with rt.autocast():
            out = ddp(batch)
            losses = compute_losses(out, batch, weights)
        loss = losses["loss"]
        if step in cfg.debug_nan_steps:
            loss = loss * float("nan")
        # All ranks agree on skipping (a backward on some ranks only would hang DDP) and on stopping.
        flags = rt.all_sum(torch.tensor([float(not torch.isfinite(loss)), float(stop.signum != 0),
                                         float(batch["rebuilt"]), float(batch["replaced"])]))
        skip = flags[0] > 0
        if not skip:
            (scaler.scale(loss) if scaler else loss).backward()
            if scaler:
                scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
            if scaler:
                scaler.step(optimizer)  # skips the update itself on inf/NaN gradients
                scaler.update()
            elif torch.isfinite(norm):
                optimizer.step()
            else:
                skip = True
        if skip:
            loop["skipped"] += 1
            if rt.main:
                data.warn(f"step {step}: non-finite loss or gradient, step skipped ({loop['skipped']} so far)")
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        loop["step"] = step
        loop["samples"] += cfg.batch_size * rt.world
        loop["rebuilt"] += int(flags[2])
        loop["replaced"] += int(flags[3])

        # --- log
        window["steps"] += 1
        if not skip:
            for k, v in losses.items():
                window["sums"][k] = window["sums"].get(k, 0.0) + float(v.detach())
            window["finite"] += 1
        if rt.main and (step % cfg.log_every == 0 or step == cfg.max_steps):
            last_losses = {k: v / max(1, window["finite"]) for k, v in window["sums"].items()}
            rate = window["steps"] * cfg.batch_size * rt.world / max(time.time() - window["t"], 1e-9)
            for k, v in last_losses.items():
                writer.add_scalar(f"train/{k}", v, step)
            writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
            writer.add_scalar("train/samples_per_s", rate, step)
            writer.add_scalar("train/skipped_steps", loop["skipped"], step)
            writer.add_scalar("train/epoch", batches.epoch, step)
            parts = " ".join(f"{k} {v:.4f}" for k, v in last_losses.items() if k != "loss")
            total = last_losses.get("loss", float("nan"))
            log(f"step {step}/{cfg.max_steps} | epoch {batches.epoch} | loss {total:.6f}"
                f" | {parts} | lr {scheduler.get_last_lr()[0]:.2e} | {rate:.1f} samples/s"
                + (f" | skipped {loop['skipped']}" if loop["skipped"] else ""))
            window = {"t": time.time(), "steps": 0, "finite": 0, "sums": {}}
        if rt.main and cfg.image_every and step % cfg.image_every == 0:
            for tag, image in train_images(out, batch, settings).items():
                writer.add_image(f"images/{tag}", image, step, dataformats="HWC")

        # --- eval and save when due; on a signal: save and leave
        stopping = flags[1] > 0
        if cfg.val_every and step % cfg.val_every == 0 and step < cfg.max_steps and not stopping and val_frames:
            val_metrics = validate(model, val_frames, rt, cfg, make_dataset)
            if rt.main:
                for k, v in val_metrics.items():
                    writer.add_scalar(f"val/{k}", v, step)
                log(f"val @ {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in val_metrics.items()))
        if step % cfg.save_every == 0 or stopping:
            path = save()
            saved_at = step
            if rt.main:
                log(f"checkpoint {path}")
        if stopping:
            stopped_by = stop.signum or int(signal.SIGTERM)  # another rank got the signal
            break

    if stopped_by:
        if rt.main:
            writer.close()
            log(f"train {cfg.phase}: stopped by signal {signal.Signals(stopped_by).name} at step {loop['step']}; "
                f"checkpoint written; rerun the same command to resume")
        if rt.world > 1:
            dist.destroy_process_group()
        return 128 + stopped_by

    # --- the end: a final checkpoint, validation, summary, picture
    if saved_at != loop["step"]:
        save()
    if val_frames:
        val_metrics = validate(model, val_frames, rt, cfg, make_dataset)
    else:
        data.warn(f"collection {cfg.collection} has no held-out (val) frames: no validation metrics")
    if rt.main:
        for k, v in val_metrics.items():
            writer.add_scalar(f"val/{k}", v, loop["step"])
        picture = None
        if val_frames:
            sample = picture_frame(make_dataset(data.val_items(val_frames, 32)))
            picture = logdir / "predictions.png"
            png = io.BytesIO()
            Image.fromarray(predictions_picture(model, sample, rt, settings)).save(png, format="PNG")
            atomic.write_bytes(picture, png.getvalue())
        writer.close()
        summary = {
            "phase": cfg.phase, "model": cfg.model, "parameters": count_parameters(model), "steps": loop["step"],
            "epoch": batches.epoch, "samples": loop["samples"], "seconds": round(time.time() - t_start, 1),
            "skipped_steps": loop["skipped"], "rebuilt_records": loop["rebuilt"],
            "replaced_samples": loop["replaced"], "world_size": rt.world, "device": str(rt.device),
            "precision": rt.precision, "final_train_losses": last_losses, "val": val_metrics,
            "checkpoints": str(logdir / checkpoint.CHECKPOINTS), "events": str(logdir),
            "predictions": str(picture) if picture else None,
        }
        atomic.write_json(logdir / "summary.json", summary)
        log(summary_text(summary))
    if rt.world > 1:
        dist.destroy_process_group()
    return 0


def summary_text(s: dict[str, Any]) -> str:
    val = s["val"]
    lines = [f"train {s['phase']}: {s['steps']} steps ({s['samples']} samples, {s['epoch']} epochs) of the "
             f"{s['model']} model ({s['parameters']:,} parameters) in {s['seconds']:.0f} s on {s['world_size']} "
             f"process(es) ({s['device']}, {s['precision']}); {s['skipped_steps']} skipped steps, "
             f"{s['rebuilt_records']} rebuilt records, {s['replaced_samples']} replaced samples."]
    if s["final_train_losses"]:
        lines.append("final train losses: " + ", ".join(f"{k} {v:.4f}" for k, v in s["final_train_losses"].items()))
    if val:
        text = f"held-out ({val['frames']} frames): semantics mIoU {val['miou_semantics']:.3f}, BEV mIoU " \
               f"{val['miou_bev']:.3f}"
        if "ade" in val:
            text += (f"; waypoints ADE {val['ade']:.3f} m, FDE {val['fde']:.3f} m (constant velocity: ADE "
                     f"{val['ade_constant_velocity']:.3f} m, FDE {val['fde_constant_velocity']:.3f} m)")
        lines.append(text)
    lines.append(f"checkpoints {s['checkpoints']}; TensorBoard events in {s['events']}"
                 + (f"; picture {s['predictions']}" if s["predictions"] else ""))
    return "\n".join(lines)
