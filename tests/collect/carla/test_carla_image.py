"""What the CARLA image's build does with its base image (containers/carla-image.sh, run by containers/carla.def's
%post and %test): find where CARLA lies, and provide the NVIDIA Vulkan ICD file `apptainer --nv` does not. No
image is built here: the script runs against fake release trees and files, and the definition is read."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

SCRIPT = REPO / "containers" / "carla-image.sh"
DEFINITION = REPO / "containers" / "carla.def"


def image_sh(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=10)


def release(folder: Path) -> Path:
    """A fake CARLA release: an executable CarlaUE4.sh and PythonAPI/carla/dist."""
    (folder / "PythonAPI" / "carla" / "dist").mkdir(parents=True)
    (folder / "CarlaUE4.sh").write_text("#!/bin/sh\n")
    (folder / "CarlaUE4.sh").chmod(0o755)
    return folder


@pytest.mark.parametrize("layout", ["workspace", "home"])
def test_the_root_is_found_in_the_0916_workspace_layout_and_the_older_home_carla_one(tmp_path, layout):
    workspace, home = tmp_path / "workspace", tmp_path / "home" / "carla"
    found = release(workspace if layout == "workspace" else home)
    proc = image_sh("root", workspace, home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{found}\n" and proc.stderr == ""


def test_the_first_root_that_holds_a_release_wins_and_a_half_tree_is_passed_over(tmp_path):
    half = tmp_path / "workspace"
    (half / "PythonAPI").mkdir(parents=True)
    (half / "CarlaUE4.sh").write_text("")  # no dist, and not executable
    home = release(tmp_path / "home" / "carla")
    assert image_sh("root", half, home).stdout == f"{home}\n"
    assert image_sh("root", release(tmp_path / "other"), home).stdout == f"{tmp_path / 'other'}\n"


def test_no_release_in_either_place_fails_the_build_in_one_line(tmp_path):
    proc = image_sh("root", tmp_path / "workspace", tmp_path / "home" / "carla")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"carla-image.sh: no CARLA release in {tmp_path}/workspace {tmp_path}/home/carla (none holds both "
        "CarlaUE4.sh and PythonAPI/carla/dist); is the base image a carlasim/carla release?"]


def test_the_vulkan_icd_file_is_written_when_absent_and_names_the_driver_library_nv_binds(tmp_path):
    icd = tmp_path / "etc" / "vulkan" / "icd.d" / "nvidia_icd.json"
    proc = image_sh("vulkan-icd", icd, tmp_path / "usr" / "share" / "vulkan" / "icd.d" / "nvidia_icd.json")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(icd.read_text())
    assert manifest["file_format_version"] == "1.0.0"
    assert manifest["ICD"]["library_path"] == "libGLX_nvidia.so.0"
    assert re.fullmatch(r"1\.\d+\.\d+", manifest["ICD"]["api_version"])
    assert oct(icd.stat().st_mode & 0o777) == "0o644" and not list(icd.parent.glob("*.tmp"))


@pytest.mark.parametrize("which", [0, 1])
def test_an_icd_file_the_base_image_has_is_left_alone(tmp_path, which):
    files = [tmp_path / "etc" / "nvidia_icd.json", tmp_path / "usr" / "nvidia_icd.json"]
    files[which].parent.mkdir(parents=True)
    files[which].write_text("theirs")
    proc = image_sh("vulkan-icd", *files)
    assert proc.returncode == 0 and "nothing written" in proc.stdout
    assert files[which].read_text() == "theirs" and not files[1 - which].exists()


def test_wrong_usage_exits_2():
    assert image_sh().returncode == 2 and image_sh("nonsense", "x").returncode == 2


def section(name: str) -> str:
    return DEFINITION.read_text().split(f"\n%{name}", 1)[1].split("\n%", 1)[0]


def test_the_definition_finds_carla_in_both_places_provides_the_icd_and_hardcodes_no_root():
    assert "containers/carla-image.sh /opt/drivekit/carla-image.sh" in section("files")
    post = section("post")
    assert 'carla_root="$(sh /opt/drivekit/carla-image.sh root /workspace /home/carla)"' in post
    assert 'echo "export CARLA_ROOT=$carla_root" >> "${APPTAINER_ENVIRONMENT:-$SINGULARITY_ENVIRONMENT}"' in post
    assert "carla-image.sh vulkan-icd /etc/vulkan/icd.d/nvidia_icd.json" in post
    assert "CARLA_ROOT" not in section("environment")  # written where it was found, not assumed
    test = section("test")
    assert 'carla-image.sh root "$CARLA_ROOT"' in test and "nvidia_icd.json" in test
    assert "/home/carla/" not in DEFINITION.read_text().split("%post", 1)[1].split("%help", 1)[0]
