"""The training configuration: one dataclass, every field documented, `--key=value` overrides.

The docstring under each field is its help text (`python -m tools.train --help` prints them all, through
tools.core.options). Overrides (`--key=value`; `key=value` works too) are typed from the field's annotation;
an unknown key is an error that lists the near matches; `__post_init__` checks every value and names the flag
to fix. The resolved configuration (absolute paths, defaults filled in) is written as `config.json` in the run
folder and into every checkpoint. The dataclass is frozen: what the run settles at its start (paths, the model
preset a checkpoint holds) makes a new one with `dataclasses.replace`, and the loop never changes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core import options
from tools.core.errors import ToolError
from tools.core.presets import PRESETS, TRAIN, check_preset, resolve, table_text
from tools.dataset.layout import resolve_root

PHASES = ("pretrain", "posttrain")
MODELS = ("tiny", "full")

#: The heads' losses, named once. `model.compute_losses` returns these (the planner's only with a planner)
#: and their weighted sum "loss"; the weight of each is the key `w_<name>`; the log lines, TensorBoard
#: (`train/<name>`, `val/loss_<name>`) and summary.json use these names in this order.
#: "light" is the light head's, "overtake" the overtake head's (a model without one, written before it or trained on
#: a cache without its label, has no such loss).
PERCEPTION_LOSSES = ("semantics", "bev", "depth", "light", "overtake")
PLANNER_LOSSES = ("waypoints", "target_speed", "route")
LOSSES = PERCEPTION_LOSSES + PLANNER_LOSSES


def loss_names(planner: bool, light: bool = True, overtake: bool = True) -> tuple[str, ...]:
    """The losses of a model with or without the planner, the light head and the overtake head, in LOSSES order."""
    left_out = {name for name, has in (("light", light), ("overtake", overtake)) if not has}
    return tuple(name for name in (LOSSES if planner else PERCEPTION_LOSSES) if name not in left_out)


@dataclass(frozen=True)
class TrainConfig:
    phase: str = "pretrain"
    """pretrain (perception heads only) or posttrain (perception + planner); the command's first word."""
    preset: str = ""
    """tiny, small, medium, bench2drive or full: the run size whose values (the table below) fill the keys not given on
    the command line; empty: the defaults (as full). Recorded in config.json."""

    # --- where things are -------------------------------------------------------------------------
    root: str = ""
    """Dataset root holding buckets/ and cache/. Empty: $DATA_ROOT, else ./data."""
    logdir: str = ""
    """Run folder: config.json, checkpoints/, TensorBoard events, summary.json, predictions.png.
    Empty: outputs/<phase>. Rerunning with the same logdir resumes from its newest checkpoint."""
    collection: str = ""
    """Bucket collection to train on (tools.buckets). Empty: the phase's name."""
    load: str = ""
    """posttrain only: the pre-training checkpoint to start from: a step folder, a checkpoints/ folder
    or a run folder (its newest complete checkpoint). Empty: the newest one under outputs/pretrain."""

    # --- model --------------------------------------------------------------------------------------
    model: str = "tiny"
    """Model size preset: tiny (CPU tests and the demo) or full (GPUs). On resume, and in posttrain,
    the architecture stored in the checkpoint wins."""

    # --- optimisation -------------------------------------------------------------------------------
    batch_size: int = 8
    """Samples per step and per process (the global batch is batch_size x world size)."""
    lr: float = 2e-3
    """Peak learning rate of AdamW (reached after warmup_steps, then cosine decay to lr/10)."""
    weight_decay: float = 0.01
    """AdamW weight decay of the weight matrices and kernels (not of biases and norms)."""
    warmup_steps: int = 30
    """Steps of linear learning-rate warmup from 0."""
    max_steps: int = 1200
    """Optimizer steps to train for (the cosine schedule ends here)."""
    epochs: int = 0
    """Stop at the end of this epoch count even when max_steps is not reached; 0: no epoch limit."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0: no clipping."""

    # --- loss weights -------------------------------------------------------------------------------
    w_semantics: float = 1.0
    """Weight of the camera semantics loss (cross-entropy)."""
    w_depth: float = 1.0
    """Weight of the depth loss (L1 on pixels with depth, in units of 10 m)."""
    w_bev: float = 1.0
    """Weight of the BEV semantics loss (cross-entropy)."""
    w_light: float = 1.0
    """Weight of the light head's loss (binary cross-entropy against the frame's light_hazard: the light the expert
    obeys is within 25 m and it stops for it)."""
    w_overtake: float = 1.0
    """Weight of the overtake head's loss (binary cross-entropy of whether the expert goes round an obstacle, its
    driven path 1.5 m or more beside the route 6 m ahead, plus the L1 of that offset in metres where it does)."""
    w_waypoints: float = 1.0
    """posttrain: weight of the waypoint loss (L1 in metres over valid waypoints)."""
    w_target_speed: float = 0.5
    """posttrain: weight of the target speed loss (cross-entropy over the speed classes; L1 in m/s for a
    checkpoint without them)."""
    w_route: float = 0.5
    """posttrain: weight of the route loss (L1 in metres)."""

    # --- schedule of side work ----------------------------------------------------------------------
    log_every: int = 10
    """Steps between TensorBoard scalar logs and progress lines."""
    image_every: int = 100
    """Steps between TensorBoard images (predicted vs true semantics, BEV, waypoints); 0: never."""
    val_every: int = 0
    """Steps between validations on the collection's held-out split; 0: only at the end."""
    val_samples: int = 0
    """Held-out frames a validation looks at (evenly spread over the split); 0: all of them."""
    save_every: int = 200
    """Steps between checkpoints (one is also written at the end and on SIGUSR1 / SIGTERM)."""
    keep: int = 3
    """Newest complete checkpoints to keep; older ones are deleted."""

    # --- machinery ----------------------------------------------------------------------------------
    num_workers: int = 0
    """DataLoader worker processes per training process; 0: load in the training process."""
    seed: int = 0
    """Seed of the model initialisation and of the epoch sample order."""
    device: str = "auto"
    """auto (cuda:LOCAL_RANK when CUDA is available, else cpu), cpu, cuda or cuda:N."""
    precision: str = "auto"
    """auto: bf16 autocast when the CUDA device supports it, else fp16 with a grad scaler on CUDA,
    fp32 on CPU. Or force one of fp32, bf16, fp16."""
    session_cache: str = ""
    """Node-local copy of the records filled during the first epoch: a folder, 'auto' ($SLURM_TMPDIR,
    else $TMPDIR), or empty for none."""
    session_cache_gb: float = 16.0
    """Size limit of the session cache in GiB."""
    debug_nan_steps: tuple[int, ...] = ()
    """Debugging: make the loss NaN at these steps (comma-separated), to exercise the skip path."""

    def __post_init__(self) -> None:
        checks = {
            "phase": (self.phase in PHASES, f"one of {', '.join(PHASES)}"),
            "preset": (self.preset in ("", *PRESETS), f"one of {', '.join(PRESETS)}"),
            "model": (self.model in MODELS, f"one of {', '.join(MODELS)}"),
            "batch_size": (1 <= self.batch_size <= 4096, "between 1 and 4096"),
            "lr": (0 < self.lr < 1, "between 0 and 1"),
            "weight_decay": (0 <= self.weight_decay < 1, "between 0 and 1"),
            "warmup_steps": (self.warmup_steps >= 0, "0 or more"),
            "max_steps": (self.max_steps >= 1, "1 or more"),
            "epochs": (self.epochs >= 0, "0 (no limit) or more"),
            "grad_clip": (self.grad_clip >= 0, "0 (off) or more"),
            "log_every": (self.log_every >= 1, "1 or more"),
            "image_every": (self.image_every >= 0, "0 (off) or more"),
            "val_every": (self.val_every >= 0, "0 (end only) or more"),
            "val_samples": (self.val_samples >= 0, "0 (all) or more"),
            "save_every": (self.save_every >= 1, "1 or more"),
            "keep": (self.keep >= 1, "1 or more"),
            "num_workers": (0 <= self.num_workers <= 64, "between 0 and 64"),
            "device": (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
                       "auto, cpu, cuda or cuda:N"),
            "precision": (self.precision in ("auto", "fp32", "bf16", "fp16"), "auto, fp32, bf16 or fp16"),
            "session_cache_gb": (self.session_cache_gb > 0, "more than 0"),
        }
        for name in LOSSES:
            checks[f"w_{name}"] = (getattr(self, f"w_{name}") >= 0, "0 or more")
        for name, (ok, expected) in checks.items():
            if not ok:
                raise ToolError(f"{options.flag(name)}={getattr(self, name)!r}: must be {expected}")
        if self.load and self.phase != "posttrain":
            raise ToolError(f"--load={self.load}: only posttrain starts from a checkpoint (pretrain resumes from "
                            "its own logdir); drop --load")

    def resolved(self) -> TrainConfig:
        """A copy with the defaults that depend on the environment filled in and paths made absolute."""
        return dataclasses.replace(
            self,
            root=str(resolve_root(self.root or None)),
            logdir=str(Path(self.logdir or f"outputs/{self.phase}").expanduser().absolute()),
            collection=self.collection or self.phase,
            load=str(Path(self.load).expanduser().absolute()) if self.load else "",
        )

    def loss_weights(self) -> dict[str, float]:
        """The weight of each of LOSSES (its `w_<name>` key)."""
        return {name: getattr(self, f"w_{name}") for name in LOSSES}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["debug_nan_steps"] = list(self.debug_nan_steps)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Read a saved config; keys this version does not know are dropped (a newer field is added with
        its default), so an old run folder still resumes."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if "debug_nan_steps" in kwargs:
            kwargs["debug_nan_steps"] = tuple(kwargs["debug_nan_steps"])
        return cls(**kwargs)


