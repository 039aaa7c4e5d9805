"""python -m tools.pipeline run ROUTES_DIR --root ROOT [--slurm] ...: the whole pipeline in one command.

Collection, buckets, cache, pre-training and post-training: here one after the other, or with --slurm
submitted as one chain of dependent SLURM jobs (what bin/pipeline runs). `python -m tools.pipeline run
--help` lists the flags; docs/slurm.md explains the chain. The stages: tools/pipeline/chain.py.
"""

from __future__ import annotations

from tools.core import cli, options
from tools.core.presets import table_text
from tools.pipeline.chain import PipelineFlags, parse_options, pipeline


@options.takes("flags", PipelineFlags)
def run(routes_dir: str, root: str | None = None, flags: PipelineFlags | None = None) -> None:
    """Run every stage for a folder of routes: collect, buckets, cache, pretrain, posttrain.

    Without --slurm the stages run here one after the other and the first that fails stops the rest;
    rerunning skips what is done (each stage's tool does). With --slurm they are submitted as one chain of
    jobs, each `--dependency=afterok` on the one before, and the job ids are printed (stage, job id,
    state). The chain is recorded in ROOT/slurm/pipeline.json: rerunning the same command submits
    nothing while the jobs are pending, running or done, and resubmits from the first stage that failed.
    Everything is checked before anything is submitted.

    --preset tiny|small|medium|bench2drive|full sizes the run: bin/collect --preset and bin/train preset=
    (tools/core/presets.py; the routes come from `python -m tools.collect routes --preset`); a --STAGE-args value wins
    over it.
    tiny runs every stage on 4 short routes in about a minute on 2 cores, small in about ten. Collection:
      {collect}
    Training (both phases):
      {train}

    Args:
        routes_dir: folder of route files (*.xml), searched recursively by bin/collect.
        root: dataset root (default: $DATA_ROOT, else ./data); on SLURM, on storage every node sees.
    """
    pipeline(parse_options(routes_dir, root, flags))


run.__doc__ = run.__doc__.replace("{collect}", table_text("collect", "      ")[6:]).replace(
    "{train}", table_text("train", "      ")[6:])


COMMANDS = {"run": run}

if __name__ == "__main__":
    cli.main("pipeline", COMMANDS, name="python -m tools.pipeline")
