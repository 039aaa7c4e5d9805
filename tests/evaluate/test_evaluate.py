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
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import run_bin

from tools.collect.base.routes import read_routes
from tools.collect.base.town import Town
from tools.dataset import results
from tools.dataset.layout import Layout
from tools.dataset.measurements import RoadOption
from tools.evaluate.driver import AGENT_RULE_ENV, GO_RULE_ENV, LINE_RULE_ENV
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
    for path in sorted((p for p in short_routes.rglob("*.xml") if "towns" not in p.parts), key=lambda p: p.name):
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
    # Without the go rule, which would raise the planner's 0 m/s to GO_SPEED on this road: the judgment of a policy
    # that stands is what is tested.
    proc = run_bin("evaluate", "--checkpoint", policy, routes, "--root", tmp_path / "eval", "--blocked-after=15",
                   timeout=600, env={GO_RULE_ENV: "off"})
    assert proc.returncode == 0, proc.stderr
    (record,) = records(tmp_path / "eval")
    assert record["status"] == results.FAILED_BLOCKED
    assert record["scores"]["score_route"] < 5.0
    summary = json.loads(Layout(tmp_path / "eval").evaluation_result.read_text())["_checkpoint"]["global_record"]
    assert summary["scores_mean"]["score_composed"] < 5.0
    # Forked from the worker's zygote, which imported torch and the driver once for all its runs.
    (log,) = (tmp_path / "eval" / "logs").rglob("attempt-01.log")
    assert "(with tools.evaluate.driver)" in log.read_text() and "(kept by this worker)" in log.read_text()
    # Its picture: the camera beside the BEV, and the moment it was judged blocked, framed in red.
    from PIL import Image

    (key,) = Layout(tmp_path / "eval").iter_runs()
    with Image.open(Layout(tmp_path / "eval").film_path(key)) as im:
        assert im.n_frames > 2 and im.width > im.height * 2
        im.seek(im.n_frames - 1)
        r, g, _ = im.convert("RGB").getpixel((1, 1))
        assert r > 150 and g < 100


def test_a_policy_that_drives_straight_on_through_a_turn_deviates_from_the_route(posttrained, short_routes, tmp_path):
    policy = edited_policy(posttrained, tmp_path, target_speed=8.0, step_m=2.0)
    routes = routes_with(short_routes, tmp_path / "routes", turn=True)
    # Without the agent and stop-line rules: the barely trained BEV head gives every cell about the agent classes'
    # prior (3 of 10; the red and yellow lines' 2 of 10), and the rules would stop the car before it could deviate.
    proc = run_bin("evaluate", "--checkpoint", policy, routes, "--root", tmp_path / "eval", "--max-deviation=15",
                   timeout=600, env={AGENT_RULE_ENV: "off", LINE_RULE_ENV: "off"})
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
    from tools.collect.base.route_gen import generate_routes

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


