"""The Py123D export (tools/collect/inspect/py123d_export.py): the session's collected root (real SUMO runs)
exported with `export-py123d` and read back with py123d's own scene reader, frame by frame against our frames;
`collect --py123d` / `run --py123d` (local workers and a SLURM task); resumption and interrupted exports; and
every bad input, including the py123d extra missing (hidden from the subprocess by an import hook)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import shapely
import shapely.geometry as geom
from conftest import BIN, PYTHON, REPO, copy_root, run_bin, run_tool, start_tool, tree, wait_until

from tools.dataset import semantics
from tools.dataset.frames import read_boxes, read_frame
from tools.dataset.geometry import project
from tools.dataset.layout import Layout, RunKey
from tools.dataset.measurements import Measurements
from tools.dataset.results import RunState, run_state, run_states
from tools.dataset.rig import LIDAR, LIDAR_LABELS, RGB, run_rig

SPLIT = "drivekit_train"
LABELS = {semantics.CAR: "VEHICLE", semantics.TRUCK: "VEHICLE", semantics.BUS: "VEHICLE",
          semantics.PEDESTRIAN: "PERSON", semantics.BICYCLE: "TWO_WHEELER", semantics.STATIC: "GENERIC_OBJECT"}


def export(root: Path, out: Path, *extra: str, **kwargs):
    return run_tool(PYTHON, "-m", "tools.collect", "export-py123d", root, "--out", out, *extra, **kwargs)


def scenes_of(out: Path) -> dict[str, object]:
    """py123d's own reader: one scene per log (the whole run), by log name."""
    from py123d.api.scene.arrow.arrow_scene_builder import ArrowSceneBuilder
    from py123d.api.scene.scene_filter import SceneFilter
    from py123d.common.execution import SequentialExecutor

    scenes = ArrowSceneBuilder(out / "logs", out / "maps").get_scenes(SceneFilter(datasets=["drivekit"]),
                                                                        SequentialExecutor())
    return {s.log_name: s for s in scenes}


def log_of(key: RunKey) -> str:
    return f"{key.scenario}__{key.name}"


def iso_yaw(yaw_deg: float) -> float:
    return -math.radians((yaw_deg + 180.0) % 360.0 - 180.0)


def angle_diff(a: float, b: float) -> float:
    return abs((a - b + math.pi) % (2 * math.pi) - math.pi)


@pytest.fixture(scope="module")
def exported(collected_root, tmp_path_factory) -> tuple[Path, Path, str]:
    """The collected root exported by the real command into OUT: (root, out, the command's stderr)."""
    out = tmp_path_factory.mktemp("py123d") / "out"
    proc = export(collected_root, out, "--workers", "2", timeout=600)  # worker processes, as on a big root
    assert proc.returncode == 0, proc.stderr
    print(proc.stderr.strip().splitlines()[-1])  # the summary, with frames/s (pytest -s shows it)
    return collected_root, out, proc.stderr


# ----------------------------------------------------------------------------- what py123d reads back


