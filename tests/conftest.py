"""Shared by every test file: how to run a command (run_tool, run_bin, start_tool), and fixtures: a real town
made with SUMO, real route files for it, a collected root, its buckets and cache, and a tiny pre-trained and
post-trained model (each made once per session); at the end of the run, any process the tests left running is
ended (pytest_unconfigure)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import live_processes
from slurm_cluster import slurm, slurm_accounting  # noqa: F401  (session fixtures: a real SLURM)

TESTS = Path(__file__).resolve().parent  # this folder: the stand-ins, golden files and shared helpers
REPO = TESTS.parent
BIN = REPO / "bin"
PYTHON = sys.executable

#: Settings a user may have exported that change what a command does: no test inherits them by accident
#: (a test that wants one passes it in `env`).
USER_SETTINGS = ("DATA_ROOT", "DRIVEKIT_DEBUG", "DRIVEKIT_IMAGES")


def tool_env(env: dict | None = None) -> dict[str, str]:
    """This process's environment without USER_SETTINGS, then `env` on top."""
    return {**{k: v for k, v in os.environ.items() if k not in USER_SETTINGS}, **(env or {})}


def run_tool(*args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 300,
             check: bool = False) -> subprocess.CompletedProcess:
    """Run a command as a user would (argument list, no shell, from the checkout); text output.
    check=True fails the test with the command's output when it exits non-zero."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd or REPO, env=tool_env(env), capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run_bin(name: str, *args: str | Path, bin_dir: Path = BIN, **kwargs) -> subprocess.CompletedProcess:
    """A bin/ wrapper as a user types it: bin/NAME ARGS... (`bin_dir`: the bin/ of another checkout)."""
    return run_tool(bin_dir / name, *args, **kwargs)


def start_tool(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    """run_tool without waiting: for a test that signals the command or watches it work."""
    return subprocess.Popen([str(a) for a in args], cwd=cwd or REPO, env=tool_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_until(predicate, timeout: float, what: str):
    """Poll `predicate` until it returns something true (returned), else fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="session")
def town_dir(tmp_path_factory) -> Path:
    """A routes folder with a 3x3 grid town in towns/town.xodr."""
    d = tmp_path_factory.mktemp("routes")
    run_tool(PYTHON, "-m", "tools.collect", "town", "--out", str(d / "towns" / "town.xodr"), "--grid", "3x3",
             check=True)
    return d


@pytest.fixture(scope="session")
def carla_towns() -> Path:
    """CARLA's real towns (all twelve, Town01 .. Town15, as OpenDRIVE): `make towns` extracts them from the py123d
    wheel into .cache/carla-towns; make test passes the folder as DRIVEKIT_CARLA_TOWNS."""
    folder = Path(os.environ.get("DRIVEKIT_CARLA_TOWNS") or REPO / ".cache" / "carla-towns")
    if not (folder / "Town10HD.xodr").is_file():
        pytest.fail(f"no CARLA towns in {folder}: run `make towns` (make test does)")
    return folder


@pytest.fixture(scope="session")
def town_xodr(town_dir) -> Path:
    return town_dir / "towns" / "town.xodr"


@pytest.fixture(scope="session")
def short_routes(tmp_path_factory, town_xodr) -> Path:
    """A folder with 2 short routes (150 to 250 m) and the town in towns/."""
    d = tmp_path_factory.mktemp("short-routes")
    run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", str(town_xodr), "--count", "2", "--out", str(d),
             "--min-length", "150", "--max-length", "250", "--seed", "3", check=True)
    return d


def progress_table(stdout: str) -> dict[str, list[str]]:
    """Rows of the progress table by their first column: [total, finished, failed, running, pending, rate]."""
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[1].isdigit():
            rows[parts[0]] = parts[1:]
    return rows


