"""An evaluation (`python -m tools.evaluate run`), in the order it happens:

    check     every flag converted and checked, nothing read but the routes folder (`check`)
    plan      the policy loaded, the world's set-up checked (--world=carla: the CARLA install, the agent file),
              ROOT and ROOT/evaluation.json read, every route parsed against its town, SLURM asked about the
              partition: everything refused here is refused before anything is written (`plan` -> `EvaluationPlan`)
    start     ROOT becomes an evaluation root: ROOT/evaluation.json written (`start`)
    drive     the route runs through collection's machinery, local workers or SLURM arrays (`drive`)
    summary   ROOT/result.json aggregated and the scores printed (`summary`)

ROOT/evaluation.json records what is evaluated (IDENTITY): rerunning into a root that evaluated something
else is refused.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import find_route_files
from tools.collect.runner.collection import collect_routes
from tools.collect.runner.jobs import Job
from tools.collect.runner.jobs import plan as plan_jobs
from tools.collect.runner.slurm import Scheduler
from tools.collect.runner.slurm_options import SlurmOptions
from tools.collect.runner.world import world_for
from tools.core import atomic, cli, files
from tools.core.errors import ToolError
from tools.dataset.layout import Layout, check_root_writable, resolve_root
from tools.dataset.leaderboard_scores import DEFAULT_VERSION, VERSIONS, ScoreVersion
from tools.dataset.manifest import now_iso, read_manifest, tool_version, user_at_host
from tools.dataset.score import score_root
from tools.evaluate.bench2drive import write_bench2drive

#: Version of ROOT/evaluation.json.
EVALUATION_FORMAT = 1
#: What identifies an evaluation: rerunning into a root that evaluated something else is refused.
IDENTITY = ("agent", "checkpoint", "routes_dir", "settings")


@dataclass(frozen=True)
class Flags:
    """`run`'s flags, converted and checked (`check`)."""

    routes: Path
    root: str
    checkpoint: str | None
    agent: str | None
    agent_file: Path | None  # a leaderboard 2.0 agent file (tools.evaluate.leaderboard), --agent-file
    agent_config: Path | None  # its setup()'s file, --agent-config
    towns: str | None
    workers: int
    repetitions: int
    max_attempts: int
    slurm: SlurmOptions | None
    settings: dict[str, Any]
    servers_per_gpu: int | None = None  # CARLA servers at once per GPU (--world=carla), as collect's


@dataclass(frozen=True)
class EvaluationPlan:
    """Everything an evaluation settled before writing anything (`plan`)."""

    flags: Flags
    policy: Any  # tools.evaluate.policy.Policy, or None for the expert
    settings: dict[str, Any]  # what every route run is passed (agent, checkpoint, record=False)
    resolved: CollectSettings
    slurm: SlurmOptions | None
    layout: Layout
    evaluation: dict[str, Any]  # ROOT/evaluation.json's identity (IDENTITY and its format)
    before: dict[str, Any] | None  # ROOT/evaluation.json as it was, None for a new root
    jobs: list[Job]

    @property
    def what(self) -> str:
        if self.resolved.agent == "leaderboard":
            noise = "" if self.resolved.sensor_noise else " (the leaderboard's sensor noise off)"
            return f"agent file {self.resolved.agent_file}{noise}"
        return f"checkpoint {self.resolved.checkpoint}" if self.policy else "the expert"


