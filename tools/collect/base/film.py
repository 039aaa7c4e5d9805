"""The picture of an evaluated route run: an animated WebP of what the ego saw and what its driver planned,
written beside the run's result (ROOT/results/<Scenario>/<run>.webp, `Layout.film_path`) and named in the
evaluation's summary. People look at why a policy failed; they do not read it.

Each frame, side by side: the first camera of the rig (when the driver sees sensors: a trained policy), the
BEV with the driver's plan drawn on it (its path; a policy's waypoints as dots, their spacing its speed) and
three lines of text: simulated time and speed, the driver's target speed, why (or the infraction). The
expert renders no sensors in an evaluation, so its frames show a top view drawn from the world (the route,
the other vehicles, the ego) with its plan.
A frame is taken at most every `every_s` simulated seconds (a policy's: on its frame ticks, with fresh
sensors) and at every tick where an infraction is judged, which is shown in red and held longer. Long runs
keep at most `max_frames` frames: past that every other ordinary frame is dropped and the spacing doubles,
so a picture stays a few MB at most. Only evaluations film (`drive` films when ROOT is an evaluation root);
nothing of it goes into a dataset.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from tools.core import atomic
from tools.dataset import semantics as sem
from tools.dataset.geometry import BevGrid, world_to_ego
from tools.dataset.rig import BEV, RGB, BevConfig, RigConfig
from tools.expert.expert import Decision
from tools.expert.state import Box

HEIGHT = 160  # pixels of every panel
TEXT_H = 40  # pixels of the three text lines under the panels
FRAME_MS = 250  # how long an ordinary frame shows
INFRACTION_MS = 1500  # how long a frame with an infraction shows
PLAN_RGB = (40, 220, 255)
ROUTE_RGB = (90, 90, 110)
ACTOR_RGB = (230, 230, 230)
INFRACTION_RGB = (230, 40, 40)
BG_RGB = (14, 14, 18)
TEXT_RGB = (235, 235, 235)


@dataclass
class _Frame:
    image: Image.Image
    infraction: bool


class RunFilm:
    """Collects a route run's frames (`add`) and writes them as one animated WebP (`write`)."""

    def __init__(self, path: Path, rig: RigConfig | None, every_s: float = 0.5, max_frames: int = 240):
        self.path, self.every_s, self.max_frames = Path(path), float(every_s), int(max_frames)
        self.camera = RGB.format(camera=rig.cameras[0].name) if rig is not None and rig.cameras else None
        self.grid = BevGrid.of_rig(rig.bev if rig is not None else BevConfig())
        # The top view drawn from the world is drawn at the panel's size (no resize): the same view, coarser.
        self.drawn = BevGrid(HEIGHT, self.grid.width / HEIGHT, self.grid.ahead)
        self.frames: list[_Frame] = []
        self._next = 0.0
        self._sensors: dict | None = None  # the last ones rendered: an infraction between frame ticks shows them

    def due(self, time: float) -> bool:
        """Whether an ordinary frame is due at simulated `time` (frames on the grid of every_s seconds)."""
        return time + 1e-6 >= self._next

    def add(self, time: float, ego: Box, decision: Decision, sensors: dict | None = None,
            actors: list[Box] | None = None, route_xy: np.ndarray | None = None,
            infractions: list[str] | None = None) -> None:
        """One frame at simulated `time`: the ego, its driver's decision, the sensors rendered for this tick
        ({name: (array, codec)}) or, without them, the other vehicles and the route (world frame);
        `infractions` judged at this tick (their kinds)."""
        sensors = self._sensors = sensors or self._sensors
        panels = []
        if sensors and self.camera in sensors:
            rgb = Image.fromarray(np.asarray(sensors[self.camera][0])[..., :3])
            panels.append(rgb.resize((max(1, round(rgb.width * HEIGHT / rgb.height)), HEIGHT),
                                     Image.Resampling.BILINEAR))
        bev = sensors.get(BEV) if sensors else None
        panels.append(self._top(ego, decision, None if bev is None else np.asarray(bev[0]), actors or [], route_xy))
        width = sum(p.width for p in panels)
        frame = Image.new("RGB", (width, HEIGHT + TEXT_H), BG_RGB)
        x = 0
        for p in panels:
            frame.paste(p, (x, 0))
            x += p.width
        draw = ImageDraw.Draw(frame)
        text = [f"t {time:.1f} s  v {ego.speed:.1f} m/s", f"target {decision.target_speed:.1f} m/s",
                f"{decision.reason}: {decision.detail}" if decision.detail else decision.reason]
        if infractions:
            text[2] = "INFRACTION " + ", ".join(infractions)
            draw.rectangle([0, 0, width - 1, HEIGHT + TEXT_H - 1], outline=INFRACTION_RGB, width=3)
        for i, line in enumerate(text):
            draw.text((4, HEIGHT + 2 + 12 * i), line, fill=INFRACTION_RGB if infractions and i == 2 else TEXT_RGB)
        self.frames.append(_Frame(frame, bool(infractions)))
        if not infractions:
            self._next = (math.floor((time + 1e-6) / self.every_s) + 1) * self.every_s
        if len(self.frames) > self.max_frames:  # thin: every other ordinary frame goes, the spacing doubles
            ordinary = [i for i, f in enumerate(self.frames) if not f.infraction]
            drop = set(ordinary[1::2])
            self.frames = [f for i, f in enumerate(self.frames) if i not in drop]
            self.every_s *= 2

    def _top(self, ego: Box, decision: Decision, bev: np.ndarray | None, actors: list[Box],
             route_xy: np.ndarray | None) -> Image.Image:
        """The BEV (or a top view drawn from the world) with the plan, HEIGHT pixels square."""
        g = self.grid if bev is not None else self.drawn
        if bev is not None:
            img = Image.fromarray(sem.BEV_PALETTE[bev.astype(np.uint8)])
        else:
            img = Image.new("RGB", (g.pixels, g.pixels), BG_RGB)
        draw = ImageDraw.Draw(img)

        def pixels(world_xy: np.ndarray) -> list[tuple[float, float]]:
            return [tuple(p) for p in g.ego_to_pixel(world_to_ego(ego, np.asarray(world_xy)[:, :2]))]

        if bev is None:
            if route_xy is not None and len(route_xy) > 1:
                near = np.hypot(route_xy[:, 0] - ego.x, route_xy[:, 1] - ego.y) < g.width
                if near.sum() > 1:
                    draw.line(pixels(route_xy[near]), fill=ROUTE_RGB, width=max(1, round(3.0 / g.resolution)))
            # Every box's four corners at once (a long run draws some 25 boxes a frame), those out of view left out.
            boxes = [b for b in actors if abs(b.x - ego.x) < g.width and abs(b.y - ego.y) < g.width] + [ego]
            arr = np.array([[b.x, b.y, b.yaw, b.length, b.width] for b in boxes])
            rad = np.radians(arr[:, 2:3])
            dx, dy = np.array([1, 1, -1, -1]) * arr[:, 3:4] / 2, np.array([1, -1, -1, 1]) * arr[:, 4:5] / 2
            corners = np.stack([arr[:, :1] + np.cos(rad) * dx - np.sin(rad) * dy,
                                arr[:, 1:2] + np.sin(rad) * dx + np.cos(rad) * dy], axis=-1)
            ego_fill = tuple(int(v) for v in sem.BEV_PALETTE[sem.BEV_EGO])
            for box, px in zip(boxes, g.ego_to_pixel(world_to_ego(ego, corners)).tolist(), strict=True):
                draw.polygon([tuple(p) for p in px], fill=ego_fill if box is ego else ACTOR_RGB)
        path = np.asarray(decision.path, dtype=np.float64).reshape(-1, 2)
        if len(path):
            pts = pixels(path)
            if len(pts) > 1:
                draw.line(pts, fill=PLAN_RGB, width=2)
            for c, r in pts if len(pts) <= 40 else ():  # a policy's waypoints: their spacing shows its speed
                draw.ellipse([c - 2, r - 2, c + 2, r + 2], fill=PLAN_RGB)
        return img.resize((HEIGHT, HEIGHT), Image.Resampling.NEAREST) if img.height != HEIGHT else img

    def write(self) -> Path | None:
        """The animated WebP at `path` (atomically); None when no frame was taken."""
        if not self.frames:
            return None
        images = [f.image for f in self.frames]
        width = max(i.width for i in images)  # a camera may appear after the first frame: one size for all
        images = [i if i.width == width else _pad(i, width) for i in images]
        out = io.BytesIO()
        images[0].save(out, format="WEBP", save_all=True, append_images=images[1:], loop=0, quality=60, method=1,
                       duration=[INFRACTION_MS if f.infraction else FRAME_MS for f in self.frames])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(self.path, out.getvalue(), durable=False)
        return self.path


def _pad(image: Image.Image, width: int) -> Image.Image:
    out = Image.new("RGB", (width, image.height), BG_RGB)
    out.paste(image, (0, 0))
    return out
