"""Py123D export: every finished route run as a Py123D log, its town as a Py123D map (docs/py123d.md).

Written with py123d's own writers (the optional extra `pip install '.[py123d]'`, py123d 0.7.0):
`ArrowLogWriter` for the logs, `iter_xodr_map_objects` + `ArrowMapWriter` for the maps. Under OUT, a Py123D
data root (read it with PY123D_DATA_ROOT=OUT):

    OUT/logs/drivekit_train/<Scenario>__<run>/     one log per finished route run
        ego_state_se3.arrow  box_detections_se3.arrow  camera.pcam_f0.arrow ...  lidar.lidar_top.arrow
        traffic_light_detections.arrow  route_position.arrow  sync.arrow
        drivekit.json                              which run of which dataset it was made from (SOURCE)
    OUT/maps/drivekit/drivekit_<town>.arrow        the run's town (run.json `town`), converted once

How one frame and a town are converted: tools.collect.inspect.py123d_convert.

A log is written into a temporary folder under OUT and renamed into place complete: a log folder under
OUT/logs is always whole. `drivekit.json` records the result file's digest and the frame count: a log whose
run was redone since is written again, a current one is skipped. Only runs that `results.run_state` calls
finished are exported.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tools.collect.base.processes import die_with_parent
from tools.collect.inspect.py123d_convert import DATASET, SPLIT, export_town, log_dir, log_name, map_file, write_log
from tools.core import atomic, cli, files
from tools.core.errors import ToolError
from tools.dataset import heartbeats, results
from tools.dataset.frames import FrameError
from tools.dataset.layout import Layout, RunKey, open_root, unwritable
from tools.dataset.manifest import dataset_id, read_manifest, tool_version
from tools.dataset.results import RunState, run_states

#: The py123d release this export is written against (pyproject.toml's `py123d` extra pins it).
PY123D_VERSION = "0.7.0"
#: The file in each log folder that says what it was made from.
SOURCE = "drivekit.json"
SOURCE_FORMAT = 1
#: export-py123d writes logs in worker processes (--workers, default: the CPUs) from this many frames on.
PARALLEL_FROM_FRAMES = 4000


# ----------------------------------------------------------------------------- checks


def require_py123d(flag: str) -> None:
    """ToolError unless the py123d extra is installed, in the version this export is written against."""
    try:
        import py123d
    except ImportError:
        raise ToolError(f"{flag}: the py123d package is not installed; install the extra: pip install '.[py123d]' "
                        f"(py123d {PY123D_VERSION})") from None
    version = str(getattr(py123d, "__version__", "?"))
    if version != PY123D_VERSION:
        raise ToolError(f"{flag}: py123d {version} is installed, this export is written for py123d {PY123D_VERSION}; "
                        "install the extra: pip install '.[py123d]'")


def check_out(out: Any, layout: Layout) -> Path:
    """The --out folder: given, a folder or nothing yet, writable, and not inside the dataset root (but its
    py123d/ folder), whose logs/ it would mix with ours."""
    if out is None or out == "" or isinstance(out, bool):
        raise ToolError(f"--out missing: give the Py123D data root to write logs/ and maps/ into, e.g. --out "
                        f"{layout.py123d}")
    path = Path(cli.text(out, "out")).expanduser().absolute()
    inside = path == layout.root or layout.root in path.parents
    if inside and path != layout.py123d and layout.py123d not in path.parents:
        raise ToolError(f"--out {path}: inside the dataset root {layout.root}, whose own folders it would mix with; "
                        f"give a folder outside it, or {layout.py123d}")
    for sub in (path / "logs", path / "maps"):
        if sub == layout.root or sub in layout.root.parents:
            raise ToolError(f"--out {path}: its {sub.name}/ folder holds the dataset root {layout.root}, which the "
                            "export would write into; give another folder")
    why = unwritable(path)
    if why:
        raise ToolError(f"--out {path}: {why}; give a folder you can write to (it is made when missing)")
    return path


# ----------------------------------------------------------------------------- one run's log


def _source(layout: Layout, key: RunKey, frames: int) -> dict[str, Any]:
    """What a log is made from: the dataset, the run, its result file's digest, the frame count."""
    result = files.read_bytes(layout.result_path(key), files.MAX_JSON_BYTES)
    return {"format": SOURCE_FORMAT, "dataset_id": dataset_id(layout), "run": str(key),
            "result_sha256": hashlib.sha256(result).hexdigest(), "frames": frames, "tool": tool_version(),
            "py123d": PY123D_VERSION}


def log_is_current(layout: Layout, key: RunKey, out: Path) -> bool:
    """Whether OUT holds a complete log of the run as it is now (same result file, same frames)."""
    try:
        written = files.read_json(log_dir(out, key) / SOURCE)
        want = _source(layout, key, layout.frame_count(key))
    except (OSError, ValueError, ToolError):
        return False
    return all(written.get(k) == want[k] for k in ("format", "dataset_id", "run", "result_sha256", "frames"))


