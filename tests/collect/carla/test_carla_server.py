"""The CARLA server's life (tools/collect/carla/server.py) against a stand-in server (tests/standin_carla_server.py:
no CARLA server runs here), which speaks the readiness RPC the real carla client uses and can be told to start
slowly, hang, crash or answer with another version."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, TESTS

from tools.collect.carla import server as server_module
from tools.collect.carla.server import (
    PORT_FIRST,
    PORT_LAST,
    CarlaServer,
    Ports,
    ServerError,
    job_gpus,
    pick_gpu,
    reserve_ports,
    start_server,
)

STANDIN = TESTS / "standin_carla_server.py"


def standin(tmp_path: Path, mode: str = "ok", delay: float = 0.0, child: bool = False, timeout: float = 10.0,
            name: str = "server") -> CarlaServer:
    block = reserve_ports()
    env = {**os.environ, "STANDIN_MODE": mode, "STANDIN_DELAY": str(delay), "STANDIN_CHILD": "1" if child else "0"}
    argv = [PYTHON, str(STANDIN), *CarlaServer.command(carla_root(tmp_path), block.ports, "0")[1:]]
    return CarlaServer(argv, block.ports, tmp_path / f"{name}.log", ready_timeout=timeout, env=env,
                       reservation=block)


def carla_root(tmp_path: Path) -> Path:
    """A CARLA_ROOT whose CarlaUE4.sh execs the stand-in server."""
    root = tmp_path / "carla"
    if not (root / "CarlaUE4.sh").exists():
        root.mkdir(exist_ok=True)
        (root / "CarlaUE4.sh").write_text(f'#!/bin/sh\nexec "{PYTHON}" "{STANDIN}" "$@"\n')
        (root / "CarlaUE4.sh").chmod(0o755)
    return root


def group_gone(pgid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_command_names_every_port_the_server_binds_and_its_gpu(tmp_path):
    argv = CarlaServer.command(carla_root(tmp_path), Ports(20000, 20001, 20002, 20003), "3")
    assert argv == [str(tmp_path / "carla" / "CarlaUE4.sh"), "-RenderOffScreen", "-nosound", "-carla-rpc-port=20000",
                    "-carla-streaming-port=20001", "-carla-secondary-port=20002", "-graphicsadapter=3"]


def test_reserved_ports_keep_every_other_binder_off_but_let_carlas_acceptors_bind_and_listen():
    block, other = reserve_ports(), reserve_ports()
    try:
        ports = list(vars(block.ports).values())
        assert len(set(ports + list(vars(other.ports).values()))) == 8  # two reservations never share a port
        assert ports == list(range(ports[0], ports[0] + 4)) and PORT_FIRST <= ports[0] <= ports[-1] <= PORT_LAST
        for port in ports:
            with socket.socket() as plain, pytest.raises(OSError):  # another program, another collector's probe
                plain.bind(("127.0.0.1", port))
            with socket.socket() as acceptor:  # CARLA's servers and the Traffic Manager: Boost.Asio's acceptor
                acceptor.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                acceptor.bind(("", port))
                acceptor.listen(1)
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    pass
    finally:
        block.release()
        other.release()
    with socket.socket() as s:  # released: free again
        s.bind(("127.0.0.1", block.ports.rpc))


@pytest.mark.parametrize("env, gpu", [
    ({}, "0"), ({"CUDA_VISIBLE_DEVICES": "3,5"}, "3"), ({"CUDA_VISIBLE_DEVICES": "GPU-8f2e"}, "0"),
    ({"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}, "2"), ({"SLURM_JOB_GPUS": "1"}, "1"),
    ({"SLURM_JOB_GPUS": "1", "DRIVEKIT_CARLA_GPU": "6"}, "6")])
def test_the_graphics_adapter_is_the_physical_gpu_the_worker_was_given(env, gpu):
    """Vulkan ignores CUDA_VISIBLE_DEVICES and numbers every GPU of the machine: never CUDA's renumbering."""
    assert pick_gpu(env) == gpu


def test_the_jobs_gpus_come_from_slurm_first_then_cuda():
    assert job_gpus({"SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}) == ["4", "5"]
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "2, 7"}) == ["2", "7"]
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "MIG-1/2/3"}) == [] and job_gpus({}) == []


def test_gpu_slots_take_the_gpus_in_turn_k_slots_each():
    from tools.collect.runner.workers import gpu_slots

    assert gpu_slots(["0", "1"], 2) == ["0", "1", "0", "1"] and gpu_slots(["3"], 3) == ["3", "3", "3"]


