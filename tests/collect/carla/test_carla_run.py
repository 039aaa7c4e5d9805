"""`--world=carla`: one route run driven by the CARLA leaderboard evaluator against a CARLA server we start
(tools/collect/carla/run.py). No CARLA server and no leaderboard run here: the tests use a stand-in server
(tests/standin_carla_server.py, as CARLA_ROOT/CarlaUE4.sh) and a stand-in evaluator
(tests/standin_leaderboard_evaluator.py, as LEADERBOARD_ROOT/leaderboard/leaderboard_evaluator.py), so the
collector's real command lines, environment, process groups and files are what is tested; each test that uses
them says so in its name."""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import PYTHON, REPO, TESTS, run_bin, run_tool, start_tool, wait_until

from tools.collect.base.config import CollectSettings, absolute_flags
from tools.collect.base.routes import read_routes
from tools.collect.carla import run as carla_run
from tools.collect.carla.evaluator import STOPPED
from tools.collect.carla.server import Ports
from tools.collect.carla.versions import RELEASES
from tools.collect.runner.attempt import derive_seed
from tools.collect.runner.world import world_for
from tools.core import atomic
from tools.core.errors import ToolError
from tools.dataset import attempts, claims, results
from tools.dataset.layout import Layout, RunKey

GOLDEN = TESTS / "golden"


def route_file(short_routes: Path) -> Path:
    return sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]


@pytest.fixture
def carla_env(tmp_path) -> dict[str, str]:
    """A CARLA_ROOT whose CarlaUE4.sh execs the stand-in server, a LEADERBOARD_ROOT whose evaluator is the stand-in
    evaluator, beside the stand-ins of the leaderboard's modules, and a SCENARIO_RUNNER_ROOT with the stand-ins of
    srunner's; the server has the short routes' town; a crash grace of 1 s."""
    carla_root = tmp_path / "carla"
    (carla_root / "PythonAPI" / "carla" / "agents").mkdir(parents=True)
    (carla_root / "PythonAPI" / "carla" / "agents" / "__init__.py").write_text("")
    script = carla_root / "CarlaUE4.sh"
    script.write_text(f'#!/bin/sh\nexec "{PYTHON}" "{TESTS / "standin_carla_server.py"}" "$@"\n')
    script.chmod(0o755)
    standins, no_cache = TESTS / "standin_leaderboard", shutil.ignore_patterns("__pycache__")
    leaderboard = tmp_path / "leaderboard"
    shutil.copytree(standins / "leaderboard", leaderboard / "leaderboard", ignore=no_cache)
    shutil.copy(TESTS / "standin_leaderboard_evaluator.py", leaderboard / "leaderboard" / "leaderboard_evaluator.py")
    runner = tmp_path / "scenario_runner"
    shutil.copytree(standins / "srunner", runner / "srunner", ignore=no_cache)
    return {"CARLA_ROOT": str(carla_root), "LEADERBOARD_ROOT": str(leaderboard), "SCENARIO_RUNNER_ROOT": str(runner),
            "STANDIN_MAPS": "/Game/Carla/Maps/Town01,/Game/Carla/Maps/town", "STANDIN_CHILD": "1",
            "STANDIN_PID_FILE": str(tmp_path / "server.pids"), "STANDIN_EVALUATOR_PIDS": str(tmp_path / "eval.pids"),
            carla_run.CRASH_GRACE_ENV: "1"}


def run(route: Path, root: Path, env: dict[str, str], *extra: str):
    return run_tool(PYTHON, "-m", "tools.collect", "run", "--route", str(route), "--root", str(root),
                    "--world=carla", *extra, env=env, timeout=60)


def pids(path: str) -> list[int]:
    return [int(p) for p in Path(path).read_text().split()] if Path(path).exists() else []


