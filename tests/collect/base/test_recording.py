"""The one frame writer (tools.collect.base.recording.RunRecorder): a loop hands it every tick, it decides which ticks
are frames. No world needed: snapshots made by hand, as the drive loop and the CARLA agent hand theirs."""

from __future__ import annotations

import numpy as np
import pytest

from tools.collect.base.config import CollectSettings
from tools.collect.base.recording import RunRecorder
from tools.collect.base.referee import Referee
from tools.collect.base.routes import Route
from tools.dataset import frames, semantics
from tools.dataset.layout import Layout, RunKey
from tools.dataset.rig import RigConfig
from tools.expert.control import Control
from tools.expert.expert import Decision
from tools.expert.route import DenseRoute
from tools.expert.state import Box, Snapshot

KEY = RunKey("NoScenario", "straight_rep0")


def _straight(length: float = 100.0) -> DenseRoute:
    s = np.arange(0.0, length + 0.5, 1.0)
    return DenseRoute(xy=np.stack([s, np.zeros_like(s)], axis=1), yaw=np.zeros_like(s),
                      option=np.full(len(s), 4, dtype=np.int64), s=s, junction=np.zeros(len(s), dtype=bool))


def _recorder(tmp_path, **settings) -> tuple[RunRecorder, DenseRoute, CollectSettings]:
    cfg = CollectSettings(**settings)
    dense = _straight()
    route = Route(id="straight", town="Grid", waypoints=np.array([[0.0, 0.0, 0.0], [100.0, 0.0, 0.0]]))
    recorder = RunRecorder(Layout(tmp_path), KEY, route, dense, cfg)
    recorder.start(town="Grid", town_file=tmp_path / "grid.xodr", rig=RigConfig(), repetition=0, seed=0, attempt=1)
    return recorder, dense, cfg


def _snap(tick: int) -> Snapshot:
    ego = Box(0, semantics.CAR, 0.2 * tick, 0.0, 0.75, 0.0, 4.9, 2.1, 1.5, speed=4.0)
    other = Box(7, semantics.CAR, 0.2 * tick + 20.0, 0.0, 0.75, 0.0, 4.6, 1.9, 1.5, speed=3.0)
    return Snapshot(time=0.05 * tick, ego=ego, actors=[other], speed_limit=13.889, lane="3_-1", acceleration=0.25,
                    scenario={"name": "Accident_1"} if tick >= 5 else None)


def test_the_recorder_writes_every_record_every_th_tick_and_asks_for_the_sensors_then_only(tmp_path):
    recorder, dense, cfg = _recorder(tmp_path)
    referee = Referee(dense, cfg)
    asked = []
    decision = Decision(control=Control(throttle=0.5), target_speed=4.5, reason="curve", detail="a curve")
    for tick in range(2 * cfg.record_every + 1):
        def sensors(tick=tick):
            asked.append(tick)
            return {}
        recorder.add_frame(_snap(tick), referee, decision, sensors)
    recorder.finish()
    every = cfg.record_every
    assert asked == [0, every, 2 * every]
    assert recorder.ticks == 2 * every + 1 and recorder.frames == 3
    written = [frames.read_frame(Layout(tmp_path).frame_path(KEY, i)) for i in range(3)]
    m = [f["measurements"] for f in written]
    assert [x["tick"] for x in m] == [0, every, 2 * every] and [x["frame"] for x in m] == [0, 1, 2]
    # What a world knows of the ego comes from the snapshot.
    assert m[1]["speed_limit"] == 13.889 and m[1]["lane"] == "3_-1" and m[1]["acceleration"] == 0.25
    assert m[0]["scenario"] is None and m[1]["scenario"] == {"name": "Accident_1"}
    assert m[1]["reason"] == "curve" and m[1]["target_speed"] == 4.5
    assert [b["id"] for b in written[1]["boxes"]] == [7]
    index = frames.read_run_measurements(Layout(tmp_path).run_measurements(KEY))
    assert index is not None


def test_with_recording_off_the_recorder_writes_nothing_and_never_asks_for_sensors(tmp_path):
    recorder, dense, cfg = _recorder(tmp_path, record=False)
    referee = Referee(dense, cfg)
    decision = Decision(control=Control(), target_speed=0.0, reason="")
    for tick in range(2 * cfg.record_every):
        assert recorder.due == (tick % cfg.record_every == 0)  # a policy still sees its inputs on frame ticks
        recorder.add_frame(None, referee, decision, lambda: pytest.fail("asked for sensors"))
    recorder.finish()
    assert recorder.frames == 0 and not Layout(tmp_path).frame_path(KEY, 0).exists()
    assert not Layout(tmp_path).run_measurements(KEY).exists()
