"""A trained checkpoint as a driving policy: one frame's sensors and measurements in, a plan out.

Closed-loop evaluation renders the sensors of the policy's rig for every recorded frame
(`tools.collect.sensors.render.Renderer(scene, policy.rig).render(snapshot)`, arrays by sensor name) and builds
the frame's `Measurements` as collection does; `Policy.predict` turns them into a `Plan` with the
post-trained model. The input goes the way of a training sample: the cache's `Preprocessor`, the
cache record's encoding (the model trained on JPEG-decoded images, so it sees one here too) and the
training batch's collation, so nothing of the preprocessing is spelled twice.

What driving needs besides the weights and the architecture, training records in every checkpoint's
config.json under `trained_on` (tools/train/loop.py `trained_on`): the CacheSettings of the cache it
trained on, the rig of its training runs (what the renderer must make) and their towns.

Bad input is one ToolError line naming `--checkpoint`, what is wrong and the fix. The model runs on the
CPU in float32, one frame at a time, on one thread (several evaluation workers run side by side).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tools.cache.preprocess import Preprocessor
from tools.core.errors import ToolError
from tools.dataset import semantics as S
from tools.dataset.cache import decode_record, encode_record
from tools.dataset.frames import FrameError
from tools.dataset.measurements import Measurements
from tools.dataset.rig import RigConfig
from tools.dataset.samples import CacheSettings
from tools.train import checkpoint
from tools.train.checkpoint import CheckpointError
from tools.train.data import collate
from tools.train.model import ModelConfig, TransFuser

FLAG = "--checkpoint"
#: The BEV classes that stand in the ego's way (Plan.agents): vehicles, pedestrians and cyclists, static obstacles.
AGENT_CLASSES = (S.BEV_VEHICLE, S.BEV_PEDESTRIAN, S.BEV_OBSTACLE)
#: A BEV cell holds an agent where the BEV head gives AGENT_CLASSES together at least this probability (the value the
#: driver's agent rule was measured with, docs/training.md "Vehicle collisions"). It is also their share of a uniform
#: guess over the ten classes: a barely trained BEV head puts agents about everywhere.
AGENT_P = 0.3
#: The BEV classes of a stop line whose light holds the ego (Plan.red_lines): red and yellow. Their cells are found as
#: the agents' are (together at least AGENT_P).
HOLD_CLASSES = (S.BEV_LIGHT_RED, S.BEV_LIGHT_YELLOW)
#: The keys of a batch the driving model reads (tools.train.model TransFuser.forward); the rest are labels.
MODEL_INPUTS = ("rgb", "lidar_bev", "target_point", "speed", "command")


@dataclass(frozen=True)
class Plan:
    waypoints: np.ndarray  # (H, 2) float, ego frame (x forward, y right, metres), one per frame_dt
    target_speed: float  # m/s, the model's predicted target speed (clamped >= 0)
    route: np.ndarray  # (R, 2) float, ego frame: the predicted path ahead (the route's next points, 2 m apart)
    light: float | None = None  # the light head's probability that a red or yellow light holds the ego (None: no head)
    #: (N, 2) ego frame: the centres of the BEV cells where the BEV head predicts an agent (AGENT_CLASSES, AGENT_P)
    agents: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2)))
    #: (N, 2) ego frame: the centres of the BEV cells where the BEV head predicts a red or yellow stop line
    #: (HOLD_CLASSES, AGENT_P)
    red_lines: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2)))
    #: the overtake head's probability that the expert would go round an obstacle here (None: no head), and how far
    #: left of the route (metres; right: negative) it would drive
    overtake: float | None = None
    overtake_offset: float = 0.0


class Policy:
    """A post-trained model with the preprocessing and rig it was trained with; made by `load_policy`."""

    def __init__(self, path: Path, model: TransFuser, preprocessor: Preprocessor, towns: frozenset[str]):
        self.path = path  # the resolved, verified step folder
        self.rig: RigConfig = preprocessor.rig  # the sensors the renderer must make
        self.frame_dt: float = model.cfg.frame_dt  # seconds between the waypoints (and the training frames)
        self.towns = towns  # town names of the training runs (empty when unknown)
        self.sensor_names: list[str] = list(preprocessor.sensor_names)  # what predict() needs in `sensors`
        self.camera: str = preprocessor.settings.camera  # the rig camera the model sees
        self._model, self._pre = model, preprocessor

    def predict(self, sensors: dict[str, np.ndarray], m: Measurements) -> Plan:
        """The plan for one frame: `sensors` by name (at least `sensor_names`), `m` its measurements."""
        batch = self.batch(sensors, m)
        with torch.inference_mode():
            out = self._model(batch)
        waypoints = out["waypoints"][0].double().numpy()
        light = float(torch.sigmoid(out["light"][0])) if "light" in out else None
        overtake, offset = (float(torch.sigmoid(out["overtake"][0])), float(out["overtake_offset"][0])) \
            if "overtake" in out else (None, 0.0)
        bev = out["bev"][0].float().softmax(0)
        return Plan(waypoints=waypoints, target_speed=max(0.0, float(out["target_speed"][0])),
                    route=out["route"][0].double().numpy(), light=light, overtake=overtake,
                    overtake_offset=offset,
                    agents=self._cells(bev[list(AGENT_CLASSES)].sum(0).numpy() >= AGENT_P),
                    red_lines=self._cells(bev[list(HOLD_CLASSES)].sum(0).numpy() >= AGENT_P))

    def _cells(self, mask: np.ndarray) -> np.ndarray:
        """The ego-frame centres ((N, 2)) of the BEV cells where `mask` ((G, G), the BEV's rows and columns) holds."""
        rows, cols = np.nonzero(mask)
        return self._pre.grid.pixel_to_ego(cols + 0.5, rows + 0.5)

    def batch(self, sensors: dict[str, np.ndarray], m: Measurements) -> dict[str, torch.Tensor]:
        """The model's batch of one frame, as `predict` hands it over (MODEL_INPUTS are what the model reads)."""
        frame = {"measurements": m.to_dict(), "sensors": sensors, "boxes": []}
        try:
            sample = self._pre(frame, [])  # no future: the waypoint targets are not needed to drive
        except FrameError as e:
            raise ToolError(f"policy {self.path}: {e}; render the sensors of its rig ({', '.join(self.sensor_names)})"
                            ) from None
        sample = decode_record(encode_record(sample, self._pre.settings.jpeg_quality))
        return collate([{**sample, "rebuilt": 0, "replaced": 0}])  # a batch of one, as training makes it


def load_policy(path: str | Path) -> Policy:
    """The policy of a post-training checkpoint: a training run folder (its newest intact checkpoint) or
    one of its step folders."""
    path = Path(path).expanduser().absolute()
    if not path.exists():
        raise ToolError(f"{FLAG} {path}: no such file or folder; give a post-training run folder "
                        "(outputs/posttrain) or one of its checkpoints/step-N folders")
    try:
        step = checkpoint.resolve(path)
        if step is None:
            raise ToolError(f"{FLAG} {path}: no complete intact checkpoint under it; give a post-training run "
                            "folder or step folder (bin/train posttrain writes them)")
        stored = checkpoint.load_model_only(step)
    except CheckpointError as e:
        raise ToolError(f"{FLAG}: damaged checkpoint: {e}; give another step folder, or the run folder (its "
                        "newest intact checkpoint is used)") from None
    except (KeyError, TypeError) as e:
        raise ToolError(f"{FLAG} {path}: not a drivekit training checkpoint (no {e} in its state.pt); give a "
                        "checkpoint written by bin/train posttrain") from None
    config = stored["config"]
    if config.get("phase") == "pretrain" or not any(k.startswith("planner.") for k in stored["model"]):
        raise ToolError(f"{FLAG} {step}: a pre-training checkpoint, its model has no planner to drive with; give a "
                        "post-training checkpoint (bin/train posttrain)")
    recorded = config.get("trained_on")
    if not isinstance(recorded, dict) or not recorded:
        raise ToolError(f"{FLAG} {step}: the checkpoint does not record the preprocessing settings and rig it was "
                        "trained with (written before checkpoints recorded them); retrain it (bin/train posttrain) "
                        "to evaluate it")
    try:
        settings = CacheSettings.from_dict(recorded["cache_settings"])
        rig = RigConfig.from_dict(recorded["rig"])
        towns = frozenset(str(t) for t in recorded.get("towns") or ())
        mcfg = ModelConfig.from_dict(stored["model_config"])
    except (KeyError, TypeError, ValueError) as e:
        raise ToolError(f"{FLAG} {step}: unreadable trained_on record in its config.json ({type(e).__name__}: "
                        f"{e}); retrain it (bin/train posttrain) to evaluate it") from None

    # The renderer makes every sensor of the rig: it must hold what the preprocessing reads.
    try:
        rig.camera(settings.camera)
    except ValueError as e:
        raise ToolError(f"{FLAG} {step}: its rig cannot feed its preprocessing: {e}, and its cache settings read "
                        f"camera={settings.camera}; retrain on runs recorded with that camera") from None
    pre = Preprocessor(settings, rig)
    missing = [name for name in pre.sensor_names if name not in rig.sensor_names()]
    if missing:
        raise ToolError(f"{FLAG} {step}: its rig makes no {', '.join(missing)} sensor, which its preprocessing "
                        "reads; retrain on runs recorded with a rig that has it")

    torch.set_num_threads(1)  # several evaluation workers share the machine
    model = TransFuser(mcfg, planner=True)
    try:
        model.load_state_dict(stored["model"])
    except RuntimeError as e:
        why = " ".join(str(e).split())[:200]
        raise ToolError(f"{FLAG} {step}: its weights do not fit its recorded architecture ({why}); give a "
                        "checkpoint written by bin/train posttrain") from None
    model.eval()
    return Policy(step, model, pre, towns)
