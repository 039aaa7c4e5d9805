"""The leaderboard 2.0 towns in the embedded world: a short route with a scenario is generated and driven on each of
Town12, Town13 and Town15 (the towns whose route planning crashed and whose rasters ran the machine out of memory),
recording frames, in a child process whose peak memory is measured. The run must reach a driving outcome (never a
crash), its scenario must start, and the process must stay under the route-run memory bound (3 GB).

How well the expert drives there (its finish rate) is a figure of benchmarks/bench_towns.py, not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import PYTHON, REPO, run_tool, tool_env

from tools.dataset import results
from tools.dataset.layout import Layout

#: The peak resident memory a route run may reach on any town (issue 22).
PEAK_BOUND_MB = 3 * 1024


@pytest.mark.parametrize("town", ["Town12", "Town13", "Town15"])
def test_a_short_route_with_a_scenario_drives_to_an_outcome_under_3_gb(town, carla_towns, tmp_path):
    routes = tmp_path / "routes"
    gen = run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", carla_towns / f"{town}.xodr", "--count", "1",
                   "--min-length", "150", "--max-length", "250", "--scenarios", "Accident", "--out", routes)
    assert gen.returncode == 0, gen.stderr
    (route,) = sorted((routes / "Accident").glob("*.xml"))
    root = tmp_path / "root"
    # The town of the cache folder (its derived files: SUMO network, lane graph, scenes), not the copy in routes/.
    with open(tmp_path / "run.log", "wb") as log:
        proc = subprocess.Popen([PYTHON, "-m", "tools.collect", "run", "--route", str(route), "--root", str(root),
                                 "--towns", str(carla_towns)], cwd=REPO, env=tool_env(), stdout=log,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    text = (tmp_path / "run.log").read_text(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-3000:]
    peak_mb = usage.ru_maxrss / 1024
    assert peak_mb < PEAK_BOUND_MB, f"{town}: a route run peaked at {peak_mb:.0f} MB"
    layout = Layout(root)
    (key,) = list(layout.iter_runs())
    record = json.loads(layout.result_path(key).read_text())["_checkpoint"]["records"][0]
    assert record["status"] in results.DRIVING_STATUSES, record
    assert record["status"] != results.FAILED_SIMULATION
    assert record["meta"]["route_length"] > 100.0
    scenarios = record["meta"]["scenarios"]
    assert any(state in ("running", "done") for state in scenarios.values()), scenarios
    assert len(layout.frame_paths(key)) > 20
    print(f"{town}: {record['status']}, {peak_mb:.0f} MB peak", file=sys.stderr)
