"""The runtime a training process runs in: one per process, made once by `setup`, never changed.

    Runtime    rank, local rank and world size (torchrun), the device and the precision; autocast, a barrier
               and the all-reduce sums every rank must agree on
    setup      the process group under torchrun, the device, the precision
    StopFlag   SIGTERM / SIGUSR1 set a flag that the loop reads after each step
    log        one line on stderr

validate.py and loop.py both use a Runtime; this module imports neither.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tools.core.errors import ToolError
from tools.train.config import TrainConfig

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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

    def all_sum_named(self, values: dict[str, float]) -> dict[str, float]:
        """Each named value summed over all ranks, in one all-reduce."""
        total = self.all_sum(torch.tensor(list(values.values()), dtype=torch.float64))
        return dict(zip(values, total.tolist(), strict=True))


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
