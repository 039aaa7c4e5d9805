"""The SLURM options of the commands that run route runs on SLURM (collect, evaluate run), declared once:
`SlurmOptions` (each field a flag, its help and default), `slurm_flags` (the fields as a command's flags, signature
and --help: tools.core.options) and `check_options`. Light on purpose: every `python -m tools.collect` and
`python -m tools.evaluate` command imports it for its --help; the monitor is tools.collect.runner.slurm."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tools.core import options
from tools.core.errors import ToolError


@dataclass(frozen=True)
class SlurmOptions:
    """What the arrays ask of the cluster, and how the monitor behaves. Every field is a flag of the commands that
    run route runs on SLURM (`slurm_flags`: collect, evaluate run); `check_options` checks them together."""

    partition: str | None = None
    """SLURM partition (default: the cluster's default)."""
    account: str | None = None
    """SLURM account to charge."""
    time: str = "01:00:00"
    """time limit of one array task (SLURM format, e.g. 01:00:00, 90 (minutes) or 1-00:00:00)."""
    throttle: int = 48
    """array tasks running at once (--array=...%K); changes live arrays when rerun."""
    cpus: int = 1
    """CPUs per task (the embedded world is one process)."""
    mem: str = "4G"
    """memory per task (e.g. 4G, 4000M)."""
    gpus: int | None = None
    """GPUs per task (default: 0 for the embedded world; a CARLA world asks for 1)."""
    runs_per_task: int = 1
    """route runs one task drives one after the other (for clusters with a job limit)."""
    servers_per_gpu: int = 0
    """CARLA servers a task runs at once on each of its GPUs (collect --servers-per-gpu; 0: one run at a time)."""
    sbatch_args: tuple[str, ...] = ()
    """more sbatch options, as one quoted string, passed as they are."""
    poll: float = 30.0
    """seconds between two looks at the scheduler (tests use less)."""
    watch: bool = True
    """keep monitoring until every route run ended (--no-watch: submit and exit)."""

    def __post_init__(self) -> None:
        check_options(self)

    def resources(self) -> list[str]:
        """The sbatch options for one array task."""
        out = [f"--time={self.time}", f"--cpus-per-task={self.cpus}", f"--mem={self.mem}"]
        if self.partition:
            out.append(f"--partition={self.partition}")
        if self.account:
            out.append(f"--account={self.account}")
        if self.gpus:
            out.append(f"--gpus={self.gpus}")
        return out + list(self.sbatch_args)

    def settled(self, gpus_per_task: int, servers_per_gpu: int | None = None) -> SlurmOptions:
        """These options with what the world decides (its GPUs per task, tools.collect.runner.world.World, unless
        --gpus says otherwise) and collect's --servers-per-gpu."""
        return replace(self, gpus=gpus_per_task if self.gpus is None else self.gpus,
                       servers_per_gpu=servers_per_gpu or 0)


#: The SLURM flags of a command (`options.takes`): --slurm turns them on; the command gets SlurmOptions or None.
slurm_flags = options.takes("slurm", SlurmOptions, exclude=("servers_per_gpu",), switch_help=(
    "run the route runs as SLURM array tasks instead of local workers (docs/slurm.md)."))


_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$|^\d+$")
_MEM = re.compile(r"^\d+[KMGT]?$")


def check_options(o: SlurmOptions) -> None:
    """Refuse what SLURM would refuse (or what makes no sense), naming the flag to fix."""
    if not _TIME.match(o.time):
        raise ToolError(f"--time {o.time}: expected SLURM's time format, e.g. 01:00:00, 90 (minutes) or 1-00:00:00")
    if not _MEM.match(o.mem):
        raise ToolError(f"--mem {o.mem}: expected a size such as 4G or 4000M")
    for name, value, lo in (("throttle", o.throttle, 1), ("cpus", o.cpus, 1), ("gpus", o.gpus, 0),
                            ("runs-per-task", o.runs_per_task, 1), ("servers-per-gpu", o.servers_per_gpu, 0)):
        if value is not None and value < lo:
            raise ToolError(f"--{name} {value}: expected {lo} or more")
    if o.poll <= 0:
        raise ToolError(f"--poll {o.poll:g}: expected seconds above 0")
    if o.servers_per_gpu and not o.gpus:
        raise ToolError(f"--servers-per-gpu {o.servers_per_gpu} with --gpus 0: give each task GPUs (--gpus G)")
    if o.servers_per_gpu and o.runs_per_task < o.gpus * o.servers_per_gpu:
        raise ToolError(f"--runs-per-task {o.runs_per_task}: a task runs {o.gpus * o.servers_per_gpu} servers at once "
                        f"(--gpus {o.gpus} x --servers-per-gpu {o.servers_per_gpu}); give --runs-per-task "
                        f"{o.gpus * o.servers_per_gpu} or more")
