"""The dataset root: where every file lives. The one place that names on-disk paths.

    ROOT/
      manifest.json                              format version, who/what/when collected it
      README.md                                  the dataset card, from the manifest (tools.collect.inspect.info)
      reports/<date>/report.json, report.html    quality reports of `validate` (tools.collect.inspect.quality)
      data/<Scenario>/<run>/                     one folder per route run (route x repetition)
          run.json                               settings of the run (seed, town, rig, attempt)
          heartbeat.json                         host, pid and time, rewritten while the run is alive
          frames/<index:05d>.msgpack             one file per recorded frame (tools.dataset.frames)
          metric_info.json                       an evaluated run's ego kinematics at every tick, Bench2Drive's file
                                                 (tools.dataset.metric_info; evaluation roots only)
      results/<Scenario>/<run>.json              leaderboard 2.0 result; its existence ends a run
      results/<Scenario>/<run>.webp              an evaluated run's picture (animated; tools.collect.base.film)
      logs/<Scenario>/<run>/attempt-<NN>.log     one log per attempt; their count is the attempt count
      logs/<Scenario>/<run>/run.lock             locked by the process running an attempt (claims.claim_run)
      logs/<Scenario>/<run>/attempts.json        each ended attempt's status, and what crashed (attempts.record_attempt)
      logs/<Scenario>/<run>/run-spec.json        the run as planned (collect.base.spec.RunSpec): what its process reads
      logs/<Scenario>/<run>/leaderboard-<NN>.json   a CARLA attempt: the leaderboard evaluator's own checkpoint,
                                                 published as the result when it holds a finished record
      logs/<Scenario>/<run>/leaderboard-<NN>.live.txt   its live results (--debug-checkpoint)
      logs/<Scenario>/<run>/agent-<NN>.json      a CARLA attempt: what the runner tells our agent (carla_agent)
      buckets/<collection>.json                  bucket files (tools.dataset.buckets)
      buckets/index.json                         the bucket builder's per-frame index
      cache/<key>/settings.json                  one training cache per preprocessing key (tools.dataset.cache)
      cache/<key>/data/<Scenario>/<run>/<index:05d>.rec   one record per recorded frame
      py123d/logs/<split>/<log>/  py123d/maps/<dataset>/   Py123D logs and maps of finished runs (collect --py123d)

An evaluation root (bin/evaluate: routes driven by a trained policy or the expert, nothing recorded) has
the same manifest.json, results/ and logs/, and two files of its own:

      evaluation.json                            what is evaluated: agent, checkpoint, routes, settings, argv;
                                                 written before any run, it makes ROOT an evaluation root
      result.json                                the aggregate: a leaderboard 2.0 checkpoint JSON over every
                                                 planned run (tools.dataset.score; 2.1 with --score 2.1)
      bench2drive/merged.json                    Bench2Drive's merged records, success rate and driving score
      bench2drive/merged_ability.json            Bench2Drive's five abilities (both: score --bench2drive,
                                                 tools.evaluate.bench2drive)

In an evaluation root a driving outcome is final (tools.dataset.results.run_state): `Layout.is_evaluation`.

A route run's folder name (<run>) is `RunKey.for_route`'s one rule: `<route file stem>_rep<K>` when the
route's id is the file's stem (one route per file, named after it, as LEAD ships them), else
`<route file stem>_route<id>_rep<K>`.

See docs/dataset-format.md for the schemas.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.core import atomic, cli, files
from tools.core.atomic import TMP_PREFIX
from tools.core.errors import ToolError

#: 2: run folders of a route whose id is its file's stem are named <stem>_rep<K> (docs/dataset-format.md).
#: 3: scenario actors in frames: semantic classes bicycle 19 and static 20, BEV classes 8 (pedestrian) and 9
#: (obstacle), measurements `scenario`; a version-2 root reads as it is and becomes 3 when collected into.
#: 4: LiDAR points stored in the zstd_shuffle codec (tools.dataset.codec); camera JPEGs written by libjpeg-turbo
#: through simplejpeg. A version-3 root reads as it is (a blob names its codec) and becomes 4 when collected into.
#: 5: frames and measurements indexes end with a CRC-32 of their bytes (frame format 2, tools.dataset.frames).
#: A version-2 to 4 root reads as it is, its frames unverifiable (validate says how many), and becomes 5 when
#: collected into.
#: 6: a frame names its run beside its index, a measurements index lists its frames' fingerprints (frame format
#: 3). A version-2 to 5 root reads as it is, its frames' place unverifiable (validate, build-cache say so once),
#: and becomes 6 when collected into.
DATASET_FORMAT = 6
#: Versions this tool reads (the frames of each are a subset of the current version's).
READABLE_FORMATS = (2, 3, 4, 5, 6)

MANIFEST = "manifest.json"
CARD = "README.md"
REPORTS = "reports"
DATA = "data"
RESULTS = "results"
LOGS = "logs"
BUCKETS = "buckets"
CACHE = "cache"
PY123D = "py123d"
SLURM = "slurm"  # a SLURM collection's waves (tools.collect.runner.slurm)
BENCH2DRIVE = "bench2drive"  # an evaluation root's Bench2Drive metrics (tools.evaluate.bench2drive)

RUN_SETTINGS = "run.json"
RUN_MEASUREMENTS = "measurements.msgpack"
#: The name Bench2Drive's agents give it (SAVE_PATH/<save_name>/metric_info.json).
METRIC_INFO = "metric_info.json"
HEARTBEAT = "heartbeat.json"
FRAMES = "frames"
FRAME_NAME = "{index:05d}.msgpack"
FRAME_SUFFIX = PurePosixPath(FRAME_NAME).suffix
ATTEMPT_LOG = "attempt-{attempt:02d}.log"
#: The log of the last attempt a full disk stopped: not an attempt log (it counts no attempt); its last line is
#: the one line the collector repeats.
DISK_FULL_LOG = "disk-full.log"
RUN_LOCK = "run.lock"
ATTEMPTS_RECORD = "attempts.json"
EVALUATOR_CHECKPOINT = "leaderboard-{attempt:02d}.json"
EVALUATOR_LIVE = "leaderboard-{attempt:02d}.live.txt"
AGENT_CONFIG = "agent-{attempt:02d}.json"
RUN_SPEC = "run-spec.json"
COLLECTION_FILE = "{name}.json"
BUCKET_INDEX = "index.json"
BUCKET_LOCK = ".tmp-build.lock"
CACHE_SETTINGS = "settings.json"
EVALUATION = "evaluation.json"
EVALUATION_RESULT = "result.json"
#: The names Bench2Drive's tools give them: tools/merge_route_json.py writes merged.json, tools/ability_benchmark.py
#: writes <result file>_ability.json beside it.
BENCH2DRIVE_MERGED = "merged.json"
BENCH2DRIVE_ABILITY = "merged_ability.json"
RECORD_NAME = "{index:05d}.rec"
FILM_NAME = "{run}.webp"

#: Every level below ROOT at which a tool writes, for `Layout.links`: a name (or "*", any other entry) -> the levels
#: inside it (None: the entry itself only). ROOT's own files are atomic writes (a rename replaces a link, never writes
#: through it), named so that a link among them is refused all the same.
WRITTEN: dict[str, dict | None] = {
    DATA: {"*": {"*": None}},  # data/<Scenario>/<run>
    LOGS: {"*": {"*": None}},  # logs/<Scenario>/<run>, logs/slurm/<array>_<task>.log
    RESULTS: {"*": None},  # results/<Scenario> (result files are atomic writes; one that is a link reads as damaged)
    REPORTS: {"*": {"*": None}},  # reports/<date>/report.json, report.html
    BUCKETS: {"*": None},  # buckets/<collection>.json, index.json
    CACHE: {"*": {"*": None, DATA: {"*": {"*": None}}}},  # cache/<key>/settings.json, cache/<key>/data/<S>/<run>
    PY123D: {"*": {"*": {"*": None}}},  # py123d/logs/<split>/<log>, py123d/maps/<dataset>/<file>
    SLURM: {"*": {"*": None}},  # slurm/waves/wave-<NNNN>.json
    BENCH2DRIVE: {"*": None},  # bench2drive/merged.json, merged_ability.json
    **dict.fromkeys((MANIFEST, CARD, EVALUATION, EVALUATION_RESULT)),
}
_NOT_NAMED = object()

_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_plain_name(name: str) -> bool:
    """A name that may become one folder or file name on disk: letters, digits, _ . - (no path, no "..")."""
    return bool(_NAME_OK.match(str(name))) and ".." not in str(name)
#: The longest route run name (characters). A file system holds names of 255 bytes (NAME_MAX); the longest name
#: made from a run's is a temporary file of its result, `.tmp-<run>.json.<host>~<pid>.<n>` (tools.core.atomic),
#: up to 95 characters more with a 64-character host name. Longer route ids are refused before anything is written.
RUN_NAME_MAX = 160
#: What `RunKey.for_route` produces: a route run's folder name always ends in _rep<K>, at most RUN_NAME_MAX long.
_RUN_NAME = re.compile(rf"^(?=.{{1,{RUN_NAME_MAX}}}$)[A-Za-z0-9][A-Za-z0-9_.-]*_rep[0-9]+$")
_REP_SUFFIX = re.compile(r"_rep([0-9]+)$")


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """`--root`, else `$DATA_ROOT`, else `./data`, as its resolved path (symbolic links followed: two roots are
    compared where they are, not by the way they were named); ToolError for a root inside another dataset root or
    holding one (`check_not_nested`)."""
    if root is None or str(root) == "":
        root = os.environ.get("DATA_ROOT") or "data"
    given = Path(root).expanduser()
    try:
        path = given.resolve()
    except (OSError, RuntimeError) as e:  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise ToolError(f"--root {given}: cannot be resolved ({e}); give a --root without a loop of links") from None
    check_not_nested(path, given)
    return path


#: How deep below a root `check_not_nested` looks for another root's manifest (ROOT/data/<Scenario>/<run>) when a
#: tool starts; a folder a tool deletes is looked through at any depth first (`Layout.check_holds_no_root`).
_NESTED_DEPTH = 3


def check_not_nested(root: Path, given: Path | None = None) -> None:
    """Refuse a root (a resolved path) inside another dataset root (an ancestor holds manifest.json, at any height)
    or one holding a root (a folder up to three levels down holds manifest.json): their runs would be read, listed
    and cleaned as each other's. `given`: the path as the user named it, for the message when it differs."""
    named = f"{given} ({root})" if given is not None and given.absolute() != root else str(root)
    for parent in root.parents:
        if (parent / MANIFEST).is_file():
            raise ToolError(f"--root {named}: inside the dataset root {parent}; give a --root outside it "
                            f"(or {parent} itself)")
    if root.is_dir():
        for depth in range(1, _NESTED_DEPTH + 1):
            for found in root.glob("/".join(["*"] * depth) + "/" + MANIFEST):
                raise ToolError(f"--root {named}: holds another dataset root {found.parent}; give each dataset "
                                "its own --root, side by side")