def check(routes_dir: Any, root: Any, checkpoint: Any, agent: Any, towns: Any, workers: Any, repetitions: Any,
          seeds: Any, max_attempts: Any, slurm: SlurmOptions | None, settings: dict[str, Any],
          agent_file: Any = None, agent_config: Any = None, servers_per_gpu: Any = None) -> Flags:
    """Every flag of `run` converted and checked; ToolError naming the flag otherwise. `workers` None: 1."""
    if root is None or isinstance(root, bool) or str(root) == "":
        raise ToolError("--root missing: give the folder this evaluation writes (a new one, or the one to resume)")
    if routes_dir is None or isinstance(routes_dir, bool) or str(routes_dir) == "":
        raise ToolError("ROUTES_DIR missing: give the folder that holds the route files (*.xml)")
    routes = Path(cli.text(routes_dir, "routes-dir")).expanduser().absolute()
    if not routes.is_dir():
        raise ToolError(f"ROUTES_DIR {routes}: no such folder; give the folder that holds the route files")
    checkpoint = cli.optional_text(checkpoint, "checkpoint")
    agent = cli.optional_text(agent, "agent")
    file, config = agent_files(agent_file, agent_config, checkpoint, agent)
    if file is not None:
        agent = "leaderboard"
    if checkpoint is None and agent is None:
        raise ToolError("nothing to evaluate: give --checkpoint RUN_OR_STEP (a trained policy), --agent-file PATH (a "
                        "leaderboard 2.0 agent) or --agent expert")
    if checkpoint is not None and agent not in (None, "policy"):
        raise ToolError(f"--checkpoint and --agent {agent} both given: give --checkpoint for a trained policy, "
                        "or --agent expert alone")
    if checkpoint is None and agent not in ("expert", "leaderboard"):
        hint = "--agent policy needs --checkpoint RUN_OR_STEP" if agent == "policy" else f"--agent {agent}: unknown"
        raise ToolError(f"{hint}; give --checkpoint RUN_OR_STEP for a trained policy, or --agent expert")
    if "record" in settings:
        raise ToolError("--record: an evaluation never records frames; to record, collect: bin/collect")
    if agent == "leaderboard" and file is None:
        raise ToolError("--agent leaderboard needs --agent-file PATH (a leaderboard 2.0 agent file)")
    if servers_per_gpu is not None:
        servers_per_gpu = cli.integer(servers_per_gpu, "servers-per-gpu", 1, 16)
        if workers is not None:
            raise ToolError(f"--workers {workers} and --servers-per-gpu {servers_per_gpu}: give one (with "
                            "--servers-per-gpu K the workers are the GPUs x K)")
    return Flags(routes=routes, root=cli.text(root, "root"), checkpoint=checkpoint, agent=agent, agent_file=file,
                 agent_config=config, towns=towns,
                 workers=1 if workers is None else cli.integer(workers, "workers", 1),
                 repetitions=seeds_or_repetitions(seeds, repetitions),
                 max_attempts=cli.integer(max_attempts, "max-attempts", 1), slurm=slurm, settings=settings,
                 servers_per_gpu=servers_per_gpu)


def agent_files(agent_file: Any, agent_config: Any, checkpoint: str | None, agent: str | None
                ) -> tuple[Path | None, Path | None]:
    """--agent-file and --agent-config as absolute paths, each an existing file; ToolError naming the flag."""
    file = cli.optional_text(agent_file, "agent-file")
    config = cli.optional_text(agent_config, "agent-config")
    if file is None:
        if config is not None:
            raise ToolError("--agent-config without --agent-file: it is the configuration of a leaderboard agent file")
        return None, None
    if checkpoint is not None or agent not in (None, "leaderboard"):
        other = f"--checkpoint {checkpoint}" if checkpoint is not None else f"--agent {agent}"
        raise ToolError(f"--agent-file and {other} both given: evaluate one agent per root")
    path = Path(file).expanduser().absolute()
    if not path.is_file():
        raise ToolError(f"--agent-file {path}: no such file; give a leaderboard 2.0 agent file (its "
                        "get_entry_point() names the agent class; a template: docs/examples/gnss_agent.py)")
    config_path = Path(config).expanduser().absolute() if config is not None else None
    if config_path is not None and not config_path.exists():
        raise ToolError(f"--agent-config {config_path}: no such file or folder; give what the agent's setup() reads, "
                        "or leave it out")
    return path, config_path


def seeds_or_repetitions(seeds: int | None, repetitions: int | None) -> int:
    """K: --seeds and --repetitions are one thing (K runs of each route, each seeded from (route, K, --seed));
    both given and different is refused."""
    k_seeds = None if seeds is None else cli.integer(seeds, "seeds", 1)
    k_reps = None if repetitions is None else cli.integer(repetitions, "repetitions", 1)
    if k_seeds is not None and k_reps is not None and k_seeds != k_reps:
        raise ToolError(f"--seeds {k_seeds} and --repetitions {k_reps}: they are the same thing (K seeded runs of "
                        "each route); give one of them")
    return k_seeds or k_reps or 1


