"""The training loop: `train` reads top to bottom. Setup, init or resume, one `while` loop, a summary.

    setup      process group (torchrun), device, precision, signals (runtime.py)
    model      resume from LOGDIR's newest complete checkpoint, else (posttrain) the pre-training
               checkpoint plus a new planner, else a fresh model (starting_point, build_model)
    data       the cache (its settings and the time between its frames) and the collection's bucket
               files (open_source): epoch order, position in the epoch
    step       train_step: forward/backward under autocast, skip a non-finite step, clip, optimizer,
               scaler and scheduler step
    loop       step, log, images, eval and save when due (log_train, save)
    end        validation, summary.json, predictions.png (validation and pictures: validate.py)

The loop's state is a small dict (`loop`): step, epoch, samples consumed in the epoch and counters.
Together with the model, optimizer, scheduler, scaler and RNG states it is all a resume needs. The
TrainConfig is settled before the model is built and never changes during the run.

Besides the TrainConfig, every checkpoint's config.json (and the run folder's) records what the model
was trained on under `trained_on` (`trained_on()`): the dataset_id, the bucket file (its hash and the dataset
state it was built from), the cache key (its folder name) and preprocessing settings, the rig and the towns of
the training runs, and for a post-training run what its pre-training checkpoint read. Driving the model later
(tools/evaluate/policy.py) needs the settings and the rig; the rest names the data, and goes into the
TensorBoard run too (text tag "data").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import signal
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tools.core import atomic, files
from tools.core.errors import ToolError, space_for
from tools.dataset.buckets import TRAINING_SPLITS, Collection, collection_path, load_collection
from tools.dataset.cache import SessionCache, cache_format, read_frame_dt
from tools.dataset.layout import Layout, run_key
from tools.dataset.manifest import dataset_id
from tools.dataset.rig import RigConfig, run_rig
from tools.dataset.samples import OVERTAKE_CACHE_FORMAT, CacheSettings
from tools.train import checkpoint, data
from tools.train.config import TrainConfig, loss_names
from tools.train.model import ModelConfig, TransFuser, compute_losses, count_parameters, model_config
from tools.train.runtime import Runtime, StopFlag, log, setup
from tools.train.validate import train_images, validate, write_predictions

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: What must be the same in a checkpoint's model and the cache it trains on (besides frame_dt).
CACHE_SHAPED = ("image_size", "bev_pixels", "horizon", "route_points", "overtake_head")


# ----------------------------------------------------------------------------- model source


def find_pretrain(cfg: TrainConfig) -> Path:
    """The pre-training checkpoint posttrain starts from (--load, else the newest under outputs/pretrain)."""
    where = Path(cfg.load) if cfg.load else Path("outputs/pretrain").absolute()
    found = checkpoint.resolve(where)
    if found is None:
        hint = "pass --load=PATH of an existing checkpoint" if cfg.load else \
            "run bin/train pretrain first, or pass --load=PATH"
        raise ToolError(f"no complete pre-training checkpoint at {where}: {hint}")
    return found


def stored_model_config(stored: dict[str, Any], path: Path, cache: ModelConfig, cache_root: Path,
                        fix: str) -> ModelConfig:
    """The architecture a checkpoint holds, checked against what the cache holds (`cache`: the model
    config made for it); one ToolError naming both and `fix` when they disagree."""
    try:
        mcfg = ModelConfig.from_dict(stored)
    except (ValueError, TypeError) as e:
        raise ToolError(f"{path}: {e}: not a checkpoint of this model; {fix}") from None
    if not math.isclose(mcfg.frame_dt, cache.frame_dt, rel_tol=1e-9):
        raise ToolError(f"{path} was trained on frames {mcfg.frame_dt:g} s apart, the cache {cache_root} holds frames "
                        f"{cache.frame_dt:g} s apart: {fix}")
    for name in CACHE_SHAPED:
        if getattr(mcfg, name) != getattr(cache, name):
            raise ToolError(f"{path} holds a model of {name}={getattr(mcfg, name)}, the cache {cache_root} holds "
                            f"{getattr(cache, name)}: {fix}")
    return mcfg


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


def bucket_record(layout: Layout, collection: Collection) -> dict[str, Any]:
    """The bucket file a run reads, as a checkpoint names it: its path relative to ROOT, the sha256 of its bytes,
    the fingerprint of the dataset state it was built from (`built_from`), its route runs and frames per split.
    ToolError when the file on disk is no longer the one loaded (another process rebuilt it meanwhile)."""
    path = collection_path(layout, collection.name)
    try:
        raw = files.read_bytes(path, files.MAX_JSON_BYTES)
        on_disk = files.loads(raw)["built_from"]["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        on_disk = None
    if on_disk != collection.built_from.get("fingerprint"):
        raise ToolError(f"{path} changed on disk while training started (rebuilt by another process?); run the same "
                        "command again")
    return {"file": path.relative_to(layout.root).as_posix(), "sha256": hashlib.sha256(raw).hexdigest(),
            "built_from": collection.built_from["fingerprint"], "runs": len(collection.built_from.get("runs") or {}),
            "frames": {split: len(collection.frames(split)) for split in TRAINING_SPLITS}}


def trained_on(layout: Layout, cache_root: Path, settings: CacheSettings, collection: Collection) -> dict[str, Any]:
    """What a checkpoint records about its training data. To name it: the dataset_id of the root, the bucket
    file (`bucket_record`, by collection name) and the cache key (the cache folder's name). To drive the model
    later: the cache's preprocessing settings, the rig of the training runs (the one most of them were recorded
    with: the cache refuses runs lacking its camera) and the sorted town names of the training runs (their
    run.json)."""
    frames = collection.frames("train")
    rigs: Counter[RigConfig] = Counter()
    towns: set[str] = set()
    for rel in sorted({run for run, _ in frames}):
        path = layout.run_settings(run_key(rel))
        try:
            run = files.read_json(path)
            rigs[run_rig(run)] += 1
        except (OSError, ValueError, TypeError, AttributeError) as e:
            raise ToolError(f"{path}: cannot read the run's rig ({e}); repair the run.json, or collect the run "
                            "again (bin/collect) before training") from None
        if run.get("town"):
            towns.add(str(run["town"]))
    rig = rigs.most_common(1)[0][0] if rigs else RigConfig()
    return {"dataset_id": collection.built_from["dataset_id"],
            "buckets": {collection.name: bucket_record(layout, collection)},
            "cache": cache_root.name,  # the cache key
            "cache_settings": settings.to_dict(), "rig": rig.to_dict(), "towns": sorted(towns)}


def data_text(recorded: dict[str, Any]) -> str:
    """The TensorBoard text (tag "data") naming what a run trained on: Markdown of `trained_on`'s names."""
    lines = [f"- dataset_id: `{recorded.get('dataset_id')}`"]
    for name, bucket in (recorded.get("buckets") or {}).items():
        lines.append(f"- bucket file {bucket['file']} ({name}): sha256 `{bucket['sha256']}`, built from dataset "
                     f"state `{bucket['built_from']}` ({bucket['runs']} route runs; {bucket['frames']['train']} train "
                     f"/ {bucket['frames']['val']} val frames)")
    lines.append(f"- cache key: `{recorded.get('cache')}`")
    lines.append(f"- towns: {', '.join(recorded.get('towns') or []) or '-'}")
    start = recorded.get("started_from")
    if start:
        lines.append(f"- started from {start.get('checkpoint')}, pre-trained on dataset_id "
                     f"`{start.get('dataset_id')}`, cache key `{start.get('cache')}`")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- init or resume


