"""The frame contract in tools/dataset: naming, geometry, codec, measurements, rig, and the command-line check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tools.core import cli
from tools.core.errors import ToolError
from tools.dataset.codec import CodecError, decode_array, encode_array
from tools.dataset.geometry import BevGrid, Pose, ego_to_world, project, world_to_ego, yaw_to_ego
from tools.dataset.layout import RunKey
from tools.dataset.measurements import BoxLabel, Measurements, RoadOption, command_index
from tools.dataset.rig import BevConfig, CameraConfig, RecordingRate, RigConfig, run_rate, run_rig
from tools.dataset.samples import CacheSettings


def test_a_route_named_after_its_file_gets_a_run_name_without_the_repeated_id():
    assert RunKey.for_route("Accident", "route_001761", "route_001761", 0).name == "route_001761_rep0"
    assert RunKey.for_route("NoScenario", "town_0003", "3", 2).name == "town_0003_route3_rep2"
    with pytest.raises(ValueError):
        RunKey.for_route("S", "town", "../x", 0)


def test_world_to_ego_and_back_round_trip_and_agree_with_the_heading():
    pose = Pose(10.0, -5.0, 30.0)
    pts = np.array([[12.0, -4.0, 1.0], [-3.0, 7.0, 0.0]])
    ego = world_to_ego(pose, pts)
    np.testing.assert_allclose(ego_to_world(pose, ego), pts, atol=1e-9)
    ahead = ego_to_world(pose, np.array([[1.0, 0.0]]))[0]  # 1 m forward is along the yaw
    assert ahead == pytest.approx([10.0 + math.cos(math.radians(30)), -5.0 + math.sin(math.radians(30))])
    assert world_to_ego({"x": 10.0, "y": -5.0, "yaw": 30.0}, pts[:, :2]).shape == (2, 2)
    assert yaw_to_ego(pose, -170.0) == pytest.approx(160.0)


def test_a_point_ahead_projects_to_the_image_centre_column():
    cam = CameraConfig()
    uv, depth = project(cam, Pose(0.0, 0.0, 90.0), np.array([[0.0, 20.0, cam.z]]))
    assert uv[0] == pytest.approx([cam.width / 2, cam.height / 2])
    assert depth[0] == pytest.approx(20.0 - cam.x)


def test_the_recorded_bev_and_the_training_grid_are_one_bev_grid():
    bev = BevConfig(pixels=256, resolution=0.25, ego_offset_px=64)
    grid = BevGrid.of_rig(bev)
    assert grid.ahead == 48.0 and grid.width == 64.0
    col, row = grid.ego_to_pixel(np.array([0.0, 0.0]))
    assert (col, row) == (128.0, 192.0)  # the ego's centre: pixels/2 + ego_offset_px
    train = CacheSettings().grid()
    assert train == BevGrid(128, 0.5, 48.0)
    x, y = train.cell_centres()
    back = train.ego_to_pixel(np.stack([x, y], axis=-1))
    np.testing.assert_allclose(back, np.stack([np.arange(128) + 0.5] * 2, axis=-1)[:, ::-1], atol=1e-9)
    rows, cols, row_ok, col_ok = train.resample_index(grid)
    assert row_ok.all() and col_ok.all() and rows.max() < 256


@pytest.mark.parametrize("codec,array", [
    ("jpeg", np.full((8, 8, 3), 128, np.uint8)), ("png", np.arange(64, dtype=np.uint16).reshape(8, 8)),
    ("zstd", np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)), ("raw", np.arange(6, dtype=np.int64)),
    ("zstd_shuffle", np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)),
    ("zstd_shuffle", np.zeros((0, 4), np.float32)), ("zstd_shuffle", np.float32(3.5).reshape(())),
    ("zstd_shuffle", np.arange(12, dtype=np.uint16).reshape(2, 3, 2)), ("jpeg", np.full((8, 8), 77, np.uint8)),
])
def test_the_array_codec_round_trips_writable_native_arrays(codec, array):
    out = decode_array(encode_array(array, codec))
    assert out.shape == array.shape and out.dtype == array.dtype and out.flags.writeable
    if codec != "jpeg":
        np.testing.assert_array_equal(out, array)
    with pytest.raises(CodecError):
        encode_array(array, "gif")


def test_shuffled_blobs_read_big_endian_input_and_refuse_a_shape_their_bytes_do_not_fill():
    big = np.arange(10, dtype=">u4").reshape(5, 2)
    out = decode_array(encode_array(big, "zstd_shuffle"))
    assert out.dtype == np.uint32 and np.array_equal(out, big)
    blob = encode_array(big, "zstd_shuffle")
    with pytest.raises(ValueError, match="needs 48"):
        decode_array({**blob, "shape": [6, 2]})



def test_measurements_name_what_is_missing_and_keep_unknown_keys_out():
    full = {"frame": 0, "tick": 0, "time": 0.0, "ego": {"x": 0, "y": 0, "yaw": 0}, "speed": 1.0, "acceleration": 0.0,
            "target_speed": 2.0, "speed_limit": 10.0, "command": 4, "next_command": 4, "target_point": [1, 2],
            "target_point_next": [3, 4], "route": [[0, 0]], "junction": False, "light_hazard": False,
            "vehicle_hazard": False, "from_the_future": 1}
    m = Measurements.from_dict(full)
    assert m.speed == 1.0 and "from_the_future" not in m.to_dict()
    with pytest.raises(ValueError, match="missing speed"):
        Measurements.from_dict({k: v for k, v in full.items() if k != "speed"})
    box = BoxLabel.from_dict({"id": 3, "class": 14, "center": [1, 2, 0.8], "yaw": 10.0, "extent": [4, 2, 1.6]})
    assert box.to_dict()["class"] == 14


def test_commands_map_to_model_classes_with_unknown_as_follow_lane():
    assert command_index(RoadOption.LEFT) == 0 and command_index(RoadOption.CHANGELANERIGHT) == 5
    assert command_index(RoadOption.VOID) == command_index(99) == command_index(RoadOption.LANEFOLLOW) == 3


def test_the_rig_names_its_sensors_and_a_run_json_gives_rig_and_rate():
    rig = RigConfig(cameras=(CameraConfig(), CameraConfig(name="rear", yaw=180.0)))
    assert list(rig.sensor_names()) == ["rgb_front", "semantics_front", "depth_front", "rgb_rear", "semantics_rear",
                                        "depth_rear", "lidar", "lidar_labels", "bev"]
    run = {"rig": rig.to_dict(), "settings": {"sim_hz": 20, "record_every": 2}}
    assert run_rig(run) == rig
    assert run_rate(run).frame_dt == 0.1 and RecordingRate().frame_dt == 0.25


def _build(root=None, collection="all", force: bool = False):
    raise AssertionError("never called")


def _settings(root=None, force: bool = False, **settings):
    raise AssertionError("never called")


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "unknown flag --bogus"),
    (["--colection", "x"], "did you mean --collection"),
    (["--force=yes"], "--force takes no value"),
    (["--root"], "--root needs a value"),
    (["a", "b", "c"], "unexpected argument(s) c"),
    (["--root", "a", "--root", "b"], "given twice"),
])
def test_the_command_line_check_refuses_before_the_command_runs(args, message):
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cli.check_args("prog build", _build, args)


def test_switches_reach_fire_unambiguous_and_open_settings_pass():
    assert cli.check_args("p", _build, ["--force", "R"]) == ["--force=True", "R"]
    assert cli.check_args("p", _build, ["--noforce"]) == ["--force=False"]
    assert cli.check_args("p", _build, ["--no-force"]) == ["--force=False"]
    assert cli.check_args("p", _settings, ["--image_width=320"]) == ["--image_width=320"]
    from tools.collect.__main__ import COMMANDS  # collection's bool settings are switches, or take a value

    for args, checked in ((["--stop-on-infraction"], "--stop_on_infraction=True"),
                          (["--no-stop-on-infraction"], "--stop_on_infraction=False"),
                          (["--record=False"], "--record=False"), (["--no-record"], "--record=False")):
        assert cli.check_args("p", COMMANDS["collect"], ["routes", *args]) == ["routes", checked]
    assert cli.integer("4", "workers", 1) == 4
    with pytest.raises(ToolError, match="--workers 0: expected an integer at least 1"):
        cli.integer(0, "workers", 1)
    with pytest.raises(ToolError, match="expected a finite number"):
        cli.number("nan", "block")


def test_a_version_2_root_reads_and_becomes_version_6_when_collected_into_and_version_1_is_refused(tmp_path):
    import json

    from tools.core.errors import ToolError
    from tools.dataset.layout import DATASET_FORMAT, Layout
    from tools.dataset.manifest import read_manifest, update_manifest

    layout = Layout(tmp_path)
    layout.manifest.write_text(json.dumps({"format_version": 2, "dataset_id": "x", "collections": [], "runs": {}}))
    assert read_manifest(layout)["format_version"] == 2
    assert update_manifest(layout, {"command": "collect"}, {})["format_version"] == DATASET_FORMAT == 6
    assert json.loads(layout.manifest.read_text())["format_version"] == 6
    layout.manifest.write_text(json.dumps({"format_version": 1}))
    with pytest.raises(ToolError, match=r"format version 1, this tool reads versions 2, 3, 4, 5, 6 and writes "
                                        r"version 6"):
        read_manifest(layout)
