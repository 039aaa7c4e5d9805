"""The renderer's inner loops, compiled with numba: one box against a block of camera pixels or LiDAR rays.

Each kernel does, pixel by pixel, what the renderer's numpy expression of the slab test did over whole
arrays, in the same float32 operations in the same order (the scalars come in as float32, as numpy's weak
Python floats became float32 there), so the images are bit-identical to the numpy renderer's
(tests/collect/sensors/test_render_golden.py pins them). The numpy version made a dozen temporary arrays per box;
these make none. `camera_plan` and `lidar_plan` turn the boxes that survive the renderer's culling into the kernels'
inputs (each box's pixel rectangle or ray spans and its slabs), the loop the renderer ran in Python, with
Python's math.cos and the same float64 expressions. numba compiles them once and caches the machine code
beside this file (or in the user's cache).

A ray o + t*d meets the slab [-h, h] of one axis between (-h - o)/d and (h - o)/d; `lo` and `hi` below are
-h - o and h - o, computed in float64 and rounded to float32 once, as numpy did.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}  # numpy's division: x/0 is inf, 0/0 nan


@njit(**_OPTS)
def _max(a, b):
    return a if a > b or a != a else b  # np.maximum, to the bit: a NaN wins, of equal values b


@njit(**_OPTS)
def _min(a, b):
    return a if a < b or a != a else b  # np.minimum


@njit(**_OPTS)
def _enter(lo, hi, d):
    return _min(lo / d, hi / d)


@njit(**_OPTS)
def _leave(lo, hi, d):
    return _max(lo / d, hi / d)


@njit(**_OPTS)
def camera_box(zb, mat, r0, r1, c0, c1, ray_dx, ray_dy, ray_dz, c, s, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z, faces,
               front_only):
    """Draw one box into the camera's depth buffer `zb` and materials `mat` over rows r0:r1, columns c0:c1.
    Rays: horizontal (ray_dx[j], ray_dy[j]) per column in the ego frame, slope ray_dz[i] per row; (c, s) turn
    them into the box's frame. faces: the box's six materials (+x, -x, +y, -y, top, bottom). front_only: keep
    hits in front of the camera only (a box reaching behind it)."""
    for j in range(c0, c1):
        dxe, dye = ray_dx[j], ray_dy[j]
        dx = c * dxe + s * dye
        dy = c * dye - s * dxe
        txn, tyn = _enter(lo_x, hi_x, dx), _enter(lo_y, hi_y, dy)
        side_n = _max(txn, tyn)
        side_f = _min(_leave(lo_x, hi_x, dx), _leave(lo_y, hi_y, dy))
        if txn >= tyn:
            side_mat = faces[1] if dx > 0 else faces[0]
        else:
            side_mat = faces[3] if dy > 0 else faces[2]
        for i in range(r0, r1):
            dz = ray_dz[i]
            tzn = _enter(lo_z, hi_z, dz)
            tn = _max(tzn, side_n)
            if not tn < _min(_leave(lo_z, hi_z, dz), side_f):
                continue
            if front_only and not tn > 0:
                continue
            if not tn < zb[i, j]:
                continue
            zb[i, j] = tn
            if tzn > side_n:
                mat[i, j] = faces[5] if dz > 0 else faces[4]
            else:
                mat[i, j] = side_mat


@njit(**_OPTS)
def lidar_box(sbuf, hitbox, k, r0, r1, a0, a1, ray_dx, ray_dy, ray_dz, c, s, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z):
    """Cast LiDAR rays of channels r0:r1, azimuths a0:a1 at one box (index k): nearer hits replace the
    horizontal distances in `sbuf` and mark `hitbox`. Only hits ahead of the sensor count."""
    for j in range(a0, a1):
        dxe, dye = ray_dx[j], ray_dy[j]
        dx = c * dxe + s * dye
        dy = c * dye - s * dxe
        side_n = _max(_enter(lo_x, hi_x, dx), _enter(lo_y, hi_y, dy))
        side_f = _min(_leave(lo_x, hi_x, dx), _leave(lo_y, hi_y, dy))
        for i in range(r0, r1):
            dz = ray_dz[i]
            tn = _max(_enter(lo_z, hi_z, dz), side_n)
            if tn < _min(_leave(lo_z, hi_z, dz), side_f) and tn > 0 and tn < sbuf[i, j]:
                sbuf[i, j] = tn
                hitbox[i, j] = k


def f32(*values: float) -> tuple[np.float32, ...]:
    """Scalars as the kernels take them (numpy's float32 rounding of a Python float)."""
    return tuple(np.float32(v) for v in values)


@njit(**_OPTS)
def camera_ground(mat, h0, ground_t, col_d, row_d, col0, row0, codes):
    """The ground's raster codes into the camera's materials, rows h0 and below: row i's ray meets the ground
    at depth ground_t[i - h0], column j's at raster column ground_t * col_d[j] + col0 (truncated, clipped),
    raster row likewise."""
    h, w = codes.shape
    for i in range(h0, mat.shape[0]):
        t = ground_t[i - h0]
        for j in range(mat.shape[1]):
            col = np.int32(t * col_d[j] + col0)
            row = np.int32(t * row_d[j] + row0)
            col = min(max(col, 0), w - 1)
            row = min(max(row, 0), h - 1)
            mat[i, j] = codes[row, col]


@njit(**_OPTS)
def camera_finish(mat, zb, cls_lut, rgb_lut, sky):
    """The camera's three images from its materials and depth buffer: RGB and classes through the material
    tables, depth in centimetres (float32 zb * 100 + 0.5, truncated) with the sky (deeper than `sky` cm) at 0."""
    h, w = mat.shape
    rgb = np.empty((h, w, 3), dtype=np.uint8)
    labels = np.empty((h, w), dtype=np.uint8)
    depth = np.empty((h, w), dtype=np.uint16)
    hundred, half = np.float32(100.0), np.float32(0.5)
    for i in range(h):
        for j in range(w):
            m = mat[i, j]
            labels[i, j] = cls_lut[m]
            rgb[i, j, 0] = rgb_lut[m, 0]
            rgb[i, j, 1] = rgb_lut[m, 1]
            rgb[i, j, 2] = rgb_lut[m, 2]
            cm = zb[i, j] * hundred
            cm += half
            depth[i, j] = 0 if cm > sky else np.uint16(cm)
    return rgb, labels, depth


@njit(**_OPTS)
def bev_ground(bev_x, bev_y, c, s, off_x, off_y, res, codes, lut):
    """The BEV's ground: cell (r, q) at ego (bev_x[r], bev_y[q]) turned by the ego's heading (c, s), moved by
    (off_x, off_y) and scaled by 1/res into the ground raster, its code through `lut` (float64 throughout)."""
    h, w = codes.shape
    out = np.empty((bev_x.shape[0], bev_y.shape[0]), dtype=np.uint8)
    for r in range(bev_x.shape[0]):
        cx, sx = c * bev_x[r], s * bev_x[r]
        for q in range(bev_y.shape[0]):
            col = np.int32(((cx - s * bev_y[q]) + off_x) / res)
            row = np.int32(((sx + c * bev_y[q]) + off_y) / res)
            out[r, q] = lut[codes[min(max(row, 0), h - 1), min(max(col, 0), w - 1)]]
    return out


@njit(**_OPTS)
def _hidden(buf, r0, r1, c0, c1, nearest):
    """Whether everything drawn over rows r0:r1, columns c0:c1 of a depth buffer is nearer than `nearest` (> 0):
    a box whose nearest point is that far can change nothing there."""
    if not nearest > 0:
        return False
    deepest = buf[r0, c0]
    for i in range(r0, r1):
        for j in range(c0, c1):
            deepest = _max(deepest, buf[i, j])
    return deepest < nearest


@njit(**_OPTS)
def _box_params(out, xyz, yaw, half, x, y, z):
    """out[:] = (c, s, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z) of a box seen from the point (x, y, z) of its frame
    of reference: (c, s) its heading's cosine and sine, the slabs relative to the point turned into the box's
    frame (float64, rounded to float32 on storing, as np.array(..., dtype=np.float32) did)."""
    c, s = math.cos(yaw), math.sin(yaw)
    px, py = x - xyz[0], y - xyz[1]
    ox, oy, oz = c * px + s * py, -s * px + c * py, z - xyz[2]
    hx, hy, hz = half[0], half[1], half[2]
    out[0], out[1] = c, s
    out[2], out[3], out[4], out[5], out[6], out[7] = -hx - ox, hx - ox, -hy - oy, hy - oy, -hz - oz, hz - oz


@njit(**_OPTS)
def _clipped_rect(cx, cy, cz, near, edges, f, u0, v0, width, height):
    """Pixel rectangle (c0, c1, r0, r1) of a box reaching behind the camera: of its corners (cx, cy, cz in the
    camera frame: depth, right, up) in front of the near plane and its edges' crossings of that plane; (0, 0, 0,
    0) when nothing of it is in front."""
    umin = vmin = math.inf
    umax = vmax = -math.inf
    found = False
    for e in range(edges.shape[0] + cx.shape[0]):
        if e < cx.shape[0]:  # a corner in front
            if not cx[e] > near:
                continue
            px, py, pz = cx[e], cy[e], cz[e]
        else:  # an edge crossing the near plane, at the plane
            a, b = edges[e - cx.shape[0], 0], edges[e - cx.shape[0], 1]
            da, db = cx[a] - near, cx[b] - near
            if (da > 0) == (db > 0):
                continue
            t = da / (da - db)
            px, py, pz = near, cy[a] + t * (cy[b] - cy[a]), cz[a] + t * (cz[b] - cz[a])
        u = u0 + f * py / px
        v = v0 - f * pz / px
        umin, umax, vmin, vmax = min(umin, u), max(umax, u), min(vmin, v), max(vmax, v)
        found = True
    if not found:
        return 0, 0, 0, 0
    return (int(min(max(np.floor(umin), 0.0), width)), int(min(max(np.ceil(umax), 0.0), width)),
            int(min(max(np.floor(vmin), 0.0), height)), int(min(max(np.ceil(vmax), 0.0), height)))


@njit(**_OPTS)
def camera_plan(order, idx, dmin, umin, umax, vmin, vmax, cx, cy, cz, box_xyz, box_yaw, box_half, cam_x, cam_y,
                cam_z, f, u0, v0, width, height, near, edges):
    """The boxes a camera draws, as camera_boxes takes them: for each box idx[o] in `order` (near first) whose
    pixel rectangle is not empty, its rect, params (the camera's origin in the box's frame) and nearest depth.
    Corners cx, cy, cz (camera frame) and their projections' bounds umin .. vmax are per culled box `o`; a box
    reaching behind the camera (dmin <= near) gets the rectangle of its part in front (front_only)."""
    n = order.shape[0]
    rects = np.empty((n, 6), dtype=np.int64)
    params = np.empty((n, 8), dtype=np.float32)
    nearest = np.empty(n, dtype=np.float64)
    m = 0
    for o in order:
        behind = dmin[o] <= near
        if behind:
            c0, c1, r0, r1 = _clipped_rect(cx[o], cy[o], cz[o], near, edges, f, u0, v0, width, height)
        else:
            c0, c1 = max(int(umin[o]), 0), min(int(math.ceil(umax[o])), width)
            r0, r1 = max(int(vmin[o]), 0), min(int(math.ceil(vmax[o])), height)
        if c0 >= c1 or r0 >= r1:
            continue
        k = idx[o]
        rects[m, 0], rects[m, 1], rects[m, 2], rects[m, 3], rects[m, 4], rects[m, 5] = r0, r1, c0, c1, k, behind
        _box_params(params[m], box_xyz[k], box_yaw[k], box_half[k], cam_x, cam_y, cam_z)
        nearest[m] = dmin[o]
        m += 1
    return rects[:m], params[:m], nearest[:m]


@njit(**_OPTS)
def lidar_plan(order, idx, r0, r1, k0, k1, dnear, azimuths, box_xyz, box_yaw, box_half, x, z):
    """The spans a LiDAR casts, as lidar_boxes takes them: for each box idx[o] in `order` (near first) with rows
    r0[o]:r1[o] and azimuths k0[o]..k1[o] (wrapping around: two spans), its spans, params (the LiDAR's origin
    (x, 0, z) in the box's frame) and nearest horizontal distance."""
    n = order.shape[0]
    spans = np.empty((2 * n, 5), dtype=np.int64)
    params = np.empty((2 * n, 8), dtype=np.float32)
    nearest = np.empty(2 * n, dtype=np.float64)
    m = 0
    for o in order:
        if r0[o] >= r1[o] or k1[o] < k0[o]:
            continue
        count = min(k1[o] - k0[o] + 1, azimuths)
        a = k0[o] % azimuths
        k = idx[o]
        _box_params(params[m], box_xyz[k], box_yaw[k], box_half[k], x, 0.0, z)
        for piece in range(2):  # up to the last azimuth, then what wraps around from the first
            a0, a1 = (a, min(a + count, azimuths)) if piece == 0 else (0, a + count - azimuths)
            if a1 <= a0:
                continue
            spans[m, 0], spans[m, 1], spans[m, 2], spans[m, 3], spans[m, 4] = k, r0[o], r1[o], a0, a1
            params[m] = params[m - piece]
            nearest[m] = dnear[o]
            m += 1
    return spans[:m], params[:m], nearest[:m]


@njit(**_OPTS)
def camera_boxes(zb, mat, rects, params, nearest, faces, ray_dx, ray_dy, ray_dz):
    """camera_box for each box in turn (near first): rects[n] = (r0, r1, c0, c1, box, front_only), params[n] =
    (c, s, lo_x, hi_x, lo_y, hi_y, lo_z, hi_z), nearest[n] its nearest depth; a box wholly behind what is drawn
    already over its rectangle is skipped (it could change nothing)."""
    for n in range(rects.shape[0]):
        r0, r1, c0, c1, k, front_only = rects[n]
        if _hidden(zb, r0, r1, c0, c1, nearest[n]):
            continue
        p = params[n]
        camera_box(zb, mat, r0, r1, c0, c1, ray_dx, ray_dy, ray_dz, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7],
                   faces[k], front_only != 0)


