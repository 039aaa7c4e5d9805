"""One route run end to end in the embedded world: frames, result, determinism, skip and redo rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import PYTHON, run_tool

from tools.dataset import claims, frames, results
from tools.dataset.layout import Layout
from tools.dataset.measurements import Measurements
from tools.dataset.rig import RecordingRate, run_rate


def _route_file(short_routes):
    return sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name)[0]


def _run(route, root, *extra):
    return run_tool(PYTHON, "-m", "tools.collect", "run", "--route", str(route), "--root", str(root), *extra)


@pytest.fixture(scope="module")
def one_run(tmp_path_factory, short_routes):
    root = tmp_path_factory.mktemp("root")
    proc = _run(_route_file(short_routes), root, "--vehicles", "20")
    assert proc.returncode == 0, proc.stderr
    layout = Layout(root)
    (key,) = list(layout.iter_runs())
    return layout, key


def test_run_writes_frames_then_a_finished_result(one_run):
    layout, key = one_run
    assert results.run_state(layout, key) is results.RunState.FINISHED
    result = json.loads(layout.result_path(key).read_text())
    record = result["_checkpoint"]["records"][0]
    assert record["status"] in results.SUCCESS_STATUSES
    assert record["scores"]["score_route"] == pytest.approx(100.0)
    assert set(record["infractions"]) == set(results.INFRACTION_KEYS)
    paths = layout.frame_paths(key)
    assert len(paths) >= 10
    # 20 Hz simulation recorded at 4 Hz: frames 0.25 s apart, numbered from 0 without gaps.
    times = []
    for i, p in enumerate(paths):
        assert p.name == f"{i:05d}.msgpack"
        times.append(frames.read_frame(p, sensors=False)["measurements"]["time"])
    assert np.allclose(np.diff(times), 0.25, atol=1e-6)
    assert record["meta"]["duration_game"] >= times[-1]
    settings = json.loads(layout.run_settings(key).read_text())
    assert settings["settings"]["vehicles"] == 20 and "rig" in settings and "dense_route" in settings
    assert run_rate(settings) == RecordingRate() and settings["frame_dt"] == RecordingRate().frame_dt == 0.25


def test_every_frame_holds_sensors_measurements_and_boxes(one_run):
    layout, key = one_run
    frame = frames.read_frame(layout.frame_paths(key)[3])
    sensors = frame["sensors"]
    assert {"rgb_front", "semantics_front", "depth_front", "lidar", "lidar_labels", "bev"} <= set(sensors)
    assert sensors["rgb_front"].ndim == 3 and sensors["rgb_front"].dtype == np.uint8
    assert sensors["lidar"].shape[1] == 4 and len(sensors["lidar"]) == len(sensors["lidar_labels"])
    Measurements.from_dict(frame["measurements"])  # the frame contract's measurements and boxes
    assert all(b.id != 0 and len(b.center_ego) == 3 for b in frames.read_boxes(frame))
    m = frame["measurements"]
    for k in ("ego", "ego_opendrive", "speed", "acceleration", "target_speed", "command", "target_point",
              "route", "light", "leader", "light_hazard", "vehicle_hazard", "weather"):
        assert k in m, k
    assert m["ego_opendrive"]["y"] == pytest.approx(-m["ego"]["y"])
    assert len(m["route"]) == 20
    for box in frame["boxes"]:
        assert {"id", "class", "center", "yaw", "extent", "center_ego", "yaw_ego"} <= set(box)


def test_same_seed_gives_identical_measurements(tmp_path, short_routes, one_run):
    layout, key = one_run
    proc = _run(_route_file(short_routes), tmp_path, "--vehicles", "20")
    assert proc.returncode == 0, proc.stderr
    again = Layout(tmp_path)
    a, b = layout.frame_paths(key), again.frame_paths(key)
    assert len(a) == len(b)
    for pa, pb in zip(a, b, strict=True):
        fa, fb = frames.read_frame(pa), frames.read_frame(pb)
        assert fa["measurements"] == fb["measurements"]
        assert fa["boxes"] == fb["boxes"]
        np.testing.assert_array_equal(fa["sensors"]["lidar"], fb["sensors"]["lidar"])


def test_another_repetition_is_seeded_differently(tmp_path, short_routes, one_run):
    layout, key = one_run
    proc = _run(_route_file(short_routes), tmp_path, "--vehicles", "20", "--repetition", "1")
    assert proc.returncode == 0, proc.stderr
    (key1,) = list(Layout(tmp_path).iter_runs())
    assert key1.name.endswith("_rep1")
    s0 = json.loads(layout.run_settings(key).read_text())["seed"]
    s1 = json.loads(Layout(tmp_path).run_settings(key1).read_text())["seed"]
    assert s0 != s1


def test_a_finished_run_is_skipped_unless_forced(one_run, short_routes):
    layout, key = one_run
    before = [p.stat().st_mtime_ns for p in layout.frame_paths(key)]
    proc = _run(_route_file(short_routes), layout.root, "--vehicles", "20")
    assert proc.returncode == 0 and "already finished" in proc.stderr
    assert [p.stat().st_mtime_ns for p in layout.frame_paths(key)] == before
    assert claims.attempts(layout, key) == 1


def test_unknown_setting_names_the_near_match(tmp_path, short_routes):
    proc = _run(_route_file(short_routes), tmp_path, "--vehicels", "3")
    assert proc.returncode == 2
    assert "unknown setting --vehicels" in proc.stderr and "--vehicles" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_a_rig_file_with_two_cameras_records_both(tmp_path, short_routes):
    from tools.dataset.rig import CameraConfig, RigConfig

    rig = RigConfig(cameras=(CameraConfig(name="front"), CameraConfig(name="left", yaw=-60.0, width=256,
                                                                        height=128)))
    rig_file = tmp_path / "rig.json"
    rig_file.write_text(json.dumps(rig.to_dict()))
    root = tmp_path / "root"
    proc = _run(_route_file(short_routes), root, "--vehicles", "5", "--rig", str(rig_file))
    assert proc.returncode == 0, proc.stderr
    layout = Layout(root)
    (key,) = list(layout.iter_runs())
    frame = frames.read_frame(layout.frame_paths(key)[0])
    assert frame["sensors"]["rgb_left"].shape == (128, 256, 3)
    assert frame["sensors"]["semantics_front"].shape == (256, 512)
    assert json.loads(layout.run_settings(key).read_text())["rig"] == rig.to_dict()


def test_any_opendrive_town_works_not_only_grids(tmp_path):
    """A SUMO 'spider' network (curved arms, five-way junctions) exported as OpenDRIVE."""
    from tools.collect.base.town import sumo_binary

    net, towns = tmp_path / "spider.net.xml", tmp_path / "routes" / "towns"
    towns.mkdir(parents=True)
    run_tool(sumo_binary("netgenerate"), "--spider", "--spider.arm-number", "5", "--spider.circle-number", "2",
             "--spider.space-radius", "70", "--default.lanenumber", "2", "--tls.guess", "true", "-o", str(net),
             check=True)
    run_tool(sumo_binary("netconvert"), "-s", str(net), "--opendrive-output", str(towns / "spider.xodr"),
             check=True)
    run_tool(PYTHON, "-m", "tools.collect", "routes", "--town", str(towns / "spider.xodr"), "--count", "1",
             "--out", str(tmp_path / "routes"), "--min-length", "100", "--max-length", "160", check=True)
    (route,) = [p for p in (tmp_path / "routes").rglob("*.xml") if "towns" not in p.parts]
    proc = _run(route, tmp_path / "root", "--vehicles", "5")
    assert proc.returncode == 0, proc.stderr
    layout = Layout(tmp_path / "root")
    (key,) = list(layout.iter_runs())
    assert results.run_state(layout, key) is results.RunState.FINISHED
    assert len(layout.frame_paths(key)) > 10
