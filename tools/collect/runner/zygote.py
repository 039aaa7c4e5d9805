"""A worker's town, loaded once: a zygote process per town that imports everything a route run needs and loads the
town (carla.Map, lane graph, the SUMO network's lanes, junctions and signals), then forks one child per route run.

A forked child is today's child process in all that matters: it runs the same command line (`python -m
tools.collect run ...`, a policy's `python -m tools.evaluate route ...`) through runpy, in a session and process
group of its own, its stdout and stderr appended to the run's attempt log, holding the run's lock that the collector
claimed and handed over (tools.dataset.claims.LOCK_FD_ENV: the locked file's descriptor travels to the zygote
over a Unix socket, and the zygote closes its copy as soon as it has forked). It finds the town kept
(tools.collect.base.town.open_town) and pays only its own part: the route's plan, its regional scene, SUMO's start
(libsumo is one simulation per process: each child starts its own). A child that crashes (an exception, os._exit,
SIGSEGV) ends alone: the zygote reaps it and reports its exit status, and the next child is forked from the
untouched zygote. Each child dies with the zygote and the zygote with the collector (PR_SET_PDEATHSIG); a zygote
that dies is reported as the death by SIGKILL of the runs it had started, and the collector starts a new one.

The protocol on the socket (SOCK_SEQPACKET, one JSON message a packet): the collector sends
{"run": N, "argv": [module, command, ...], "log": PATH} with the lock's descriptor attached; the zygote answers
{"run": N, "pid": P} once forked, {"run": N, "status": S} once reaped (S as subprocess's returncode: -signal
when killed), and {"run": N, "signal": SIG} asks it to signal run N's group (a run not forked yet).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import logging
import os
import runpy
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

from tools.collect.base.processes import die_with_parent
from tools.core import files
from tools.core.atomic import process_alive
from tools.dataset.claims import LOCK_FD_ENV

#: The size of one protocol message at most (a route run's command line).
_PACKET = 1 << 16
#: How often the zygote looks for ended children between messages.
_REAP_S = 0.05


# ----------------------------------------------------------------------------- the collector's side


class RouteRun:
    """A route run forked by a zygote, as much of subprocess.Popen as the collector uses: pid (None until forked),
    poll(), wait(), returncode; signal_group(sig) signals its process group."""

    def __init__(self, zygote: Zygote, number: int):
        self.zygote = zygote
        self.number = number
        self.pid: int | None = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.zygote.pump()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"route run {self.number}", timeout)
            self.zygote.pump(block=0.05)
        return self.returncode

    def signal_group(self, sig: int) -> None:
        """Signal the run's process group (its pid: a session of its own); a run not forked yet, through its zygote."""
        if self.poll() is not None:
            return
        if self.pid is None:
            self.zygote.send({"run": self.number, "signal": int(sig)})
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


class Zygote:
    """A zygote process of one town for a collector (see the module's docstring): start it, then `spawn` route
    runs; `close` ends it."""

    def __init__(self, town: Path, root: Path, preload: tuple[str, ...] = ()):
        """`preload`: modules the runs' agent imports (config.ROUTE_RUN_PRELOAD), imported once by the zygote."""
        self.town = Path(town)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The root in its command line says whose it is (ps); its own session: our signals reach it by its group.
        argv = [sys.executable, "-m", "tools.collect.runner.zygote", str(self.town), str(root), str(theirs.fileno()),
                *preload]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True,
                                     preexec_fn=functools.partial(die_with_parent, os.getpid()))
        theirs.close()
        self.sock = ours
        self.sock.setblocking(False)
        self.runs: dict[int, RouteRun] = {}
        self._numbers = 0
        self.dead = False

    def spawn(self, argv: list[str], log: Path, lock_fd: int) -> RouteRun:
        """Have the zygote fork a route run of `argv` ([module, command, args...]) with stdout and stderr appended
        to `log`, holding `lock_fd` (sent over the socket: the caller may close its copy once this returns)."""
        self._numbers += 1
        run = RouteRun(self, self._numbers)
        self.runs[run.number] = run
        if not self.send({"run": run.number, "argv": argv, "log": str(log)}, fds=[lock_fd]):
            run.returncode = -signal.SIGKILL  # a dead zygote: this run never started
        return run

    def send(self, message: dict, fds: list[int] | None = None) -> bool:
        if self.dead:
            return False
        try:
            self.sock.setblocking(True)
            socket.send_fds(self.sock, [json.dumps(message).encode()], fds or [])
            return True
        except OSError:
            self._died()
            return False
        finally:
            if not self.dead:
                self.sock.setblocking(False)

    def pump(self, block: float = 0.0) -> None:
        """Read what the zygote said (forks, exits); wait at most `block` seconds for the first message."""
        if self.dead:
            return
        if block:
            self.sock.settimeout(block)
        try:
            while True:
                try:
                    data = self.sock.recv(_PACKET)
                except (BlockingIOError, TimeoutError):
                    return
                except OSError:
                    data = b""
                if not data:  # the zygote ended (killed, or crashed): so did every run it had started
                    self._died()
                    return
                msg = json.loads(data)
                run = self.runs.get(msg["run"])
                if run is None:
                    continue
                if "pid" in msg:
                    run.pid = int(msg["pid"])
                if "status" in msg:
                    run.returncode = int(msg["status"])
                    del self.runs[run.number]
                self.sock.setblocking(False)
        finally:
            if not self.dead:
                self.sock.setblocking(False)

    def _died(self) -> None:
        self.dead = True
        self.sock.close()
        # Its children die with it (PR_SET_PDEATHSIG: SIGKILL), a moment later: they are gone, their runs' locks
        # released, before their ends are reported (the collector then finds the runs crashed, not running).
        deadline = time.monotonic() + 30.0  # (a process in uninterruptible sleep dies when it wakes)
        for run in self.runs.values():
            if run.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(run.pid, signal.SIGKILL)
                while not _gone(run.pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
            run.returncode = -signal.SIGKILL
        self.runs.clear()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)

    @property
    def busy(self) -> bool:
        """Whether a run it started (or is to start) has not ended yet."""
        self.pump()
        return bool(self.runs)

    def close(self, grace: float = 10.0) -> None:
        """End the zygote: its runs (none, normally) die with it."""
        if not self.dead:
            self.sock.close()  # it exits when the socket closes
            self.dead = True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for run in self.runs.values():
            if run.returncode is None:
                run.returncode = -signal.SIGKILL
        self.runs.clear()


