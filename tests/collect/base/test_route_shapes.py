"""Routes like the field's (leaderboard 2.0: one route per file, 150 to 700 m, dense waypoints, one <scenario>),
traced by the planner as they were walked, on a generated town and on CARLA's own towns; and bad input (a town
file that is not OpenDRIVE, a route off every road) refused in one line naming the file, exit 2, nothing written."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import PYTHON, run_tool, tree

from tools.collect.base.routes import Route, read_routes, write_route
from tools.collect.base.town import Town, TownError
from tools.expert.planner import RoutePlanner

EXIT_TOOL_ERROR = 2


def _routes(town: Path, out: Path, *flags: str, timeout: float = 300):
    return run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", str(town), "--out", str(out), *flags,
                    timeout=timeout)


def _route_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*.xml") if "towns" not in p.parts)


def _check_shape(files: list[Path], town: Town, lo: float, hi: float) -> None:
    """One route and one scenario per file; waypoints about 2 m apart outside junctions, none inside one; the
    planner's trace of the waypoints is the walked path (no detour round a block)."""
    import carla

    planner = RoutePlanner(town.carla_map)
    for f in files:
        (route,) = read_routes(f)
        assert len(route.scenarios) == 1 and f.parent.name == route.scenario
        gaps = np.linalg.norm(np.diff(route.waypoints[:, :2], axis=0), axis=1)
        assert np.median(gaps) == pytest.approx(2.0, abs=0.3), f"{f}: waypoints not dense"
        for x, y, _ in route.waypoints:
            w = town.carla_map.get_waypoint(carla.Location(float(x), float(y), 0.0),
                                            lane_type=carla.LaneType.Driving)
            assert not w.is_junction, f"{f}: a waypoint ({x}, {y}) inside a junction"
        traced = planner.trace(route.waypoints)
        assert traced.length <= 1.1 * gaps.sum() + 5.0, f"{f}: traced {traced.length:.0f} m round a detour"
        assert lo - 5.0 <= traced.length <= hi + 30.0, f"{f}: {traced.length:.0f} m"


def test_default_routes_are_150_to_700_m_dense_with_one_scenario_each(tmp_path, town_xodr):
    out = tmp_path / "routes"
    proc = _routes(town_xodr, out, "--count", "6", "--seed", "2",
                   "--scenarios", "Accident,SignalizedJunctionLeftTurn,DynamicObjectCrossing")
    assert proc.returncode == 0, proc.stderr
    files = _route_files(out)
    assert len(files) == 6
    assert {f.parent.name for f in files} == {"Accident", "SignalizedJunctionLeftTurn", "DynamicObjectCrossing"}
    _check_shape(files, Town(out / "towns" / "town.xodr"), 150.0, 700.0)


def test_spacing_flag_thins_the_waypoints_and_is_checked(tmp_path, town_xodr):
    proc = _routes(town_xodr, tmp_path / "r", "--count", "2", "--spacing", "10", "--max-length", "300")
    assert proc.returncode == 0, proc.stderr
    for f in _route_files(tmp_path / "r"):
        gaps = np.linalg.norm(np.diff(read_routes(f)[0].waypoints[:, :2], axis=0), axis=1)
        assert np.median(gaps) == pytest.approx(10.0, abs=1.0)
    proc = _routes(town_xodr, tmp_path / "bad", "--count", "2", "--spacing", "0.5")
    assert proc.returncode == EXIT_TOOL_ERROR and "--spacing" in proc.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name", ["Town03", "Town04", "Town10HD"])
