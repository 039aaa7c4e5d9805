"""The SLURM commands every tool that submits jobs calls (collection's monitor, bin/pipeline): one place that
runs them (argument lists, never a shell, with a time limit), counts them, and turns their failures into
one line. What a tool asks of the scheduler beyond that stays with the tool.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections import Counter

from tools.dataset.errors import ToolError

#: Job states of a job or array task that has not ended (it may still succeed).
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                  "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED"})
#: How long a SLURM command may take before the tool says the controller does not answer.
TIMEOUT_S = 120.0


class SlurmCommands:
    """Runs sbatch, squeue, sacct, scontrol, sinfo, scancel. `without` is what the error for a missing sbatch
    suggests instead (e.g. "leave --slurm out to collect locally"); `env` the commands' environment."""

    def __init__(self, without: str, env: dict[str, str] | None = None):
        self.without = without
        self.env = env
        self.calls: Counter = Counter()
        self._accounting: bool | None = None

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        self.calls[args[0]] += 1
        try:
            proc = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=TIMEOUT_S)
        except FileNotFoundError:
            raise ToolError(f"--slurm: {args[0]} not found on PATH; run on a SLURM login node, or {self.without}"
                            ) from None
        except subprocess.TimeoutExpired:
            raise ToolError(f"{args[0]} did not answer in {TIMEOUT_S:.0f} s; is slurmctld up? (scontrol ping)"
                            ) from None
        if check and proc.returncode != 0:
            why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise ToolError(f"{shlex.join(args[:3])} ...: {why[-1] if why else f'exit status {proc.returncode}'}")
        return proc

    def require(self) -> None:
        """sbatch on PATH, else one line saying what to do instead."""
        if shutil.which("sbatch", path=(self.env or os.environ).get("PATH")) is None:
            raise ToolError(f"--slurm: sbatch not found on PATH; run on a SLURM login node, or {self.without}")

    def check_partition(self, partition: str) -> None:
        names = sorted({p.rstrip("*") for p in self.run("sinfo", "-h", "-o", "%P", check=False).stdout.split()})
        if partition not in names:
            raise ToolError(f"--partition {partition}: no such partition on this cluster (partitions: "
                            f"{', '.join(names) or 'none'})")

    @property
    def accounting(self) -> bool:
        """Whether sacct answers; a cluster without accounting says "accounting storage is disabled"."""
        if self._accounting is None:
            proc = self.run("sacct", "-n", "-X", "-j", "1", "-o", "JobID", check=False)
            text = (proc.stdout + proc.stderr).lower()
            self._accounting = proc.returncode == 0 and "accounting storage is disabled" not in text
        return self._accounting

    def submit(self, argv: list[str]) -> str:
        """`sbatch --parsable ...`: the job id."""
        out = self.run(*argv).stdout.strip()
        job = out.split(";")[0].strip()
        if not job.isdigit():
            raise ToolError(f"sbatch answered {out!r}, not a job id")
        return job
