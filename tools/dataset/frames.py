"""One recorded frame: a single msgpack file holding measurements, boxes and encoded sensor arrays.

A frame is written complete and atomically, so a killed writer leaves either the whole frame or
nothing. What it holds is the frame contract: `measurements` (tools.dataset.measurements.Measurements),
`boxes` (BoxLabel) and the sensors the run's rig names (tools.dataset.rig), each array a blob of
tools.dataset.codec in the codec the rig gives its kind.

No pickle: msgpack holds only maps, lists, numbers, strings and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from tools.dataset import atomic
from tools.dataset.codec import CodecError, decode_array, encode_array
from tools.dataset.layout import FRAME_NAME
from tools.dataset.measurements import BoxLabel, Measurements
from tools.dataset.rig import JPEG_QUALITY

FRAME_FORMAT = 1


class FrameError(ValueError):
    """A frame file that cannot be read: truncated, not msgpack, or of an unknown format."""


def write_frame(
    path: Path,
    index: int,
    measurements: Measurements,
    boxes: list[BoxLabel],
    sensors: dict[str, tuple[np.ndarray, str]],
) -> None:
    """Write one frame atomically. `sensors` maps a name (tools.dataset.rig) to (array, codec)."""
    write_packed(path, pack_frame(index, measurements, boxes, sensors))


def pack_frame(index: int, measurements: Measurements, boxes: list[BoxLabel],
               sensors: dict[str, tuple[np.ndarray, str]]) -> bytes:
    """A frame file's bytes: the sensors encoded in their codecs, everything packed in msgpack."""
    frame = {
        "format": FRAME_FORMAT,
        "index": index,
        "measurements": measurements.to_dict(),
        "boxes": [b.to_dict() for b in boxes],
        "sensors": {name: encode_array(array, codec, jpeg_quality=JPEG_QUALITY)
                    for name, (array, codec) in sensors.items()},
    }
    return msgpack.packb(frame, use_bin_type=True)


def write_packed(path: Path, data: bytes) -> None:
    """Write a packed frame atomically. Not fsynced one by one: run_route makes a run's frames durable with one
    sync_filesystem before the result file that declares them complete (docs/reliability.md)."""
    atomic.write_bytes(path, data, durable=False)


