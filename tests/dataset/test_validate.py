"""bin/validate on a real collected root (conftest's `collected_root`, copied before anything changes): a clean
root validates with exit 0 and a report whose numbers agree with the root; damaged copies are caught and named
per run; the root is never changed outside ROOT/reports/; bad input is one line and a non-zero exit."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path

import msgpack
import numpy as np
import pytest
from conftest import PYTHON, copy_root, run_bin, run_tool

from tools.collect.inspect.quality import EXIT_INVALID, REPORT_HTML, REPORT_JSON
from tools.dataset.bucket_rules import BUCKETS, RULES
from tools.dataset.frames import FRAME_FORMAT, read_boxes, read_frame, read_measurements
from tools.dataset.geometry import Pose, project
from tools.dataset.layout import DATASET_FORMAT, REPORTS, Layout, RunKey
from tools.dataset.results import FAILED_BLOCKED, RouteRecord, RunState, run_states, write_result
from tools.dataset.rig import RigConfig
from tools.dataset.semantics import NAMES, PEDESTRIAN
from tools.dataset.validate import check_run
from tools.dataset.weather import weather_class

EXIT_BAD_INPUT = 2


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and folder under ROOT but reports/: kind, size, mtime and the sha256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel == REPORTS or rel.startswith(REPORTS + "/"):
            continue
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[rel] = (p.is_dir(), st.st_size, st.st_mtime_ns, digest)
    return out


def report_dir(root: Path) -> Path:
    return root / REPORTS / datetime.date.today().isoformat()


def validate(*args: str | Path) -> tuple[int, str, str]:
    proc = run_bin("validate", *map(str, args), timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def repack(path: Path, change) -> None:
    """Rewrite a frame file with `change(frame_dict)` applied to its msgpack content, its checksum made anew (a
    frame written so, not damaged)."""
    from tools.dataset.frames import seal

    frame = msgpack.unpackb(path.read_bytes(), raw=False)
    frame.pop("crc32", None)
    change(frame)
    path.write_bytes(seal(frame))


# ----------------------------------------------------------------------------- a clean root


def test_clean_root_validates_with_exit_0_and_a_report_that_agrees_with_the_root(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    keys = list(layout.iter_runs())
    assert len(keys) == 4
    # Two runs that did not finish, which the report counts as failures (never checked frame by frame): one the
    # expert drove to a failure (a result), one whose process died (its folder and run.json, no result).
    scenario = keys[0].scenario
    failed, crashed = RunKey(scenario, "extra_0000_route90_rep0"), RunKey(scenario, "extra_0001_route91_rep0")
    write_result(layout, failed, RouteRecord(
        "90", FAILED_BLOCKED, infractions={"vehicle_blocked": ["Agent got blocked at (x=1, y=2)"],
                                           "collisions_vehicle": ["Agent collided against object with type=vehicle"]},
        route_completion=40.0, route_length=250.0, duration_game=60.0))
    for key in (failed, crashed):  # their run.json (the town); no frames
        layout.run_dir(key).mkdir(parents=True)
        layout.run_settings(key).write_bytes(layout.run_settings(keys[0]).read_bytes())
    before = snapshot(root)

    code, out, err = validate(root, "--workers", "2")
    assert code == 0, out + err
    assert snapshot(root) == before  # nothing changed but the report folder
    m = re.search(r"(\d+) frames read in ([0-9.]+) s with 2 worker processes: (\d+) frames/s", out)
    assert m, out
    print(f"validate on the fixture root: {m.group(0)}")  # the speed figure (pytest -s shows it)
    assert "validate: 100%" in err  # tqdm's bar, counting frames

    report = json.loads((report_dir(root) / REPORT_JSON).read_text())
    frames = {k: layout.frame_count(k) for k in keys}
    total = sum(frames.values())
    v = report["validation"]
    assert (v["runs_checked"], v["frames"], v["runs_with_errors"], v["errors"], v["workers"]) == (4, total, 0, {}, 2)
    assert int(m.group(1)) == total
    states = run_states(layout)
    assert report["runs"] == {s.value: sum(1 for x in states.values() if x is s) for s in RunState}
    assert report["runs"]["finished"] == 4 and report["runs"]["failed"] == 1 and report["runs"]["crashed"] == 1

    # Per scenario type, town and weather: the counts of the root itself.
    first = {k: read_measurements(layout.frame_path(k, 0)) for k in keys}
    towns = {k: json.loads(layout.run_settings(k).read_text())["town"] for k in keys}
    for dim, label in (("scenario", lambda k: k.scenario), ("town", towns.get),
                       ("weather", lambda k: weather_class(first[k].weather))):
        rows = report["groups"][dim]
        expected = Counter(label(k) for k in keys)
        for name, n in expected.items():
            assert rows[name]["finished"] == n, (dim, name)
            assert rows[name]["frames"] == sum(frames[k] for k in keys if label(k) == name), (dim, name)
    row = report["groups"]["scenario"][scenario]
    n_scenario = sum(1 for k in keys if k.scenario == scenario)
    assert (row["runs"], row["failed"]) == (n_scenario + 2, 2)
    assert row["failure_rate"] == pytest.approx(2 / (n_scenario + 2), abs=1e-4)
    assert row["failure_reasons"] == {"Failed - Agent got blocked": 1, "crashed (no result)": 1}
    assert report["groups"]["town"][towns[keys[0]]]["failed"] == 2  # their town from their run.json
    assert report["groups"]["weather"]["unknown"] == {  # no frame, no route file in the manifest: unknown
        "runs": 2, "finished": 0, "failed": 2, "frames": 0, "failure_rate": 1.0,
        "failure_reasons": row["failure_reasons"]}
    failing = [r["message"] for r in report["recommendations"] if r["kind"] == "failure_rate"]
    assert any(m.startswith(f"scenario {scenario} fails in ") and "above 10%" in m for m in failing), failing

    # Distributions and buckets over every frame of the finished runs.
    measurements = [read_measurements(p) for k in keys for p in layout.frame_paths(k)]
    d = report["distributions"]
    speeds = np.array([x.speed for x in measurements])
    assert sum(d["speed"]["counts"]) == d["speed"]["frames"] == total
    assert d["speed"]["mean"] == pytest.approx(speeds.mean(), abs=1e-3)
    assert sum(d["acceleration"]["counts"]) == total
    assert sum(d["command"].values()) == total and sum(d["light_state"].values()) == total
    with_leader = sum(isinstance(x.leader, dict) for x in measurements)
    assert sum(d["leader_distance"]["counts"]) == with_leader and d["leader_distance"]["none"] == total - with_leader
    assert d["stand_fraction"] == pytest.approx((speeds < RULES["stand_speed"]).mean(), abs=1e-4)
    assert list(report["buckets"]) == list(BUCKETS)
    assert sum(b["frames"] for b in report["buckets"].values()) == total
    assert report["buckets"]["stop"]["stop_fraction"] == 1.0  # stop: the ego stands (speed below stand_speed)

    # The bucket builder, run on the same root, puts the same number of frames in each bucket.
    build_root = copy_root(root, tmp_path / "built")
    run_tool(PYTHON, "-m", "tools.buckets", "build", "--root", build_root, check=True)
    index = json.loads((build_root / "buckets" / "index.json").read_text())
    built = Counter()
    for run in index["runs"].values():
        for label, n in run["labels"]:
            built[label] += n
    assert {k: b["frames"] for k, b in report["buckets"].items() if b["frames"]} == dict(built)

    # The expert's infractions per km: every run driven to an outcome (the finished ones and the blocked one).
    results = [json.loads(layout.result_path(k).read_text())["_checkpoint"]["records"][0] for k in [*keys, failed]]
    km = sum(r["meta"]["route_length"] / 1000 * r["scores"]["score_route"] / 100 for r in results)
    inf = report["infractions"]
    assert inf["runs"] == 5 and inf["km_driven"] == pytest.approx(km, abs=1e-3)
    n_blocked = sum(len(r["infractions"]["vehicle_blocked"]) for r in results)
    assert inf["counts"]["vehicle_blocked"] == n_blocked >= 1
    assert inf["per_km"]["vehicle_blocked"] == pytest.approx(n_blocked / km, abs=1e-3)

    # One self-contained page: every plot an embedded PNG, nothing fetched from elsewhere.
    page = (report_dir(root) / REPORT_HTML).read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) >= 8
    assert all(base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n") for png in images)
    assert not re.search(r"(src|href)=['\"]?(https?:|//|/)", page)
    assert scenario in page and "Recommendations" in page


# ----------------------------------------------------------------------------- damaged copies


def visible_box_to_lift(layout: Layout, key: RunKey, lift: float) -> tuple[int, int]:
    """(frame, actor id) of a box that the front camera sees at its centre and that, lifted by `lift` metres,
    would show there what lies behind it (sky, or something farther than the box): found from the pixels."""
    cam = RigConfig().cameras[0]
    for i, path in enumerate(layout.frame_paths(key)):
        frame = read_frame(path, sensors=["semantics_front", "depth_front"])
        classes, depth = frame["sensors"]["semantics_front"], frame["sensors"]["depth_front"]
        for box in read_boxes(frame):
            centre = np.array([box.center_ego], dtype=np.float64)
            uv, d = project(cam, Pose(0.0, 0.0, 0.0), centre)
            col, row = np.floor(uv[0]).astype(int) if np.isfinite(uv).all() else (-1, -1)
            if not (d[0] > 2 and 0 <= col < cam.width and 0 <= row < cam.height and classes[row, col] == box.cls):
                continue
            uv, d = project(cam, Pose(0.0, 0.0, 0.0), centre + [0.0, 0.0, lift])
            col, row = np.floor(uv[0]).astype(int)
            if 0 <= col < cam.width and 0 <= row < cam.height:
                behind = depth[row, col] / 100.0
                if behind == 0 or behind > d[0] + max(box.extent):
                    return i, box.id
    raise AssertionError(f"{key}: no visible box to move")


def test_damaged_copies_are_caught_and_named_per_run_and_nothing_is_changed(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    truncated, gap, moved, disagrees = list(layout.iter_runs())

    path = layout.frame_path(truncated, 3)  # a frame cut in half, another of a newer frame format
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    repack(layout.frame_path(truncated, 5), lambda f: f.update(format=FRAME_FORMAT + 1))
    layout.frame_path(gap, 4).unlink()  # frames 0..3, 5.. : an index gap
    index, actor = visible_box_to_lift(layout, moved, 3.0)

    def lift(frame):
        for b in frame["boxes"]:
            if b["id"] == actor:
                b["center"][2] += 3.0
                b["center_ego"][2] += 3.0
    repack(layout.frame_path(moved, index), lift)
    result = json.loads(layout.result_path(disagrees).read_text())
    result["_checkpoint"]["records"][0]["meta"]["duration_game"] += 60.0  # a minute the frames do not show
    layout.result_path(disagrees).write_text(json.dumps(result))
    before = snapshot(root)

    code, out, err = validate("--root", root)
    assert code == EXIT_INVALID, out + err
    assert snapshot(root) == before
    assert err.strip().splitlines()[-1] == "validate: 4 of 4 finished route runs have integrity errors (listed above)"
    blocks = dict(re.findall(r"^(\S+): \d+ integrity errors\n((?:  .*\n?)*)", out, re.M))
    assert set(blocks) == {str(k) for k in (truncated, gap, moved, disagrees)}, out
    assert "frames/00003.msgpack: not a readable frame" in blocks[str(truncated)]
    assert f"frames/00005.msgpack: frame format {FRAME_FORMAT + 1}, this tool reads format {FRAME_FORMAT}" \
        in blocks[str(truncated)]
    assert "frames/00005.msgpack: expected 00004.msgpack" in blocks[str(gap)]
    assert re.search(rf"frames/{index:05d}\.msgpack: camera front: pixel .* at the centre of actor {actor} .* behind "
                     "the box", blocks[str(moved)]), blocks[str(moved)]
    assert re.search(r"result: duration_game [0-9.]+ s, but the last frame .* frames missing at the end",
                     blocks[str(disagrees)]), blocks[str(disagrees)]

    report = json.loads((report_dir(root) / REPORT_JSON).read_text())
    assert set(report["validation"]["errors"]) == set(blocks)
    assert report["recommendations"][0]["kind"] == "integrity"
    assert check_run(layout, gap) == report["validation"]["errors"][str(gap)]["first"]  # the same checks, in-process


def test_a_box_of_another_class_than_its_pixels_and_a_result_of_another_route_are_caught(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    key = list(layout.iter_runs())[1]
    index, actor = visible_box_to_lift(layout, key, 3.0)

    seen = []

    def relabel(frame):
        for b in frame["boxes"]:
            if b["id"] == actor:
                seen.append(NAMES[b["class"]])
                b["class"] = PEDESTRIAN  # a pedestrian's box where the camera sees a vehicle
    repack(layout.frame_path(key, index), relabel)
    result = json.loads(layout.result_path(key).read_text())
    result["_checkpoint"]["records"][0]["meta"]["route_length"] *= 2
    layout.result_path(key).write_text(json.dumps(result))
    problems = check_run(layout, key)
    assert any(re.match(rf"frames/{index:05d}\.msgpack: camera front: .* of actor {actor} \(pedestrian\) shows "
                        rf"{seen[0]} at [0-9.]+ m, inside the box", p) for p in problems), problems
    assert any(p.startswith("result: route_length") and "the result of another route?" in p for p in problems)


# ----------------------------------------------------------------------------- bad input


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == EXIT_BAD_INPUT, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("collect: "), err
    return lines[0]


def test_a_root_with_no_finished_runs_is_one_line(collected_root, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "manifest.json").write_bytes((collected_root / "manifest.json").read_bytes())  # planned, none ran
    line = one_line_error(*validate(root))
    assert "no finished route runs to validate (route runs: 4 pending)" in line and "bin/collect" in line
    assert sorted(p.name for p in root.iterdir()) == ["manifest.json"]


def test_a_root_of_a_newer_format_version_is_one_line(collected_root, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    manifest = json.loads((collected_root / "manifest.json").read_text())
    manifest["format_version"] = DATASET_FORMAT + 1
    (root / "manifest.json").write_text(json.dumps(manifest))
    line = one_line_error(*validate(root))
    assert f"dataset format version {DATASET_FORMAT + 1}" in line
    assert sorted(p.name for p in root.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("where", ["reports-is-a-file", "out-under-a-file"])
def test_an_unwritable_report_folder_is_one_line_before_anything_is_read(collected_root, tmp_path, where):
    root = copy_root(collected_root, tmp_path / "root")
    if where == "reports-is-a-file":
        (root / REPORTS).write_text("not a folder")
        args = [root]
    else:
        (tmp_path / "file").write_text("x")
        args = [root, "--out", tmp_path / "file" / "report"]
    before = snapshot(root)
    code, out, err = validate(*args)
    line = one_line_error(code, out, err)
    assert "cannot write the report into" in line and "is not a folder" in line and "--out" in line
    assert "validate:" not in err  # refused before the progress bar: nothing was read
    assert snapshot(root) == before


def test_bad_workers_and_an_evaluation_root_are_one_line(collected_root, tmp_path):
    line = one_line_error(*validate(collected_root, "--workers", "0"))
    assert "--workers 0" in line
    root = tmp_path / "eval"
    root.mkdir()
    (root / "manifest.json").write_bytes((collected_root / "manifest.json").read_bytes())
    (root / "evaluation.json").write_text("{}")
    assert "an evaluation root" in one_line_error(*validate(root))


def test_report_rates_are_finite_numbers(collected_root, tmp_path):
    """report.json holds plain JSON numbers (no NaN or Infinity, which JSON readers reject)."""
    root = copy_root(collected_root, tmp_path / "root")
    code, out, err = validate(root, "--workers", "1", "--out", tmp_path / "report")
    assert code == 0, out + err
    assert not (root / REPORTS).exists()  # --out elsewhere: ROOT untouched altogether
    text = (tmp_path / "report" / REPORT_JSON).read_text()
    assert "NaN" not in text and "Infinity" not in text

    def numbers(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from numbers(v)
        elif isinstance(x, list):
            for v in x:
                yield from numbers(v)
        elif isinstance(x, float):
            yield x
    assert all(math.isfinite(x) for x in numbers(json.loads(text)))
