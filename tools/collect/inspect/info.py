"""What a dataset is: `info` (bin/dataset-info) and the dataset card, from the manifest (whose collection
record tools.collect.runner.record writes) and the root's contents.

    print_info          the manifest with counts (route runs per scenario type and town, frames) and sizes on
                        disk; writes the dataset card
    write_card          ROOT/README.md (Layout.card), a Markdown page made from the manifest and the counts:
                        written atomically after every collection (tools.collect.runner, a lone `run`) and by
                        `info`

Counts ask `tools.dataset.results.run_states` (the one definition of a finished or failed route run) for every
run the manifest plans or the disk holds (`tools.collect.runner.progress`'s rule), count frame files with one listing
per finished run (`Layout.frame_count`) and read a run's town from the head of its measurements index
(`frames.read_run_head`, else its run.json). Sizes walk the root with a pool of threads, one directory listing
per task: a root of thousands of route runs on a network file system is walked in parallel.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.collect.base.config import CollectSettings
from tools.collect.inspect.tables import count_states, known_runs, state_row, text_table
from tools.core import atomic, files
from tools.core.errors import ToolError, human
from tools.dataset.frames import read_run_head
from tools.dataset.layout import (
    BUCKETS,
    CACHE,
    DATA,
    DATASET_FORMAT,
    LOGS,
    READABLE_FORMATS,
    RESULTS,
    Layout,
    RunKey,
    open_root,
)
from tools.dataset.manifest import dataset_id, now_iso, read_manifest
from tools.dataset.results import FAILED_STATES, RunState, run_states

#: Where a reader learns the format (relative to the drivekit checkout).
FORMAT_DOC = "docs/dataset-format.md"
#: Threads that list folders and count frames: most of the time is spent waiting on the file system.
THREADS = 8
#: The top-level folders whose sizes `info` always names (any other folder there is named too; files at the top
#: and the root folder itself count as "other").
SIZE_PARTS = (DATA, RESULTS, LOGS, BUCKETS, CACHE)


# ----------------------------------------------------------------------------- counts


@dataclass
class Counts:
    """Route runs and frames of a root: per scenario type a Counter of RunState (progress.count_states) and the
    frames of its finished runs; per town a Counter of "finished", "failed" and "frames"."""

    states: dict[str, Counter] = field(default_factory=dict)
    frames: Counter = field(default_factory=Counter)
    towns: dict[str, Counter] = field(default_factory=dict)

    def total(self) -> Counter:
        """RunState -> route runs over every scenario type."""
        return sum(self.states.values(), Counter())


def run_town(layout: Layout, key: RunKey) -> str | None:
    """The town of a route run: the head of its measurements index, else its run.json; None when neither says."""
    head = read_run_head(layout.run_measurements(key))
    if head is not None:
        return head[0]
    try:
        town = files.read_json(layout.run_settings(key)).get("town")
    except (OSError, ValueError, AttributeError):
        return None
    return str(town) if town else None


def count_root(layout: Layout, manifest: dict[str, Any] | None) -> Counts:
    """Route runs per scenario type (by state) and per town, frames of the finished ones."""
    keys = known_runs(layout, manifest)
    states = run_states(layout, keys)
    counts = Counts(states=count_states(layout, keys, states))
    ended = [key for key, state in states.items() if state is RunState.FINISHED or state in FAILED_STATES]

    def look(key: RunKey) -> tuple[str | None, int]:
        return run_town(layout, key), layout.frame_count(key) if states[key] is RunState.FINISHED else 0

    with ThreadPoolExecutor(THREADS) as pool:
        for key, (town, frames) in zip(ended, pool.map(look, ended), strict=True):
            finished = states[key] is RunState.FINISHED
            counts.frames[key.scenario] += frames
            row = counts.towns.setdefault(town or "(unknown)", Counter())
            row["finished" if finished else "failed"] += 1
            row["frames"] += frames
    return counts


SCENARIO_COLUMNS = ("planned", "finished", "failed", "running", "pending", "failure rate", "frames")


def scenario_rows(counts: Counts) -> list[list[str]]:
    """progress's rows (planned, finished, failed, running, pending, failure rate) with the frames."""
    rows = [[*state_row(name, states), str(counts.frames[name])] for name, states in sorted(counts.states.items())]
    return [*rows, [*state_row("total", counts.total()), str(sum(counts.frames.values()))]]


TOWN_COLUMNS = ("finished", "failed", "frames")


