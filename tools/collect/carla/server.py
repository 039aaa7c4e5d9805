"""The life of one CARLA server for one collector: free ports, start, readiness, death, the end.

    with CarlaServer(CarlaServer.command(carla_root, ports, gpu), ports, log) as server:
        ...                      # server.ports.rpc for carla.Client; server.alive() between routes

- Ports: the world (RPC) port, the streaming port and the Traffic Manager port are found by binding
  (`free_ports`), never guessed; two collectors on one node get different ones.
- Start: `CarlaUE4.sh -RenderOffScreen -nosound -carla-rpc-port=P -carla-streaming-port=S
  -graphicsadapter=G` in its own process group, its output appended to the attempt's log; G is the
  first GPU the job may use (`pick_gpu`: CUDA_VISIBLE_DEVICES, else SLURM's, else 0).
- Ready: `carla.Client(host, P).get_server_version()` polled every POLL_S until a deadline, never a blind
  sleep; a server that exits first, or is not ready by the deadline, or answers with another version than
  the client's, is a ServerError of one line.
- End: the whole process group is ended (SIGTERM, then SIGKILL after STOP_GRACE_S) at exit, whatever
  happened; the server also gets SIGKILL when the collector dies without running its exit (Linux
  PR_SET_PDEATHSIG on the direct child).

Used by tools.collect.carla.run (`--world=carla`): one server per route run, the leaderboard evaluator beside it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tools.collect.processes import STOP_GRACE_S, end_group, start_group
from tools.dataset.errors import ToolError

#: The CARLA version this client speaks (pyproject.toml's carla== pin and containers/carla.def's CARLA_VERSION).
CARLA_VERSION = "0.9.16"
POLL_S = 0.1  # readiness poll interval
READY_TIMEOUT_S = 180.0  # a CARLA server loads its first map in 10 to 60 s on a cluster GPU


class ServerError(ToolError):
    pass


@dataclass(frozen=True)
class Ports:
    rpc: int  # carla.Client's world port
    streaming: int  # sensor data
    traffic_manager: int


def free_ports(count: int = 3, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports the kernel says are free now, found by binding all of them at once."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def allocate_ports(host: str = "127.0.0.1") -> Ports:
    return Ports(*free_ports(3, host))


def pick_gpu(env: dict[str, str] | None = None) -> str:
    """The GPU index a server should render on: the first the job may use (CUDA_VISIBLE_DEVICES, else
    SLURM_STEP_GPUS / SLURM_JOB_GPUS), else 0. CUDA renumbers visible devices from 0, so with
    CUDA_VISIBLE_DEVICES set the adapter is 0; the physical index is what SLURM's variables give."""
    env = os.environ if env is None else env
    if env.get("CUDA_VISIBLE_DEVICES", "").strip():
        return "0"
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        first = env.get(name, "").split(",")[0].strip()
        if first.isdigit():
            return first
    return "0"


class CarlaServer:
    """One CARLA server process group: started by `start` (or `with`), ended by `stop`."""

    def __init__(self, argv: list[str], ports: Ports, log: Path, host: str = "127.0.0.1",
                 ready_timeout: float = READY_TIMEOUT_S, env: dict[str, str] | None = None):
        self.argv, self.ports, self.log, self.host = list(argv), ports, Path(log), host
        self.ready_timeout = ready_timeout
        self.env = env
        self.process: subprocess.Popen | None = None

    @staticmethod
    def command(carla_root: str | Path, ports: Ports, gpu: str) -> list[str]:
        """The server's command line (CarlaUE4.sh of a CARLA install or the image's /home/carla)."""
        script = Path(carla_root) / "CarlaUE4.sh"
        if not script.is_file():
            raise ServerError(f"CARLA_ROOT {carla_root}: no CarlaUE4.sh there; set CARLA_ROOT to a CARLA "
                              f"{CARLA_VERSION} install or run inside the CARLA image (containers/carla.def)")
        return [str(script), "-RenderOffScreen", "-nosound", f"-carla-rpc-port={ports.rpc}",
                f"-carla-streaming-port={ports.streaming}", f"-graphicsadapter={gpu}"]

    # ------------------------------------------------------------------ life
    def start(self) -> CarlaServer:
        """Start the server and wait until it answers (ServerError otherwise; nothing is left running)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"carla server: {' '.join(self.argv)}\n".encode())
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

    def alive(self) -> bool:
        """The server still runs (a route that finds it dead is Failed - Simulation crashed)."""
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """End the server's whole process group: SIGTERM, then SIGKILL after STOP_GRACE_S."""
        end_group(self.process, STOP_GRACE_S)

    def __enter__(self) -> CarlaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
