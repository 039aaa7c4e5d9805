"""Bench2Drive's metric_info.json of an evaluated route run: the ego's kinematics at every tick, which Bench2Drive's
smoothness metric reads (tools.evaluate.bench2drive; their tools/efficiency_smoothness_benchmark.py, the same file).

Bench2Drive's leaderboard fork (leaderboard/autoagents/autonomous_agent.py, `get_metric_info`) gives six vectors of
the hero actor; the agents of Bench2DriveZoo (team_code/*_b2d_agent.py) store them at every `run_step`, that is at
every simulation tick (20 Hz), in a dict keyed by their step counter (0, 1, ...), and dump it to
SAVE_PATH/<save_name>/metric_info.json. We write the same keys, in CARLA's conventions (left-handed: x forward east,
y south, z up; yaw in degrees clockwise seen from above; the embedded world's frame is CARLA's already,
tools.collect.sim.world), at every tick of the drive loop, from the first (time 0) on:

    {"0": {"acceleration": [ax, ay, az],          m/s^2, world frame (get_acceleration)
           "angular_velocity": [wx, wy, wz],      deg/s, world frame (get_angular_velocity)
           "forward_vector": [fx, fy, fz],        unit vector (get_transform().get_forward_vector())
           "right_vector": [rx, ry, rz],          unit vector (get_right_vector())
           "location": [x, y, z],                 m (get_transform().location)
           "rotation": [roll, pitch, yaw]},       degrees (get_transform().rotation)
     "1": {...}, ...}

The embedded world's ego is a flat kinematic bicycle: z, roll, pitch and the x and y angular velocities are 0; the
velocity is the speed along the heading; acceleration and yaw rate are differences between consecutive ticks (0 at
the first): `kinematics`, which the leaderboard agent's stand-in of the hero reads too
(tools.evaluate.leaderboard.host). Values are rounded to 6 digits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tools.core import atomic, files

#: The six vectors of one tick, in Bench2Drive's order.
KEYS = ("acceleration", "angular_velocity", "forward_vector", "right_vector", "location", "rotation")
#: A metric_info.json is at most this large (a 20 Hz tick is about 250 bytes: two hours of driving).
MAX_BYTES = 64 << 20


def kinematics(yaw: float, speed: float, last: tuple[float, float, float] | None,
               dt: float) -> tuple[tuple[float, float], tuple[float, float], float]:
    """The embedded world's ego at one tick as CARLA's actor gives it: its velocity (vx, vy), the speed along the
    heading `yaw` (degrees); its acceleration (ax, ay) and yaw rate (degrees per second) by difference with `last`,
    the previous tick's (vx, vy, yaw) `dt` seconds before (0 at the first tick, None)."""
    c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    vx, vy = speed * c, speed * s
    if last is None:
        return (vx, vy), (0.0, 0.0), 0.0
    accel = ((vx - last[0]) / dt, (vy - last[1]) / dt)
    return (vx, vy), accel, ((yaw - last[2] + 180.0) % 360.0 - 180.0) / dt


def _r(v: float) -> float:
    return round(float(v), 6) + 0.0  # + 0.0: no -0.0 in the file


class MetricInfoTrack:
    """The ticks of one run, in order: `add` once per tick, `write` at the end."""

    def __init__(self, dt: float):
        self.dt = float(dt)
        self.ticks: list[dict[str, list[float]]] = []
        self._last: tuple[float, float, float] | None = None  # vx, vy (m/s), yaw (degrees) of the last tick

    def add(self, x: float, y: float, yaw: float, speed: float) -> None:
        """The ego at this tick: centre (x, y) and yaw (degrees) in CARLA's frame, speed along its heading (m/s)."""
        (vx, vy), (ax, ay), wz = kinematics(yaw, speed, self._last, self.dt)
        self._last = (vx, vy, yaw)
        c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
        self.ticks.append({
            "acceleration": [_r(ax), _r(ay), 0.0],
            "angular_velocity": [0.0, 0.0, _r(wz)],
            "forward_vector": [_r(c), _r(s), 0.0],
            "right_vector": [_r(-s), _r(c), 0.0],
            "location": [_r(x), _r(y), 0.0],
            "rotation": [0.0, 0.0, _r(yaw)],
        })

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {str(i): tick for i, tick in enumerate(self.ticks)}

    def write(self, path: Path) -> None:
        """The file, atomically; one tick a line."""
        lines = [f"{json.dumps(str(i))}:{json.dumps(tick, separators=(',', ':'))}" for i, tick in enumerate(self.ticks)]
        atomic.write_text(Path(path), "{\n" + ",\n".join(lines) + "\n}\n")


def read_metric_info(path: Path) -> dict[str, np.ndarray]:
    """The six vectors of a metric_info.json, each an (N, 3) float array of its ticks in the file's order (as
    Bench2Drive's reader iterates them). OSError when unreadable, ValueError when not such a file."""
    data: Any = files.read_json(path, MAX_BYTES)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object of ticks")
    out = {}
    try:
        for key in KEYS:
            out[key] = np.array([tick[key] for tick in data.values()], dtype=np.float64).reshape(len(data), 3)
    except (TypeError, KeyError, ValueError) as e:
        raise ValueError(f"{path}: a tick without three numbers for {key!r} ({e})") from e
    return out
