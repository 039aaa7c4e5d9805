"""The test run itself ends: a child process a failed test left behind does not hold the run open after its
summary (conftest.pytest_unconfigure ends it by pid)."""

import subprocess
import sys
import time

from conftest import REPO, tool_env

LEAVES_A_WORKER = '''
import multiprocessing
import time


def test_leaves_a_worker_running():
    # Not a daemon: multiprocessing joins it when the interpreter exits.
    multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,)).start()
'''


def test_a_run_that_left_a_worker_running_ends_after_its_summary_and_names_the_worker(tmp_path):
    (tmp_path / "test_leaves.py").write_text(LEAVES_A_WORKER)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path / "test_leaves.py")],
                          cwd=tmp_path, env=tool_env({"PYTHONPATH": str(REPO / "tests")}), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert time.monotonic() - start < 60
    lines = [line for line in proc.stderr.splitlines() if line.startswith("conftest: ending process")]
    assert len(lines) == 1 and "that the test run left running" in lines[0], proc.stderr