def plan(flags: Flags) -> EvaluationPlan:
    """Load the policy, read ROOT, parse every route against its town and ask SLURM what it must know: everything
    that can be refused is refused here, before anything is written."""
    policy = None
    if flags.checkpoint is not None:
        from tools.evaluate.policy import load_policy  # torch: only for a trained policy

        policy = load_policy(flags.checkpoint)  # ToolError naming --checkpoint for anything wrong with it
    settings = {**flags.settings, "agent": "policy" if policy else flags.agent or "expert",
                "checkpoint": str(Path(policy.path).resolve()) if policy else "", "record": False}
    if flags.agent_file is not None:
        settings.update(agent="leaderboard", agent_file=str(flags.agent_file),
                        agent_config=str(flags.agent_config or ""))
    resolved = CollectSettings.from_flags(settings)
    world = world_for(resolved.world)  # an unknown world is refused here
    # Settings it cannot honour, what it needs (a CARLA install; the agent file where this runs): its default towns
    default_towns = world.check_setup(resolved)
    if flags.servers_per_gpu is not None and not world.servers_on_gpus:
        raise ToolError(f"--servers-per-gpu {flags.servers_per_gpu}: only with --world=carla (the embedded world "
                        "renders on the CPU); give --workers N")
    slurm = flags.slurm.settled(world.gpus_per_task, flags.servers_per_gpu) if flags.slurm is not None else None
    layout = Layout(resolve_root(flags.root))
    check_root_writable(layout.root)
    read_manifest(layout)  # a root of another format version is refused
    evaluation = {
        "format": EVALUATION_FORMAT, "agent": resolved.agent, "checkpoint": resolved.checkpoint or None,
        "routes_dir": str(flags.routes), "settings": resolved.to_dict(),
    }
    before = read_evaluation(layout)
    if before is None and layout.manifest.is_file():
        raise ToolError(f"--root {layout.root}: a collection root (it has {layout.manifest.name} but no "
                        f"{layout.evaluation.name}); give an evaluation its own --root")
    if before is not None:
        check_same_evaluation(layout, before, evaluation)
    route_files = find_route_files(flags.routes)
    if not route_files:
        raise ToolError(f"ROUTES_DIR {flags.routes}: no route files (*.xml) in it or below it")
    # every route parsed and checked against its town, and what the world needs of it (CARLA: ids the leaderboard
    # selects, scenarios scenario_runner implements)
    jobs = plan_jobs(route_files, flags.towns, flags.repetitions, default_towns)
    for job in {(j.route_file, j.route.id): j for j in jobs}.values():
        world.check_route(job.route_file, job.route)
    if slurm is not None:
        scheduler = Scheduler()
        scheduler.require()
        if slurm.partition:
            scheduler.check_partition(slurm.partition)
    return EvaluationPlan(flags=flags, policy=policy, settings=settings, resolved=resolved, slurm=slurm,
                          layout=layout, evaluation=evaluation, before=before, jobs=jobs)


def start(p: EvaluationPlan) -> list[str]:
    """ROOT becomes an evaluation root (ROOT/evaluation.json, for a new root); returns the notes to print with the
    scores (routes in towns the checkpoint never saw)."""
    layout, policy = p.layout, p.policy
    route_towns = Counter(route.town for route in {(j.route_file, j.route.id): j.route for j in p.jobs}.values())
    if p.before is None:
        try:
            layout.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ToolError(f"--root {layout.root}: cannot create it ({e.strerror})") from None
        atomic.write_json(layout.evaluation, {
            **p.evaluation,
            "checkpoint_towns": sorted(policy.towns) if policy else None,
            "frame_dt": policy.frame_dt if policy else None,
            "rig": policy.rig.to_dict() if policy else None,
            "route_towns": dict(sorted(route_towns.items())),
            "repetitions": p.flags.repetitions,
            "created": now_iso(), "created_by": user_at_host(), "tool": tool_version(),
            "argv": ["python", "-m", "tools.evaluate", *sys.argv[1:]],
        })
    print(f"evaluate: {p.what} on {len(p.jobs)} route runs into {layout.root}", file=sys.stderr)
    notes = unseen_towns_note(read_evaluation(layout) or {})
    for note in notes:
        print(f"evaluate: {note}", file=sys.stderr)
    return notes