def _gone(pid: int) -> bool:
    """Whether process `pid` has ended with all its threads, its files (the run's lock among them) closed: a killed
    process's first thread turns zombie while its other threads may still be exiting and holding its files."""
    if not process_alive(pid):
        try:
            return os.listdir(f"/proc/{pid}/task") == [str(pid)]
        except OSError:  # reaped (or no /proc)
            return True
    return False


# ----------------------------------------------------------------------------- the zygote's side


def _load(xodr: Path, preload: tuple[str, ...] = ()) -> str:
    """Import what a route run imports (and its agent's `preload` modules) and keep the town loaded; a line for the
    runs' logs."""
    started = time.perf_counter()
    import fire  # noqa: F401  (the command line's; tools.collect.__main__ itself runs in each child, as `-m` runs it)
    import libsumo  # noqa: F401  (imported, never started: each child starts its own simulation)

    import tools.collect.runner.attempt  # noqa: F401  (what a route run imports)

    for module in preload:  # imported, nothing run: e.g. torch starts no thread until it computes
        importlib.import_module(module)
    from tools.collect.base.town import Town, keep_town
    from tools.collect.sensors.render import warm_up
    from tools.collect.sensors.scene import load_town_scene

    imported = time.perf_counter() - started
    town = Town(xodr)
    parts = town.load()
    load_town_scene(town)
    keep_town(town)
    parts["kernels"] = warm_up(town)  # numba's compiled renderer, loaded here once rather than in every run
    seconds = time.perf_counter() - started
    also = f" (with {', '.join(preload)})" if preload else ""
    return (f"town {town.name} loaded once by this worker (zygote pid {os.getpid()}) in {seconds:.1f} s: imports "
            f"{imported:.1f} s{also}, " + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in parts.items()))


def _child(argv: list[str], log: str, lock_fd: int, zygote: int, note: str) -> None:
    """In the forked child: become today's route-run process, run its command, exit with its status."""
    code = 1
    try:
        os.setsid()  # a session and process group of its own, as the collector starts a child
        die_with_parent(zygote)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
        out = files.open_for_writing(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never through a link
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ[LOCK_FD_ENV] = str(lock_fd)
        print(f"# {note}", file=sys.stderr, flush=True)
        module, *args = argv
        sys.argv = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
    except BaseException:  # noqa: BLE001 (whatever it was, it ends this run only, as an uncaught exception would)
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(xodr: Path, sock: socket.socket, preload: tuple[str, ...] = ()) -> None:
    """The zygote: load the town, then fork a route run per request until the collector closes the socket."""
    me = os.getpid()
    try:
        note = _load(xodr, preload)
    except Exception as e:  # noqa: BLE001 (a town that does not load: each run loads it and says why in its log)
        note = f"town {xodr} not kept by this worker ({type(e).__name__}); the route run loads it"
    forked = 0
    children: dict[int, int] = {}  # pid -> run number
    sock.settimeout(_REAP_S)
    while True:
        while children:  # report the children that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock.send(json.dumps({"run": children.pop(pid), "status": os.waitstatus_to_exitcode(status)}).encode())
        try:
            data, fds, _, _ = socket.recv_fds(sock, _PACKET, 1)
        except TimeoutError:
            continue
        if not data:  # the collector closed the socket (or died): end any run still going, then ourselves
            for pid in children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            return
        msg = json.loads(data)
        if "signal" in msg:
            for pid, number in children.items():
                if number == msg["run"]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, msg["signal"])
            continue
        forked += 1
        lock_fd = fds[0] if fds else -1
        pid = os.fork()
        if pid == 0:
            sock.close()
            _child(msg["argv"], msg["log"], lock_fd, me, f"{note}; route run {forked} forked from it")
        if lock_fd >= 0:
            os.close(lock_fd)  # from now on the child alone holds the run's lock
        children[pid] = msg["run"]
        sock.send(json.dumps({"run": msg["run"], "pid": pid}).encode())


if __name__ == "__main__":
    _town, _root, _fd = sys.argv[1:4]  # the town, the collector's root (for ps), the socket's descriptor
    serve(Path(_town), socket.socket(fileno=int(_fd)), tuple(sys.argv[4:]))  # then the modules to import
