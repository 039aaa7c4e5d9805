"""The one writer of a route run's files, in either world (the embedded world's drive loop, our CARLA agent).

    recorder = RunRecorder(layout, key, route, dense, settings)
    recorder.start(town=..., town_file=..., rig=..., repetition=..., seed=..., attempt=...)   # run.json, heartbeat
    for each tick:
        if recorder.due: ...                  # a frame tick (every settings.record_every): sensors, a policy's inputs
        decision = driver.step(...)
        recorder.add_frame(snap, referee, decision, sensors)   # every tick: the frame when due, heartbeats
    recorder.finish()                         # the run's measurements index, after its last frame

The recorder counts the ticks itself: whether a frame is due (and settings.record is on), its index and tick, and
when the heartbeat is due (every heartbeats.HEARTBEAT_EVERY_S wall seconds) are decided here alone.
What a frame holds is the frame contract (tools.dataset: measurements, frames, rig); this module fills it from
the privileged state (tools.expert.state.Snapshot: the ego, the actors near it, and the ego's speed limit, lane,
acceleration and scenario), the dense route and the referee's place on it.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tools.collect.base.config import CollectSettings
from tools.collect.base.referee import Referee
from tools.collect.base.routes import Route
from tools.core import atomic
from tools.dataset import frames, heartbeats
from tools.dataset.geometry import world_to_ego, yaw_to_ego
from tools.dataset.layout import Layout, RunKey
from tools.dataset.measurements import BoxLabel, Measurements, RoadOption
from tools.dataset.rig import RigConfig
from tools.expert.expert import Decision, stops_for
from tools.expert.route import DenseRoute
from tools.expert.state import Box, Snapshot

#: A target point is passed (and the next one becomes the target) this close to the ego, metres.
TARGET_REACHED_M = 7.5
#: Route points stored per frame are this far apart, metres.
ROUTE_AHEAD_SPACING_M = 2.0
#: Actors stored as boxes within this distance of the ego, metres.
BOX_RADIUS_M = 60.0
#: A frame's `light_hazard`: the light the expert obeys is this close (front bumper to stop line, metres) and it stops
#: for it (red, or yellow it can still stop for: tools.expert.expert.stops_for). What the model's light head learns.
LIGHT_HAZARD_M = 25.0


def _targets(route: DenseRoute, coarse: np.ndarray, index: int, xy: np.ndarray) -> tuple[int, int]:
    """Positions in `coarse` of the current and the next target point."""
    k = int(np.searchsorted(coarse, index, side="right"))
    while k < len(coarse) - 1 and math.dist(route.xy[coarse[k]], xy) < TARGET_REACHED_M:
        k += 1
    k = min(k, len(coarse) - 1)
    return k, min(k + 1, len(coarse) - 1)


def _r3(v: float) -> float:
    return round(float(v), 3)


def measurements(snap: Snapshot, route: DenseRoute, coarse: np.ndarray, referee: Referee, *, frame_index: int,
                 tick: int, ahead: int, weather: dict, decision: Decision | None) -> Measurements:
    """The measurements of the frame recorded now (tools.dataset.measurements); values rounded to millimetres.
    `decision` is what the driver decided at this frame (None: the policy's input, before it decides)."""
    ego = snap.ego
    xy = np.array([ego.x, ego.y])
    k, k2 = _targets(route, coarse, referee.index, xy)
    tp, tp_next = route.xy[coarse[k]], route.xy[coarse[k2]]
    s_ahead = route.s[referee.index] + ROUTE_AHEAD_SPACING_M * np.arange(ahead)
    route_ahead = np.stack([np.interp(s_ahead, route.s, route.xy[:, i]) for i in (0, 1)], axis=1)
    light = decision.light if decision else None
    leader = decision.leader if decision else None
    light_hazard = bool(light and light["distance"] < LIGHT_HAZARD_M and stops_for(light["state"], light["distance"],
                                                                                  ego.speed))
    vehicle_hazard = bool(leader and leader["gap"] < max(8.0, 2.0 * ego.speed + 4.0))
    heading = -math.radians(ego.yaw)  # OpenDRIVE frame: counter-clockwise from +x
    command = RoadOption(int(route.option[coarse[k]]))
    return Measurements(
        frame=frame_index,
        tick=tick,
        time=_r3(snap.time),
        ego={"x": _r3(ego.x), "y": _r3(ego.y), "z": _r3(ego.z), "yaw": _r3(ego.yaw), "speed": _r3(ego.speed),
             "extent": [ego.length, ego.width, ego.height]},
        ego_opendrive={"x": _r3(ego.x), "y": _r3(-ego.y), "heading": round(heading, 5)},
        speed=_r3(ego.speed),
        acceleration=_r3(snap.acceleration),
        target_speed=_r3(decision.target_speed if decision else 0.0),
        speed_limit=_r3(snap.speed_limit),
        command=int(command),
        next_command=int(route.option[coarse[k2]]),
        command_name=command.name,
        target_point=[_r3(tp[0]), _r3(tp[1])],
        target_point_next=[_r3(tp_next[0]), _r3(tp_next[1])],
        target_point_ego=[_r3(v) for v in world_to_ego(ego, tp[None, :2])[0]],
        route=np.round(route_ahead, 3).tolist(),
        route_index=referee.index,
        route_completion=_r3(referee.completion),
        junction=bool(route.junction[referee.index]),
        lane=snap.lane,
        light=light,
        leader=leader,
        light_hazard=light_hazard,
        vehicle_hazard=vehicle_hazard,
        weather=weather,
        reason=decision.reason if decision else "",
        reason_detail=decision.detail if decision else "",
        control=decision.control.to_dict() if decision else {},
        scenario=snap.scenario,
    )


def box_label(box: Box, ego: Box) -> BoxLabel:
    """The label of an actor's box in a frame whose ego is `ego`; values rounded to millimetres."""
    return _label(box, ego, world_to_ego(ego, np.array([box.x, box.y, box.z])).tolist())


def boxes(snap: Snapshot) -> list[BoxLabel]:
    """Labels of the actors within BOX_RADIUS_M of the ego."""
    ego = snap.ego
    near = [a for a in snap.actors if math.hypot(a.x - ego.x, a.y - ego.y) < BOX_RADIUS_M]
    if not near:
        return []
    centres = world_to_ego(ego, np.array([[a.x, a.y, a.z] for a in near])).tolist()
    return [_label(a, ego, c) for a, c in zip(near, centres, strict=True)]


def _label(box: Box, ego: Box, center_ego: list[float]) -> BoxLabel:
    return BoxLabel(id=box.id, cls=int(box.cls), center=[_r3(box.x), _r3(box.y), _r3(box.z)], yaw=_r3(box.yaw),
                    extent=[_r3(box.length), _r3(box.width), _r3(box.height)], speed=_r3(box.speed),
                    center_ego=[_r3(v) for v in center_ego], yaw_ego=_r3(yaw_to_ego(ego, box.yaw)))


def write_run_json(layout: Layout, key: RunKey, route: Route, *, town: str, town_file: Path,
                   settings: CollectSettings, rig: RigConfig, dense: DenseRoute, coarse: np.ndarray, repetition: int,
                   seed: int, attempt: int) -> None:
    """The run's run.json (what every reader of the run looks up: rig, rate, route), from either world."""
    atomic.write_json(layout.run_settings(key), {
        "route": route.id, "town": town, "town_file": str(town_file), "scenario": route.scenario,
        "repetition": repetition, "seed": seed, "attempt": attempt,
        "host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # settings holds the recording rate (sim_hz, record_every: rig.run_rate); frame_dt for the reader.
        "settings": settings.to_dict(), "frame_dt": settings.rate.frame_dt, "rig": rig.to_dict(),
        "route_length": round(dense.length, 3),
        "dense_route": dense.to_dict(), "target_indices": coarse.tolist(), "format": frames.FRAME_FORMAT,
    })


#: A frame's sensors as tools.dataset.frames.pack_frame takes them: name -> (array, codec).
Sensors = dict[str, tuple[np.ndarray, str]]


class RunRecorder:
    """Writes one route run's files: run.json at the start, a frame per recording tick, heartbeats, and the
    measurements index at the end. The order of writes is what makes a killed run never look complete
    (tools.collect.runner.attempt writes the result after `finish`). A loop calls `add_frame` once per tick; the
    recorder counts the ticks and decides which are frame ticks and when the heartbeat beats."""

    def __init__(self, layout: Layout, key: RunKey, route: Route, dense: DenseRoute, settings: CollectSettings):
        self.layout, self.key, self.route, self.dense, self.settings = layout, key, route, dense, settings
        self.coarse = dense.target_indices()
        self.weather = route.weathers[0] if route.weathers else {}
        self.town = ""  # start's
        self.ticks = 0  # ticks added so far (add_frame): the index of the tick now
        self.frames = 0  # frames written so far: the index of the next one
        self.recorded: list[Measurements] = []  # the frames' measurements, for the run's measurements index
        self.fingerprints: list[int] = []  # and their fingerprints (frames.fingerprint)
        self._last_beat = 0.0

    def start(self, *, town: str, town_file: Path, rig: RigConfig, repetition: int, seed: int, attempt: int) -> None:
        """run.json (what every reader of the run looks up), then the first heartbeat."""
        self.town = town
        write_run_json(self.layout, self.key, self.route, town=town, town_file=town_file, settings=self.settings,
                       rig=rig, dense=self.dense, coarse=self.coarse, repetition=repetition, seed=seed,
                       attempt=attempt)
        heartbeats.write_heartbeat(self.layout, self.key, 0)
        self._last_beat = time.monotonic()

    @property
    def due(self) -> bool:
        """Whether this tick (the next `add_frame`) is a frame tick: every settings.record_every ticks. A loop
        renders sensors only then, and a policy sees them only then."""
        return self.ticks % self.settings.record_every == 0

    def measurements(self, snap: Snapshot, referee: Referee, decision: Decision | None = None) -> Measurements:
        """The measurements of this tick's frame (`decision` None: a policy's input, before it decides)."""
        return measurements(snap, self.dense, self.coarse, referee, frame_index=self.frames, tick=self.ticks,
                            ahead=self.settings.route_ahead, weather=self.weather, decision=decision)

    def add_frame(self, snap: Snapshot | None, referee: Referee, decision: Decision,
                  sensors: Sensors | Callable[[], Sensors] | None, timings: dict[str, float] | None = None) -> None:
        """Once per tick, after the driver decided and before the world moves on. On a frame tick with recording
        on, the frame is written atomically as frames/<index>.msgpack: the measurements of `snap` (the state the
        driver saw), the referee's place and `decision`, the boxes near the ego, and `sensors` (or what it gives
        when called: our CARLA agent gathers its sensors only for a frame written). On other ticks `snap` and
        `sensors` may be None. A heartbeat when the last one is heartbeats.HEARTBEAT_EVERY_S wall seconds old.
        `timings`, if given, receives the seconds spent encoding and writing a frame."""
        if self.due and self.settings.record:
            if snap is None or sensors is None:
                raise ValueError(f"{self.key}: tick {self.ticks} is a frame tick, but add_frame got no "
                                 f"{'snapshot' if snap is None else 'sensors'}")
            arrays = sensors() if callable(sensors) else sensors
            t0 = time.perf_counter()
            m = self.measurements(snap, referee, decision)
            self.recorded.append(m)
            data = frames.pack_frame(self.frames, m, boxes(snap), arrays, run=str(self.key))
            self.fingerprints.append(frames.fingerprint(data))
            t1 = time.perf_counter()
            frames.write_packed(self.layout.frame_path(self.key, self.frames), data)
            self.frames += 1
            if timings is not None:
                timings.update(encoding=t1 - t0, writing=time.perf_counter() - t1)
        self.ticks += 1
        if time.monotonic() - self._last_beat > heartbeats.HEARTBEAT_EVERY_S:
            heartbeats.write_heartbeat(self.layout, self.key, self.ticks)
            self._last_beat = time.monotonic()

    def finish(self) -> None:
        """After the last frame: the run's measurements index (what the bucket builder reads instead of every
        frame)."""
        if self.recorded:
            frames.write_run_measurements(self.layout.run_measurements(self.key), self.town, self.recorded,
                                          fingerprints=self.fingerprints)