#: Keys a resume must keep: the checkpoint's optimizer state holds the first two (a new value would be recorded in
#: config.json and silently not used), the position in the epoch's sample order the last two. Others (max_steps,
#: the loss weights, grad_clip, the schedule of side work) take effect when changed, and config.json says so.
#: The dataset is kept too (`resume_changes`): by its dataset_id, not its path (a root copied or moved is the same).
RESUME_FIXED = ("lr", "weight_decay", "seed", "collection")


def resume_changes(cfg: TrainConfig, before: dict[str, Any]) -> list[tuple[str, str]]:
    """(now, was) for each value a resume of a checkpoint whose config is `before` cannot change: RESUME_FIXED, and
    the dataset `root=` names (a run resumed on another dataset went on without a word, its sample order from other
    bucket files, and its checkpoints then named only the new dataset under `trained_on`)."""
    changes = [(f"{k}={getattr(cfg, k)!r}", f"{k}={before[k]!r}") for k in RESUME_FIXED
               if k in before and before[k] != getattr(cfg, k)]
    was = (before.get("trained_on") or {}).get("dataset_id")
    if was:  # (a checkpoint of an older drivekit may name none)
        now = dataset_id(Layout(Path(cfg.root)))
        if now != was:
            changes.append((f"root={cfg.root} (dataset {now})", f"root={before.get('root')} (dataset {was})"))
    return changes


