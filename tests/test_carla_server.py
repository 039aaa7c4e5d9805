"""The CARLA server's life (tools/collect/carla/server.py) against a stand-in server (tests/standin_carla_server.py:
no CARLA server runs here), which speaks the readiness RPC the real carla client uses and can be told to start
slowly, hang, crash or answer with another version."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PYTHON, REPO

from tools.collect.carla.server import CarlaServer, ServerError, allocate_ports, free_ports, pick_gpu

STANDIN = Path(__file__).parent / "standin_carla_server.py"


def standin(tmp_path: Path, mode: str = "ok", delay: float = 0.0, child: bool = False, timeout: float = 10.0,
            name: str = "server") -> CarlaServer:
    ports = allocate_ports()
    env = {**os.environ, "STANDIN_MODE": mode, "STANDIN_DELAY": str(delay), "STANDIN_CHILD": "1" if child else "0"}
    argv = [PYTHON, str(STANDIN), "-RenderOffScreen", "-nosound", f"-carla-rpc-port={ports.rpc}",
            f"-carla-streaming-port={ports.streaming}", "-graphicsadapter=0"]
    return CarlaServer(argv, ports, tmp_path / f"{name}.log", ready_timeout=timeout, env=env)


def group_gone(pgid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_ports_are_found_by_binding_distinct_and_free():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


@pytest.mark.parametrize("env, gpu", [({}, "0"), ({"CUDA_VISIBLE_DEVICES": "3,5"}, "0"),
                                      ({"SLURM_STEP_GPUS": "2,3"}, "2"), ({"SLURM_JOB_GPUS": "1"}, "1")])
def test_the_gpu_is_the_first_the_job_may_use(env, gpu):
    assert pick_gpu(env) == gpu


def test_a_carla_root_without_the_server_is_one_line(tmp_path):
    with pytest.raises(ServerError, match=r"CARLA_ROOT .*: no CarlaUE4.sh there; set CARLA_ROOT"):
        CarlaServer.command(tmp_path, allocate_ports(), "0")


def test_standin_readiness_is_found_well_under_a_second_after_it_listens(tmp_path):
    server = standin(tmp_path, delay=1.5)
    with server:
        ready = time.time()
        assert server.alive()
    log = (tmp_path / "server.log").read_text()  # its output goes to the attempt's log
    listening = float(log.split("listening at ")[1].split()[0])
    assert 0.0 <= ready - listening < 0.5, ready - listening  # polled every 0.1 s, not a blind sleep


def test_standin_that_never_becomes_ready_fails_after_the_deadline_and_is_ended(tmp_path):
    server = standin(tmp_path, mode="hang", timeout=2.0)
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"CARLA server not ready after 2 s \(port \d+\); its output is in"):
        server.start()
    assert 2.0 <= time.monotonic() - started < 4.0
    assert group_gone(server.process.pid)


def test_standin_that_crashes_while_starting_is_a_simulation_crash(tmp_path):
    server = standin(tmp_path, mode="crash", delay=0.3)
    with pytest.raises(ServerError, match="exited with code 3 before it was ready: Failed - Simulation crashed"):
        server.start()


def test_standin_of_another_version_is_one_line_naming_both(tmp_path):
    with pytest.raises(ServerError, match=r"CARLA server 0\.9\.15 but client 0\.9\.16"):
        standin(tmp_path, mode="version").start()


def test_two_standin_servers_at_once_get_different_ports_and_both_answer(tmp_path):
    with standin(tmp_path, name="a") as a, standin(tmp_path, name="b") as b:
        assert a.alive() and b.alive()
        assert not {a.ports.rpc, a.ports.streaming, a.ports.traffic_manager} & {b.ports.rpc, b.ports.streaming,
                                                                                b.ports.traffic_manager}


def test_stop_ends_the_standins_whole_process_group_and_alive_sees_a_death(tmp_path):
    with standin(tmp_path, child=True) as server:
        pgid = server.process.pid
        os.kill(pgid, signal.SIGKILL)  # the server dies mid-route
        server.process.wait(5)
        assert not server.alive()
    assert group_gone(pgid)  # its child too


COLLECTOR = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from test_carla_server import standin
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
with standin(Path({tmp!r}), child={child}) as server:
    print(server.process.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("how, child", [(signal.SIGTERM, True), (signal.SIGKILL, False)])
def test_killing_the_collector_leaves_no_standin_server_process(tmp_path, how, child):
    collector = subprocess.Popen([sys.executable, "-c", COLLECTOR.format(tests=str(Path(__file__).parent),
                                                                         tmp=str(tmp_path), child=child)],
                                 stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        pgid = int(collector.stdout.readline())
        os.killpg(pgid, 0)  # running
        collector.send_signal(how)
        collector.wait(15)
        assert group_gone(pgid, within=15.0)
    finally:
        if collector.poll() is None:
            collector.kill()
