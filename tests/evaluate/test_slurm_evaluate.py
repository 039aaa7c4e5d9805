"""Closed-loop evaluation on a real SLURM cluster (tests/slurm_cluster.py): bin/evaluate --slurm goes through
collection's waves and monitor, and scores what a local evaluation of the same routes scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import BIN, run_tool

from tools.collect.runner.waves import load_waves
from tools.dataset.layout import Layout

pytestmark = pytest.mark.slurm


def scores(root: Path) -> tuple[dict, list]:
    result = json.loads(Layout(root).evaluation_result.read_text())["_checkpoint"]
    return result["global_record"]["scores_mean"], sorted(
        (r["route_id"], r["status"], r["scores"]["score_composed"], r["meta"]["duration_game"])
        for r in result["records"])


def test_the_expert_evaluated_on_slurm_scores_as_it_does_locally(slurm, collected_root, tmp_path):
    routes = collected_root.parent / "routes"
    on_slurm = run_tool(BIN / "evaluate", "--agent", "expert", routes, "--root", tmp_path / "slurm", "--slurm",
                        "--poll", "1", "--vehicles", "10", env=slurm.env, timeout=500)
    assert on_slurm.returncode == 0, on_slurm.stderr
    assert [a["job_id"] for w in load_waves(Layout(tmp_path / "slurm")) for a in w.arrays]  # it went through sbatch
    local = run_tool(BIN / "evaluate", "--agent", "expert", routes, "--root", tmp_path / "local", "--workers", "2",
                     "--vehicles", "10", timeout=500)
    assert local.returncode == 0, local.stderr
    assert scores(tmp_path / "slurm") == scores(tmp_path / "local")
    assert len(scores(tmp_path / "slurm")[1]) == 4
