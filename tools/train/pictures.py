"""Pictures of predictions: colourised semantics, BEV with waypoints (TensorBoard images, predictions.png)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from tools.dataset import semantics as S
from tools.dataset.samples import SEMANTIC_TO_TRAIN, TRAIN_CLASSES, CacheSettings

#: Colour of each training class: the colour of the first CARLA class that maps to it.
TRAIN_PALETTE = np.zeros((len(TRAIN_CLASSES), 3), dtype=np.uint8)
for _sem in range(255, -1, -1):
    TRAIN_PALETTE[SEMANTIC_TO_TRAIN[_sem]] = S.PALETTE[_sem]
TRAIN_PALETTE[0] = (0, 0, 0)

TRUE_COLOUR = (40, 220, 60)
PRED_COLOUR = (250, 40, 40)
BASELINE_COLOUR = (60, 160, 255)


def colour_semantics(ids: np.ndarray) -> np.ndarray:
    return TRAIN_PALETTE[np.clip(ids, 0, len(TRAIN_PALETTE) - 1)]


def colour_bev(ids: np.ndarray) -> np.ndarray:
    return S.BEV_PALETTE[ids.astype(np.uint8)]


def bev_pixel(points: np.ndarray, settings: CacheSettings) -> np.ndarray:
    """Ego-frame points (x forward, y right, metres) -> (column, row) on the samples' BEV grid
    (CacheSettings.grid, a tools.dataset.geometry.BevGrid)."""
    return settings.grid().ego_to_pixel(points)


def draw_points(image: Image.Image, points: np.ndarray, colour: tuple[int, int, int], settings: CacheSettings,
                scale: float, radius: float = 2.0) -> None:
    draw = ImageDraw.Draw(image)
    for col, row in bev_pixel(np.asarray(points, dtype=np.float64), settings) * scale:
        draw.ellipse([col - radius, row - radius, col + radius, row + radius], fill=colour)


def bev_with_waypoints(bev: np.ndarray, settings: CacheSettings, scale: int = 2, **tracks: np.ndarray) -> np.ndarray:
    """A BEV picture (scaled up) with point tracks drawn on it: true=..., pred=..., baseline=..."""
    image = Image.fromarray(colour_bev(bev)).resize((bev.shape[1] * scale, bev.shape[0] * scale), Image.NEAREST)
    colours = {"true": TRUE_COLOUR, "pred": PRED_COLOUR, "baseline": BASELINE_COLOUR}
    for name, points in tracks.items():
        if points is not None and len(points):
            draw_points(image, points, colours[name], settings, scale, radius=1.5 * scale)
    return np.asarray(image)


def overlay(rgb: np.ndarray, sem_ids: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    return (rgb.astype(np.float32) * (1 - alpha) + colour_semantics(sem_ids).astype(np.float32) * alpha).astype(
        np.uint8)


def label(image: np.ndarray, text: str) -> np.ndarray:
    pil = Image.fromarray(np.ascontiguousarray(image))
    draw = ImageDraw.Draw(pil)
    draw.rectangle([0, 0, 8 + 6 * len(text), 13], fill=(0, 0, 0))
    draw.text((4, 1), text, fill=(255, 255, 255))
    return np.asarray(pil)


def pad_to(image: np.ndarray, height: int, width: int) -> np.ndarray:
    out = np.zeros((height, width, 3), dtype=np.uint8)
    out[: image.shape[0], : image.shape[1]] = image
    return out


def grid(rows: list[list[np.ndarray]]) -> np.ndarray:
    """Tiles of different sizes in rows, padded with black."""
    height = [max(t.shape[0] for t in row) for row in rows]
    width = max(sum(t.shape[1] for t in row) for row in rows)
    lines = [pad_to(np.concatenate([pad_to(t, h, t.shape[1]) for t in row], axis=1), h, width)
             for row, h in zip(rows, height, strict=True)]
    return np.concatenate(lines, axis=0)


def prediction_panel(sample: dict[str, np.ndarray], pred: dict[str, np.ndarray], settings: CacheSettings,
                     baseline: np.ndarray | None = None) -> np.ndarray:
    """Camera with true / predicted semantics, depth, true / predicted BEV with waypoints.

    `sample` holds one frame's arrays (rgb, semantics, depth, bev, waypoints, waypoints_valid); `pred` the
    model's outputs for it as numpy (semantics and bev as class ids, depth in metres, waypoints)."""
    rgb = sample["rgb"]
    depth_true = np.clip(sample["depth"].astype(np.float32) / 50.0, 0, 1)
    depth_pred = np.clip(pred["depth"].astype(np.float32) / 50.0, 0, 1)
    grey = lambda d: (np.repeat(d[..., None], 3, axis=2) * 255).astype(np.uint8)  # noqa: E731
    valid = sample["waypoints_valid"].astype(bool)
    true_wp = sample["waypoints"][valid]
    tracks_pred = {"pred": pred.get("waypoints"), "baseline": baseline}
    rows = [
        [label(rgb, "camera"), label(overlay(rgb, sample["semantics"]), "true semantics"),
         label(overlay(rgb, pred["semantics"]), "predicted semantics")],
        [label(grey(depth_true), "true depth"), label(grey(depth_pred), "predicted depth")],
        [label(bev_with_waypoints(sample["bev"], settings, true=true_wp), "true BEV + waypoints (green)"),
         label(bev_with_waypoints(pred["bev"], settings, true=true_wp, **tracks_pred),
               "predicted BEV; red: planner, blue: constant velocity")],
    ]
    return grid(rows)
