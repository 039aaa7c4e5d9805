"""Our own trained policy as a leaderboard 2.0 agent file (tools/evaluate/leaderboard/agent_file/policy_agent.py), and
its oracle: driven without the leaderboard's sensor noise it gives the records `--checkpoint CKPT` gives on the same
route, because the same inputs reach the model (docs/leaderboard-agent.md says where they cannot be the same, and by
how much they differ; benchmarks/policy_agent_oracle.py measures it through bin/evaluate on the demo's routes).

Real parts: the session's post-trained checkpoint, SUMO, our renderer and drive loop, CARLA's own client (its
carla.Map, geolocation and carla.VehicleControl). Stand-ins: drivekit's leaderboard and scenario_runner modules
(compat/), as the host puts them on sys.path when LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT are not set.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tools.collect.base.config import CollectSettings
from tools.collect.base.routes import read_routes
from tools.collect.base.town import Town
from tools.collect.sim.drive import drive
from tools.core.errors import ToolError
from tools.dataset.geometry import Pose, ego_to_world
from tools.dataset.layout import Layout, RunKey
from tools.evaluate.driver import AGENT_RULE_ENV, LINE_RULE_ENV, policy_factory
from tools.evaluate.leaderboard.host import AgentSettings, agent_factory
from tools.evaluate.leaderboard.policy_inputs import HalfTurns, PolicyAgentCore, checkpoint_of, read_config
from tools.evaluate.leaderboard.sensors import suite, validate
from tools.evaluate.policy import MODEL_INPUTS, Policy
from tools.train import checkpoint
from tools.train.model import LIDAR_SCALE

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tools" / "evaluate" / "leaderboard" / "agent_file" / "policy_agent.py"


@pytest.fixture(autouse=True)
def _agent_modules_stay_in_the_test():
    """The host puts the stand-in roots and the agent's folder on sys.path and imports them: undone after each test."""
    path, before = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - before:
        where = str(getattr(sys.modules[name], "__file__", "") or "")
        if name.split(".")[0] in ("leaderboard", "srunner", "agents", "policy_agent") or where.startswith(
                tempfile.gettempdir()):
            del sys.modules[name]


def route_files(routes: Path) -> list[Path]:
    return sorted(p for p in routes.rglob("*.xml") if "towns" not in p.parts)


# ----------------------------------------------------------------------------- what the agent declares and reads


def test_the_agent_declares_the_rig_its_checkpoint_trained_with_within_the_leaderboards_rules(posttrained):
    core = PolicyAgentCore(posttrained)
    sensors = core.sensors()
    validate(sensors, "SENSORS")
    specs, rig = suite(sensors, 0.05)
    trained = core.policy.rig.camera(core.policy.camera)
    (camera,) = rig.cameras
    assert {**vars(camera), "name": trained.name} == vars(trained)  # the same size, fov and mount
    assert (rig.lidar.x, rig.lidar.z) == (core.policy.rig.lidar.x, core.policy.rig.lidar.z)
    assert {s.type for s in specs} == {"sensor.camera.rgb", "sensor.lidar.ray_cast", "sensor.other.gnss",
                                       "sensor.other.imu", "sensor.speedometer"}
    assert core.every == 5  # the checkpoint's frames, 0.25 s apart, every 5th tick of 20 Hz


def test_agent_config_is_a_checkpoint_folder_or_a_json_file_naming_one_relative_to_it(tmp_path):
    step = tmp_path / "runs" / "posttrain"
    step.mkdir(parents=True)
    assert checkpoint_of(step) == step
    config = tmp_path / "conf" / "agent.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"checkpoint": "../runs/posttrain"}))
    assert checkpoint_of(config).resolve() == step.resolve()
    assert read_config(config)[1] == 1.0 and read_config(step) == (step, 1.0)  # GNSS as read unless asked
    config.write_text(json.dumps({"checkpoint": "../runs/posttrain", "gnss_gain": 0.1}))
    assert read_config(config)[1] == 0.1
    config.write_text(json.dumps({"checkpoint": "../runs/posttrain", "gnss_gain": 0}))
    with pytest.raises(ToolError, match=r"gnss_gain 0.0: expected a share in \(0, 1\]"):
        read_config(config)
    config.write_text("checkpoint: ../runs/posttrain")
    with pytest.raises(ToolError, match=r"--agent-config .*agent.json: not a JSON file"):
        checkpoint_of(config)
    with pytest.raises(ToolError, match="--agent-config '': no such file or folder"):
        checkpoint_of("")


