"""The one reader of SLURM's answers about jobs (tools.core.slurm: state_rows, scontrol_jobs, array_tasks), as
the collection's monitor (tools.collect.runner.slurm.Scheduler) and the pipeline (tools.pipeline.chain.Scheduler)
use it, on answers written as sacct, squeue and scontrol write them. No cluster: the answers are canned (the real
cluster's are in test_slurm_collect.py and test_slurm_train_cache.py)."""

from __future__ import annotations

import subprocess

from tools.collect.runner import slurm as runner_slurm
from tools.core.slurm import array_tasks, scontrol_jobs, state_rows
from tools.pipeline import chain

SACCT = ("12_3|COMPLETED\n12_[4-6%2]|PENDING\n12_7|CANCELLED by 0\n12|RUNNING\n13_1|\n 14_2 | FAILED \n"
         "12_[8,10-11]|PENDING\n")
SQUEUE = "12_3|RUNNING\n16_[0-3]|PENDING\n16_4|RUNNING\n"
SCONTROL = ("JobId=20 ArrayJobId=12 ArrayTaskId=3 JobState=RUNNING Reason=None Comment=a=b\n"
            "JobId=21 ArrayJobId=12 ArrayTaskId=4-9%2 JobState=PENDING Reason=DependencyNeverSatisfied\n"
            "JobId=30 JobName=x JobState=COMPLETED Reason=None\n")


def canned(cls, accounting: bool):
    """`cls` answering every query from the texts above, nothing run."""

    class Canned(cls):
        def query(self, *args, benign=()):
            out = {"sacct": SACCT, "squeue": SQUEUE, "scontrol": SCONTROL}[args[0]]
            return subprocess.CompletedProcess(args, 0, out, "")

    scheduler = Canned()
    scheduler._accounting = accounting
    return scheduler


def test_an_array_task_list_is_read_as_slurm_writes_it_throttle_and_brackets_aside():
    assert array_tasks("0-3%2") == [0, 1, 2, 3]
    assert array_tasks("[1,3-5]") == [1, 3, 4, 5]
    assert array_tasks("7") == [7]
    assert array_tasks("") == [] and array_tasks("3.batch") == []


def test_state_rows_split_jobs_tasks_and_the_first_word_of_the_state():
    rows = list(state_rows(SACCT))
    assert rows[:4] == [("12", [3], "COMPLETED"), ("12", [4, 5, 6], "PENDING"), ("12", [7], "CANCELLED"),
                        ("12", None, "RUNNING")]
    assert rows[4] == ("13", [1], "") and rows[5] == ("14", [2], "FAILED")


def test_scontrol_jobs_are_the_key_value_words_of_each_line():
    jobs = list(scontrol_jobs(SCONTROL))
    assert jobs[0]["ArrayTaskId"] == "3" and jobs[0]["Comment"] == "a=b"
    assert jobs[2] == {"JobId": "30", "JobName": "x", "JobState": "COMPLETED", "Reason": "None"}


def test_the_monitor_reads_array_tasks_from_sacct_else_squeue_and_scontrol():
    with_sacct = canned(runner_slurm.Scheduler, True).task_states(["12"], True)
    assert with_sacct[("12", 3)] == "COMPLETED" and with_sacct[("12", 7)] == "CANCELLED"
    assert with_sacct[("13", 1)] == "UNKNOWN"  # a state sacct left empty
    assert [with_sacct[("12", t)] for t in (4, 5, 6, 8, 10, 11)] == ["PENDING"] * 6
    assert ("16", 0) not in with_sacct  # sacct knew of array 12: squeue not asked
    without = canned(runner_slurm.Scheduler, False).task_states(["12", "16"], False)
    assert without == {("12", 3): "RUNNING", ("16", 0): "PENDING", ("16", 1): "PENDING", ("16", 2): "PENDING",
                       ("16", 3): "PENDING", ("16", 4): "RUNNING"}  # scontrol's pending range is not a task id


def test_the_pipeline_reads_a_jobs_tasks_from_scontrol_and_sacct_a_failed_dependency_as_never():
    scheduler = canned(chain.Scheduler, True)
    assert scheduler.scontrol_states("12") == {"3": "RUNNING", **{str(t): chain.NEVER for t in range(4, 10)}}
    assert scheduler.scontrol_states("30") == {"": "COMPLETED"}
    assert scheduler.sacct_states("12") == {"3": "COMPLETED", "4": "PENDING", "5": "PENDING", "6": "PENDING",
                                            "7": "CANCELLED", "": "RUNNING", "8": "PENDING", "10": "PENDING",
                                            "11": "PENDING"}
    assert scheduler.sacct_states("13") == {}  # no state: left out
    assert canned(chain.Scheduler, False).sacct_states("12") == {}