def drive(p: EvaluationPlan) -> None:
    """Every route run, through collection's machinery (local workers, or SLURM arrays watched by a monitor)."""
    f = p.flags
    collect_routes(routes_dir=str(f.routes), root=str(p.layout.root), towns=f.towns, workers=f.workers,
                   repetitions=f.repetitions, max_attempts=f.max_attempts, settings=p.settings, slurm=p.slurm,
                   servers_per_gpu=f.servers_per_gpu)


def summary(p: EvaluationPlan, notes: list[str], version: ScoreVersion = VERSIONS[DEFAULT_VERSION],
            bench2drive: bool = False) -> str:
    """ROOT/result.json aggregated over every planned run with the leaderboard score `version`; the scores as
    printed, and Bench2Drive's metrics (ROOT/bench2drive/) with `bench2drive`."""
    layout = Layout(p.layout.root)
    agg = score_root(layout, version)
    text = agg.summary(p.what, notes)
    if bench2drive:
        text += "\n" + write_bench2drive(layout, agg).summary()
    return text


# ----------------------------------------------------------------------------- ROOT/evaluation.json


def read_evaluation(layout: Any) -> dict[str, Any] | None:
    """ROOT/evaluation.json, None when there is none; ToolError for one that is not readable."""

    try:
        data = files.read_json(layout.evaluation)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ToolError(f"{layout.evaluation}: unreadable ({e}); restore it, or evaluate into another --root") from None
    if not isinstance(data, dict) or data.get("format") != EVALUATION_FORMAT:
        raise ToolError(f"{layout.evaluation}: not an evaluation record of format {EVALUATION_FORMAT}; evaluate into "
                        "another --root")
    return data


def check_same_evaluation(layout: Any, before: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse to mix two evaluations in one root: agent, checkpoint, routes folder and settings must match."""
    def what(e: dict[str, Any]) -> str:
        if e.get("agent") == "leaderboard":
            return f"agent file {(e.get('settings') or {}).get('agent_file')}"
        return f"checkpoint {e.get('checkpoint')}" if e.get("agent") == "policy" else "the expert"

    for field in IDENTITY:
        if before.get(field) == now[field]:
            continue
        if field in ("agent", "checkpoint"):
            differs = f"evaluated {what(before)}, this command evaluates {what(now)}"
        elif field == "routes_dir":
            differs = f"evaluated the routes of {before.get('routes_dir')}, this command those of {now['routes_dir']}"
        else:
            # A setting added since the root was evaluated reads as its default there.
            new = now["settings"]
            old = {**CollectSettings().to_dict(), **(before.get("settings") or {})}
            changed = ", ".join(f"--{k}={old.get(k)!r} (now {new.get(k)!r})" for k in sorted(set(old) | set(new))
                                if old.get(k) != new.get(k))
            differs = f"was evaluated with other settings: {changed}"
        raise ToolError(f"--root {layout.root}: {differs} ({layout.evaluation.name}); give another --root (one "
                        "evaluation per root)")


def unseen_towns_note(evaluation: dict[str, Any]) -> list[str]:
    """One line when routes lie in towns the checkpoint never trained on (nothing for the expert or when the
    checkpoint does not know its towns)."""
    trained = evaluation.get("checkpoint_towns")
    routes = evaluation.get("route_towns") or {}
    if not trained or not routes:
        return []
    unseen = {town: n for town, n in routes.items() if town not in set(trained)}
    if not unseen:
        return []
    return [f"{sum(unseen.values())} of {sum(routes.values())} routes are in towns the checkpoint never saw: "
            f"{', '.join(sorted(unseen))} (trained on {', '.join(sorted(trained))})"]
