"""The training cache on disk: where records live, how one is written and read, and the node-local cache.

    ROOT/cache/<settings.key()>/                      one folder per preprocessing configuration
        settings.json                                 CACHE_FORMAT, the CacheSettings, frame_dt (written first)
        data/<Scenario>/<run>/<index:05d>.rec         one record per recorded frame (mirrors ROOT/data)

A record is one msgpack map, ``{"format": CACHE_FORMAT, "run": <run fingerprint>, "source": "data/<Scenario>/<run>",
"index": <frame index>, "frame": <frame fingerprint>, "crc32": <crc32 of the identity and body>, "body": <bytes>}``.
``run`` names the recorded attempt of its route run the record was made from (`run_fingerprint`: a hash of the
attempt's run.json): a run recorded again (collect --force, a result deleted and collected again) gets another, and
its old records are stale: the builder rebuilds them, `verify` reports them, training rebuilds any it meets.
``source`` and ``index`` say which frame the record holds the sample of, ``frame`` that frame's fingerprint
(tools.dataset.frames.fingerprint, None for a frame without one): a record copied, swapped or renamed to another
frame's place is refused by every reader that says which frame it wants (`place`), and one made from another
frame than the one there now is stale (`frame`). The checksum covers them with the body. A record of format 2
(`READABLE_CACHE_FORMATS`) carries none of them: read where its folder is of format 2, its place unverified.
``body`` is zstandard (tools.dataset.codec.ZSTD_LEVEL) of a msgpack map from the sample's keys (tools.dataset.samples)
to arrays (tools.dataset.codec blobs): codec ``jpeg`` for the RGB image at the model's input
size, ``raw`` (C-order little-endian bytes) for everything else. No pickle anywhere: a shared cache
cannot run code on its reader. docs/cache.md describes the format and its version.

`read_record` checks everything and raises `CacheRecordError` (one line naming the file) for a missing,
truncated, foreign, damaged, stale or other-version record, and decodes nothing larger than the settings' sample
shapes allow; `rebuild_record` makes a damaged record again
from the dataset in a separate process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import zstandard

from tools.core import files
from tools.core.errors import ToolError
from tools.dataset import layout as _layout
from tools.dataset.codec import (
    MAX_BLOB_BYTES,
    CodecError,
    decode_array,
    encode_array,
    zstd_compress,
    zstd_decompress_bounded,
)
from tools.dataset.layout import RECORD_NAME, Layout
from tools.dataset.samples import CACHE_FORMAT, READABLE_CACHE_FORMATS, CacheSettings

run_rel = _layout.run_rel  # the one definition lives in layout.py; re-exported
run_key = _layout.run_key

RECORD_SUFFIX = Path(_layout.RECORD_NAME).suffix

#: No valid record is smaller than this (the outer map alone takes more); the builder's cheap
#: "already done" test is existence and at least this size (`verify` checks the checksum).
MIN_RECORD_BYTES = 32

_MAX_RECORD_BYTES = 1 << 30


class CacheRecordError(ToolError):
    """A cache record that cannot be used: missing, truncated, not a record, another format, damaged, stale."""


class StaleRecordError(CacheRecordError):
    """A record made from an earlier recording of its route run (its run was recorded again since)."""


def run_fingerprint(run_json: bytes) -> str:
    """The identity of one recorded attempt of a route run: a hash of its run.json, which the attempt writes once
    when it starts (its attempt number, host, pid, start time, seed, settings, route)."""
    return hashlib.blake2b(run_json, digest_size=8).hexdigest()


def read_run_fingerprint(layout: Layout, key: _layout.RunKey) -> str:
    """run_fingerprint of the run.json on disk (OSError when there is none)."""
    return run_fingerprint(files.read_bytes(layout.run_settings(key), files.MAX_JSON_BYTES))


# ----------------------------------------------------------------------------- paths


def cache_dir(layout: Layout, settings: CacheSettings) -> Path:
    """ROOT/cache/<settings.key()>: the cache of one preprocessing configuration."""
    return layout.cache_folder(settings.key())


def readable_cache_dir(layout: Layout, settings: CacheSettings) -> Path:
    """The cache of `settings` to read: that of the current format, else of an older readable one that is there
    (a cache built before; its records read with their place unverified), else the current one's (absent)."""
    for fmt in READABLE_CACHE_FORMATS:
        folder = layout.cache_folder(settings.key(fmt))
        if settings_path(folder).exists():
            return folder
    return cache_dir(layout, settings)