def tree(root: Path) -> dict[str, int]:
    """File and folder names with their mtimes: what "nothing changed" compares."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="session")
def collected_root(tmp_path_factory, town_xodr) -> Path:
    """A dataset root with 4 short route runs collected by bin/collect, all finished. Read-only: copy it
    (copy_root) before changing anything."""
    d = tmp_path_factory.mktemp("collected")
    routes = d / "routes"
    run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", str(town_xodr), "--count", "4", "--out",
             str(routes), "--min-length", "120", "--max-length", "200", "--seed", "21", check=True)
    run_bin("collect", str(routes), "--root", str(d / "root"), "--workers", "2", "--vehicles", "10", check=True)
    return d / "root"

def read_only(root: Path, *command: str | Path) -> list[str]:
    """`command` seeing `root` read-only: a read-only bind mount in a private mount namespace (we are root
    here, and root writes through file modes); a user who is not root gets the modes."""
    if os.geteuid() != 0:
        for p in [root, *root.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
        return [str(c) for c in command]
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh", str(root), *[str(c) for c in command]]


def file_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by its relative path, with its bytes: what "the same, byte for byte" compares."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_root(root: Path, dest: Path) -> Path:
    """A private copy of a dataset root for a test that changes it."""
    import shutil

    return Path(shutil.copytree(root, dest, symlinks=True))


# ----------------------------------------------------------------------------- training and evaluation

#: The tiny run every training test starts from; a test adds or overrides keys.
TINY = ["batch_size=4", "log_every=1", "image_every=2", "val_samples=8", "warmup_steps=1", "save_every=2"]


def train(phase: str, root: Path, logdir: Path, *keys: str, cwd: Path | None = None,
          timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m tools.train PHASE` of the tiny run (TINY, then `keys`) on `root`, into `logdir`."""
    return run_tool(PYTHON, "-m", "tools.train", phase, f"root={root}", f"logdir={logdir}", *TINY, *keys,
                    cwd=cwd, timeout=timeout)


@pytest.fixture(scope="session")
def train_root(tmp_path_factory, collected_root) -> Path:
    """A copy of the collected root with its buckets and cache built by the real tools. Read-only."""
    root = copy_root(collected_root, tmp_path_factory.mktemp("train") / "root")
    run_tool(PYTHON, "-m", "tools.buckets", "build", "--root", str(root), check=True)
    run_tool(PYTHON, "-m", "tools.cache", "build", "--root", str(root), check=True)
    return root


@pytest.fixture(scope="session")
def pretrained(train_root, tmp_path_factory) -> Path:
    """A pre-training run of 4 steps saving at 2 (the uninterrupted run of the smoke path). Read-only."""
    logdir = tmp_path_factory.mktemp("runs") / "pretrain"
    proc = train("pretrain", train_root, logdir, "max_steps=4")
    assert proc.returncode == 0, proc.stderr
    return logdir


@pytest.fixture(scope="session")
def posttrained(train_root, pretrained, tmp_path_factory) -> Path:
    """A post-training run of 2 steps from `pretrained` (one checkpoint, step 2). Read-only."""
    logdir = tmp_path_factory.mktemp("runs") / "posttrain"
    proc = train("posttrain", train_root, logdir, "max_steps=2", "val_samples=4", f"load={pretrained}")
    assert proc.returncode == 0, proc.stderr
    return logdir


# ----------------------------------------------------------------------------- running in parallel

#: The fixtures of tests/slurm_cluster.py: the tests that ask for one (directly or through another fixture) share
#: one process when pytest-xdist runs the suite in several (make test: -n TEST_WORKERS --dist loadgroup), so the
#: session's clusters start once; they mostly wait on the cluster, and the other tests run beside them.
SLURM_FIXTURES = ("slurm", "slurm_accounting")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(name in item.fixturenames for name in SLURM_FIXTURES):
            item.add_marker(pytest.mark.xdist_group("slurm"))


# ----------------------------------------------------------------------------- the end of the run

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A child process this run started that is still alive now (a pool worker of a test that failed or timed
    out) would keep the interpreter from exiting: multiprocessing and concurrent.futures join their workers at
    exit, and the run would hang after its summary until CI's limit. End each one, by its pid, and say so."""
    for child in [p for p in live_processes() if p.ppid == os.getpid()]:
        print(f"conftest: ending process {child.pid} that the test run left running: {child.cmdline[:200]}",
              file=sys.stderr)
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