def test_dense_routes_of_carla_towns_trace_as_walked(tmp_path, carla_towns, name):
    town = tmp_path / "towns" / f"{name}.xodr"
    town.parent.mkdir()
    shutil.copyfile(carla_towns / f"{name}.xodr", town)
    out = tmp_path / "routes"
    proc = _routes(town, out, "--count", "3", "--seed", "5", "--scenarios", "Accident,SignalizedJunctionLeftTurn",
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    _check_shape(_route_files(out), Town(town), 150.0, 700.0)


# ----------------------------------------------------------------------------- towns that are not OpenDRIVE

BAD_TOWNS = {
    "text": (b"just some notes about a town\n", "not OpenDRIVE: not XML"),
    "empty": (b"", "is empty"),
    "gzip": (gzip.compress(b"<?xml version='1.0'?><OpenDRIVE><road id='1'/></OpenDRIVE>"), "gzip-compressed"),
    "other-xml": (b"<?xml version='1.0'?>\n<routes><!-- <OpenDRIVE> --></routes>\n", "root element is <routes>"),
    "cut-short": (b"<?xml version='1.0'?>\n<OpenDRIVE><header/><road id='1' length='10'>", "cut short"),
    "no-roads": (b"<?xml version='1.0'?>\n<OpenDRIVE><header/></OpenDRIVE>\n", "has no <road>"),
    "binary": (bytes(range(256)) * 4, "binary file"),
}


def _one_line_naming(stderr: str, what: Path, reason: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert str(what) in lines[0] and reason in lines[0], stderr


@pytest.mark.parametrize("kind", sorted(BAD_TOWNS))
def test_town_that_is_not_opendrive_is_refused_by_town(tmp_path, kind):
    data, reason = BAD_TOWNS[kind]
    bad = tmp_path / "town.xodr"
    bad.write_bytes(data)
    with pytest.raises(TownError) as e:
        Town(bad)
    assert str(bad) in str(e.value) and reason in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["town.xodr"]  # no SUMO network beside it


@pytest.mark.parametrize("kind", ["text", "empty", "gzip", "other-xml", "cut-short"])
def test_routes_command_refuses_a_town_that_is_not_opendrive(tmp_path, kind):
    data, reason = BAD_TOWNS[kind]
    bad = tmp_path / "town.xodr"
    bad.write_bytes(data)
    out = tmp_path / "routes"
    proc = _routes(bad, out, "--count", "2")
    assert proc.returncode == EXIT_TOOL_ERROR, proc.stderr
    _one_line_naming(proc.stderr, bad, reason)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["town.xodr"]


def test_routes_command_refuses_a_missing_town_and_a_folder(tmp_path):
    for town, reason in ((tmp_path / "nope.xodr", "does not exist"), (tmp_path, "is a folder")):
        proc = _routes(town, tmp_path / "routes", "--count", "2")
        assert proc.returncode == EXIT_TOOL_ERROR
        _one_line_naming(proc.stderr, town, reason)
        assert not (tmp_path / "routes").exists()


def _routes_dir_with(tmp_path: Path, town_bytes: bytes, waypoints: np.ndarray) -> tuple[Path, Path]:
    d = tmp_path / "routes"
    (d / "towns").mkdir(parents=True)
    (d / "towns" / "town.xodr").write_bytes(town_bytes)
    f = d / "Accident" / "town_0000.xml"
    write_route(f, Route("0", "town", waypoints, [{"name": "Accident_1", "type": "Accident",
                                                   "trigger": [*waypoints[0], 0.0]}]))
    return d, f


@pytest.mark.parametrize("command", ["run", "collect"])
@pytest.mark.parametrize("kind", ["text", "gzip", "other-xml"])
def test_run_and_collect_refuse_a_route_whose_town_is_not_opendrive(tmp_path, command, kind):
    data, reason = BAD_TOWNS[kind]
    d, f = _routes_dir_with(tmp_path, data, np.array([[1.6, -50.0, 0.0], [1.6, -60.0, 0.0]]))
    root = tmp_path / "root"
    before = tree(d)
    target = f if command == "run" else d
    proc = run_tool(PYTHON, "-m", "tools.collect", command, str(target), "--root", str(root))
    assert proc.returncode == EXIT_TOOL_ERROR, proc.stderr
    _one_line_naming(proc.stderr, d / "towns" / "town.xodr", reason)
    assert not root.exists() and tree(d) == before


@pytest.mark.parametrize("command", ["run", "collect"])
def test_run_and_collect_refuse_a_route_off_every_road(tmp_path, town_xodr, command):
    """Waypoint 1 lies 500 m from any lane: carla.Map projects it onto some road all the same, so the distance of
    the projection is what tells. Nothing is written, an existing root is left as it was."""
    town = Town(town_xodr)
    xmin, ymin, xmax, ymax = town.bounds
    lane = next(lane for lane in town.lanes if not lane.internal and len(lane.centerline) >= 2)
    (x0, y0), (x1, y1) = lane.centerline[0], lane.centerline[-1]
    off = (xmax + 500.0, (ymin + ymax) / 2)
    d, f = _routes_dir_with(tmp_path, town_xodr.read_bytes(),
                            np.array([[x0, y0, 0.0], [*off, 0.0], [x1, y1, 0.0]]))
    root = tmp_path / "root"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "keep.txt").write_text("earlier work\n")
    before_root, before_routes = tree(root), {p: p.read_bytes() for p in d.rglob("*.xml")}
    target = f if command == "run" else d
    proc = run_tool(PYTHON, "-m", "tools.collect", command, str(target), "--root", str(root))
    assert proc.returncode == EXIT_TOOL_ERROR, proc.stderr
    _one_line_naming(proc.stderr, f, "waypoint 1")
    assert "from the nearest driving lane" in proc.stderr
    assert tree(root) == before_root
    assert {p: p.read_bytes() for p in d.rglob("*.xml")} == before_routes