def test_seeds_drive_each_route_in_distinct_worlds_and_the_summary_gives_intervals_and_pictures(short_routes,
                                                                                                tmp_path):
    """--seeds 2 on the 2 short routes: 4 runs, two seeds per route, each run's seed its own (run.json) and its
    world another (its picture differs); the summary's 95% intervals are those of the runs' scores, per route
    over its seeds, and it names every run's picture: an animated WebP, one frame per half simulated second.
    With --bench2drive every run leaves its metric_info.json (a tick each 0.05 s simulated) and Bench2Drive's
    min-speed checkpoints, and the summary gives both the driving efficiency and the driving smoothness."""
    from PIL import Image

    from tools.collect.base.film import RunFilm
    from tools.dataset.metric_info import read_metric_info
    from tools.dataset.score import format_interval, mean_interval

    root = tmp_path / "eval"
    proc = run_bin("evaluate", "--agent", "expert", short_routes, "--root", root, "--seeds", "2", "--workers", "2",
                   "--bench2drive", timeout=600)
    assert proc.returncode == 0, proc.stderr
    layout = Layout(root)
    keys = list(layout.iter_runs())
    assert len(keys) == 4 and {k.repetition for k in keys} == {0, 1} and len({k.route for k in keys}) == 2
    seeds = {json.loads(layout.run_settings(k).read_text())["seed"] for k in keys}
    assert len(seeds) == 4
    for route in {k.route for k in keys}:
        rep0, rep1 = sorted((k for k in keys if k.route == route), key=lambda k: k.repetition)
        assert layout.film_path(rep0).read_bytes() != layout.film_path(rep1).read_bytes()

    result = json.loads(layout.evaluation_result.read_text())["_checkpoint"]["records"]
    ds = [r["scores"]["score_composed"] for r in result]
    assert f"driving score     {format_interval(*mean_interval(ds))}" in proc.stdout
    assert "(2 routes x 2 seeds)" in proc.stdout
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.strip()}
    for route in {k.route for k in keys}:
        per_route = [r["scores"]["score_composed"] for r in result if r["run"].startswith(route + "_rep")]
        mean, half = mean_interval(per_route)
        assert rows[route][:4] == ["2", f"{mean:.3f}", "±", f"{half:.3f}"]
    for k, r in zip(sorted(keys, key=str), sorted(result, key=lambda r: r["run"]), strict=True):
        film = layout.film_path(k)
        assert str(film.relative_to(root)) in proc.stdout
        with Image.open(film) as im:
            assert im.format == "WEBP" and im.is_animated
            # a frame on each grid point of the run's simulated time; the run's very last tick ends the drive loop
            # before it films, so a duration on the grid (25.0 s) has its last point only when an earlier tick did
            grid = int(r["meta"]["duration_game"] / RunFilm(film, None).every_s + 1e-6) + 1
            assert grid - 1 <= im.n_frames <= grid
        ticks = len(read_metric_info(layout.metric_info(k))["acceleration"])
        assert ticks == round(r["meta"]["duration_game"] / 0.05)
        own = json.loads(layout.result_path(k).read_text())["_checkpoint"]["records"][0]
        assert 15 <= len(own["meta"]["bench2drive_min_speed"]) <= 20 and len(own["meta"]["min_speed"]) <= 4
    merged = json.loads(layout.bench2drive_merged.read_text())
    assert merged["driving efficiency"] > 0 and 0 <= merged["driving smoothness"] <= 1
    assert f"driving efficiency {merged['driving efficiency']:8.3f} %" in proc.stdout
    assert f"driving smoothness {100 * merged['driving smoothness']:8.3f} %" in proc.stdout
    assert "not computed" not in proc.stdout


#: A predicted route 20 m straight on: 10 points 2 m apart, from 2 m ahead (ego frame).
STRAIGHT = np.stack([2.0 * np.arange(1, 11), np.zeros(10)], axis=1)


def test_the_policy_driver_slows_for_the_curves_of_its_predicted_route_as_the_expert_does():
    from tools.evaluate.driver import curve_speed
    from tools.expert.expert import A_LAT, IDM_DECEL

    assert curve_speed(STRAIGHT) > 100  # no curve: the target speed decides
    assert curve_speed(np.zeros((10, 2))) == float("inf")  # standing at the route's end: no heading
    for radius in (8.0, 15.0, 30.0):  # a curve to the right, 10 points 2 m apart along it, from 2 m ahead
        angle = 2.0 * np.arange(10) / radius
        arc = np.stack([2.0 + radius * np.sin(angle), radius * (1 - np.cos(angle))], axis=1)
        # the curve's speed, or a little more: the first points' curvature blends in the straight before it
        assert np.sqrt(A_LAT * radius) < curve_speed(arc) < np.sqrt(A_LAT * radius + 2 * IDM_DECEL * 8.0)