def town_rows(counts: Counts) -> list[list[str]]:
    rows = [[name, str(row["finished"]), str(row["failed"]), str(row["frames"])]
            for name, row in sorted(counts.towns.items())]
    total = sum(counts.towns.values(), Counter())
    return [*rows, ["total", str(total["finished"]), str(total["failed"]), str(total["frames"])]]


# ----------------------------------------------------------------------------- sizes


@dataclass
class Usage:
    bytes: int = 0  # on disk (allocated blocks, as du counts them)
    files: int = 0


def _list(path: str, part: str) -> tuple[str, int, int, list[str], list[tuple[tuple[int, int], int]]]:
    """One folder: (part, bytes of its files with one link and of its subfolders' own blocks, those files, its
    subfolders, ((device, inode), bytes) of its files with several links, to be counted once by the caller)."""
    size = files = 0
    subdirs: list[str] = []
    linked: list[tuple[tuple[int, int], int]] = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:  # gone since the listing
                    continue
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.path)
                    size += st.st_blocks * 512
                elif st.st_nlink > 1:
                    linked.append(((st.st_dev, st.st_ino), st.st_blocks * 512))
                else:
                    size += st.st_blocks * 512
                    files += 1
    except OSError:  # unreadable or gone: counts nothing
        pass
    return part, size, files, subdirs, linked


def disk_usage(layout: Layout) -> dict[str, Usage]:
    """Bytes on disk and files under ROOT: per SIZE_PARTS folder and any other top-level folder (py123d/,
    reports/, slurm/ ...), "other" (the root folder itself and the files at the top: the manifest, the card) and
    "total" (what `du -s --block-size=1 ROOT` says: folders' own blocks included, a file with several links
    once). Listed by THREADS threads, one folder per task."""
    usage = {part: Usage() for part in (*SIZE_PARTS, "other")}
    seen: set[tuple[int, int]] = set()

    def add(part: str, size: int, files: int, linked: list[tuple[tuple[int, int], int]]) -> None:
        usage[part].bytes += size
        usage[part].files += files
        for inode, blocks in linked:
            if inode not in seen:
                seen.add(inode)
                usage[part].bytes += blocks
                usage[part].files += 1

    try:
        top = os.stat(layout.root)
        entries = list(os.scandir(layout.root))
    except OSError as e:
        raise ToolError(f"--root {layout.root}: cannot read it ({e.strerror})") from None
    usage["other"].bytes += top.st_blocks * 512
    with ThreadPoolExecutor(THREADS) as pool:
        pending = set()
        for entry in sorted(entries, key=lambda e: e.name):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                part = entry.name
                usage.setdefault(part, Usage()).bytes += st.st_blocks * 512
                pending.add(pool.submit(_list, entry.path, part))
            elif st.st_nlink > 1:
                add("other", 0, 0, [((st.st_dev, st.st_ino), st.st_blocks * 512)])
            else:
                add("other", st.st_blocks * 512, 1, [])
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                part, size, files, subdirs, linked = future.result()
                add(part, size, files, linked)
                pending |= {pool.submit(_list, d, part) for d in subdirs}
    usage["other"] = usage.pop("other")  # listed last, before the total
    usage["total"] = Usage(sum(u.bytes for u in usage.values()), sum(u.files for u in usage.values()))
    return usage


# ----------------------------------------------------------------------------- describing a manifest


def _short(digest: Any, n: int = 12) -> str:
    return str(digest)[:n] if digest else "?"


def code_text(code: Any) -> str:
    """"drivekit 0.1.0, commit 0b3d05284d81 (dirty)" from an entry's `code`."""
    if not isinstance(code, dict):
        return "not recorded"
    parts = [f"drivekit {code.get('version') or '(not installed)'}"]
    if code.get("commit"):
        dirty = {True: " with uncommitted changes", False: "", None: ", changes unknown"}.get(code.get("dirty"), "")
        parts.append(f"commit {code['commit']}{dirty} (from {code.get('source') or '?'})")
    else:
        parts.append("commit unknown (no git checkout, no image label)")
    return ", ".join(parts)


def changed_settings(settings: Any) -> str:
    """The settings of an entry that differ from CollectSettings' defaults, as key=value ("defaults" if none)."""
    if not isinstance(settings, dict):
        return "-"
    defaults = CollectSettings().to_dict()
    changed = [f"{k}={v}" for k, v in settings.items() if defaults.get(k, object()) != v]
    return " ".join(changed) or "defaults"


