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

from tools.collect.runner.slurm_options import SlurmOptions, slurm_flags
from tools.core import cli
from tools.core.errors import ToolError


@slurm_flags
def run(routes_dir: str, root: str | None = None, checkpoint: str | None = None, agent: str | None = None,
        agent_file: str | None = None, agent_config: str | None = None, towns: str | None = None,
        workers: int | None = None, repetitions: int | None = None, seeds: int | None = None, max_attempts: int = 3,
        score: str = "2.0", bench2drive: bool = False, servers_per_gpu: int | None = None,
        slurm: SlurmOptions | None = None, **settings) -> None:
    """Drive every route file under ROUTES_DIR K times with a trained policy (--checkpoint), a leaderboard 2.0
    agent file of your own (--agent-file PATH [--agent-config PATH]) or the expert (--agent expert), without
    recording frames, then aggregate the leaderboard 2.0 scores into
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

    --world=carla drives each route run in a CARLA server of its own under the real leaderboard 2.0 evaluator
    (CARLA_ROOT, LEADERBOARD_ROOT, SCENARIO_RUNNER_ROOT, or the CARLA image: checked before anything is written),
    with the expert or an agent file: its --agent is the file, its --agent-config yours as given, the track the
    agent's own; --servers-per-gpu, crashed runs retried and SLURM arrays as for collection (docs/carla.md).

    Args:
        routes_dir: folder searched recursively for route files (*.xml; hidden files and towns/ skipped).
        root: the evaluation root to write (required): a new folder, or the one to resume.
        checkpoint: a post-training run folder (its newest intact checkpoint) or one of its step folders.
        agent: "expert" to evaluate the expert instead of a checkpoint.
        agent_file: a leaderboard 2.0 agent file to evaluate instead (the class its get_entry_point() names, driven
            as the leaderboard evaluator drives it: tools/evaluate/leaderboard; template docs/examples/gnss_agent.py).
        agent_config: the file (or folder) the agent's setup() is given, as the evaluator's --agent-config. Our own
            policy as an agent file (tools/evaluate/leaderboard/agent_file/policy_agent.py) takes a checkpoint
            folder, or a JSON file {"checkpoint": PATH} (docs/leaderboard-agent.md).
        towns: folder of OpenDRIVE towns (default: the nearest towns/ folder above each route file).
        workers: parallel worker processes (local evaluation; default 1).
        repetitions: runs of each route (K), each in its own world: its seed derives from (route, K, --seed).
        seeds: the same as --repetitions (K world seeds per route); the summary gives means with 95% intervals
            over routes x seeds, and per route over its seeds.
        max_attempts: attempts per route run while it crashes.
        score: the leaderboard score the summary and ROOT/result.json give, 2.0 or 2.1 (as `score --score`).
        bench2drive: also Bench2Drive's metrics, printed and written under ROOT/bench2drive/ (as `score
            --bench2drive`).
        servers_per_gpu: CARLA servers at once on each GPU (--world=carla; 1 to 16), as bin/collect's: K x the GPUs
            workers locally, --gpus x K runs at once in each SLURM task.
        settings: collection settings passed to every run, e.g. --vehicles=40 (tools/collect/base/config.py);
            --no-sensor-noise hands an agent file exact GNSS, IMU and LiDAR readings, for checks (the leaderboard
            adds its noise: docs/leaderboard-agent.md).
    """
    from tools.dataset.leaderboard_scores import score_version
    from tools.evaluate import run as evaluation

    version = score_version(score)
    if not isinstance(bench2drive, bool):
        raise ToolError(f"--bench2drive {bench2drive}: a switch; give --bench2drive alone")
    flags = evaluation.check(routes_dir, root, checkpoint, agent, towns, workers, repetitions, seeds, max_attempts,
                             slurm, settings, agent_file, agent_config, servers_per_gpu)
    plan = evaluation.plan(flags)  # everything refused before anything is written
    notes = evaluation.start(plan)
    evaluation.drive(plan)
    print(evaluation.summary(plan, notes, version, bench2drive))


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
    from tools.evaluate.run import read_evaluation, unseen_towns_note

    if root is None or isinstance(root, bool) or str(root) == "":
        raise ToolError("--root missing: give the evaluation root to aggregate (bin/evaluate ... --root ROOT)")
    version = score_version(score)
    if not isinstance(bench2drive, bool):
        raise ToolError(f"--bench2drive {bench2drive}: a switch; give --bench2drive alone")
    layout = Layout(resolve_root(cli.text(root, "root")))
    if not layout.root.is_dir():
        raise ToolError(f"--root {layout.root}: no such folder; give the --root that bin/evaluate wrote")
    record = read_evaluation(layout)
    if record is None:
        raise ToolError(f"--root {layout.root}: not an evaluation root (no {layout.evaluation.name}); give the "
                        "--root that bin/evaluate wrote")
    what = (f"agent file {(record.get('settings') or {}).get('agent_file')}" if record.get("agent") == "leaderboard"
            else f"checkpoint {record.get('checkpoint')}" if record.get("checkpoint") else "the expert")
    agg = score_root(layout, version)
    print(agg.summary(what, unseen_towns_note(record)))
    if bench2drive:
        from tools.evaluate.bench2drive import write_bench2drive

        print(write_bench2drive(layout, agg).summary())



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