def test_the_machines_gpus_are_nvidia_smis_and_none_is_one_line_stub_nvidia_smi(tmp_path, monkeypatch):
    """No GPU here: a stub nvidia-smi prints what the real one prints for --query-gpu=index --format=csv,noheader."""
    from tools.collect.carla.server import machine_gpus

    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$*" = "--query-gpu=index --format=csv,noheader" ] && printf "0\\n1\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine_gpus() == ["0", "1"]
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver'; exit 9\n")
    with pytest.raises(ServerError, match=r"^nvidia-smi finds no GPU \(NVIDIA-SMI has failed .*\); name them with "
                                          r"CUDA_VISIBLE_DEVICES=0,1,\.\.\.$"):
        machine_gpus()
    smi.unlink()
    with pytest.raises(ServerError, match=r"^no nvidia-smi here to count the GPUs: name them with CUDA_VISIBLE"):
        machine_gpus()


@pytest.mark.parametrize("flags, message", [
    ({"workers": 2}, "--workers 2 and --servers-per-gpu 2: give one (with --servers-per-gpu K the workers are the "
                     "GPUs x K)"),
    ({"world": "sim"}, "--servers-per-gpu 2: only with --world=carla (the embedded world renders on the CPU)"),
    ({"slurm": True, "gpus": 0}, "--servers-per-gpu 2 with --gpus 0: give each task GPUs (--gpus G)"),
    ({"slurm": True, "gpus": 2, "runs_per_task": 3}, "--runs-per-task 3: a task runs 4 servers at once (--gpus 2 x "
                                                     "--servers-per-gpu 2); give --runs-per-task 4 or more"),
])
def test_servers_per_gpu_that_cannot_be_honoured_is_one_line_before_anything_starts(tmp_path, flags, message):
    from tools.collect.__main__ import collect
    from tools.core.errors import ToolError

    with pytest.raises(ToolError, match="^" + re.escape(message)):
        collect(str(tmp_path), root=str(tmp_path / "root"), servers_per_gpu=2, **{"world": "carla", **flags})
    assert not (tmp_path / "root").exists()


def test_a_carla_root_without_the_server_is_one_line(tmp_path):
    with pytest.raises(ServerError, match=r"CARLA_ROOT .*: no CarlaUE4.sh there; set CARLA_ROOT"):
        CarlaServer.command(tmp_path, Ports(20000, 20001, 20002, 20003), "0")


@pytest.mark.parametrize("lost", [1, 3])
def test_a_standin_server_that_loses_a_port_race_is_started_again_on_other_ports(tmp_path, monkeypatch, lost):
    """Another program binds the streaming port between our reservation and the server's bind (a listener, which
    even a reservation cannot keep off): the stand-in exits as CARLA does, and the start is tried on another block,
    PORT_TRIES starts at most."""
    thieves, blocks = [], []

    def reserve_then_lose(start=None):
        block = reserve_ports(start)
        blocks.append(block.ports)
        if len(blocks) <= lost:
            thief = socket.socket()
            thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            thief.bind(("", block.ports.streaming))
            thief.listen(1)
            thieves.append(thief)
        return block

    monkeypatch.setattr(server_module, "reserve_ports", reserve_then_lose)
    log = tmp_path / "attempt.log"
    try:
        if lost < server_module.PORT_TRIES:
            server = start_server(carla_root(tmp_path), "0", log, ready_timeout=10)
            server.stop()
            assert server.ports == blocks[-1] and len(blocks) == lost + 1
        else:
            with pytest.raises(ServerError, match=r"exited with code 134: Address already in use .*\(3 starts, each "
                                                  r"on other ports\)$"):
                start_server(carla_root(tmp_path), "0", log, ready_timeout=10)
            assert len(blocks) == 3
    finally:
        for thief in thieves:
            thief.close()
    assert log.read_text().count("bind: Address already in use") == lost
    assert len(set(blocks)) == len(blocks)


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
        assert not set(vars(a.ports).values()) & set(vars(b.ports).values())


def test_stop_ends_the_standins_whole_process_group_and_alive_sees_a_death(tmp_path):
    with standin(tmp_path, child=True) as server:
        pgid = server.process.pid
        os.kill(pgid, signal.SIGKILL)  # the server dies mid-route
        server.process.wait(5)
        assert not server.alive()
    assert group_gone(pgid)  # its child too


COLLECTOR = """
import os, signal, sys, time
sys.path[:0] = [{here!r}, {tests!r}]
from test_carla_server import standin
from pathlib import Path
signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
with standin(Path({tmp!r}), child={child}) as server:
    print(server.process.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("how, child", [(signal.SIGTERM, True), (signal.SIGKILL, False)])
def test_killing_the_collector_leaves_no_standin_server_process(tmp_path, how, child):
    child_code = COLLECTOR.format(here=str(Path(__file__).parent), tests=str(TESTS), tmp=str(tmp_path), child=child)
    collector = subprocess.Popen([sys.executable, "-c", child_code],
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