def rig_text(rig: Any) -> str:
    if not isinstance(rig, dict):
        return "-"
    cams = ", ".join(f"{c.get('name')} {c.get('width')}x{c.get('height')} fov {c.get('fov')}"
                     for c in rig.get("cameras") or [])
    lidar, bev = rig.get("lidar") or {}, rig.get("bev") or {}
    return (f"cameras {cams or 'none'}; LiDAR {lidar.get('channels')} channels x {lidar.get('azimuth_steps')} "
            f"steps, {lidar.get('range')} m; BEV {bev.get('pixels')} px at {bev.get('resolution')} m/px")


def _command(entry: dict[str, Any]) -> str:
    if entry.get("command"):
        return str(entry["command"])
    return "collect" if "routes_dir" in entry else "?"


def collection_summary(entry: dict[str, Any]) -> list[str]:
    """One row of the collections table: time, by, command, routes, code, settings changed from the defaults."""
    routes = entry.get("routes")
    if isinstance(routes, dict):
        where = f"{routes.get('files')} files, sha256 {_short(routes.get('sha256'))}"
    else:
        where = str(entry.get("routes_dir") or "-")
    code = entry.get("code") if isinstance(entry.get("code"), dict) else {}
    version = code.get("version") or "-"
    commit = f"{_short(code.get('commit'), 10)}{'+dirty' if code.get('dirty') else ''}" if code.get("commit") else "-"
    return [str(entry.get("time", "?")), str(entry.get("user", "?")), _command(entry), where, f"{version} {commit}",
            changed_settings(entry.get("settings"))]