class Predicts:
    """A policy that predicts a straight route at 8 m/s, the light head's probability `light`, the BEV head's
    agent cells `agents` and red stop-line cells `red_lines`, and the overtake head's `overtake` and
    `overtake_offset`."""

    light: float | None = None
    agents = np.zeros((0, 2))
    red_lines = np.zeros((0, 2))
    target_speed = 8.0
    overtake: float | None = None
    overtake_offset = 0.0

    def predict(self, sensors, m):
        from tools.evaluate.policy import Plan

        return Plan(waypoints=STRAIGHT[:8], target_speed=self.target_speed, route=STRAIGHT, light=self.light,
                    agents=self.agents, red_lines=self.red_lines, overtake=self.overtake,
                    overtake_offset=self.overtake_offset)


def on_road(speed: float, command: int = RoadOption.LANEFOLLOW) -> SimpleNamespace:
    """The measurements the Pilot reads: the ego's speed (m/s) and the command."""
    return SimpleNamespace(speed=speed, command=command)


#: The pose the Pilot tests plan from, and the measurements of an ego at 8 m/s on a road.
POSE = {"x": 0.0, "y": 0.0, "yaw": 0.0}
AT_8 = on_road(8.0)


def piloted(monkeypatch, env: str, rule: str):
    """A Predicts policy and the Pilot driving it, with the rule of the environment variable `env` `rule` ("on",
    "off")."""
    from tools.evaluate.driver import Pilot

    monkeypatch.setenv(env, rule)
    policy = Predicts()
    return policy, Pilot(policy, dt=0.05)


@pytest.mark.parametrize("rule", ["on", "off"])
def test_the_policy_driver_stops_while_its_light_head_says_a_light_holds_the_ego_unless_the_rule_is_off(
        rule, monkeypatch):
    from tools.evaluate.driver import LIGHT_RULE_ENV

    policy, pilot = piloted(monkeypatch, LIGHT_RULE_ENV, rule)
    for light, stops in ((None, False), (0.2, False), (0.9, rule == "on")):
        policy.light = light
        pilot.plan({}, AT_8, POSE)
        assert pilot.target_speed == (0.0 if stops else 8.0), (light, rule)
        assert pilot.detail() == ("" if light is None else f"light head {light:.2f}" + (": stops" if stops else ""))
        control = pilot.control(0.0, 0.0, 0.0, 8.0)
        assert (control.brake > 0) == stops


def test_the_agent_gap_is_the_second_nearest_predicted_agent_cell_in_the_corridor_along_the_predicted_route():
    from tools.evaluate.driver import AGENT_FROM_M, CORRIDOR_HALF_WIDTH_M, CORRIDOR_M, agent_gap

    straight = STRAIGHT  # the predicted route: 20 m straight on
    car = np.array([[12.0, 0.5], [12.5, -0.5], [13.0, 0.0]])  # three cells of a car 12 m ahead
    assert agent_gap(straight, car) == 12.5  # the second nearest: one cell alone is noise
    assert agent_gap(straight, car[:1]) == float("inf")
    assert agent_gap(straight, car + [0.0, CORRIDOR_HALF_WIDTH_M + 0.6]) == float("inf")  # beside the corridor
    assert agent_gap(straight, np.array([[AGENT_FROM_M - 0.5, 0.0], [0.0, 0.2], [-6.0, 0.0], [-5.0, 0.0]])) == \
        float("inf")  # the ego's own cells and a car behind
    assert agent_gap(straight, car + [20.0, 0.0]) == 32.5  # past the route's 20 m: straight on, up to CORRIDOR_M
    assert agent_gap(straight, car + [CORRIDOR_M, 0.0]) == float("inf")
    assert agent_gap(np.zeros((10, 2)), car) == 12.5  # standing at the route's end (no heading): straight on
    # A route turning right (a quarter circle of radius 10 m from 2 m ahead): a car on the arc is in the way, one
    # straight ahead where the route has turned away is not.
    angle = 2.0 * np.arange(10) / 10.0
    arc = np.stack([2.0 + 10.0 * np.sin(angle), 10.0 * (1 - np.cos(angle))], axis=1)
    on_arc = np.array([[2.0 + 10.0 * np.sin(1.2), 10.0 * (1 - np.cos(1.2))]]) + [[0.0, 0.0], [0.3, 0.0]]
    assert agent_gap(arc, on_arc) == pytest.approx(2.0 + 12.0, abs=0.4)
    assert agent_gap(arc, np.array([[14.0, 0.0], [14.5, 0.0]])) == float("inf")


