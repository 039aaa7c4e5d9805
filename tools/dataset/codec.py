"""The one array codec of the dataset: a numpy array as a msgpack-ready blob and back.

A blob is ``{"codec", "dtype", "shape", "data"}`` (``data`` bytes). Frames (tools.dataset.frames) and
cache records (tools.dataset.cache) both store arrays this way; the codecs:

- ``jpeg``  uint8 HxWx3 images (lossy; the writer picks the quality)
- ``png``   uint8 HxW or HxWx3, or uint16 HxW (lossless: semantics, depth in centimetres, BEV)
- ``zstd``  any dtype and shape: little-endian bytes compressed with zstandard (class and depth rasters)
- ``zstd_shuffle``  any dtype and shape: the little-endian bytes of each row (first axis) regrouped plane by
            plane (every row's byte 0, then every row's byte 1, ...), then zstd (LiDAR: a float's sign and
            exponent bytes sit together and compress; at SHUFFLE_LEVEL about 40% smaller and twice as fast
            to write as ``zstd``)
- ``raw``   any dtype and shape: little-endian bytes as they are (inside an already compressed body)

Decoded arrays are native-endian and writable (torch.from_numpy warns on read-only buffers).

A blob declares its dtype and shape, and nothing is allocated before they are checked: against the caller's
`Spec` (the rig's shape of a sensor, the cache settings' shape of a sample key) when it gives one, and always
against `max_bytes`; then the encoded data must declare that very size (a zstd frame's content size, a JPEG's or
PNG's header) before it is decompressed. A 162 KB blob declaring 8 GiB is a CodecError, not an allocation.
"""

from __future__ import annotations

import functools
import io
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simplejpeg
import zstandard
from PIL import Image

CODECS = ("jpeg", "png", "zstd", "zstd_shuffle", "raw")
#: zstd level of `zstd` blobs: levels 1 to 3 read equally fast, 19 is 50 to 100 times slower to write.
ZSTD_LEVEL = 3
#: zstd level of `zstd_shuffle` blobs (LiDAR, a frame's largest array): over 202 recorded clouds level -1 (zstd's
#: fast levels) writes one in 22% less time than level 1 at the same size (76.6 against 76.5 KiB); level 3 is
#: slower still, -3 is 5% larger.
SHUFFLE_LEVEL = -1


#: The largest array a blob may declare when the caller gives no Spec (a 4K RGB image is 25 MB).
MAX_BLOB_BYTES = 256 << 20
#: dtype kinds a blob may declare: booleans, integers, floats (never objects, strings or structures).
_KINDS = frozenset("biuf")
_BLOB_KEYS = frozenset({"codec", "dtype", "shape", "data"})


class CodecError(ValueError):
    """A blob that is not one of ours: unknown codec, or bytes that do not decode to its dtype and shape."""