def route(route: str | None = None, root: str | None = None, repetition: int = 0, towns: str | None = None,
          route_id: str | None = None, attempt: int | None = None, force: bool = False, spec: str | None = None,
          **settings) -> None:
    """Drive one route once with a trained policy (--agent=policy --checkpoint=DIR) or a leaderboard 2.0 agent file
    (--agent=leaderboard --agent-file=PATH [--agent-config=PATH]) in the embedded world (the agent file also with
    --world=carla, under the real leaderboard evaluator) and write its result under ROOT: the child command `run`
    starts for each route run (local workers and SLURM tasks), as `python -m tools.collect run` is the expert's. The
    same attempt as collection's (claim, result file, crash handling: tools.collect.runner.attempt), with the policy
    (tools.evaluate.driver) at the wheel.

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
        settings: collection settings as --key=value (tools/collect/base/config.py); --agent=policy and
            --checkpoint=DIR name the policy.
    """
    from tools.collect.base.config import CollectSettings
    from tools.collect.runner.attempt import route_run

    def policy(cfg: CollectSettings):  # the run's settings (the spec's, or the flags'), checked first
        if cfg.agent == "leaderboard" and cfg.agent_file:  # a researcher's own leaderboard 2.0 agent file
            from tools.evaluate.leaderboard.host import AgentSettings, agent_factory

            return agent_factory(AgentSettings(agent_file=cfg.agent_file, agent_config=cfg.agent_config,
                                                noise=cfg.sensor_noise))
        if cfg.agent != "policy" or not cfg.checkpoint:
            raise ToolError("route: give --agent=policy --checkpoint=RUN_OR_STEP, or --agent=leaderboard "
                            "--agent-file=PATH (the expert's route runs: python -m tools.collect run)")
        from tools.evaluate.driver import policy_factory  # torch: only for a trained policy

        return policy_factory(cfg.checkpoint)

    route_run(route=route, spec=spec, root=root, repetition=repetition, towns=towns, route_id=route_id,
              attempt=attempt, force=force, settings=settings, driver=policy)


def _setting_switches() -> set[str]:
    from tools.collect.base.config import setting_switches  # here, not at the top: --help stays light

    return setting_switches()


run.setting_switches = route.setting_switches = _setting_switches

COMMANDS = {"run": run, "score": score, "compare": compare, "route": route}

if __name__ == "__main__":
    cli.main("evaluate", COMMANDS, name="python -m tools.evaluate")