def nested_root(folder: Path) -> Path | None:
    """The first folder at or below `folder`, at any depth, that holds a manifest.json (another dataset root), None
    when there is none; symbolic links are not followed (deleting a tree removes a link, not what it points to)."""
    for top, _dirs, names in os.walk(folder):
        if MANIFEST in names:
            return Path(top)
    return None


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be made or written into ("<path> is not a folder", "<path> is not writable"), None
    when it can; creates nothing (the nearest existing folder on its path decides)."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def check_root_writable(root: Path) -> None:
    """Refuse a root that cannot be created or written, without creating anything."""
    why = unwritable(root)
    if why:
        raise ToolError(f"--root {root}: {why}; give a --root that is a writable folder or does not exist yet")


def find_link(root: Path, path: Path) -> Path | None:
    """The first symbolic link among the components of `path` below `root` (`root` itself may be one), None
    when there is none; a component that does not exist ends the search."""
    at = Path(root)
    for part in Path(path).relative_to(root).parts:
        at = at / part
        try:
            if stat.S_ISLNK(os.lstat(at).st_mode):
                return at
        except OSError:  # not there (yet): nothing below it can be a link
            return None
    return None


def link_error(root: Path, link: Path) -> ToolError:
    """The one line that refuses a symbolic link inside a dataset root: it names the link and where it points."""
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return ToolError(f"{link} is a symbolic link (to {target}): drivekit writes and deletes only inside the dataset "
                     f"root {root}, never through a link; replace the link with a real folder (a copy, or a bind "
                     "mount of the other place)")