@dataclass(frozen=True)
class Spec:
    """What a blob must declare: its dtype and shape, a -1 entry free up to `max_rows` (a LiDAR's points)."""

    dtype: str
    shape: tuple[int, ...]
    max_rows: int = 0
    #: Of a spec without a free dimension: the blob's dtype and shape as encode_array writes them and msgpack reads
    #: them back, and what `declared` returns for them; a blob declaring exactly these is checked with two
    #: comparisons (a cache record's every array: 2 us less per array, 30 us a sample).
    _exact: tuple[str, list[int], tuple[np.dtype, np.dtype, tuple[int, ...], int]] | None = field(
        init=False, default=None, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if -1 not in self.shape:
            native, stored, _ = _dtypes(self.dtype)
            shape = tuple(self.shape)
            object.__setattr__(self, "_exact", (stored.str.lstrip("<>|="), list(shape),
                                                (native, stored, shape, math.prod(shape) * stored.itemsize)))

    def allows(self, dtype: str, shape: tuple[int, ...]) -> bool:
        if dtype != self.dtype:
            return False
        if shape == self.shape:
            return True
        if len(shape) != len(self.shape):
            return False
        for s, w in zip(shape, self.shape, strict=True):  # (a loop: a generator costs 2 us more per blob)
            if s != w and not (w == -1 and 0 <= s <= self.max_rows):
                return False
        return True

    def __str__(self) -> str:
        shape = ", ".join(f"<={self.max_rows}" if w == -1 else str(w) for w in self.shape)
        return f"{self.dtype} ({shape})"


_local = threading.local()


def _zstd_c(level: int) -> zstandard.ZstdCompressor:
    """One compressor per thread and level."""
    compressors = getattr(_local, "zc", None)
    if compressors is None:
        compressors = _local.zc = {}
    c = compressors.get(level)
    if c is None:
        c = compressors[level] = zstandard.ZstdCompressor(level=level)
    return c


def zstd_decompress(data: bytes, max_output_size: int = 0) -> bytes:
    """zstd with one decompressor per thread (making one per call costs a fifth of a small read). A frame that
    declares its content size gets that much memory: check it first (`_zstd_bounded`, `zstd_decompress_bounded`)
    unless the data is trusted."""
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d.decompress(data, max_output_size=max_output_size)


def zstd_decompress_bounded(data: bytes, limit: int) -> bytes:
    """zstd data that may decompress to at most `limit` bytes (CodecError otherwise, before allocating more)."""
    try:
        size = zstandard.frame_content_size(data)
        if size > limit:
            raise CodecError(f"zstd data declaring {size} bytes, more than the {limit} allowed")
        return zstd_decompress(data, max_output_size=limit if size == -1 else 0)
    except zstandard.ZstdError as e:
        raise CodecError(f"zstd data does not decompress within {limit} bytes ({e})") from None


def zstd_compress(data: bytes, level: int = ZSTD_LEVEL) -> bytes:
    return _zstd_c(level).compress(data)


@functools.lru_cache(maxsize=64)
def _dtypes(name: str) -> tuple[np.dtype, np.dtype, str]:
    """(native, little-endian) dtypes of a stored dtype name, and the native one's name (numpy computes a dtype's
    name anew on each access, 15 us: once per name here, not once per blob); CodecError for a dtype a blob may
    not hold (not booleans, integers or floats)."""
    try:
        native = np.dtype(name)
    except TypeError:
        raise CodecError(f"dtype {name[:40]!r} is not a numpy dtype") from None
    if native.kind not in _KINDS or native.fields is not None or native.subdtype is not None:
        raise CodecError(f"dtype {native}: a blob holds booleans, integers or floats")
    return native, native.newbyteorder("<"), native.name


def encode_array(array: np.ndarray, codec: str, jpeg_quality: int = 90, jpeg_optimize: bool = False) -> dict[str, Any]:
    """The blob of `array` in `codec`."""
    array = np.require(array, requirements="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if codec == "jpeg" and not jpeg_optimize:
        # libjpeg-turbo through simplejpeg, 4:2:0 as Pillow's default: 2.5 times faster than Pillow on a
        # 512 x 256 frame (its bytes differ from Pillow's; the pixels are as close to the source).
        image = array.astype(np.uint8, copy=False)
        grey = image.ndim == 2
        data = simplejpeg.encode_jpeg(image[..., None] if grey else image, quality=int(jpeg_quality),
                                      colorspace="GRAY" if grey else "RGB", colorsubsampling="420")
    elif codec == "jpeg":  # Huffman tables optimised for the image (smaller; simplejpeg cannot)
        buf = io.BytesIO()
        Image.fromarray(array.astype(np.uint8, copy=False)).save(buf, format="JPEG", quality=int(jpeg_quality),
                                                                 optimize=True)
        data = buf.getvalue()
    elif codec == "png":
        buf = io.BytesIO()
        image = Image.fromarray(array.astype("<u2", copy=False) if array.dtype == np.uint16 else array)
        image.save(buf, format="PNG", compress_level=1)
        data = buf.getvalue()
    elif codec in ("zstd", "raw"):
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        if codec == "zstd":
            data = zstd_compress(data)
    elif codec == "zstd_shuffle":
        rows, row_bytes = _rows(array.shape, array.dtype.itemsize)
        planes = array.astype(array.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8)
        data = zstd_compress(np.ascontiguousarray(planes.reshape(rows, row_bytes).T), SHUFFLE_LEVEL)
    else:
        raise CodecError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})")
    return {"codec": codec, "dtype": array.dtype.str.lstrip("<>|="), "shape": list(array.shape), "data": data}