def record_path(cache_root: Path, run_rel: str, index: int) -> Path:
    """The record of frame `index` of run `run_rel` ("data/<Scenario>/<run>") in the cache folder."""
    if int(index) < 0:
        return Layout.record_path(cache_root, run_key(run_rel), index)  # (its one line)
    return _records_of(Path(cache_root), run_rel) / RECORD_NAME.format(index=int(index))


@functools.lru_cache(maxsize=4096)
def _records_of(cache_root: Path, run_rel: str) -> Path:
    """The folder of a run's records (Layout.record_path's): parsed and joined once per run, not once per record
    (the training loader asks for every sample's; 30 us each)."""
    return Layout.record_path(cache_root, run_key(run_rel), 0).parent  # run_key refuses "..", absolute paths


def settings_path(cache_root: Path) -> Path:
    return Layout.cache_settings(cache_root)


def read_cache_settings(cache_root: Path) -> CacheSettings:
    """The settings a cache folder was built with (its settings.json)."""
    return _read_settings_file(cache_root)[1]


def cache_format(cache_root: Path) -> int:
    """The format of a cache folder (its settings.json), one of READABLE_CACHE_FORMATS; ToolError otherwise."""
    return _read_settings_file(cache_root)[0]


def older_cache_line(cache_root: Path) -> str:
    """The one line a tool says about a cache of an older format: what it lacks, and how to have it."""
    fmt = cache_format(cache_root)
    lacks = ("its records do not name the frame they hold, so whether each is in its place is unverified (their "
             "checksums are checked)") if fmt == 2 else \
        "its samples have no overtake label (overtake_offset), so a model trained on it has no overtake head"
    return (f"cache {cache_root} is of format {fmt}: {lacks}; bin/build-cache builds a cache of format {CACHE_FORMAT} "
            "beside it, which training then reads")