def starting_point(cfg: TrainConfig, logdir: Path) -> tuple[TrainConfig, dict | None, dict | None]:
    """Where the weights come from: (cfg, ckpt, start). `ckpt`: the checkpoint of LOGDIR to resume
    (checkpoint.find_resume, checkpoint.load); else for posttrain `start`: the pre-training checkpoint
    (checkpoint.load_model_only); else neither: a fresh model. The model preset is the checkpoint's: the config is
    settled here, before anything uses it."""
    found = checkpoint.find_resume(logdir)  # a folder whose checkpoints are all damaged: one line, no start from 0
    resume = found.path
    if resume is not None:
        for line in found.warnings:
            data.warn(line)
        ckpt = checkpoint.load(resume, optimizer=found.optimizer)
        if ckpt["config"].get("phase") != cfg.phase:
            raise ToolError(f"logdir {logdir} holds {ckpt['config'].get('phase')} checkpoints, not {cfg.phase}: "
                            "give another --logdir=")
        changes = resume_changes(cfg, ckpt["config"])
        if changes:
            was = ", ".join(w for _, w in changes)
            raise ToolError(f"{', '.join(n for n, _ in changes)}: logdir {logdir} resumes a run trained with {was} "
                            f"({resume.name}), which a resume cannot change (the optimizer state, the sample order "
                            f"and the data its checkpoints name hold them); give {was}, or a new --logdir= to start "
                            "over")
        if ckpt["config"].get("model") != cfg.model:
            data.warn(f"model={cfg.model} ignored: resuming the {ckpt['config'].get('model')} model of {resume}")
            cfg = dataclasses.replace(cfg, model=ckpt["config"]["model"])
        return cfg, ckpt, None
    if cfg.phase == "posttrain":
        start = checkpoint.load_model_only(find_pretrain(cfg))
        return dataclasses.replace(cfg, model=start["config"].get("model", cfg.model)), None, start
    return cfg, None, None


@dataclass
class Source:
    """What a run reads: the cache (its folder, its settings, the seconds between its frames), the collection's
    train and held-out frames, the session cache if any, and what every checkpoint records about the data
    (`recorded`, `trained_on()`: rank 0 only, which saves; {} on the other ranks)."""

    layout: Layout
    cache_root: Path
    settings: CacheSettings
    frame_dt: float
    collection: Collection
    val_frames: list[data.Item]
    recorded: dict[str, Any]
    session: SessionCache | None
    fingerprints: dict[str, str]  # run -> its recorded attempt (data.run_fingerprints)
    frames: dict[str, list[int]]  # run -> its frames' fingerprints (data.frame_fingerprints)

    def dataset(self, items: list[data.Item]) -> data.RecordDataset:
        """The cache records of `items`: training batches, validation, the picture."""
        return data.RecordDataset(items, self.layout.root, self.cache_root, self.settings, self.session,
                                  self.fingerprints, self.frames)


def open_source(cfg: TrainConfig, rt: Runtime, ckpt: dict[str, Any] | None, start: dict[str, Any] | None) -> Source:
    """The cache (its settings and how far apart its frames are) and the collection's bucket files: train and
    val only, so the test split is not even read and no test frame can reach a batch or a validation."""
    layout = Layout(Path(cfg.root))
    cache_root, settings = data.find_cache(layout)
    frame_dt = read_frame_dt(cache_root)  # the waypoints' time step: from the data, never assumed
    if not rt.main:
        rt.barrier()  # rank 0 first: it may rebuild stale bucket files
    collection = load_collection(layout, cfg.collection, horizon=settings.horizon, splits=TRAINING_SPLITS)
    val_frames = data.val_items(collection.frames("val"), cfg.val_samples)
    recorded = {}
    items = collection.frames("train") + collection.frames("val")
    fingerprints = data.run_fingerprints(layout, items)
    frames = data.frame_fingerprints(layout, items)
    if rt.main:
        data.check_cache_complete(cache_root, layout, items, fingerprints)
        recorded = trained_on(layout, cache_root, settings, collection)
        before = start["config"] if start is not None else (ckpt["config"] if ckpt is not None else {})
        if start is not None:  # post-training from a pre-training checkpoint: name what that one read too
            recorded["started_from"] = {"checkpoint": str(start["path"]), **{
                k: v for k, v in (before.get("trained_on") or {}).items() if k in ("dataset_id", "buckets", "cache")}}
        elif (before.get("trained_on") or {}).get("started_from"):  # a resumed post-training run keeps it
            recorded["started_from"] = before["trained_on"]["started_from"]
        rt.barrier()
    session = None
    if cfg.session_cache:
        # "auto": SessionCache picks $SLURM_TMPDIR, else $TMPDIR (node-local disk)
        folder = None if cfg.session_cache == "auto" else Path(cfg.session_cache).expanduser().absolute()
        session = SessionCache(cache_root.name, int(cfg.session_cache_gb * 2**30), folder)
    return Source(layout, cache_root, settings, frame_dt, collection, val_frames, recorded, session, fingerprints,
                  frames)