@njit(**_OPTS)
def lidar_boxes(sbuf, hitbox, spans, params, nearest, ray_dx, ray_dy, ray_dz):
    """lidar_box for each span in turn (near boxes first): spans[n] = (box, r0, r1, a0, a1), params[n] as in
    camera_boxes, nearest[n] the box's nearest horizontal distance; a span whose rays all hit nearer already
    is skipped."""
    for n in range(spans.shape[0]):
        k, r0, r1, a0, a1 = spans[n]
        if _hidden(sbuf, r0, r1, a0, a1, nearest[n]):
            continue
        p = params[n]
        lidar_box(sbuf, hitbox, k, r0, r1, a0, a1, ray_dx, ray_dy, ray_dz, p[0], p[1], p[2], p[3], p[4], p[5], p[6],
                  p[7])


@njit(**_OPTS)
def lidar_points(sbuf, hitbox, smax, mount_x, mount_z, ray_dx, ray_dy, ray_dz, ray_sec, half_length, half_width,
                 height, box_cls, box_ids, ego_x, ego_y, c, s, x0, y0, res, codes, slot_cls):
    """The returns of a cast: every ray whose hit is within range (sbuf[i, j] <= smax[i]) and not inside the
    ego's box, in ray order, as float32 x, y, z (ego frame) and distance, and uint32 class and actor id: the
    hit box's, or on the ground the ground raster's class under the point (the ego at (ego_x, ego_y) heading
    (c, s); raster origin (x0, y0), `res` metres a cell)."""
    rows, cols = sbuf.shape
    n_max = rows * cols
    x = np.empty(n_max, dtype=np.float32)
    y = np.empty(n_max, dtype=np.float32)
    z = np.empty(n_max, dtype=np.float32)
    dist = np.empty(n_max, dtype=np.float32)
    cls = np.empty(n_max, dtype=np.uint32)
    ids = np.zeros(n_max, dtype=np.uint32)
    h, w = codes.shape
    n = 0
    for i in range(rows):
        for j in range(cols):
            t = sbuf[i, j]
            if not t <= smax[i]:
                continue
            px = mount_x + t * ray_dx[j]
            py = t * ray_dy[j]
            pz = mount_z + t * ray_dz[i]
            if abs(px) <= half_length and abs(py) <= half_width and pz <= height:
                continue  # a ray through the ego's own box
            x[n], y[n], z[n] = px, py, pz
            dist[n] = t * ray_sec[i]
            k = hitbox[i, j]
            if k >= 0:
                cls[n] = box_cls[k]
                ids[n] = box_ids[k]
            else:
                fx, fy = np.float64(px), np.float64(py)
                col = np.int64(((ego_x + c * fx - s * fy) - x0) / res)
                row = np.int64(((ego_y + s * fx + c * fy) - y0) / res)
                cls[n] = slot_cls[codes[min(max(row, 0), h - 1), min(max(col, 0), w - 1)]]
            n += 1
    return x[:n], y[:n], z[:n], dist[:n], cls[:n], ids[:n]
