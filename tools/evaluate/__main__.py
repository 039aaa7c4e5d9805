"""python -m tools.evaluate COMMAND: closed-loop evaluation of a trained policy (or the expert) on routes.

Commands:
  run     drive every route under a folder with a checkpoint (--checkpoint) or the expert (--agent expert),
          locally or on SLURM, then aggregate ROOT/result.json and print the scores
  score   aggregate an evaluation root again (after a SLURM evaluation ended, say) and print the scores
  compare the paired difference of two evaluation roots of the same routes, per route and overall, with 95% intervals
  route   one route run of a trained policy (what `run`'s workers and SLURM tasks start for each route run)

What is measured and how: docs/evaluation.md. `python -m tools.evaluate COMMAND --help` explains each one.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tools.dataset import cli
from tools.dataset.errors import ToolError

#: Version of ROOT/evaluation.json.
EVALUATION_FORMAT = 1
#: What identifies an evaluation: rerunning into a root that evaluated something else is refused.
IDENTITY = ("agent", "checkpoint", "routes_dir", "settings")


def run(routes_dir: str, root: str | None = None, checkpoint: str | None = None, agent: str | None = None,
        towns: str | None = None, workers: int = 1, repetitions: int | None = None, seeds: int | None = None,
        max_attempts: int = 3,
        slurm: bool = False, partition: str | None = None, account: str | None = None, time: str = "01:00:00",
        throttle: int = 48, cpus: int = 1, mem: str = "4G", gpus: int | None = None, runs_per_task: int = 1,
        sbatch_args: str = "", watch: bool = True, poll: float = 30.0, **settings) -> None:
    """Drive every route file under ROUTES_DIR K times with a trained policy (--checkpoint) or the expert
    (--agent expert), without recording frames, then aggregate the leaderboard 2.0 scores into
    ROOT/result.json and print them: driving score, route completion, infraction score, infractions per km,
    statuses, and a table of every route run.

    The route runs go through collection's machinery (local workers, or SLURM job arrays with --slurm) into
    ROOT/results/<Scenario>/<run>.json. A run that drove to any outcome (Perfect, Completed, Failed, timed
    out, deviated, blocked) is final; a crashed run is retried up to --max-attempts. Rerunning the same
    command resumes. ROOT/evaluation.json records what is evaluated: a root that evaluated another
    checkpoint, agent, route folder or settings is refused. Runs without a result and crashed runs count
    with score 0 in every mean. With --slurm --no-watch the arrays are submitted and the aggregate is
    partial; `python -m tools.evaluate score --root ROOT` (bin/evaluate score --root ROOT) aggregates again
    once they ended.

    Args:
        routes_dir: folder searched recursively for route files (*.xml; hidden files and towns/ skipped).
        root: the evaluation root to write (required): a new folder, or the one to resume.
        checkpoint: a post-training run folder (its newest intact checkpoint) or one of its step folders.
        agent: "expert" to evaluate the expert instead of a checkpoint.
        towns: folder of OpenDRIVE towns (default: the nearest towns/ folder above each route file).
        workers: parallel worker processes (local evaluation).
        repetitions: runs of each route (K), each in its own world: its seed derives from (route, K, --seed).
        seeds: the same as --repetitions (K world seeds per route); the summary gives means with 95% intervals
            over routes x seeds, and per route over its seeds.
        max_attempts: attempts per route run while it crashes.
        slurm: run the route runs as SLURM array tasks instead of local workers (docs/slurm.md).
        partition: SLURM partition (default: the cluster's default).
        account: SLURM account to charge.
        time: time limit of one array task (SLURM format, e.g. 01:00:00).
        throttle: array tasks running at once (--array=...%K); changes live arrays when rerun.
        cpus: CPUs per task.
        mem: memory per task (e.g. 4G).
        gpus: GPUs per task (default: 0 for the embedded world).
        runs_per_task: route runs one task drives one after the other.
        sbatch_args: more sbatch options, as one quoted string, passed as they are.
        watch: keep monitoring until every route run ended (--no-watch: submit, print the partial aggregate, exit).
        poll: seconds between two looks at the scheduler.
        settings: collection settings passed to every run, e.g. --vehicles=40 (tools/collect/config.py).
    """
    from tools.collect.config import CollectSettings
    from tools.collect.routes import find_route_files
    from tools.collect.runner.collection import collect_routes
    from tools.collect.runner.jobs import plan
    from tools.collect.runner.slurm import Scheduler, options_from_flags
    from tools.dataset import atomic
    from tools.dataset.layout import Layout, check_root_writable, resolve_root
    from tools.dataset.manifest import now_iso, read_manifest, tool_version, user_at_host
    from tools.dataset.score import score_root

    # Every argument is checked before anything is written.
    if root is None or isinstance(root, bool) or str(root) == "":
        raise ToolError("--root missing: give the folder this evaluation writes (a new one, or the one to resume)")
    if routes_dir is None or isinstance(routes_dir, bool) or str(routes_dir) == "":
        raise ToolError("ROUTES_DIR missing: give the folder that holds the route files (*.xml)")
    routes_path = Path(cli.text(routes_dir, "routes-dir")).expanduser().absolute()
    if not routes_path.is_dir():
        raise ToolError(f"ROUTES_DIR {routes_path}: no such folder; give the folder that holds the route files")
    checkpoint = cli.optional_text(checkpoint, "checkpoint")
    agent = cli.optional_text(agent, "agent")
    if checkpoint is None and agent is None:
        raise ToolError("nothing to evaluate: give --checkpoint RUN_OR_STEP (a trained policy) or --agent expert")
    if checkpoint is not None and agent not in (None, "policy"):
        raise ToolError(f"--checkpoint and --agent {agent} both given: give --checkpoint for a trained policy, "
                        "or --agent expert alone")
    if checkpoint is None and agent != "expert":
        hint = "--agent policy needs --checkpoint RUN_OR_STEP" if agent == "policy" else f"--agent {agent}: unknown"
        raise ToolError(f"{hint}; give --checkpoint RUN_OR_STEP for a trained policy, or --agent expert")
    if "record" in settings:
        raise ToolError("--record: an evaluation never records frames; to record, collect: bin/collect")
    workers = cli.integer(workers, "workers", 1)
    repetitions = seeds_or_repetitions(seeds, repetitions)
    max_attempts = cli.integer(max_attempts, "max-attempts", 1)

    policy = None
    if checkpoint is not None:
        from tools.evaluate.policy import load_policy

        policy = load_policy(checkpoint)  # ToolError naming --checkpoint for anything wrong with it
    run_settings = {**settings, "agent": "policy" if policy else "expert",
                    "checkpoint": str(Path(policy.path).resolve()) if policy else "", "record": False}
    resolved = CollectSettings.from_flags(run_settings)
    options = options_from_flags(slurm=slurm, partition=partition, account=account, time=time, throttle=throttle,
                                 cpus=cpus, mem=mem, gpus=gpus, runs_per_task=runs_per_task,
                                 sbatch_args=sbatch_args, watch=watch, poll=poll, settings=run_settings)
    layout = Layout(resolve_root(cli.text(root, "root")))
    check_root_writable(layout.root)
    read_manifest(layout)  # a root of another format version is refused
    evaluation = {
        "format": EVALUATION_FORMAT, "agent": resolved.agent, "checkpoint": resolved.checkpoint or None,
        "routes_dir": str(routes_path), "settings": resolved.to_dict(),
    }
    before = read_evaluation(layout)
    if before is None and layout.manifest.is_file():
        raise ToolError(f"--root {layout.root}: a collection root (it has {layout.manifest.name} but no "
                        f"{layout.evaluation.name}); give an evaluation its own --root")
    if before is not None:
        check_same_evaluation(layout, before, evaluation)
    route_files = find_route_files(routes_path)
    if not route_files:
        raise ToolError(f"ROUTES_DIR {routes_path}: no route files (*.xml) in it or below it")
    jobs = plan(route_files, towns, repetitions)  # every route parsed and checked against its town
    if options is not None:
        scheduler = Scheduler()
        scheduler.require()
        if options.partition:
            scheduler.check_partition(options.partition)

    # Everything checked: ROOT becomes an evaluation root before any run starts.
    route_towns = Counter(route.town for route in {(j.route_file, j.route.id): j.route for j in jobs}.values())
    if before is None:
        try:
            layout.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ToolError(f"--root {layout.root}: cannot create it ({e.strerror})") from None
        atomic.write_json(layout.evaluation, {
            **evaluation,
            "checkpoint_towns": sorted(policy.towns) if policy else None,
            "frame_dt": policy.frame_dt if policy else None,
            "rig": policy.rig.to_dict() if policy else None,
            "route_towns": dict(sorted(route_towns.items())),
            "repetitions": repetitions,
            "created": now_iso(), "created_by": user_at_host(), "tool": tool_version(),
            "argv": ["python", "-m", "tools.evaluate", *sys.argv[1:]],
        })
    what = f"checkpoint {resolved.checkpoint}" if policy else "the expert"
    print(f"evaluate: {what} on {len(jobs)} route runs into {layout.root}", file=sys.stderr)
    notes = unseen_towns_note(read_evaluation(layout) or {})
    for note in notes:
        print(f"evaluate: {note}", file=sys.stderr)

    collect_routes(routes_dir=str(routes_path), root=str(layout.root), towns=towns, workers=workers,
                   repetitions=repetitions, max_attempts=max_attempts, settings=run_settings, slurm=options)
    print(score_root(Layout(layout.root)).summary(what, notes))


def score(root: str | None = None, score: str = "2.0", bench2drive: bool = False) -> None:
    """Aggregate an evaluation root again: ROOT/result.json from every planned route run's result, and
    the printed scores (driving score, route completion, infraction score, infractions per km, statuses,
    a table of every route run). Runs still without a result count with score 0; nothing is driven.

    Args:
        root: the evaluation root (bin/evaluate ... --root ROOT).
        score: the leaderboard score, 2.0 (the runs' own scores) or 2.1 (penalties recomputed from each run's
            infractions as leaderboard 2.1 adds them up); result.json says which (docs/evaluation.md).
        bench2drive: also Bench2Drive's metrics: success rate, the five abilities, efficiency and smoothness where
            the runs' records allow, printed and written as ROOT/bench2drive/merged.json (the file Bench2Drive's
            tools/merge_route_json.py writes) and merged_ability.json (tools.evaluate.bench2drive).
    """
    from tools.dataset.layout import Layout, resolve_root
    from tools.dataset.leaderboard_scores import score_version
    from tools.dataset.score import score_root

    if root is None or isinstance(root, bool) or str(root) == "":
        raise ToolError("--root missing: give the evaluation root to aggregate (bin/evaluate ... --root ROOT)")
    version = score_version(score)
    if not isinstance(bench2drive, bool):
        raise ToolError(f"--bench2drive {bench2drive}: a switch; give --bench2drive alone")
    layout = Layout(resolve_root(cli.text(root, "root")))
    if not layout.root.is_dir():
        raise ToolError(f"--root {layout.root}: no such folder; give the --root that bin/evaluate wrote")
    evaluation = read_evaluation(layout)
    if evaluation is None:
        raise ToolError(f"--root {layout.root}: not an evaluation root (no {layout.evaluation.name}); give the "
                        "--root that bin/evaluate wrote")
    what = f"checkpoint {evaluation.get('checkpoint')}" if evaluation.get("checkpoint") else "the expert"
    agg = score_root(layout, version)
    print(agg.summary(what, unseen_towns_note(evaluation)))
    if bench2drive:
        from tools.evaluate.bench2drive import write_bench2drive

        print(write_bench2drive(layout, agg).summary())


def seeds_or_repetitions(seeds: int | None, repetitions: int | None) -> int:
    """K: --seeds and --repetitions are one thing (K runs of each route, each seeded from (route, K, --seed));
    both given and different is refused."""
    k_seeds = None if seeds is None else cli.integer(seeds, "seeds", 1)
    k_reps = None if repetitions is None else cli.integer(repetitions, "repetitions", 1)
    if k_seeds is not None and k_reps is not None and k_seeds != k_reps:
        raise ToolError(f"--seeds {k_seeds} and --repetitions {k_reps}: they are the same thing (K seeded runs of "
                        "each route); give one of them")
    return k_seeds or k_reps or 1


def compare(root_a: str | None = None, root_b: str | None = None) -> None:
    """The paired difference B - A of two evaluation roots of the same routes: per route, the mean over its
    seeds of (DS of B - DS of A) and the same for RC, with 95% t-intervals over the seeds both roots drove, and
    overall the mean paired difference over every (route, seed) with its interval. Runs pair by (route,
    repetition K): the same world when both were evaluated with the same --seed. Roots of different route sets
    are refused; nothing is driven or written.

    Args:
        root_a: the first evaluation root (the baseline).
        root_b: the second evaluation root (the one compared with it).
    """
    from tools.evaluate.compare import compare_roots

    print(compare_roots(root_a, root_b))


# ----------------------------------------------------------------------------- ROOT/evaluation.json


def read_evaluation(layout: Any) -> dict[str, Any] | None:
    """ROOT/evaluation.json, None when there is none; ToolError for one that is not readable."""
    import json

    try:
        data = json.loads(layout.evaluation.read_text())
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
        return f"checkpoint {e.get('checkpoint')}" if e.get("agent") == "policy" else "the expert"

    for field in IDENTITY:
        if before.get(field) == now[field]:
            continue
        if field in ("agent", "checkpoint"):
            differs = f"evaluated {what(before)}, this command evaluates {what(now)}"
        elif field == "routes_dir":
            differs = f"evaluated the routes of {before.get('routes_dir')}, this command those of {now['routes_dir']}"
        else:
            old, new = before.get("settings") or {}, now["settings"]
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


def route(route: str | None = None, root: str | None = None, repetition: int = 0, towns: str | None = None,
          route_id: str | None = None, attempt: int | None = None, force: bool = False, spec: str | None = None,
          **settings) -> None:
    """Drive one route once with a trained policy (--agent=policy --checkpoint=DIR) in the embedded world and
    write its result under ROOT: the child command `run` starts for each route run (local workers and SLURM
    tasks), as `python -m tools.collect run` is the expert's. The same attempt as collection's (claim, result
    file, crash handling: tools.collect.runner.attempt), with the policy (tools.evaluate.driver) at the wheel.

    Args:
        route: a leaderboard 2.0 route XML file.
        root: the evaluation root.
        repetition: repetition index K; the world is seeded from (route, K).
        towns: folder of OpenDRIVE towns (default: the nearest towns/ folder above the route file).
        route_id: which route of the file (default: the only one).
        attempt: attempt number already claimed by a caller; else claimed here.
        force: redo a run that already finished.
        spec: a run spec the evaluation planned (ROOT/logs/<Scenario>/<run>/run-spec.json) instead of --route and
            the settings: what `run`'s workers and SLURM tasks give.
        settings: collection settings as --key=value (tools/collect/config.py); --agent=policy and
            --checkpoint=DIR name the policy.
    """
    from tools.collect.runner.attempt import route_run
    from tools.evaluate.driver import policy_factory

    def policy(cfg: Any):  # the run's settings (the spec's, or the flags'), checked first
        if cfg.agent != "policy" or not cfg.checkpoint:
            raise ToolError("route: give --agent=policy --checkpoint=RUN_OR_STEP (the expert's route runs: "
                            "python -m tools.collect run)")
        return policy_factory(cfg.checkpoint)

    route_run(route=route, spec=spec, root=root, repetition=repetition, towns=towns, route_id=route_id,
              attempt=attempt, force=force, settings=settings, driver=policy)


COMMANDS = {"run": run, "score": score, "compare": compare, "route": route}

if __name__ == "__main__":
    cli.main("evaluate", COMMANDS, name="python -m tools.evaluate")