def build_model(cfg: TrainConfig, rt: Runtime, src: Source, ckpt: dict[str, Any] | None,
                start: dict[str, Any] | None) -> TransFuser:
    """The checkpoint's architecture (which must fit the cache), else the preset for this cache; with the
    checkpoint's weights, or the pre-training weights and a new planner, or fresh ones (seeded), on the device."""
    # A cache of a format before OVERTAKE_CACHE_FORMAT has no overtake label: the model has no overtake head.
    mcfg = dataclasses.replace(model_config(cfg.model, src.settings, src.frame_dt),
                               overtake_head=cache_format(src.cache_root) >= OVERTAKE_CACHE_FORMAT)
    if ckpt is not None:
        mcfg = stored_model_config(ckpt["state"]["model_config"], ckpt["path"], mcfg, src.cache_root,
                                   "train from scratch in a new --logdir=, or on the cache this run was trained on")
    elif start is not None:
        preset = mcfg
        mcfg = stored_model_config(start["model_config"], start["path"], mcfg, src.cache_root,
                                   "pre-train on this cache first (bin/train pretrain), or pass --load of a "
                                   "checkpoint pre-trained on it")
        # A pre-training checkpoint has no planner: the new planner's head is this version's.
        mcfg = dataclasses.replace(mcfg, speed_classes=preset.speed_classes)
    torch.manual_seed(cfg.seed)
    model = TransFuser(mcfg, planner=cfg.phase == "posttrain")
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
    elif start is not None:
        missing, unexpected = model.load_state_dict(start["model"], strict=False)
        if unexpected or any(not k.startswith("planner.") for k in missing):
            raise ToolError(f"{start['path']} does not hold weights of this model (missing {len(missing)}, "
                            f"unexpected {len(unexpected)} tensors): pass --load of a drivekit pre-training checkpoint")
    model.to(rt.device)
    return model