@pytest.mark.parametrize("rule", ["on", "off"])
def test_the_policy_driver_stops_before_an_agent_its_bev_head_sees_in_its_way_unless_the_rule_is_off(
        rule, monkeypatch):
    from tools.evaluate.driver import AGENT_DECEL, AGENT_RULE_ENV, AGENT_STOP_M

    policy, pilot = piloted(monkeypatch, AGENT_RULE_ENV, rule)
    for ahead, speed in ((None, 8.0), (30.0, 8.0), (12.0, np.sqrt(2 * AGENT_DECEL * (12.0 - AGENT_STOP_M))),
                         (5.0, 0.0)):
        policy.agents = np.zeros((0, 2)) if ahead is None else np.array([[ahead, 0.0], [ahead, 0.4], [ahead + 1, 0.0]])
        pilot.plan({}, AT_8, POSE)
        expected = speed if rule == "on" else 8.0
        assert pilot.target_speed == pytest.approx(expected), (ahead, rule)
        slows = rule == "on" and expected < 8.0
        assert pilot.detail() == ("" if ahead is None else f"agent in {ahead:.1f} m" + (": slows" if slows else ""))
        assert (pilot.control(0.0, 0.0, 0.0, 8.0).brake > 0) == (rule == "on" and expected < 6.0)


def test_the_line_speed_brings_the_ego_to_where_the_expert_stands_and_leaves_the_nearer_line_to_the_light_head():
    from tools.evaluate.driver import AGENT_DECEL, EGO_FRONT_M, LINE_HANDOVER_M, LINE_STOP_M, line_speed
    from tools.expert.expert import IDM_DECEL, LIGHT_STOP_GAP

    assert LINE_STOP_M == EGO_FRONT_M + LIGHT_STOP_GAP  # the front where the expert stands: the light in view
    assert LINE_STOP_M < LINE_HANDOVER_M
    assert line_speed(30.0, 8.0) == pytest.approx(np.sqrt(2 * AGENT_DECEL * (30.0 - LINE_STOP_M)))
    at_handover = np.sqrt(2 * AGENT_DECEL * (LINE_HANDOVER_M - LINE_STOP_M))
    assert at_handover < 3.0 and line_speed(LINE_HANDOVER_M, 0.0) == pytest.approx(at_handover)  # slow: about to stand
    assert line_speed(LINE_HANDOVER_M - 0.1, 0.0) == float("inf")  # nearer: the light head says stop or go
    # Too close to stop the front before the line even at the expert's deceleration: it drives on.
    too_fast = np.sqrt(2 * IDM_DECEL * (12.0 - EGO_FRONT_M)) + 0.1
    assert line_speed(12.0, too_fast) == float("inf")
    assert line_speed(12.0, too_fast - 0.2) == pytest.approx(np.sqrt(2 * AGENT_DECEL * (12.0 - LINE_STOP_M)))