def _rows(shape: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """(rows, bytes per row) of an array stored row by row: the first axis (a 0-d array is one row)."""
    rows = int(shape[0]) if len(shape) else 1
    return rows, int(np.prod(shape[1:], dtype=np.int64)) * itemsize


def decode_jpeg(data: bytes, grey: bool = False) -> np.ndarray:
    """The pixels of a JPEG: uint8 HxWx3, or HxW with `grey`; writable.

    simplejpeg (libjpeg-turbo called directly, default slow-integer DCT and fancy upsampling): the same pixels
    as Pillow's decoder, bit for bit (tests/cache/test_cache.py), in a third of the time on a 256 x 128 image
    (Pillow's Image.open and array conversion cost more than the decoding itself at that size).
    """
    if grey:
        return simplejpeg.decode_jpeg(data, colorspace="GRAY")[..., 0]
    return simplejpeg.decode_jpeg(data, colorspace="RGB")


def declared(blob: Any, spec: Spec | None = None, max_bytes: int = MAX_BLOB_BYTES) -> tuple[np.dtype, np.dtype,
                                                                                    tuple[int, ...], int]:
    """(native dtype, stored dtype, shape, bytes) a blob declares, checked against `spec` and `max_bytes` before
    anything is allocated; CodecError naming what is wrong."""
    if not isinstance(blob, dict) or not _BLOB_KEYS <= blob.keys():
        raise CodecError("not a blob (a map of codec, dtype, shape, data)")
    exact = spec._exact if spec is not None else None
    if exact is not None and blob["dtype"] == exact[0] and blob["shape"] == exact[1] and exact[2][3] <= max_bytes \
            and isinstance(blob["data"], bytes):
        return exact[2]  # (sizes equal to the spec's, True for 1 included, are the spec's ints)
    shape = blob["shape"]
    if not isinstance(shape, list | tuple) or len(shape) > 8 or \
            not all(type(n) is int and n >= 0 for n in shape):  # (type: a bool is no size)
        raise CodecError(f"shape {str(shape)[:60]}: expected up to 8 sizes >= 0")
    shape = tuple(shape)
    dtype, stored, name = _dtypes(str(blob["dtype"]))
    if spec is not None and not spec.allows(name, shape):
        raise CodecError(f"declares {name} {list(shape)}, expected {spec}")
    size = math.prod(shape) * stored.itemsize
    if size > max_bytes:
        raise CodecError(f"declares {name} {list(shape)}: {size} bytes, more than the {max_bytes} allowed")
    if not isinstance(blob["data"], bytes):
        raise CodecError("data is not bytes")
    return dtype, stored, shape, size


def _zstd_bounded(data: bytes, size: int) -> bytes:
    """zstd data that must decompress to exactly `size` bytes: its frame's declared content size is checked
    before the output is allocated (a frame without one is decompressed into at most `size` bytes)."""
    try:
        declared_size = zstandard.frame_content_size(data)
        raw = zstd_decompress(data) if declared_size == size else \
            (zstd_decompress(data, max_output_size=max(size, 1)) if declared_size == -1 else None)
    except zstandard.ZstdError as e:
        raise CodecError(f"zstd data does not decompress ({e})") from None
    if raw is None or len(raw) != size:
        raise CodecError(f"zstd data of {declared_size if raw is None else len(raw)} bytes where the declared dtype "
                         f"and shape needs {size}")
    return raw


def decode_array(blob: dict[str, Any], spec: Spec | None = None, max_bytes: int = MAX_BLOB_BYTES) -> np.ndarray:
    """The array of a blob; CodecError for an unknown codec, a blob declaring another dtype or shape than `spec`
    or more than `max_bytes`, or data that does not decode to what it declares (checked before allocating)."""
    dtype, stored, shape, size = declared(blob, spec, max_bytes)
    codec, data = blob["codec"], blob["data"]
    if codec == "jpeg":
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        except ValueError as e:
            raise CodecError(f"not a JPEG ({e})") from None
        if dtype != np.uint8 or len(shape) not in (2, 3) or (height, width) != shape[:2] or shape[2:] not in ((), (3,)):
            raise CodecError(f"a JPEG of {width} x {height} pixels, the blob declares {dtype.name} {list(shape)}")
        array = decode_jpeg(data, grey=len(shape) == 2)
    elif codec == "png":
        with Image.open(io.BytesIO(data)) as image:
            if image.size != (shape[1:2] + shape[0:1] if len(shape) >= 2 else None):
                raise CodecError(f"a PNG of {image.size[0]} x {image.size[1]} pixels, the blob declares "
                                 f"{list(shape)}")
            array = np.array(image)  # a writable copy
        if array.nbytes != size:
            raise CodecError(f"a PNG of {array.dtype} {list(array.shape)}, the blob declares {dtype.name} "
                             f"{list(shape)}")
    elif codec in ("zstd", "raw"):
        raw = _zstd_bounded(data, size) if codec == "zstd" else data
        if len(raw) != size:
            raise CodecError(f"{len(raw)} bytes where the declared dtype and shape needs {size}")
        array = np.frombuffer(bytearray(raw), dtype=stored)  # bytearray: writable memory
    elif codec == "zstd_shuffle":
        raw = _zstd_bounded(data, size)
        rows, row_bytes = _rows(shape, stored.itemsize)
        planes = np.frombuffer(raw, np.uint8).reshape(row_bytes, rows)
        array = planes.T.copy(order="C").view(stored)  # a new, writable array
    else:
        raise CodecError(f"unknown codec {str(codec)[:40]!r} (known: {', '.join(CODECS)})")
    if array.dtype != dtype:
        array = array.astype(dtype)
    return array.reshape(shape)