@dataclass
class Optimization:
    """What a step changes besides the weights, and a checkpoint holds with them: AdamW, its learning-rate
    schedule (`lr_lambda`) and, with fp16, the grad scaler."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None

    @classmethod
    def make(cls, model: torch.nn.Module, cfg: TrainConfig, rt: Runtime) -> Optimization:
        optimizer = make_optimizer(model, cfg, rt.device)
        return cls(optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg)),
                   torch.amp.GradScaler("cuda") if rt.precision == "fp16" else None)

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]


def init_loop(cfg: TrainConfig, rt: Runtime, opt: Optimization, ckpt: dict[str, Any] | None) -> dict[str, Any]:
    """The loop's state: step, epoch, samples consumed in the epoch, counters; from the checkpoint when resuming,
    which also restores the optimizer, scheduler, scaler and RNG states."""
    loop = {"step": 0, "epoch": 0, "consumed": 0, "skipped": 0, "rebuilt": 0, "replaced": 0, "samples": 0,
            "world": rt.world, "batch_size": cfg.batch_size}
    if ckpt is not None:
        if ckpt["optimizer"] is not None:  # None: its optimizer.pt was damaged, the moments start over (find_resume)
            opt.optimizer.load_state_dict(ckpt["optimizer"])
        opt.scheduler.load_state_dict(ckpt["state"]["scheduler"])
        if opt.scaler is not None and ckpt["state"].get("scaler"):
            opt.scaler.load_state_dict(ckpt["state"]["scaler"])
        checkpoint.set_rng_state(ckpt["state"]["rng"])
        old = ckpt["state"]["loop"]
        for name, now in (("batch_size", cfg.batch_size), ("world", rt.world)):
            if old.get(name) != now:
                data.warn(f"{name} changed from {old.get(name)} to {now} since {ckpt['path'].name}: the sample order "
                          "continues from the same position but the loss curve will not match exactly")
        loop.update({k: v for k, v in old.items() if k in loop})
        loop.update(world=rt.world, batch_size=cfg.batch_size)
    return loop


def open_run_folder(logdir: Path, cfg: TrainConfig, rt: Runtime, model: TransFuser, src: Source,
                    loop: dict[str, Any], ckpt: dict[str, Any] | None, start: dict[str, Any] | None) -> SummaryWriter:
    """Rank 0: the run folder's config.json, the TensorBoard writer with the text naming the data, and the line
    saying what starts."""
    from torch.utils.tensorboard import SummaryWriter  # rank 0 only: the other ranks never load tensorboard

    logdir.mkdir(parents=True, exist_ok=True)
    checkpoint.lock_run_folder(logdir)  # (a new folder: two trainings that started together, the second stops here)
    atomic.write_json(logdir / "config.json", {**cfg.to_dict(), "model_config": model.cfg.to_dict(),
                                               "trained_on": src.recorded})
    # purge_step: events a killed run logged after its last checkpoint are dropped from the curves
    writer = SummaryWriter(str(logdir), purge_step=loop["step"] + 1 if loop["step"] else None)
    writer.add_text("data", data_text(src.recorded), loop["step"])  # what this (re)start read: a checkpoint names it
    how = f"resuming {ckpt['path']}" if ckpt else (f"starting from {start['path']}" if start else "from scratch")
    log(f"train {cfg.phase}: {cfg.model} model, {count_parameters(model):,} parameters, {how}; "
        f"step {loop['step']}/{cfg.max_steps}, epoch {loop['epoch']}; {rt.world} process(es) on {rt.device} "
        f"({rt.precision}); collection {cfg.collection}: {len(src.collection.frames('train'))} train / "
        f"{len(src.val_frames)} val frames; cache {src.cache_root} (frames {model.cfg.frame_dt:g} s apart); "
        f"logdir {logdir}")
    return writer


# ----------------------------------------------------------------------------- one step


def train_step(model: TransFuser, ddp: torch.nn.Module, opt: Optimization, batch: dict[str, torch.Tensor],
               rt: Runtime, cfg: TrainConfig, step: int, stop: StopFlag,
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]]:
    """Optimisation step `step` on `batch`: forward and losses under autocast; unless the loss is not finite on
    some rank, backward, clip and the optimizer step (through the scaler with fp16), which a non-finite gradient
    skips too; then the scheduler steps and the gradients are cleared either way.

    Returns the model's outputs, its losses and what all ranks agreed on in one all-reduce: `skipped`,
    `stopping` (some rank got a signal), and the `rebuilt` and `replaced` records of the global batch."""
    with rt.autocast():
        out = ddp(batch)
        losses = compute_losses(out, batch, cfg.loss_weights())
    loss = losses["loss"]
    if step in cfg.debug_nan_steps:
        loss = loss * float("nan")
    # All ranks agree on skipping (a backward on some ranks only would hang DDP) and on stopping.
    agreed = rt.all_sum_named({"nonfinite": float(not torch.isfinite(loss)), "stopping": float(stop.signum != 0),
                               "rebuilt": float(batch["rebuilt"]), "replaced": float(batch["replaced"])})
    skip = agreed["nonfinite"] > 0
    if not skip:
        (opt.scaler.scale(loss) if opt.scaler else loss).backward()
        if opt.scaler:
            opt.scaler.unscale_(opt.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
        if opt.scaler:
            opt.scaler.step(opt.optimizer)  # skips the update itself on inf/NaN gradients
            opt.scaler.update()
        elif torch.isfinite(norm):
            opt.optimizer.step()
        else:
            skip = True
    opt.optimizer.zero_grad(set_to_none=True)
    opt.scheduler.step()
    return out, losses, {"skipped": skip, "stopping": agreed["stopping"] > 0, "rebuilt": int(agreed["rebuilt"]),
                         "replaced": int(agreed["replaced"])}


# ----------------------------------------------------------------------------- log, save, summary


def new_window(names: Sequence[str]) -> dict[str, Any]:
    """What the next log line averages: steps taken since `t`, the finite ones and their sums of the losses, and the
    seconds spent waiting for the data loader's batches (`wait`)."""
    return {"t": time.time(), "steps": 0, "finite": 0, "sums": dict.fromkeys(names, 0.0), "wait": 0.0}


