"""The training sample: what the cache holds for one recorded frame and what the training loop reads.

`CacheSettings` is the preprocessing configuration. The cache lives in a folder named after a hash of
these settings and the cache format version, so changing a setting builds a new cache beside the old.
Training and the cache builder both start from `CacheSettings()` unless told otherwise, so they agree.

One sample (numpy arrays and scalars), in the ego frame (x forward, y right, metres) of its frame:

| key               | dtype   | shape          | meaning |
|-------------------|---------|----------------|---------|
| rgb               | uint8   | (H, W, 3)      | front camera at the model's input size (image_width x image_height) |
| semantics         | uint8   | (H, W)         | training class ids 0..len(TRAIN_CLASSES)-1 (SEMANTIC_TO_TRAIN) |
| depth             | float16 | (H, W)         | metres along the optical axis, 0 for sky |
| lidar_bev         | uint8   | (2, G, G)      | LiDAR points per cell, below / above `lidar_split_height`, max 255 |
| bev               | uint8   | (G, G)         | BEV class ids (semantics.BEV_*), the grid of lidar_bev |
| waypoints         | float32 | (P, 2)         | the ego's future positions at frames i+1 .. i+P (`horizon` P) |
| waypoints_valid   | bool    | (P,)           | False past the end of the run |
| route             | float32 | (R, 2)         | route points ahead (`route_points` R, 2 m apart) |
| target_point      | float32 | (2,)           | the current target point |
| command           | int64   | ()             | command_index: 0 left 1 right 2 straight 3 follow 4,5 change lane |
| speed             | float32 | ()             | m/s |
| target_speed      | float32 | ()             | the expert's target speed, m/s |
| light_hazard      | bool    | ()             | |
| vehicle_hazard    | bool    | ()             | |
| overtake_offset   | float32 | ()             | the expert's driven path, m left of the route (OVERTAKE_AHEAD_M on) |
| boxes             | float32 | (N, 8)         | other vehicles: x, y, z, length, width, height, yaw (rad), class id |

The BEV grid of G x G cells (`CacheSettings.grid()`, a tools.dataset.geometry.BevGrid) covers
`bev_ahead` metres ahead of the ego and `bev_range - bev_ahead` behind, `bev_range / 2` to each side;
row 0 is the farthest ahead, column 0 the farthest left.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tools.dataset import semantics as S
from tools.dataset.codec import Spec
from tools.dataset.geometry import BevGrid

#: Bump when the content or encoding of a cached sample changes: a new cache folder follows.
#: 2: a record names the recorded attempt of its run it was made from (`run`, tools.dataset.cache).
#: 3: a record names the frame it was made from (`source` run, `index`, the frame's fingerprint `frame`), inside
#: its checksum. A cache of format 2 is still read (training, verify), its records' place unverified.
#: 4: a sample holds `overtake_offset` (the overtake head's label: the expert going round an obstacle). A cache of
#: format 3 is still read; a model trained on it has no overtake head.
CACHE_FORMAT = 4
#: Cache formats this tool reads (newest first): where no cache of the current format is there, an older one is.
READABLE_CACHE_FORMATS = (4, 3, 2)
#: The first cache format whose samples hold `overtake_offset`.
OVERTAKE_CACHE_FORMAT = 4
#: A sample's `overtake_offset` is measured this far along the expert's driven path from the ego, metres: near
#: enough that it says "going round now" (standing behind the obstacle, or beside it), not "somewhere ahead".
OVERTAKE_AHEAD_M = 6.0
#: The expert overtakes in a sample whose |overtake_offset| is at least this, metres (half a lane: its passes move a
#: whole lane, 3 to 3.5 m).
OVERTAKE_MIN_M = 1.5


def goes_round(offset: Any) -> Any:
    """Whether an overtake offset (a float, an array or a tensor of them, metres) is a pass: |offset| >= OVERTAKE_MIN_M.
    The label's rule (the head's loss and validation) and the driver's test of the head's offset."""
    return abs(offset) >= OVERTAKE_MIN_M
#: The most box rows a sample holds (actors within the recorder's 60 m: dense traffic is a few hundred).
MAX_BOXES = 4096

#: The classes the model's camera semantics head predicts.
TRAIN_CLASSES = ("other", "road", "roadline", "sidewalk", "building", "pole_sign_light", "vehicle", "vegetation",
                 "sky")
SEMANTIC_TO_TRAIN = [0] * 256
for _sem, _train in {
    S.ROAD: 1, S.ROADLINE: 2, S.SIDEWALK: 3, S.BUILDING: 4, S.WALL: 4, S.FENCE: 4, S.POLE: 5,
    S.TRAFFIC_LIGHT: 5, S.TRAFFIC_SIGN: 5, S.CAR: 6, S.TRUCK: 6, S.BUS: 6, S.MOTORCYCLE: 6, S.VEGETATION: 7,
    S.TERRAIN: 7,
    S.SKY: 8,
}.items():
    SEMANTIC_TO_TRAIN[_sem] = _train

#: BEV classes the model's BEV head predicts: the tools.dataset.semantics.BEV_* ids.
BEV_CLASSES = tuple(S.BEV_NAMES[i] for i in sorted(S.BEV_NAMES))


@dataclass(frozen=True)
class CacheSettings:
    camera: str = "front"  # which recorded camera feeds the model
    image_width: int = 256  # model input size; the recorded image is resized to it
    image_height: int = 128
    jpeg_quality: int = 93  # the cached RGB is stored as JPEG at the input size
    bev_pixels: int = 128  # G: cells per side of the LiDAR / BEV grid
    bev_range: float = 64.0  # metres per side of the grid
    bev_ahead: float = 48.0  # metres of the grid ahead of the ego
    lidar_split_height: float = 0.2  # metres above ground separating the two LiDAR channels
    horizon: int = 8  # future waypoints (at the 4 Hz recording rate: 2 s)
    route_points: int = 10  # route points ahead in a sample

    def __post_init__(self) -> None:
        checks = {
            "image_width": 16 <= self.image_width <= 4096,
            "image_height": 16 <= self.image_height <= 4096,
            "jpeg_quality": 50 <= self.jpeg_quality <= 100,
            "bev_pixels": 16 <= self.bev_pixels <= 1024,
            "bev_range": 8.0 <= self.bev_range <= 400.0,
            "bev_ahead": 0.0 < self.bev_ahead <= self.bev_range,
            "horizon": 1 <= self.horizon <= 100,
            "route_points": 1 <= self.route_points <= 20,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"cache setting {name}={getattr(self, name)!r} is out of range")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CacheSettings:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown cache setting(s) {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        return cls(**d)

    def grid(self) -> BevGrid:
        """The grid of `lidar_bev` and `bev`: bev_pixels cells of bev_range / bev_pixels metres, bev_ahead ahead."""
        return BevGrid(self.bev_pixels, self.bev_range / self.bev_pixels, self.bev_ahead)

    def sample_specs(self) -> dict[str, Spec]:
        """The dtype and shape of every key of a sample (the table above): what a record may declare, checked
        before its arrays are decoded."""
        h, w, g = self.image_height, self.image_width, self.bev_pixels
        scalar = {"command": "int64", "speed": "float32", "target_speed": "float32", "light_hazard": "bool",
                  "vehicle_hazard": "bool", "overtake_offset": "float32"}
        return {"rgb": Spec("uint8", (h, w, 3)), "semantics": Spec("uint8", (h, w)), "depth": Spec("float16", (h, w)),
                "lidar_bev": Spec("uint8", (2, g, g)), "bev": Spec("uint8", (g, g)),
                "waypoints": Spec("float32", (self.horizon, 2)), "waypoints_valid": Spec("bool", (self.horizon,)),
                "route": Spec("float32", (self.route_points, 2)), "target_point": Spec("float32", (2,)),
                **{name: Spec(dtype, ()) for name, dtype in scalar.items()},
                "boxes": Spec("float32", (-1, 8), MAX_BOXES)}

    def max_sample_bytes(self) -> int:
        """An upper bound of a sample's packed size: twice its arrays as raw bytes (a JPEG of noise may outgrow
        its pixels), and room for the blobs' maps."""
        total = 0
        for spec in self.sample_specs().values():
            rows = [spec.max_rows if n == -1 else n for n in spec.shape]
            total += 2 * math.prod(rows) * np.dtype(spec.dtype).itemsize + 256
        return total

    def key(self, cache_format: int = CACHE_FORMAT) -> str:
        """The cache folder's name: a hash of these settings and the cache format version (that of a cache of
        another readable format with `cache_format`)."""
        text = json.dumps({"format": cache_format, **self.to_dict()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
