"""The cache builder's inner loops, compiled with numba: the camera's Lanczos resize and the LiDAR binning.

`lanczos_resize` is Pillow's `Image.resize(size, LANCZOS, box=...)` of an 8-bit image: the same filter
weights, computed in the same double arithmetic with the C library's sin, turned into the same 22-bit
fixed-point integers, a horizontal pass over the rows the vertical pass needs, then the vertical pass,
each output the same integer sum clipped the same way (Pillow's libImaging/Resample.c). Pillow 13 takes
the two passes in the other order for some geometries (upscaling, mostly), which rounds differently, so
`resize_is_pillows` checks a geometry once against Pillow on a noise image and the caller uses Pillow
where they differ (tests/cache/test_cache.py: the camera geometries of the default rig are bit-identical).

`lidar_counts` counts points per cell of the two LiDAR channels: what the numpy version's cell index
(BevGrid.ego_to_pixel), mask, np.bincount and saturation did, in one pass without temporaries.
`label_samples` picks the semantic and depth pixels of the resized image through their lookup tables, as
`lut[image[rows][:, cols]]` did, without the two intermediate copies.

numba compiles them once and caches the machine code beside this file (or in the user's cache).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True}

_PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images
_LANCZOS_SUPPORT = 3.0


def _lanczos(x: float) -> float:
    def sinc(v: float) -> float:
        if v == 0.0:
            return 1.0
        v = v * math.pi
        return math.sin(v) / v

    return sinc(x) * sinc(x / 3) if -3.0 <= x < 3.0 else 0.0


@functools.lru_cache(maxsize=32)
def _coefficients(in_size: int, in0: float, in1: float, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's precompute_coeffs + normalize_coeffs_8bpc: (bounds (out, 2): first input pixel and count,
    kk (out, ksize): int64 weights in 1/2^22)."""
    scale = (in1 - in0) / out_size
    filterscale = max(scale, 1.0)
    support = _LANCZOS_SUPPORT * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    bounds = np.zeros((out_size, 2), dtype=np.int64)
    kk = np.zeros((out_size, ksize), dtype=np.int64)
    ss = 1.0 / filterscale
    for xx in range(out_size):
        center = in0 + (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        weights = [_lanczos((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = 0.0
        for w in weights:
            ww += w
        for x, w in enumerate(weights):
            k = w / ww if ww != 0.0 else w
            kk[xx, x] = int(-0.5 + k * (1 << _PRECISION_BITS)) if k < 0 else int(0.5 + k * (1 << _PRECISION_BITS))
        bounds[xx] = xmin, xmax
    return bounds, kk


@njit(**_OPTS)
def _pass(src, offset, bounds, kk):
    """One pass of Pillow's resampling along the first axis of a 2-D uint8 array: output row i is the
    fixed-point sum of the input rows bounds[i, 0] - offset .. + bounds[i, 1] weighted by kk[i], rounded
    and clipped as Pillow's clip8. Whole rows at a time, so the inner loop is contiguous (vectorized); the
    int32 sums are Pillow's `int`, the order of additions does not matter to an integer sum."""
    n = src.shape[1]
    out = np.empty((bounds.shape[0], n), np.uint8)
    acc = np.empty(n, np.int32)
    for i in range(bounds.shape[0]):
        acc[:] = 1 << 21
        first = bounds[i, 0] - offset
        for t in range(bounds[i, 1]):
            k = np.int32(kk[i, t])
            row = src[first + t]
            for j in range(n):
                acc[j] += np.int32(row[j]) * k
        for j in range(n):
            v = acc[j] >> 22
            out[i, j] = 0 if v < 0 else (255 if v > 255 else v)
    return out


@njit(**_OPTS)
def _swap(src):
    """(A, B, C) -> (B, A * C) uint8: the first two axes swapped, each pixel's C values kept together
    (numpy's transposed copy moves 3-byte pixels several times slower). Sixteen input rows at a time, so
    that the rows being read stay in cache; RGB spelled out (3 to 4 times faster than a loop over C)."""
    a, b, c = src.shape
    out = np.empty((b, a * c), np.uint8)
    for i0 in range(0, a, 16):
        i1 = min(i0 + 16, a)
        for j in range(b):
            if c == 3:
                for i in range(i0, i1):
                    out[j, i * 3] = src[i, j, 0]
                    out[j, i * 3 + 1] = src[i, j, 1]
                    out[j, i * 3 + 2] = src[i, j, 2]
            else:
                for i in range(i0, i1):
                    for k in range(c):
                        out[j, i * c + k] = src[i, j, k]
    return out


def lanczos_resize(image: np.ndarray, size: tuple[int, int], box: tuple[int, int, int, int]) -> np.ndarray:
    """Pillow's `Image.fromarray(image).resize(size, Image.Resampling.LANCZOS, box=box)` with the horizontal
    pass first, for a uint8 (H, W) or (H, W, C) image: `size` is (width, height), `box` (left, top, right,
    bottom) in pixels. Check the geometry with `resize_is_pillows` before relying on Pillow's pixels."""
    squeeze = image.ndim == 2
    src = np.ascontiguousarray(image[:, :, None] if squeeze else image, dtype=np.uint8)
    h, w, c = src.shape
    out_w, out_h = size
    left, top, right, bottom = (float(v) for v in box)
    if (out_w, out_h) == (w, h) and (left, top, right, bottom) == (0, 0, w, h):
        return src[:, :, 0].copy() if squeeze else src.copy()
    xb, xk = _coefficients(w, left, right, out_w)
    yb, yk = _coefficients(h, top, bottom, out_h)
    need_h = out_w != w or left != 0 or right != out_w
    need_v = out_h != h or top != 0 or bottom != out_h
    y0 = 0
    if need_h:  # over the rows the vertical pass reads, columns as rows (a transposed copy)
        y0, y_last = int(yb[0, 0]), int(yb[-1, 0] + yb[-1, 1])
        rows = y_last - y0
        columns = _pass(_swap(src[y0:y_last]), 0, xb, xk)  # (out_w, rows * c)
        src = _swap(columns.reshape(out_w, rows, c)).reshape(rows, out_w, c)
    if need_v:
        out = _pass(src.reshape(src.shape[0], -1), y0, yb, yk).reshape(out_h, out_w, c)
    else:
        out = src
    return out[:, :, 0] if squeeze else out


@functools.lru_cache(maxsize=32)
def resize_is_pillows(shape: tuple[int, ...], size: tuple[int, int], box: tuple[int, int, int, int]) -> bool:
    """Whether lanczos_resize gives Pillow's pixels for images of `shape` resized to `size` from `box`: the
    arithmetic depends on the geometry only, so a noise image (every weight matters) settles it."""
    from PIL import Image

    noise = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    pillow = np.asarray(Image.fromarray(noise).resize(size, Image.Resampling.LANCZOS, box=box))
    return bool(np.array_equal(lanczos_resize(noise, size, box), pillow))


@njit(**_OPTS)
def lidar_counts(points, half_width, ahead, resolution, split, g):
    """(2, g, g) uint8: LiDAR points (float32 (N, >=3), ego frame) per cell of a BEV grid, channel 1 where
    z > `split` (a float32, compared as numpy compares a float32 column with it), saturated at 255; points
    outside the grid are left out. The cell is BevGrid.ego_to_pixel's, floored: the same float64 operations."""
    counts = np.zeros(2 * g * g, np.int64)
    for i in range(points.shape[0]):
        c = int(math.floor((np.float64(points[i, 1]) + half_width) / resolution))
        r = int(math.floor((ahead - np.float64(points[i, 0])) / resolution))
        if 0 <= r < g and 0 <= c < g:
            counts[(g * g if points[i, 2] > split else 0) + r * g + c] += 1
    out = np.empty(2 * g * g, np.uint8)
    for i in range(2 * g * g):
        out[i] = min(counts[i], 255)
    return out.reshape(2, g, g)


@njit(**_OPTS)
def label_samples(semantics, depth, rows, cols, sem_lut, depth_lut):
    """(sem_lut[semantics[r, c]], depth_lut[depth[r, c]]) for r in `rows`, c in `cols`: the nearest-neighbour
    samples of the two label images, each through its table (depth_lut's values as unsigned 16-bit words)."""
    sem_out = np.empty((rows.shape[0], cols.shape[0]), np.uint8)
    depth_out = np.empty((rows.shape[0], cols.shape[0]), depth_lut.dtype)
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(cols.shape[0]):
            sem_out[i, j] = sem_lut[semantics[r, cols[j]]]
            depth_out[i, j] = depth_lut[depth[r, cols[j]]]
    return sem_out, depth_out