@pytest.mark.parametrize("rule", ["on", "off"])
def test_the_policy_driver_stands_before_a_red_stop_line_its_bev_head_sees_on_its_way_unless_the_rule_is_off(
        rule, monkeypatch):
    from tools.evaluate.driver import AGENT_DECEL, LINE_HANDOVER_M, LINE_RULE_ENV, LINE_STOP_M

    policy, pilot = piloted(monkeypatch, LINE_RULE_ENV, rule)
    across = np.array([[0.0, -1.0], [0.0, -0.5], [0.0, 0.0], [0.0, 0.5], [0.5, 0.0]])  # a stop line across the lane
    slowed = np.sqrt(2 * AGENT_DECEL * (20.0 - LINE_STOP_M))
    # (where the line is, the ego's speed, the target speed with the rule): none; far; near enough to slow; too near
    # to stop at 8 m/s (drives on); creeping up to the handover; standing where the expert stands (the light head's).
    creep = np.sqrt(2 * AGENT_DECEL * (LINE_HANDOVER_M - LINE_STOP_M))
    for ahead, speed, on in ((None, 8.0, 8.0), (40.0, 8.0, 8.0), (20.0, 8.0, slowed), (10.0, 8.0, 8.0),
                             (LINE_HANDOVER_M, 1.0, creep), (LINE_STOP_M, 0.0, 8.0)):
        policy.red_lines = np.zeros((0, 2)) if ahead is None else across + [ahead, 0.0]
        pilot.plan({}, on_road(speed), POSE)
        expected = on if rule == "on" else 8.0
        assert pilot.target_speed == pytest.approx(expected), (ahead, speed, rule)
        slows = rule == "on" and expected < 8.0
        assert pilot.detail() == ("" if ahead is None else f"red line in {ahead:.1f} m" + (": slows" if slows else ""))
        assert (pilot.control(0.0, 0.0, 0.0, speed).brake > 0) == (expected < speed - 0.5)  # brakes to the cap


@pytest.mark.parametrize("rule", ["on", "off"])
def test_the_policy_driver_goes_at_least_the_go_speed_on_a_road_where_its_planner_crawls_unless_the_rule_is_off(
        rule, monkeypatch):
    from tools.evaluate.driver import AGENT_DECEL, AGENT_STOP_M, GO_BELOW, GO_RULE_ENV, GO_SPEED

    policy, pilot = piloted(monkeypatch, GO_RULE_ENV, rule)
    goes = rule == "on"
    # (the planner's target speed, the command, the ego's speed, the target speed with the rule): a crawl or a stand on
    # a road goes; the planner's own speed above the go speed stays; at a junction's turn, and once the ego moves, the
    # planner decides.
    for planned, command, speed, on in ((0.5, RoadOption.LANEFOLLOW, 0.4, GO_SPEED),
                                        (0.0, RoadOption.LANEFOLLOW, 0.0, GO_SPEED),
                                        (8.0, RoadOption.LANEFOLLOW, 0.4, 8.0), (0.5, RoadOption.LEFT, 0.4, 0.5),
                                        (0.5, RoadOption.STRAIGHT, 0.4, 0.5),
                                        (0.5, RoadOption.LANEFOLLOW, GO_BELOW + 0.5, 0.5)):
        policy.target_speed = planned
        pilot.plan({}, on_road(speed, command), POSE)
        assert pilot.target_speed == (on if goes else planned), (planned, command, speed, rule)
        raised = goes and on > planned
        assert pilot.detail().startswith(f"planner {planned:.1f} m/s: goes") == raised
    # The other rules cap the raised speed as any other: a light that holds the ego, an agent in the way.
    policy.target_speed, policy.light = 0.5, 0.9
    pilot.plan({}, on_road(0.4), POSE)
    assert pilot.target_speed == 0.0
    policy.light, policy.agents = None, np.array([[AGENT_STOP_M + 1.0, 0.0], [AGENT_STOP_M + 1.0, 0.4]])
    pilot.plan({}, on_road(0.4), POSE)
    assert pilot.target_speed == pytest.approx(min(GO_SPEED if goes else 0.5, np.sqrt(2 * AGENT_DECEL * 1.0)))