def collection_details(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of everything an entry records; what an older entry lacks is left out."""
    out: list[tuple[str, str]] = [("time", f"{entry.get('time', '?')} by {entry.get('user', '?')} with "
                                           f"{entry.get('tool', '?')}")]
    if entry.get("argv"):
        out.append(("command", shlex.join(str(a) for a in entry["argv"])))
    if "format_version" in entry:
        out.append(("format version", str(entry["format_version"])))
    out.append(("code", code_text(entry.get("code"))))
    routes = entry.get("routes")
    if isinstance(routes, dict):
        out.append(("routes", f"{routes.get('dir')}: {routes.get('files')} route files, sha256 {routes.get('sha256')}"))
    elif entry.get("routes_dir"):
        out.append(("routes", str(entry["routes_dir"])))
    towns = entry.get("towns")
    if isinstance(towns, dict) and towns:
        out.append(("towns", ", ".join(f"{name} (sha256 {_short(h)})" for name, h in towns.items())))
    runs = [f"{entry[k]} {label}" for k, label in (("repetitions", "repetitions"), ("repetition", "(repetition)"),
                                                  ("max_attempts", "attempts at most"), ("workers", "workers"))
            if k in entry]
    if entry.get("slurm"):
        runs.append("on SLURM")
    if runs:
        out.append(("runs", ", ".join(runs)))
    world = entry.get("world")
    if isinstance(world, dict):
        out.append(("world", ", ".join(f"{k} {v}" for k, v in world.items())))
    rate = entry.get("rate")
    if isinstance(rate, dict):
        out.append(("rate", f"{rate.get('sim_hz')} Hz simulated, one frame recorded every {rate.get('record_every')} "
                            f"ticks ({rate.get('frame_dt')} s apart)"))
    seeds = entry.get("seeds")
    if isinstance(seeds, dict):
        out.append(("seeds", f"offset {seeds.get('offset')}; per run {seeds.get('rule')}"))
    if "settings" in entry:
        settings = entry["settings"]
        text = " ".join(f"{k}={v}" for k, v in settings.items()) if isinstance(settings, dict) else str(settings)
        out.append(("settings", text or "-"))
    if "rig" in entry:
        out.append(("rig", rig_text(entry["rig"]) if entry["rig"] else "none recorded (nothing recorded)"))
    rig_file = entry.get("rig_file")
    if isinstance(rig_file, dict):
        out.append(("rig file", f"{rig_file.get('path')} (sha256 {_short(rig_file.get('sha256'))})"))
    expert = entry.get("expert")
    if isinstance(expert, dict):
        params = expert.get("parameters") or {}
        n = sum(len(v) for v in params.values() if isinstance(v, dict))
        out.append(("expert", f"{expert.get('module')} (source sha256 {_short(expert.get('sha256'))}), {n} "
                              "parameters (in manifest.json)"))
    mach = entry.get("machine")
    if isinstance(mach, dict):
        packages = ", ".join(f"{k} {v}" for k, v in (mach.get("packages") or {}).items())
        out.append(("machine", f"{mach.get('hostname')}: {mach.get('cpu')} ({mach.get('cpus')} CPUs, "
                               f"{mach.get('usable_cpus')} usable), {mach.get('os')}, Python {mach.get('python')}"))
        if packages:
            out.append(("packages", packages))
    return out


COLLECTION_COLUMNS = ("#", "time", "by", "command", "routes", "code", "settings changed")


def _collections(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    entries = manifest.get("collections") or []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def format_version_text(manifest: dict[str, Any]) -> str:
    return (f"{manifest.get('format_version')} (this tool writes {DATASET_FORMAT} and reads "
            f"{', '.join(map(str, READABLE_FORMATS))}; {FORMAT_DOC})")


def info_text(layout: Layout, manifest: dict[str, Any], counts: Counts, sizes: dict[str, Usage]) -> str:
    """What `info` prints."""
    lines = [f"dataset root {layout.root}" + (" (an evaluation root)" if layout.is_evaluation else "")]
    head = [("dataset_id", dataset_id(layout)), ("format version", format_version_text(manifest)),
            ("created", f"{manifest.get('created', '?')} by {manifest.get('created_by', '?')} with "
                        f"{manifest.get('tool', '?')}")]
    width = max(len(k) for k, _ in head)
    lines += [f"  {k.ljust(width)}  {v}" for k, v in head]
    entries = _collections(manifest)
    lines += ["", f"collections: {len(entries)}"]
    if entries:
        rows = [[str(i), *collection_summary(e)] for i, e in enumerate(entries, 1)]
        everything = [list(COLLECTION_COLUMNS), *rows]
        widths = [max(len(r[i]) for r in everything) for i in range(len(COLLECTION_COLUMNS))]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in everything]
        details = collection_details(entries[-1])
        width = max(len(k) for k, _ in details)
        lines += ["", f"the latest collection ({len(entries)} of {len(entries)}):"]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in details]
    lines += ["", "route runs per scenario type (planned: in the manifest or on disk; frames: of finished runs):"]
    lines += ["  " + line for line in text_table(["scenario type", *SCENARIO_COLUMNS], scenario_rows(counts))]
    lines += ["", "route runs per town (finished and failed runs; frames of finished ones):"]
    lines += ["  " + line for line in text_table(["town", *TOWN_COLUMNS], town_rows(counts))]
    lines += ["", "on disk:"]
    lines += ["  " + line for line in text_table(["part", "size", "files"], size_rows(sizes))]
    return "\n".join(lines)


def size_rows(sizes: dict[str, Usage]) -> list[list[str]]:
    return [[part, human(u.bytes), str(u.files)] for part, u in sizes.items()]


# ----------------------------------------------------------------------------- the dataset card


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|")

    return ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(map(cell, r)) + " |" for r in rows]]


def card_text(layout: Layout, manifest: dict[str, Any], counts: Counts, sizes: dict[str, Usage] | None,
              written_by: str) -> str:
    """The dataset card: Markdown, from the manifest, the counts and (from `info`) the sizes."""
    ident = dataset_id(layout)
    _, planned, finished, failed, running, pending, rate = state_row("total", counts.total())
    entries = _collections(manifest)
    size = (f"{human(sizes['total'].bytes)} ({', '.join(f'{p} {human(sizes[p].bytes)}' for p in SIZE_PARTS)})"
            if sizes else f"not measured here: `bin/dataset-info {layout.root}` adds it")
    lines = [
        f"# Dataset `{ident}`",
        "",
        "A driving dataset recorded by drivekit: route runs (a route x a repetition) driven by a privileged expert, "
        "each recorded frame holding camera images (RGB, semantics, depth), a LiDAR point cloud, a BEV semantic "
        "raster, 3D boxes and the expert's measurements, with a leaderboard 2.0 result file per route run.",
        "",
        f"This card is written by drivekit from `manifest.json` ({written_by}) and replaced each time: keep notes "
        "elsewhere.",
        "",
        *_md_table(["", ""], [
            ["dataset_id", f"`{ident}`"],
            ["format version", f"{manifest.get('format_version')} (see {FORMAT_DOC} of drivekit)"],
            ["created", f"{manifest.get('created', '?')} by {manifest.get('created_by', '?')} with "
                        f"{manifest.get('tool', '?')}"],
            ["collections", f"{len(entries)}" + (f", the latest at {entries[-1].get('time', '?')}" if entries else "")],
            ["route runs", f"{planned} planned: {finished} finished, {failed} failed ({rate}), {running} running, "
                           f"{pending} pending"],
            ["frames", f"{sum(counts.frames.values())} in finished route runs"],
            ["size on disk", size],
            ["card written", now_iso()],
        ]),
        "",
        "## What it holds",
        "",
        "Route runs per scenario type (planned: in the manifest or on disk; frames: of finished runs):",
        "",
        *_md_table(["scenario type", *SCENARIO_COLUMNS], scenario_rows(counts)),
        "",
        "Route runs per town (finished and failed runs; frames of finished ones):",
        "",
        *_md_table(["town", *TOWN_COLUMNS], town_rows(counts)),
        "",
        "## How it was collected",
        "",
    ]
    if entries:
        rows = [[str(i), *collection_summary(e)] for i, e in enumerate(entries, 1)]
        lines += [*_md_table(list(COLLECTION_COLUMNS), rows), "", f"The latest collection ({len(entries)}):", ""]
        lines += [f"- **{label}**: {text}" for label, text in collection_details(entries[-1])]
        lines += ["", "Every field of every collection (the expert's parameters, the resolved rig, package "
                      "versions) is in `manifest.json` under `collections`."]
    else:
        lines.append("The manifest records no collection.")
    lines += [
        "",
        "## How to read it",
        "",
        f"- Layout, file formats and the meaning of every field: {FORMAT_DOC} of drivekit, format version "
        f"{manifest.get('format_version')}; what a frame holds: docs/frame-contract.md.",
        "- A route run is usable only when its result file (`results/<Scenario>/<run>.json`) says `Perfect` or "
        f"`Completed`: `bin/progress {layout.root}` counts them; `bin/dataset-info {layout.root}` prints this page's "
        "facts.",
        "- One frame in Python (msgpack, no pickle): `from tools.dataset.frames import read_frame; "
        "read_frame(Path('data/<Scenario>/<run>/frames/00000.msgpack'))` gives `measurements`, `boxes` and "
        "`sensors`.",
        f"- Training: `bin/build-buckets --root {layout.root} && bin/build-cache --root {layout.root} && "
        f"bin/train pretrain root={layout.root}`; every checkpoint names this dataset in its config.json "
        f"(`trained_on.dataset_id` = `{ident}`).",
        f"- Name this dataset by its dataset_id, `{ident}`: it stays the same wherever the root is copied.",
        "",
    ]
    return "\n".join(lines)


def write_card(layout: Layout, manifest: dict[str, Any], counts: Counts, sizes: dict[str, Usage] | None,
               written_by: str) -> Path:
    """Write ROOT/README.md atomically; returns its path."""
    atomic.write_text(layout.card, card_text(layout, manifest, counts, sizes, written_by))
    return layout.card


def card_after_collection(layout: Layout) -> None:
    """The card at the end of a collection (tools.collect.runner.local, a lone `run`): not in an evaluation root; a card
    that cannot be written is one warning line, never the collection's failure."""
    if layout.is_evaluation:
        return
    try:
        manifest = read_manifest(layout)
        if manifest is not None:
            write_card(layout, manifest, count_root(layout, manifest), None, "after a collection")
    except (OSError, ToolError) as e:
        print(f"collect: warning: the dataset card {layout.card} was not written ({e})", file=sys.stderr)


# ----------------------------------------------------------------------------- the command


def print_info(root: str | None) -> None:
    """`python -m tools.collect info`: print the manifest with counts and sizes, write the dataset card."""
    layout = open_root(root)
    manifest = read_manifest(layout)  # a root of another format version: ToolError
    if manifest is None:
        raise ToolError(f"--root {layout.root}: no {layout.manifest.name}, so nothing records how it was collected; "
                        "give the --root bin/collect wrote (a collection into this root writes one)")
    counts = count_root(layout, manifest)
    sizes = disk_usage(layout)
    print(info_text(layout, manifest, counts, sizes))
    if layout.is_evaluation:
        return
    try:
        path = write_card(layout, manifest, counts, sizes, "by bin/dataset-info")
    except OSError as e:
        print(f"info: the dataset card {layout.card} was not written ({e.strerror}); everything above is complete",
              file=sys.stderr)
        return
    print(f"\ndataset card {path}")