def test_two_half_turns_join_into_one_turn_in_the_ego_frame_of_the_later_tick():
    """A post 10 m ahead seen in the previous tick's half and again, 1 m closer and turned 5 degrees, in this one's:
    the joined turn has both returns where the post is now."""
    turns = HalfTurns(x=0.0, z=2.5)
    before, now = Pose(100.0, 50.0, 30.0), Pose(100.0 + math.cos(math.radians(30.0)),
                                                 50.0 + math.sin(math.radians(30.0)), 35.0)
    post = np.array([[100.0 + 10.0 * math.cos(math.radians(30.0)), 50.0 + 10.0 * math.sin(math.radians(30.0))]])

    def seen(pose: Pose) -> np.ndarray:  # the post in the sensor's frame (z: 1 m above the ground)
        c, s = math.cos(math.radians(pose.yaw)), math.sin(math.radians(pose.yaw))
        dx, dy = post[0] - (pose.x, pose.y)
        return np.array([[c * dx + s * dy, -s * dx + c * dy, 1.0 - 2.5, 0.9]], dtype=np.float32)

    first = turns.join(seen(before), before)
    assert first.shape == (1, 4) and first[0, 2] == pytest.approx(1.0)
    joined = turns.join(seen(now), now)
    assert joined.shape == (2, 4) and joined.dtype == np.float32
    np.testing.assert_allclose(joined[0], joined[1], atol=1e-4)
    np.testing.assert_allclose(ego_to_world(now, joined[:, :2].astype(np.float64)), np.repeat(post, 2, 0), atol=1e-4)


# ----------------------------------------------------------------------------- the oracle


def capture(monkeypatch) -> list[list[dict]]:
    """Every frame's model input (MODEL_INPUTS), per drive: what Policy.predict hands the model."""
    drives: list[list[dict]] = []
    real = Policy.predict

    def predict(self, sensors, m):
        batch = self.batch(sensors, m)
        drives[-1].append({**{k: batch[k][0].numpy().astype(np.float64) for k in MODEL_INPUTS}, "tick": m.tick,
                           "ego": (m.ego["x"], m.ego["y"], m.ego["yaw"])})
        return real(self, sensors, m)

    monkeypatch.setattr(Policy, "predict", predict)
    return drives


def test_without_the_leaderboards_noise_the_agent_file_drives_as_the_checkpoint_and_only_the_lidar_differs(
        posttrained, short_routes, tmp_path, monkeypatch):
    """Both ways in the same world (route, seed, traffic): the same records, and at the first frame the same camera
    pixels, target point, speed and command; the LiDAR's BEV counts differ (the leaderboard's LiDAR is not the rig's),
    by the amount docs/leaderboard-agent.md reports."""
    drives = capture(monkeypatch)
    # The agent and stop-line rules read the BEV head, which reads the LiDAR, which is not the same both ways (below).
    monkeypatch.setenv(AGENT_RULE_ENV, "off")
    monkeypatch.setenv(LINE_RULE_ENV, "off")
    step = str(checkpoint.resolve(posttrained))
    # The junction route (9 vehicle collisions both ways); the other is a plain road.
    for route_file in [p for p in route_files(short_routes) if p.parent.name != "NoScenario"]:
        route = read_routes(route_file)[0]
        town = Town(short_routes / "towns" / f"{route.town}.xodr")
        records = []
        for name, factory in (("checkpoint", policy_factory(step)),
                              ("agent", agent_factory(AgentSettings(agent_file=str(AGENT), agent_config=step,
                                                                    noise=False), route.id))):
            drives.append([])
            records.append(drive(Layout(tmp_path / name), RunKey(route_file.parent.name, route_file.stem), route,
                                 town, CollectSettings(record=False, vehicles=10), 0, 0, 1, factory))
        a, b = records
        assert (b.status, b.route_completion, {k: len(v) for k, v in b.infractions.items()}) == (
            a.status, a.route_completion, {k: len(v) for k, v in a.infractions.items()}), route_file
        assert abs(b.duration_game - a.duration_game) <= 1.0
        first_a, first_b = drives[-2][0], drives[-1][0]
        assert first_a["tick"] == first_b["tick"] == 0 and first_a["ego"] == first_b["ego"]
        for key in ("rgb", "target_point", "speed", "command"):
            assert np.array_equal(first_a[key], first_b[key]), key
        # The LiDAR: the model sees counts clipped at LIDAR_SCALE; over the first frames a small share differs.
        for fa, fb in zip(drives[-2][:8], drives[-1][:8], strict=True):
            seen_a, seen_b = np.minimum(fa["lidar_bev"], LIDAR_SCALE), np.minimum(fb["lidar_bev"], LIDAR_SCALE)
            assert np.abs(seen_a - seen_b).mean() < 0.6, fa["tick"]
