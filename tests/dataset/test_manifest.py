"""What a dataset records about itself: the manifest's collection entries (format and code version, settings,
route set, machine, time), bin/dataset-info's counts and sizes, and the dataset card ROOT/README.md.

Real collections (the session's `collected_root`, collected by bin/collect; one lone `run` here), real git
(the checkout's HEAD, and a throw-away repository), `du` for sizes on disk.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, copy_root, run_bin, run_tool, tree

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import find_route_files
from tools.collect.inspect import info
from tools.dataset import manifest as manifest_module
from tools.dataset.layout import DATASET_FORMAT, Layout, RunKey
from tools.dataset.manifest import code_version, dataset_id, read_manifest, route_set, update_manifest
from tools.dataset.results import FAILED_BLOCKED, RouteRecord, write_result
from tools.dataset.rig import RigConfig
from tools.expert import control, expert

SUCCESS = ("Perfect", "Completed")


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def checkout_head() -> str | None:
    """This checkout's HEAD, None when it is no git checkout (an unpacked release): then nothing may claim one."""
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=REPO, capture_output=True, text=True)
    lines = proc.stdout.split() if proc.returncode == 0 else []
    return lines[1] if len(lines) == 2 and Path(lines[0]).resolve() == REPO.resolve() else None


def last_entry(root: Path) -> dict:
    return json.loads(Layout(root).manifest.read_text())["collections"][-1]


def finished_runs(root: Path) -> dict[RunKey, dict]:
    """Runs whose result file says Perfect or Completed, read here from the JSON (not through tools.dataset)."""
    found = {}
    for path in sorted((root / "results").glob("*/*.json")):
        result = json.loads(path.read_text())
        if result["_checkpoint"]["records"][0]["status"] in SUCCESS:
            found[RunKey(path.parent.name, path.stem)] = result
    return found


def frames_of(root: Path, key: RunKey) -> int:
    return len(list((root / "data" / key.scenario / key.name / "frames").glob("*.msgpack")))


