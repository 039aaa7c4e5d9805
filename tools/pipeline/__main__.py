"""python -m tools.pipeline run ROUTES_DIR --root ROOT [--slurm] ...: the whole pipeline in one command.

Collection, buckets, cache, pre-training and post-training: here one after the other, or with --slurm
submitted as one chain of dependent SLURM jobs (what bin/pipeline runs). `python -m tools.pipeline run
--help` lists the flags; docs/slurm.md explains the chain. The stages: tools/pipeline/chain.py.
"""

from __future__ import annotations

from tools.dataset import cli
from tools.dataset.presets import table_text


def run(routes_dir: str, root: str | None = None, slurm: bool = False, partition: str | None = None,
        account: str | None = None, shards: int = 8, gpus: int = 1, outputs: str = "outputs",
        redo: str | None = None, sbatch_args: str = "", collect_args: str = "", buckets_args: str = "",
        cache_args: str = "", pretrain_args: str = "", posttrain_args: str = "", collect_sbatch: str = "",
        buckets_sbatch: str = "", cache_sbatch: str = "", train_sbatch: str = "", preset: str | None = None) -> None:
    """Run every stage for a folder of routes: collect, buckets, cache, pretrain, posttrain.

    Without --slurm the stages run here one after the other and the first that fails stops the rest;
    rerunning skips what is done (each stage's tool does). With --slurm they are submitted as one chain of
    jobs, each `--dependency=afterok` on the one before, and the job ids are printed (stage, job id,
    state). The chain is recorded in ROOT/slurm/pipeline.json: rerunning the same command submits
    nothing while the jobs are pending, running or done, and resubmits from the first stage that failed.
    Everything is checked before anything is submitted.

    --preset tiny|small|medium|full sizes the run: bin/collect --preset and bin/train preset= (tools/dataset/presets.py;
    the routes come from `python -m tools.collect routes --preset`); a --STAGE-args value wins over it.
    tiny runs every stage on 4 short routes in about a minute on 2 cores, small in about ten. Collection:
      {collect}
    Training (both phases):
      {train}

    Args:
        routes_dir: folder of route files (*.xml), searched recursively by bin/collect.
        root: dataset root (default: $DATA_ROOT, else ./data); on SLURM, on storage every node sees.
        slurm: submit the stages as SLURM jobs instead of running them here.
        partition: SLURM partition of every job, the collection's arrays included (default: the cluster's).
        account: SLURM account to charge.
        shards: array tasks that build the cache together (slurm/build-cache.sbatch).
        gpus: GPUs of the training node, one training process each (0: train on CPU).
        outputs: folder of the training runs: OUTPUTS/pretrain and OUTPUTS/posttrain.
        redo: submit (or run) this stage and every later one again, even if done; on SLURM their live jobs
            are cancelled first.
        sbatch_args: more sbatch options for every job, as one quoted string ("--qos=high --nice=10").
        collect_args: options of bin/collect, as one quoted string ("--throttle 48 --time 01:00:00").
        buckets_args: options of bin/build-buckets ("--holdout town:Town05").
        cache_args: options of bin/build-cache ("--image_width=320").
        pretrain_args: key=value settings of bin/train pretrain ("max_steps=20000 model=full").
        posttrain_args: key=value settings of bin/train posttrain.
        collect_sbatch: sbatch options of the job that submits and watches the collection's arrays.
        buckets_sbatch: sbatch options of the buckets job.
        cache_sbatch: sbatch options of each cache array task ("--cpus-per-task=4 --time=02:00:00").
        train_sbatch: sbatch options of both training jobs ("--mem=200G --time=2-00:00:00").
        preset: tiny, small, medium or full: the size of the collection and of both training runs (above).
    """
    from tools.pipeline.chain import parse_options, pipeline

    options = parse_options(
        routes_dir, root, outputs, slurm, partition, account, shards, gpus, redo, sbatch_args,
        args={"collect": collect_args, "buckets": buckets_args, "cache": cache_args, "pretrain": pretrain_args,
              "posttrain": posttrain_args},
        sbatch={"collect": collect_sbatch, "buckets": buckets_sbatch, "cache": cache_sbatch, "train": train_sbatch},
        preset=preset)
    pipeline(options)


run.__doc__ = run.__doc__.replace("{collect}", table_text("collect", "      ")[6:]).replace(
    "{train}", table_text("train", "      ")[6:])


COMMANDS = {"run": run}

if __name__ == "__main__":
    cli.main("pipeline", COMMANDS, name="python -m tools.pipeline")
