"""The renderer's inner loops, compiled with numba: one box against a block of camera pixels or LiDAR rays.

Each kernel does, pixel by pixel, what the renderer's numpy expression of the slab test did over whole
arrays, in the same float32 operations in the same order (the scalars come in as float32, as numpy's weak
Python floats became float32 there), so the images are bit-identical to the numpy renderer's
(tests/test_render_golden.py pins them). The numpy version made a dozen temporary arrays per box; these make
none. numba compiles them once and caches the machine code beside this file (or in the user's cache).

A ray o + t*d meets the slab [-h, h] of one axis between (-h - o)/d and (h - o)/d; `lo` and `hi` below are
-h - o and h - o, computed in float64 and rounded to float32 once, as numpy did.
"""

from __future__ import annotations

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
