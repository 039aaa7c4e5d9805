"""One picture of a recorded frame: every camera with its 3D boxes, semantics and depth; LiDAR from above; BEV.

    python -m tools.collect show RUN_DIR [--frame N] [--out frame.png]

RUN_DIR is a route-run folder (data/<Scenario>/<run>/), its frames/ folder, or one frame file (*.msgpack).
The rig (camera placement) is read from the run's run.json; without one the default rig is assumed. The
frame is read through the frame contract (tools.dataset: measurements, box labels, the rig's sensor names).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from tools.core import atomic, files
from tools.core.errors import ToolError
from tools.dataset import layout
from tools.dataset import semantics as sem
from tools.dataset.frames import FrameError, read_boxes, read_frame
from tools.dataset.geometry import project, world_to_ego
from tools.dataset.measurements import Measurements
from tools.dataset.rig import BEV, LIDAR, LIDAR_LABELS, CameraConfig, RigConfig, camera_sensors, run_rig
from tools.expert.state import Box

_BG = (24, 24, 28)
_TEXT = (235, 235, 235)
_DIM = (150, 150, 155)
_CAPTION_H = 20
_HEADER_H = 30
_PANEL = 512  # side of the LiDAR and BEV panels
_BOX_RGB = {sem.CAR: (0, 255, 140), sem.TRUCK: (255, 170, 0), sem.BUS: (255, 80, 220)}
_FRONT_RGB = (255, 60, 60)  # the front face of a box, so its heading reads at a glance
# Depth colours from near to far (log scale), a perceptual ramp from yellow to dark purple.
_DEPTH_ANCHORS = np.array([[252, 253, 191], [252, 137, 97], [183, 55, 121], [81, 18, 124], [10, 8, 40]], float)
_DEPTH_RANGE = (1.0, 200.0)


def show_frame(path: str | Path, frame: int = 0, out: str | Path | None = None) -> Path:
    """Write one PNG of a recorded frame and return its path.

    Args:
        path: a route-run folder, its frames/ folder, or a frame file (*.msgpack).
        frame: the frame index (the number in its file name); negative counts from the last frame;
            "scenario": the frame where an actor of the route's scenario is nearest ahead of the ego.
            Ignored when `path` is a frame file.
        out: the PNG to write; default frame-<index:05d>.png in the current folder.
    """
    if frame == "scenario":
        frame = _scenario_frame(Path(path))
    try:
        frame = int(frame)
    except (TypeError, ValueError):
        raise ToolError(f"--frame {frame!r}: expected a frame index (an integer) or 'scenario'") from None
    frame_path, run_dir = _locate(Path(path), frame)
    try:
        data = read_frame(frame_path)
    except (FrameError, OSError) as e:
        raise ToolError(f"{frame_path}: cannot read the frame ({e})") from e
    rig, rig_note = _rig(run_dir)
    try:
        picture = compose(data, rig, title=f"{run_dir.name}  ·  {rig_note}" if rig_note else run_dir.name)
    except (FrameError, ValueError) as e:
        raise ToolError(f"{frame_path}: not a frame of the frame contract ({e})") from e
    out = Path(out) if out is not None else Path.cwd() / f"frame-{int(data.get('index', 0)):05d}.png"
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    atomic.write_bytes(out, buf.getvalue())
    return out


# ------------------------------------------------------------------------------------------- inputs


def _locate(path: Path, frame: int) -> tuple[Path, Path]:
    """(frame file, run folder) for a run folder, a frames/ folder or a frame file."""
    if not path.exists():
        raise ToolError(f"{path} does not exist: give a route-run folder, its frames/ folder or a frame file")
    if path.is_file():
        if path.suffix != ".msgpack":
            raise ToolError(f"{path} is not a frame file (*.msgpack)")
        return path, path.parent.parent if path.parent.name == layout.FRAMES else path.parent
    frames_dir = path if path.name == layout.FRAMES or not (path / layout.FRAMES).is_dir() else path / layout.FRAMES
    run_dir = frames_dir.parent if frames_dir.name == layout.FRAMES else frames_dir
    files = {}
    for p in frames_dir.glob("*.msgpack"):
        if not atomic.is_temporary(p) and p.stem.isdigit():
            files[int(p.stem)] = p
    if not files:
        raise ToolError(f"run {run_dir} has no frames (no *.msgpack in {frames_dir})")
    indices = sorted(files)
    span = f"frames {indices[0]}..{indices[-1]}"
    if len(indices) != indices[-1] - indices[0] + 1:
        span = f"{len(indices)} frames in {indices[0]}..{indices[-1]}"
    if frame < 0:
        if -frame > len(indices):
            raise ToolError(f"run {run_dir} has {span}; frame {frame} counts back past the first")
        frame = indices[frame]
    if frame not in files:
        raise ToolError(f"run {run_dir} has {span}, no frame {frame}")
    return files[frame], run_dir


#: `--frame scenario` shows the frame with a scenario actor this far ahead, metres.
SCENARIO_VIEW_M = 12.0


def _scenario_frame(path: Path) -> int:
    """The index of the frame where an actor of the running scenario (measurements `scenario`) is ahead of the
    ego nearest to SCENARIO_VIEW_M (3 to 40 m ahead, within 8 m to a side: in the camera's view, large); else
    the first frame a scenario runs in."""
    if path.is_file():
        return 0  # a frame file is shown whatever the index
    _, run_dir = _locate(path, -1)
    best: tuple[float, int] | None = None
    first = None
    for p in sorted((run_dir / layout.FRAMES).glob("*.msgpack"), key=lambda q: int(q.stem) if q.stem.isdigit() else -1):
        if atomic.is_temporary(p) or not p.stem.isdigit():
            continue
        try:
            data = read_frame(p, sensors=False)
            m = Measurements.from_dict(data["measurements"])
            boxes = read_boxes(data)
        except (FrameError, KeyError, ValueError):
            continue
        if not m.scenario:
            continue
        first = int(p.stem) if first is None else first
        actors = set(m.scenario.get("actors", ()))
        for b in boxes:
            x, y = b.center_ego[:2] if b.center_ego else (0.0, 99.0)
            score = abs(x - SCENARIO_VIEW_M)
            if b.id in actors and 3.0 < x < 40.0 and abs(y) < 8.0 and (best is None or score < best[0]):
                best = (score, int(p.stem))
    if best is None and first is None:
        raise ToolError(f"run {run_dir}: no frame was recorded while a scenario ran (measurements `scenario`)")
    return best[1] if best is not None else first


def _rig(run_dir: Path) -> tuple[RigConfig, str]:
    """The run's rig (rig.run_rig) and a note when it is assumed."""
    path = run_dir / layout.RUN_SETTINGS
    if not path.is_file():
        return RigConfig(), "no run.json: default rig assumed"
    try:
        settings = files.read_json(path)
        if not isinstance(settings, dict):
            raise ValueError(f"expected a JSON object, got {type(settings).__name__}")
        return run_rig(settings), "" if settings.get("rig") is not None else "run.json has no rig: default rig"
    except ValueError as e:
        raise ToolError(f"{path}: bad rig ({e})") from e


def _ego_box(m: Measurements) -> Box:
    e = m.ego
    length, width, height = (float(v) for v in e["extent"][:3])
    return Box(0, sem.CAR, float(e["x"]), float(e["y"]), float(e["z"]), float(e["yaw"]), length, width, height,
               float(e["speed"]))


def _boxes(frame: dict[str, Any]) -> list[Box]:
    """The frame's box labels (never the ego) as boxes to draw."""
    out = []
    for b in read_boxes(frame):
        if b.id != 0:
            (x, y, z), (length, width, height) = b.center[:3], b.extent[:3]
            out.append(Box(int(b.id), int(b.cls), x, y, z, float(b.yaw), length, width, height, float(b.speed)))
    return out


# ------------------------------------------------------------------------------------------- panels


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # a Pillow without FreeType
        return ImageFont.load_default()


def _camera_rgb(rgb: np.ndarray, cam: CameraConfig, ego: Box, boxes: list[Box]) -> Image.Image:
    img = Image.fromarray(rgb).convert("RGB")
    draw = ImageDraw.Draw(img)
    near = 0.1
    font = _font(11)
    for b in sorted(boxes, key=lambda b: -math.hypot(b.x - ego.x, b.y - ego.y)):  # far first, near on top
        if b.cls not in _BOX_RGB:
            continue
        corners = b.corners()
        _, depth = project(cam, ego, corners)
        if (depth <= near).all() or depth.min() > 150.0:
            continue
        colour = _BOX_RGB[b.cls]
        for i, j in ((0, 1), (4, 5), (0, 4), (1, 5), (1, 2), (2, 3), (3, 0), (5, 6), (6, 7), (7, 4), (2, 6), (3, 7)):
            p, q, dp, dq = corners[i], corners[j], depth[i], depth[j]
            if dp <= near and dq <= near:
                continue
            if dp <= near:  # clip at the near plane (depth is affine in world coordinates)
                p = p + (q - p) * (near - dp) / (dq - dp)
            elif dq <= near:
                q = q + (p - q) * (near - dq) / (dp - dq)
            uv, _ = project(cam, ego, np.stack([p, q]))
            uv = np.clip(uv, -1e4, 1e4)
            front = {i, j} <= {0, 1, 4, 5}
            draw.line([tuple(uv[0]), tuple(uv[1])], fill=_FRONT_RGB if front else colour, width=1)
        uv, d = project(cam, ego, np.array([[b.x, b.y, b.z + b.height / 2]]))
        if d[0] > near and 0 <= uv[0, 0] < cam.width and 0 <= uv[0, 1] < cam.height and d[0] < 60:
            draw.text((float(uv[0, 0]) - 6, float(uv[0, 1]) - 14), str(b.id), fill=colour, font=font)
    return img


def _depth_colours(depth_cm: np.ndarray) -> Image.Image:
    d = depth_cm.astype(np.float32) / 100.0
    lo, hi = _DEPTH_RANGE
    x = np.clip(np.log(np.maximum(d, lo) / lo) / math.log(hi / lo), 0.0, 1.0) * (len(_DEPTH_ANCHORS) - 1)
    i = np.minimum(x.astype(np.int64), len(_DEPTH_ANCHORS) - 2)
    f = (x - i)[..., None]
    rgb = _DEPTH_ANCHORS[i] * (1 - f) + _DEPTH_ANCHORS[i + 1] * f
    rgb[depth_cm == 0] = 0  # the sky
    return Image.fromarray(rgb.astype(np.uint8))


_LIDAR_VIEW_M = 40.0  # half the side of the LiDAR picture: near structure matters more than the far rings
# Point colours by class: the semantic palette, brightened where it is too dark to see on black.
_LIDAR_RGB = sem.PALETTE.copy()
_LIDAR_RGB[sem.BUILDING] = (175, 175, 175)
_LIDAR_RGB[sem.CAR] = (70, 130, 255)
_LIDAR_RGB[sem.TRUCK] = (110, 110, 255)
_LIDAR_RGB[sem.BUS] = (90, 170, 255)
_LIDAR_RGB[sem.UNLABELED] = (200, 200, 200)


def _lidar_top(points: np.ndarray, labels: np.ndarray | None, view_m: float, ego: Box, boxes: list[Box],
               size: int) -> Image.Image:
    """LiDAR from above, ego at the centre, up = forward: points by class (ground dimmed), box footprints."""
    scale = size / (2.0 * view_m)
    c = size / 2.0
    canvas = np.zeros((size, size, 3), dtype=np.uint8)
    canvas[:] = (12, 12, 16)
    if len(points):
        cls = labels[:, 0].astype(np.int64) if labels is not None else np.full(len(points), sem.UNLABELED)
        colour = _LIDAR_RGB[np.clip(cls, 0, 255)].astype(np.float32)
        ground = np.isin(cls, (sem.ROAD, sem.ROADLINE, sem.SIDEWALK, sem.TERRAIN))
        colour[ground] *= 0.6
        col = np.floor(c + points[:, 1] * scale).astype(np.int64)
        row = np.floor(c - points[:, 0] * scale).astype(np.int64)
        # Objects drawn after the ground, two pixels wide, so they stand out.
        for mask, grow in ((ground, 0), (~ground, 1)):
            for dr in range(grow + 1):
                for dc in range(grow + 1):
                    rr, cc = row[mask] + dr, col[mask] + dc
                    ok = (rr >= 0) & (rr < size) & (cc >= 0) & (cc < size)
                    canvas[rr[ok], cc[ok]] = colour[mask][ok].astype(np.uint8)
    img = Image.fromarray(canvas)
    draw = ImageDraw.Draw(img)
    for r in range(10, int(view_m * 1.5) + 1, 10):
        draw.ellipse([c - r * scale, c - r * scale, c + r * scale, c + r * scale], outline=(55, 55, 64))
        if r * scale < c - 10:
            draw.text((c + 3, c - r * scale + 1), f"{r} m", fill=(110, 110, 120), font=_font(10))
    for b in boxes:
        p = world_to_ego(ego, b.corners()[:4])
        if np.abs(p[:, :2]).min() > view_m * 1.5:
            continue
        pix = [(c + y * scale, c - x * scale) for x, y, _ in p]
        draw.line([pix[0], pix[1]], fill=_FRONT_RGB, width=2)
        draw.polygon(pix, outline=_BOX_RGB.get(b.cls, (230, 230, 230)))
    half_l, half_w = ego.length / 2 * scale, ego.width / 2 * scale
    draw.rectangle([c - half_w, c - half_l, c + half_w, c + half_l],
                   fill=tuple(int(v) for v in sem.BEV_PALETTE[sem.BEV_EGO]))
    return img


def _bev(bev: np.ndarray, size: int) -> Image.Image:
    return Image.fromarray(sem.BEV_PALETTE[bev]).resize((size, size), Image.Resampling.NEAREST)


def _legend(m: Measurements, semantics: list[np.ndarray], width: int, height: int) -> Image.Image:
    img = Image.new("RGB", (width, height), _BG)
    draw = ImageDraw.Draw(img)
    font, small = _font(13), _font(12)
    x, y = 12, 10
    draw.text((x, y), "semantic classes in view", fill=_TEXT, font=font)
    y += 20
    present = sorted(set(np.unique(np.concatenate([s.ravel() for s in semantics])).tolist())) if semantics else []
    for i, c in enumerate(present):
        cx, cy = x + (i % 3) * 160, y + (i // 3) * 18
        draw.rectangle([cx, cy + 2, cx + 12, cy + 14], fill=tuple(int(v) for v in sem.PALETTE[c]))
        draw.text((cx + 18, cy), sem.NAMES.get(c, str(c)), fill=_DIM, font=small)
    y += 18 * ((len(present) + 2) // 3) + 12
    draw.text((x, y), "BEV classes", fill=_TEXT, font=font)
    y += 20
    for i, c in enumerate(sorted(sem.BEV_NAMES)[1:]):
        cx, cy = x + (i % 3) * 160, y + (i // 3) * 18
        draw.rectangle([cx, cy + 2, cx + 12, cy + 14], fill=tuple(int(v) for v in sem.BEV_PALETTE[c]))
        draw.text((cx + 18, cy), sem.BEV_NAMES[c], fill=_DIM, font=small)
    y += 18 * 3 + 12
    draw.text((x, y), "boxes", fill=_TEXT, font=font)
    y += 20
    for i, (c, rgb) in enumerate([*_BOX_RGB.items(), (-1, _FRONT_RGB)]):
        cx = x + i * 120
        draw.line([(cx, y + 8), (cx + 14, y + 8)], fill=rgb, width=3)
        draw.text((cx + 20, y), "front face" if c < 0 else sem.NAMES[c], fill=_DIM, font=small)
    y += 30
    draw.text((x, y), "measurements", fill=_TEXT, font=font)
    y += 20
    for line in _measurement_lines(m.to_dict()):
        if y > height - 16:
            draw.text((x, y), "…", fill=_DIM, font=small)
            break
        draw.text((x, y), line, fill=_DIM, font=small)
        y += 16
    return img


def _measurement_lines(m: dict[str, Any], prefix: str = "") -> list[str]:
    lines = []
    for key, value in m.items():
        if isinstance(value, dict):
            scalars = {k: v for k, v in value.items() if not isinstance(v, dict | list)}
            text = ", ".join(f"{k} {_fmt(v)}" for k, v in scalars.items())
            lines.append(f"{prefix}{key}: {text}")
            for k, v in value.items():
                if isinstance(v, dict | list):
                    lines.append(f"{prefix}  {key}.{k}: {_fmt(v)}")
        else:
            lines.append(f"{prefix}{key}: {_fmt(value)}")
    return lines


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:6]) + (", …" if len(v) > 6 else "") + "]"
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "…"


# ------------------------------------------------------------------------------------------- layout


def compose(frame: dict[str, Any], rig: RigConfig, title: str = "") -> Image.Image:
    """The picture of a decoded frame (read_frame's dict) recorded with `rig`; ValueError (FrameError) when
    its measurements or boxes are not the frame contract's."""
    sensors = frame.get("sensors") or {}
    m = Measurements.from_dict(frame.get("measurements"))
    try:
        ego = _ego_box(m)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"measurements: bad ego {m.ego!r} ({type(e).__name__}: {e})") from None
    boxes = _boxes(frame)
    cams = [c for c in rig.cameras if any(name in sensors for name in camera_sensors(c.name))]
    cam_w = max([c.width for c in cams], default=0)
    width = max(3 * cam_w, 3 * _PANEL)
    height = _HEADER_H + sum(_CAPTION_H + c.height for c in cams) + _CAPTION_H + _PANEL
    canvas = Image.new("RGB", (width, height), _BG)
    draw = ImageDraw.Draw(canvas)
    font, small = _font(16), _font(13)

    header = [f"frame {int(frame.get('index', 0)):05d}", f"t {float(m.time):.2f} s",
              f"speed {ego.speed:.1f} m/s ({ego.speed * 3.6:.0f} km/h)", f"command {m.command_name or m.command}"]
    if title:
        header.append(title)
    draw.text((10, 6), "   ·   ".join(header), fill=_TEXT, font=font)

    def caption(x: int, y: int, text: str) -> None:
        draw.text((x + 4, y + 3), text, fill=_DIM, font=small)

    y = _HEADER_H
    semantics = []
    for cam in cams:
        rgb, labels, depth = (sensors.get(name) for name in camera_sensors(cam.name))
        panels = []
        if rgb is not None:
            panels.append((f"{cam.name} camera, {cam.fov:.0f}° fov, 3D boxes (red = front, number = actor id)",
                           _camera_rgb(rgb, cam, ego, boxes)))
        if labels is not None:
            semantics.append(labels)
            panels.append((f"{cam.name} semantics", Image.fromarray(sem.PALETTE[labels])))
        if depth is not None:
            panels.append((f"{cam.name} depth: 1 m yellow … 200 m dark (log), black = sky", _depth_colours(depth)))
        for i, (text, img) in enumerate(panels):
            caption(i * cam_w, y, text)
            canvas.paste(img, (i * cam_w, y + _CAPTION_H))
        y += _CAPTION_H + cam.height

    lidar = sensors.get(LIDAR)
    if lidar is not None:
        view = min(rig.lidar.range, _LIDAR_VIEW_M)
        caption(0, y, f"LiDAR from above (±{view:.0f} m of {rig.lidar.range:.0f}), up = forward, by class")
        canvas.paste(_lidar_top(lidar, sensors.get(LIDAR_LABELS), view, ego, boxes, _PANEL),
                     (0, y + _CAPTION_H))
    bev = sensors.get(BEV)
    if bev is not None:
        reach = rig.bev.pixels * rig.bev.resolution
        caption(_PANEL, y, f"BEV {reach:.0f} m square, up = forward, ego yellow")
        canvas.paste(_bev(bev, _PANEL), (_PANEL, y + _CAPTION_H))
    canvas.paste(_legend(m, semantics, width - 2 * _PANEL, _PANEL + _CAPTION_H), (2 * _PANEL, y))
    return canvas