def test_the_overtaking_route_moves_over_on_the_experts_ramp_from_where_the_ego_is():
    from tools.dataset.geometry import left_of
    from tools.evaluate.driver import overtaking_route
    from tools.expert.expert import PASS_RAMP_M

    moved = overtaking_route(STRAIGHT, 3.5)  # STRAIGHT: 10 points 2 m apart from 2 m ahead
    assert np.allclose(moved[:, 0], STRAIGHT[:, 0])
    s = STRAIGHT[:, 0]  # the ramp begins PASS_RAMP_M / 3 behind the ego and moves the whole offset over PASS_RAMP_M
    assert np.allclose(-moved[:, 1], 3.5 * np.clip((s + PASS_RAMP_M / 3) / PASS_RAMP_M, 0.0, 1.0))
    assert np.allclose(overtaking_route(STRAIGHT, -3.0)[-1], [STRAIGHT[-1, 0], 3.0])  # to the right
    # A pass under way (the route 3.5 m to the ego's right, the ego in the next lane) goes on straight ahead.
    beside = STRAIGHT + [0.0, 3.5]
    assert left_of(beside, np.zeros(2)) == pytest.approx(3.5)
    assert np.allclose(overtaking_route(beside, 3.5)[:, 1], 0.0)
    # On a curve the points move across the route's direction: every one ends 3 m from the route, to its left.
    angle = 2.0 * np.arange(10) / 15.0
    arc = np.stack([2.0 + 15.0 * np.sin(angle), 15.0 * (1 - np.cos(angle))], axis=1)  # turning right
    far = overtaking_route(arc, 3.0)[6:]
    assert all(left_of(arc, p) == pytest.approx(3.0, abs=0.05) for p in far)
    ended = STRAIGHT.copy()
    ended[6:] = ended[5]  # the route's end repeats its last point: moved over as the point before it
    assert np.allclose(overtaking_route(ended, 3.0)[6:], overtaking_route(ended, 3.0)[5])


@pytest.mark.parametrize("rule", ["on", "off"])
def test_the_policy_driver_goes_round_an_obstacle_where_its_overtake_head_fires_unless_the_rule_is_off(
        rule, monkeypatch):
    from tools.evaluate.driver import AGENT_DECEL, AGENT_STOP_M, OVERTAKE_RULE_ENV
    from tools.expert.expert import PASS_SPEED

    policy, pilot = piloted(monkeypatch, OVERTAKE_RULE_ENV, rule)
    # A parked car 7 m ahead in the ego's lane (its cells up to 0.9 m either side of the lane's centre).
    car = np.array([[x, y] for x in (7.0, 7.5, 8.0, 9.0, 10.0, 11.0) for y in (-0.9, -0.4, 0.0, 0.4, 0.9)])
    policy.agents = car
    stops = np.sqrt(2 * AGENT_DECEL * (7.0 - AGENT_STOP_M))
    # (the head's probability, its offset, the command, goes round): it fires; it does not; an offset too small to
    # be a lane; at a junction's turn (the expert never passes in a junction).
    for p, offset, command, goes in ((0.9, 3.4, RoadOption.LANEFOLLOW, rule == "on"),
                                     (0.3, 3.4, RoadOption.LANEFOLLOW, False), (0.9, 1.0, RoadOption.LANEFOLLOW, False),
                                     (0.9, 3.4, RoadOption.LEFT, False)):
        policy.overtake, policy.overtake_offset = p, offset
        pilot.plan({}, on_road(8.0, command), POSE)
        assert pilot.overtakes == goes, (p, offset, command, rule)
        if goes:  # the path moves left (y < 0), past the car's cells: the agent rule lets it go, at the pass speed
            assert pilot.path[-1][1] == pytest.approx(-3.4) and pilot.target_speed == PASS_SPEED
            assert pilot.detail() == "overtake head 0.90, 3.4 m left: goes round"
        else:  # straight on: it stops behind the car
            assert np.allclose(pilot.path[:, 1], 0.0) and pilot.target_speed == pytest.approx(stops)
            assert pilot.detail().startswith("overtake head 0.90, " if p > 0.5 else "agent in 7.0 m")
    # A car in the next lane, where the pass goes: the agent rule holds the ego behind the parked one until it is gone.
    policy.overtake, policy.overtake_offset = 0.9, 3.4
    policy.agents = np.concatenate([car, car + [8.0, -3.4]])
    pilot.plan({}, AT_8, POSE)
    assert pilot.target_speed < 8.0 and pilot.gap < 20.0
