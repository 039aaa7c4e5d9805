"""One recorded frame: a single msgpack file holding measurements, boxes and encoded sensor arrays.

A frame is written complete and atomically, so a killed writer leaves either the whole frame or
nothing. Arrays are stored with the codec that suits them:

- ``jpeg``  uint8 HxWx3 camera images (lossy, quality 90)
- ``png``   uint8 HxW or HxWx3, or uint16 HxW (lossless: semantics, depth in centimetres, BEV)
- ``zstd``  any dtype and shape, raw little-endian bytes compressed with zstandard (LiDAR)

No pickle: msgpack holds only maps, lists, numbers, strings and bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zstandard
from PIL import Image

from tools.dataset import atomic

FRAME_FORMAT = 1
JPEG_QUALITY = 90

_ZSTD_LEVEL = 3


class FrameError(ValueError):
    """A frame file that cannot be read: truncated, not msgpack, or of an unknown format."""


def encode_array(array: np.ndarray, codec: str) -> dict[str, Any]:
    array = np.ascontiguousarray(array)
    if codec == "jpeg":
        buf = io.BytesIO()
        Image.fromarray(array).save(buf, format="JPEG", quality=JPEG_QUALITY)
        data = buf.getvalue()
    elif codec == "png":
        buf = io.BytesIO()
        if array.dtype == np.uint16:
            image = Image.fromarray(array.astype("<u2", copy=False))
        else:
            image = Image.fromarray(array)
        image.save(buf, format="PNG", compress_level=1)
        data = buf.getvalue()
    elif codec == "zstd":
        le = array.astype(array.dtype.newbyteorder("<"), copy=False)
        data = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(le.tobytes())
    else:
        raise ValueError(f"unknown codec {codec!r}")
    return {"codec": codec, "dtype": array.dtype.str.lstrip("<>|="), "shape": list(array.shape), "data": data}


def decode_array(blob: dict[str, Any]) -> np.ndarray:
    codec, shape = blob["codec"], tuple(blob["shape"])
    dtype = np.dtype(blob["dtype"]).newbyteorder("<")
    if codec in ("jpeg", "png"):
        with Image.open(io.BytesIO(blob["data"])) as image:
            array = np.asarray(image)
        if array.dtype != dtype:
            array = array.astype(dtype)
        return array.reshape(shape)
    if codec == "zstd":
        raw = zstandard.ZstdDecompressor().decompress(blob["data"])
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=False)
    raise FrameError(f"unknown codec {codec!r}")


def write_frame(
    path: Path,
    index: int,
    measurements: dict[str, Any],
    boxes: list[dict[str, Any]],
    sensors: dict[str, tuple[np.ndarray, str]],
) -> None:
    """Write one frame atomically. `sensors` maps a name to (array, codec)."""
    frame = {
        "format": FRAME_FORMAT,
        "index": index,
        "measurements": measurements,
        "boxes": boxes,
        "sensors": {name: encode_array(array, codec) for name, (array, codec) in sensors.items()},
    }
    atomic.write_bytes(path, msgpack.packb(frame, use_bin_type=True))


def read_frame(path: Path, sensors: bool | list[str] = True) -> dict[str, Any]:
    """Read a frame; decode all sensors (True), none (False) or the named ones."""
    try:
        frame = msgpack.unpackb(Path(path).read_bytes(), raw=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise FrameError(f"{path}: not a readable frame ({e})") from e
    if not isinstance(frame, dict) or frame.get("format") != FRAME_FORMAT:
        raise FrameError(f"{path}: frame format {frame.get('format') if isinstance(frame, dict) else '?'}, "
                         f"this tool reads format {FRAME_FORMAT}")
    blobs = frame.pop("sensors")
    wanted = blobs.keys() if sensors is True else ([] if sensors is False else sensors)
    frame["sensors"] = {name: decode_array(blobs[name]) for name in wanted if name in blobs}
    frame["sensor_names"] = sorted(blobs)
    return frame
