"""The minimum-speed criterion of the referee (leaderboard 2.0's MinimumSpeedRouteTest: 4 checkpoints; Bench2Drive's:
20), on a straight 100 m route driven tick by tick with speeds set by hand: no world, nothing driven. Both go into
the record's meta, no event among the infractions (the embedded world's traffic is moving when the ego starts:
tools/collect/base/referee.py). And --stop-on-infraction stops at no minimum-speed checkpoint under CARLA."""

from __future__ import annotations

import numpy as np
import pytest

from tools.collect.base.config import CollectSettings
from tools.collect.base.referee import MinSpeedCheckpoints, Referee
from tools.collect.carla.evaluator import stopping_infractions
from tools.collect.sim.world import StepEvents
from tools.dataset import results
from tools.expert.route import DenseRoute

DT = 0.05


def straight(length: int = 100) -> DenseRoute:
    n = length + 1
    return DenseRoute(xy=np.stack([np.arange(n, dtype=float), np.zeros(n)], axis=1), yaw=np.zeros(n),
                      option=np.full(n, 4), s=np.arange(n, dtype=float), junction=np.zeros(n, dtype=bool))


def drive(referee: Referee, ego_speed, traffic_speed, until: float = 100.0) -> None:
    """The ego along the route at ego_speed(x) m/s, the traffic's mean speed traffic_speed(x) (None: none), as the
    drive loop calls the referee; then the route's end as the drive loop ends it."""
    x, t = 0.0, 0.0
    while x < until and referee.status is None and not referee.arrived:
        x, t = x + ego_speed(x) * DT, t + DT
        referee.update(t, np.array([x, 0.0]), ego_speed(x), StepEvents(traffic_speed=traffic_speed(x)))
    if referee.arrived and referee.status is None:
        referee.index = len(referee.route.s) - 1
    referee.finish()


def test_an_ego_at_half_the_traffics_speed_is_at_50_percent_at_each_of_the_four_checkpoints_and_no_infraction():
    referee = Referee(straight(), CollectSettings())
    drive(referee, lambda x: 5.0, lambda x: 10.0)
    # Checkpoints past 25, 50 and 75 m of the route, and the last when the route ends (past 95% of it).
    assert referee.min_speed.values == [50.0] * 4
    assert not any(referee.infractions.values())
    # Bench2Drive's: 20 parts of 5 m, every checkpoint kept. A checkpoint is judged at the first route point (1 m
    # apart, as the leaderboard's) more than a part beyond the last: every 6 m here, 16 and the last at the end.
    assert referee.min_speed_bench2drive.values == [50.0] * 17
    assert referee.final_status() == results.PERFECT
    record = results.RouteRecord("0", referee.final_status(), referee.infractions, referee.completion, 100.0,
                                 bench2drive_min_speed=referee.min_speed_bench2drive.values,
                                 min_speed=referee.min_speed.values).to_result()["_checkpoint"]["records"][0]
    assert record["scores"]["score_penalty"] == 1.0
    assert record["meta"]["bench2drive_min_speed"] == [50.0] * 17 and record["meta"]["min_speed"] == [50.0] * 4
    # A CARLA record's min-speed events (the leaderboard's) are penalised as leaderboard 2.0 does: 0.7, 'decreases'.
    slow = {"min_speed_infractions": ["Average speed is 50.0% of the surrounding traffic's one"] * 4}
    carla = results.RouteRecord("0", results.COMPLETED, slow, 100.0, 100.0).to_result()["_checkpoint"]["records"][0]
    assert carla["scores"]["score_penalty"] == round((1 - 0.3 * 0.5) ** 4, 4)


def test_each_quarter_is_judged_alone_and_one_without_traffic_is_100():
    """Faster than the traffic in the first half, slower in the second. Without traffic on the last quarter the
    criterion has nothing to compare: 100 (its integer)."""
    referee = Referee(straight(), CollectSettings())
    drive(referee, lambda x: 12.0 if x < 52 else 4.0, lambda x: 8.0 if x < 75 else None)
    # A quarter's ticks: from the tick after the last checkpoint to the one that passes the next (judged before its
    # own speeds count); the third quarter begins with a metre at 12 m/s.
    assert referee.min_speed.values[:2] == [150.0, 150.0] and referee.min_speed.values[3] == 100
    assert referee.min_speed.values[2] == pytest.approx(50.0, abs=2.0)
    assert referee.min_speed_bench2drive.values[-4:] == [100] * 4


def test_a_route_that_ends_before_95_percent_judges_no_last_checkpoint():
    checkpoints = MinSpeedCheckpoints(100.0, 4)
    for s in np.arange(0.0, 60.0, 0.5):
        checkpoints.update(float(s), 2.0, 10.0)
    assert checkpoints.values == [20.0, 20.0]
    assert checkpoints.finish(90.0) is None and checkpoints.finish(96.0) == 20.0


def test_stop_on_infraction_stops_at_no_minimum_speed_checkpoint_in_either_world():
    referee = Referee(straight(), CollectSettings(stop_on_infraction=True))
    drive(referee, lambda x: 5.0, lambda x: 10.0)
    assert referee.stopped is None and referee.arrived and referee.min_speed.values == [50.0] * 4
    # Under CARLA: the leaderboard's PENALTY_NAME_DICT less its minimum speed (tools.collect.carla.evaluator).
    assert stopping_infractions({"COLLISION_VEHICLE": "collisions_vehicle", "MIN_SPEED": "min_speed_infractions"}) == {
        "COLLISION_VEHICLE": "collisions_vehicle"}