def log_train(writer: SummaryWriter, window: dict[str, Any], step: int, cfg: TrainConfig, rt: Runtime, lr: float,
              loop: dict[str, Any], epoch: int) -> dict[str, float]:
    """Rank 0: the window's mean losses, the learning rate, the rate, the share of its time spent waiting for the
    loader (near 0: the loader keeps up; the GPU starves as it grows), skipped steps and the epoch to TensorBoard
    (train/<name>) and as one line; returns the mean losses ({} when no step of the window was finite)."""
    losses = {name: total / window["finite"] for name, total in window["sums"].items()} if window["finite"] else {}
    elapsed = max(time.time() - window["t"], 1e-9)
    rate = window["steps"] * cfg.batch_size * rt.world / elapsed
    wait = min(window["wait"] / elapsed, 1.0)
    for name, value in losses.items():
        writer.add_scalar(f"train/{name}", value, step)
    writer.add_scalar("train/lr", lr, step)
    writer.add_scalar("train/samples_per_s", rate, step)
    writer.add_scalar("train/loader_wait", wait, step)
    writer.add_scalar("train/skipped_steps", loop["skipped"], step)
    writer.add_scalar("train/epoch", epoch, step)
    heads = " ".join(f"{name} {value:.4f}" for name, value in losses.items() if name != "loss")
    log(f"step {step}/{cfg.max_steps} | epoch {epoch} | loss {losses.get('loss', math.nan):.6f}"
        f" | {heads} | lr {lr:.2e} | {rate:.1f} samples/s | loader wait {100 * wait:.0f}%"
        + (f" | skipped {loop['skipped']}" if loop["skipped"] else ""))
    return losses


def save(logdir: Path, cfg: TrainConfig, rt: Runtime, src: Source, model: TransFuser, opt: Optimization,
         loop: dict[str, Any], batches: data.TrainBatches) -> Path | None:
    """Rank 0 writes the checkpoint of step loop["step"] (the loop's state with the batches' position) and
    returns its folder; every rank waits for it."""
    path = None
    if rt.main:
        loop.update(batches.state())
        state = {"scheduler": opt.scheduler.state_dict(), "scaler": opt.scaler.state_dict() if opt.scaler else {},
                 "rng": checkpoint.rng_state(), "loop": dict(loop), "model_config": model.cfg.to_dict()}
        weights, moments = model.state_dict(), opt.optimizer.state_dict()
        with space_for(logdir / checkpoint.CHECKPOINTS, "a checkpoint", lambda: (
                checkpoint.tensor_bytes([weights, moments, state]), "the model's, optimizer's and state's tensors")):
            path = checkpoint.save(logdir, loop["step"], weights, moments, state,
                                   {**cfg.to_dict(), "trained_on": src.recorded}, cfg.keep)
    rt.barrier()
    return path


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


# ----------------------------------------------------------------------------- training


