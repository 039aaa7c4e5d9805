"""A stand-in for CarlaUE4.sh (no CARLA server runs here): takes the server's flags and answers the RPCs the
collector's checks make, `version` (Client.get_server_version) and `get_available_maps`
(Client.get_available_maps; the RPC names of LibCarla/source/carla/client/detail/Client.cpp), in CARLA's own wire
format (msgpack-rpc over TCP as rpclib speaks it; CARLA wraps a result in its Response variant: [[1, value]]).
Verified against the carla 0.9.16 client.

Told what to do by the environment: STANDIN_MODE = ok (default) | hang (never listens) | crash (exits 3) |
version (answers 0.9.15); STANDIN_DELAY seconds before it listens or crashes; STANDIN_CHILD=1 starts a child
process that sleeps (the group must end it too); STANDIN_MAPS the maps it has, comma-separated (default
DEFAULT_MAPS); STANDIN_PID_FILE a file to write its pid (and its child's, one a line) into, and the same
into STANDIN_PID_FILE.<its RPC port> (the stand-in evaluator kills the server of its own --port).

Like CARLA it binds its RPC, streaming and secondary ports (the defaults RPC + 1 and RPC + 2 where its flags name
none: CarlaSettings.cpp), each as Boost.Asio's acceptor does (SO_REUSEADDR, every address, listening), and a port
it cannot bind ends it as the C++ runtime ends CARLA: the system_error's message, exit 134.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import msgpack

#: What a CARLA 0.9.16 package answers (maps as /Game/Carla/Maps/<Town>, large maps in a folder of their own).
DEFAULT_MAPS = "/Game/Carla/Maps/Town01,/Game/Carla/Maps/Town01_Opt,/Game/Carla/Maps/Town10HD_Opt," \
               "/Game/Carla/Maps/Town12/Town12"


def acceptor(port: int) -> socket.socket:
    """A listening socket as Boost.Asio's basic_socket_acceptor(io_context, endpoint) makes one."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", port))
    s.listen(8)
    return s


def serve(server: socket.socket, answers: dict) -> None:
    print(f"listening at {time.time():.3f}", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=answer, args=(conn, answers), daemon=True).start()


def answer(conn: socket.socket, answers: dict) -> None:
    unpacker = msgpack.Unpacker(raw=False)
    while True:
        data = conn.recv(65536)
        if not data:
            return
        unpacker.feed(data)
        for kind, msgid, method, _params in unpacker:
            if kind == 0:  # a request: [0, id, method, params] -> [1, id, error, result]
                result = [[1, answers[method]]] if method in answers else [[0, {"message": f"stand-in: no {method}"}]]
                conn.sendall(msgpack.packb([1, msgid, None, result]))


def main() -> None:
    flags = dict(arg.lstrip("-").split("=", 1) for arg in sys.argv[1:] if "=" in arg)
    mode = os.environ.get("STANDIN_MODE", "ok")
    pids = [os.getpid()]
    if os.environ.get("STANDIN_CHILD") == "1":
        pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid)
    if os.environ.get("STANDIN_PID_FILE"):  # the last server started, and this one's by its RPC port
        for path in (os.environ["STANDIN_PID_FILE"], f"{os.environ['STANDIN_PID_FILE']}.{flags['carla-rpc-port']}"):
            with open(path, "w") as f:
                f.write("".join(f"{pid}\n" for pid in pids))
    print(f"stand-in CARLA server: {' '.join(sys.argv[1:])} (mode {mode})", flush=True)
    time.sleep(float(os.environ.get("STANDIN_DELAY", "0")))
    if mode == "crash":
        sys.exit(3)
    if mode == "hang":
        time.sleep(600)
    maps = [m for m in os.environ.get("STANDIN_MAPS", DEFAULT_MAPS).split(",") if m]
    rpc = int(flags["carla-rpc-port"])
    ports = [rpc, int(flags.get("carla-streaming-port", rpc + 1)), int(flags.get("carla-secondary-port", rpc + 2))]
    try:
        sockets = [acceptor(port) for port in ports]
    except OSError as e:
        print("terminate called after throwing an instance of 'clmdep_asio::system_error'\n"
              f"  what():  bind: {os.strerror(e.errno)}", flush=True)
        sys.exit(134)
    print(f"stand-in CARLA server: bound {' '.join(map(str, ports))}", flush=True)
    serve(sockets[0], {"version": "0.9.15" if mode == "version" else "0.9.16", "get_available_maps": maps})


if __name__ == "__main__":
    main()