def export_run(layout: Layout, key: RunKey, out: Path, force: bool = False, make_map: bool = True) -> int | None:
    """Write one finished run's log under OUT (and, with `make_map`, its town's map when missing: a town py123d
    cannot convert is said in one line, and the log is written without a map). Returns the frames written, None
    when OUT already holds the run's current log (unless `force`). ToolError for a run whose files cannot be
    read."""
    if not force and log_is_current(layout, key, out):
        return None
    try:
        run = files.read_json(layout.run_settings(key))
    except (OSError, ValueError) as e:
        raise ToolError(f"{key}: cannot read {layout.run_settings(key)} ({e})") from None
    town = str(run.get("town") or "unknown")
    xodr = Path(str(run.get("town_file") or ""))
    if make_map and xodr.is_file():
        try:
            export_town(out, town, xodr)
        except ToolError as e:
            print(f"py123d: {e}; the log of {key} names no map", file=sys.stderr)
    has_map = map_file(out, town).is_file()  # else the log names no map (its town file is gone)
    map_api = None
    if has_map:
        from py123d.api.map.arrow.arrow_map_api import get_lru_cached_map_api

        map_api = get_lru_cached_map_api(map_file(out, town))
    frames = layout.frame_count(key)
    if not frames:
        raise ToolError(f"{key}: finished, but no frames under {layout.frames_dir(key)}; nothing to export")
    source = _source(layout, key, frames)
    out.mkdir(parents=True, exist_ok=True)
    tmp = atomic.temporary_dir(out, log_name(key))
    try:
        try:
            written = write_log(layout, key, tmp, town, map_api)
        except (FrameError, KeyError) as e:
            raise ToolError(f"{key}: a frame cannot be exported ({e}); python -m tools.collect validate "
                            f"{layout.root} checks every frame") from None
        made = tmp / SPLIT / log_name(key)
        atomic.write_json(made / SOURCE, {**source, "frames": written, "town_file": str(xodr),
                                          "map": str(map_file(out, town).relative_to(out)) if has_map else None})
        target = log_dir(out, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.remove_tree(target)
        try:
            os.rename(made, target)
        except OSError:  # another exporter put it there meanwhile: it is as complete as ours
            if not (target / "sync.arrow").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written


def remove_stale_temporaries(out: Path) -> None:
    """Temporary folders of exporters that were killed (their process is gone): never part of the logs."""
    for p in atomic.stale_temporaries(out, folders=True):
        shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def _heartbeat(layout: Layout, key: RunKey) -> Iterator[None]:
    """Keep the run's heartbeat fresh while its log is written (a big town's map takes minutes): a collector
    kills an attempt whose heartbeat went stale."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(heartbeats.HEARTBEAT_EVERY_S):
            heartbeats.write_heartbeat(layout, key, -1)

    thread = threading.Thread(target=beat, name="py123d-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# ----------------------------------------------------------------------------- entries


def export_after_run(layout: Layout, key: RunKey, heartbeat: bool = False) -> None:
    """`run --py123d` (each run of `collect --py123d`): the run's log under ROOT/py123d once its result says it
    finished; nothing for a run that did not. `heartbeat`: the run's process, watched by a collector, keeps
    beating meanwhile."""
    if results.run_state(layout, key) is not RunState.FINISHED:
        return
    started = time.time()
    with _heartbeat(layout, key) if heartbeat else contextlib.nullcontext():
        frames = export_run(layout, key, layout.py123d)
    if frames is not None:
        print(f"py123d: {key}: {frames} frames written as the Py123D log {log_dir(layout.py123d, key)} in "
              f"{time.time() - started:.1f} s", file=sys.stderr)


def export_missing(layout: Layout) -> None:
    """The end of a local `collect --py123d`: logs for the finished runs that have no current one (finished
    before, or their export was cut short), so that every finished run of the root has its log."""
    finished = [k for k, state in run_states(layout).items() if state is RunState.FINISHED]
    todo = [k for k in finished if not log_is_current(layout, k, layout.py123d)]
    failed = []
    for key in todo:
        try:
            export_after_run(layout, key)
        except ToolError as e:
            failed.append(key)
            print(f"py123d: {e}", file=sys.stderr)
    done = len(finished) - len(failed)
    print(f"py123d: {done} of {len(finished)} finished route runs have their Py123D log in "
          f"{layout.py123d / 'logs' / SPLIT} ({len(todo) - len(failed)} written now for runs finished before"
          + (f", {len(failed)} could not be written: named above" if failed else "") + "); "
          f"read them with PY123D_DATA_ROOT={layout.py123d} (docs/py123d.md)", file=sys.stderr)


def export_root(root: Any = None, out: Any = None, workers: Any = None, force: Any = False) -> None:
    """`python -m tools.collect export-py123d ROOT --out DIR`: every finished route run of ROOT as a Py123D log
    under OUT, its town as a Py123D map, in `workers` processes. Resumable: runs whose current log is there are
    skipped."""
    started = time.time()
    require_py123d("export-py123d")
    force = cli.switch(force, "force")
    workers = None if workers is None else cli.integer(workers, "workers", 1)
    layout = open_root(root)
    read_manifest(layout)  # a root of another format version is refused here
    out_path = check_out(out, layout)
    states = run_states(layout)
    finished = [k for k, s in states.items() if s is RunState.FINISHED]
    unfinished = {k: s for k, s in states.items() if s is not RunState.FINISHED}
    if not finished:
        counts = ", ".join(f"{n} {st.value}" for st in RunState
                           if (n := sum(1 for s in unfinished.values() if s is st))) or "no route runs at all"
        raise ToolError(f"--root {layout.root}: no finished route runs to export ({counts}); collect first: "
                        f"bin/collect ROUTES_DIR --root {layout.root}")
    if unfinished:
        shown = ", ".join(f"{k} ({s.value})" for k, s in list(unfinished.items())[:5])
        more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
        print(f"export-py123d: leaving out {len(unfinished)} route runs that are not finished: {shown}{more}",
              file=sys.stderr)

    out_path.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out_path)
    todo = [k for k in finished if force or not log_is_current(layout, k, out_path)]
    towns = {}  # each town once, before the logs (which look their traffic lights' lanes up in it)
    for key in todo:
        run = _run_json(layout, key)
        towns.setdefault(str(run.get("town") or "unknown"), Path(str(run.get("town_file") or "")))
    for town, xodr in sorted(towns.items()):
        try:
            if xodr.is_file():
                export_town(out_path, town, xodr, force=force)
            elif not map_file(out_path, town).is_file():
                print(f"export-py123d: the town file {xodr} of {town!r} is gone: its logs name no map",
                      file=sys.stderr)
        except ToolError as e:
            print(f"export-py123d: {e}: its logs name no map", file=sys.stderr)

    failed: list[str] = []
    frames = 0
    work_started = time.time()
    sizes = {k: layout.frame_count(k) for k in todo}
    if workers is None:  # starting a worker (importing py123d) takes seconds: worth it for many frames only
        workers = _cpus() if sum(sizes.values()) >= PARALLEL_FROM_FRAMES else 1
    with tqdm(total=sum(sizes.values()), unit="frame", desc="export-py123d", file=sys.stderr, dynamic_ncols=True,
              disable=not todo) as bar:
        for key, n, error in _in_workers(layout, out_path, todo, force, workers):
            if error is not None:
                failed.append(error)
                tqdm.write(f"export-py123d: {error}", file=sys.stderr)
            frames += n or 0
            bar.set_postfix_str(str(key), refresh=False)
            bar.update(sizes[key])
    seconds = time.time() - work_started
    rate = f", {frames / seconds:.0f} frames/s" if frames and seconds > 0 else ""
    maps = sorted(p.stem.removeprefix(f"{DATASET}_") for p in (out_path / "maps" / DATASET).glob("*.arrow"))
    procs = min(workers, max(len(todo), 1))
    print(f"export-py123d: {len(todo) - len(failed)} route runs exported ({frames} frames in {seconds:.1f} s{rate}, "
          f"{procs} process{'es' if procs > 1 else ''}), {len(finished) - len(todo)} skipped as already exported, "
          f"{len(unfinished)} not finished and left out; logs in {out_path / 'logs' / SPLIT}, maps "
          f"({', '.join(maps) or 'none'}) in {out_path / 'maps' / DATASET}; read them with PY123D_DATA_ROOT="
          f"{out_path} (docs/py123d.md). {time.time() - started:.1f} s in all.", file=sys.stderr)
    if failed:
        raise ToolError(f"{len(failed)} finished route runs could not be exported (named above); the others are")


def _in_workers(layout: Layout, out: Path, keys: list[RunKey], force: bool, workers: int
                ) -> Iterator[tuple[RunKey, int | None, str | None]]:
    """(key, frames written or None, the ToolError's message or None) of each run, as they are done: in this
    process with one worker, else in a pool of processes that die with this one."""
    if workers <= 1 or len(keys) <= 1:
        for key in keys:
            yield (key, *_export_job(str(layout.root), str(out), key.scenario, key.name, force))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawned, not forked: this process holds pyarrow's threads (the maps); a worker dies with it (as collect's)
    with ProcessPoolExecutor(min(workers, len(keys)), mp_context=multiprocessing.get_context("spawn"),
                             initializer=die_with_parent) as pool:
        jobs = {pool.submit(_export_job, str(layout.root), str(out), k.scenario, k.name, force): k for k in keys}
        for job in as_completed(jobs):
            yield (jobs[job], *job.result())


def _export_job(root: str, out: str, scenario: str, name: str, force: bool) -> tuple[int | None, str | None]:
    """One run's export in a worker: (frames written or None, None) or (None, what went wrong)."""
    try:
        return export_run(Layout(Path(root)), RunKey(scenario, name), Path(out), force=force, make_map=False), None
    except ToolError as e:
        return None, str(e)


def _run_json(layout: Layout, key: RunKey) -> dict[str, Any]:
    try:
        return files.read_json(layout.run_settings(key))
    except (OSError, ValueError):
        return {}


def _cpus() -> int:
    """The CPUs this process may use, at most 8 (each worker holds py123d and a log's buffers: about 0.4 GB)."""
    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except AttributeError:  # not Linux
        return max(1, min(8, os.cpu_count() or 1))