def train(cfg: TrainConfig) -> int:
    """Train (or resume) per `cfg`; returns the exit status: 0, or 128 + the signal that stopped it."""
    # --- config and runtime
    cfg = cfg.resolved()
    rt = setup(cfg)
    stop = StopFlag()
    logdir = Path(cfg.logdir)
    t_start = time.time()
    if rt.main:  # one training per run folder: a second one is refused here, before it reads or writes anything
        checkpoint.lock_run_folder(logdir)  # (when the folder exists; else when open_run_folder makes it)

    # --- init or resume: where the weights come from (it settles the config), the data, the model, the optimizer
    # and the loop's state, the batches from the loop's position, the run folder
    cfg, ckpt, start = starting_point(cfg, logdir)
    src = open_source(cfg, rt, ckpt, start)
    model = build_model(cfg, rt, src, ckpt, start)
    opt = Optimization.make(model, cfg, rt)
    loop = init_loop(cfg, rt, opt, ckpt)
    ddp = DistributedDataParallel(model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None) \
        if rt.world > 1 else model
    batches = data.TrainBatches(functools.partial(src.collection.epoch_samples, "train", seed=cfg.seed), src.dataset,
                                cfg.batch_size, rt.rank, rt.world, cfg.num_workers, loop["epoch"], loop["consumed"])
    writer = open_run_folder(logdir, cfg, rt, model, src, loop, ckpt, start) if rt.main else None

    logged = ("loss", *loss_names(model.planner is not None, model.light is not None,  # train/<name>, in order
                                  model.overtake is not None))
    window = new_window(logged)
    last_losses: dict[str, float] = {}
    val_metrics: dict[str, float] = {}
    stopped_by = 0
    saved_at = loop["step"] if ckpt is not None else -1

    # --- the loop
    while loop["step"] < cfg.max_steps and not (cfg.epochs and batches.epoch >= cfg.epochs):
        step = loop["step"] + 1  # the number of the step being taken (the checkpoint after it is step-<step>)
        t_wait = time.time()
        batch = data.to_device(batches.next(), rt.device)
        window["wait"] += time.time() - t_wait
        out, losses, agreed = train_step(model, ddp, opt, batch, rt, cfg, step, stop)
        if agreed["skipped"]:
            loop["skipped"] += 1
            if rt.main:
                data.warn(f"step {step}: non-finite loss or gradient, step skipped ({loop['skipped']} so far)")
        loop["step"] = step
        loop["samples"] += cfg.batch_size * rt.world
        loop["rebuilt"] += agreed["rebuilt"]
        loop["replaced"] += agreed["replaced"]

        # --- log, images
        window["steps"] += 1
        if not agreed["skipped"]:
            for name in logged:
                window["sums"][name] += float(losses[name].detach())
            window["finite"] += 1
        if rt.main and (step % cfg.log_every == 0 or step == cfg.max_steps):
            last_losses = log_train(writer, window, step, cfg, rt, opt.lr, loop, batches.epoch)
            window = new_window(logged)
        if rt.main and cfg.image_every and step % cfg.image_every == 0:
            for tag, image in train_images(out, batch, src.settings, model.cfg.frame_dt).items():
                writer.add_image(f"images/{tag}", image, step, dataformats="HWC")

        # --- eval and save when due; on a signal: save and leave
        stopping = agreed["stopping"]
        if cfg.val_every and step % cfg.val_every == 0 and step < cfg.max_steps and not stopping and src.val_frames:
            val_metrics = validate(model, src.val_frames, rt, cfg, src.dataset)
            if rt.main:
                for name, value in val_metrics.items():
                    writer.add_scalar(f"val/{name}", value, step)
                log(f"val @ {step}: " + ", ".join(f"{name} {value:.4g}" for name, value in val_metrics.items()))
        if step % cfg.save_every == 0 or stopping:
            path = save(logdir, cfg, rt, src, model, opt, loop, batches)
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
        save(logdir, cfg, rt, src, model, opt, loop, batches)
    if src.val_frames:
        val_metrics = validate(model, src.val_frames, rt, cfg, src.dataset)
    else:
        data.warn(f"collection {cfg.collection} has no held-out (val) frames: no validation metrics")
    if rt.main:
        for name, value in val_metrics.items():
            writer.add_scalar(f"val/{name}", value, loop["step"])
        picture = write_predictions(logdir / "predictions.png", model, src.val_frames, rt, src.settings,
                                    src.dataset) if src.val_frames else None
        writer.close()
        summary = {
            "phase": cfg.phase, "model": cfg.model, "parameters": count_parameters(model), "steps": loop["step"],
            "epoch": batches.epoch, "samples": loop["samples"], "seconds": round(time.time() - t_start, 1),
            "skipped_steps": loop["skipped"], "rebuilt_records": loop["rebuilt"],
            "replaced_samples": loop["replaced"], "world_size": rt.world, "device": str(rt.device),
            "precision": rt.precision, "frame_dt": model.cfg.frame_dt, "final_train_losses": last_losses,
            "val": val_metrics, "checkpoints": str(logdir / checkpoint.CHECKPOINTS), "events": str(logdir),
            "predictions": str(picture) if picture else None,
        }
        atomic.write_json(logdir / "summary.json", summary)
        log(summary_text(summary))
    if rt.world > 1:
        dist.destroy_process_group()
    return 0
