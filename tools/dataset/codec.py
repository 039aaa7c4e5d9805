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
"""

from __future__ import annotations

import functools
import io
import threading
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


class CodecError(ValueError):
    """A blob that is not one of ours: unknown codec, or bytes that do not decode to its dtype and shape."""


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


def zstd_decompress(data: bytes) -> bytes:
    """zstd with one decompressor per thread (making one per call costs a fifth of a small read)."""
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d.decompress(data)


def zstd_compress(data: bytes, level: int = ZSTD_LEVEL) -> bytes:
    return _zstd_c(level).compress(data)


@functools.lru_cache(maxsize=64)
def _dtypes(name: str) -> tuple[np.dtype, np.dtype]:
    """(native, little-endian) dtypes of a stored dtype name."""
    native = np.dtype(name)
    return native, native.newbyteorder("<")


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
    as Pillow's decoder, bit for bit (tests/test_cache.py), in a third of the time on a 256 x 128 image
    (Pillow's Image.open and array conversion cost more than the decoding itself at that size).
    """
    if grey:
        return simplejpeg.decode_jpeg(data, colorspace="GRAY")[..., 0]
    return simplejpeg.decode_jpeg(data, colorspace="RGB")


def decode_array(blob: dict[str, Any]) -> np.ndarray:
    """The array of a blob; CodecError for an unknown codec, KeyError/ValueError for a malformed blob."""
    codec, shape, data = blob["codec"], tuple(blob["shape"]), blob["data"]
    dtype, stored = _dtypes(blob["dtype"])
    if codec == "jpeg":
        array = decode_jpeg(data, grey=len(shape) == 2)
    elif codec == "png":
        with Image.open(io.BytesIO(data)) as image:
            array = np.array(image)  # a writable copy
    elif codec in ("zstd", "raw"):
        raw = zstd_decompress(data) if codec == "zstd" else data
        array = np.frombuffer(bytearray(raw), dtype=stored)  # bytearray: writable memory
    elif codec == "zstd_shuffle":
        raw = zstd_decompress(data)
        rows, row_bytes = _rows(shape, stored.itemsize)
        if len(raw) != rows * row_bytes:
            raise ValueError(f"zstd_shuffle blob of {len(raw)} bytes, its shape {list(shape)} needs {rows * row_bytes}")
        planes = np.frombuffer(raw, np.uint8).reshape(row_bytes, rows)
        array = planes.T.copy(order="C").view(stored)  # a new, writable array
    else:
        raise CodecError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})")
    if array.dtype != dtype:
        array = array.astype(dtype)
    return array.reshape(shape)