@dataclass(frozen=True, order=True)
class RunKey:
    """One route run: the scenario type it is filed under and its folder name."""

    scenario: str
    name: str

    def __post_init__(self) -> None:
        for part in (self.scenario, self.name):
            if not is_plain_name(part):
                raise ValueError(f"invalid name for a dataset folder: {part!r} (use letters, digits, _ . -)")
            if len(part) > RUN_NAME_MAX:
                raise ValueError(f"the route run name {part[:40]}... is {len(part)} characters, more than a file "
                                 f"system holds with drivekit's temporary names (at most {RUN_NAME_MAX}); shorten the "
                                 "route file's name or the route id")

    @staticmethod
    def for_route(scenario: str, route_stem: str, route_id: str, repetition: int) -> RunKey:
        """The one naming rule of route runs: `<stem>_rep<K>` when the route's id is its file's stem,
        else `<stem>_route<id>_rep<K>`."""
        route_id = str(route_id)
        base = route_stem if route_id == route_stem else f"{route_stem}_route{route_id}"
        return RunKey(scenario, f"{base}_rep{int(repetition)}")

    @property
    def route(self) -> str:
        """"<Scenario>/<stem>" or "<Scenario>/<stem>_route<id>": the route this run drives, whatever its
        repetition (the inverse of `for_route`'s naming)."""
        return f"{self.scenario}/{_REP_SUFFIX.sub('', self.name)}"

    @property
    def repetition(self) -> int:
        """K of the run's `_rep<K>` (0 for a name without one)."""
        m = _REP_SUFFIX.search(self.name)
        return int(m.group(1)) if m else 0

    def __str__(self) -> str:
        return f"{self.scenario}/{self.name}"