def _read_settings_file(cache_root: Path) -> tuple[int, CacheSettings]:
    path = settings_path(cache_root)
    try:
        data = files.read_json(path)
        if data.get("format") not in READABLE_CACHE_FORMATS:
            raise ToolError(f"{path}: cache format {data.get('format')}, this tool reads format {CACHE_FORMAT} (and "
                            f"{', '.join(str(f) for f in READABLE_CACHE_FORMATS if f != CACHE_FORMAT)}); build a new "
                            "cache with bin/build-cache")
        return data["format"], CacheSettings.from_dict(data["settings"])
    except FileNotFoundError:
        raise ToolError(f"{path}: missing; not a cache folder (build one with bin/build-cache)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ToolError(f"{path}: not a readable cache settings file ({e})") from None


def recorded_frame_dt(cache_root: Path) -> float | None:
    """The `frame_dt` of a cache folder's settings.json; None when the folder does not record one (built
    before it was recorded). ToolError when settings.json is missing or its frame_dt is not a time."""
    path = settings_path(cache_root)
    try:
        data = files.read_json(path)
        if "frame_dt" not in data:
            return None
        value = data["frame_dt"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 3600:
            raise ValueError(f"frame_dt {value!r}")
        return float(value)
    except FileNotFoundError:
        raise ToolError(f"{path}: missing; not a cache folder (build one with bin/build-cache)") from None
    except (OSError, ValueError, TypeError) as e:
        raise ToolError(f"{path}: no usable frame_dt ({e}): the cache does not say how far apart its frames are; "
                        "move the folder aside and build it again (bin/build-cache)") from None


def read_frame_dt(cache_root: Path) -> float:
    """Seconds between consecutive recorded frames of the data a cache folder was built from (its
    settings.json `frame_dt`, taken from the runs' run.json by the builder): the time step of the
    samples' waypoints. ToolError when the folder does not record it."""
    value = recorded_frame_dt(cache_root)
    if value is None:
        path = settings_path(cache_root)
        raise ToolError(f"{path}: no usable frame_dt (none recorded): the cache does not say how far apart its "
                        "frames are; bin/build-cache with the same settings adds it from the runs' run.json "
                        "(bin/build-cache --force rebuilds every record as well)")
    return value


# ----------------------------------------------------------------------------- records


#: How each sample key is stored; anything not named here is raw.
_CODECS = {"rgb": "jpeg"}


@dataclass(frozen=True)
class Made:
    """What a record was made from: frame `index` of route run `source` ("data/<Scenario>/<run>"), of the recorded
    attempt of that run whose fingerprint is `run` (run_fingerprint), the frame's own fingerprint `frame`
    (tools.dataset.frames.fingerprint; None for a frame without one)."""

    source: str = ""
    index: int = -1
    run: str = ""
    frame: int | None = None

    def packed(self) -> bytes:
        """The identity's bytes the record's checksum covers (before its body; _open_record packs the same)."""
        return msgpack.packb([self.run, self.source, self.index, self.frame])


def encode_record(sample: dict[str, Any], jpeg_quality: int = 93, made: Made = Made()) -> bytes:
    """The bytes of a record holding `sample` (the sample dict of tools.dataset.samples), made from `made`."""
    # optimize: Huffman tables fitted to the image, 7% smaller at no cost to decoding (docs/cache.md)
    fields = {name: encode_array(value, _CODECS.get(name, "raw"), jpeg_quality=jpeg_quality, jpeg_optimize=True)
              for name, value in sample.items()}
    body = zstd_compress(msgpack.packb(fields, use_bin_type=True))
    # "run" second, so that `record_run` finds it in the file's first bytes
    return msgpack.packb({"format": CACHE_FORMAT, "run": made.run, "source": made.source, "index": made.index,
                          "frame": made.frame, "crc32": zlib.crc32(body, zlib.crc32(made.packed())), "body": body},
                         use_bin_type=True)


def record_run(path: Path, cache_format: int = CACHE_FORMAT) -> str | None:
    """The run fingerprint a record was made from, read from its first bytes; None when it has none (missing,
    another format than `cache_format`, not a record). The builder's test of a record it may skip."""
    try:
        with files.open_regular(path, _MAX_RECORD_BYTES) as f:
            head = f.read(64)
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(head)
        found = {}
        for _ in range(min(unpacker.read_map_header(), 2)):
            key = unpacker.unpack()
            found[key] = unpacker.unpack()
    except (OSError, ValueError, msgpack.UnpackException):
        return None
    run = found.get("run")
    return run if found.get("format") == cache_format and isinstance(run, str) else None


_REPAIR = "rebuild it (python -m tools.cache verify --repair)"
#: The keys of a record's outer map, by format.
_RECORD_KEYS = {2: frozenset({"format", "run", "crc32", "body"}),
                3: frozenset({"format", "run", "source", "index", "frame", "crc32", "body"})}
_RECORD_KEYS[4] = _RECORD_KEYS[3]  # format 4 changed a sample's keys (overtake_offset), not the record's


def _open_record(data: bytes, path: Path, run: str | None = None, place: tuple[str, int] | None = None,
                 frame: int | None = None, cache_format: int = CACHE_FORMAT) -> bytes:
    """The checked body of a record's bytes; CacheRecordError naming `path` when it is not a good record of
    `cache_format`, or, with `place` (source, index), one that holds another frame's sample; StaleRecordError, with
    `run`, when made from another recorded attempt of its run than that one, or, with `frame`, from another frame
    than the one of that fingerprint (a record of format 2 names neither place nor frame: unchecked)."""
    if len(data) < MIN_RECORD_BYTES:
        raise CacheRecordError(f"{path}: truncated record ({len(data)} bytes); {_REPAIR}")
    try:
        outer = msgpack.unpackb(data, raw=False, max_bin_len=_MAX_RECORD_BYTES)
    except (ValueError, msgpack.UnpackException) as e:
        raise CacheRecordError(f"{path}: not a cache record or truncated ({e.__class__.__name__}); {_REPAIR}") from None
    if not isinstance(outer, dict) or "format" not in outer:
        raise CacheRecordError(f"{path}: not a cache record; {_REPAIR}")
    if outer["format"] != cache_format:
        raise CacheRecordError(f"{path}: cache format {outer['format']!r} in a cache of format {cache_format} (this "
                               f"tool writes format {CACHE_FORMAT}); {_REPAIR}")
    if not _RECORD_KEYS[cache_format] <= outer.keys():
        raise CacheRecordError(f"{path}: not a cache record; {_REPAIR}")
    body = outer["body"]
    if not isinstance(body, bytes):
        raise CacheRecordError(f"{path}: not a cache record; {_REPAIR}")
    if cache_format == 2:
        crc = zlib.crc32(body)
    else:
        try:  # (Made.packed's bytes)
            crc = zlib.crc32(body, zlib.crc32(msgpack.packb([outer["run"], outer["source"], outer["index"],
                                                             outer["frame"]])))
        except (TypeError, ValueError):  # an identity msgpack cannot pack: not one the builder wrote
            crc = None
    if crc != outer["crc32"]:
        raise CacheRecordError(f"{path}: checksum mismatch (damaged record); {_REPAIR}")
    if run is not None and outer["run"] != run:
        raise StaleRecordError(f"{path}: stale: made from an earlier recording of its run (run.json "
                               f"{str(outer['run'])[:16]}, now {run}); rebuild it (bin/build-cache)")
    if cache_format == 2:
        return body
    if place is not None and (outer["source"], outer["index"]) != place:
        raise CacheRecordError(f"{path}: holds the sample of frame {outer['index']!r} of {str(outer['source'])[:120]}, "
                               f"not of frame {place[1]} of {place[0]}: a record copied, swapped or renamed from "
                               f"elsewhere; {_REPAIR}")
    if frame is not None and outer["frame"] != frame:
        raise StaleRecordError(f"{path}: stale: made from another frame than the one there now (frame fingerprint "
                               f"{_hex(outer['frame'])}, now {_hex(frame)}); {_REPAIR}")
    return body


def _hex(fingerprint: Any) -> str:
    return f"{fingerprint:08x}" if isinstance(fingerprint, int) else repr(fingerprint)[:16]


@functools.lru_cache(maxsize=16)
def _bounds(settings: CacheSettings) -> tuple[dict[str, Any], int]:
    """(sample specs, the most a body may decompress to) of a settings: computed once per settings, not once per
    record (they were a tenth of a record's decoding)."""
    return settings.sample_specs(), settings.max_sample_bytes()


def decode_record(data: bytes, path: Path | str = "<record>", settings: CacheSettings | None = None,
                  run: str | None = None, place: tuple[str, int] | None = None, frame: int | None = None,
                  cache_format: int = CACHE_FORMAT) -> dict[str, Any]:
    """The sample dict held by a record's bytes (what a session cache stores); CacheRecordError when bad or, with
    `place`, another frame's; StaleRecordError, with `run` or `frame`, when stale (_open_record). With `settings`,
    every key must be one of its samples' and declare that key's dtype and shape (checked before anything is
    decompressed into it); without, each array is bounded by MAX_BLOB_BYTES."""
    body = _open_record(data, Path(path), run, place, frame, cache_format)
    specs, limit = _bounds(settings) if settings is not None else (None, MAX_BLOB_BYTES)
    try:
        fields = msgpack.unpackb(zstd_decompress_bounded(body, limit), raw=False, max_bin_len=limit)
        if not isinstance(fields, dict):
            raise TypeError("not a map of sample keys")
        if specs is not None and not fields.keys() <= specs.keys():
            raise KeyError(f"unknown sample keys {sorted(set(fields) - set(specs))[:3]}")
        return {name: decode_array(blob, specs[name] if specs else None, MAX_BLOB_BYTES)
                for name, blob in fields.items()}
    except (CodecError, ValueError, TypeError, KeyError, OSError, zstandard.ZstdError, msgpack.UnpackException) as e:
        # the checksum matched, so the writer itself wrote something unreadable
        raise CacheRecordError(f"{path}: undecodable record ({e}); {_REPAIR}") from None


def write_record(path: Path, sample: dict[str, Any], jpeg_quality: int = 93, made: Made = Made()) -> int:
    """Write `sample` as a record at `path` atomically; returns its size in bytes. Not fsynced one by one: the
    builder syncs the file system once when it ends (docs/reliability.md), and a record a machine crash left
    damaged fails its checksum and is rebuilt (verify --repair)."""
    from tools.core import atomic

    data = encode_record(sample, jpeg_quality, made)
    atomic.write_bytes(Path(path), data, durable=False)
    return len(data)


def read_record_bytes(path: Path) -> bytes:
    """A record's raw bytes (for a session cache), CacheRecordError when the file is missing."""
    try:
        return files.read_bytes(path, _MAX_RECORD_BYTES)
    except FileNotFoundError:
        raise CacheRecordError(f"{path}: missing cache record; build the cache (bin/build-cache)") from None
    except files.UnreadableFile as e:
        raise CacheRecordError(str(e)) from None
    except OSError as e:
        raise CacheRecordError(f"{path}: cannot read the cache record ({e.strerror})") from None


def read_record(path: Path, settings: CacheSettings | None = None, run: str | None = None,
                place: tuple[str, int] | None = None, frame: int | None = None,
                cache_format: int = CACHE_FORMAT) -> dict[str, Any]:
    """The sample dict of tools.dataset.samples stored at `path`; CacheRecordError when it cannot be used
    (decode_record)."""
    return decode_record(read_record_bytes(path), path, settings, run, place, frame, cache_format)


def check_record(path: Path, run: str | None = None, place: tuple[str, int] | None = None,
                 frame: int | None = None, cache_format: int = CACHE_FORMAT) -> None:
    """Check a record's format and checksum, and with `run`, `place` and `frame` what it was made from, without
    decoding it (what `verify` does per record)."""
    _open_record(read_record_bytes(path), Path(path), run, place, frame, cache_format)


def rebuild_record(root: Path, settings: CacheSettings, run_rel: str, index: int) -> None:
    """Make one record again from the dataset: `python -m tools.cache build --root R --only RUN:INDEX` in a
    subprocess (so a crash there cannot take the training process down). CacheRecordError on failure."""
    run_key(run_rel)
    args = [sys.executable, "-m", "tools.cache", "build", "--root", str(root), "--only", f"{run_rel}:{int(index)}"]
    args += [f"--{name}={value}" for name, value in settings.to_dict().items()]
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        raise CacheRecordError(f"rebuilding {run_rel}:{index} failed: {why}")


# ----------------------------------------------------------------------------- node-local session cache


class UnsafeSessionCacheError(ToolError):
    """A session cache that is not ours to trust: another user's folder, or a value that would be unpickled."""


@functools.cache
def _bytes_disk() -> type:
    """A diskcache Disk that stores and loads str keys and bytes values only. diskcache's own Disk pickles
    anything else and unpickles what the database says is pickled: a planted cache would run code."""
    import diskcache
    from diskcache.core import MODE_BINARY, MODE_RAW

    class BytesDisk(diskcache.Disk):
        def put(self, key):
            if type(key) is not str:
                raise TypeError(f"session cache keys are str, not {type(key).__name__}")
            return super().put(key)

        def get(self, key, raw):
            if not raw:
                raise UnsafeSessionCacheError(f"{self._directory}: holds a pickled key; refusing to load it")
            return super().get(key, raw)

        def store(self, value, read, key=diskcache.core.UNKNOWN):
            if read or type(value) is not bytes:
                raise TypeError(f"session cache values are bytes, not {type(value).__name__}")
            return super().store(value, read, key)

        def fetch(self, mode, filename, value, read):
            if mode not in (MODE_RAW, MODE_BINARY) or read:
                raise UnsafeSessionCacheError(f"{self._directory}: holds a value stored as mode {mode} (pickled or "
                                              "text), not bytes; refusing to load it; delete the folder")
            if filename is not None and (os.path.isabs(filename) or ".." in Path(filename).parts):
                raise UnsafeSessionCacheError(f"{self._directory}: a value points outside the cache ({filename!r})")
            return super().fetch(mode, filename, value, read)

    return BytesDisk


def _check_private_folder(path: Path) -> None:
    """Refuse a session cache folder another user owns or can write: its content could be planted."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeSessionCacheError(f"session cache {path}: not a plain folder; remove it or set "
                                      "session_cache=FOLDER")
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeSessionCacheError(f"session cache {path}: owned by uid {st.st_uid} or writable by others; "
                                      "not using it (its content could be planted): remove it or set "
                                      "session_cache=FOLDER to a folder of yours")


class SessionCache:
    """A node-local cache of record bytes for one training session (diskcache on local disk).

    The folder is `folder`, else $SLURM_TMPDIR, else $TMPDIR, else the system's temporary folder, under a
    subfolder named by the user and the cache key (`drivekit-session-<uid>-<key>`, mode 0700), so sessions
    of other settings never mix and another user's folder is refused. Values are the record bytes exactly
    as stored in the persistent cache (decode them with `decode_record`, which checks them): bytes in,
    bytes out, nothing pickled or unpickled (a Disk that refuses anything else). `size_limit` (bytes) is
    explicit (diskcache's own default is 1 GB); once the cache is full, new values are not added (with
    random sampling, evicting one sample for another gains nothing and costs writes). Safe to share between
    DataLoader worker processes: each process opens its own handle.
    """

    def __init__(self, key: str, size_limit: int, folder: str | os.PathLike | None = None) -> None:
        if int(size_limit) <= 0:
            raise ToolError(f"session cache size limit {size_limit}: give a positive number of bytes")
        base = folder or os.environ.get("SLURM_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()
        self.path = Path(base).expanduser().absolute() / f"drivekit-session-{os.getuid()}-{key}"
        self.size_limit = int(size_limit)
        self._cache = None
        self._pid = -1
        self._volume = 0
        self.hits = self.misses = self.sets = self.skipped_full = 0
        self._check_contents()  # here, in the main process: one clear line before any DataLoader worker starts

    def _check_contents(self) -> None:
        """Refuse a folder that holds anything but str keys and bytes values (a planted or foreign cache)."""
        cache = self._open()
        bad = cache._sql("SELECT COUNT(*) FROM Cache WHERE raw = 0 OR mode NOT IN (1, 2)").fetchone()[0]
        if bad:
            self.close()
            raise UnsafeSessionCacheError(f"session cache {self.path}: {bad} entries are pickled or not bytes; "
                                          "refusing to read it: delete the folder (it is only a copy of ROOT/cache)")

    def _open(self):
        if self._cache is None or self._pid != os.getpid():
            import diskcache

            _check_private_folder(self.path)
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            _check_private_folder(self.path)
            # least-recently-stored: reading never writes (diskcache's LRU updates a row on every get)
            self._cache = diskcache.Cache(str(self.path), size_limit=self.size_limit, disk=_bytes_disk(),
                                          eviction_policy="least-recently-stored")
            self._pid = os.getpid()
            self._volume = self._cache.volume()
        return self._cache

    def __getstate__(self) -> dict[str, Any]:  # a DataLoader worker reopens the cache in its own process
        return {**self.__dict__, "_cache": None, "_pid": -1}

    def get(self, key: str) -> bytes | None:
        value = self._open().get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        return bytes(value)

    def set(self, key: str, value: bytes) -> bool:
        """Store `value` under `key` unless the cache is full; True when stored."""
        cache = self._open()
        if self._volume + len(value) > self.size_limit or self.sets % 64 == 63:
            self._volume = cache.volume()  # other processes fill it too: refresh now and then, and before refusing
            if self._volume + len(value) > self.size_limit:
                self.skipped_full += 1
                return False
        cache.set(key, bytes(value))
        self._volume += len(value)
        self.sets += 1
        return True

    def stats(self) -> dict[str, Any]:
        cache = self._open()
        return {"path": str(self.path), "items": len(cache), "volume": cache.volume(), "size_limit": self.size_limit,
                "hits": self.hits, "misses": self.misses, "sets": self.sets, "skipped_full": self.skipped_full}

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
            self._cache = None
