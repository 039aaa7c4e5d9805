"""One recorded frame: a single msgpack file holding measurements, boxes and encoded sensor arrays.

A frame is written complete and atomically, so a killed writer leaves either the whole frame or
nothing. What it holds is the frame contract: `measurements` (tools.dataset.measurements.Measurements),
`boxes` (BoxLabel) and the sensors the run's rig names (tools.dataset.rig), each array a blob of
tools.dataset.codec in the codec the rig gives its kind.

No pickle: msgpack holds only maps, lists, numbers, strings and bytes.

Checksum (frame format 2, dataset format 5): a frame file, and a run's measurements index, is one msgpack map
whose last entry is `"crc32"`: the CRC-32 (zlib) of every byte of the file before the checksum's own 4 (a msgpack
uint32, big-endian, the file's last 4 bytes). Readers check it before unpacking anything, so a byte changed
anywhere (a LiDAR blob, a JPEG, a measurement) is a FrameError naming the file. A frame of format 1 (recorded
before) carries none: it reads as before, marked `verified: False`, and validate says how many such frames
cannot be verified.

Identity (frame format 3, dataset format 6): a frame holds, inside its checksummed bytes, the run it was recorded
in (`run`: "<Scenario>/<run>", str(RunKey)) and its index; `misplaced` is the one rule that compares them with
the place the frame is read from (validate and the cache builder both apply it), so a frame copied or swapped
into another run, or renamed within its run, is refused by name. A frame's fingerprint is its checksum (the CRC-32
of its seal, `fingerprint`): cache records name the fingerprint of the frame they were made from, and a run's
measurements index lists every frame's (`fingerprints`). Frames of formats 1 and 2 carry no run: their place
cannot be verified (`identified` False), and the tools say so once.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from tools.core import atomic, files
from tools.dataset.codec import MAX_BLOB_BYTES, CodecError, decode_array, encode_array
from tools.dataset.layout import FRAME_NAME
from tools.dataset.measurements import BoxLabel, Measurements
from tools.dataset.rig import JPEG_QUALITY, RigConfig

#: 3: a frame names its run (`run`, beside its `index`) and a measurements index lists its frames' fingerprints.
#: 2: frames and measurements indexes end with a CRC-32 of their bytes (`seal`). 1: without one.
FRAME_FORMAT = 3
READABLE_FRAME_FORMATS = (1, 2, 3)
#: The first frame format whose frames name their run (`misplaced` can verify their place).
IDENTIFIED_FRAME_FORMAT = 3
#: The end of a sealed file, before the checksum's 4 bytes: the key "crc32" and msgpack's uint32 marker.
_SEAL = msgpack.packb("crc32") + b"\xce"


class FrameError(ValueError):
    """A frame file that cannot be read: truncated, not msgpack, or of an unknown format."""


def write_frame(
    path: Path,
    index: int,
    measurements: Measurements,
    boxes: list[BoxLabel],
    sensors: dict[str, tuple[np.ndarray, str]],
    *,
    run: str,
) -> None:
    """Write frame `index` of run `run` (str(RunKey)) atomically. `sensors` maps a name (tools.dataset.rig) to
    (array, codec)."""
    write_packed(path, pack_frame(index, measurements, boxes, sensors, run=run))


def pack_frame(index: int, measurements: Measurements, boxes: list[BoxLabel],
               sensors: dict[str, tuple[np.ndarray, str]], *, run: str) -> bytes:
    """The bytes of frame `index` of run `run` ("<Scenario>/<run>"): the sensors encoded in their codecs,
    everything packed in msgpack and sealed (`fingerprint` reads its checksum back)."""
    frame = {
        "format": FRAME_FORMAT,
        "run": run,
        "index": index,
        "measurements": measurements.to_dict(),
        "boxes": [b.to_dict() for b in boxes],
        "sensors": {name: encode_array(array, codec, jpeg_quality=JPEG_QUALITY)
                    for name, (array, codec) in sensors.items()},
    }
    return seal(frame)


def seal(fields: dict[str, Any]) -> bytes:
    """`fields` packed as one msgpack map with a last entry "crc32": the CRC-32 of every byte before its own 4."""
    packer = msgpack.Packer(use_bin_type=True)
    parts = [packer.pack_map_header(len(fields) + 1)]
    for key, value in fields.items():
        parts += (packer.pack(key), packer.pack(value))
    parts.append(_SEAL)
    body = b"".join(parts)
    return body + zlib.crc32(body).to_bytes(4, "big")


def check_seal(data: bytes, path: Path | str) -> bool:
    """Whether `data` (a frame's or a measurements index's bytes) carries its checksum: True when it does and it
    matches; False when it has none (a file of format 1, or one whose end is damaged: the caller refuses a format
    2 file without one); FrameError when the checksum does not match."""
    if len(data) < len(_SEAL) + 4 or data[-4 - len(_SEAL):-4] != _SEAL:
        return False
    if zlib.crc32(memoryview(data)[:-4]) != int.from_bytes(data[-4:], "big"):
        raise FrameError(f"{path}: checksum mismatch: the file's bytes changed after it was written (damaged); "
                         "record its run again: delete its result file, then bin/collect")
    return True


def fingerprint(data: bytes) -> int | None:
    """The fingerprint of a frame's bytes: its checksum (the CRC-32 its seal ends with), None for a file without a
    seal (frame format 1). Cache records name the fingerprint of the frame they were made from."""
    if len(data) < len(_SEAL) + 4 or data[-4 - len(_SEAL):-4] != _SEAL:
        return None
    return int.from_bytes(data[-4:], "big")


def read_fingerprint(path: Path) -> int | None:
    """`fingerprint` of the frame file at `path`, reading only its last bytes (None without a seal, or when the
    file is not a readable regular file)."""
    try:
        with files.open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(_SEAL) + 4:
                return None
            f.seek(size - len(_SEAL) - 4)
            return fingerprint(f.read(len(_SEAL) + 4))
    except OSError:
        return None


def misplaced(frame: dict[str, Any], run: str, index: int) -> str:
    """Where frame `frame` (read_frame's dict) says it belongs, when that is not run `run` ("<Scenario>/<run>"),
    frame `index`; "" when it is, or when it cannot say (a frame before format 3 names no run: its index alone is
    compared). The one rule of a frame's place: validate and the cache builder apply it."""
    found_run, found_index = frame.get("run"), frame.get("index")
    if frame.get("format") not in READABLE_FRAME_FORMATS or frame["format"] < IDENTIFIED_FRAME_FORMAT:
        found_run = run  # (no run recorded: not comparable)
    if found_run == run and found_index == index and not isinstance(found_index, bool):
        return ""
    where = f"frame {found_index!r}" if found_run == run else f"frame {found_index!r} of run {found_run!r}"
    return (f"holds {where}, not frame {index} of run {run}: a frame copied, swapped or renamed from elsewhere; "
            "record the run again (delete its result file, then bin/collect)")


def identified(frame: dict[str, Any]) -> bool:
    """Whether a frame names its run (frame format 3 on), so that `misplaced` can verify its place."""
    return isinstance(frame.get("format"), int) and frame["format"] >= IDENTIFIED_FRAME_FORMAT


def _check_format(found: Any, verified: bool, path: Path | str) -> None:
    if found not in READABLE_FRAME_FORMATS:
        raise FrameError(f"{path}: frame format {found}, this tool reads format {FRAME_FORMAT} (and 1 and 2: "
                         "frames without a checksum, without their run)")
    if found != 1 and not verified:
        raise FrameError(f"{path}: no checksum at its end (truncated or damaged); record its run again: delete its "
                         "result file, then bin/collect")


def write_packed(path: Path, data: bytes) -> None:
    """Write a packed frame atomically. Not fsynced one by one: run_route makes a run's frames durable with one
    sync_filesystem before the result file that declares them complete (docs/reliability.md)."""
    atomic.write_bytes(path, data, durable=False)


def read_frame(path: Path, sensors: bool | list[str] = True, blobs: bool = False,
               rig: RigConfig | None = None) -> dict[str, Any]:
    """Read a frame, its checksum checked first; decode all sensors (True), none (False) or the named ones, each
    bounded by the shape `rig` gives it (else by codec.MAX_BLOB_BYTES) before anything is allocated. With
    `blobs`, the frame also holds every sensor as stored (`blobs`: name -> tools.dataset.codec blob), to copy
    without decoding. The frame's `verified` says whether it carried a checksum (format 1 frames do not), its
    `fingerprint` is that checksum (None without), and from format 3 on its `run` and `index` say where it was
    recorded (`misplaced` compares them with where it is)."""
    try:
        data = files.read_bytes(path)
    except files.UnreadableFile as e:
        raise FrameError(str(e)) from None
    verified = check_seal(data, path)
    try:
        frame = msgpack.unpackb(data, raw=False)
    except (ValueError, msgpack.UnpackException) as e:
        raise FrameError(f"{path}: not a readable frame ({e})") from e
    if not isinstance(frame, dict):
        raise FrameError(f"{path}: frame format ?, this tool reads format {FRAME_FORMAT}")
    _check_format(frame.get("format"), verified, path)
    frame.pop("crc32", None)
    stored = frame.pop("sensors")
    if not isinstance(stored, dict):
        raise FrameError(f"{path}: its sensors are not a map")
    wanted = stored.keys() if sensors is True else ([] if sensors is False else sensors)
    specs = rig.array_specs() if rig is not None else {}
    name = ""
    try:
        frame["sensors"] = {}
        for name in wanted:
            if name in stored:
                frame["sensors"][name] = decode_array(stored[name], specs.get(name), MAX_BLOB_BYTES)
    except (CodecError, KeyError, TypeError, ValueError, OSError) as e:
        raise FrameError(f"{path}: sensor {name} does not decode ({type(e).__name__}: {e})") from None
    frame["sensor_names"] = sorted(stored)
    frame["verified"] = verified
    frame["fingerprint"] = fingerprint(data) if verified else None
    if blobs:
        frame["blobs"] = stored
    return frame


def read_measurements(path: str | Path) -> Measurements:
    """A frame's measurements alone (FrameError when unreadable or incomplete), without making objects of its
    boxes and sensor blobs (the bucket builder reads every frame of a dataset so): one read of the file, then
    msgpack's Unpacker takes `measurements` and skips over the rest. The file must still be one complete frame
    map of FRAME_FORMAT (truncated, extra bytes, not msgpack: FrameError), as for read_frame, so a frame the
    builder takes is one the cache reads."""
    try:
        data = files.read_bytes(path)
    except files.UnreadableFile as e:
        raise FrameError(str(e)) from None
    verified = check_seal(data, path)
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
    _check_format(found.get("format", "?"), verified, path)
    if "sensors" not in found:
        raise FrameError(f"{path}: not a frame (no sensors)")
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
    #: every frame's `fingerprint`, in frame order (frame format 3 on; None before)
    fingerprints: list[int] | None = None


def write_run_measurements(path: Path, town: str, measurements: list[Measurements], *,
                           fingerprints: list[int]) -> None:
    """Write a run's measurements index atomically (not fsynced: made durable with the frames). `fingerprints`:
    each frame's (`fingerprint` of the bytes written), listed before the measurements so that a reader of the
    file's start (`read_run_fingerprints`) finds them."""
    data = seal({"format": FRAME_FORMAT, "town": town, "frames": len(measurements),
                 "fingerprints": [int(f) for f in fingerprints],
                 "measurements": [m.to_dict() for m in measurements]})
    atomic.write_bytes(path, data, durable=False)


def read_run_head(path: Path) -> tuple[str, int] | None:
    """(town, number of frames) of a run's measurements index, reading only the start of the file; None without
    a usable one."""
    head = _read_head(path)
    town, n = head.get("town"), head.get("frames")
    if head.get("format") not in READABLE_FRAME_FORMATS or not isinstance(town, str) or not isinstance(n, int):
        return None
    return town, n


def read_run_fingerprints(path: Path) -> list[int] | None:
    """Every frame's fingerprint as a run's measurements index lists them (frame format 3 on), reading only the
    start of the file; None without a usable list (an index of an earlier format, none, or a damaged one)."""
    head = _read_head(path)
    found, n = head.get("fingerprints"), head.get("frames")
    if head.get("format") not in READABLE_FRAME_FORMATS or not isinstance(found, list) or len(found) != n or \
            not all(isinstance(f, int) and not isinstance(f, bool) for f in found):
        return None
    return found


def _read_head(path: Path) -> dict[str, Any]:
    """The entries of a run's measurements index before its measurements ({} when unreadable)."""
    try:
        with files.open_regular(path) as f:
            unpacker = msgpack.Unpacker(f, raw=False)
            head: dict[str, Any] = {}
            for _ in range(unpacker.read_map_header()):
                key = unpacker.unpack()
                if key == "measurements":
                    break
                head[key] = unpacker.unpack()
    except (OSError, ValueError, msgpack.UnpackException):
        return {}
    return head


def read_run_measurements(path: Path) -> RunMeasurements | None:
    """A run's measurements index; None when there is none or it is not one this tool reads (the caller then
    reads the frames), FrameError when its checksum does not match (or a format-2 index has none)."""
    try:
        raw = files.read_bytes(path)
    except OSError:
        return None
    verified = check_seal(raw, path)
    try:
        data = msgpack.unpackb(raw, raw=False)
        if not isinstance(data, dict) or data.get("format") not in READABLE_FRAME_FORMATS or \
                len(data["measurements"]) != data["frames"]:
            return None
        listed = data.get("fingerprints")
        index = RunMeasurements(str(data["town"]), [Measurements.from_dict(m) for m in data["measurements"]],
                                listed if isinstance(listed, list) and len(listed) == data["frames"] else None)
    except (ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None
    _check_format(data["format"], verified, path)
    return index


def indexed_measurements(path: Path, frame_names: list[str]) -> list[Measurements] | None:
    """Every frame's measurements from a run's measurements index (`path`), when it lists exactly the run's frame
    files (`frame_names`, Layout.frame_names: 00000.msgpack ... in order); None otherwise (no index, another
    format, a frame added or missing since, a damaged index: validate names it): the caller then reads the
    frames themselves, each checked against its own checksum."""
    summary = indexed_run(path, frame_names)
    return None if summary is None else summary.measurements


def indexed_run(path: Path, frame_names: list[str]) -> RunMeasurements | None:
    """A run's measurements index (its checksum checked) when it lists exactly the run's frame files; None
    otherwise (see indexed_measurements)."""
    try:
        summary = read_run_measurements(path)
    except FrameError:
        return None
    if summary is None or frame_names != [FRAME_NAME.format(index=i) for i in range(len(summary.measurements))]:
        return None
    return summary


def read_boxes(frame: dict[str, Any]) -> list[BoxLabel]:
    """The box labels of a frame read with read_frame; FrameError when one is malformed."""
    try:
        return [BoxLabel.from_dict(b) for b in frame.get("boxes") or []]
    except (TypeError, ValueError) as e:
        raise FrameError(f"frame {frame.get('index')}: {e}") from None
