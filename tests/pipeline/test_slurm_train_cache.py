"""Cache, training and the whole pipeline on a real SLURM cluster (tests/slurm_cluster.py): the cache array,
a training job that meets its time limit, the multi-node template on one node, bin/pipeline's dependency
chain, and bad input. One stand-in only, named as such: a recording `sbatch` for the golden file of the
command lines bin/pipeline builds.

Timing on the test cluster (slurm_cluster.py): `--time=1` ends a job 60-90 s after it starts, and
`--signal=B:USR1@10` arrives 20-50 s in (slurmctld looks every 30 s and may warn up to 30 s early); a
requeued job starts again after cred_expire (10 s there, 120 s by default). So that the training tests do
not depend on how fast this machine trains, a test stops the training process (SIGSTOP) after its first
step until the warning has reached the batch shell, then lets it go on (SIGCONT): the signal always lands
mid-run, whatever the speed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import BIN, PYTHON, REPO, copy_root, file_bytes, run_bin, run_tool, start_tool, tree, wait_until
from processes import live_processes
from slurm_cluster import path_without_slurm

from tools.pipeline.chain import DONE_DIR, STATE_FILE, PipelineOptions, Scheduler, status_of
from tools.train import checkpoint

pytestmark = pytest.mark.slurm

#: The tiny training run of tests/train/test_train.py (batch 4, a log line every step), without step checkpoints.
TINY = ["batch_size=4", "log_every=1", "image_every=2", "val_samples=8", "warmup_steps=1", "save_every=100"]
TEMPLATES = REPO / "slurm"
GOLDEN = REPO / "tests" / "golden"


@pytest.fixture(scope="module")
def built_root(train_root) -> Path:
    """The session's copy of the collected root with its buckets and cache built by `python -m tools.buckets
    build` and `python -m tools.cache build` (conftest.py's train_root: what bin/build-buckets and bin/build-cache
    run here, so it was built once, not twice): the local build the cache array is compared with; the root the
    training jobs read. Read-only."""
    return train_root


@pytest.fixture(scope="module")
def routes(collected_root) -> Path:
    """The 4 routes the collected root was collected from (every one of its runs is finished)."""
    return collected_root.parent / "routes"


def job(cluster, job_id: str) -> dict[str, str]:
    """The `scontrol show job` record of a job that is not an array."""
    (record,) = cluster.show_job(job_id)
    return record


def text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def training_pid(logdir: Path) -> int | None:
    """The training process of the run writing `logdir` (under torchrun: the worker, not torchrun)."""
    for p in live_processes():
        if "tools.train" in p.argv and any(str(logdir) in w for w in p.argv) and "torch.distributed.run" not in p.argv:
            return p.pid
    return None


def hold_until_signalled(*runs: tuple[Path, Path]) -> None:
    """Stop the training of each (log, logdir) after its first step until the batch shell has passed SIGUSR1 on
    (see the module's docstring). Several jobs at once: each one is watched on its own and let go as soon as its
    own warning came."""
    waiting = {log: (logdir, time.monotonic()) for log, logdir in runs}  # log -> (logdir, since)
    stopped: dict[Path, tuple[int, float]] = {}  # log -> (pid, since)
    try:
        while waiting or stopped:
            for log, (logdir, since) in list(waiting.items()):
                if re.search(r"^step 1/|got SIGUSR1", text(log), re.M):
                    del waiting[log]
                    pid = training_pid(logdir)
                    if "got SIGUSR1" in text(log) or pid is None:  # the warning came first: the training handles it
                        continue
                    os.kill(pid, signal.SIGSTOP)
                    stopped[log] = (pid, time.monotonic())
                elif time.monotonic() - since > 120:
                    raise AssertionError(f"timed out after 120 s waiting for the first training step in {log}")
            for log, (pid, since) in list(stopped.items()):
                if "got SIGUSR1" in text(log):
                    del stopped[log]
                    os.kill(pid, signal.SIGCONT)
                elif time.monotonic() - since > 120:
                    raise AssertionError(f"timed out after 120 s waiting for SIGUSR1 from SLURM in {log}:\n{text(log)}")
            time.sleep(0.3)
    finally:
        for pid, _ in stopped.values():
            os.kill(pid, signal.SIGCONT)


def submit_training(cluster, template: str, log: Path, logdir: Path, root: Path, *keys: str,
                    env: str = "") -> str:
    return cluster.sbatch("--time=1", "--signal=B:USR1@10", "--mem=1G", f"--output={log}",
                          f"--export=ALL,DRIVEKIT_HOME={REPO}{env}", TEMPLATES / template, "pretrain",
                          f"root={root}", f"logdir={logdir}", *TINY, *keys)


# ----------------------------------------------------------------------------- the cache


def test_the_cache_array_builds_the_same_records_as_a_local_build(slurm, collected_root, built_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    logs = root / "logs" / "slurm"
    logs.mkdir(parents=True)
    array = slurm.sbatch("--array=0-2", "--mem=1G", f"--output={logs}/%x-%A_%a.log",
                         f"--export=ALL,DRIVEKIT_HOME={REPO}", TEMPLATES / "build-cache.sbatch", "--root", root)
    slurm.wait_done(array, timeout=240)
    assert {r["ArrayTaskId"]: r["JobState"] for r in slurm.show_job(array)} == dict.fromkeys("012", "COMPLETED")
    for task in range(3):
        assert f"--shard {task}/3" in text(logs / f"drivekit-build-cache-{array}_{task}.log")
    ours, local = file_bytes(root / "cache"), file_bytes(built_root / "cache")
    assert len(local) > 100 and sorted(ours) == sorted(local)
    assert [name for name in ours if ours[name] != local[name]] == []  # byte for byte: the encoders are deterministic


# ----------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def warned(slurm, built_root, tmp_path_factory):
    """The two training jobs that meet their one-minute time limit, submitted together so that their warnings
    (20-50 s in) are waited for once: `train.sbatch` for 6 steps (its uninterrupted reference run trains here
    meanwhile) and `train-multinode.sbatch` for 1000 steps with DRIVEKIT_MAX_REQUEUES=0. Each is held after its
    first step until its warning came (hold_until_signalled); the 6-step job, once it requeued itself, gets
    10 minutes for its rerun (which would else get the same warning 20-50 s after it starts), so that it ends
    after one requeue (a real job finishes in whichever run its last steps fall). The tests below read them
    (the multinode one first: without accounting an ended job stays in `scontrol show job` for MinJobAge)."""
    d = tmp_path_factory.mktemp("warned")
    reference = start_tool(PYTHON, "-m", "tools.train", "pretrain", f"root={built_root}",
                           f"logdir={d / 'reference'}", *TINY, "max_steps=6")
    single = (d / "train.log", d / "run")
    multi = (d / "multinode.log", d / "multinode-run")
    try:
        single_id = submit_training(slurm, "train.sbatch", *single, built_root, "max_steps=6")
        multi_id = submit_training(slurm, "train-multinode.sbatch", *multi, built_root, "max_steps=1000",
                                   env=",DRIVEKIT_MAX_REQUEUES=0")
        hold_until_signalled(single, multi)
        wait_until(lambda: job(slurm, single_id).get("Restarts") == "1", 60,
                   f"job {single_id} to requeue itself:\n{text(single[0])}")
        slurm.run("scontrol", "update", f"JobId={single_id}", "TimeLimit=10")
        yield {"train": (single_id, *single), "multinode": (multi_id, *multi),
               "reference": (reference, d / "reference")}
    finally:
        if reference.poll() is None:  # the reference run this fixture started, by its Popen
            reference.kill()
            reference.communicate()


@pytest.mark.timeout(600)
def test_the_multinode_template_passes_the_warning_through_srun_and_torchrun_and_stops_requeueing_at_the_cap(
        slurm, warned):
    """slurm/train-multinode.sbatch on one node (SLURM_NNODES=1: srun, torchrun, the c10d rendezvous on the
    first node); DRIVEKIT_MAX_REQUEUES=0, so the warned run checkpoints and the job ends without a requeue."""
    job_id, log, logdir = warned["multinode"]
    slurm.wait_done(job_id, timeout=120)
    record, out = job(slurm, job_id), text(log)
    assert record["JobState"] == "FAILED" and record["Restarts"] == "0", out
    assert "srun --kill-on-bad-exit=1 --ntasks-per-node=1" in out
    stopped = int(re.search(r"stopped by signal SIGUSR1 at step (\d+); checkpoint written", out).group(1))
    assert checkpoint.latest(logdir) == checkpoint.step_dir(logdir, stopped)
    assert "requeued 0 times already (DRIVEKIT_MAX_REQUEUES=0): not requeued" in out


@pytest.mark.timeout(600)
def test_a_train_job_warned_before_its_time_limit_checkpoints_requeues_and_ends_with_the_loss_of_an_uninterrupted_run(
        slurm, warned):
    # The uninterrupted run trained meanwhile (the fixture `warned` started it).
    job_id, log, logdir = warned["train"]
    reference, reference_dir = warned["reference"]
    slurm.wait_done(job_id, timeout=400)
    record, out = job(slurm, job_id), text(log)
    assert (record["JobState"], record["ExitCode"], record["Restarts"]) == ("COMPLETED", "0:0", "1"), out
    stopped = int(re.search(r"stopped by signal SIGUSR1 at step (\d+); checkpoint written", out).group(1))
    assert f"stopped after SIGUSR1 (exit 138): requeueing job {job_id} (requeue 1 of at most 20)" in out
    assert f"resuming {checkpoint.step_dir(logdir, stopped)}" in out
    assert "requeued 1 of at most 20 times" in out and out.rstrip().endswith("finished")
    _, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err
    ours = json.loads((logdir / "summary.json").read_text())
    theirs = json.loads((reference_dir / "summary.json").read_text())
    assert ours["steps"] == theirs["steps"] == 6
    assert ours["final_train_losses"] == theirs["final_train_losses"]  # exactly: the resume is exact


# ----------------------------------------------------------------------------- bin/pipeline


def pipeline(cluster, routes: Path, root: Path, outputs: Path, *extra: str):
    return run_tool(BIN / "pipeline", routes, "--root", root, "--slurm", "--gpus", "0", "--shards", "2",
                    "--outputs", outputs, "--sbatch-args=--mem=1G --time=10",
                    "--collect-args=--poll 1 --vehicles 10 --mem 1G", "--posttrain-args=max_steps=2 " + " ".join(TINY),
                    *extra, env=cluster.env, timeout=120)


def printed(stdout: str) -> dict[str, tuple[str, str]]:
    """bin/pipeline's lines: stage -> (job id, what it says)."""
    out = {}
    for line in stdout.splitlines():
        stage, job_id, state = line.split(None, 2)
        out[stage] = (job_id, state)
    return out


def queue(cluster) -> list[str]:
    return sorted(cluster.run("squeue", "-h", "-o", "%i").stdout.split())


@pytest.mark.timeout(600)
def test_pipeline_submits_the_chain_it_prints_resubmits_from_the_stage_that_failed_and_a_rerun_submits_nothing(
        slurm, routes, tmp_path):
    """From nothing (a folder of 4 routes) to a post-trained model, on the cluster."""
    root, outputs = tmp_path / "root", tmp_path / "outputs"
    failing = "--pretrain-args=max_steps=2 batch_size=0"  # refused by bin/train: the pretrain job fails
    held = "--collect-sbatch=--hold"  # nothing starts before the dependencies are checked
    first = pipeline(slurm, routes, root, outputs, failing, held)
    assert first.returncode == 0, first.stderr
    jobs = printed(first.stdout)
    assert list(jobs) == ["collect", "buckets", "cache", "pretrain", "posttrain"]
    ids = [jobs[s][0] for s in jobs]
    assert all(state.startswith("submitted") for _, state in jobs.values())
    for before, after in zip(ids, ids[1:], strict=False):
        whole = "_*" if before == jobs["cache"][0] else ""  # afterok on an array: on all of its tasks
        for record in slurm.show_job(after):
            assert record["Dependency"] == f"afterok:{before}{whole}(unfulfilled)", record
    assert {r["ArrayTaskId"] for r in slurm.show_job(jobs["cache"][0])} == {"0-1"}
    state = json.loads((root / STATE_FILE).read_text())
    assert [state["stages"][s]["job_id"] for s in jobs] == ids

    queued = queue(slurm)
    again = pipeline(slurm, routes, root, outputs, failing, held)
    assert again.returncode == 0, again.stderr
    assert {s: j for s, (j, _) in printed(again.stdout).items()} == dict(zip(jobs, ids, strict=True))
    assert "nothing submitted" in again.stderr and queue(slurm) == queued

    slurm.run("scontrol", "release", ids[0])
    slurm.wait_done(ids[3], timeout=300)
    wait_until(lambda: not slurm.active(ids[4]), 60, "the posttrain job waiting on the failed one to be cancelled")
    assert job(slurm, ids[3])["JobState"] == "FAILED"

    fixed = "--pretrain-args=max_steps=2 " + " ".join(TINY)
    third = pipeline(slurm, routes, root, outputs, fixed, held)
    assert third.returncode == 0, third.stderr
    now = printed(third.stdout)
    assert [now[s] for s in ("collect", "buckets", "cache")] == [(i, "done") for i in ids[:3]]
    pre, post = now["pretrain"][0], now["posttrain"][0]
    assert pre not in ids and post not in ids
    assert now["pretrain"][1] == f"submitted, after {ids[2]}" and now["posttrain"][1] == f"submitted, after {pre}"
    assert job(slurm, post)["Dependency"] == f"afterok:{pre}(unfulfilled)"
    slurm.wait_done(post, timeout=300)
    assert (job(slurm, pre)["JobState"], job(slurm, post)["JobState"]) == ("COMPLETED", "COMPLETED")
    assert json.loads((outputs / "posttrain" / "summary.json").read_text())["steps"] == 2
    assert "4 route runs finished" in "".join(text(p) for p in (root / "logs" / "slurm").glob("*-collect-*.log"))
    done = {p.name for p in (root / DONE_DIR).iterdir()}
    assert done == {ids[0], ids[1], f"{ids[2]}_0", f"{ids[2]}_1", pre, post}
    logs = {re.sub(r"^drivekit-[0-9a-f]{8}-", "", p.name) for p in (root / "logs" / "slurm").iterdir()}
    assert {f"collect-{ids[0]}.log", f"buckets-{ids[1]}.log", f"cache-{ids[2]}_0.log", f"cache-{ids[2]}_1.log",
            f"pretrain-{ids[3]}.log", f"pretrain-{pre}.log", f"posttrain-{post}.log"} <= logs

    last = pipeline(slurm, routes, root, outputs, fixed, held)
    assert last.returncode == 0, last.stderr
    assert printed(last.stdout) == {s: (j, "done") for s, j in zip(jobs, [*ids[:3], pre, post], strict=True)}
    assert "nothing submitted" in last.stderr


def test_a_finished_job_the_scheduler_forgot_counts_as_done_by_its_done_files(slurm, tmp_path, monkeypatch):
    """Without accounting, slurmctld forgets an ended job after MinJobAge: the files its tasks leave decide."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    options = PipelineOptions(routes=tmp_path, root=tmp_path, outputs=tmp_path)
    (tmp_path / DONE_DIR).mkdir(parents=True)
    forgotten = {"job_id": "999999", "array": True, "tasks": 2}
    scheduler = Scheduler()
    assert scheduler.scontrol_states("999999") == {} and not scheduler.accounting
    assert status_of(scheduler, options, forgotten) == "failed: 2 UNKNOWN"
    (tmp_path / DONE_DIR / "999999_0").touch()
    assert status_of(scheduler, options, forgotten) == "failed: 1 COMPLETED, 1 UNKNOWN"
    (tmp_path / DONE_DIR / "999999_1").touch()
    assert status_of(scheduler, options, forgotten) == "done"


def test_with_accounting_a_job_is_looked_up_in_sacct(slurm_accounting, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm_accounting.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", slurm_accounting.env["PATH"])
    array = slurm_accounting.sbatch("--array=0-1", "--mem=100M", f"--output={tmp_path}/%A_%a.log", "--wrap", "true")
    slurm_accounting.wait_done(array)
    scheduler = Scheduler()
    assert scheduler.accounting
    states = wait_until(lambda: scheduler.sacct_states(array) if len(scheduler.sacct_states(array)) == 2 else None,
                        60, f"sacct to know array {array}")
    assert states == {"0": "COMPLETED", "1": "COMPLETED"}


def test_the_sbatch_command_lines_of_the_chain_match_the_golden_file_recording_sbatch_stand_in(slurm, routes, tmp_path):
    """A recording stand-in for sbatch (first on PATH) writes each command line and answers a job id; the rest
    (squeue, sinfo) is the real cluster. Paths are replaced by names: ROOT, ROUTES, OUTPUTS, REPO."""
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    record = tmp_path / "sbatch.jsonl"
    fake.write_text(f"#!{PYTHON}\nimport json, sys\n"
                    f"with open({str(record)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
                    f"print(100 + sum(1 for _ in open({str(record)!r})))\n")
    fake.chmod(0o755)
    root, outputs = tmp_path / "root", tmp_path / "outputs"
    env = {**slurm.env, "PATH": f"{fake.parent}:{slurm.env['PATH']}"}
    proc = run_tool(BIN / "pipeline", routes, "--root", root, "--slurm", "--partition", slurm.partition,
                    "--account", "drivekit", "--gpus", "4", "--outputs", outputs, "--shards", "16",
                    "--sbatch-args=--qos=normal", "--collect-args=--throttle 90 --time 01:00:00",
                    "--pretrain-args=max_steps=20000 model=full", "--cache-sbatch=--time=02:00:00",
                    "--train-sbatch=--mem=200G", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[:2] for line in proc.stdout.splitlines()] == [
        ["collect", "101"], ["buckets", "102"], ["cache", "103"], ["pretrain", "104"], ["posttrain", "105"]]
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    names = ((str(root), "ROOT"), (str(routes), "ROUTES"), (str(outputs), "OUTPUTS"), (str(REPO), "REPO"))
    for path, name in names:
        lines = [[a.replace(path, name) for a in line] for line in lines]
    lines = [[re.sub(r"drivekit-[0-9a-f]{8}-", "drivekit-HASH-", a) for a in line] for line in lines]
    golden = GOLDEN / "pipeline-sbatch.json"
    if os.environ.get("DRIVEKIT_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(lines, indent=1) + "\n")
    assert lines == json.loads(golden.read_text())


def test_every_template_has_sorted_sbatch_lines_a_summary_and_usage():
    for script in sorted(TEMPLATES.glob("*.sbatch")):
        lines = script.read_text().splitlines()
        sbatch_lines = [line for line in lines if line.startswith("#SBATCH")]
        assert lines[0] == "#!/usr/bin/env bash" and lines[1].startswith("# Summary: "), script
        assert lines[3].startswith("# Usage: sbatch "), script
        assert sbatch_lines and sbatch_lines == sorted(sbatch_lines), script
        assert "--open-mode=append" in " ".join(sbatch_lines), script


@pytest.mark.parametrize("case", ["no sbatch", "unknown partition", "read-only root", "a key the pipeline sets"])
def test_pipeline_bad_input_is_one_line_exit_2_and_nothing_is_submitted(slurm, collected_root, routes, tmp_path,
                                                                        case):
    root = copy_root(collected_root, tmp_path / "root")
    env = dict(slurm.env)
    args = [BIN / "pipeline", routes, "--root", root, "--slurm", "--outputs", tmp_path / "outputs"]
    if case == "no sbatch":
        env["PATH"] = path_without_slurm(tmp_path / "path")
    elif case == "unknown partition":
        args += ["--partition", "nosuch"]
    elif case == "a key the pipeline sets":
        args += ["--pretrain-args=max_steps=10 logdir=/elsewhere"]
    else:
        from conftest import read_only

        args = read_only(root, *args)
    queued, before = queue(slurm), tree(root)
    proc = run_tool(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeline: "), proc.stderr
    expected = {"no sbatch": "sbatch not found", "unknown partition": "--partition nosuch: no such partition",
                "read-only root": "not writable", "a key the pipeline sets": "logdir=/elsewhere is set by the pipeline"}
    assert expected[case] in lines[0]
    assert proc.stdout == "" and tree(root) == before and queue(slurm) == queued
    assert not (tmp_path / "outputs").exists()


def test_pipeline_without_slurm_runs_the_stages_here_and_stops_at_the_first_that_fails(collected_root, routes,
                                                                                      tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    proc = run_bin("pipeline", routes, "--root", root, "--outputs", tmp_path / "outputs",
                   "--collect-args=--vehicles 10", "--buckets-args=--holdout nosuch:rule")
    assert proc.returncode == 1, proc.stderr
    assert "== collect: " in proc.stderr and "== buckets: " in proc.stderr and "== cache" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("pipeline: buckets failed (exit 2)")
    assert not (root / "cache").exists() and not (tmp_path / "outputs").exists()


def test_pipeline_help_and_wrong_usage():
    proc = run_bin("pipeline", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: bin/pipeline ROUTES_DIR --root ROOT [--slurm]")
    proc = run_bin("pipeline")
    assert proc.returncode == 2 and proc.stderr.startswith("Usage: bin/pipeline ")
    flags = run_bin("pipeline", "--help-flags")
    assert flags.returncode == 0 and "--pretrain-args" in (flags.stdout + flags.stderr).replace("_", "-")
