"""The SLURM commands every tool that submits jobs calls (collection's monitor, bin/pipeline): one place that
runs them (argument lists, never a shell, with a time limit), counts them, and turns their failures into
one line. What a tool asks of the scheduler beyond that stays with the tool.

A scheduler that does not answer (slurmctld or slurmdbd stopped, restarting, overloaded) is not an answer
about any job: `query` and a failed command that could not reach the daemon raise SchedulerUnavailable,
which a caller reads as "unknown, ask again later", never as "the job ended".

What the commands answer about jobs is read here too, the same way for every tool: `state_rows` (sacct -P and
squeue lines of "JobID|State"), `scontrol_jobs` (scontrol -o show job), `array_tasks` (an array's task list).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator

from tools.core.errors import ToolError

#: Job states of a job or array task that has not ended (it may still succeed).
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                  "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED"})
#: How long a SLURM command may take before the tool says the controller does not answer.
TIMEOUT_S = 120.0
#: What a SLURM command says when it could not reach slurmctld or slurmdbd (no answer about any job).
UNREACHABLE = re.compile(r"unable to contact|connect(ion)? (failure|refused)|socket timed out|timed out|"
                         r"problem talking to the database|transport endpoint|temporarily unable", re.I)


class SchedulerUnavailable(ToolError):
    """The scheduler did not answer: the state of every job is unknown, not ended. Ask again later."""


#: What squeue and scontrol show job answer when they know none of the job ids asked for (ended long ago): an
#: answer, not a failure.
INVALID_JOB = ("Invalid job id specified",)
#: sacct's answer on a cluster without accounting (slurm-wlm 22.05: "Slurm accounting storage is disabled").
DISABLED = ("accounting storage is disabled",)


def _why(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


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
            raise SchedulerUnavailable(f"{args[0]} did not answer in {TIMEOUT_S:.0f} s; is slurmctld up? "
                                       "(scontrol ping)") from None
        if check and proc.returncode != 0:
            error = SchedulerUnavailable if self._unreachable(proc) else ToolError
            raise error(f"{shlex.join(args[:3])} ...: {_why(proc)}")
        return proc

    def query(self, *args: str, benign: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        """A command that only asks (squeue, sacct, scontrol show): any failure but the answers in `benign`
        (e.g. squeue's "Invalid job id specified" when it knows none of the jobs asked for) means the
        scheduler did not answer: SchedulerUnavailable, never an empty answer."""
        proc = self.run(*args, check=False)
        if proc.returncode != 0 and not any(b in proc.stderr + proc.stdout for b in benign):
            raise SchedulerUnavailable(f"{shlex.join(args[:3])} ...: {_why(proc)}; is slurmctld up? (scontrol ping)")
        return proc

    def _unreachable(self, proc: subprocess.CompletedProcess) -> bool:
        """Whether a failed command failed because the scheduler did not answer (its message says so, or
        `scontrol ping` does not find slurmctld up), rather than refusing what it was asked."""
        if UNREACHABLE.search(proc.stderr + proc.stdout):
            return True
        try:
            ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=self.env, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return True
        return "is UP" not in ping.stdout

    def require(self) -> None:
        """sbatch on PATH, else one line saying what to do instead."""
        if shutil.which("sbatch", path=(self.env or os.environ).get("PATH")) is None:
            raise ToolError(f"--slurm: sbatch not found on PATH; run on a SLURM login node, or {self.without}")

    def check_partition(self, partition: str) -> None:
        names = sorted({p.rstrip("*") for p in self.query("sinfo", "-h", "-o", "%P").stdout.split()})
        if partition not in names:
            raise ToolError(f"--partition {partition}: no such partition on this cluster (partitions: "
                            f"{', '.join(names) or 'none'})")

    @property
    def accounting(self) -> bool:
        """Whether sacct answers; a cluster without accounting says "accounting storage is disabled". A sacct
        that fails otherwise (slurmdbd down) decides nothing: SchedulerUnavailable, asked again next time."""
        if self._accounting is None:
            proc = self.query("sacct", "-n", "-X", "-j", "1", "-o", "JobID", benign=DISABLED)
            self._accounting = not any(d in proc.stdout + proc.stderr for d in DISABLED)
        return self._accounting

    def submit(self, argv: list[str]) -> str:
        """`sbatch --parsable ...`: the job id."""
        out = self.run(*argv).stdout.strip()
        job = out.split(";")[0].strip()
        if not job.isdigit():
            raise ToolError(f"sbatch answered {out!r}, not a job id")
        return job


# ----------------------------------------------------------------------------- reading job states


def array_tasks(spec: str) -> list[int]:
    """An array's task list as SLURM writes it ("0-7%2", "[1,3-5]", "4") -> its task ids; what is not a task
    range is left out."""
    out: list[int] = []
    for part in spec.split("%")[0].strip("[]").split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (hi.isdigit() or not hi):
            out += range(int(lo), int(hi or lo) + 1)
    return out


def state_rows(text: str) -> Iterator[tuple[str, list[int] | None, str]]:
    """(job id, array task ids or None for a job that is not an array, state) of each "JobID|State" line that
    `sacct -n -P -o JobID,State` and `squeue -h -o %i|%T` write: "12_3" is task 3 of array 12, "12_[3-9%2]"
    tasks 3 to 9 not started yet; the state is its first word ("CANCELLED by 0": CANCELLED), "" when empty."""
    for line in text.splitlines():
        jid, _, state = line.partition("|")
        job, array, tasks = jid.strip().partition("_")
        yield job, array_tasks(tasks) if array else None, state.split()[0] if state.strip() else ""


def scontrol_jobs(text: str) -> Iterator[dict[str, str]]:
    """The fields (JobId, ArrayJobId, ArrayTaskId, JobState, Reason, ...) of each job or array task in the
    answer of `scontrol -o show job` (one line each, KEY=VALUE words)."""
    for line in text.splitlines():
        yield dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