def du(path: Path) -> int:
    """Bytes on disk as `du` counts them."""
    return int(subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def table(stdout: str, title: str) -> dict[str, list[str]]:
    """The rows of one of info's tables (the one under the line starting with `title`), by first column."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = {}
    for line in lines[start + 2:]:
        if not line.strip():
            break
        if set(line.strip()) <= {"-", " "}:
            continue
        parts = line.split()
        rows[parts[0]] = parts[1:]
    return rows


def number(text: str) -> int:
    return int(text.replace(",", ""))


# ----------------------------------------------------------------------------- what a collection records


def test_a_collection_records_format_code_settings_route_set_machine_and_time(collected_root):
    entry = last_entry(collected_root)
    routes = collected_root.parent / "routes"

    assert entry["format_version"] == DATASET_FORMAT
    # code: the package version and this checkout's HEAD, and whether tracked files differ from it
    assert entry["code"]["version"] == metadata.version("drivekit")
    head = checkout_head()
    assert entry["code"]["commit"] == head
    if head is not None:
        assert entry["code"]["source"] == "git"
        assert entry["code"]["dirty"] is bool(git("status", "--porcelain", "--untracked-files=no"))
    # the exact settings: every CollectSettings field, the world, rate, seeds, the resolved rig, the expert
    assert entry["settings"] == CollectSettings(vehicles=10).to_dict()
    assert entry["world"] == {"name": "sim", "sumo": metadata.version("eclipse-sumo"), "vehicles": 10}
    assert entry["rate"] == {"sim_hz": 20, "record_every": 5, "frame_dt": 0.25}
    assert entry["seeds"]["offset"] == 0 and "derive_seed" in entry["seeds"]["rule"]
    assert entry["rig"] == RigConfig().to_dict() and entry["rig_file"] is None
    params = entry["expert"]["parameters"]
    assert params["expert"]["IDM_HEADWAY_S"] == expert.IDM_HEADWAY_S and params["expert"]["A_LAT"] == expert.A_LAT
    assert params["control"]["Controller.KP"] == control.Controller.KP
    assert len(entry["expert"]["sha256"]) == 64
    # the route set: every route file's path and content, and the town each route drives on
    files = find_route_files(routes)
    assert entry["routes"]["files"] == len(files) == 4 and entry["routes"]["dir"] == str(routes)
    assert entry["routes"]["sha256"] == route_set(files, routes)["sha256"]
    town = routes / "towns" / "town.xodr"
    assert entry["towns"] == {"town": hashlib.sha256(town.read_bytes()).hexdigest()}
    # the command, the machine and the time
    assert entry["argv"][:4] == ["python", "-m", "tools.collect", "collect"] and "--vehicles" in entry["argv"]
    machine = entry["machine"]
    assert machine["hostname"] == socket.gethostname() and machine["python"] == platform.python_version()
    assert machine["cpus"] == os.cpu_count() and machine["cpu"]
    assert machine["packages"]["numpy"] == metadata.version("numpy")
    assert machine["packages"]["libsumo"] == metadata.version("libsumo")
    when = datetime.datetime.fromisoformat(entry["time"])
    assert when <= datetime.datetime.now(datetime.UTC) and entry["user"].endswith("@" + socket.gethostname())


def test_code_version_reads_commit_and_dirty_from_the_checkout_git(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "a.py").write_text("x = 1\n")
    git("add", "a.py", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one", cwd=repo)
    monkeypatch.setattr(manifest_module, "CHECKOUT", repo)
    monkeypatch.delenv(manifest_module.COMMIT_ENV, raising=False)

    clean = code_version()
    assert clean["commit"] == git("rev-parse", "HEAD", cwd=repo) and clean["dirty"] is False
    (repo / "notes.txt").write_text("untracked files do not make the tree dirty")
    assert code_version()["dirty"] is False
    (repo / "a.py").write_text("x = 2\n")
    assert code_version() == {**clean, "dirty": True}

    # An installed copy inside someone else's repository is no checkout: its HEAD is not our commit.
    inner = repo / "site-packages"
    inner.mkdir()
    monkeypatch.setattr(manifest_module, "CHECKOUT", inner)
    assert code_version()["commit"] is None and code_version()["source"] is None


def test_without_git_the_commit_is_unknown_or_the_one_baked_into_the_image(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH (as in an image without it)
    monkeypatch.delenv(manifest_module.COMMIT_ENV, raising=False)
    unknown = code_version()
    assert unknown["commit"] is None and unknown["dirty"] is None and unknown["source"] is None
    assert unknown["version"] == metadata.version("drivekit")
    # make images bakes the commit into the image's environment (containers/*.def)
    monkeypatch.setenv(manifest_module.COMMIT_ENV, "0123abcd" * 5)
    monkeypatch.setenv(manifest_module.DIRTY_ENV, "false")
    baked = code_version()
    assert baked["commit"] == "0123abcd" * 5 and baked["dirty"] is False and baked["source"] == "image"


def test_route_set_hash_changes_when_a_route_file_changes_and_not_when_the_folder_moves(short_routes, tmp_path):
    first = Path(shutil.copytree(short_routes, tmp_path / "a"))
    second = Path(shutil.copytree(short_routes, tmp_path / "elsewhere" / "b"))
    files = find_route_files(first)
    before = route_set(files, first)
    assert before["files"] == 2
    assert route_set(find_route_files(second), second)["sha256"] == before["sha256"]

    changed = files[0]
    changed.write_text(changed.read_text().replace("<route ", "<route  ", 1))  # one more space
    assert route_set(files, first)["sha256"] != before["sha256"]
    changed.write_text((second / changed.relative_to(first)).read_text())  # back as it was
    assert route_set(files, first)["sha256"] == before["sha256"]
    renamed = changed.with_name("renamed.xml")
    changed.rename(renamed)
    assert route_set(find_route_files(first), first)["sha256"] != before["sha256"]


def test_a_lone_run_records_its_route_and_writes_the_card(short_routes, tmp_path):
    route = find_route_files(short_routes)[0]
    root = tmp_path / "root"
    run_tool(PYTHON, "-m", "tools.collect", "run", "--route", route, "--root", root, "--vehicles", "5", check=True)
    entry = last_entry(root)
    assert entry["command"] == "run" and entry["repetition"] == 0
    assert entry["routes"] == route_set([route], route.parent) and entry["routes"]["files"] == 1
    assert entry["settings"] == CollectSettings(vehicles=5).to_dict() and entry["code"]["commit"] == checkout_head()
    card = (root / "README.md").read_text()
    assert dataset_id(Layout(root)) in card and "(after a collection)" in card


# ----------------------------------------------------------------------------- older manifests


def test_a_manifest_written_before_these_fields_still_reads_prints_and_grows(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    now = json.loads(layout.manifest.read_text())
    old = {"format_version": 2, "created": "2025-01-31T12:00:00+00:00", "created_by": "someone@elsewhere",
           "tool": "drivekit 0.0.9", "runs": now["runs"],
           "collections": [{"time": "2025-01-31T12:00:00+00:00", "user": "someone@elsewhere", "tool": "drivekit 0.0.9",
                            "routes_dir": "/old/routes", "repetitions": 1, "settings": {"vehicles": 10},
                            "argv": ["python", "-m", "tools.collect", "collect", "/old/routes"]}]}
    layout.manifest.write_text(json.dumps(old))
    derived = dataset_id(layout)

    proc = run_bin("dataset-info", root)
    assert proc.returncode == 0, proc.stderr
    assert derived in proc.stdout and "/old/routes" in proc.stdout
    assert re.search(r"^  code +not recorded$", proc.stdout, re.M), proc.stdout
    assert number(table(proc.stdout, "route runs per scenario type")["total"][0]) == len(now["runs"])
    assert derived in (root / "README.md").read_text()

    grown = update_manifest(layout, {"command": "test", "settings": {}}, {})
    assert grown["collections"][0] == old["collections"][0]  # the old entry is kept as it was
    assert grown["collections"][1]["code"]["version"] == metadata.version("drivekit")
    assert grown["dataset_id"] == derived and read_manifest(layout)["format_version"] == DATASET_FORMAT


# ----------------------------------------------------------------------------- bin/dataset-info


def test_info_counts_runs_frames_and_sizes_of_the_root(collected_root, tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    layout = Layout(root)
    # one run failed: its frames no longer count
    failed = sorted(finished_runs(root))[0]
    write_result(layout, failed, RouteRecord(route_id="x", status=FAILED_BLOCKED))
    finished = finished_runs(root)
    frames = {key: frames_of(root, key) for key in finished}
    assert len(finished) == 3 and all(frames.values())

    proc = run_bin("dataset-info", root)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert dataset_id(layout) in out and f"format version  {DATASET_FORMAT} " in out

    scenarios = table(out, "route runs per scenario type")
    planned, n_finished, n_failed = (number(v) for v in scenarios["total"][:3])
    assert (planned, n_finished, n_failed) == (4, 3, 1)
    assert number(scenarios["total"][-1]) == sum(frames.values())
    for scenario in {k.scenario for k in finished}:
        row = scenarios[scenario]
        assert number(row[1]) == sum(1 for k in finished if k.scenario == scenario)
        assert number(row[-1]) == sum(n for k, n in frames.items() if k.scenario == scenario)
    towns = table(out, "route runs per town")
    assert [number(v) for v in towns["town"]] == [3, 1, sum(frames.values())]

    on_disk = table(out, "on disk")
    assert on_disk["data"][:2] == info.human(du(root / "data")).split()
    assert number(on_disk["data"][2]) == sum(1 for p in (root / "data").rglob("*") if p.is_file())
    usage = info.disk_usage(layout)  # now, with the card written: to the byte what du says
    for part in ("data", "results", "logs"):
        assert usage[part].bytes == du(root / part), part
    assert usage["total"].bytes == du(root)
    assert f"dataset card {root / 'README.md'}" in out


# ----------------------------------------------------------------------------- the dataset card


def test_the_card_is_written_after_a_collection_and_by_info(collected_root, tmp_path):
    card = (collected_root / "README.md").read_text()
    ident = dataset_id(Layout(collected_root))
    finished = finished_runs(collected_root)
    frames = sum(frames_of(collected_root, k) for k in finished)
    assert card.startswith(f"# Dataset `{ident}`") and "(after a collection)" in card
    assert f"| frames | {frames} in finished route runs |" in card
    assert f"| format version | {DATASET_FORMAT} " in card and "docs/dataset-format.md" in card
    assert "python -m tools.collect collect" in card and str(checkout_head() or "commit unknown") in card
    assert "trained_on.dataset_id" in card

    root = copy_root(collected_root, tmp_path / "root")
    proc = run_bin("dataset-info", root)
    assert proc.returncode == 0, proc.stderr
    card = (root / "README.md").read_text()
    assert "(by bin/dataset-info)" in card
    assert f"data {info.human(du(root / 'data'))}" in card
    assert not list(root.glob(".tmp-*"))  # written atomically


@pytest.mark.parametrize("case", ["no manifest", "newer format", "not a root"])
def test_info_of_a_root_without_a_manifest_or_of_a_newer_format_is_one_line_and_exit_2(case, collected_root,
                                                                                          tmp_path):
    root = copy_root(collected_root, tmp_path / "root")
    manifest = Layout(root).manifest
    if case == "no manifest":
        manifest.unlink()
    elif case == "newer format":
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format_version": DATASET_FORMAT + 1}))
    else:
        root = tmp_path / "empty"
        root.mkdir()
    before = tree(root)
    proc = run_bin("dataset-info", root)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"collect: --root {root}" if case != "newer format"
                                                   else f"collect: {manifest}: dataset format version"), proc.stderr
    assert tree(root) == before  # nothing written, the card left as it was