def all_gone(numbers: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(atomic.process_alive(p) for p in numbers):
            return True
        time.sleep(0.05)
    return False


def the_run(root: Path) -> tuple[Layout, RunKey]:
    layout = Layout(root)
    (key,) = list(layout.iter_runs())
    return layout, key


# ----------------------------------------------------------------------------- one route run


def test_finished_run_publishes_the_evaluators_result_unchanged_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    route = route_file(short_routes)
    proc = run(route, tmp_path / "root", carla_env)
    assert proc.returncode == 0, proc.stderr
    layout, key = the_run(tmp_path / "root")
    checkpoint = layout.evaluator_checkpoint(key, 1)
    assert checkpoint.parent == layout.log_dir(key)  # the evaluator never writes into ROOT/results
    assert layout.result_path(key).read_bytes() == checkpoint.read_bytes()
    assert results.read_status(layout.result_path(key)) == results.PERFECT
    assert results.run_state(layout, key) is results.RunState.FINISHED
    # The evaluator got the real command line: one route, one repetition, no --resume, files in the log folder.
    flags = json.loads((layout.log_dir(key) / "argv.json").read_text())["flags"]
    assert flags["routes"] == str(route.absolute()) and flags["routes_subset"] == "0" and flags["repetitions"] == 1
    assert flags["resume"] is False and flags["checkpoint"] == str(checkpoint)
    assert flags["debug_checkpoint"] == str(layout.evaluator_live(key, 1))
    config = json.loads(Path(flags["agent_config"]).read_text())
    assert config["route_id"] == "0" and config["attempt"] == 1 and config["settings"]["world"] == "carla"
    log = layout.attempt_log(key, 1).read_text()
    assert "stand-in CARLA server" in log and "stand-in leaderboard evaluator" in log and "server 0.9.16" in log
    assert all_gone(pids(carla_env["STANDIN_PID_FILE"]) + pids(carla_env["STANDIN_EVALUATOR_PIDS"]))


def test_each_repetition_seeds_scenario_runner_and_names_its_record_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    """The evaluator seeds only the Traffic Manager and names every one-repetition run rep0: our wrapper seeds
    scenario_runner's random source with the repetition's seed and numbers the record after it."""
    route = route_file(short_routes)
    seen = {}
    for repetition in (1, 2):
        proc = run(route, tmp_path / "root", carla_env, "--repetition", str(repetition))
        assert proc.returncode == 0, proc.stderr
        layout = Layout(tmp_path / "root")
        key = RunKey.for_route(route.parent.name, route.stem, "0", repetition)
        record = json.loads(layout.result_path(key).read_text())["_checkpoint"]["records"][0]
        assert record["route_id"] == f"RouteScenario_0_rep{repetition}"  # as docs/carla.md says
        noted = json.loads((layout.log_dir(key) / "argv.json").read_text())
        seed = derive_seed(route.stem, "0", repetition, 0)
        assert noted["random_seed"] == seed == noted["flags"]["traffic_manager_seed"]
        assert noted["first_draw"] == np.random.RandomState(seed).randint(2 ** 31 - 1)
        seen[repetition] = noted["first_draw"]
    assert seen[1] != seen[2]  # the repetitions' scenarios differ


@pytest.mark.parametrize("stop", [False, True])
def test_stop_on_infraction_ends_the_route_at_the_leaderboards_first_infraction_as_failed_standin_evaluator(
        tmp_path, short_routes, carla_env, stop):
    """The ego collides at tick 5 of 40. The leaderboard drives on (Completed, the collision in the record);
    with --stop-on-infraction the route ends there: Failed with the collision, retried like any failure."""
    proc = run(route_file(short_routes), tmp_path / "root", {**carla_env, "STANDIN_EVALUATOR": "infraction"},
               *(["--stop-on-infraction"] if stop else []))
    assert proc.returncode == 0, proc.stderr
    layout, key = the_run(tmp_path / "root")
    record = json.loads(layout.result_path(key).read_text())["_checkpoint"]["records"][0]
    assert len(record["infractions"]["collisions_vehicle"]) == 1 and record["num_infractions"] == 1
    log = layout.attempt_log(key, 1).read_text()
    if stop:
        assert record["status"] == results.FAILED and record["scores"]["score_route"] == 12.5  # 5 of 40 ticks
        assert results.run_state(layout, key) is results.RunState.FAILED
        assert f"{STOPPED}: collisions_vehicle: Agent collided against object" in log
    else:
        assert record["status"] == results.COMPLETED and record["scores"]["score_route"] == 100.0
        assert results.run_state(layout, key) is results.RunState.FINISHED
        assert STOPPED not in log


@pytest.mark.parametrize("mode, published", [("crash-server", False), ("crash-server-record", True)])
def test_server_killed_mid_route_is_a_simulation_crash_and_leaves_no_process_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env, mode, published):
    """crash-server: the evaluator records nothing (blocked, as in world.tick) and is ended after the grace;
    crash-server-record: it records the crash itself, and that record is published."""
    started = time.monotonic()
    proc = run(route_file(short_routes), tmp_path / "root", {**carla_env, "STANDIN_EVALUATOR": mode})
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 15
    layout, key = the_run(tmp_path / "root")
    assert results.read_status(layout.result_path(key)) == results.FAILED_SIMULATION
    assert results.run_state(layout, key) is results.RunState.FAILED  # retried by collect
    same = layout.result_path(key).read_bytes() == layout.evaluator_checkpoint(key, 1).read_bytes()
    assert same is published
    log = layout.attempt_log(key, 1).read_text()
    if not published:  # (the evaluator that records the crash may exit before the runner sees the server die)
        assert "the CARLA server died mid-route (exit status -9)" in log
        assert "the evaluator was ended after 1 s" in log and "with no finished record" in log
    assert all_gone(pids(carla_env["STANDIN_PID_FILE"]) + pids(carla_env["STANDIN_EVALUATOR_PIDS"]))


def test_evaluator_exiting_with_no_record_is_a_simulation_crash_standin_evaluator(tmp_path, short_routes, carla_env):
    proc = run(route_file(short_routes), tmp_path / "root", {**carla_env, "STANDIN_EVALUATOR": "norecord"})
    assert proc.returncode == 0, proc.stderr
    layout, key = the_run(tmp_path / "root")
    assert results.read_status(layout.result_path(key)) == results.FAILED_SIMULATION
    assert json.loads(layout.evaluator_checkpoint(key, 1).read_text())["_checkpoint"]["records"] == []
    assert re.search(r"the leaderboard evaluator exited with status 1 with no finished record in .*leaderboard-01",
                     layout.attempt_log(key, 1).read_text())
    assert all_gone(pids(carla_env["STANDIN_PID_FILE"]))


def test_sigterm_ends_the_standin_server_and_evaluator_groups_and_writes_no_result(tmp_path, short_routes,
                                                                                     carla_env):
    proc = start_tool(PYTHON, "-m", "tools.collect", "run", "--route", str(route_file(short_routes)), "--root",
                      str(tmp_path / "root"), "--world=carla", env={**carla_env, "STANDIN_EVALUATOR": "hang"})
    try:
        wait_until(lambda: pids(carla_env["STANDIN_EVALUATOR_PIDS"]), 20, "the stand-in evaluator to start")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    layout, key = the_run(tmp_path / "root")
    assert not layout.result_path(key).exists()  # left unfinished: crashed, retried
    assert "ended by a signal" in layout.attempt_log(key, 1).read_text()
    assert all_gone(pids(carla_env["STANDIN_PID_FILE"]) + pids(carla_env["STANDIN_EVALUATOR_PIDS"]))


def test_town_missing_on_the_standin_server_is_one_line_naming_route_town_and_the_servers_towns(
        tmp_path, short_routes, carla_env):
    """Found only once the server answers, so after the claim: the attempt counts and ends as the leaderboard
    itself ends a route whose map does not load (Failed - Simulation crashed); no server is left."""
    route = route_file(short_routes)
    proc = run(route, tmp_path / "root", {**carla_env, "STANDIN_MAPS": "/Game/Carla/Maps/Town01,"
                                                                         "/Game/Carla/Maps/Town12/Town12"})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if "does not have" in line]
    assert lines == [f"collect: {route}: route 0 drives in town, which the CARLA server does not have (its towns: "
                     "Town01, Town12); install the CARLA package holding town (CARLA's additional maps) or drop "
                     "the route"], proc.stderr
    assert "Traceback" not in proc.stderr
    layout, key = the_run(tmp_path / "root")
    assert claims.attempts(layout, key) == 1
    assert results.read_status(layout.result_path(key)) == results.FAILED_SIMULATION
    assert not pids(carla_env["STANDIN_EVALUATOR_PIDS"])  # never started
    assert all_gone(pids(carla_env["STANDIN_PID_FILE"]))


