"""The life of one CARLA server for one collector: its GPU, its ports, start, readiness, death, the end.

    server = start_server(carla_root, pick_gpu(), log)   # ports reserved, started, ready (or ServerError)
    try: ...                                              # server.ports.rpc for carla.Client, .traffic_manager
    finally: server.stop()                                # its process group ended, its ports released

- GPU: `-graphicsadapter=G`, G the physical index of the GPU this worker was given (`pick_gpu`): the collector's
  choice for the worker (DRIVEKIT_CARLA_GPU, set by --servers-per-gpu), else the first GPU of the job
  (SLURM_STEP_GPUS, SLURM_JOB_GPUS, then CUDA_VISIBLE_DEVICES), else 0. Vulkan, which CARLA renders with, ignores
  CUDA_VISIBLE_DEVICES and numbers every GPU of the machine: a CUDA renumbering (0 for the first visible GPU) would
  put every server of a node on its first GPU.
- Ports: every port the server and the evaluator's Traffic Manager will bind is reserved for the whole attempt
  (`reserve_ports`): a block of four (RPC, streaming, secondary, Traffic Manager) in PORT_FIRST..PORT_LAST, below
  Linux's ephemeral range (32768-60999 by default), so that no outgoing connection takes one meanwhile. CARLA also
  binds a secondary port (the multi-GPU primary's; RPC + 2 unless -carla-secondary-port names it): we name it.
  Each port is held by a socket bound without SO_REUSEADDR (the bind fails where anything else holds the port),
  then marked SO_REUSEADDR and never listening: another collector's reservation, any plain bind and the kernel's
  own port choices keep off it, while CARLA's servers and the Traffic Manager, whose acceptors bind with
  SO_REUSEADDR (Boost.Asio's default, in LibCarla and rpclib), bind and listen on it.
- Start: `CarlaUE4.sh -RenderOffScreen -nosound -carla-rpc-port=P -carla-streaming-port=S
  -carla-secondary-port=Q -graphicsadapter=G` in its own process group, its output appended to the attempt's log.
  A server that exits with "Address already in use" lost a port race (a program that bound one of the ports
  between our reservation and its bind): started again on another block, PORT_TRIES times at most.
- Ready: `carla.Client(host, P).get_server_version()` polled every POLL_S until a deadline, never a blind
  sleep; a server that exits first, or is not ready by the deadline, or answers with another version than the
  client's, is a ServerError of one line.
- End: the whole process group is ended (SIGTERM, then SIGKILL after STOP_GRACE_S) at exit, whatever
  happened, then its ports released; the server also gets SIGKILL when the collector dies without running its
  exit (Linux PR_SET_PDEATHSIG on the direct child).

Used by tools.collect.carla.run (`--world=carla`): one server per route run, the leaderboard evaluator beside it.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from tools.collect.base.processes import STOP_GRACE_S, end_group, start_group
from tools.core import files
from tools.core.errors import ToolError

log = logging.getLogger("collect.carla")

POLL_S = 0.1  # readiness poll interval
READY_TIMEOUT_S = 180.0  # a CARLA server loads its first map in 10 to 60 s on a cluster GPU
#: The ports servers are given: blocks of len(Ports) from PORT_FIRST, below Linux's default ephemeral range
#: (32768-60999), above CARLA's and the Traffic Manager's defaults (2000-2002, 8000).
PORT_FIRST, PORT_LAST = 20000, 31999
PORT_TRIES = 3  # starts of one server, each on another block, when it loses a port race
#: The physical GPU a collector gave one of its workers (--servers-per-gpu): the server renders there.
GPU_ENV = "DRIVEKIT_CARLA_GPU"
#: Where the GPUs a job may use are named, first found wins: SLURM's physical indices (a step's, the job's),
#: then CUDA's (physical where a person set it; SLURM may renumber it from 0, so SLURM's come first).
JOB_GPU_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
#: What a CARLA server that could not bind a port prints (Boost.Asio's system_error, then the C++ runtime aborts).
PORT_TAKEN = "Address already in use"


class ServerError(ToolError):
    pass


class PortTaken(ServerError):
    """The server exited because one of its ports was bound by someone else between reservation and start."""


@dataclass(frozen=True)
class Ports:
    rpc: int  # carla.Client's world port
    streaming: int  # sensor data
    secondary: int  # the multi-GPU primary's port, which CARLA binds whether or not secondaries come
    traffic_manager: int  # bound by the evaluator's Traffic Manager (client side)


class PortBlock:
    """The ports of one server and its Traffic Manager, reserved (see the module's docstring) until `release`."""

    def __init__(self, ports: Ports, sockets: list[socket.socket]):
        self.ports, self._sockets = ports, sockets

    def release(self) -> None:
        for s in self._sockets:
            s.close()
        self._sockets = []


def _reserve(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", port))  # without SO_REUSEADDR: fails where any socket holds the port (a reservation included)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # now the server's own acceptor may bind over it
    except OSError:
        s.close()
        raise
    return s


def reserve_ports(start: int | None = None) -> PortBlock:
    """A block of free ports for one server, held until `PortBlock.release`. Blocks are tried from the one at
    `start` (default: one chosen by the process id, so that collectors starting at once seldom try the same)."""
    width = len(fields(Ports))
    blocks = (PORT_LAST - PORT_FIRST + 1) // width
    start = os.getpid() if start is None else start
    for i in range(blocks):
        first = PORT_FIRST + (start + i) % blocks * width
        sockets: list[socket.socket] = []
        try:
            for port in range(first, first + width):
                sockets.append(_reserve(port))
        except OSError:
            for s in sockets:
                s.close()
            continue
        return PortBlock(Ports(*range(first, first + width)), sockets)
    raise ServerError(f"no {width} free ports in a row between {PORT_FIRST} and {PORT_LAST} for a CARLA server; "
                      "end servers left running, or run fewer collectors on this machine")


def job_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The physical indices of the GPUs this job may use (JOB_GPU_VARS, the first one set whose entries are all
    indices); [] when none says (then: every GPU of the machine, `machine_gpus`)."""
    env = os.environ if env is None else env
    for name in JOB_GPU_VARS:
        entries = [e.strip() for e in env.get(name, "").split(",") if e.strip()]
        if entries and all(e.isdigit() for e in entries):
            return entries
    return []


def machine_gpus() -> list[str]:
    """The indices of this machine's NVIDIA GPUs (`nvidia-smi`); ServerError when it cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise ServerError("no nvidia-smi here to count the GPUs: name them with CUDA_VISIBLE_DEVICES=0,1,...")
    proc = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                          timeout=60)
    found = [line.strip() for line in proc.stdout.splitlines() if line.strip().isdigit()]
    if proc.returncode != 0 or not found:
        raise ServerError(f"nvidia-smi finds no GPU ({(proc.stderr or proc.stdout).strip()[:200] or 'no output'}); "
                          "name them with CUDA_VISIBLE_DEVICES=0,1,...")
    return found


def pick_gpu(env: Mapping[str, str] | None = None) -> str:
    """The physical index of the GPU a server renders on (-graphicsadapter): the collector's choice for this
    worker (GPU_ENV), else the first GPU of the job (`job_gpus`), else 0."""
    env = os.environ if env is None else env
    chosen = env.get(GPU_ENV, "").strip()
    if chosen.isdigit():
        return chosen
    return (job_gpus(env) or ["0"])[0]


def start_server(carla_root: str | Path, gpu: str, log_file: Path, host: str = "127.0.0.1",
                 env: dict[str, str] | None = None, ready_timeout: float = READY_TIMEOUT_S,
                 tries: int = PORT_TRIES) -> CarlaServer:
    """Reserve a block of ports, start a server on them and wait until it answers; a server that lost a port race
    is started again on another block (`tries` starts at most). ServerError when it does not come up."""
    for attempt in range(1, tries + 1):
        block = reserve_ports()
        server = CarlaServer(CarlaServer.command(carla_root, block.ports, gpu), block.ports, log_file, host,
                             ready_timeout, env, reservation=block)
        try:
            return server.start()
        except PortTaken as e:
            if attempt == tries:
                raise ServerError(f"{e} ({tries} starts, each on other ports)") from None
            log.warning("%s; starting it again on other ports", e)
    raise AssertionError("unreachable")


class CarlaServer:
    """One CARLA server process group: started by `start` (or `with`), ended by `stop`."""

    def __init__(self, argv: list[str], ports: Ports, log: Path, host: str = "127.0.0.1",
                 ready_timeout: float = READY_TIMEOUT_S, env: dict[str, str] | None = None,
                 reservation: PortBlock | None = None):
        self.argv, self.ports, self.log, self.host = list(argv), ports, Path(log), host
        self.ready_timeout = ready_timeout
        self.env = env
        self.reservation = reservation  # released by stop, after the process group has ended
        self.process: subprocess.Popen | None = None
        self._log_start = 0  # where this start's output begins in the log

    @staticmethod
    def command(carla_root: str | Path, ports: Ports, gpu: str) -> list[str]:
        """The server's command line (CarlaUE4.sh of a CARLA install, or of the image's CARLA_ROOT): every port
        it binds named, the secondary one included."""
        script = Path(carla_root) / "CarlaUE4.sh"
        if not script.is_file():
            raise ServerError(f"CARLA_ROOT {carla_root}: no CarlaUE4.sh there; set CARLA_ROOT to a CARLA "
                              "install or run inside the CARLA image (containers/carla.def)")
        return [str(script), "-RenderOffScreen", "-nosound", f"-carla-rpc-port={ports.rpc}",
                f"-carla-streaming-port={ports.streaming}", f"-carla-secondary-port={ports.secondary}",
                f"-graphicsadapter={gpu}"]

    # ------------------------------------------------------------------ life
    def start(self) -> CarlaServer:
        """Start the server and wait until it answers (ServerError otherwise; nothing is left running)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # as the file itself: a dangling link there must not create its target (files.open_for_writing)
        with open(files.open_for_writing(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as out:
            out.write(f"carla server: {' '.join(self.argv)}\n".encode())
            self._log_start = out.tell()
        self.process = start_group(self.argv, self.log, env=self.env)
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> str:
        """Poll the server's version until it answers or the deadline passes; its version."""
        import carla

        deadline = time.monotonic() + self.ready_timeout
        while True:
            code = self.process.poll()
            if code is not None:
                if self._lost_a_port():
                    raise PortTaken(f"CARLA server on ports {self.ports.rpc}-{self.ports.traffic_manager} exited "
                                    f"with code {code}: {PORT_TAKEN} (its output is in {self.log})")
                raise ServerError(f"CARLA server exited with code {code} before it was ready: Failed - Simulation "
                                  f"crashed; its output is in {self.log}")
            try:
                # A plain connect first: refused at once while nothing listens (carla's client would wait out its
                # timeout); then a new client each try (one whose connection failed does not connect again).
                with socket.create_connection((self.host, self.ports.rpc), timeout=POLL_S):
                    pass
                client = carla.Client(self.host, self.ports.rpc)
                client.set_timeout(2.0)
                version = client.get_server_version()
                break
            except (OSError, RuntimeError):  # not listening yet, or no answer within the client's timeout
                if time.monotonic() > deadline:
                    raise ServerError(f"CARLA server not ready after {self.ready_timeout:.0f} s (port "
                                      f"{self.ports.rpc}); its output is in {self.log}") from None
                time.sleep(POLL_S)
        if version != client.get_client_version():
            raise ServerError(f"CARLA server {version} but client {client.get_client_version()}: install the "
                              f"carla=={version} client or run the CARLA {client.get_client_version()} server")
        return version

    def _lost_a_port(self) -> bool:
        """This start's output says a port was taken."""
        with files.open_regular(self.log, None) as f:
            f.seek(self._log_start)
            return PORT_TAKEN.encode() in f.read()

    def alive(self) -> bool:
        """The server still runs (a route that finds it dead is Failed - Simulation crashed)."""
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """End the server's whole process group (SIGTERM, then SIGKILL after `grace` seconds), then release its
        ports."""
        end_group(self.process, grace)
        if self.reservation is not None:
            self.reservation.release()

    def __enter__(self) -> CarlaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
