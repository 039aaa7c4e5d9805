"""The training cache on disk: where records live, how one is written and read, and the node-local cache.

    ROOT/cache/<settings.key()>/                      one folder per preprocessing configuration
        settings.json                                 the CacheSettings and CACHE_FORMAT (written first)
        data/<Scenario>/<run>/<index:05d>.rec         one record per recorded frame (mirrors ROOT/data)

A record is one msgpack map, ``{"format": CACHE_FORMAT, "crc32": <crc32 of body>, "body": <bytes>}``.
``body`` is zstandard (level ZSTD_LEVEL) of a msgpack map from the sample's keys (tools.dataset.samples)
to arrays ``{"codec", "dtype", "shape", "data"}``: codec ``jpeg`` for the RGB image at the model's input
size, ``raw`` (C-order little-endian bytes) for everything else. No pickle anywhere: a shared cache
cannot run code on its reader. docs/cache.md describes the format and its version.

`read_record` checks everything and raises `CacheRecordError` (one line naming the file) for a missing,
truncated, foreign, damaged or other-version record; `rebuild_record` makes a damaged record again
from the dataset in a separate process.
"""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zstandard
from PIL import Image

from tools.dataset import layout as _layout
from tools.dataset.errors import ToolError
from tools.dataset.layout import DATA, Layout
from tools.dataset.samples import CACHE_FORMAT, CacheSettings

run_rel = _layout.run_rel  # the one definition lives in layout.py; re-exported
run_key = _layout.run_key

#: Path templates inside a cache folder.
CACHE_SETTINGS = "settings.json"
RECORD_NAME = "{index:05d}.rec"
RECORD_SUFFIX = ".rec"

#: zstd level of a record's body: levels 1 to 3 read equally fast; 3 is a little smaller (docs/cache.md).
ZSTD_LEVEL = 3

#: No valid record is smaller than this (the outer map alone takes more); the builder's cheap
#: "already done" test is existence and at least this size (`verify` checks the checksum).
MIN_RECORD_BYTES = 32

_MAX_RECORD_BYTES = 1 << 30


class CacheRecordError(ToolError):
    """A cache record that cannot be used: missing, truncated, not a record, another format, damaged."""


# ----------------------------------------------------------------------------- paths


def cache_dir(layout: Layout, settings: CacheSettings) -> Path:
    """ROOT/cache/<settings.key()>: the cache of one preprocessing configuration."""
    return layout.cache / settings.key()


def record_path(cache_root: Path, run_rel: str, index: int) -> Path:
    """The record of frame `index` of run `run_rel` ("data/<Scenario>/<run>") in the cache folder."""
    key = run_key(run_rel)  # refuses absolute paths, "..", and anything not a run
    if int(index) < 0:
        raise ValueError(f"frame index {index} is negative")
    return Path(cache_root) / DATA / key.scenario / key.name / RECORD_NAME.format(index=int(index))


def settings_path(cache_root: Path) -> Path:
    return Path(cache_root) / CACHE_SETTINGS


def read_cache_settings(cache_root: Path) -> CacheSettings:
    """The settings a cache folder was built with (its settings.json)."""
    path = settings_path(cache_root)
    try:
        data = json.loads(path.read_text())
        if data.get("format") != CACHE_FORMAT:
            raise ToolError(f"{path}: cache format {data.get('format')}, this tool reads format {CACHE_FORMAT}; "
                            "build a new cache with bin/build-cache")
        return CacheSettings.from_dict(data["settings"])
    except FileNotFoundError:
        raise ToolError(f"{path}: missing; not a cache folder (build one with bin/build-cache)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ToolError(f"{path}: not a readable cache settings file ({e})") from None


# ----------------------------------------------------------------------------- records


def _pack_array(array: np.ndarray, codec: str = "raw", quality: int = 93) -> dict[str, Any]:
    array = np.asarray(array)
    if codec == "jpeg":
        buf = io.BytesIO()
        # optimize: Huffman tables fitted to the image, 7% smaller at no cost to decoding (docs/cache.md)
        image = Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8))
        image.save(buf, format="JPEG", quality=quality, optimize=True)
        data = buf.getvalue()
    else:
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"codec": codec, "dtype": array.dtype.str.lstrip("<>|="), "shape": list(array.shape), "data": data}


@functools.lru_cache(maxsize=64)
def _dtypes(name: str) -> tuple[np.dtype, np.dtype]:
    """(native, little-endian) dtypes of a stored dtype name."""
    native = np.dtype(name)
    return native, native.newbyteorder("<")


def _unpack_array(blob: dict[str, Any]) -> np.ndarray:
    codec, shape, data = blob["codec"], blob["shape"], blob["data"]
    dtype, stored = _dtypes(blob["dtype"])
    if codec == "jpeg":
        with Image.open(io.BytesIO(data)) as image:
            array = np.array(image)  # a writable copy (np.asarray of an image is read-only)
    elif codec == "raw":
        # bytearray: the array owns writable memory (torch.from_numpy warns on read-only buffers)
        array = np.frombuffer(bytearray(data), dtype=stored)
    else:
        raise ValueError(f"unknown codec {codec!r}")
    if array.dtype != dtype:
        array = array.astype(dtype)
    return array.reshape(shape)


_local = threading.local()


def _decompress(body: bytes) -> bytes:
    """zstd decompression with one decompressor per thread (making one per call costs a fifth of the time)."""
    decompressor = getattr(_local, "zstd", None)
    if decompressor is None:
        decompressor = _local.zstd = zstandard.ZstdDecompressor()
    return decompressor.decompress(body)


