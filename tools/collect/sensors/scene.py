"""The embedded world's static scene: a town's ground raster and roadside structures, built once per town.

The renderer (tools.collect.sensors.render) draws every sensor from a `Scene` and the world state of a frame.
Everything here comes from the town's real geometry and a seed:

- the ground, the plane z=0, drawn into a top-down raster of codes `slot * SHADES + shade`: the slot
  is what the ground is (terrain, sidewalk, road, lane marking: SLOT_*), the shade (0 .. SHADES-1) a
  deterministic texture; lanes and junction shapes come from the SUMO network;
- structures as oriented boxes (`Scene.static_boxes`, ids from STATIC_ID0): buildings set back behind
  the sidewalks, street lamps on them, and at every signalled stop line a pole, a mast arm and one
  traffic-light head per lane;
- the signals (`Scene.signals`): which head shows which traffic-light links. A link is named as the
  world's lights are (tools.expert.state.Light.id): "<tls id>:<link index>", read from the SUMO
  network's `connection` elements (`tl`, `linkIndex`), the same indices SUMO's
  trafficlight.getControlledLinks lists.

Frames: world positions in CARLA's frame (tools.dataset.geometry).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np
from PIL import Image, ImageDraw

from tools.collect.base.town import LARGE_TOWN_EXTENT, Town, TownError
from tools.dataset import semantics as sem
from tools.dataset.codec import decode_array, encode_array
from tools.expert.state import Box

#: Static structures' ids start here, far from actor ids (0 is the ego, actors count up from 1).
STATIC_ID0 = 1_000_000
#: What the ground is at a raster cell: code // SHADES (a code is slot * SHADES + texture shade).
SLOT_TERRAIN, SLOT_SIDEWALK, SLOT_ROAD, SLOT_LINE = 0, 1, 2, 3
SHADES = 32
#: Width of painted lane markings, metres.
MARKING_WIDTH = 0.15

_SIDEWALK_WIDTH = 2.0
_DASH, _GAP = 3.0, 5.0
_RASTER_MARGIN = 40.0  # metres of terrain around the town's lanes
_RASTER_MAX_PIXELS = 8192  # per side: beyond ~800 m the raster is coarser than 0.1 m per pixel
#: Metres around a route that a regional scene covers: the sensors' reach (cameras draw boxes to 150 m).
REGION_MARGIN = 160.0
#: Bytes a raster cell costs while it is drawn (the PIL image, slots, codes, texture and its resized blotches).
_DRAW_BYTES_PER_CELL = 6
_REGION_GRID = 50.0  # regions are rounded out to this grid (metres), so nearby routes share derived files
#: Scenes and rasters kept on disk (Town.derived_file) are made again whenever this file changes.
_SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Signal:
    """A traffic-light head over one incoming lane, and the ids of the lights that drive it ("<tls id>:<link index>",
    one per connection leaving the lane)."""

    lane: str
    x: float  # stop line centre, world
    y: float
    yaw: float
    width: float
    head: int  # index of the head's box in Scene.static_boxes
    links: tuple[str, ...]


@dataclass
class GroundRaster:
    """A top-down raster of ground codes, pixel (r, c) covering x in [x0 + c*res, ...), y in [y0 + r*res, ...)."""

    codes: np.ndarray  # uint8 (H, W)
    x0: float
    y0: float
    res: float


class Scene:
    """The static world of one town: a ground raster and roadside structures, built once.

    Structures (deterministic from `seed`): buildings set back behind the sidewalks (never on the road,
    checked on the raster), street lamps along the sidewalks, and at every signalled stop line of the
    SUMO network a pole with a mast arm and one traffic-light head per lane.
    """

    def __init__(self, town: Town, seed: int = 0, resolution: float = 0.1,
                 region: tuple[float, float, float, float] | None = None):
        """`region` (xmin, ymin, xmax, ymax, CARLA's frame; e.g. Scene.route_region): on a large town
        (LARGE_TOWN_EXTENT) build the ground and structures of that rectangle only, so that memory follows the
        route, not the town. Ignored on smaller towns, which are always built whole."""
        self.town = town
        self.seed = int(seed)
        self._rasters: dict[tuple[float, float, bool], GroundRaster] = {}
        xmin, ymin, xmax, ymax = town.bounds
        self.large = max(xmax - xmin, ymax - ymin) > LARGE_TOWN_EXTENT
        self.region = _clip_region(region, town.bounds) if region is not None and self.large else None
        #: The rectangle the rasters cover (less their margin): the region, else the town's lanes.
        self.bounds = self.region or town.bounds
        tag = "" if self.region is None else "-x{:g}_{:g}_{:g}_{:g}".format(*self.region)
        self._tag = tag
        # Built once per town, seed, resolution (and region) and kept beside the town (Town.derived_file):
        # building takes half a second, reading it back 30 ms, the same arrays bit for bit.
        self._version = f"{_SOURCE_DIGEST} {town.net.name}"  # this code and the SUMO network it reads
        path = town.derived_file(f"scene-s{self.seed}-r{resolution:g}{tag}.msgpack", self._version,
                                 lambda tmp: self._build(resolution, tmp))
        self._read_structures(path)
        self.ground = self.raster(self.resolution, MARKING_WIDTH, texture=True)
        self._static_arrays()

    @staticmethod
    def route_region(points: np.ndarray, margin: float = REGION_MARGIN) -> tuple[float, float, float, float]:
        """The rectangle (xmin, ymin, xmax, ymax) around route points (N, 2), CARLA's frame, grown by `margin`."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 2)[:, :2]
        return (float(p[:, 0].min() - margin), float(p[:, 1].min() - margin),
                float(p[:, 0].max() + margin), float(p[:, 1].max() + margin))

    @functools.cached_property
    def lanes(self) -> list:
        lanes = sorted(self.town.lanes, key=lambda lane: lane.id)
        if self.region is not None:
            lanes = [lane for lane in lanes if _touches(lane.centerline, self.region, _RASTER_MARGIN)]
        return lanes

    @functools.cached_property
    def _net(self) -> tuple[list[np.ndarray], list[tuple[str, int, str]]]:
        junctions, tls = _parse_net(self.town)
        if self.region is not None:
            junctions = [j for j in junctions if _touches(j, self.region, _RASTER_MARGIN)]
        return junctions, tls

    def _build(self, resolution: float, out: Path) -> None:
        """Place the structures and write them (with the raster resolution) to `out`."""
        xmin, ymin, xmax, ymax = self.bounds
        extent = max(xmax - xmin, ymax - ymin) + 2 * _RASTER_MARGIN
        self.resolution = float(max(float(resolution), extent / _RASTER_MAX_PIXELS))
        self.ground = self.raster(self.resolution, MARKING_WIDTH, texture=True)
        self.static_boxes: list[Box] = []
        self.signals: list[Signal] = []
        self._place_signals()
        self._place_buildings_and_lamps(np.random.default_rng(self.seed))
        boxes = np.array([[b.cls, b.x, b.y, b.z, b.yaw, b.length, b.width, b.height] for b in self.static_boxes],
                         dtype=np.float64).reshape(-1, 8)
        out.write_bytes(msgpack.packb({
            "resolution": self.resolution, "boxes": encode_array(boxes, "raw"),
            "signals": [[g.lane, g.x, g.y, g.yaw, g.width, g.head, list(g.links)] for g in self.signals],
        }))

    def _read_structures(self, path: Path) -> None:
        data = msgpack.unpackb(path.read_bytes())
        self.resolution = float(data["resolution"])
        self.static_boxes = [Box(STATIC_ID0 + i, int(row[0]), *map(float, row[1:]))
                             for i, row in enumerate(decode_array(data["boxes"]))]
        self.signals = [Signal(lane, x, y, yaw, width, head, tuple(links))
                        for lane, x, y, yaw, width, head, links in data["signals"]]

    # ------------------------------------------------------------------ ground
    def raster(self, resolution: float, marking_width: float, texture: bool = False) -> GroundRaster:
        """The ground drawn at `resolution` m/px (cached in memory and beside the town). Codes are
        slot * SHADES + texture shade (0 untextured)."""
        key = (round(resolution, 6), round(marking_width, 6), texture)
        if key not in self._rasters:
            kind = f"ground-s{self.seed}-r{key[0]:g}-m{key[1]:g}{'-t' if texture else ''}{self._tag}.msgpack"
            path = self.town.derived_file(kind, self._version, lambda tmp: tmp.write_bytes(
                msgpack.packb(self._draw(*key))))
            data = msgpack.unpackb(path.read_bytes())
            self._rasters[key] = GroundRaster(codes=decode_array(data["codes"]), x0=data["x0"], y0=data["y0"],
                                              res=data["res"])
        return self._rasters[key]

    def _draw(self, resolution: float, marking_width: float, texture: bool) -> dict:
        """The ground raster drawn from the lanes and junctions, as a msgpack-ready map."""
        xmin, ymin, xmax, ymax = self.bounds
        if self.large:  # never a raster of more than _RASTER_MAX_PIXELS a side on a large town
            extent = max(xmax - xmin, ymax - ymin) + 2 * _RASTER_MARGIN
            resolution = max(resolution, extent / _RASTER_MAX_PIXELS)
        x0, y0 = xmin - _RASTER_MARGIN, ymin - _RASTER_MARGIN
        w = int(math.ceil((xmax - xmin + 2 * _RASTER_MARGIN) / resolution))
        h = int(math.ceil((ymax - ymin + 2 * _RASTER_MARGIN) / resolution))
        budget = memory_budget_gb()
        need = w * h * _DRAW_BYTES_PER_CELL / 1024 ** 3
        if need > budget:
            raise TownError(f"town {self.town.xodr} too large for the memory budget of {budget:g} GB "
                            f"(DRIVEKIT_MEMORY_BUDGET_GB): its {w}x{h} ground raster at {resolution:g} m would take "
                            f"{need:.1f} GB; build the scene round a route (Scene's region)")
        try:
            return self._draw_raster(x0, y0, w, h, resolution, marking_width, texture)
        except MemoryError:
            raise TownError(f"town {self.town.xodr}: out of memory drawing its {w}x{h} ground raster "
                            f"(memory budget {budget:g} GB, DRIVEKIT_MEMORY_BUDGET_GB)") from None

    def _draw_raster(self, x0: float, y0: float, w: int, h: int, resolution: float, marking_width: float,
                     texture: bool) -> dict:
        img = Image.new("L", (w, h), SLOT_TERRAIN)
        draw = ImageDraw.Draw(img)

        def px(p: np.ndarray) -> list[tuple[float, float]]:  # PIL puts pixel centres on integers
            return [((x - x0) / resolution - 0.5, (y - y0) / resolution - 0.5) for x, y in p]

        normal = [(lane, _polyline_clean(lane.centerline)) for lane in self.lanes]
        normal = [(lane, line) for lane, line in normal if len(line) >= 2]
        for lane, line in normal:  # sidewalks along the outer edge of each road
            if not lane.internal and lane.index == 0:
                outer = _offset(line, lane.width / 2)
                far = _offset(line, lane.width / 2 + _SIDEWALK_WIDTH)
                draw.polygon(px(np.concatenate([outer, far[::-1]])), fill=SLOT_SIDEWALK)
        junctions = self._net[0]
        for shape in junctions:  # and round the corners of junctions
            draw.line(px(np.concatenate([shape, shape[:1]])), fill=SLOT_SIDEWALK,
                      width=max(1, round(2 * _SIDEWALK_WIDTH / resolution)), joint="curve")
        for shape in junctions:
            draw.polygon(px(shape), fill=SLOT_ROAD)
        for lane, line in normal:
            left, right = _offset(line, -lane.width / 2), _offset(line, lane.width / 2)
            draw.polygon(px(np.concatenate([left, right[::-1]])), fill=SLOT_ROAD)
        lw = max(1, round(marking_width / resolution))
        for lane, line in normal:
            if lane.internal:
                continue
            if lane.index == 0:  # the outer edge of the road: solid
                draw.line(px(_offset(line, lane.width / 2)), fill=SLOT_LINE, width=lw)
            left = _offset(line, -lane.width / 2)
            if lane.index == lane.lanes_in_edge - 1:  # the road centre: solid
                draw.line(px(left), fill=SLOT_LINE, width=lw)
            else:  # between lanes of one direction: dashed
                pts, s = _resample(left, 0.5)
                on = (s % (_DASH + _GAP)) < _DASH
                edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
                for a, b in zip(edges[::2], edges[1::2], strict=True):
                    if b - a >= 2:
                        draw.line(px(pts[a:b]), fill=SLOT_LINE, width=lw)
        slots = np.asarray(img, dtype=np.uint8)
        codes = slots * np.uint8(SHADES)
        if texture:
            codes += _texture(slots.shape, self.seed)
        return {"codes": encode_array(codes, "zstd"), "x0": float(x0), "y0": float(y0), "res": float(resolution)}

    # ------------------------------------------------------------------ structures
    def _add(self, cls: int, x: float, y: float, z: float, yaw: float, length: float, width: float,
             height: float) -> int:
        self.static_boxes.append(Box(STATIC_ID0 + len(self.static_boxes), cls, x, y, z, yaw, length, width, height))
        return len(self.static_boxes) - 1

    def _place_signals(self) -> None:
        """A pole at the right edge of each signalled approach, a mast arm across it, one head per lane."""
        by_lane = {lane.id: lane for lane in self.lanes}
        approaches: dict[str, dict[int, list[str]]] = {}
        for edge, lane_index, link in self._net[1]:
            approaches.setdefault(edge, {}).setdefault(lane_index, []).append(link)
        for edge in sorted(approaches):
            lanes = {i: by_lane.get(f"{edge}_{i}") for i in approaches[edge]}
            lanes = {i: lane for i, lane in lanes.items() if lane is not None and len(lane.centerline) >= 2}
            if not lanes:
                continue
            ref = lanes[min(lanes)]
            line = _polyline_clean(ref.centerline)
            end, before = line[-1], line[-2]
            yaw = _yaw_of(before, end)
            t = np.array([math.cos(math.radians(yaw)), math.sin(math.radians(yaw))])
            n = np.array([-t[1], t[0]])  # right
            # Pole on the sidewalk, 1 m before the stop line, right of the rightmost signalled lane.
            right_edge = end + n * (ref.width / 2 + 0.8 + ref.width * min(lanes)) - t * 1.0
            pole_h, arm_z = 6.2, 5.9
            self._add(sem.POLE, *right_edge, pole_h / 2, yaw, 0.3, 0.3, pole_h)
            heads = []
            for i, lane in sorted(lanes.items()):
                stop = _polyline_clean(lane.centerline)[-1]
                head_xy = stop - t * 1.0
                heads.append((i, lane, stop, head_xy))
            far = heads[-1][3]
            span = float(np.hypot(*(far - right_edge))) + 0.6
            mid = (right_edge + far) / 2 + (far - right_edge) / max(span, 1e-6) * 0.3
            self._add(sem.POLE, *mid, arm_z, yaw + 90.0, span, 0.2, 0.2)
            for i, lane, stop, head_xy in heads:
                k = self._add(sem.TRAFFIC_LIGHT, *head_xy, arm_z - 0.65, yaw, 0.4, 0.4, 1.1)
                self.signals.append(Signal(lane=lane.id, x=float(stop[0]), y=float(stop[1]), yaw=yaw,
                                           width=lane.width, head=k, links=tuple(approaches[edge][i])))

    def _place_buildings_and_lamps(self, rng: np.random.Generator) -> None:
        """Buildings behind the sidewalks and lamps on them, walking along the outer edge of every road."""
        occ_res = 0.5
        g = self.ground
        f = max(1, int(round(occ_res / g.res)))
        h, w = g.codes.shape[0] // f, g.codes.shape[1] // f
        blocks = (g.codes[:h * f, :w * f] // SHADES).reshape(h, f, w, f) != SLOT_TERRAIN
        occ = blocks.any(axis=(1, 3))
        occ_res = g.res * f
        # Keep a metre of terrain between the sidewalk and any wall.
        grown = occ.copy()
        for _ in range(max(1, round(1.0 / occ_res))):
            grown[1:] |= occ[:-1]
            grown[:-1] |= occ[1:]
            grown[:, 1:] |= occ[:, :-1]
            grown[:, :-1] |= occ[:, 1:]
            occ = grown.copy()

        def cells(cx: float, cy: float, yaw: float, length: float, width: float) -> tuple[np.ndarray, np.ndarray]:
            c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
            a = np.arange(-length / 2, length / 2 + 1e-9, occ_res / 2)
            b = np.arange(-width / 2, width / 2 + 1e-9, occ_res / 2)
            aa, bb = np.meshgrid(a, b)
            x = cx + c * aa - s * bb
            y = cy + s * aa + c * bb
            return ((y - g.y0) / occ_res).astype(np.int64).ravel(), ((x - g.x0) / occ_res).astype(np.int64).ravel()

        def free(rows: np.ndarray, cols: np.ndarray) -> bool:
            inside = (rows >= 0) & (rows < occ.shape[0]) & (cols >= 0) & (cols < occ.shape[1])
            return bool(inside.all()) and not occ[rows, cols].any()

        for lane in self.lanes:
            if lane.internal or lane.index != 0:
                continue
            line = _polyline_clean(lane.centerline)
            if len(line) < 2:
                continue
            # Lamps first (on the sidewalk), then buildings behind them.
            walk = _offset(line, lane.width / 2 + 0.6)
            pts, s = _resample(walk, 1.0)
            for a in np.arange(8.0, s[-1] - 8.0, 28.0):
                k = int(np.searchsorted(s, a))
                x, y = pts[k]
                r, c = int((y - g.y0) / g.res), int((x - g.x0) / g.res)
                inside = 0 <= r < g.codes.shape[0] and 0 <= c < g.codes.shape[1]
                if inside and g.codes[r, c] // SHADES == SLOT_SIDEWALK:
                    self._add(sem.POLE, float(x), float(y), 3.75, _yaw_of(pts[k - 1], pts[k]), 0.22, 0.22, 7.5)
            base = _offset(line, lane.width / 2 + _SIDEWALK_WIDTH + 1.5)
            pts, s = _resample(base, 0.5)
            a = float(rng.uniform(0.0, 4.0))
            while a < s[-1]:
                length, depth = float(rng.uniform(8.0, 22.0)), float(rng.uniform(8.0, 16.0))
                height = float(rng.choice([rng.uniform(5.0, 12.0), rng.uniform(12.0, 30.0)], p=[0.7, 0.3]))
                k0 = int(np.searchsorted(s, a))
                k1 = min(int(np.searchsorted(s, a + length)), len(s) - 1)
                if k1 <= k0:
                    break
                p0, p1 = pts[k0], pts[k1]
                yaw = _yaw_of(p0, p1)
                length = float(np.hypot(*(p1 - p0)))
                n = np.array([-math.sin(math.radians(yaw)), math.cos(math.radians(yaw))])
                centre = (p0 + p1) / 2 + n * (depth / 2 + float(rng.uniform(0.0, 2.5)))
                rows, cols = cells(*centre, yaw, length, depth)
                if length > 4.0 and free(rows, cols):
                    self._add(sem.BUILDING, float(centre[0]), float(centre[1]), height / 2, yaw, length, depth, height)
                    rows, cols = cells(*centre, yaw, length + 2 * occ_res, depth + 2 * occ_res)
                    ok = (rows >= 0) & (rows < occ.shape[0]) & (cols >= 0) & (cols < occ.shape[1])
                    occ[rows[ok], cols[ok]] = True
                    a += length + float(rng.uniform(1.0, 6.0))
                else:
                    a += 2.0

    def _static_arrays(self) -> None:
        """The structures as arrays, for culling and casting without Python loops over all of them."""
        b = self.static_boxes
        self.static_xyz = np.array([[x.x, x.y, x.z] for x in b], dtype=np.float64).reshape(-1, 3)
        self.static_yaw = np.array([x.yaw for x in b], dtype=np.float64)
        self.static_half = np.array([[x.length / 2, x.width / 2, x.height / 2] for x in b]).reshape(-1, 3)
        self.static_cls = np.array([x.cls for x in b], dtype=np.uint8)


def load_town_scene(town: Town) -> None:
    """Read what every scene of `town` reads from its SUMO network (lanes, junctions, signals), once: a worker that
    keeps the town for its route runs (tools.collect.runner.zygote) then builds a route's regional scene without
    reading the network again."""
    town.lanes  # noqa: B018 (a cached property: read now)
    _parse_net(town)


@functools.lru_cache(maxsize=1)  # the town of this process (a worker's kept town: load_town_scene)
def _parse_net(town: Town) -> tuple[list[np.ndarray], list[tuple[str, int, str]]]:
    """Junction outlines (CARLA frame) and signalled connections (from edge, from lane, "tls:link") of a town."""
    junctions, tls = [], []
    for _, el in ET.iterparse(str(town.net)):
        if el.tag == "junction" and el.get("type") not in ("internal", "dead_end") and el.get("shape"):
            pts = np.array([[float(v) for v in p.split(",")[:2]] for p in el.get("shape").split()])
            if len(pts) >= 3:
                junctions.append(town.sumo_to_carla(pts))
        elif el.tag == "connection" and el.get("tl") is not None and el.get("linkIndex") is not None:
            tls.append((el.get("from"), int(el.get("fromLane")), f"{el.get('tl')}:{el.get('linkIndex')}"))
        if el.tag != "edge":  # an edge's lanes are read through Town.lanes; free the rest as we go
            el.clear()
    return junctions, tls


def memory_budget_gb() -> float:
    """The memory a scene's rasters may take, in GB: DRIVEKIT_MEMORY_BUDGET_GB, default 3."""
    raw = os.environ.get("DRIVEKIT_MEMORY_BUDGET_GB", "3")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise TownError(f"DRIVEKIT_MEMORY_BUDGET_GB={raw!r}: expected a positive number of GB")
    return value


def _clip_region(region: tuple[float, float, float, float],
                 bounds: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """`region` rounded out to _REGION_GRID and cut to the town's `bounds` (grown by the raster margin)."""
    xmin, ymin, xmax, ymax = map(float, region)
    if not (xmin < xmax and ymin < ymax) or not all(map(math.isfinite, (xmin, ymin, xmax, ymax))):
        raise ValueError(f"scene region {region}: expected (xmin, ymin, xmax, ymax) with xmin < xmax, ymin < ymax")
    g = _REGION_GRID
    out = (max(math.floor(xmin / g) * g, bounds[0] - _RASTER_MARGIN),
           max(math.floor(ymin / g) * g, bounds[1] - _RASTER_MARGIN),
           min(math.ceil(xmax / g) * g, bounds[2] + _RASTER_MARGIN),
           min(math.ceil(ymax / g) * g, bounds[3] + _RASTER_MARGIN))
    if not (out[0] < out[2] and out[1] < out[3]):
        raise ValueError(f"scene region {region}: outside the town's lanes {bounds}")
    return out


def _touches(points: np.ndarray, region: tuple[float, float, float, float], margin: float) -> bool:
    """Whether the bounding box of `points` (N, 2) meets `region` grown by `margin`."""
    p = np.asarray(points)
    if not len(p):
        return False
    lo, hi = p[:, :2].min(0), p[:, :2].max(0)
    return bool(lo[0] <= region[2] + margin and hi[0] >= region[0] - margin
                and lo[1] <= region[3] + margin and hi[1] >= region[1] - margin)


def _texture(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Ground texture shades 0..31: metre-scale blotches plus a little grain, deterministic."""
    rng = np.random.default_rng(seed + 7)
    h, w = shape
    coarse = rng.integers(0, 24, size=(h // 24 + 2, w // 24 + 2), dtype=np.uint8)
    big = np.asarray(Image.fromarray(coarse).resize((w + 48, h + 48), Image.Resampling.BILINEAR))[24:24 + h, 24:24 + w]
    return big + rng.integers(0, 8, size=shape, dtype=np.uint8)


# ----------------------------------------------------------------------------------------- polylines


def _polyline_clean(line: np.ndarray) -> np.ndarray:
    line = np.asarray(line, dtype=np.float64)
    keep = np.ones(len(line), dtype=bool)
    keep[1:] = np.hypot(*np.diff(line, axis=0).T) > 1e-6
    return line[keep]


def _offset(line: np.ndarray, d: float) -> np.ndarray:
    """A polyline moved sideways by d metres, to the right of its direction (CARLA's frame is left-handed)."""
    seg = np.diff(line, axis=0)
    t = seg / np.hypot(seg[:, 0], seg[:, 1])[:, None]
    n = np.stack([-t[:, 1], t[:, 0]], axis=1)  # right of (tx, ty) when y points south
    vn = np.zeros_like(line)
    vn[:-1] += n
    vn[1:] += n
    vn /= np.maximum(np.hypot(vn[:, 0], vn[:, 1]), 1e-9)[:, None]
    # Miter: keep the offset edges parallel to the segments at a bend.
    cos_half = np.ones(len(line))
    cos_half[1:-1] = np.maximum((vn[1:-1] * n[:-1]).sum(1), 0.5)
    return line + vn * (d / cos_half)[:, None]


def _resample(line: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Points every `step` metres along a polyline (ends included) and their arc length."""
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])
    s = np.append(np.arange(0.0, arc[-1], step), arc[-1])
    return np.stack([np.interp(s, arc, line[:, 0]), np.interp(s, arc, line[:, 1])], axis=1), s


def _yaw_of(p0: np.ndarray, p1: np.ndarray) -> float:
    return math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))
