"""Closed-loop evaluation end to end: bin/evaluate drives routes in the embedded world with a trained checkpoint
(rendered sensors -> the model -> waypoints and target speed -> the controllers) or with the expert.

The policies that always brake or drive straight on are real post-training checkpoints (the session's
`posttrained`) whose planner's last layers are set by the test: everything else (loading, rendering,
preprocessing, the model, the controllers, the world's judgement) is the real path.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from conftest import run_bin

from tools.collect.routes import read_routes
from tools.collect.town import Town
from tools.dataset import results
from tools.dataset.layout import Layout
from tools.dataset.measurements import RoadOption
from tools.expert.planner import RoutePlanner
from tools.train import checkpoint


def edited_policy(posttrained: Path, dest: Path, target_speed: float, step_m: float) -> Path:
    """A copy of the post-trained checkpoint whose planner predicts `target_speed` always, waypoints
    `step_m` metres apart straight ahead (on top of the constant-velocity rollout at standstill), and a
    route straight ahead (the path the driver steers along)."""
    step = checkpoint.resolve(posttrained)
    copy = Path(shutil.copytree(step, dest / "checkpoints" / step.name))
    weights = torch.load(copy / "model.pt", map_location="cpu", weights_only=True)
    scale = torch.load(copy / "state.pt", map_location="cpu", weights_only=True)["model_config"]
    frame_dt = float(scale["frame_dt"])
    for name in ("planner.target_speed.weight", "planner.delta.weight", "planner.route.weight"):
        weights[name].zero_()
    points = weights["planner.route.bias"].view(-1, 2)
    points[:, 0] = 2.0 * torch.arange(1, len(points) + 1)  # x forward, 2 m apart
    points[:, 1] = 0.0
    from tools.train.model import SPEED_SCALE, two_hot

    bias = weights["planner.target_speed.bias"]
    classes = scale.get("speed_classes") or []
    if classes:  # the classes' logits: all the mass on `target_speed` (its two neighbouring classes)
        label = two_hot(torch.tensor([float(target_speed)]), torch.tensor(classes, dtype=torch.float32))[0]
        bias.copy_(label.clamp(min=1e-9).log())
    else:
        bias.fill_(target_speed)

    weights["planner.delta.bias"].copy_(torch.tensor([step_m / (SPEED_SCALE * frame_dt), 0.0]))
    with open(copy / "model.pt", "wb") as f:
        torch.save(weights, f)
    marker = json.loads((copy / checkpoint.MARKER).read_text())
    marker["sha256"]["model.pt"] = hashlib.sha256((copy / "model.pt").read_bytes()).hexdigest()
    (copy / checkpoint.MARKER).write_text(json.dumps(marker))
    return copy


def routes_with(short_routes: Path, dest: Path, turn: bool) -> Path:
    """A folder with one route of `short_routes` (and its town) that turns at a junction, or goes straight."""
    dest.mkdir(parents=True)
    shutil.copytree(short_routes / "towns", dest / "towns")
    for path in sorted(p for p in short_routes.rglob("*.xml") if "towns" not in p.parts):
        route = read_routes(path)[0]
        dense = RoutePlanner(Town(dest / "towns" / f"{route.town}.xodr").carla_map).trace(route.waypoints)
        turns = bool(np.isin(dense.option, [RoadOption.LEFT, RoadOption.RIGHT]).any())
        if turns == turn:
            shutil.copy(path, dest / path.name)
            return dest
    raise AssertionError(f"no route {'with' if turn else 'without'} a turn in {short_routes}")


def records(root: Path) -> list[dict]:
    layout = Layout(root)
    return [json.loads(layout.result_path(k).read_text())["_checkpoint"]["records"][0] for k in layout.iter_runs()]


def test_a_policy_that_always_brakes_completes_almost_nothing_and_is_blocked(posttrained, short_routes, tmp_path):
    policy = edited_policy(posttrained, tmp_path, target_speed=-5.0, step_m=0.0)
    routes = routes_with(short_routes, tmp_path / "routes", turn=False)
    proc = run_bin("evaluate", "--checkpoint", policy, routes, "--root", tmp_path / "eval", "--blocked-after=15",
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    (record,) = records(tmp_path / "eval")
    assert record["status"] == results.FAILED_BLOCKED
    assert record["scores"]["score_route"] < 5.0
    summary = json.loads(Layout(tmp_path / "eval").evaluation_result.read_text())["_checkpoint"]["global_record"]
    assert summary["scores_mean"]["score_composed"] < 5.0


def test_a_policy_that_drives_straight_on_through_a_turn_deviates_from_the_route(posttrained, short_routes, tmp_path):
    policy = edited_policy(posttrained, tmp_path, target_speed=8.0, step_m=2.0)
    routes = routes_with(short_routes, tmp_path / "routes", turn=True)
    proc = run_bin("evaluate", "--checkpoint", policy, routes, "--root", tmp_path / "eval", "--max-deviation=15",
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    (record,) = records(tmp_path / "eval")
    assert record["status"] == results.FAILED_DEVIATED, record
    assert record["infractions"]["route_dev"]


def test_the_expert_evaluated_twice_gets_the_same_scores(short_routes, tmp_path):
    """Deterministic: the world is seeded from (route, repetition); the expert has no randomness."""
    scores = []
    for name in ("a", "b"):
        proc = run_bin("evaluate", "--agent", "expert", short_routes, "--root", tmp_path / name, "--workers", "2",
                       timeout=600)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(Layout(tmp_path / name).evaluation_result.read_text())["_checkpoint"]
        scores.append((result["global_record"]["scores_mean"],
                       sorted((r["route_id"], r["status"], r["scores"]["score_composed"],
                               r["meta"]["duration_game"]) for r in result["records"])))
    assert scores[0] == scores[1]
    assert scores[0][0]["score_route"] > 0


def test_a_policy_in_a_town_it_never_saw_is_evaluated_and_the_summary_says_so(posttrained, carla_towns, tmp_path):
    """Allowed, and noted in the summary (one line naming the town)."""
    policy = edited_policy(posttrained, tmp_path, target_speed=-5.0, step_m=0.0)
    routes = tmp_path / "routes"
    (routes / "towns").mkdir(parents=True)
    shutil.copy(carla_towns / "Town01.xodr", routes / "towns" / "Town01.xodr")
    from tools.collect.routes import generate_routes

    generate_routes(town=str(routes / "towns" / "Town01.xodr"), count=1, out=str(routes), seed=3, min_length=100,
                    max_length=200)
    proc = run_bin("evaluate", "--checkpoint", policy, routes, "--root", tmp_path / "eval", "--blocked-after=5",
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "never saw" in proc.stdout + proc.stderr and "Town01" in proc.stdout + proc.stderr


def test_a_pretraining_checkpoint_is_one_line_and_nothing_is_written(pretrained, short_routes, tmp_path):
    proc = run_bin("evaluate", "--checkpoint", pretrained, short_routes, "--root", tmp_path / "eval")
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "planner" in proc.stderr
    assert not (tmp_path / "eval").exists()


def test_the_policy_driver_slows_for_the_curves_of_its_predicted_route_as_the_expert_does():
    from tools.evaluate.driver import curve_speed
    from tools.expert.expert import A_LAT, IDM_DECEL

    straight = np.stack([2.0 * np.arange(1, 11), np.zeros(10)], axis=1)
    assert curve_speed(straight) > 100  # no curve: the target speed decides
    assert curve_speed(np.zeros((10, 2))) == float("inf")  # standing at the route's end: no heading
    for radius in (8.0, 15.0, 30.0):  # a curve to the right, 10 points 2 m apart along it, from 2 m ahead
        angle = 2.0 * np.arange(10) / radius
        arc = np.stack([2.0 + radius * np.sin(angle), radius * (1 - np.cos(angle))], axis=1)
        # the curve's speed, or a little more: the first points' curvature blends in the straight before it
        assert np.sqrt(A_LAT * radius) < curve_speed(arc) < np.sqrt(A_LAT * radius + 2 * IDM_DECEL * 8.0)