#: How each sample key is stored; anything not named here is raw.
_CODECS = {"rgb": "jpeg"}


def encode_record(sample: dict[str, Any], jpeg_quality: int = 93) -> bytes:
    """The bytes of a record holding `sample` (the sample dict of tools.dataset.samples)."""
    fields = {name: _pack_array(value, _CODECS.get(name, "raw"), jpeg_quality) for name, value in sample.items()}
    body = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(msgpack.packb(fields, use_bin_type=True))
    return msgpack.packb({"format": CACHE_FORMAT, "crc32": zlib.crc32(body), "body": body}, use_bin_type=True)


def _open_record(data: bytes, path: Path) -> bytes:
    """The checked body of a record's bytes; CacheRecordError naming `path` when it is not a good record."""
    if len(data) < MIN_RECORD_BYTES:
        raise CacheRecordError(f"{path}: truncated record ({len(data)} bytes); rebuild it "
                               "(python -m tools.cache verify --repair)")
    try:
        outer = msgpack.unpackb(data, raw=False, max_bin_len=_MAX_RECORD_BYTES)
    except (ValueError, msgpack.UnpackException) as e:
        raise CacheRecordError(f"{path}: not a cache record or truncated ({e.__class__.__name__}); rebuild it "
                               "(python -m tools.cache verify --repair)") from None
    if not isinstance(outer, dict) or not {"format", "crc32", "body"} <= outer.keys():
        raise CacheRecordError(f"{path}: not a cache record; rebuild it (python -m tools.cache verify --repair)")
    if outer["format"] != CACHE_FORMAT:
        raise CacheRecordError(f"{path}: cache format {outer['format']!r}, this tool reads format {CACHE_FORMAT}; "
                               "build a new cache (bin/build-cache)")
    body = outer["body"]
    if not isinstance(body, bytes) or zlib.crc32(body) != outer["crc32"]:
        raise CacheRecordError(f"{path}: checksum mismatch (damaged record); rebuild it "
                               "(python -m tools.cache verify --repair)")
    return body


def decode_record(data: bytes, path: Path | str = "<record>") -> dict[str, Any]:
    """The sample dict held by a record's bytes (what a session cache stores); CacheRecordError when bad."""
    body = _open_record(data, Path(path))
    try:
        fields = msgpack.unpackb(_decompress(body), raw=False,
                                 max_bin_len=_MAX_RECORD_BYTES)
        return {name: _unpack_array(blob) for name, blob in fields.items()}
    except (ValueError, TypeError, KeyError, OSError, zstandard.ZstdError, msgpack.UnpackException) as e:
        # the checksum matched, so the writer itself wrote something unreadable
        raise CacheRecordError(f"{path}: undecodable record ({e}); rebuild it "
                               "(python -m tools.cache verify --repair)") from None


def write_record(path: Path, sample: dict[str, Any], jpeg_quality: int = 93) -> int:
    """Write `sample` as a record at `path` atomically; returns its size in bytes."""
    from tools.dataset import atomic

    data = encode_record(sample, jpeg_quality)
    atomic.write_bytes(Path(path), data)
    return len(data)


def read_record_bytes(path: Path) -> bytes:
    """A record's raw bytes (for a session cache), CacheRecordError when the file is missing."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CacheRecordError(f"{path}: missing cache record; build the cache (bin/build-cache)") from None
    except OSError as e:
        raise CacheRecordError(f"{path}: cannot read the cache record ({e.strerror})") from None


def read_record(path: Path) -> dict[str, Any]:
    """The sample dict of tools.dataset.samples stored at `path`; CacheRecordError when it cannot be used."""
    return decode_record(read_record_bytes(path), path)


def check_record(path: Path) -> None:
    """Check a record's format and checksum without decoding it (what `verify` does per record)."""
    _open_record(read_record_bytes(path), Path(path))


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


class SessionCache:
    """A node-local cache of record bytes for one training session (diskcache on local disk).

    The folder is `folder`, else $SLURM_TMPDIR, else $TMPDIR, else the system's temporary folder, under a
    subfolder named by the cache key, so sessions of other settings never mix. Values are the record
    bytes exactly as stored in the persistent cache (decode them with `decode_record`, which checks them):
    bytes in, bytes out, nothing pickled. `size_limit` (bytes) is explicit (diskcache's own default is
    1 GB); once the cache is full, new values are not added (with random sampling, evicting one sample for
    another gains nothing and costs writes). Safe to share between DataLoader worker processes: each
    process opens its own handle.
    """

    def __init__(self, key: str, size_limit: int, folder: str | os.PathLike | None = None) -> None:
        if int(size_limit) <= 0:
            raise ToolError(f"session cache size limit {size_limit}: give a positive number of bytes")
        base = folder or os.environ.get("SLURM_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()
        self.path = Path(base).expanduser().absolute() / f"drivekit-session-{key}"
        self.size_limit = int(size_limit)
        self._cache = None
        self._pid = -1
        self._volume = 0
        self.hits = self.misses = self.sets = self.skipped_full = 0

    def _open(self):
        if self._cache is None or self._pid != os.getpid():
            import diskcache

            # least-recently-stored: reading never writes (diskcache's LRU updates a row on every get)
            self._cache = diskcache.Cache(str(self.path), size_limit=self.size_limit,
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
