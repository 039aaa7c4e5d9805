"""The CARLA release of a set-up (tools/collect/carla/versions.py), what the evaluator is given of the client's
version (tools/collect/carla/evaluator.py carla_distribution) and the one line naming a package the evaluator lacks.
Runs under both clients (make test's second pass: .venv-carla15)."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from tools.collect.base.town import carla_client_version
from tools.collect.carla import check, evaluator, versions
from tools.core.errors import ToolError


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_client_says_its_own_version_without_a_server():
    assert carla_client_version() in versions.RELEASES


@pytest.mark.parametrize("leaderboard, runner, fits", [
    ("self.route = x\nCarlaDataProvider.set_ego_route(self.route)\n", "def set_ego_route(route):\n", True),
    ("self.route = x\n", "def get_hero_actor():\n", True),
    ("CarlaDataProvider.set_ego_route(self.route)\n", "def get_hero_actor():\n", False),
    ("self.route = x\n", "def set_ego_route(route):\n", False),
])
def test_the_leaderboard_must_fit_its_scenario_runner(tmp_path, leaderboard, runner, fits):
    """Leaderboard master calls set_ego_route, which only scenario_runner 0.9.16 has; leaderboard-2.0 does not, and
    0.9.16's ScenarioTriggerer would not unpack its entries."""
    lb = tree(tmp_path / "lb", {"leaderboard/scenarios/route_scenario.py": leaderboard})
    sr = tree(tmp_path / "sr", {"srunner/scenariomanager/carla_data_provider.py": runner,
                                "Docs/CHANGELOG.md": "## CARLA ScenarioRunner 0.9.15\n"})
    assert versions.leaderboard_fits(lb, sr) is fits
    if fits:
        assert versions.check_release({}, None, lb, sr, client="0.9.15").version == "0.9.15"
    else:
        fix = r"git -C \$LEADERBOARD_ROOT checkout a87a3419e9d2e0d36deb25f1f26c17edee2d1420 \(the head of "
        fix += r"leaderboard-2\.0\)"
        with pytest.raises(versions.VersionError, match=r"^carla-check: the leaderboard at LEADERBOARD_ROOT=.* does "
                                                        rf"not fit scenario_runner v0\.9\.15 .*; {fix}$"):
            versions.check_release({}, None, lb, sr, client="0.9.15", what="carla-check")


def test_carla_version_must_agree_and_be_a_release_we_run(tmp_path):
    lb, sr = tree(tmp_path / "lb", {}), tree(tmp_path / "sr", {})
    assert versions.check_release({"CARLA_VERSION": "0.9.16"}, None, lb, sr, client="0.9.16").version == "0.9.16"
    with pytest.raises(versions.VersionError, match=r"CARLA_VERSION 0\.9\.15 \(set\), the client 0\.9\.16 .*; make "
                                                    r"them all CARLA 0\.9\.15: .*pip install carla-0-9-15==0\.0\.1$"):
        versions.check_release({"CARLA_VERSION": "0.9.15"}, None, lb, sr, client="0.9.16")
    with pytest.raises(versions.VersionError, match=r"^--world=carla: CARLA_VERSION=0\.9\.13 is CARLA 0\.9\.13; "
                                                    r"drivekit runs CARLA 0\.9\.15 or 0\.9\.16$"):
        versions.check_release({"CARLA_VERSION": "0.9.13"}, None, lb, sr, client="0.9.16")


def test_the_image_reads_a_releases_pins_as_shell_assignments(capsys):
    assert versions.main(["pins", "0.9.15"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "CARLA_CLIENT='carla-0-9-15==0.0.1'", "LEADERBOARD_COMMIT=a87a3419e9d2e0d36deb25f1f26c17edee2d1420",
        "SCENARIO_RUNNER_COMMIT=d12d8bb788201ebf6f03e55b9c5169f9dcb2ea87"]
    assert versions.main(["pins", "0.9.14"]) == 1
    assert capsys.readouterr().err.strip().endswith("drivekit runs CARLA 0.9.15 or 0.9.16")


def test_the_evaluator_finds_a_carla_distribution_of_the_clients_own_version(tmp_path, monkeypatch):
    """carla-0-9-15 installs no `carla` distribution, whose version both leaderboard commits read at start."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))

    def none(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", none)
    folder = evaluator.carla_distribution()
    assert folder == tmp_path / "drivekit" / "carla-metadata" / carla_client_version() and str(folder) in sys.path
    monkeypatch.undo()
    found = [d for d in importlib.metadata.distributions(path=[str(folder)])]
    assert [(d.metadata["Name"], d.version) for d in found] == [("carla", carla_client_version())]
    assert evaluator.carla_distribution() is None or importlib.metadata.distribution("carla")  # one installed: none


@pytest.mark.parametrize("module, requirement", [("transforms3d", "transforms3d==0.4.2"),
                                                 ("py_trees", "py-trees==0.8.3"),
                                                 ("antlr4", "antlr4-python3-runtime==4.10"),
                                                 ("pkg_resources", "setuptools>=70,<82")])
def test_a_package_the_evaluator_lacks_is_one_line_with_its_pip_command(tmp_path, monkeypatch, module, requirement):
    tree(tmp_path, {"needs_it.py": f"import {module}\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ToolError) as e:
        check._import("needs_it")
    assert str(e.value) == (f"carla-check: importing needs_it needs {module}: {sys.executable} -m pip install "
                            f"'{requirement}' (every package they import: pip install -e '.[carla]' in a drivekit "
                            "checkout)")


def test_leaderboard_2_0s_route_parser_reads_scenarios_on_python_3_9_and_later(tmp_path, monkeypatch):
    """leaderboard-2.0 calls Element.getchildren() (gone since Python 3.9) on every <scenario>: the evaluator and
    carla-check give its parser elements that have it; a parser that does not call it is left alone."""
    tree(tmp_path, {"old_parser.py": "import xml.etree.ElementTree as ET\n\n\ndef tags(path):\n"
                                     "    return [c.tag for c in ET.parse(path).getroot().getchildren()]\n",
                    "new_parser.py": "import xml.etree.ElementTree as ET\n",
                    "r.xml": "<routes><route id='1'/><route id='2'/></routes>"})
    monkeypatch.syspath_prepend(str(tmp_path))
    import new_parser
    import old_parser

    with pytest.raises(AttributeError, match="getchildren"):
        old_parser.tags(tmp_path / "r.xml")
    assert evaluator.route_parser_with_getchildren(old_parser)
    assert old_parser.tags(tmp_path / "r.xml") == ["route", "route"]
    assert not evaluator.route_parser_with_getchildren(new_parser) and new_parser.ET.parse is not old_parser.ET.parse
