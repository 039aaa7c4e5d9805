"""The embedded world's sensors: pinhole cameras (RGB, semantics, depth), a LiDAR and a BEV raster.

Everything is drawn from the world state (`Snapshot`) and the town's static `Scene` (tools.collect.sensors.scene:
the ground raster, roadside structures, traffic-light heads), for the sensors a rig names
(tools.dataset.rig), under the names and codecs the rig gives them. One ray-casting model serves every
sensor, so labels match pixels by construction:

- the ground is the plane z=0, drawn once into the scene's top-down raster (terrain, sidewalk, road,
  lane markings); the cameras and the LiDAR are level with the ego, so where each pixel's or ray's ray
  meets the ground is fixed in the ego frame and a frame only moves those points into the world and
  reads the raster;
- vehicles and structures are oriented boxes, hit by the slab method. Because the sensors have no pitch
  or roll, a ray's horizontal direction depends on the image column (LiDAR: azimuth) only and its slope on
  the row (LiDAR: channel) only, so the x/y slabs are solved per column and the z slab per row; a box
  costs two small vectors and a few passes over its projected rectangle;
- the nearest hit wins in a depth buffer; the label, colour and depth of a pixel come from that hit.

Frames and pixels are tools.dataset.geometry's: world (CARLA's), ego (x forward, y right, z up, origin
on the ground under the ego box's centre), camera pixels (`floor(uv)` is the pixel a projected point
falls in, depth along the optical axis) and the BEV grid (`BevGrid.of_rig`). Where a transform runs
per pixel it is written out inline for speed (float32 where the rays are); tests/collect/sensors/test_render.py checks
each inline form against the geometry module. The ego itself is not drawn in the cameras and gives no
LiDAR points (as if the sensors sat in front of it); it is drawn in the BEV.

Traffic lights: a light (`Light`, one per signalled link) is shown on the scene's head over its lane,
found by its id "<tls id>:<link index>" (`Scene.signals`); a lane with several links shows its most
permissive one, on its head and on its stop line in the BEV. A light whose id names no head of the scene
is drawn in the BEV only (`unmatched_lights` lists them; the SUMO world has none).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from tools.collect.base.town import Town
from tools.collect.sensors import raycast
from tools.collect.sensors.scene import (
    MARKING_WIDTH,
    SHADES,
    SLOT_LINE,
    SLOT_ROAD,
    SLOT_SIDEWALK,
    SLOT_TERRAIN,
    Scene,
)
from tools.dataset import semantics as sem
from tools.dataset.geometry import BevGrid, camera_intrinsics, ego_to_world, world_to_ego
from tools.dataset.rig import (
    BEV,
    LIDAR,
    LIDAR_LABELS,
    MAX_DEPTH_M,
    BevConfig,
    CameraConfig,
    LidarConfig,
    RigConfig,
    camera_sensors,
    lidar_intensity,
)
from tools.expert.state import Box, Light, Snapshot

#: Boxes farther than this from a camera are not drawn (the ground still is, to the horizon).
CAMERA_BOX_RANGE = 150.0

_NEAR = 0.05  # metres: points nearer to a camera than this are behind it
_SKY_Z = 1e30  # depth buffer value of the sky

# ----------------------------------------------------------------------------------------- materials
# A pixel's material (uint16) gives both its class and its colour through two lookup tables:
#   0..255      ground: the scene's raster code, slot * SHADES + texture shade
#   256..319    sky, by elevation
#   512 + 16*p + k   paint p under light level k (0 dark .. 15 lit)

_SLOT_CLASS = {SLOT_TERRAIN: sem.TERRAIN, SLOT_SIDEWALK: sem.SIDEWALK, SLOT_ROAD: sem.ROAD,
               SLOT_LINE: sem.ROADLINE}
_SLOT_RGB = {SLOT_TERRAIN: (92, 116, 58), SLOT_SIDEWALK: (150, 147, 140), SLOT_ROAD: (72, 72, 78),
             SLOT_LINE: (225, 225, 214)}
_SLOT_TO_BEV = {SLOT_TERRAIN: sem.BEV_EMPTY, SLOT_SIDEWALK: sem.BEV_EMPTY, SLOT_ROAD: sem.BEV_ROAD,
                SLOT_LINE: sem.BEV_LANE_MARKING}
_MAT_SKY = 256
_SKY_LEVELS = 64
_MAT_PAINT = 512

# Paints 0..255: one per class id (what a box of an unknown class looks like). Then extra paints.
_CLASS_RGB = {sem.BUILDING: (150, 138, 120), sem.POLE: (120, 120, 125), sem.TRAFFIC_LIGHT: (32, 34, 36),
              sem.CAR: (40, 60, 140), sem.TRUCK: (180, 175, 160), sem.BUS: (200, 120, 30),
              sem.VEGETATION: (60, 110, 40), sem.PEDESTRIAN: (170, 60, 60), sem.BICYCLE: (40, 40, 45),
              sem.STATIC: (235, 110, 20)}
_CAR_RGB = [(40, 60, 140), (170, 30, 30), (225, 225, 225), (25, 25, 28), (130, 135, 140), (30, 110, 60),
            (200, 170, 40), (90, 40, 110), (180, 90, 30), (60, 130, 170), (110, 20, 30), (200, 200, 190)]
_BUILDING_RGB = [(150, 138, 120), (170, 120, 95), (120, 118, 115), (185, 175, 150), (140, 95, 75),
                 (105, 110, 125), (200, 190, 170), (95, 90, 85)]
_LAMP_RGB = {"red": (235, 40, 30), "yellow": (245, 190, 30), "green": (40, 220, 90), "off": (50, 52, 55)}
_PAINT_CAR = 256
_PAINT_BUILDING = _PAINT_CAR + len(_CAR_RGB)
_PAINT_LAMP = {state: _PAINT_BUILDING + len(_BUILDING_RGB) + i for i, state in enumerate(_LAMP_RGB)}
_N_PAINTS = max(_PAINT_LAMP.values()) + 1
#: How permissive a light's state is: a lane with several links shows its most permissive one.
_LAMP_RANK = {"off": 0, "red": 1, "yellow": 2, "green": 3}

# Faces of a box: 0 +x (front), 1 -x, 2 +y, 3 -y, 4 top, 5 bottom.
_SUN = np.array([math.cos(math.radians(205)) * math.cos(math.radians(50)),
                 math.sin(math.radians(205)) * math.cos(math.radians(50)), math.sin(math.radians(50))])


def _material_tables() -> tuple[np.ndarray, np.ndarray]:
    """(class LUT uint8, colour LUT uint8 (n, 3)) of every material."""
    n = _MAT_PAINT + 16 * _N_PAINTS
    cls = np.zeros(n, dtype=np.uint8)
    rgb = np.zeros((n, 3), dtype=np.float64)
    shade = 0.78 + 0.3 * np.arange(SHADES) / (SHADES - 1)  # ground texture brightness
    for slot, c in _SLOT_CLASS.items():
        cls[slot * SHADES:(slot + 1) * SHADES] = c
        rgb[slot * SHADES:(slot + 1) * SHADES] = np.outer(shade, _SLOT_RGB[slot])
    lv = np.linspace(0.0, 1.0, _SKY_LEVELS)[:, None]  # 0 at the horizon, 1 high up
    cls[_MAT_SKY:_MAT_SKY + _SKY_LEVELS] = sem.SKY
    rgb[_MAT_SKY:_MAT_SKY + _SKY_LEVELS] = (1 - lv) * np.array([205, 218, 232]) + lv * np.array([70, 120, 190])
    paints = [(c, _CLASS_RGB.get(c, tuple(int(v) for v in sem.PALETTE[c]))) for c in range(256)]
    paints += [(sem.CAR, c) for c in _CAR_RGB] + [(sem.BUILDING, c) for c in _BUILDING_RGB]
    paints += [(sem.TRAFFIC_LIGHT, _LAMP_RGB[s]) for s in _LAMP_RGB]
    light = 0.3 + 0.75 * np.arange(16) / 15.0
    for p, (c, colour) in enumerate(paints):
        cls[_MAT_PAINT + 16 * p:_MAT_PAINT + 16 * (p + 1)] = c
        rgb[_MAT_PAINT + 16 * p:_MAT_PAINT + 16 * (p + 1)] = np.outer(light, colour)
    return cls, np.clip(rgb, 0, 255).astype(np.uint8)


def _face_levels(yaw_deg: np.ndarray) -> np.ndarray:
    """(K, 6) light level 0..15 of each face of boxes with these world yaws (sun fixed in the sky)."""
    yaw = np.radians(np.asarray(yaw_deg, dtype=np.float64))
    c, s = np.cos(yaw), np.sin(yaw)
    nx = np.stack([c, -c, -s, s], axis=1)  # +x, -x, +y, -y normals' x component
    ny = np.stack([s, -s, c, -c], axis=1)
    side = 0.35 + 0.65 * np.maximum(nx * _SUN[0] + ny * _SUN[1], 0.0)
    top = np.full((len(yaw), 1), 0.35 + 0.65 * _SUN[2])
    bottom = np.full((len(yaw), 1), 0.2)
    b = np.concatenate([side, top, bottom], axis=1)
    return np.clip(np.round(b * 15), 0, 15).astype(np.uint16)


def _static_faces(scene: Scene) -> np.ndarray:
    """(K, 6) materials of the scene's structures: their class's paint (buildings in one of several colours,
    picked from the scene's seed), lit by the sun."""
    paint = scene.static_cls.astype(np.int64)
    bidx = np.flatnonzero(scene.static_cls == sem.BUILDING)
    paint[bidx] = _PAINT_BUILDING + (bidx * 7919 + scene.seed) % len(_BUILDING_RGB)
    return (_MAT_PAINT + 16 * paint[:, None] + _face_levels(scene.static_yaw)).astype(np.uint16)


# ----------------------------------------------------------------------------------------- rendering


@dataclass
class _Boxes:
    """This frame's boxes (actors then structures) in the ego frame."""

    xyz: np.ndarray  # (K, 3) centres
    yaw: np.ndarray  # (K,) radians, ego frame
    half: np.ndarray  # (K, 3) half extents
    cls: np.ndarray  # (K,) uint8
    ids: np.ndarray  # (K,) uint32 actor id, 0 for structures
    faces: np.ndarray  # (K, 6) uint16 materials


class _CameraRays:
    """A camera's precomputed rays. Column j has horizontal direction (dx[j], dy[j]) in the ego frame with a
    unit component along the optical axis; row i has slope dz[i]. So the ray parameter is the depth."""

    def __init__(self, cam: CameraConfig):
        self.cam = cam
        k = camera_intrinsics(cam)
        f, cx, cy = k[0, 0], k[0, 2], k[1, 2]
        right = (np.arange(cam.width) + 0.5 - cx) / f
        c, s = math.cos(math.radians(cam.yaw)), math.sin(math.radians(cam.yaw))
        # float32: the per-box passes over pixels are memory bound.
        self.dx = (c - s * right).astype(np.float32)
        self.dy = (s + c * right).astype(np.float32)
        dz = -(np.arange(cam.height) + 0.5 - cy) / f
        self.dz = dz.astype(np.float32)
        self.h0 = int(np.argmax(dz < 0)) if (dz < 0).any() else cam.height  # first ground row
        self.ground_t = np.minimum(cam.z / -dz[self.h0:], MAX_DEPTH_M).astype(np.float32)  # depth per row
        self.origin = (cam.x, cam.y, cam.z)
        self.f, self.cx, self.cy = f, cx, cy
        zb = np.full((cam.height, cam.width), _SKY_Z, dtype=np.float32)
        zb[self.h0:] = self.ground_t[:, None]
        self.base_z = zb
        mat = np.zeros((cam.height, cam.width), dtype=np.uint16)
        elev = np.degrees(np.arctan(dz[:self.h0]))
        level = np.clip(elev / 45.0 * (_SKY_LEVELS - 1), 0, _SKY_LEVELS - 1).astype(np.uint16)
        mat[:self.h0] = (_MAT_SKY + level)[:, None]
        self.base_mat = mat
        self.cos_half = math.cos(math.radians(cam.fov) / 2)
        self.tan_half = math.tan(math.radians(cam.fov) / 2)
        self.cam_c, self.cam_s = c, s


_CORNER_SIGNS = np.array([[1, 1, -1], [1, -1, -1], [-1, -1, -1], [-1, 1, -1],
                          [1, 1, 1], [1, -1, 1], [-1, -1, 1], [-1, 1, 1]], dtype=np.float64)
_BOX_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4],
                       [0, 4], [1, 5], [2, 6], [3, 7]])


