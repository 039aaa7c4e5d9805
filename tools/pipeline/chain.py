"""The pipeline's five stages, run here one after the other, or submitted to SLURM as one chain of jobs.

    options   every flag converted and checked before anything acts (`PipelineOptions`)
    stages    each stage's command (the bin/ wrapper a person runs by hand) and, for SLURM, its template
              in slurm/, the template's arguments and the sbatch options (`Stage`)
    local     run the commands here in order; stop at the first that fails
    state     ROOT/slurm/pipeline.json: the job of each stage, rewritten (temporary file, rename) after
              every sbatch
    look      a recorded job's state: `scontrol show job` while slurmctld remembers it, else `sacct` where
              the cluster keeps accounting, else the file each of its jobs (array tasks) leaves in
              ROOT/slurm/pipeline-done/ when it succeeds (DRIVEKIT_DONE_DIR, see the templates)
    submit    from the first stage whose job is neither live nor done (or --redo STAGE), each stage
              `--dependency=afterok:` on the one before; later jobs of the old chain are cancelled first

Every job is named drivekit-<hash of the root>-<stage>: a job that was submitted but not recorded (the
command killed between the two) is found by its name and adopted, never submitted twice.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core import atomic, cli, files
from tools.core.errors import ToolError
from tools.core.presets import check_preset
from tools.core.slurm import INVALID_JOB, LIVE, SlurmCommands, array_tasks, scontrol_jobs, state_rows
from tools.dataset.layout import resolve_root
from tools.dataset.manifest import now_iso

PROG = "pipeline"
REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "bin"
STAGES = ("collect", "buckets", "cache", "pretrain", "posttrain")
STATE_FORMAT = 1
STATE_FILE = Path("slurm") / "pipeline.json"  # under ROOT, beside collection's waves
DONE_DIR = Path("slurm") / "pipeline-done"
LOG_DIR = Path("logs") / "slurm"

#: Each stage's template (slurm/) and log name (under ROOT/logs/slurm/).
TEMPLATES = {"collect": "collect-monitor.sbatch", "buckets": "build-buckets.sbatch", "cache": "build-cache.sbatch",
             "pretrain": "train.sbatch", "posttrain": "train.sbatch"}
#: sbatch options of each stage before the user's (sbatch takes the last of a repeated option). The collection
#: job only watches the arrays it submits; it lives as long as the collection.
RESOURCES = {
    "collect": ("--cpus-per-task=1", "--mem=2G", "--time=2-00:00:00"),
    "buckets": ("--cpus-per-task=1", "--mem=8G", "--time=01:00:00"),
    "cache": ("--cpus-per-task=2", "--mem=8G", "--time=04:00:00"),
    "pretrain": ("--cpus-per-task=8", "--mem=64G", "--time=1-00:00:00"),
    "posttrain": ("--cpus-per-task=8", "--mem=64G", "--time=1-00:00:00"),
}
#: What the pipeline sets itself, refused in a stage's --STAGE-args (with the flag to use instead).
RESERVED = {
    "collect": {"--root": "--root", "--slurm": "--slurm", "--watch": "(the job watches)",
                "--no-watch": "(the job watches)", "--partition": "--partition", "--account": "--account",
                "--preset": "--preset"},
    "buckets": {"--root": "--root"},
    "cache": {"--root": "--root", "--shard": "--shards"},
    "pretrain": {"root=": "--root", "logdir=": "--outputs", "--nproc": "--gpus", "preset=": "--preset"},
    "posttrain": {"root=": "--root", "logdir=": "--outputs", "load=": "--outputs", "--nproc": "--gpus",
                  "preset=": "--preset"},
}

#: A pending job whose dependency failed: it will never run.
NEVER = "DependencyNeverSatisfied"


def log(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class PipelineOptions:
    routes: Path
    root: Path
    outputs: Path
    slurm: bool = False
    partition: str | None = None
    account: str | None = None
    shards: int = 8
    gpus: int = 1
    redo: str | None = None
    preset: str | None = None  # tiny | small | full: passed to collection and training (tools/core/presets.py)
    sbatch_args: tuple[str, ...] = ()  # every job
    stage_args: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (stage, arguments of its tool)
    stage_sbatch: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (stage, sbatch options of its job)

    def args(self, stage: str) -> list[str]:
        return list(dict(self.stage_args).get(stage, ()))

    def sbatch(self, stage: str) -> list[str]:
        return list(dict(self.stage_sbatch).get(stage, ()))


def _writable(path: Path, flag: str, what: str) -> None:
    """`path`, or the nearest folder above it that exists (where it would be made), must be writable."""
    target = path
    while not target.exists():
        target = target.parent
    if not target.is_dir():
        raise ToolError(f"--{flag} {path}: {target} is not a folder")
    if not os.access(target, os.W_OK | os.X_OK):
        raise ToolError(f"--{flag} {path}: {target} is not writable; give {what}")


@dataclass(frozen=True)
class PipelineFlags:
    """bin/pipeline's flags (all but ROUTES_DIR and --root), each with its help: `python -m tools.pipeline run
    --help` prints them (tools.core.options). Checked together here; the paths by `parse_options`."""

    slurm: bool = False
    """submit the stages as SLURM jobs instead of running them here."""
    partition: str | None = None
    """SLURM partition of every job, the collection's arrays included (default: the cluster's)."""
    account: str | None = None
    """SLURM account to charge."""
    shards: int = 8
    """array tasks that build the cache together (slurm/build-cache.sbatch)."""
    gpus: int = 1
    """GPUs of the training node, one training process each (0: train on CPU)."""
    outputs: str = "outputs"
    """folder of the training runs: OUTPUTS/pretrain and OUTPUTS/posttrain."""
    redo: str | None = None
    """submit (or run) this stage and every later one again, even if done; on SLURM their live jobs are
    cancelled first."""
    sbatch_args: tuple[str, ...] = ()
    """more sbatch options for every job, as one quoted string ("--qos=high --nice=10")."""
    collect_args: tuple[str, ...] = ()
    """options of bin/collect, as one quoted string ("--throttle 48 --time 01:00:00")."""
    buckets_args: tuple[str, ...] = ()
    """options of bin/build-buckets ("--holdout town:Town05")."""
    cache_args: tuple[str, ...] = ()
    """options of bin/build-cache ("--image_width=320")."""
    pretrain_args: tuple[str, ...] = ()
    """settings of bin/train pretrain ("--max-steps=20000 --model=full")."""
    posttrain_args: tuple[str, ...] = ()
    """settings of bin/train posttrain."""
    collect_sbatch: tuple[str, ...] = ()
    """sbatch options of the job that submits and watches the collection's arrays."""
    buckets_sbatch: tuple[str, ...] = ()
    """sbatch options of the buckets job."""
    cache_sbatch: tuple[str, ...] = ()
    """sbatch options of each cache array task ("--cpus-per-task=4 --time=02:00:00")."""
    train_sbatch: tuple[str, ...] = ()
    """sbatch options of both training jobs ("--mem=200G --time=2-00:00:00")."""
    preset: str | None = None
    """tiny, small, medium, bench2drive or full: the size of the collection and of both training runs (above)."""

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= 10000:
            raise ToolError(f"--shards {self.shards}: expected an integer from 1 to 10000")
        if not 0 <= self.gpus <= 64:
            raise ToolError(f"--gpus {self.gpus}: expected an integer from 0 to 64")
        if self.redo is not None and self.redo not in STAGES:
            raise ToolError(f"--redo {self.redo}: expected one of {', '.join(STAGES)}")
        check_preset(self.preset)
        for stage in STAGES:
            for word in getattr(self, f"{stage}_args"):
                for reserved, instead in RESERVED[stage].items():
                    if _sets(word, reserved):
                        raise ToolError(f"--{stage}-args: {word} is set by the pipeline; use bin/pipeline {instead}")


def _sets(word: str, reserved: str) -> bool:
    """Whether a word of a stage's arguments sets `reserved`: a flag (`--root`, `--root=X`) or a training key
    (`root=`: `root=X`, `--root=X`, `--root X`)."""
    if reserved.endswith("="):
        return word.lstrip("-").startswith(reserved) or (word.startswith("--") and word[2:] == reserved[:-1])
    return word == reserved or word.startswith(reserved + "=")


def parse_options(routes_dir: Any, root: Any, flags: PipelineFlags) -> PipelineOptions:
    """PipelineOptions from the routes folder, the root and the other flags (`flags`, already checked): the paths
    checked and made absolute; ToolError naming the flag otherwise."""
    routes = Path(cli.text(routes_dir, "ROUTES_DIR")).expanduser().absolute()
    if not routes.is_dir():
        raise ToolError(f"ROUTES_DIR {routes}: no such folder; give the folder of route files (*.xml)")
    options = PipelineOptions(
        routes=routes, root=resolve_root(cli.optional_text(root, "root")),
        outputs=Path(flags.outputs).expanduser().absolute(), slurm=flags.slurm, partition=flags.partition,
        account=flags.account, shards=flags.shards, gpus=flags.gpus, redo=flags.redo, preset=flags.preset,
        sbatch_args=flags.sbatch_args,
        stage_args=tuple((s, w) for s in STAGES if (w := getattr(flags, f"{s}_args"))),
        stage_sbatch=tuple((s, w) for s in ("collect", "buckets", "cache", "train")
                           if (w := getattr(flags, f"{s}_sbatch"))))
    _writable(options.root, "root", "a root on storage every node sees and you can write")
    _writable(options.outputs, "outputs", "a folder you can write for the training runs")
    if options.slurm:
        for path, flag in ((REPO, "the checkout"), (options.root, "--root"), (options.outputs, "--outputs")):
            if "," in str(path):  # sbatch --export=ALL,NAME=VALUE,... cannot hold a comma
                raise ToolError(f"{flag} {path}: a path with a comma cannot be passed to sbatch --export; "
                                "use another folder")
    return options


# ----------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class Stage:
    name: str
    command: list[str]  # what runs here without --slurm
    script_args: list[str]  # with --slurm: the template's arguments (the job runs the same wrapper)
    tasks: int = 1  # array tasks (the cache's shards); 1: not an array
    array: bool = False

    @property
    def template(self) -> Path:
        return REPO / "slurm" / TEMPLATES[self.name]


def stages(o: PipelineOptions) -> list[Stage]:
    root = str(o.root)
    pre, post = o.outputs / "pretrain", o.outputs / "posttrain"
    nproc = ["--nproc", str(o.gpus)] if o.gpus > 1 else []
    where = [f for flag, value in (("--partition", o.partition), ("--account", o.account)) if value
             for f in (flag, value)]
    # The preset first: a stage's own arguments (--STAGE-args) come after it and win.
    collect_preset = ["--preset", o.preset] if o.preset else []
    train_preset = [f"preset={o.preset}"] if o.preset else []
    pretrain = ["pretrain", f"root={root}", f"logdir={pre}", *train_preset, *o.args("pretrain")]
    posttrain = ["posttrain", f"root={root}", f"load={pre}", f"logdir={post}", *train_preset, *o.args("posttrain")]
    return [
        Stage("collect", [str(BIN / "collect"), str(o.routes), "--root", root, *collect_preset, *o.args("collect")],
              [str(o.routes), "--root", root, *where, *collect_preset, *o.args("collect")]),
        Stage("buckets", [str(BIN / "build-buckets"), "--root", root, *o.args("buckets")],
              ["--root", root, *o.args("buckets")]),
        Stage("cache", [str(BIN / "build-cache"), "--root", root, *o.args("cache")],
              ["--root", root, *o.args("cache")], tasks=o.shards, array=True),
        Stage("pretrain", [str(BIN / "train"), *nproc, *pretrain], pretrain),
        Stage("posttrain", [str(BIN / "train"), *nproc, *posttrain], posttrain),
    ]


def job_name(o: PipelineOptions, stage: str) -> str:
    return f"drivekit-{hashlib.sha256(str(o.root).encode()).hexdigest()[:8]}-{stage}"


def sbatch_argv(o: PipelineOptions, stage: Stage, after: str | None) -> list[str]:
    """The sbatch command line of a stage's job (`after`: the job it waits for)."""
    logs = o.root / LOG_DIR
    argv = ["sbatch", "--parsable", f"--job-name={job_name(o, stage.name)}",
            f"--output={logs}/%x-{'%A_%a' if stage.array else '%j'}.log",
            f"--export=ALL,DRIVEKIT_HOME={REPO},DRIVEKIT_DONE_DIR={o.root / DONE_DIR}"]
    if stage.array:
        argv.append(f"--array=0-{stage.tasks - 1}")
    if after:
        argv += [f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes"]
    if o.partition:
        argv.append(f"--partition={o.partition}")
    if o.account:
        argv.append(f"--account={o.account}")
    argv += RESOURCES[stage.name]
    if stage.name in ("pretrain", "posttrain") and o.gpus:
        argv.append(f"--gpus-per-node={o.gpus}")
    argv += [*o.sbatch_args, *o.sbatch("train" if stage.name in ("pretrain", "posttrain") else stage.name)]
    return [*argv, str(stage.template), *stage.script_args]


# ----------------------------------------------------------------------------- here, one after the other


def run_local(o: PipelineOptions) -> None:
    """Run the stages here in order (from --redo STAGE); stop at the first that fails. Rerunning skips what
    is done: every stage's tool does."""
    todo = stages(o)
    if o.redo:
        todo = todo[STAGES.index(o.redo):]
    for stage in todo:
        log(f"== {stage.name}: {shlex.join(stage.command)}")
        status = subprocess.run(stage.command, check=False).returncode
        if status != 0:
            log(f"{stage.name} failed (exit {status}); fix it and run the same command again (what is done is "
                "skipped)")
            sys.exit(1)
    log(f"every stage done: data in {o.root}, training runs in {o.outputs}")


# ----------------------------------------------------------------------------- the scheduler


class Scheduler(SlurmCommands):
    """What the pipeline asks of SLURM (tools.core.slurm runs the commands)."""

    def __init__(self) -> None:
        super().__init__("leave --slurm out to run the stages here")

    def require_partition(self, partition: str | None) -> None:
        self.require()
        if partition:
            self.check_partition(partition)

    def scontrol_states(self, job: str) -> dict[str, str]:
        """task ("" when not an array) -> state, of what slurmctld still remembers of `job`; a pending job
        whose dependency failed is NEVER."""
        proc = self.query("scontrol", "-o", "show", "job", job, benign=INVALID_JOB)  # an outage: SchedulerUnavailable
        states: dict[str, str] = {}
        for fields in scontrol_jobs(proc.stdout):
            if fields.get("JobId") != job and fields.get("ArrayJobId") != job:
                continue
            state = fields.get("JobState", "UNKNOWN")
            if state == "PENDING" and fields.get("Reason") == NEVER:
                state = NEVER
            for task in map(str, array_tasks(fields["ArrayTaskId"])) if "ArrayTaskId" in fields else [""]:
                states[task] = state
        return states

    def sacct_states(self, job: str) -> dict[str, str]:
        if not self.accounting:
            return {}
        out = self.query("sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State").stdout
        states: dict[str, str] = {}
        for base, tasks, state in state_rows(out):
            if base == job and state:
                for task in map(str, tasks) if tasks is not None else [""]:
                    states[task] = state
        return states

    def live_job_named(self, name: str) -> str | None:
        out = self.query("squeue", "-h", f"--name={name}", "-o", "%F").stdout.split()
        return out[0] if out else None


    def cancel(self, job: str) -> None:
        self.run("scancel", job, check=False)


def status_of(scheduler: Scheduler, o: PipelineOptions, job: dict[str, Any]) -> str:
    """"live", "done" or "failed: <states>" for a recorded job (every array task counted)."""
    jid = job["job_id"]
    tasks = [str(t) for t in range(job["tasks"])] if job.get("array") else [""]
    states = scheduler.scontrol_states(jid)
    if any(t not in states for t in tasks):
        states = {**scheduler.sacct_states(jid), **states}
    for t in tasks:
        if t not in states and (o.root / DONE_DIR / (f"{jid}_{t}" if t else jid)).exists():
            states[t] = "COMPLETED"
    seen = [states.get(t, "UNKNOWN") for t in tasks]
    if any(s in LIVE for s in seen):
        return "running" if "RUNNING" in seen else "live"
    if all(s == "COMPLETED" for s in seen):
        return "done"
    counts = {s: seen.count(s) for s in sorted(set(seen))}
    return "failed: " + ", ".join(f"{n} {s}" if len(seen) > 1 else s for s, n in counts.items())


def word(status: str) -> str:
    return {"live": "pending", "running": "running", "done": "done"}.get(status, status)


# ----------------------------------------------------------------------------- the chain


def read_state(o: PipelineOptions) -> dict[str, Any]:
    path = o.root / STATE_FILE
    if not path.exists():
        return {"format": STATE_FORMAT, "root": str(o.root), "stages": {}}
    try:
        state = files.read_json(path)
        if state.get("format") != STATE_FORMAT or not isinstance(state.get("stages"), dict):
            raise ValueError(f"format {state.get('format')!r}, expected {STATE_FORMAT}")
    except (OSError, ValueError) as e:
        raise ToolError(f"{path}: unreadable ({e}); move it aside to start a new chain") from None
    return state


def submit_chain(o: PipelineOptions) -> dict[str, Any]:
    """Submit what is not pending, running or done, from the first stage that failed (or --redo); print
    one line per stage: name, job id, what it is doing. Returns the state written."""
    scheduler = Scheduler()
    scheduler.require_partition(o.partition)
    state = read_state(o)
    plan = stages(o)
    jobs = state["stages"]
    statuses = {s.name: status_of(scheduler, o, jobs[s.name]) for s in plan if s.name in jobs}
    first = next((i for i, s in enumerate(plan) if statuses.get(s.name, "failed") not in ("live", "running", "done")),
                 len(plan))
    if o.redo:
        first = min(first, STAGES.index(o.redo))
    for s in plan[:first]:
        argv = sbatch_argv(o, s, jobs[s.name].get("after"))
        if argv != jobs[s.name]["argv"]:
            log(f"note: {s.name} (job {jobs[s.name]['job_id']}) was submitted with other options; it is left as it "
                f"is (bin/pipeline ... --redo {s.name} submits it again, and what follows)")
    # Jobs of the old chain from `first` on wait for a job that failed or is redone: cancel them first.
    for s in plan[first:]:
        if s.name in jobs and statuses.get(s.name) in ("live", "running"):
            scheduler.cancel(jobs[s.name]["job_id"])
    if first < len(plan):
        for sub in (o.root / LOG_DIR, o.root / DONE_DIR):
            sub.mkdir(parents=True, exist_ok=True)
    after = jobs[plan[first - 1].name]["job_id"] if first > 0 else None
    for i, s in enumerate(plan):
        if i < first:
            print(f"{s.name:<10} {jobs[s.name]['job_id']:<8} {word(statuses[s.name])}", flush=True)
            continue
        argv = sbatch_argv(o, s, after)
        name = job_name(o, s.name)
        earlier = list(jobs.get(s.name, {}).get("history", []))
        adopted = scheduler.live_job_named(name)
        if adopted and adopted not in earlier:
            job, how = adopted, "adopted (submitted by an earlier run that did not record it)"
        else:
            job, how = scheduler.submit(argv), "submitted"
        jobs[s.name] = {"job_id": job, "name": name, "array": s.array, "tasks": s.tasks, "after": after,
                        "argv": argv, "submitted": now_iso(), "history": [*earlier, job]}
        state.update(root=str(o.root), routes=str(o.routes), outputs=str(o.outputs))
        atomic.write_json(o.root / STATE_FILE, state)
        extra = f", after {after}" if after else ""
        print(f"{s.name:<10} {job:<8} {how}{extra}{f' ({s.tasks} tasks)' if s.array else ''}", flush=True)
        after = job
    if first == len(plan):
        log(f"nothing submitted: every stage is pending, running or done ({o.root / STATE_FILE})")
    else:
        log(f"{len(plan) - first} jobs submitted, each after the one before; state in {o.root / STATE_FILE}, "
            f"logs in {o.root / LOG_DIR}; rerun the same command to see where they are or to resubmit from a "
            "stage that failed")
    return state


def pipeline(o: PipelineOptions) -> None:
    if o.slurm:
        submit_chain(o)
    else:
        run_local(o)
