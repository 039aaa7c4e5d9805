"""The one array codec of the dataset: a numpy array as a msgpack-ready blob and back.

A blob is ``{"codec", "dtype", "shape", "data"}`` (``data`` bytes). Frames (tools.dataset.frames) and
cache records (tools.dataset.cache) both store arrays this way; the codecs:

- ``jpeg``  uint8 HxWx3 images (lossy; the writer picks the quality)
- ``png``   uint8 HxW or HxWx3, or uint16 HxW (lossless: semantics, depth in centimetres, BEV)
- ``zstd``  any dtype and shape: little-endian bytes compressed with zstandard (LiDAR)
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

CODECS = ("jpeg", "png", "zstd", "raw")
#: zstd level of `zstd` blobs: levels 1 to 3 read equally fast, 19 is 50 to 100 times slower to write.
ZSTD_LEVEL = 3


class CodecError(ValueError):
    """A blob that is not one of ours: unknown codec, or bytes that do not decode to its dtype and shape."""


_local = threading.local()


def _zstd_c() -> zstandard.ZstdCompressor:
    c = getattr(_local, "zc", None)
    if c is None:
        c = _local.zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def zstd_decompress(data: bytes) -> bytes:
    """zstd with one decompressor per thread (making one per call costs a fifth of a small read)."""
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d.decompress(data)


def zstd_compress(data: bytes) -> bytes:
    return _zstd_c().compress(data)


@functools.lru_cache(maxsize=64)
def _dtypes(name: str) -> tuple[np.dtype, np.dtype]:
    """(native, little-endian) dtypes of a stored dtype name."""
    native = np.dtype(name)
    return native, native.newbyteorder("<")


def encode_array(array: np.ndarray, codec: str, jpeg_quality: int = 90, jpeg_optimize: bool = False) -> dict[str, Any]:
    """The blob of `array` in `codec`."""
    array = np.require(array, requirements="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if codec == "jpeg":
        buf = io.BytesIO()
        Image.fromarray(array.astype(np.uint8, copy=False)).save(buf, format="JPEG", quality=int(jpeg_quality),
                                                                 optimize=bool(jpeg_optimize))
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
    else:
        raise CodecError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})")
    return {"codec": codec, "dtype": array.dtype.str.lstrip("<>|="), "shape": list(array.shape), "data": data}


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
    else:
        raise CodecError(f"unknown codec {codec!r} (known: {', '.join(CODECS)})")
    if array.dtype != dtype:
        array = array.astype(dtype)
    return array.reshape(shape)