def test_every_finished_run_reads_back_with_py123d_and_matches_our_frames(exported):
    root, out, stderr = exported
    layout = Layout(root)
    finished = [k for k, s in run_states(layout).items() if s is RunState.FINISHED]
    total = sum(layout.frame_count(k) for k in finished)
    summary = rf"export-py123d: {len(finished)} route runs exported \({total} frames in [\d.]+ s, \d+ frames/s, 2 proc"
    assert re.search(summary, stderr), stderr
    scenes = scenes_of(out)
    assert sorted(scenes) == sorted(log_of(k) for k in finished)
    from py123d.datatypes import DefaultBoxDetectionLabel, LidarID

    boxes_seen = projected = 0
    for key in finished:
        scene = scenes[log_of(key)]
        run = json.loads(layout.run_settings(key).read_text())
        rig = run_rig(run)
        paths = layout.frame_paths(key)
        assert scene.number_of_iterations == len(paths)
        assert scene.location == run["town"] and scene.split == SPLIT
        cam_id = scene.available_camera_ids[0]
        assert [scene.get_camera_metadatas()[i].camera_name for i in scene.available_camera_ids] == \
            [c.name for c in rig.cameras]
        for i, path in enumerate(paths):
            frame = read_frame(path)
            m = Measurements.from_dict(frame["measurements"])
            e = m.ego
            length, width, height = e["extent"]
            assert scene.get_timestamp_at_iteration(i).time_us == round(m.time * 1e6)

            ego = scene.get_ego_state_se3_at_iteration(i)
            assert ego.imu_se3.x == pytest.approx(e["x"], abs=1e-9)
            assert ego.imu_se3.y == pytest.approx(-e["y"], abs=1e-9)  # ISO 8855: y flipped
            assert ego.imu_se3.z == pytest.approx(e["z"] - height / 2, abs=1e-9)  # the ground under the box
            assert ego.center_se3.z == pytest.approx(e["z"], abs=1e-9)
            assert angle_diff(ego.imu_se3.yaw, iso_yaw(e["yaw"])) < 1e-9
            assert ego.dynamic_state_se3.velocity_3d.x == pytest.approx(m.speed)
            meta = ego.metadata
            assert (meta.length, meta.width, meta.height) == pytest.approx((length, width, height))

            ours = read_boxes(frame)
            theirs = scene.get_box_detections_se3_at_iteration(i)
            assert [b.attributes.track_token for b in theirs] == [str(b.id) for b in ours]
            actor_points = frame["sensors"][LIDAR_LABELS][:, 1]
            for o, t in zip(ours, theirs, strict=True):
                box = t.bounding_box_se3
                assert (box.center_se3.x, box.center_se3.y, box.center_se3.z) == \
                    pytest.approx((o.center[0], -o.center[1], o.center[2]), abs=1e-9)
                assert (box.length, box.width, box.height) == pytest.approx(o.extent)
                assert angle_diff(box.center_se3.yaw, iso_yaw(o.yaw)) < 1e-9
                assert t.attributes.label is getattr(DefaultBoxDetectionLabel, LABELS[o.cls])
                assert t.attributes.num_lidar_points == int((actor_points == o.id).sum())
                boxes_seen += 1

            camera = scene.get_camera_at_iteration(i, cam_id)
            ours_rgb = frame["sensors"][RGB.format(camera=rig.cameras[0].name)]
            assert camera.image.shape == ours_rgb.shape
            # the JPEG bytes are copied: both decoders (libjpeg-turbo under cv2 and simplejpeg) give the same pixels
            assert np.abs(camera.image.astype(int) - ours_rgb.astype(int)).max() <= 1
            # the camera's extrinsic and intrinsics: a box centre lands on the pixel our projection gives
            for o in ours:
                if o.center_ego[0] > 3.0:
                    uv, depth = project(rig.cameras[0], e, np.array([o.center]))
                    theirs_uv, _, theirs_depth = camera.project_points_global(
                        np.array([[o.center[0], -o.center[1], o.center[2]]]))
                    assert theirs_uv[0] == pytest.approx(uv[0], abs=1e-6)
                    assert theirs_depth[0] == pytest.approx(depth[0], abs=1e-6)
                    projected += 1

            lidar = scene.get_lidar_at_iteration(i, LidarID.LIDAR_TOP)
            points = frame["sensors"][LIDAR]
            assert lidar.point_cloud_3d.shape == (len(points), 3)
            assert np.array_equal(lidar.point_cloud_3d, points[:, :3] * np.array([1, -1, 1], dtype=np.float32))
            assert np.abs(lidar.point_cloud_features["intensity"] / 255.0 - points[:, 3]).max() <= 0.5 / 255 + 1e-6
    assert boxes_seen > 50 and projected > 10  # the checks above met real boxes


