"""One run spec from plan to child (tools/collect/base/spec.py): the route as planned is the route driven, and the world
is picked in one place (tools/collect/runner/world.py)."""

from __future__ import annotations

import inspect
import json
import re

import numpy as np
import pytest
from conftest import PYTHON, REPO, file_bytes, run_tool

from tools.collect.base import config
from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import find_route_files
from tools.collect.base.spec import RunSpec, derive_seed
from tools.collect.runner.jobs import plan, write_specs
from tools.collect.runner.world import WORLDS, world_for
from tools.core.errors import ToolError
from tools.dataset.layout import Layout


def test_a_planned_spec_reads_back_as_the_route_as_planned(short_routes, tmp_path):
    layout = Layout(tmp_path / "root")
    settings = CollectSettings(vehicles=7, seed=3)
    jobs = plan(find_route_files(short_routes), None, 2)
    write_specs(layout, jobs, settings)
    for job in jobs:
        spec = RunSpec.read(layout.run_spec(job.key))
        assert spec.key == job.key and spec.route_file == job.route_file and spec.repetition == job.repetition
        assert spec.route.waypoints.dtype == np.float64
        assert np.array_equal(spec.route.waypoints, job.route.waypoints)  # every bit: JSON floats round-trip
        assert spec.route.scenarios == job.route.scenarios and spec.route.weathers == job.route.weathers
        assert spec.settings == settings and spec.town_file == job.towns / f"{job.route.town}.xodr"
        assert spec.seed == derive_seed(job.route_file.stem, job.route.id, job.repetition, settings.seed)
        assert RunSpec.from_dict(spec.to_dict()).to_dict() == spec.to_dict()


def test_a_run_from_its_spec_records_the_same_frames_as_the_run_alone(short_routes, tmp_path):
    route = sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]
    alone = tmp_path / "alone"
    run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route, "--root", alone, "--vehicles", "5", check=True)
    planned = Layout(tmp_path / "planned")
    (job,) = [j for j in plan([route], None, 1)]
    write_specs(planned, [job], CollectSettings(vehicles=5))
    run_tool(PYTHON, "-m", "tools.collect", "run", "--spec", planned.run_spec(job.key), check=True)
    ours, theirs = file_bytes(alone / "data"), file_bytes(planned.root / "data")
    assert ours.keys() == theirs.keys() and len(ours) > 10
    for name in ours:  # the same frames, byte for byte; run.json but for its process, heartbeat.json but for its time
        if name.endswith("heartbeat.json"):
            continue
        if name.endswith("run.json"):
            a, b = ({k: v for k, v in json.loads(d[name]).items() if k not in ("pid", "started")}
                    for d in (ours, theirs))
            assert a == b
            continue
        assert ours[name] == theirs[name], name


@pytest.mark.parametrize("extra", [["--route", "x.xml"], ["--vehicles", "3"], ["--route-id", "7"]])
def test_run_refuses_a_spec_with_a_route_or_settings_of_its_own(tmp_path, extra):
    proc = run_tool(PYTHON, "-m", "tools.collect", "run", "--spec", tmp_path / "run-spec.json", *extra)
    assert proc.returncode != 0 and "--spec and" in proc.stderr and "give one" in proc.stderr


def test_a_missing_spec_is_one_line_naming_it(tmp_path):
    proc = run_tool(PYTHON, "-m", "tools.collect", "run", "--spec", tmp_path / "run-spec.json")
    assert proc.returncode != 0 and f"--spec {tmp_path / 'run-spec.json'}: no such file" in proc.stderr


def test_the_registry_is_the_one_list_of_worlds(tmp_path, short_routes):
    """Every world by its name in the registry; CollectSettings itself knows no world, and an unknown --world is
    refused by the registry before a root is made."""
    assert all(world_for(name).name == name for name in WORLDS)
    assert not hasattr(config, "WORLDS") and "carla" not in inspect.getsource(config.CollectSettings.__post_init__)
    proc = run_tool(PYTHON, "-m", "tools.collect", "collect", short_routes, "--root", tmp_path / "root", "--world=moon")
    assert proc.returncode != 0 and "--world='moon': no such world (worlds: sim, carla)" in proc.stderr
    assert not (tmp_path / "root").exists()


def test_an_unknown_world_is_refused_naming_the_worlds():
    with pytest.raises(ToolError, match="--world='moon'.*sim, carla"):
        world_for("moon")
    assert set(WORLDS) == {"sim", "carla"} and world_for("sim").forks_from_town and world_for("carla").gpus_per_task


def test_only_the_world_registry_names_a_world_in_the_runner():
    named = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "tools/collect/runner").glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"""["'](carla|sim)["']""", line)]
    assert named and all(n.startswith("tools/collect/runner/world.py:") for n in named), named