def read_frame(path: Path, sensors: bool | list[str] = True, blobs: bool = False) -> dict[str, Any]:
    """Read a frame; decode all sensors (True), none (False) or the named ones. With `blobs`, the frame also
    holds every sensor as stored (`blobs`: name -> tools.dataset.codec blob), to copy without decoding."""
    try:
        frame = msgpack.unpackb(Path(path).read_bytes(), raw=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise FrameError(f"{path}: not a readable frame ({e})") from e
    if not isinstance(frame, dict) or frame.get("format") != FRAME_FORMAT:
        raise FrameError(f"{path}: frame format {frame.get('format') if isinstance(frame, dict) else '?'}, "
                         f"this tool reads format {FRAME_FORMAT}")
    stored = frame.pop("sensors")
    wanted = stored.keys() if sensors is True else ([] if sensors is False else sensors)
    try:
        frame["sensors"] = {name: decode_array(stored[name]) for name in wanted if name in stored}
    except (CodecError, KeyError, TypeError, ValueError, OSError) as e:
        raise FrameError(f"{path}: a sensor does not decode ({type(e).__name__}: {e})") from None
    frame["sensor_names"] = sorted(stored)
    if blobs:
        frame["blobs"] = stored
    return frame


def read_measurements(path: str | Path) -> Measurements:
    """A frame's measurements alone (FrameError when unreadable or incomplete), without making objects of its
    boxes and sensor blobs (the bucket builder reads every frame of a dataset so): one read of the file, then
    msgpack's Unpacker takes `measurements` and skips over the rest. The file must still be one complete frame
    map of FRAME_FORMAT (truncated, extra bytes, not msgpack: FrameError), as for read_frame, so a frame the
    builder takes is one the cache reads."""
    with open(path, "rb") as f:
        data = f.read()
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    found: dict[str, Any] = {}
    try:
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key in ("format", "measurements"):
                found[key] = unpacker.unpack()
            else:
                found[key] = None
                unpacker.skip()
        complete = unpacker.tell() == len(data)
    except (ValueError, msgpack.UnpackException) as e:  # OutOfData (truncated), not a map, not msgpack
        raise FrameError(f"{path}: not a readable frame ({type(e).__name__}: {e})") from None
    if not complete:
        raise FrameError(f"{path}: not a readable frame (extra data after the frame)")
    if found.get("format") != FRAME_FORMAT or "sensors" not in found:
        raise FrameError(f"{path}: frame format {found.get('format', '?')}, this tool reads format {FRAME_FORMAT}")
    try:
        return Measurements.from_dict(found.get("measurements"))
    except (KeyError, TypeError, ValueError) as e:
        raise FrameError(f"{path}: {e}") from None


@dataclass(frozen=True)
class RunMeasurements:
    """A run's measurements index (Layout.run_measurements): its town and every frame's measurements, in frame
    order, written once by the run's writer after its last frame. Readers that need the measurements alone (the
    bucket builder) read it instead of every frame; it counts only while it lists as many frames as there are."""

    town: str
    measurements: list[Measurements]


def write_run_measurements(path: Path, town: str, measurements: list[Measurements]) -> None:
    """Write a run's measurements index atomically (not fsynced: made durable with the frames)."""
    data = msgpack.packb({"format": FRAME_FORMAT, "town": town, "frames": len(measurements),
                          "measurements": [m.to_dict() for m in measurements]}, use_bin_type=True)
    atomic.write_bytes(path, data, durable=False)


def read_run_head(path: Path) -> tuple[str, int] | None:
    """(town, number of frames) of a run's measurements index, reading only the start of the file; None without
    a usable one."""
    try:
        with open(path, "rb") as f:
            unpacker = msgpack.Unpacker(f, raw=False)
            head: dict[str, Any] = {}
            for _ in range(unpacker.read_map_header()):
                key = unpacker.unpack()
                if key == "measurements":
                    break
                head[key] = unpacker.unpack()
    except (OSError, ValueError, msgpack.UnpackException):
        return None
    town, n = head.get("town"), head.get("frames")
    if head.get("format") != FRAME_FORMAT or not isinstance(town, str) or not isinstance(n, int):
        return None
    return town, n


def read_run_measurements(path: Path) -> RunMeasurements | None:
    """A run's measurements index; None when there is none or it is not one this tool reads (the caller then
    reads the frames)."""
    try:
        data = msgpack.unpackb(Path(path).read_bytes(), raw=False)
        if not isinstance(data, dict) or data.get("format") != FRAME_FORMAT or \
                len(data["measurements"]) != data["frames"]:
            return None
        return RunMeasurements(str(data["town"]), [Measurements.from_dict(m) for m in data["measurements"]])
    except (OSError, ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None


def indexed_measurements(path: Path, frame_names: list[str]) -> list[Measurements] | None:
    """Every frame's measurements from a run's measurements index (`path`), when it lists exactly the run's frame
    files (`frame_names`, Layout.frame_names: 00000.msgpack ... in order); None otherwise (no index, another
    format, a frame added or missing since): the caller then reads the frames themselves."""
    summary = read_run_measurements(path)
    if summary is None or frame_names != [FRAME_NAME.format(index=i) for i in range(len(summary.measurements))]:
        return None
    return summary.measurements


def read_boxes(frame: dict[str, Any]) -> list[BoxLabel]:
    """The box labels of a frame read with read_frame; FrameError when one is malformed."""
    try:
        return [BoxLabel.from_dict(b) for b in frame.get("boxes") or []]
    except (TypeError, ValueError) as e:
        raise FrameError(f"frame {frame.get('index')}: {e}") from None