def run_rel(key: RunKey) -> str:
    """How bucket files and the cache name a route run: "data/<Scenario>/<run>", relative to ROOT."""
    return f"{DATA}/{key.scenario}/{key.name}"


def run_key(rel: str) -> RunKey:
    """The RunKey of a "data/<Scenario>/<run>" name; ValueError for anything else (absolute, "..")."""
    parts = PurePosixPath(str(rel)).parts
    if len(parts) != 3 or parts[0] != DATA:
        raise ValueError(f"{rel!r} is not a route run name of the form {DATA}/<Scenario>/<run>")
    return RunKey(parts[1], parts[2])


@dataclass(frozen=True)
class Layout:
    """Path templates of one dataset root."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def reports(self) -> Path:
        """ROOT/reports/: the quality reports of `validate`, one folder per day (tools.collect.inspect.quality)."""
        return self.root / REPORTS

    @property
    def card(self) -> Path:
        """ROOT/README.md: the dataset card, written from the manifest after a collection and by `info`."""
        return self.root / CARD

    @property
    def evaluation(self) -> Path:
        """ROOT/evaluation.json: what an evaluation root evaluates; its existence makes ROOT one."""
        return self.root / EVALUATION

    @property
    def evaluation_result(self) -> Path:
        """ROOT/result.json: the aggregate leaderboard 2.0 checkpoint JSON of an evaluation root."""
        return self.root / EVALUATION_RESULT

    @property
    def bench2drive_merged(self) -> Path:
        """ROOT/bench2drive/merged.json: an evaluation root's records as Bench2Drive's merge_route_json.py merges
        them, with its success rate and driving score (tools.evaluate.bench2drive)."""
        return self.root / BENCH2DRIVE / BENCH2DRIVE_MERGED

    @property
    def bench2drive_ability(self) -> Path:
        """ROOT/bench2drive/merged_ability.json: Bench2Drive's five abilities, as its ability_benchmark.py writes
        them for merged.json."""
        return self.root / BENCH2DRIVE / BENCH2DRIVE_ABILITY

    @functools.cached_property
    def is_evaluation(self) -> bool:
        """Whether ROOT is an evaluation root (evaluation.json exists). Looked at once per Layout:
        bin/evaluate writes the file before any run starts, and nothing removes it."""
        return self.evaluation.is_file()

    @property
    def data(self) -> Path:
        """ROOT/data: the route runs' frames."""
        return self.root / DATA

    @property
    def buckets(self) -> Path:
        return self.root / BUCKETS

    @property
    def cache(self) -> Path:
        return self.root / CACHE

    @property
    def py123d(self) -> Path:
        """ROOT/py123d: the Py123D data root `collect --py123d` writes (logs/<split>/<log>/, maps/<dataset>/;
        tools.collect.inspect.py123d_export). Read it with PY123D_DATA_ROOT=ROOT/py123d (docs/py123d.md)."""
        return self.root / PY123D

    def collection_file(self, name: str) -> Path:
        """ROOT/buckets/<name>.json: one bucket collection."""
        return self.buckets / COLLECTION_FILE.format(name=name)

    @property
    def bucket_index(self) -> Path:
        return self.buckets / BUCKET_INDEX

    @property
    def bucket_lock(self) -> Path:
        return self.buckets / BUCKET_LOCK

    def cache_folder(self, key: str) -> Path:
        """ROOT/cache/<key>: the training cache of one preprocessing key."""
        if not _NAME_OK.match(str(key)):
            raise ValueError(f"invalid cache key {key!r}")
        return self.cache / str(key)

    @staticmethod
    def cache_settings(folder: Path) -> Path:
        return Path(folder) / CACHE_SETTINGS

    @staticmethod
    def record_path(folder: Path, key: RunKey, index: int) -> Path:
        """The cache record of frame `index` of run `key` in a cache folder (mirrors ROOT/data)."""
        if int(index) < 0:
            raise ValueError(f"frame index {index} is negative")
        return Path(folder) / DATA / key.scenario / key.name / RECORD_NAME.format(index=int(index))

    def run_dir(self, key: RunKey) -> Path:
        return self.root / DATA / key.scenario / key.name

    def frames_dir(self, key: RunKey) -> Path:
        return self.run_dir(key) / FRAMES

    def frame_path(self, key: RunKey, index: int) -> Path:
        return self.frames_dir(key) / FRAME_NAME.format(index=index)

    def run_settings(self, key: RunKey) -> Path:
        return self.run_dir(key) / RUN_SETTINGS

    def run_measurements(self, key: RunKey) -> Path:
        """data/<Scenario>/<run>/measurements.msgpack: every frame's measurements in one file (frames.py)."""
        return self.run_dir(key) / RUN_MEASUREMENTS

    def metric_info(self, key: RunKey) -> Path:
        """data/<Scenario>/<run>/metric_info.json: an evaluated run's ego kinematics at every tick, as Bench2Drive's
        agents write it (tools.dataset.metric_info). Bench2Drive's efficiency_smoothness_benchmark.py finds it as
        <metric_dir>/<save_name>/metric_info.json with metric_dir ROOT/data and save_name "<Scenario>/<run>"."""
        return self.run_dir(key) / METRIC_INFO

    def heartbeat(self, key: RunKey) -> Path:
        return self.run_dir(key) / HEARTBEAT

    def result_path(self, key: RunKey) -> Path:
        return self.root / RESULTS / key.scenario / f"{key.name}.json"

    def film_path(self, key: RunKey) -> Path:
        """results/<Scenario>/<run>.webp: an evaluated run's picture, beside its result (tools.collect.base.film)."""
        return self.root / RESULTS / key.scenario / FILM_NAME.format(run=key.name)

    def log_dir(self, key: RunKey) -> Path:
        return self.root / LOGS / key.scenario / key.name

    def attempt_log(self, key: RunKey, attempt: int) -> Path:
        return self.log_dir(key) / ATTEMPT_LOG.format(attempt=attempt)

    def disk_full_log(self, key: RunKey) -> Path:
        return self.log_dir(key) / DISK_FULL_LOG

    def evaluator_checkpoint(self, key: RunKey, attempt: int) -> Path:
        """A CARLA attempt's leaderboard checkpoint (--checkpoint): the evaluator writes it early, with no
        records, and in place; the runner publishes it as `result_path` only once it holds a finished record."""
        return self.log_dir(key) / EVALUATOR_CHECKPOINT.format(attempt=attempt)

    def evaluator_live(self, key: RunKey, attempt: int) -> Path:
        """A CARLA attempt's live results (the evaluator's --debug-checkpoint, else ./live_results.txt)."""
        return self.log_dir(key) / EVALUATOR_LIVE.format(attempt=attempt)

    def agent_config(self, key: RunKey, attempt: int) -> Path:
        """A CARLA attempt's agent configuration (the evaluator's --agent-config; carla.agent.AgentConfig)."""
        return self.log_dir(key) / AGENT_CONFIG.format(attempt=attempt)

    def run_spec(self, key: RunKey) -> Path:
        """logs/<Scenario>/<run>/run-spec.json: the run as planned (tools.collect.base.spec.RunSpec), written when the
        collection is planned and read by the process that drives it."""
        return self.log_dir(key) / RUN_SPEC

    def run_lock(self, key: RunKey) -> Path:
        """logs/<Scenario>/<run>/run.lock: held (flock) by the process running an attempt of the run."""
        return self.log_dir(key) / RUN_LOCK

    def attempts_record(self, key: RunKey) -> Path:
        """logs/<Scenario>/<run>/attempts.json: how each ended attempt of the run ended (attempts.record_attempt)."""
        return self.log_dir(key) / ATTEMPTS_RECORD

    def attempt_logs(self, key: RunKey) -> list[Path]:
        d = self.log_dir(key)
        return sorted(d.glob("attempt-*.log")) if d.is_dir() else []

    def frame_names(self, key: RunKey) -> list[str]:
        """The names of a run's frame files, sorted, from one listing of its frames folder (no Path per frame):
        every *.msgpack there but the temporary files of writers (atomic.TMP_PREFIX)."""
        try:
            names = os.listdir(self.frames_dir(key))
        except OSError:  # no folder (or not one, or unreadable): no frames
            return []
        return sorted(n for n in names if n.endswith(FRAME_SUFFIX) and not n.startswith(TMP_PREFIX))

    def frame_paths(self, key: RunKey) -> list[Path]:
        d = self.frames_dir(key)
        return [d / name for name in self.frame_names(key)]

    def frame_count(self, key: RunKey) -> int:
        """len(frame_paths(key)), without a Path per frame (dataset_state counts every finished run's frames)."""
        return len(self.frame_names(key))

    def scan_runs(self) -> dict[str, set[RunKey]]:
        """The route runs that have a folder under data/ (DATA), a result file (RESULTS: any entry named
        <run>.json) or a log folder (LOGS): one listing per scenario folder. Only names the layout produces
        (`RunKey.for_route`) count: anything else under data/, results/ or logs/ is not a route run."""
        found: dict[str, set[RunKey]] = {}
        for top, suffix in ((DATA, ""), (RESULTS, ".json"), (LOGS, "")):
            keys = found[top] = set()
            try:
                scenarios = [e for e in os.scandir(self.root / top) if e.is_dir()]
            except OSError:  # no such folder (or not one)
                continue
            for scen in scenarios:
                if scen.name.startswith(TMP_PREFIX) or not _NAME_OK.match(scen.name):
                    continue
                try:
                    names = os.listdir(scen.path)
                except OSError:
                    continue
                for entry in names:
                    if entry.startswith(TMP_PREFIX) or not entry.endswith(suffix):
                        continue
                    name = entry[: len(entry) - len(suffix)] if suffix else entry
                    if _RUN_NAME.match(name):
                        keys.add(RunKey(scen.name, name))
        return found

    def links(self) -> list[Path]:
        """The symbolic links at every level the layout names a tool writes (`WRITTEN`), sorted: ROOT's files and
        folders, scenario folders, route run folders under data/ and logs/, report folders, bucket files, a
        cache's key, scenario and run folders, Py123D's split, log and map folders, SLURM's waves, Bench2Drive's
        files. A tool that followed one would write or delete in another place (another root's runs): `check_no_links`.
        Below these levels (a run's frames and logs) a writer checks as it goes: `check_run_paths` for the folders,
        `tools.core.files.open_for_writing` (O_NOFOLLOW) for the files it opens in place."""
        found: list[Path] = []

        def look(folder: Path, spec: dict[str, dict | None]) -> None:
            try:
                with os.scandir(folder) as it:
                    listed = [e for e in it if not e.name.startswith(TMP_PREFIX)]
            except OSError:  # no such folder (or not one)
                return
            for e in listed:
                inside = spec.get(e.name, spec.get("*", _NOT_NAMED))
                if inside is _NOT_NAMED:
                    continue
                if e.is_symlink():
                    found.append(Path(e.path))
                elif inside is not None and e.is_dir():
                    look(Path(e.path), inside)

        look(self.root, WRITTEN)
        return sorted(found)

    def check_no_links(self) -> None:
        """ToolError naming the first symbolic link `links` finds; every tool that writes or deletes in ROOT asks
        before it starts (and `check_run_paths` before each run it writes or deletes)."""
        found = self.links()
        if found:
            raise link_error(self.root, found[0])

    def check_run_paths(self, key: RunKey) -> None:
        """ToolError when a folder a route run writes or deletes (data/<S>/<run>/frames, logs/<S>/<run>,
        results/<S>) is reached through a symbolic link (one made after the tool started, say)."""
        for path in (self.frames_dir(key), self.log_dir(key), self.result_path(key).parent):
            link = find_link(self.root, path)
            if link is not None:
                raise link_error(self.root, link)

    def check_access(self, keys: Iterable[RunKey], delete: Iterable[RunKey] = (), also: Iterable[Path] = ()) -> None:
        """ToolError, before a tool changes anything, for the first thing of route runs `keys` it would write (and of
        runs `delete`, delete) and cannot: a folder reached through a symbolic link (`check_run_paths`), a run.lock
        that is a link or not a regular file (a FIFO), or a file or folder this user may not change (its owner named;
        `files.check_writable`): the scenario folders under data/, results/ and logs/, each run's log folder and lock,
        every folder of a run to delete, and the paths `also`. One line before anything is appended or deleted, so a
        root shared by a group is never left half changed by a user who lacks a permission."""
        paths: dict[Path, None] = dict.fromkeys(also)
        delete = set(delete)
        for key in sorted(set(keys) | delete):
            self.check_run_paths(key)
            files.check_in_place(self.run_lock(key))
            paths.update(dict.fromkeys((self.run_dir(key).parent, self.result_path(key).parent,
                                        self.log_dir(key).parent, self.log_dir(key), self.run_lock(key))))
            if key in delete:  # removing a folder's entries needs write access to it, at every level
                for top in (self.run_dir(key), self.log_dir(key)):
                    paths.update((Path(folder), None) for folder, _, _ in os.walk(top))
        files.check_writable(paths)

    def check_holds_no_root(self, folder: Path) -> None:
        """ToolError when `folder`, which a tool is about to delete, holds another dataset root at any depth (one
        made inside this root's run folder by hand, or by an older drivekit through a symbolic link): nothing of
        another root is ever deleted with a run."""
        found = nested_root(folder)
        if found is not None:
            raise ToolError(f"{folder} holds another dataset root, {found}: not deleted; move that root out of "
                            f"{self.root} (each dataset its own --root, side by side), then run this again")

    def leftover_trash(self) -> list[Path]:
        """Route run folders (under data/<Scenario>/ and logs/<Scenario>/) whose deletion was interrupted: the
        `.tmp-trash-*` folders of a clean-failed or collector killed mid-delete (atomic.leftover_trash), sorted."""
        found: list[Path] = []
        for top in (DATA, LOGS):
            try:
                with os.scandir(self.root / top) as it:
                    scenarios = [Path(e.path) for e in it if not e.name.startswith(TMP_PREFIX)
                                 and e.is_dir(follow_symlinks=False)]
            except OSError:  # no such folder (or not one)
                continue
            for folder in scenarios:
                found.extend(atomic.leftover_trash(folder))
        return sorted(found)

    def iter_runs(self) -> Iterator[RunKey]:
        """Every route run that has anything on disk (a folder, a result or a log), sorted: the union of
        `scan_runs`."""
        keys = set().union(*self.scan_runs().values())
        yield from sorted(keys, key=lambda k: (k.scenario, k.name))


def open_root(root: object) -> Layout:
    """The existing dataset root a later stage reads (`--root`, else $DATA_ROOT, else ./data)."""
    layout = Layout(resolve_root(cli.optional_text(root, "root")))
    if not layout.root.is_dir():
        raise ToolError(f"--root {layout.root}: no such dataset root; give the --root you collected into "
                        "(bin/collect ROUTES_DIR --root ROOT)")
    if not layout.manifest.is_file() and not (layout.root / "data").is_dir():
        raise ToolError(f"--root {layout.root}: not a dataset root (no manifest.json, no data/); "
                        "collect into it first: bin/collect ROUTES_DIR --root ROOT")
    layout.check_no_links()
    return layout