def test_traffic_lights_are_the_recorded_state_on_an_intersection_lane_of_the_route(exported):
    root, out, _ = exported
    layout = Layout(root)
    from py123d.datatypes import MapLayer, TrafficLightStatus

    checked = 0
    for key in [k for k, s in run_states(layout).items() if s is RunState.FINISHED]:
        scene = scenes_of(out)[log_of(key)]
        map_api = scene.get_map_api()
        run = json.loads(layout.run_settings(key).read_text())
        xy = np.array(run["dense_route"]["xy"])
        route = geom.LineString(xy * [1, -1])  # the route in py123d's frame
        s = np.concatenate([[0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
        for i, path in enumerate(layout.frame_paths(key)):
            m = Measurements.from_dict(read_frame(path, sensors=False)["measurements"])
            lights = scene.get_traffic_light_detections_at_iteration(i)
            if m.light is None:
                assert len(lights) == 0
                continue
            stop = s[m.route_index] + m.ego["extent"][0] / 2 + m.light["distance"]
            if stop + 12.0 > s[-1]:  # its junction lies beyond the route's end: nothing says which lane
                continue
            assert len(lights) == 1, (key, i, m.light)
            light = lights[0]
            assert light.status is getattr(TrafficLightStatus, m.light["state"].upper())
            lane = map_api.get_map_object_in_layer(light.lane_id, MapLayer.LANE)
            assert lane.lane_group.intersection_id is not None  # the lane through the junction
            centre = lane.centerline.linestring
            assert centre.hausdorff_distance(centre.intersection(route.buffer(1.5))) < 1.0  # it follows the route
            checked += 1
    assert checked > 100


def test_the_map_loads_and_the_ego_drives_on_its_lanes_and_route(exported):
    root, out, _ = exported
    layout = Layout(root)
    from py123d.datatypes import MapLayer

    for key in [k for k, s in run_states(layout).items() if s is RunState.FINISHED]:
        scene = scenes_of(out)[log_of(key)]
        map_api = scene.get_map_api()
        assert map_api is not None and map_api.location == scene.location
        assert (out / "maps" / "drivekit" / f"drivekit_{scene.location}.arrow").is_file()
        n = scene.number_of_iterations
        centres = [scene.get_ego_state_se3_at_iteration(i).center_se3 for i in range(n)]
        on_lane = map_api.query_object_ids([geom.Point(c.x, c.y) for c in centres], [MapLayer.LANE],
                                           predicate="intersects")[MapLayer.LANE]
        assert len(on_lane) >= 0.97 * n  # frames whose ego centre lies on a lane of the converted town
        metadata, _, _ = scene.get_route()
        run = json.loads(layout.run_settings(key).read_text())
        assert metadata.total_arc_m == pytest.approx(run["route_length"], abs=0.5)
        assert metadata.polyline_y[0] == pytest.approx(-run["dense_route"]["xy"][0][1])


def test_the_documented_reading_snippet_runs_on_the_export(exported):
    _, out, _ = exported
    text = (REPO / "docs" / "py123d.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    proc = run_tool(PYTHON, "-c", snippet, env={"PY123D_DATA_ROOT": str(out)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(scenes_of(out))
    assert all(re.search(r"frames in town, ego at .* boxes, image \(256, 512, 3\), \d+ LiDAR points, [01] lights, "
                         r"\d+ lanes in the map", line) for line in lines), proc.stdout


# ----------------------------------------------------------------------------- resumable, never half written


def test_rerun_skips_the_current_logs_and_changes_nothing(exported):
    root, out, _ = exported
    before = tree(out)
    proc = export(root, out)
    assert proc.returncode == 0, proc.stderr
    assert "export-py123d: 0 route runs exported (0 frames" in proc.stderr
    assert "4 skipped as already exported" in proc.stderr
    assert tree(out) == before


def test_only_finished_runs_are_exported_and_the_others_are_listed(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    keys = sorted(run_states(layout))
    failed, crashed = keys[0], keys[1]
    result = json.loads(layout.result_path(failed).read_text())
    result["_checkpoint"]["records"][0]["status"] = "Failed - Agent got blocked"
    layout.result_path(failed).write_text(json.dumps(result))
    layout.result_path(crashed).unlink()  # frames, no result: crashed
    assert run_state(layout, failed) is RunState.FAILED and run_state(layout, crashed) is RunState.CRASHED
    out = tmp_path / "out"
    proc = export(root, out)
    assert proc.returncode == 0, proc.stderr
    assert f"leaving out 2 route runs that are not finished: {failed} (failed), {crashed} (crashed)" in proc.stderr
    assert sorted(scenes_of(out)) == sorted(log_of(k) for k in keys[2:])
    assert not any((out / "logs" / SPLIT / log_of(k)).exists() for k in (failed, crashed))


def test_an_export_killed_midway_leaves_only_whole_logs_and_the_rerun_completes(collected_root, tmp_path):
    out = tmp_path / "out"
    proc = start_tool(PYTHON, "-m", "tools.collect", "export-py123d", collected_root, "--out", out)
    logs = out / "logs" / SPLIT
    # kill -9 while the second log is being written (the first is in place)
    wait_until(lambda: logs.is_dir() and any(logs.iterdir()) and any(out.glob(".tmp-*")), 240, "a log half written")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert any(out.glob(".tmp-*"))  # the half-written log is left in a temporary folder, outside logs/
    done = sorted(p.name for p in logs.iterdir())
    assert 1 <= len(done) <= 4  # (4: killed between the last rename and the removal of its temporary folder)
    assert all((logs / name / "sync.arrow").is_file() and (logs / name / "drivekit.json").is_file() for name in done)
    assert sorted(scenes_of(out)) == done  # py123d sees the whole logs only
    again = export(collected_root, out)
    assert again.returncode == 0, again.stderr
    assert f"{4 - len(done)} route runs exported" in again.stderr and f"{len(done)} skipped" in again.stderr
    assert len(scenes_of(out)) == 4 and not any(out.glob(".tmp-*"))  # the stale temporary folder is gone


def test_a_run_redone_since_its_export_is_exported_again(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    out = tmp_path / "out"
    assert export(root, out).returncode == 0
    layout = Layout(root)
    key = sorted(run_states(layout))[0]
    result = json.loads(layout.result_path(key).read_text())
    result["_checkpoint"]["records"][0]["meta"]["duration_system"] += 1.0  # another result file: the run was redone
    layout.result_path(key).write_text(json.dumps(result))
    proc = export(root, out)
    assert proc.returncode == 0, proc.stderr
    assert "1 route runs exported" in proc.stderr and "3 skipped as already exported" in proc.stderr
    map_written = (out / "maps" / "drivekit" / "drivekit_town.arrow").stat().st_mtime_ns
    forced = export(root, out, "--force")  # everything again, the town's map too
    assert forced.returncode == 0, forced.stderr
    assert "4 route runs exported" in forced.stderr and "0 skipped as already exported" in forced.stderr
    assert (out / "maps" / "drivekit" / "drivekit_town.arrow").stat().st_mtime_ns > map_written
    assert len(scenes_of(out)) == 4


# ----------------------------------------------------------------------------- collect --py123d, run --py123d


def test_collect_and_run_with_py123d_write_each_finished_runs_log_under_the_root(short_routes, tmp_path):
    root = tmp_path / "root"
    proc = run_bin("collect", short_routes, "--root", root, "--workers", "2", "--vehicles", "5", "--py123d",
                   timeout=400)
    assert proc.returncode == 0, proc.stderr
    layout = Layout(root)
    out = layout.py123d
    finished = [k for k, s in run_states(layout).items() if s is RunState.FINISHED]
    assert finished
    scenes = scenes_of(out)
    assert sorted(scenes) == sorted(log_of(k) for k in finished)
    for key in finished:  # written by the run's own worker process: its attempt log says so
        assert scenes[log_of(key)].number_of_iterations == layout.frame_count(key)
        assert "as the Py123D log" in layout.attempt_logs(key)[-1].read_text()
    assert f"py123d: {len(finished)} of {len(finished)} finished route runs have their Py123D log" in proc.stderr

    # run --py123d on a finished run whose log is gone: the run is not redone, its log is written again
    key = finished[0]
    shutil.rmtree(out / "logs" / SPLIT / log_of(key))
    route = json.loads(layout.manifest.read_text())["runs"][str(key)]["route"]
    again = run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route, "--root", root, "--py123d")
    assert again.returncode == 0, again.stderr
    assert "already finished" in again.stderr and "as the Py123D log" in again.stderr
    assert scenes_of(out)[log_of(key)].number_of_iterations == layout.frame_count(key)


def test_collect_without_py123d_then_with_it_writes_the_logs_of_runs_finished_before(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    routes = collected_root.parent / "routes"
    proc = run_bin("collect", routes, "--root", root, "--py123d", timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert "0 route runs finished and 0 failed in this invocation; 4 skipped as already finished" in proc.stderr
    assert "py123d: 4 of 4 finished route runs have their Py123D log" in proc.stderr
    assert len(scenes_of(Layout(root).py123d)) == 4


@pytest.mark.slurm
def test_collect_on_slurm_with_py123d_writes_the_logs_in_the_array_tasks(slurm, short_routes, tmp_path):
    root = tmp_path / "root"
    proc = run_tool(BIN / "collect", short_routes, "--root", root, "--slurm", "--poll", "1", "--vehicles", "5",
                    "--py123d", env=slurm.env, timeout=400)
    assert proc.returncode == 0, proc.stderr
    layout = Layout(root)
    finished = [k for k, s in run_states(layout).items() if s is RunState.FINISHED]
    assert finished and sorted(scenes_of(layout.py123d)) == sorted(log_of(k) for k in finished)
    for key in finished:  # the task's run wrote it (its attempt log), not the monitor
        assert "as the Py123D log" in layout.attempt_logs(key)[-1].read_text()
    waves = list((root / "slurm" / "waves").glob("wave-*.json"))
    assert waves and all(json.loads(w.read_text())["py123d"] is True for w in waves)


# ----------------------------------------------------------------------------- bad input


#: Runs a tool with the py123d package hidden, as on a machine without the extra: an import hook on sys.meta_path
#: answers "No module named 'py123d'" for it and its submodules.
WITHOUT_PY123D = """
import runpy, sys
class NoPy123d:
    def find_spec(self, name, path=None, target=None):
        if name == "py123d" or name.startswith("py123d."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoPy123d())
sys.argv = ["python -m tools.collect", *sys.argv[1:]]
runpy.run_module("tools.collect", run_name="__main__")
"""


@pytest.mark.parametrize("command", ["export-py123d", "collect", "run"])
def test_without_the_py123d_extra_installed_is_one_line_and_nothing_starts(command, collected_root, short_routes,
                                                                           tmp_path):
    root = tmp_path / "root"
    if command == "export-py123d":
        root = copy_root(collected_root, root)
        args = ["export-py123d", root, "--out", tmp_path / "out"]
    elif command == "collect":
        args = ["collect", short_routes, "--root", root, "--py123d"]
    else:
        args = ["run", "--route", next(short_routes.rglob("*.xml")), "--root", root, "--py123d"]
    before = tree(tmp_path)
    proc = run_tool(PYTHON, "-c", WITHOUT_PY123D, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "the py123d package is not installed" in lines[0], proc.stderr
    assert "pip install '.[py123d]'" in lines[0]
    assert tree(tmp_path) == before  # no root made, no run claimed, no OUT


@pytest.mark.parametrize("case", ["no finished runs", "newer format version", "out missing", "out unwritable",
                                  "out inside the root"])
def test_bad_input_is_one_line_naming_it_and_nothing_is_written(case, collected_root, tmp_path):
    from conftest import read_only

    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    out = tmp_path / "out"
    args = [PYTHON, "-m", "tools.collect", "export-py123d", root, "--out", out]
    if case == "no finished runs":
        for key in run_states(layout):
            layout.result_path(key).unlink()
    elif case == "newer format version":
        manifest = json.loads(layout.manifest.read_text())
        manifest["format_version"] = 99
        layout.manifest.write_text(json.dumps(manifest))
    elif case == "out missing":
        args = args[:-2]
    elif case == "out unwritable":
        out.mkdir()
        args = read_only(out, *args)
    else:
        args[-1] = root / "data" / "py123d"
    before = tree(tmp_path)
    proc = run_tool(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("collect: "), proc.stderr
    expected = {"no finished runs": "no finished route runs to export (4 crashed)",
                "newer format version": "dataset format version 99",
                "out missing": "--out missing", "out unwritable": "is not writable",
                "out inside the root": "inside the dataset root"}[case]
    assert expected in lines[0], lines[0]
    assert tree(tmp_path) == before


def test_a_netconvert_town_becomes_a_map_py123d_reads_with_every_lane(town_xodr, tmp_path):
    """py123d's OpenDRIVE parser does not read netconvert's paramPoly3 junction roads (nor its signal ids): the
    export hands it an equivalent text, whose lanes follow the original curves."""
    import carla
    from py123d.api.map.arrow.arrow_map_api import get_lru_cached_map_api
    from py123d.datatypes import MapLayer

    from tools.collect.inspect.py123d_convert import export_town, map_file

    text = town_xodr.read_text()
    assert "paramPoly3" in text
    assert export_town(tmp_path, "grid", town_xodr)
    assert not export_town(tmp_path, "grid", town_xodr)  # once per town
    lanes = list(get_lru_cached_map_api(map_file(tmp_path, "grid")).get_all_map_objects_in_layer(MapLayer.LANE))
    cmap = carla.Map("grid", text)
    driving = [w for w in cmap.generate_waypoints(2.0) if w.lane_type == carla.LaneType.Driving]
    index = shapely.STRtree([lane.shapely_polygon for lane in lanes])
    # every driving waypoint of carla.Map (CARLA frame: y flipped) lies on a lane of the py123d map
    missed = [w for w in driving if not len(index.query(geom.Point(w.transform.location.x, -w.transform.location.y),
                                                        predicate="intersects"))]
    assert len(missed) <= 0.01 * len(driving), len(missed)
    assert len(lanes) > 50
