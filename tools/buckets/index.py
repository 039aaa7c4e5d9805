"""The frame index, ROOT/buckets/index.json: the bucket rules (tools/dataset/bucket_rules.py) applied to every
frame of every finished route run (`label_run`), with each run's town and weather class, read in worker processes
(`in_parallel`). A run unchanged since the last build (same result file, same frame count) is taken from the index
(`read_index`) instead of its frames: a rebuild after new routes reads only new or redone runs (`label_runs`).
The index is written by the command (tools.buckets.build) with the collections (`index_text`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tqdm import tqdm

from tools.core import files
from tools.dataset.bucket_rules import RULES, classify
from tools.dataset.buckets import run_key
from tools.dataset.frames import FrameError, indexed_measurements, read_measurements, read_run_head
from tools.dataset.layout import FRAME_SUFFIX, Layout
from tools.dataset.weather import weather_class

#: 2: each run's weather class.
INDEX_FORMAT = 2


def _rle(labels: list[str | None]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    return out


def _unrle(pairs: list[list[Any]]) -> list[str | None]:
    return [label for label, count in pairs for _ in range(int(count))]


def read_town(layout: Layout, rel: str) -> str:
    """The town of a route run (its measurements index's, else its run.json `town`); ValueError when neither
    can say."""
    key = run_key(rel)
    head = read_run_head(layout.run_measurements(key))  # the run's measurements index, when it lists its frames
    if head is not None and head[1] == layout.frame_count(key):
        return head[0]
    path = layout.run_settings(key)
    try:
        # parse_float=str: the dense route's thousands of floats stay text (40% of the parse, the bulk of a
        # first build's time before frames are read); the document is checked as fully as before.
        return str(files.read_json(path, parse_float=str)["town"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: cannot read the run's town ({type(e).__name__}: {e})") from None


def label_run(layout: Layout, rel: str, town: str | None = None) -> dict[str, Any]:
    """Read one run's measurements: its town (`town`: known already), its weather class (of its first readable
    frame's `weather`: the route's, the same in every frame; "?" when no frame is readable) and the bucket of
    every frame (None: unreadable)."""
    key = run_key(rel)
    problems = []
    if town is None or town == "?":
        try:
            town = read_town(layout, rel)
        except ValueError as e:
            town = "?"
            problems.append(f"{e}; its frames are left out")
    folder = str(layout.frames_dir(key))
    names = layout.frame_names(key)  # without a Path object per frame (a third of the time per frame)
    # The run's measurements index, when it lists exactly its frames: one file read instead of one per frame.
    indexed = indexed_measurements(layout.run_measurements(key), names) if town != "?" else None
    if indexed is not None:
        weather = weather_class(indexed[0].weather) if indexed else "?"
        return {"town": town, "weather": weather, "labels": [classify(m) for m in indexed], "problems": problems}
    labels: list[str | None] = [None] * len(names)
    weather = "?"
    for name in names:
        try:
            index = int(name[: -len(FRAME_SUFFIX)])
        except ValueError:
            continue
        if index >= len(labels):  # numbering with a gap: the missing frames stay None
            labels.extend([None] * (index + 1 - len(labels)))
        if town == "?":
            continue
        path = os.path.join(folder, name)
        try:
            measurements = read_measurements(path)
            labels[index] = classify(measurements)
        except (OSError, FrameError, TypeError, ValueError) as e:
            problems.append(f"{path}: unreadable frame, left out ({type(e).__name__}: {e})")
            continue
        if weather == "?":
            weather = weather_class(measurements.weather)
    return {"town": town, "weather": weather, "labels": labels, "problems": problems}


def _label_chunk(layout: Layout, chunk: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
    return [label_run(layout, rel, town) for rel, town in chunk]


def _town_chunk(layout: Layout, rels: list[str]) -> list[str]:
    return [_town_or_unknown(layout, rel) for rel in rels]


#: Runs per task of the worker processes, and the fewest runs worth starting them for.
CHUNK = 32
PARALLEL_FROM = 64


def _workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def in_parallel(fn: Any, layout: Layout, items: list[Any]) -> Iterator[list[Any]]:
    """fn(layout, chunk) for chunks of `items` in order, in worker processes (reading measurements is CPU
    work: threads would share one core) when there are enough items and cores; else here."""
    chunks = [items[i: i + CHUNK] for i in range(0, len(items), CHUNK)]
    workers = _workers()
    if workers == 1 or len(items) < PARALLEL_FROM:
        yield from (fn(layout, chunk) for chunk in chunks)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(fn, [layout] * len(chunks), chunks)


def read_index(layout: Layout, this_id: str) -> dict[str, Any]:
    """The runs of ROOT/buckets/index.json that can be reused: same dataset, same rules. Else empty."""
    path = layout.bucket_index
    try:
        data = files.read_json(path)
        if data["format"] == INDEX_FORMAT and data["dataset_id"] == this_id and data["rules"] == RULES:
            return dict(data["runs"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {}


def run_towns(layout: Layout, state: dict[str, Any], index: dict[str, Any]) -> dict[str, str]:
    """The town of every finished run ("?" when its run.json cannot say): from the index when the run is
    unchanged since, else from its run.json."""
    towns, todo = {}, []
    for rel, r in state["runs"].items():
        if _unchanged(index.get(rel), r):
            towns[rel] = index[rel]["town"]
        else:
            todo.append(rel)
    for rels, found in zip([todo[i: i + CHUNK] for i in range(0, len(todo), CHUNK)],
                           in_parallel(_town_chunk, layout, todo), strict=True):
        towns.update(zip(rels, found, strict=True))
    return towns


def _unchanged(indexed: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """An index entry still describes a run: same result file, same frame count."""
    return indexed is not None and all(indexed.get(k) == v for k, v in now.items())


def _town_or_unknown(layout: Layout, rel: str) -> str:
    try:
        return read_town(layout, rel)
    except ValueError:
        return "?"


def label_runs(layout: Layout, state: dict[str, Any], index: dict[str, Any], towns: dict[str, str]
                ) -> tuple[dict[str, dict[str, Any]], int, list[str]]:
    """{rel: {"town", "weather", "frames", "labels"}} for every finished run: from the index when the run is
    unchanged since, else read from its frames (in worker processes; `towns`: those read already)."""
    runs, todo = {}, []
    for rel, r in state["runs"].items():
        old = index.get(rel)
        if _unchanged(old, r):
            runs[rel] = {"town": old["town"], "weather": old["weather"], "frames": r["frames"],
                         "labels": _unrle(old["labels"])}
        else:
            todo.append((rel, towns.get(rel)))
    reused = len(runs)
    bar = tqdm(total=len(state["runs"]), initial=reused, unit="run", desc="buckets", file=sys.stderr,
               dynamic_ncols=True)
    chunks = [todo[i: i + CHUNK] for i in range(0, len(todo), CHUNK)]
    for chunk, results in zip(chunks, in_parallel(_label_chunk, layout, todo), strict=True):
        for (rel, _), result in zip(chunk, results, strict=True):
            for problem in result["problems"]:
                tqdm.write(f"buckets: {problem}", file=sys.stderr)
            runs[rel] = {"town": result["town"], "weather": result["weather"], "frames": state["runs"][rel]["frames"],
                         "labels": result["labels"]}
        bar.update(len(chunk))
    bar.close()
    unreadable = sorted(layout.frame_path(run_key(rel), i).relative_to(layout.root).as_posix()
                        for rel, r in runs.items() for i, label in enumerate(r["labels"]) if label is None)
    return dict(sorted(runs.items())), reused, unreadable


def index_text(state: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    """ROOT/buckets/index.json of the labelled runs (`label_runs`) of the finished runs `state` (dataset_state)."""
    return json.dumps({
        "format": INDEX_FORMAT, "dataset_id": state["dataset_id"], "rules": RULES,
        "runs": {rel: {**state["runs"][rel], "town": r["town"], "weather": r["weather"],
                       "labels": _rle(r["labels"])} for rel, r in runs.items()},
    }, separators=(",", ":")) + "\n"