def parse_overrides(phase: str, args: list[str]) -> TrainConfig:
    """`phase` plus `--key=value` arguments (`key=value` and `--key value` too) -> a checked TrainConfig: the keys
    given, then the preset's (`--preset=NAME`, tools/core/presets.py), then the defaults."""
    see = "python -m tools.train --help"
    values: dict[str, Any] = {"phase": phase, **options.values(TrainConfig, options.parse_flags(args, see),
                                                                exclude=("phase",), see=see)}
    preset = check_preset(values.get("preset"), "--preset")
    if preset:
        values.update((k, v) for k, v in resolve(TRAIN, preset, values).items() if v is not None)
    return TrainConfig(**values)


def help_text() -> str:
    """The --help text: usage, then every key with its default, type and doc."""
    lines = [
        "Usage: python -m tools.train pretrain|posttrain [--key=value ...]",
        "",
        "Train the TransFuser-like model: pretrain (perception), then posttrain (perception + planner).",
        "Rerunning the same command resumes from the newest complete checkpoint in logdir.",
        "SIGUSR1 or SIGTERM: finish the step, write a checkpoint, exit 128+signal (138 / 143).",
        "",
        "Keys (--key=value, --key value or key=value; dashes or underscores):",
        *options.help_lines(TrainConfig, exclude=("phase",)),
        "", "Presets (--preset=NAME; a key given explicitly wins; full: the defaults above):", table_text("train"),
        "", "Environment: DATA_ROOT (default root); under torchrun: RANK, LOCAL_RANK, WORLD_SIZE.",
    ]
    return "\n".join(lines)
