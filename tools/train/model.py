"""A TransFuser-like driving model in plain torch.

    rgb (3xHxW) ---- camera stage 1 -- stage 2 -- stage 3 -- stage 4 --> semantics and depth decoders
                                         |           |          |
                                      fusion      fusion     fusion       (transformer over the tokens of
                                         |           |          |          both sensors, added back)
    lidar_bev (2xGxG) BEV stage 1 -- stage 2 -- stage 3 -- stage 4 --> BEV semantics decoder
                                                                |
                            pooled camera + BEV features, target point, speed, command --> planner
                                                                         (posttrain: waypoints, target speed, route)
    rgb ---- lamp head (a small network of its own, 23 x 23 pixels a place) --> does a light hold the ego?

As in TransFuser (Chitta et al., PAMI 2022), both feature maps are pooled to a small token grid at each
fused scale, concatenated with learned position embeddings, mixed by a few transformer layers, and the
result is upsampled and added back to each sensor's features. The planner is a GRU that outputs
waypoint deltas (each the constant-velocity step plus a learned correction), fed with its current
position, the target point and the speed at each of the P steps. The waypoints are `frame_dt` seconds
apart: the time between the recorded frames of the training cache, stored in the ModelConfig (and so
in every checkpoint), never assumed.

Inputs stay in their cached dtypes (uint8 images and rasters) and are normalised here, so that the data
loader does no arithmetic. Everything is in the ego frame: x forward, y right, metres.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tools.dataset.measurements import NUM_COMMANDS
from tools.dataset.samples import BEV_CLASSES, TRAIN_CLASSES, CacheSettings, goes_round
from tools.train.config import loss_names

RGB_MEAN = (0.485, 0.456, 0.406)
RGB_STD = (0.229, 0.224, 0.225)
LIDAR_SCALE = 8.0  # points per cell that count as "full"; the count is clipped there
DEPTH_UNIT = 10.0  # depth is predicted and compared in units of 10 m
DEPTH_MAX = 100.0  # metres; beyond is clipped
POS_SCALE = 10.0  # metres; the planner sees positions divided by this
OVERTAKE_SCALE = 3.0  # metres; the overtake head's offset is predicted in units of this (a lane is about 3.5 m)
SPEED_SCALE = 10.0  # m/s; also the speed whose one-frame step is the unit of the planner's deltas (step_scale)
#: The target speed classes (m/s) of the planner's target-speed head, as TransFuser++ (Jaeger et al., ICCV
#: 2023) predicts target speed: a distribution over these, trained on the expert's target speed spread over
#: its two neighbouring classes (two-hot), read as its expectation. Fine at the bottom, where the expert's
#: target ramps up from a stop (its speed plus at most 1 m/s); 14 covers the 50 km/h limit (13.9 m/s).
#: An L1 regression (the head before) predicts the median: standing still, where most frames wait, that
#: is 0 even when a fifth of them pull away (docs/training.md, "Why the policy stopped").
SPEED_CLASSES = (0.0, 0.5, 1.0, 2.0, 3.0, 4.5, 6.0, 8.0, 10.0, 12.0, 14.0)
#: The camera stage (0-based, stride 4 * 2**stage) the light head reads.
LIGHT_STAGE = 2
#: The score of every place of the light and overtake heads before training, each a rare call (a logit: -4 is a
#: probability of 0.018).
RARE_PRIOR_LOGIT = -4.0
#: The light head's probability above which a light holds the ego: a call in validation, a stop for the driver.
LIGHT_STOP_P = 0.5
#: What the light head reads: "image", a small network of its own on the camera image (LampHead); "fused", the
#: camera's fused features at LIGHT_STAGE (LightHead: checkpoints written before the lamp head).
LIGHT_INPUTS = ("image", "fused")
#: The lamp head's channels: a 3 x 3 convolution to stride 2, one to stride 4, then two more at stride 4: each place
#: sees 23 x 23 pixels of the image, at 256 x 128 a light 20 m away (2 x 6 pixels) and what is round it.
LAMP_CHANNELS = (16, 32)
#: The BEV stage (0-based, cells of 0.5 m * 2**(stage+1)) the overtake head reads: 4 m places, an obstacle's size.
OVERTAKE_STAGE = 2
#: The overtake head's probability above which the expert would go round an obstacle here: a call in validation, a
#: move into the next lane for the driver.
OVERTAKE_P = 0.5


@dataclass(frozen=True)
class ModelConfig:
    """The architecture. Stored in every checkpoint: a resumed run rebuilds exactly this model."""

    channels: tuple[int, ...] = (16, 32, 64, 128)  # per encoder stage (camera and BEV alike)
    blocks: int = 1  # residual blocks per stage after its downsampling conv
    fused_stages: tuple[int, ...] = (1, 2, 3)  # stages (0-based) followed by a fusion transformer
    fusion_layers: int = 1  # transformer layers per fusion
    fusion_heads: int = 4
    image_tokens: tuple[int, int] = (4, 8)  # token grid (rows, cols) of the camera at each fusion
    bev_tokens: tuple[int, int] = (4, 4)  # token grid of the BEV at each fusion
    decoder_channels: int = 16  # width of the semantics, depth and BEV decoders
    planner_hidden: int = 64  # GRU width of the planner
    planner_dropout: float = 0.5  # dropout on the planner's scene feature
    image_size: tuple[int, int] = (128, 256)  # (height, width) of rgb
    bev_pixels: int = 128  # G
    semantic_classes: int = len(TRAIN_CLASSES)
    bev_classes: int = len(BEV_CLASSES)
    horizon: int = 8  # P waypoints
    route_points: int = 10  # R route points
    # The target-speed head's classes (m/s, increasing, the first 0); empty: one regressed value (L1), what
    # checkpoints written before the classes hold (from_dict reads a missing key so).
    speed_classes: tuple[float, ...] = SPEED_CLASSES
    # The light head (LampHead, or LightHead: light_input): whether a light holds the ego (the frame's light_hazard);
    # False in checkpoints written before it (from_dict reads a missing key so).
    light_head: bool = True
    # What the light head reads (LIGHT_INPUTS); "fused" in checkpoints written before the lamp head (from_dict reads a
    # missing key so).
    light_input: str = "image"
    # The overtake head (OvertakeHead): whether, and how far to which side, the expert leaves the route's lane to go
    # round an obstacle (the sample's overtake_offset, cache format 4 on); False in checkpoints written before it and
    # for a cache without the label (from_dict reads a missing key so; tools.train.loop).
    overtake_head: bool = True
    # Seconds between two waypoints: the time between the recorded frames of the cache the model was
    # trained on (tools.dataset.cache.read_frame_dt). No default: no stage assumes a recording rate.
    frame_dt: float = dataclasses.field(kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.frame_dt, bool) or not isinstance(self.frame_dt, int | float) or not self.frame_dt > 0:
            raise ValueError(f"model config: frame_dt={self.frame_dt!r}, expected seconds > 0")
        c = self.speed_classes
        if c and (len(c) < 2 or c[0] != 0 or any(b <= a for a, b in zip(c, c[1:], strict=False))):
            raise ValueError(f"model config: speed_classes={c!r}, expected increasing speeds from 0 (or none)")
        if self.light_input not in LIGHT_INPUTS:
            raise ValueError(f"model config: light_input={self.light_input!r}, expected one of "
                             f"{', '.join(LIGHT_INPUTS)}")

    @property
    def step_scale(self) -> float:
        """Metres per frame at SPEED_SCALE: the unit of the planner's waypoint deltas."""
        return SPEED_SCALE * self.frame_dt

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """A stored architecture (a checkpoint's `model_config`); ValueError naming missing or unknown keys."""
        fields = dataclasses.fields(cls)
        missing = [f.name for f in fields if f.name not in d and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        unknown = sorted(set(d) - {f.name for f in fields})
        if missing or unknown:
            problems = ([f"missing {', '.join(missing)}"] if missing else []) + \
                ([f"unknown {', '.join(unknown)}"] if unknown else [])
            raise ValueError(f"model config: {'; '.join(problems)}")
        d = {"speed_classes": [], "light_head": False, "overtake_head": False, "light_input": "fused",
             **d}  # written before these
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def model_config(preset: str, settings: CacheSettings, frame_dt: float) -> ModelConfig:
    """The tiny (CPU) or full (GPU) preset for samples made with these cache settings, whose frames are
    `frame_dt` seconds apart (the cache's, tools.dataset.cache.read_frame_dt)."""
    data = dict(image_size=(settings.image_height, settings.image_width), bev_pixels=settings.bev_pixels,
                horizon=settings.horizon, route_points=settings.route_points, frame_dt=frame_dt)
    if preset == "tiny":
        return ModelConfig(**data)
    if preset == "full":
        return ModelConfig(channels=(64, 128, 256, 512), blocks=2, fused_stages=(0, 1, 2, 3), fusion_layers=2,
                           fusion_heads=8, image_tokens=(5, 20), bev_tokens=(8, 8), decoder_channels=64,
                           planner_hidden=256, **data)
    raise ValueError(f"unknown model preset {preset!r}")


def conv_bn(cin: int, cout: int, stride: int = 1, kernel: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


def with_coordinates(x: torch.Tensor) -> torch.Tensor:
    """`x` ((N, C, H, W)) with two channels more: each place's row and column, from -1 to 1 (a head that must know
    where in the map or image a place is)."""
    n, _, h, w = x.shape
    rows = torch.linspace(-1.0, 1.0, h, device=x.device, dtype=x.dtype).view(1, 1, h, 1).expand(n, 1, h, w)
    cols = torch.linspace(-1.0, 1.0, w, device=x.device, dtype=x.dtype).view(1, 1, 1, w).expand(n, 1, h, w)
    return torch.cat([x, rows, cols], dim=1)


class ResBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv1 = conv_bn(c, c)
        self.conv2 = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.conv2(self.conv1(x)))


class Encoder(nn.Module):
    """A stride-4 stem (stage 0), then one stride-2 stage per further channel count."""

    def __init__(self, cin: int, channels: tuple[int, ...], blocks: int):
        super().__init__()
        stages = []
        for i, c in enumerate(channels):
            first = conv_bn(cin, c, stride=4, kernel=4) if i == 0 else conv_bn(channels[i - 1], c, stride=2)
            stages.append(nn.Sequential(first, *[ResBlock(c) for _ in range(blocks)]))
        self.stages = nn.ModuleList(stages)


class Fusion(nn.Module):
    """TransFuser's GPT fusion at one scale: pool both maps to token grids, mix, upsample, add back."""

    def __init__(self, c: int, image_tokens: tuple[int, int], bev_tokens: tuple[int, int], layers: int, heads: int):
        super().__init__()
        self.image_tokens, self.bev_tokens = image_tokens, bev_tokens
        n = image_tokens[0] * image_tokens[1] + bev_tokens[0] * bev_tokens[1]
        self.pos = nn.Parameter(torch.zeros(1, n, c))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(c, heads, 4 * c, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c)

    def forward(self, img: torch.Tensor, bev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c = img.shape[:2]
        ti = F.adaptive_avg_pool2d(img, self.image_tokens).flatten(2)
        tb = F.adaptive_avg_pool2d(bev, self.bev_tokens).flatten(2)
        tokens = torch.cat([ti, tb], dim=2).transpose(1, 2) + self.pos  # (B, N, C)
        tokens = self.norm(self.blocks(tokens)).transpose(1, 2)
        ni = ti.shape[2]
        oi = tokens[:, :, :ni].reshape(b, c, *self.image_tokens)
        ob = tokens[:, :, ni:].reshape(b, c, *self.bev_tokens)
        img = img + F.interpolate(oi, size=img.shape[2:], mode="bilinear", align_corners=False)
        bev = bev + F.interpolate(ob, size=bev.shape[2:], mode="bilinear", align_corners=False)
        return img, bev


class Decoder(nn.Module):
    """Feature pyramid top-down path to stride 4, a conv, a 1x1 to `out` maps, bilinear up to full size."""

    def __init__(self, channels: tuple[int, ...], width: int, out: int):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, width, 1) for c in channels)
        self.head = nn.Sequential(conv_bn(width, width), nn.Conv2d(width, out, 1))

    def forward(self, feats: list[torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        x = self.lateral[-1](feats[-1])
        for lateral, f in zip(reversed(self.lateral[:-1]), reversed(feats[:-1]), strict=True):
            x = lateral(f) + F.interpolate(x, size=f.shape[2:], mode="nearest")
        return F.interpolate(self.head(x), size=size, mode="bilinear", align_corners=False)


class LightHead(nn.Module):
    """Does a red or yellow light hold the ego (the frame's `light_hazard`)? One logit from the camera's fused
    features at stride 16 (a lamp 20 m away is 2 x 6 pixels of the 256 x 128 image): a score per place, and the
    highest counts, as a lamp anywhere in view can be the one. Trained in both phases (a perception loss); the
    driver stops for it (tools.evaluate.driver). The light head of checkpoints written before LampHead
    (`ModelConfig.light_input` "fused")."""

    def __init__(self, c: int, width: int):
        super().__init__()
        self.score = nn.Sequential(conv_bn(c, width), nn.Conv2d(width, 1, 1))
        # Untrained, it says "no light" (a probability of about 0.02 at every place, as RetinaNet starts its
        # classifier at its prior): a score near 0 is 0.5, and the highest of many is above it, so a model trained for a
        # few steps stood still at every light-less frame (its driver stops above 0.5).
        nn.init.constant_(self.score[-1].bias, RARE_PRIOR_LOGIT)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.score(img).flatten(1).amax(dim=1)


class LampHead(nn.Module):
    """Does a red or yellow light hold the ego (the frame's `light_hazard`)? The light head of models since the tenth
    session (`ModelConfig.light_input` "image"): a small network of its own on the camera image whose every place sees
    23 x 23 pixels (LAMP_CHANNELS), a light's head and what is round it, told where in the image it is (coordinate
    channels); a score per place, the highest counts. LightHead, on the fused features at stride 16, sees the whole
    scene through the fusion: on the demo's 3,245 training frames it learnt where the expert had stood at red lights,
    not the lamp, and said 0.00 driving at 9 m/s towards a red light of a held-out route (docs/training.md "Red
    lights: a lamp head")."""

    def __init__(self):
        super().__init__()
        a, b = LAMP_CHANNELS
        self.trunk = nn.Sequential(conv_bn(3, a, stride=2), conv_bn(a, b, stride=2), conv_bn(b, b), conv_bn(b, b))
        self.score = nn.Conv2d(b + 2, 1, 1)
        nn.init.constant_(self.score.bias, RARE_PRIOR_LOGIT)  # untrained: "no light" (LightHead)

    def scores(self, rgb: torch.Tensor) -> torch.Tensor:
        """The score of every place ((B, H/4, W/4)) of the normalised image `rgb` ((B, 3, H, W))."""
        return self.score(with_coordinates(self.trunk(rgb))).squeeze(1)

    def forward(self, rgb: torch.Tensor) -> torch.Tensor:
        return self.scores(rgb).flatten(1).amax(dim=1)


class OvertakeHead(nn.Module):
    """Would the expert go round an obstacle here, and by how much to which side (the sample's `overtake_offset`: its
    driven path OVERTAKE_AHEAD_M ahead, left of the route; the route points stay in the blocked lane)? From the BEV's
    fused features at OVERTAKE_STAGE, each place told where it is (the obstacle must be in the ego's lane, ahead): a
    logit and an offset per place; the place of the highest logit counts, as the light head's lamp. The pooled
    features the planner reads do not place an obstacle in the lane (it predicted the route straight through the
    accident it stood behind: docs/training.md "The field's protocol with today's rules"). Trained in both phases; the
    driver moves into the next lane while it fires (tools.evaluate.driver; docs/training.md "Overtaking")."""

    def __init__(self, c: int, width: int):
        super().__init__()
        self.score = nn.Sequential(conv_bn(c + 2, width), nn.Conv2d(width, 2, 1))
        nn.init.constant_(self.score[-1].bias[:1], RARE_PRIOR_LOGIT)  # untrained: "no obstacle to go round"

    def forward(self, bev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.score(with_coordinates(bev)).flatten(2)  # (N, 2, places)
        logit, place = out[:, 0].max(dim=1)
        return logit, out[:, 1].gather(1, place[:, None]).squeeze(1) * OVERTAKE_SCALE


class Planner(nn.Module):
    """Waypoints (a GRU emitting deltas), target speed and route points from the fused features."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, h = cfg.channels[-1], cfg.planner_hidden
        self.horizon, self.route_points = cfg.horizon, cfg.route_points
        # The scene is the globally pooled camera and BEV features. A flattened BEV map (where things
        # are) made the tiny planner memorise the training routes: on a held-out route it predicted
        # driving on at red lights (docs/training.md, "What the planner learns").
        self.scene = nn.Sequential(nn.Linear(2 * c, h), nn.ReLU(inplace=True))
        self.measurements = nn.Sequential(nn.Linear(2 + 1 + NUM_COMMANDS, h), nn.ReLU(inplace=True))
        # Dropout on the scene: with few routes the planner otherwise memorises scenes (when *this*
        # light turns green) instead of leaning on what generalises (speed, target point, command).
        self.scene_dropout = nn.Dropout(cfg.planner_dropout)
        self.join = nn.Sequential(nn.Linear(2 * h, h), nn.ReLU(inplace=True), nn.Linear(h, h))
        self.gru = nn.GRUCell(5, h)
        self.delta = nn.Linear(h, 2)
        nn.init.zeros_(self.delta.weight)  # start as the constant-velocity rollout
        nn.init.zeros_(self.delta.bias)
        self.frame_dt, self.step_scale = cfg.frame_dt, cfg.step_scale
        self.target_speed = nn.Linear(h, max(len(cfg.speed_classes), 1))
        self.register_buffer("speed_classes", torch.tensor(cfg.speed_classes, dtype=torch.float32), persistent=False)
        self.route = nn.Linear(h, 2 * cfg.route_points)

    def forward(self, img: torch.Tensor, bev: torch.Tensor, target_point: torch.Tensor, speed: torch.Tensor,
                command: torch.Tensor) -> dict[str, torch.Tensor]:
        scene = self.scene(torch.cat([img.mean(dim=(2, 3)), bev.mean(dim=(2, 3))], dim=1))
        tp = target_point / POS_SCALE
        meas = torch.cat([tp, (speed / SPEED_SCALE)[:, None],
                          F.one_hot(command.clamp(0, NUM_COMMANDS - 1), NUM_COMMANDS).to(tp.dtype)], dim=1)
        z = self.join(torch.cat([self.scene_dropout(scene), self.measurements(meas)], dim=1))
        v = (speed / SPEED_SCALE)[:, None]
        # Each step moves by the constant-velocity step (the current speed straight ahead) plus a learned
        # correction: the GRU learns how the expert departs from it (braking, turning, starting).
        cv_step = torch.zeros_like(tp)
        cv_step[:, 0] = speed * self.frame_dt
        x = torch.zeros_like(tp)
        waypoints = []
        for _ in range(self.horizon):
            # Each step sees where it is, where the target point is, and how fast the car goes now.
            z = self.gru(torch.cat([x / POS_SCALE, tp, v], dim=1), z)
            x = x + cv_step + self.step_scale * self.delta(z)
            waypoints.append(x)
        out = {"waypoints": torch.stack(waypoints, dim=1), "route": self.route(z).view(-1, self.route_points, 2)}
        speed_logits = self.target_speed(z)
        if len(self.speed_classes):
            out["target_speed_logits"] = speed_logits
            out["target_speed_classes"] = self.speed_classes.expand(len(speed_logits), -1)  # for the loss
            out["target_speed"] = speed_logits.float().softmax(-1) @ self.speed_classes  # the expectation
        else:
            out["target_speed"] = speed_logits.squeeze(1)
        return out


class TransFuser(nn.Module):
    def __init__(self, cfg: ModelConfig, planner: bool = False):
        super().__init__()
        self.cfg = cfg
        self.image_encoder = Encoder(3, cfg.channels, cfg.blocks)
        self.bev_encoder = Encoder(2, cfg.channels, cfg.blocks)
        self.fusions = nn.ModuleDict({
            str(s): Fusion(cfg.channels[s], cfg.image_tokens, cfg.bev_tokens, cfg.fusion_layers, cfg.fusion_heads)
            for s in cfg.fused_stages})
        self.semantics = Decoder(cfg.channels, cfg.decoder_channels, cfg.semantic_classes)
        self.depth = Decoder(cfg.channels, cfg.decoder_channels, 1)
        self.bev = Decoder(cfg.channels, cfg.decoder_channels, cfg.bev_classes)
        self.light = (None if not cfg.light_head else LampHead() if cfg.light_input == "image"
                      else LightHead(cfg.channels[LIGHT_STAGE], cfg.decoder_channels))
        self.overtake = OvertakeHead(cfg.channels[OVERTAKE_STAGE], cfg.decoder_channels) if cfg.overtake_head else None
        self.planner = Planner(cfg) if planner else None
        self.register_buffer("rgb_mean", torch.tensor(RGB_MEAN).view(1, 3, 1, 1) * 255, persistent=False)
        self.register_buffer("rgb_std", torch.tensor(RGB_STD).view(1, 3, 1, 1) * 255, persistent=False)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rgb = (batch["rgb"].permute(0, 3, 1, 2).float() - self.rgb_mean) / self.rgb_std
        img = rgb
        bev = batch["lidar_bev"].float().clamp(max=LIDAR_SCALE) / LIDAR_SCALE
        img_feats, bev_feats = [], []
        for s, (img_stage, bev_stage) in enumerate(zip(self.image_encoder.stages, self.bev_encoder.stages,
                                                       strict=True)):
            img, bev = img_stage(img), bev_stage(bev)
            if str(s) in self.fusions:
                img, bev = self.fusions[str(s)](img, bev)
            img_feats.append(img)
            bev_feats.append(bev)
        size, g = self.cfg.image_size, self.cfg.bev_pixels
        out = {
            "semantics": self.semantics(img_feats, size),
            "depth": self.depth(img_feats, size).squeeze(1),
            "bev": self.bev(bev_feats, (g, g)),
        }
        if self.light is not None:
            out["light"] = self.light(rgb if isinstance(self.light, LampHead) else img_feats[LIGHT_STAGE])
        if self.overtake is not None:
            out["overtake"], out["overtake_offset"] = self.overtake(bev_feats[OVERTAKE_STAGE])
        if self.planner is not None:
            out.update(self.planner(img, bev, batch["target_point"].float(), batch["speed"].float(),
                                    batch["command"].long()))
        return out


def compute_losses(out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                   weights: dict[str, float]) -> dict[str, torch.Tensor]:
    """The loss of each head (unweighted; config.LOSSES names them, the planner's only when `out` has
    waypoints, the light head's when it has a light) and their weighted sum under "loss"."""
    losses = {
        "semantics": F.cross_entropy(out["semantics"].float(), batch["semantics"].long()),
        "bev": F.cross_entropy(out["bev"].float(), batch["bev"].long()),
    }
    depth = batch["depth"].float()
    valid = depth > 0
    err = (out["depth"].float() - depth.clamp(max=DEPTH_MAX) / DEPTH_UNIT).abs()
    losses["depth"] = (err * valid).sum() / valid.sum().clamp(min=1)
    if "light" in out:
        losses["light"] = F.binary_cross_entropy_with_logits(out["light"].float(), batch["light_hazard"].float())
    if "overtake" in out:  # whether the expert goes round (goes_round), then how far (L1, metres)
        offset = batch["overtake_offset"].float()
        goes = goes_round(offset).float()
        err = (out["overtake_offset"].float() - offset).abs()
        losses["overtake"] = F.binary_cross_entropy_with_logits(out["overtake"].float(), goes) + \
            (err * goes).sum() / goes.sum().clamp(min=1)
    if "waypoints" in out:
        wvalid = batch["waypoints_valid"].bool()
        werr = (out["waypoints"].float() - batch["waypoints"].float()).abs().sum(-1)
        losses["waypoints"] = (werr * wvalid).sum() / wvalid.sum().clamp(min=1)
        if "target_speed_logits" in out:  # cross-entropy with the two-hot label over the classes
            logits = out["target_speed_logits"].float()
            label = two_hot(batch["target_speed"].float(), out["target_speed_classes"][0])
            losses["target_speed"] = -(label * logits.log_softmax(-1)).sum(-1).mean()
        else:
            losses["target_speed"] = F.l1_loss(out["target_speed"].float(), batch["target_speed"].float())
        losses["route"] = F.l1_loss(out["route"].float(), batch["route"].float())
    losses = {name: losses[name] for name in loss_names("waypoints" in out, "light" in out, "overtake" in out)}
    losses["loss"] = sum(weights[name] * value for name, value in losses.items())
    return losses


def two_hot(value: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """(B,) values as (B, K) distributions over the increasing `classes`: each value split between its two
    neighbouring classes in proportion to how close it is to each (its expectation is the value, clipped to
    the classes' range)."""
    value = value.clamp(float(classes[0]), float(classes[-1]))
    upper = torch.searchsorted(classes, value.contiguous(), right=True).clamp(1, len(classes) - 1)
    lo, hi = classes[upper - 1], classes[upper]
    w_hi = ((value - lo) / (hi - lo)).clamp(0, 1)
    label = torch.zeros(len(value), len(classes), device=value.device)
    label.scatter_(1, (upper - 1)[:, None], (1 - w_hi)[:, None])
    label.scatter_add_(1, upper[:, None], w_hi[:, None])
    return label


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