class Renderer:
    """Renders one Snapshot into every sensor of a rig. Holds only precomputed rays and tables."""

    def __init__(self, scene: Scene, rig: RigConfig):
        self.scene = scene
        self.rig = rig
        self.cls_lut, self.rgb_lut = _material_tables()
        self.slot_cls = np.array([_SLOT_CLASS.get(i // SHADES, sem.TERRAIN) for i in range(256)], dtype=np.uint8)
        self.codecs = rig.sensor_names()  # sensor name -> codec (tools.dataset.rig)
        self.cameras = [_CameraRays(cam) for cam in rig.cameras]
        self._init_lidar(rig.lidar)
        self._init_bev(rig.bev)
        self.static_faces = _static_faces(scene)
        # Traffic-light heads (boxes of the scene) and, for each light id "<tls id>:<link index>", its head.
        self._head_box = np.array([s.head for s in scene.signals], dtype=np.int64)
        self._light_head = {link: i for i, s in enumerate(scene.signals) for link in s.links}

    # ------------------------------------------------------------------ setup
    def _init_lidar(self, cfg: LidarConfig) -> None:
        self.el = np.radians(np.linspace(cfg.upper_fov, cfg.lower_fov, cfg.channels))
        self.el_step = (self.el[0] - self.el[-1]) / max(cfg.channels - 1, 1)
        self.az = 2 * np.pi * np.arange(cfg.azimuth_steps) / cfg.azimuth_steps
        self.l_dx, self.l_dy = np.cos(self.az).astype(np.float32), np.sin(self.az).astype(np.float32)
        self.l_dz = np.tan(self.el).astype(np.float32)  # the ray parameter is the horizontal distance s
        self.l_smax = cfg.range * np.cos(self.el)  # s at the end of the range, per channel
        s_ground = np.where(self.el < 0, cfg.z / np.maximum(-np.tan(self.el), 1e-12), np.inf)
        s_ground[s_ground > self.l_smax] = np.inf
        self.l_base = np.repeat(s_ground[:, None], cfg.azimuth_steps, axis=1).astype(np.float32)
        self.l_sec = (1.0 / np.cos(self.el)).astype(np.float32)

    def _init_bev(self, cfg: BevConfig) -> None:
        r = cfg.resolution
        self.bev_grid = BevGrid.of_rig(cfg)
        self.bev_x, self.bev_y = self.bev_grid.cell_centres()  # ego x of each row's centre, y of each column's
        # A raster at half the BEV's cell size with markings a cell and a half wide, so that sampling it at
        # the cell centres never drops a line.
        self.bev_raster = self.scene.raster(min(r / 2, 0.25), max(MARKING_WIDTH, 1.5 * r))
        lut = np.zeros(256, dtype=np.uint8)
        for slot, c in _SLOT_TO_BEV.items():
            lut[slot * SHADES:(slot + 1) * SHADES] = c
        self.bev_lut = lut

    # ------------------------------------------------------------------ per frame
    def _boxes(self, snap: Snapshot) -> _Boxes:
        ego = snap.ego
        sc = self.scene
        actors = [a for a in snap.actors if a.id != 0]
        a_xyz = np.array([[a.x, a.y, a.z] for a in actors], dtype=np.float64).reshape(-1, 3)
        a_yaw = np.array([a.yaw for a in actors], dtype=np.float64)
        a_half = np.array([[a.length / 2, a.width / 2, a.height / 2] for a in actors]).reshape(-1, 3)
        a_cls = np.array([a.cls for a in actors], dtype=np.uint8)
        a_ids = np.array([a.id for a in actors], dtype=np.uint32)
        paint = a_cls.astype(np.int64)
        car = a_cls == sem.CAR
        paint[car] = _PAINT_CAR + (a_ids[car].astype(np.int64) * 2654435761 % 4093) % len(_CAR_RGB)
        a_faces = (_MAT_PAINT + 16 * paint[:, None] + _face_levels(a_yaw)).astype(np.uint16)
        s_faces = self.static_faces
        if len(self._head_box):
            states = self._head_states(snap.lights)
            if states is not None:
                s_faces = s_faces.copy()
                s_faces[self._head_box, 1] = _MAT_PAINT + 16 * states + 15  # lamps glow whatever the sun
        xyz = np.concatenate([a_xyz, sc.static_xyz])
        yaw = np.concatenate([a_yaw, sc.static_yaw])
        return _Boxes(
            xyz=world_to_ego(ego, xyz),
            yaw=np.radians(yaw - ego.yaw),
            half=np.concatenate([a_half, sc.static_half]),
            cls=np.concatenate([a_cls, sc.static_cls]),
            ids=np.concatenate([a_ids, np.zeros(len(sc.static_xyz), dtype=np.uint32)]),
            faces=np.concatenate([a_faces, s_faces]),
        )

    def _head_states(self, lights: list[Light]) -> np.ndarray | None:
        """Paint of every head's lamp face from the states of the lights it shows (found by id); None: no lights."""
        if not lights:
            return None
        paint = np.full(len(self._head_box), _PAINT_LAMP["off"], dtype=np.uint16)
        best = np.full(len(self._head_box), -1, dtype=np.int64)
        for light in lights:
            i = self._light_head.get(light.id)
            if i is None:
                continue  # on no head of this scene: drawn in the BEV only
            rank = _LAMP_RANK.get(light.state, 0)
            if rank > best[i]:  # a lane with several links shows its most permissive one
                best[i] = rank
                paint[i] = _PAINT_LAMP.get(light.state, _PAINT_LAMP["off"])
        return paint

    def unmatched_lights(self, lights: list[Light]) -> list[str]:
        """Ids of the lights that no traffic-light head of the scene shows (they appear in the BEV only)."""
        return [light.id for light in lights if light.id not in self._light_head]

    def render(self, snap: Snapshot, timings: dict[str, float] | None = None,
               bev: bool = True) -> dict[str, tuple[np.ndarray, str]]:
        """Every sensor of the rig for one snapshot (without `bev`: all but the BEV). `timings`, if given, receives
        seconds per part."""
        clock = time.perf_counter
        t0 = clock()
        boxes = self._boxes(snap)
        t1 = clock()
        out: dict[str, tuple[np.ndarray, str]] = {}
        times = {"boxes": t1 - t0}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for rays in self.cameras:
                t = clock()
                arrays = self._camera(rays, snap, boxes)  # rgb, semantics, depth
                for name, array in zip(camera_sensors(rays.cam.name), arrays, strict=True):
                    out[name] = (array, self.codecs[name])
                times[f"camera_{rays.cam.name}"] = clock() - t
            t = clock()
            points, labels = self._lidar(snap, boxes)
            out[LIDAR] = (points, self.codecs[LIDAR])
            out[LIDAR_LABELS] = (labels, self.codecs[LIDAR_LABELS])
            times["lidar"] = clock() - t
            if bev:
                t = clock()
                out[BEV] = (self.bev(snap), self.codecs[BEV])
                times["bev"] = clock() - t
        if timings is not None:
            timings.update(times)
        return out

    # ------------------------------------------------------------------ cameras
    def _camera(self, rays: _CameraRays, snap: Snapshot, boxes: _Boxes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cam = rays.cam
        ego = snap.ego
        g = self.scene.ground
        zb = rays.base_z.copy()
        mat = rays.base_mat.copy()
        if rays.h0 < cam.height:
            # Ground: the hit point of row i, column j is origin + t_i * (dx_j, dy_j) in the ego frame; in
            # raster pixels an outer product plus a constant. The camera's place in the world is
            # geometry.ego_to_world's; the rays are turned to the world inline, in float32 like the rays
            # (tests/collect/sensors/test_render.py checks the pixels' ground against ego_to_world).
            c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
            col_d = (c * rays.dx - s * rays.dy) / g.res
            row_d = (s * rays.dx + c * rays.dy) / g.res
            ox, oy = ego_to_world(ego, np.array(rays.origin[:2])).tolist()
            col0, row0 = raycast.f32((ox - g.x0) / g.res, (oy - g.y0) / g.res)
            raycast.camera_ground(mat, rays.h0, rays.ground_t, col_d, row_d, col0, row0, g.codes)
        self._cast_camera(rays, boxes, zb, mat)
        return raycast.camera_finish(mat, zb, self.cls_lut, self.rgb_lut, np.float32(70000.0))  # (deeper: sky)

    def _cast_camera(self, rays: _CameraRays, b: _Boxes, zb: np.ndarray, mat: np.ndarray) -> None:
        cam = rays.cam
        if not len(b.xyz):
            return
        # Cull to boxes near enough and inside the horizontal field of view (with their radius as margin).
        rx, ry = b.xyz[:, 0] - cam.x, b.xyz[:, 1] - cam.y
        fwd = rays.cam_c * rx + rays.cam_s * ry
        side = -rays.cam_s * rx + rays.cam_c * ry
        radius = np.sqrt((b.half ** 2).sum(1))
        keep = (np.hypot(fwd, side) < CAMERA_BOX_RANGE + radius) & (fwd > -radius)
        keep &= np.abs(side) * rays.cos_half - fwd * rays.tan_half * rays.cos_half < radius
        idx = np.flatnonzero(keep)
        if not len(idx):
            return
        # Corners in the camera frame (x depth, y right, z up), for each box's projected rectangle.
        phi = b.yaw[idx] - math.radians(cam.yaw)
        lx = _CORNER_SIGNS[None, :, 0] * b.half[idx, 0:1]
        ly = _CORNER_SIGNS[None, :, 1] * b.half[idx, 1:2]
        lz = _CORNER_SIGNS[None, :, 2] * b.half[idx, 2:3]
        cp, sp = np.cos(phi)[:, None], np.sin(phi)[:, None]
        cx = cp * lx - sp * ly + fwd[idx, None]
        cy = sp * lx + cp * ly + side[idx, None]
        cz = lz + (b.xyz[idx, 2] - cam.z)[:, None]
        dmin = cx.min(1)
        u = rays.cx + rays.f * cy / np.maximum(cx, _NEAR)
        v = rays.cy - rays.f * cz / np.maximum(cx, _NEAR)
        umin, umax, vmin, vmax = u.min(1), u.max(1), v.min(1), v.max(1)
        order = np.argsort(np.maximum(dmin, 0.0), kind="stable")  # near first: far boxes hidden are skipped
        rects, params, nearest = raycast.camera_plan(
            order, idx, dmin, umin, umax, vmin, vmax, cx, cy, cz, b.xyz, b.yaw, b.half, *map(float, rays.origin),
            float(rays.f), float(rays.cx), float(rays.cy), cam.width, cam.height, _NEAR, _BOX_EDGES)
        # The slab test per pixel (tools.collect.sensors.raycast), float32 as the rays.
        raycast.camera_boxes(zb, mat, rects, params, nearest, b.faces, rays.dx, rays.dy, rays.dz)

    # ------------------------------------------------------------------ lidar
    def _lidar(self, snap: Snapshot, b: _Boxes) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.rig.lidar
        ego = snap.ego
        g = self.scene.ground
        sbuf = self.l_base.copy()
        hitbox = np.full(sbuf.shape, -1, dtype=np.int32)
        self._cast_lidar(b, sbuf, hitbox)
        c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
        x, y, z, dist, cls, ids = raycast.lidar_points(
            sbuf, hitbox, self.l_smax.astype(np.float32), *raycast.f32(cfg.x, cfg.z), self.l_dx, self.l_dy,
            self.l_dz, self.l_sec, *raycast.f32(ego.length / 2, ego.width / 2, ego.height), b.cls, b.ids,
            float(ego.x), float(ego.y), c, s, float(g.x0), float(g.y0), float(g.res), g.codes, self.slot_cls)
        points = np.stack([x, y, z, lidar_intensity(dist)], axis=1)
        return points, np.stack([cls, ids], axis=1)

    def _cast_lidar(self, b: _Boxes, sbuf: np.ndarray, hitbox: np.ndarray) -> None:
        cfg = self.rig.lidar
        if not len(b.xyz):
            return
        A, C = cfg.azimuth_steps, cfg.channels
        rx, ry = b.xyz[:, 0] - cfg.x, b.xyz[:, 1]
        radius = np.hypot(b.half[:, 0], b.half[:, 1])
        idx = np.flatnonzero(np.hypot(rx, ry) < cfg.range + radius)
        if not len(idx):
            return
        # Horizontal footprints' corners relative to the LiDAR: azimuth span and nearest/farthest distance.
        c, s = np.cos(b.yaw[idx])[:, None], np.sin(b.yaw[idx])[:, None]
        lx = _CORNER_SIGNS[None, :4, 0] * b.half[idx, 0:1]
        ly = _CORNER_SIGNS[None, :4, 1] * b.half[idx, 1:2]
        px = c * lx - s * ly + rx[idx, None]
        py = s * lx + c * ly + ry[idx, None]
        ang = np.arctan2(py, px)
        ref = ang[:, :1]
        rel = (ang - ref + np.pi) % (2 * np.pi) - np.pi
        dth = 2 * np.pi / A
        k0 = np.ceil((ref[:, 0] + rel.min(1)) / dth - 1e-9).astype(np.int64)
        k1 = np.floor((ref[:, 0] + rel.max(1)) / dth + 1e-9).astype(np.int64)
        # Origin in each box's frame, for the nearest horizontal distance and "inside the footprint".
        ox = c[:, 0] * -rx[idx] + s[:, 0] * -ry[idx]
        oy = -s[:, 0] * -rx[idx] + c[:, 0] * -ry[idx]
        dnear = np.hypot(np.maximum(np.abs(ox) - b.half[idx, 0], 0), np.maximum(np.abs(oy) - b.half[idx, 1], 0))
        dfar = np.hypot(px, py).max(1)
        inside = dnear <= 0
        k0[inside], k1[inside] = 0, A - 1
        ztop = b.xyz[idx, 2] + b.half[idx, 2] - cfg.z
        zbot = b.xyz[idx, 2] - b.half[idx, 2] - cfg.z
        el_max = np.arctan2(ztop, np.where(ztop > 0, np.maximum(dnear, 1e-6), dfar))
        el_min = np.arctan2(zbot, np.where(zbot < 0, np.maximum(dnear, 1e-6), dfar))
        step = max(self.el_step, 1e-12)
        r0 = np.clip(np.ceil((self.el[0] - el_max) / step - 1e-9), 0, C).astype(np.int64)
        r1 = np.clip(np.floor((self.el[0] - el_min) / step + 1e-9) + 1, 0, C).astype(np.int64)
        if C == 1:
            on = (el_min <= self.el[0]) & (self.el[0] <= el_max)
            r0, r1 = np.where(on, 0, 1), np.ones_like(r0)
        spans, params, nearest = raycast.lidar_plan(np.argsort(dnear, kind="stable"), idx, r0, r1, k0, k1, dnear, A,
                                                    b.xyz, b.yaw, b.half, float(cfg.x), float(cfg.z))
        # The slab test per ray (tools.collect.sensors.raycast).
        raycast.lidar_boxes(sbuf, hitbox, spans, params, nearest, self.l_dx, self.l_dy, self.l_dz)

    # ------------------------------------------------------------------ bev
    def bev(self, snap: Snapshot) -> np.ndarray:
        """The BEV label of a snapshot (the CARLA agent records it from CARLA's actors with this too)."""
        cfg = self.rig.bev
        ego = snap.ego
        g = self.bev_raster
        c, s = math.cos(math.radians(ego.yaw)), math.sin(math.radians(ego.yaw))
        # Cell (r, q) is at ego (bev_x[r], bev_y[q]) (BevGrid.cell_centres); its place in the world is
        # geometry.ego_to_world's, written here as an outer sum of a row and a column term, in raster pixels
        # (tests/collect/sensors/test_render.py checks the BEV's ground against ego_to_world).
        bev = raycast.bev_ground(self.bev_x, self.bev_y, c, s, ego.x - g.x0, ego.y - g.y0, g.res, g.codes,
                                 self.bev_lut)
        # Rectangles on top, in this order: lights' stop lines, vehicles, the ego.
        reach = cfg.pixels * cfg.resolution  # farther than this from the ego is off the image
        state_cls = {"red": sem.BEV_LIGHT_RED, "yellow": sem.BEV_LIGHT_YELLOW, "green": sem.BEV_LIGHT_GREEN}
        # The links of a lane share its stop line: drawn once, in the most permissive state among them.
        stop_lines: dict[tuple[float, float, float, float], str] = {}
        for li in snap.lights:
            if li.state in state_cls and abs(li.x - ego.x) < reach and abs(li.y - ego.y) < reach:
                line = (li.x, li.y, li.yaw, li.width)
                if _LAMP_RANK[li.state] > _LAMP_RANK[stop_lines.get(line, "off")]:
                    stop_lines[line] = li.state
        rects = [(x, y, yaw, 1.0, width, state_cls[state]) for (x, y, yaw, width), state in stop_lines.items()]
        rects += [(a.x, a.y, a.yaw, a.length, a.width, bev_class(a.cls)) for a in snap.actors
                  if a.id != 0 and abs(a.x - ego.x) < reach + a.length and abs(a.y - ego.y) < reach + a.length]
        rects.append((ego.x, ego.y, ego.yaw, ego.length, ego.width, sem.BEV_EGO))
        r = np.array(rects, dtype=np.float64)
        yaw = np.radians(r[:, 2] - ego.yaw)
        cx, cy = world_to_ego(ego, r[:, :2]).T  # centres in the ego frame
        hl = r[:, 3:4] / 2 * np.array([1, 1, -1, -1])
        hw = r[:, 4:5] / 2 * np.array([1, -1, -1, 1])
        cyaw, syaw = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        px = cx[:, None] + cyaw * hl - syaw * hw
        py = cy[:, None] + syaw * hl + cyaw * hw
        # PIL puts pixel centres on integer coordinates, our cells span [k, k+1): shift by half a cell.
        col, row = np.moveaxis(self.bev_grid.ego_to_pixel(np.stack([px, py], axis=-1)) - 0.5, -1, 0)
        img = Image.fromarray(bev)
        draw = ImageDraw.Draw(img)
        for k in range(len(r)):
            draw.polygon(list(zip(col[k].tolist(), row[k].tolist(), strict=True)), fill=int(r[k, 5]))
        return np.array(img)


#: The BEV class of each actor kind (semantics.actor_kind): cyclists are drawn as pedestrians.
_BEV_OF_KIND = {"vehicle": sem.BEV_VEHICLE, "pedestrian": sem.BEV_PEDESTRIAN, "cyclist": sem.BEV_PEDESTRIAN,
                "obstacle": sem.BEV_OBSTACLE}


def bev_class(cls: int) -> int:
    """The BEV class an actor's box is drawn with: vehicles, pedestrians (and cyclists), obstacles (props)."""
    return _BEV_OF_KIND[sem.actor_kind(cls)]


def warm_up(town: Town) -> float:
    """Render one frame of the default rig on a lane of `town`, to be thrown away: numba loads the compiled kernels
    (tools.collect.sensors.raycast) at their first call, about 0.8 s. A worker's zygote does it once
    (tools.collect.runner.zygote), so that the route runs forked from it do not each pay it. Its seconds."""
    started = time.perf_counter()
    lane = next((la for la in town.lanes if not la.internal and len(la.centerline) >= 2), None)
    if lane is None:
        return 0.0
    (x0, y0), (x1, y1) = lane.centerline[0], lane.centerline[-1]
    yaw = math.degrees(math.atan2(y1 - y0, x1 - x0))
    ahead = (x0 + 8.0 * math.cos(math.radians(yaw)), y0 + 8.0 * math.sin(math.radians(yaw)))
    scene = Scene(town, seed=0, region=Scene.route_region(np.array([[x0, y0], ahead]), margin=40.0))
    ego = Box(0, sem.CAR, x0, y0, 0.75, yaw, 4.9, 2.1, 1.5, speed=0.0)
    car = Box(1, sem.CAR, ahead[0], ahead[1], 0.75, yaw, 4.6, 1.9, 1.5, speed=0.0)
    Renderer(scene, RigConfig()).render(Snapshot(time=0.0, ego=ego, actors=[car], lights=[]))
    return time.perf_counter() - started