def test_routes_without_towns_take_the_carla_installs_and_a_town_it_lacks_is_one_line_before_anything_starts(
        tmp_path, short_routes, carla_env):
    """A release keeps its towns' OpenDRIVE in Maps/OpenDrive/ and, for the large maps, Maps/<town>/OpenDrive/."""
    route = route_file(short_routes)
    alone = tmp_path / "routes" / route.name
    alone.parent.mkdir()
    shutil.copy(route, alone)
    maps = Path(carla_env["CARLA_ROOT"]) / "CarlaUE4" / "Content" / "Carla" / "Maps"
    (maps / "OpenDrive").mkdir(parents=True)
    shutil.copy(short_routes / "towns" / "town.xodr", maps / "OpenDrive" / "Town01.xodr")
    env = {**carla_env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = run(alone, tmp_path / "root", env)
    assert proc.returncode == 2
    assert re.fullmatch(rf"collect: {alone}: route 0 names town 'town', but \S+/town\.xodr does not exist "
                        r"\(towns there: Town01\)", proc.stderr.strip()), proc.stderr
    assert not (tmp_path / "root").exists() and not pids(carla_env["STANDIN_PID_FILE"])
    (maps / "town" / "OpenDrive").mkdir(parents=True)
    shutil.copy(short_routes / "towns" / "town.xodr", maps / "town" / "OpenDrive" / "town.xodr")
    proc = run(alone, tmp_path / "root", env)
    assert proc.returncode == 0, proc.stderr
    layout, key = the_run(tmp_path / "root")
    assert results.run_state(layout, key) is results.RunState.FINISHED


@pytest.mark.parametrize("cameras, message", [
    ([{"name": "rear", "x": -2.0, "z": 2.3, "yaw": 180.0}],
     "camera 'rear' at x -2, y 0, z 2.3 is 3.05 m from the ego's origin; the leaderboard refuses sensors beyond 3 m"),
    ([{"name": f"c{i}"} for i in range(9)], "9 cameras, but the leaderboard allows at most 8 RGB cameras"),
])
def test_a_rig_the_leaderboard_refuses_is_one_line_before_anything_starts_standin_server(
        tmp_path, short_routes, carla_env, cameras, message):
    """The leaderboard refuses sensors beyond 3 m of the hero's origin and more than 8 RGB cameras: every attempt
    would end as "Agent's sensors were invalid". Refused before a server starts or the run is claimed."""
    rig = tmp_path / "rig.json"
    rig.write_text(json.dumps({"cameras": cameras}))
    proc = run(route_file(short_routes), tmp_path / "root", carla_env, f"--rig={rig}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith(f"collect: --rig: {message}") and "\n" not in proc.stderr.strip(), \
        proc.stderr
    assert not (tmp_path / "root").exists() and not pids(carla_env["STANDIN_PID_FILE"])


def test_standin_server_of_another_version_is_one_line(tmp_path, short_routes, carla_env):
    proc = run(route_file(short_routes), tmp_path / "root", {**carla_env, "STANDIN_MODE": "version"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("collect: CARLA server 0.9.15 but client 0.9.16: install the "
                                                   "carla==0.9.15 client"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_bin_collect_drives_a_carla_route_through_its_worker_with_relative_paths_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    """Relative routes, root and --rig: the agent reads --rig inside the evaluator, whose working folder is the
    run's log folder, so every path a setting holds is absolute before any child starts (the worker's command
    line, the agent's config)."""
    from tools.dataset.rig import RigConfig

    route = route_file(short_routes)
    (tmp_path / "routes" / route.parent.name).mkdir(parents=True)
    shutil.copy(route, tmp_path / "routes" / route.parent.name / route.name)
    shutil.copytree(short_routes / "towns", tmp_path / "routes" / "towns")
    (tmp_path / "rigs").mkdir()
    (tmp_path / "rigs" / "rig.json").write_text(json.dumps(RigConfig().to_dict()))
    proc = run_bin("collect", "routes", "--root", "root", "--world=carla", "--rig=rigs/rig.json", cwd=tmp_path,
                   env={**carla_env, "DRIVEKIT_IMAGES": str(tmp_path / "no-images")}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "collect: 1 route runs finished and 0 failed" in proc.stderr
    layout, key = the_run(tmp_path / "root")
    assert results.run_state(layout, key) is results.RunState.FINISHED
    worker = next(line for line in layout.attempt_log(key, 1).read_text().splitlines() if line.startswith("$ "))
    assert f"--spec {layout.run_spec(key)}" in worker and f"--root {tmp_path}/root" in worker
    assert json.loads(layout.run_spec(key).read_text())["settings"]["rig"] == f"{tmp_path}/rigs/rig.json"
    flags = json.loads((layout.log_dir(key) / "argv.json").read_text())["flags"]
    config = json.loads(Path(flags["agent_config"]).read_text())
    assert config["settings"]["rig"] == str(tmp_path / "rigs" / "rig.json")
    assert Path(config["route_file"]).is_absolute() and Path(config["root"]).is_absolute()


def servers(layout: Layout) -> dict[RunKey, tuple[str, set[str]]]:
    """Each run's server, from its attempt log: its -graphicsadapter and the ports it was given."""
    found = {}
    for key in layout.iter_runs():
        line = next(x for x in layout.attempt_log(key, 1).read_text().splitlines() if x.startswith("carla server: "))
        flags = dict(a.lstrip("-").split("=", 1) for a in line.split()[3:] if "=" in a)
        found[key] = flags.pop("graphicsadapter"), set(flags.values())
    return found


def copy_routes(short_routes: Path, to: Path) -> Path:
    for route in sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts):
        (to / route.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(route, to / route.parent.name / route.name)
    shutil.copytree(short_routes / "towns", to / "towns")
    return to


def test_servers_per_gpu_runs_a_worker_per_gpu_slot_each_server_on_its_gpu_and_ports_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    """A workstation's GPUs (here those CUDA_VISIBLE_DEVICES names: physical indices, which Vulkan numbers too):
    --servers-per-gpu 1 on GPUs 1 and 3 is two workers, one server on each GPU, each on its own ports."""
    routes = copy_routes(short_routes, tmp_path / "routes")
    proc = run_bin("collect", routes, "--root", tmp_path / "root", "--world=carla", "--servers-per-gpu", "1",
                   env={**carla_env, "CUDA_VISIBLE_DEVICES": "1,3", "DRIVEKIT_IMAGES": str(tmp_path / "no-images")},
                   timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "2 workers on GPUs 1, 3 (1 per GPU)" in proc.stderr and "2 route runs finished and 0 failed" in proc.stderr
    (a_gpu, a_ports), (b_gpu, b_ports) = servers(Layout(tmp_path / "root")).values()
    assert {a_gpu, b_gpu} == {"1", "3"} and len(a_ports) == len(b_ports) == 3 and not a_ports & b_ports


def test_a_slurm_task_runs_gpus_times_k_servers_at_once_on_the_gpus_slurm_gave_it_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    """An array task given GPUs 4 and 5 (SLURM_JOB_GPUS; SLURM renumbers CUDA_VISIBLE_DEVICES from 0, which Vulkan
    ignores): with --servers-per-gpu 1 its two runs drive at once, one server on each GPU. Run by hand as
    bin/collect-task (no cluster needed; the SLURM tests cover submission)."""
    from tools.collect.base.routes import find_route_files
    from tools.collect.runner.jobs import plan
    from tools.collect.runner.waves import WAVE_NAME, Wave, waves_dir

    routes = copy_routes(short_routes, tmp_path / "routes")
    layout = Layout(tmp_path / "root")
    runs = [{"key": str(j.key), "route": str(j.route_file), "route_id": j.route.id, "repetition": j.repetition,
             "towns": str(j.towns)} for j in plan(find_route_files(routes), None, 1)]
    wave = Wave(waves_dir(layout) / WAVE_NAME.format(wave=1), 1, runs, runs_per_task=2, max_attempts=1,
                settings={"world": "carla"}, throttle=1, servers_per_gpu=1)
    wave.path.parent.mkdir(parents=True)
    wave.save()
    proc = run_bin("collect-task", wave.path, "0", env={**carla_env, "SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES":
                                                        "0,1", "DRIVEKIT_IMAGES": str(tmp_path / "no-images")},
                   timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "2 route runs, 2 at once on GPUs 4, 5" in proc.stderr and "task 0: 2 finished" in proc.stderr
    (a_gpu, a_ports), (b_gpu, b_ports) = servers(layout).values()
    assert {a_gpu, b_gpu} == {"4", "5"} and not a_ports & b_ports


def test_path_settings_are_absolute_as_read_and_as_passed_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert CollectSettings(rig="rig.json").rig == str(tmp_path / "rig.json")
    assert CollectSettings(rig="~/rig.json").rig == str(Path.home() / "rig.json")
    assert CollectSettings().rig == ""  # the default rig stays the default
    assert absolute_flags({"rig": "a/rig.json", "checkpoint": "run", "vehicles": 3, "world": "carla"}) == {
        "rig": str(tmp_path / "a" / "rig.json"), "checkpoint": str(tmp_path / "run"), "vehicles": 3, "world": "carla"}


def crash_modes(short_routes: Path) -> tuple[RunKey, RunKey, str]:
    """Two route runs: the first crashes the simulator on every attempt, the second once and then finishes
    (STANDIN_MODES of the stand-in evaluator)."""
    routes = sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts)
    always, once = (RunKey.for_route(r.parent.name, r.stem, read_routes(r)[0].id, 0) for r in routes)
    return always, once, json.dumps({always.name: ["crash-server-record"], once.name: ["crash-server-record", "ok"]})


CRASH = "Failed - Simulation crashed: RuntimeError: time-out of 10000ms while waiting for the simulator"


def test_a_route_crashing_on_every_attempt_is_named_apart_from_one_that_crashed_once_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    always, once, modes = crash_modes(short_routes)
    proc = run_bin("collect", short_routes, "--root", tmp_path / "root", "--world=carla", "--workers", "2",
                   "--max-attempts", "2", env={**carla_env, "STANDIN_MODES": modes,
                                               "DRIVEKIT_IMAGES": str(tmp_path / "no-images")}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    layout = Layout(tmp_path / "root")
    assert [a["status"] for a in attempts.read_attempts(layout, always)] == [results.FAILED_SIMULATION] * 2
    assert [a["status"] for a in attempts.read_attempts(layout, once)] == [results.FAILED_SIMULATION,
                                                                         results.PERFECT]
    # The ports in the messages differ from attempt to attempt: the same crash all the same.
    named = re.compile(rf"^  {re.escape(str(always))}: {re.escape(CRASH)}.* \(2 attempts; logs in ", re.M)
    progress = run_bin("progress", tmp_path / "root")
    for out in (proc.stderr, progress.stdout):
        assert "1 route runs crash the same way on every attempt" in out and named.search(out), out
        assert "1 route runs crashed, then finished on a later attempt" in out
        assert f"\n  {once}:" not in out  # not named with the routes that always crash


@pytest.mark.slurm
def test_slurm_array_tasks_drive_carla_routes_standin_server_and_evaluator(slurm, tmp_path, short_routes, carla_env):
    """bin/collect --slurm --world=carla on the real one-node cluster: each array task starts its stand-in server
    and evaluator (no GPU on the test cluster: --gpus 0; a CARLA collection asks for 1 by default). One route
    crashes the simulator on every attempt, the other once: the monitor's second wave retries both, and its
    summary names the first, with its crash and attempts, apart from the second."""
    one = tmp_path / "routes"
    for route in sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name):
        (one / route.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(route, one / route.parent.name / route.name)
    shutil.copytree(short_routes / "towns", one / "towns")
    always, once, modes = crash_modes(short_routes)
    proc = run_tool(REPO / "bin" / "collect", one, "--root", tmp_path / "root", "--world=carla", "--slurm",
                    "--gpus", "0", "--poll", "1", "--max-attempts", "2",
                    env={**slurm.env, **carla_env, "STANDIN_MODES": modes,
                         "DRIVEKIT_IMAGES": str(tmp_path / "no-images")}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    layout = Layout(tmp_path / "root")
    assert sorted(layout.iter_runs()) == sorted([always, once])
    assert results.run_state(layout, once) is results.RunState.FINISHED
    assert results.run_state(layout, always) is results.RunState.FAILED
    assert json.loads(layout.result_path(once).read_text())["_checkpoint"]["records"][0]["route_id"] \
        .startswith("RouteScenario_")  # the evaluator's own result
    summary = proc.stderr[proc.stderr.rindex("collect: 1 route runs finished, 1 failed"):]
    assert f"\n  {always}: {CRASH}" in summary and "(2 attempts; logs in " in summary, summary
    assert "1 route runs crashed, then finished on a later attempt" in summary


# ----------------------------------------------------------------------------- a researcher's agent file


AGENT = """\
\"\"\"A researcher's leaderboard 2.0 agent file (a test's): its track from its config, a module of its folder.\"\"\"
import json

import carla
from leaderboard.autoagents.autonomous_agent import AutonomousAgent, Track

import agent_helper  # beside this file: the agent's folder is importable


def get_entry_point():
    return "ResearchAgent"


class ResearchAgent(AutonomousAgent):
    def setup(self, path_to_conf_file):
        with open(path_to_conf_file) as f:
            self.track = Track[json.load(f)["track"]]
        print(f"research agent: setup({path_to_conf_file}), track {self.track.value}", flush=True)

    def sensors(self):
        found = [{"type": "sensor.speedometer", "reading_frequency": 20, "id": "speed"}]
        if self.track == Track.MAP:
            found.append({"type": "sensor.opendrive_map", "reading_frequency": 1e-6, "id": "OpenDRIVE"})
        return found

    def run_step(self, input_data, timestamp):
        return carla.VehicleControl(throttle=agent_helper.THROTTLE)

    def destroy(self):
        print("research agent: destroy", flush=True)
"""


def researchers_agent(folder: Path, track: str) -> tuple[Path, Path]:
    """An agent file in FOLDER/agent (with a module of its own beside it) and its config in FOLDER/config: the
    track its setup() sets (the OpenDRIVE map among its sensors on MAP)."""
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "research_agent.py").write_text(AGENT)
    (folder / "agent" / "agent_helper.py").write_text("THROTTLE = 0.5\n")
    (folder / "config").mkdir()
    (folder / "config" / "agent.json").write_text(json.dumps({"track": track}))
    return folder / "agent" / "research_agent.py", folder / "config" / "agent.json"


def test_bin_evaluate_world_carla_drives_a_researchers_agent_file_on_its_own_track_standin_server_and_evaluator(
        tmp_path, short_routes, carla_env):
    """bin/evaluate --world=carla --agent-file --agent-config (relative paths) --servers-per-gpu 1 on GPU 3: the
    evaluator's --agent is the file,
    its --agent-config the researcher's, both absolute; the agent's folder on its PYTHONPATH. The agent sets its
    track (MAP) in setup() and declares the OpenDRIVE map: our wrapper (--track-of-agent) has the evaluator check its
    sensors on that track, not --track's SENSORS. Nothing of our agent's is written (no agent-NN.json, no frames);
    the evaluator's result is the run's, and scored."""
    from tools.collect.carla.evaluator import OWN_TRACK

    route = route_file(short_routes)
    (tmp_path / "routes" / route.parent.name).mkdir(parents=True)
    shutil.copy(route, tmp_path / "routes" / route.parent.name / route.name)
    shutil.copytree(short_routes / "towns", tmp_path / "routes" / "towns")
    agent, config = researchers_agent(tmp_path, "MAP")
    proc = run_bin("evaluate", "routes", "--root", "eval", "--world=carla", "--agent-file", "agent/research_agent.py",
                   "--agent-config", "config/agent.json", "--servers-per-gpu", "1", cwd=tmp_path,
                   env={**carla_env, "CUDA_VISIBLE_DEVICES": "3", "DRIVEKIT_IMAGES": str(tmp_path / "no-images")},
                   timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "1 workers on GPUs 3 (1 per GPU)" in proc.stderr, proc.stderr
    layout, key = the_run(tmp_path / "eval")
    assert results.read_status(layout.result_path(key)) == results.PERFECT
    assert layout.result_path(key).read_bytes() == layout.evaluator_checkpoint(key, 1).read_bytes()
    assert servers(layout)[key][0] == "3"  # the server on the worker's GPU
    noted = json.loads((layout.log_dir(key) / "argv.json").read_text())
    assert (noted["flags"]["agent"], noted["flags"]["agent_config"]) == (str(agent), str(config))
    assert noted["flags"]["track"] == "SENSORS" and noted["flags"]["routes_subset"] == "0"
    assert str(agent.parent) in noted["pythonpath"].split(os.pathsep)
    seen = json.loads((layout.log_dir(key) / "agent.json").read_text())
    assert seen == {"setup": str(config), "track": "MAP", "sensors": ["speed", "OpenDRIVE"], "ticks": 40}
    log = layout.attempt_log(key, 1).read_text()
    assert f"{OWN_TRACK}: MAP (the evaluator was given --track=SENSORS)" in log
    assert f"research agent: setup({config}), track MAP" in log and "research agent: destroy" in log
    assert not layout.agent_config(key, 1).exists() and not layout.frames_dir(key).exists()
    settings = json.loads(layout.run_spec(key).read_text())["settings"]
    assert {k: settings[k] for k in ("world", "agent", "agent_file", "agent_config", "record")} == {
        "world": "carla", "agent": "leaderboard", "agent_file": str(agent), "agent_config": str(config),
        "record": False}
    assert json.loads(layout.evaluation.read_text())["settings"]["agent_config"] == str(config)
    assert f"agent file {agent}" in proc.stdout and "driving score      100.000" in proc.stdout, proc.stdout
    again = run_bin("evaluate", "score", "--root", tmp_path / "eval")  # aggregated again: the same agent named
    assert again.returncode == 0 and f"agent file {agent}" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("case", ["no agent-config", "no CARLA_ROOT", "servers-per-gpu in the embedded world",
                                  "servers-per-gpu and workers"])
def test_evaluate_refuses_in_one_line_before_anything_is_written(tmp_path, short_routes, carla_env, case):
    """A missing --agent-config, no CARLA install (bin/evaluate checks the world's set-up before it writes
    evaluation.json), --servers-per-gpu where there is no server or with --workers."""
    agent, config = researchers_agent(tmp_path, "SENSORS")
    env, extra = dict(carla_env), ["--world=carla"]
    if case == "no agent-config":
        config = tmp_path / "config" / "absent.yaml"
        expected = (f"evaluate: --agent-config {config}: no such file or folder; give what the agent's setup() "
                    "reads, or leave it out")
    elif case == "no CARLA_ROOT":
        env["CARLA_ROOT"] = ""
        expected = ("evaluate: --world=carla: CARLA_ROOT is not set; set it to a CARLA 0.9.15 or 0.9.16 install "
                    "(the folder holding CarlaUE4.sh), or build the CARLA image (make images: containers/carla.sif), "
                    "which bin/collect then runs in")
    elif case == "servers-per-gpu in the embedded world":
        extra = ["--servers-per-gpu", "2"]
        expected = ("evaluate: --servers-per-gpu 2: only with --world=carla (the embedded world renders on the "
                    "CPU); give --workers N")
    else:
        extra += ["--servers-per-gpu", "2", "--workers", "3"]
        expected = ("evaluate: --workers 3 and --servers-per-gpu 2: give one (with --servers-per-gpu K the workers "
                    "are the GPUs x K)")
    proc = run_tool(PYTHON, "-m", "tools.evaluate", "run", short_routes, "--root", tmp_path / "eval",
                    "--agent-file", agent, "--agent-config", config, *extra, env=env)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [expected], proc.stderr
    assert not (tmp_path / "eval").exists()


def test_a_slurm_task_drives_a_researchers_agent_file_standin_server_and_evaluator(tmp_path, short_routes,
                                                                                    carla_env):
    """An array task of a --world=carla evaluation of an agent file, run by hand as bin/collect-task (what
    slurm/collect.sbatch runs; no cluster needed): its route run's child drives the agent file under the evaluator
    with the researcher's config, on the agent's track (SENSORS here)."""
    from tools.collect.base.routes import find_route_files
    from tools.collect.runner.jobs import plan
    from tools.collect.runner.waves import WAVE_NAME, Wave, run_key_of, waves_dir

    routes = copy_routes(short_routes, tmp_path / "routes")
    agent, config = researchers_agent(tmp_path, "SENSORS")
    layout = Layout(tmp_path / "root")
    runs = [{"key": str(j.key), "route": str(j.route_file), "route_id": j.route.id, "repetition": j.repetition,
             "towns": str(j.towns)} for j in plan(find_route_files(routes), None, 1)]
    settings = {"world": "carla", "agent": "leaderboard", "agent_file": str(agent), "agent_config": str(config),
                "record": False}
    wave = Wave(waves_dir(layout) / WAVE_NAME.format(wave=1), 1, runs[:1], runs_per_task=1, max_attempts=1,
                settings=settings, throttle=1)
    wave.path.parent.mkdir(parents=True)
    wave.save()
    proc = run_bin("collect-task", wave.path, "0", env={**carla_env, "DRIVEKIT_IMAGES": str(tmp_path / "no-images")},
                   timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "task 0: 1 finished" in proc.stderr, proc.stderr
    key = run_key_of(runs[0])
    assert results.read_status(layout.result_path(key)) == results.PERFECT
    seen = json.loads((layout.log_dir(key) / "agent.json").read_text())
    assert seen == {"setup": str(config), "track": "SENSORS", "sensors": ["speed"], "ticks": 40}
    worker = next(line for line in layout.attempt_log(key, 1).read_text().splitlines() if line.startswith("$ "))
    assert " -m tools.evaluate route --spec " in worker  # a leaderboard agent's route run command


def test_the_evaluators_command_line_and_environment_for_a_researchers_agent_file():
    """Their file as --agent, their config as given (nothing of ours), our wrapper's --track-of-agent; the agent's
    folder on PYTHONPATH after ours (the wrapper is ours: a `tools` package of theirs must not shadow it)."""
    from tools.collect.carla.evaluator import agents_own_track

    layout, key = Layout(Path("/scratch/ds")), RunKey("Accident", "town_0003_route3_rep0")
    settings = CollectSettings(world="carla", agent="leaderboard", agent_file="/home/me/lb/agent.py",
                               agent_config="/home/me/lb/config.yaml", record=False)
    agent_file, config, theirs = carla_run.agent_of(settings)
    assert (agent_file, config, theirs) == (Path("/home/me/lb/agent.py"), "/home/me/lb/config.yaml", True)
    argv = carla_run.evaluator_command(
        "/opt/drivekit/venv/bin/python", SETUP, Path("/routes/Accident/town_0003.xml"), "3",
        layout.evaluator_checkpoint(key, 2), layout.evaluator_live(key, 2), agent_file, config,
        Ports(2000, 2001, 2002, 8000), 1234, 0, agents_track=theirs)
    ours = golden_value("carla-evaluator-argv.json")
    assert argv[:6] == ours[:5] + ["--track-of-agent"]
    assert argv[6:] == [a.replace("/opt/drivekit/agent/drivekit_agent.py", "/home/me/lb/agent.py").replace(
        str(layout.agent_config(key, 2)), "/home/me/lb/config.yaml") for a in ours[6:]]
    assert carla_run.agent_of(CollectSettings(world="carla", agent="leaderboard", agent_file="/a.py"))[1] == ""
    env = carla_run.evaluator_env({"PYTHONPATH": "/site/extra"}, SETUP, tools_home=Path("/opt/drivekit/src"),
                                  agent_dir=agent_file.parent)
    assert env["PYTHONPATH"] == ("/workspace/PythonAPI/carla:/opt/scenario_runner:/opt/leaderboard:/opt/drivekit/src:"
                                 "/home/me/lb:/site/extra")
    # the wrapper checks the sensors on the agent's own track, every other rule of it standing
    track = enum.Enum("Track", {"SENSORS": "SENSORS", "MAP": "MAP"})  # the leaderboard's autonomous_agent.Track
    selected = []
    validate = agents_own_track(lambda sensors, agent_track, given: selected.append((agent_track, given)))
    validate([], track.MAP, "SENSORS")
    assert selected == [(track.MAP, "MAP")]


# ----------------------------------------------------------------------------- checks before anything starts


@pytest.mark.parametrize("how", ["bin/collect", "run"])
def test_no_carla_root_and_no_image_is_one_line_before_anything_starts(tmp_path, short_routes, how):
    root = tmp_path / "root"
    env = {"CARLA_ROOT": "", "DRIVEKIT_IMAGES": str(tmp_path / "no-images")}
    if how == "run":
        proc = run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route_file(short_routes), "--root", root,
                        "--world=carla", env=env)
    else:
        proc = run_bin("collect", short_routes, "--root", root, "--world=carla", env=env)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "collect: --world=carla: CARLA_ROOT is not set; set it to a CARLA 0.9.15 or 0.9.16 install (the folder holding "
        "CarlaUE4.sh), or build the CARLA image (make images: containers/carla.sif), which bin/collect then runs "
        "in"], proc.stderr
    assert not root.exists()  # nothing claimed, nothing written


def fake_setup(tmp_path: Path, drop: str = "") -> dict[str, str]:
    paths = {"CARLA_ROOT": tmp_path / "carla", "LEADERBOARD_ROOT": tmp_path / "lb",
             "SCENARIO_RUNNER_ROOT": tmp_path / "sr"}
    for rel in ("carla/CarlaUE4.sh", "carla/PythonAPI/carla/agents/", "lb/leaderboard/leaderboard_evaluator.py",
                "sr/srunner/"):
        if drop and rel.startswith(drop):
            continue
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            path.mkdir(exist_ok=True)
        else:
            path.write_text("")
    return {k: str(v) for k, v in paths.items()}


@pytest.mark.parametrize("drop, unset, message", [
    ("", "LEADERBOARD_ROOT", "LEADERBOARD_ROOT is not set; clone https://github.com/carla-simulator/leaderboard at "
                             "commit a87a3419e9d2e0d36deb25f1f26c17edee2d1420 for CARLA 0.9.15 or "
                             "aec81319de6bec57372f25aa94083c9ab0bd4223 for CARLA 0.9.16"),
    ("", "SCENARIO_RUNNER_ROOT", "SCENARIO_RUNNER_ROOT is not set; clone https://github.com/carla-simulator/"
                                 "scenario_runner at commit d12d8bb788201ebf6f03e55b9c5169f9dcb2ea87 for CARLA 0.9.15 "
                                 "or 94ff3b8af752bad2b9d464ad5105868906aa34c0 for CARLA 0.9.16"),
    ("carla/CarlaUE4.sh", "", "CARLA_ROOT={tmp}/carla has no CarlaUE4.sh; set it to a CARLA 0.9.15 or 0.9.16 install"),
    ("carla/PythonAPI", "", "CARLA_ROOT={tmp}/carla has no PythonAPI/carla/agents (CARLA's agents package"),
    ("lb/", "", "LEADERBOARD_ROOT={tmp}/lb has no leaderboard/leaderboard_evaluator.py; clone"),
    ("sr/", "", "SCENARIO_RUNNER_ROOT={tmp}/sr has no srunner/; clone"),
])
def test_each_missing_part_of_the_carla_setup_is_one_line_naming_the_variable(tmp_path, drop, unset, message):
    env = fake_setup(tmp_path, drop)
    env.pop(unset, None)
    with pytest.raises(ToolError) as e:
        carla_run.check_setup(env, client_version="0.9.16")
    assert str(e.value).startswith("--world=carla: " + message.format(tmp=tmp_path)), str(e.value)
    assert "\n" not in str(e.value)


def test_a_carla_install_client_and_scenario_runner_of_different_releases_are_one_line(tmp_path):
    """The server's release is read from CARLA_ROOT (its VERSION file, else its client packages), scenario_runner's
    from its changelog; the parts that differ from the server's are named with their fix."""
    env = fake_setup(tmp_path)
    assert carla_run.check_setup(env, client_version="0.9.15").release == RELEASES["0.9.15"]  # nothing else says
    dist = tmp_path / "carla" / "PythonAPI" / "carla" / "dist"
    dist.mkdir()
    (dist / "carla-0.9.15-py3.7-linux-x86_64.egg").write_text("")
    (dist / "carla-0.9.15-cp37-cp37m-manylinux_2_27_x86_64.whl").write_text("")
    with pytest.raises(ToolError) as e:
        carla_run.check_setup(env, client_version="0.9.16")
    assert str(e.value).startswith(
        f"--world=carla: the parts of this CARLA set-up are different releases: the server 0.9.15 (CARLA_ROOT="
        f"{tmp_path}/carla, its PythonAPI/carla/dist), the client 0.9.16 (the carla module of {sys.executable}); make "
        "them all CARLA 0.9.15: "), str(e.value)
    assert str(e.value).endswith("pip install carla-0-9-15==0.0.1") and "\n" not in str(e.value)
    (tmp_path / "carla" / "VERSION").write_text("0.9.16\n")  # the release's own word comes first
    assert carla_run.check_setup(env, client_version="0.9.16").release == RELEASES["0.9.16"]
    changelog = tmp_path / "sr" / "Docs" / "CHANGELOG.md"
    changelog.parent.mkdir()
    changelog.write_text("## Table of Contents\n\n## CARLA ScenarioRunner 0.9.15\n### New Features\n")
    with pytest.raises(ToolError, match=r"scenario_runner 0\.9\.15 \(SCENARIO_RUNNER_ROOT=.*, its Docs/CHANGELOG"
                                        r"\.md\); make them all CARLA 0\.9\.16: git -C \$SCENARIO_RUNNER_ROOT checkout "
                                        r"94ff3b8af752bad2b9d464ad5105868906aa34c0 \(tag v0\.9\.16\) and git -C "
                                        r"\$LEADERBOARD_ROOT checkout aec81319de6bec57372f25aa94083c9ab0bd4223"):
        carla_run.check_setup(env, client_version="0.9.16")
    with pytest.raises(ToolError, match=r"^--world=carla: the server \(CARLA_ROOT=.*, its VERSION file\) is CARLA "
                                        r"0\.9\.14; drivekit runs CARLA 0\.9\.15 or 0\.9\.16$"):
        (tmp_path / "carla" / "VERSION").write_text("0.9.14\n")
        carla_run.check_setup(env, client_version="0.9.16")


@pytest.mark.parametrize("flags, message", [
    ({"sim_hz": 10}, "--sim-hz=10: --world=carla runs at 20 Hz, the leaderboard evaluator's fixed rate"),
    ({"agent": "policy", "checkpoint": "run"}, "--agent=policy: --world=carla drives the expert or a leaderboard "
                                               "agent file; evaluate a checkpoint in CARLA as the agent file "
                                               "tools/evaluate/leaderboard/agent_file/policy_agent.py"),
    ({"vehicles": 5}, "--vehicles=5: with --world=carla the leaderboard evaluator decides this"),
])
def test_settings_a_carla_run_cannot_honour_are_refused(flags, message):
    with pytest.raises(ToolError, match="^" + re.escape(message)):
        world_for("carla").check_settings(CollectSettings.from_flags({"world": "carla", **flags}))
    world_for("carla").check_settings(CollectSettings.from_flags({"world": "carla", "record_every": 10}))


def test_a_route_the_leaderboard_cannot_select_is_refused(tmp_path):
    from tools.collect.base.routes import read_routes

    path = tmp_path / "r.xml"
    path.write_text('<routes><route id="a1" town="Town01"><waypoints><position x="0" y="0" z="0"/>'
                    '<position x="9" y="0" z="0"/></waypoints><scenarios/></route>'
                    '<route id="2" town="Town01"><waypoints><position x="0" y="0" z="0"/>'
                    '<position x="9" y="0" z="0"/></waypoints></route></routes>')
    first, second = read_routes(path)
    with pytest.raises(ToolError, match="route id 'a1' is not an integer"):
        carla_run.check_route(path, first)
    with pytest.raises(ToolError, match="route 2 has no <scenarios> element"):
        carla_run.check_route(path, second)
    path.write_text('<routes><route id="3" town="Town01"><waypoints><position x="0" y="0" z="0"/>'
                    '<position x="9" y="0" z="0"/></waypoints><scenarios><scenario name="S_1" '
                    'type="SignalizedJunctionStraight"><trigger_point x="0" y="0" z="0" yaw="0"/></scenario>'
                    '</scenarios></route></routes>')
    (third,) = read_routes(path)
    with pytest.raises(ToolError, match="type 'SignalizedJunctionStraight', which no scenario class of "
                                        "scenario_runner implements"):
        carla_run.check_route(path, third)


# ----------------------------------------------------------------------------- golden command line and environment


def golden(name: str, value) -> None:
    path = GOLDEN / name
    if os.environ.get("DRIVEKIT_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(value, indent=1) + "\n")
    assert value == golden_value(name)


def golden_value(name: str):
    return json.loads((GOLDEN / name).read_text())


SETUP = carla_run.CarlaSetup(Path("/workspace"), Path("/opt/leaderboard"), Path("/opt/scenario_runner"))


def test_the_evaluators_command_line_matches_the_golden_file():
    layout, key = Layout(Path("/scratch/ds")), RunKey("Accident", "town_0003_route3_rep0")
    argv = carla_run.evaluator_command(
        "/opt/drivekit/venv/bin/python", SETUP, Path("/routes/Accident/town_0003.xml"), "3",
        layout.evaluator_checkpoint(key, 2), layout.evaluator_live(key, 2),
        Path("/opt/drivekit/agent/drivekit_agent.py"), layout.agent_config(key, 2), Ports(2000, 2001, 2002, 8000), 1234,
        0, stop_on_infraction=True)
    golden("carla-evaluator-argv.json", argv)
    assert not [a for a in argv if a.startswith("--resume")]  # type=bool: any value turns it on


def test_the_evaluators_environment_matches_the_golden_file():
    base = {"PATH": "/usr/bin:/bin", "HOME": "/home/user", "PYTHONPATH": "/site/extra", claims.LOCK_FD_ENV: "7"}
    env = carla_run.evaluator_env(base, SETUP, tools_home=Path("/opt/drivekit/src"))
    golden("carla-evaluator-env.json", dict(sorted(env.items())))


# ----------------------------------------------------------------------------- the image


def test_the_carla_image_pins_leaderboard_and_scenario_runner_by_commit_and_checks_them():
    definition = (REPO / "containers" / "carla.def").read_text()
    # the release's pins come from tools.collect.carla.versions, and the checkouts are verified against them
    assert 'python -m tools.collect.carla.versions pins "{{ CARLA_VERSION }}"' in definition
    for arg, folder in (("LEADERBOARD_COMMIT", "/opt/leaderboard"), ("SCENARIO_RUNNER_COMMIT", "/opt/scenario_runner")):
        assert f'git -C {folder} rev-parse HEAD)" = "${arg}"' in definition
    for release in RELEASES.values():
        for commit in (release.leaderboard_commit, release.scenario_runner_commit):
            assert re.fullmatch(r"[0-9a-f]{40}", commit)
    environment = definition.split("%environment", 1)[1].split("\n%", 1)[0]
    assert "export LEADERBOARD_ROOT=/opt/leaderboard" in environment
    assert "export SCENARIO_RUNNER_ROOT=/opt/scenario_runner" in environment
    test = definition.split("%test", 1)[1].split("\n%", 1)[0]
    assert "import leaderboard.leaderboard_evaluator" in test and "srunner.scenariomanager" in test
    assert "--resume" not in definition
