"""The embedded world's traffic signals: every signal's stop lines (from SUMO's network, in CARLA's frame), the
lights the world state shows near the ego, and the red lights it runs.

A light is one signalled link (tools.expert.state.Light, id "<tls id>:<link index>"): the links leaving one lane
share its stop line, each with a via point on its way through the junction. A red light is run when the ego's
front crosses a stop line while the link it then takes (judged LINK_JUDGED_AFTER_M beyond the line, by the nearest
via point) shows red, as the leaderboard's criterion judges it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tools.collect.base.town import Town
from tools.dataset.geometry import wrap_degrees
from tools.expert.state import Light

#: SUMO's signal state letters.
_STATE = {"r": "red", "R": "red", "s": "red", "y": "yellow", "Y": "yellow", "u": "yellow", "G": "green",
          "g": "green", "o": "off", "O": "off"}
#: A red-light crossing is judged once the ego has driven this far past the stop line (which link it took).
LINK_JUDGED_AFTER_M = 8.0
#: Bump when _read_stop_lines changes: the stop lines are kept beside the town.
_STOP_LINES_VERSION = "stop lines 1"
#: The ego's front crossing a stop line is looked for at the lines this close to it along x and along y, metres.
LINE_NEAR_M = 15.0
#: Side of the squares by which stop lines are looked up, metres: larger than LINE_NEAR_M, so that the lines near
#: a point lie in its square or in the eight around it.
_LINE_CELL_M = 20.0


def _cell(x: float, y: float) -> tuple[int, int]:
    return math.floor(x / _LINE_CELL_M), math.floor(y / _LINE_CELL_M)


@dataclass(frozen=True)
class StopLine:
    """The stop line of one incoming lane of a signal, and its links (index, via point) through the junction."""

    tls: str
    x: float
    y: float
    yaw: float
    width: float
    links: tuple[tuple[int, tuple[float, float]], ...]


@dataclass
class _Crossing:
    """A stop line the ego crossed, waiting to be judged: the link states at that moment."""

    line: StopLine
    states: dict[int, str]
    x: float
    y: float


class Signals:
    """The signals of one SUMO simulation (`ls`, libsumo, started on `town`'s network)."""

    def __init__(self, ls: Any, town: Town):
        self.ls = ls
        self.town = town
        self._crossing: _Crossing | None = None
        self._light_cache: dict[tuple[int, str], list[Light]] = {}
        self.stop_lines = self._stop_lines()
        self._line_xy = np.array([[line.x, line.y] for line in self.stop_lines]).reshape(-1, 2)
        #: The stop lines in each _LINE_CELL_M square or in the eight around it, in the order of stop_lines.
        self._lines_around: dict[tuple[int, int], list[StopLine]] = {}
        for line in self.stop_lines:
            cx, cy = _cell(line.x, line.y)
            for cell in ((i, j) for i in (cx - 1, cx, cx + 1) for j in (cy - 1, cy, cy + 1)):
                self._lines_around.setdefault(cell, []).append(line)

    def _stop_lines(self) -> list[StopLine]:
        """Every signal's stop lines (`_read_stop_lines`), read from SUMO once per town and kept beside it
        (Town.derived_file: a quarter of a second of every route run's start on Town12)."""
        def write(tmp) -> None:
            tmp.write_text(json.dumps([[line.tls, line.x, line.y, line.yaw, line.width, line.links]
                                       for line in self._read_stop_lines()]))

        path = self.town.derived_file("stop-lines.json", f"{_STOP_LINES_VERSION} {self.town.net.name}", write)
        return [StopLine(tls, x, y, yaw, width, tuple((int(i), (float(v[0]), float(v[1]))) for i, v in links))
                for tls, x, y, yaw, width, links in json.loads(path.read_text())]

    def _read_stop_lines(self) -> list[StopLine]:
        """Every signal's stop lines in CARLA's frame, with each link's via point: the middle of the link's
        way through the junction. A link index is the position of a connection in the signal's state
        string, as in trafficlight.getControlledLinks and the network's `connection linkIndex`."""
        out = []
        for tls in self.ls.trafficlight.getIDList():
            lanes: dict[str, list[tuple[int, tuple[float, float]]]] = {}
            for index, links in enumerate(self.ls.trafficlight.getControlledLinks(tls)):
                for in_lane, out_lane, via_lane in links:
                    shape = np.array(self.ls.lane.getShape(via_lane or out_lane))[:, :2]
                    mid = self.town.sumo_to_carla(shape[len(shape) // 2])
                    lanes.setdefault(in_lane, []).append((index, (float(mid[0]), float(mid[1]))))
            for lane, links in lanes.items():
                shape = np.array(self.ls.lane.getShape(lane))[-2:, :2]
                xy = self.town.sumo_to_carla(shape)
                yaw = math.degrees(math.atan2(xy[1, 1] - xy[0, 1], xy[1, 0] - xy[0, 0]))
                out.append(StopLine(tls, float(xy[1, 0]), float(xy[1, 1]), yaw, self.ls.lane.getWidth(lane),
                                    tuple(links)))
        return out

    def lights(self, x: float, y: float, radius: float) -> list[Light]:
        """The lights (one per link, on its lane's stop line) of the stop lines within `radius` of (x, y), with
        their signals' states now."""
        near = self._line_xy[:, 0] - x, self._line_xy[:, 1] - y
        lights: list[Light] = []
        states: dict[str, str] = {}
        for k in np.flatnonzero(np.hypot(*near) < radius).tolist():
            line = self.stop_lines[k]
            if line.tls not in states:
                states[line.tls] = self.ls.trafficlight.getRedYellowGreenState(line.tls)
            key = (k, states[line.tls])
            if key not in self._light_cache:  # a line's lights change only when its signal does
                state = states[line.tls]
                self._light_cache[key] = [  # one light per link, on its lane's stop line
                    Light(id=f"{line.tls}:{i}", x=line.x, y=line.y, yaw=line.yaw, width=line.width,
                          state=_STATE.get(state[i], "off") if i < len(state) else "off", via=via)
                    for i, via in line.links]
            lights += self._light_cache[key]
        return lights

    def judge(self, yaw: float, a: tuple[float, float], b: tuple[float, float]) -> str | None:
        """A red light run ("<tls>:<link>"): the ego's front, heading `yaw`, moved from `a` to `b` this tick; it
        crossed a stop line while the link it then took showed red (judged LINK_JUDGED_AFTER_M on)."""
        for line in self._lines_near(b):
            if abs(wrap_degrees(yaw - line.yaw)) > 60.0:
                continue
            c, s = math.cos(math.radians(line.yaw)), math.sin(math.radians(line.yaw))
            along_a = (a[0] - line.x) * c + (a[1] - line.y) * s
            along_b = (b[0] - line.x) * c + (b[1] - line.y) * s
            across = -(b[0] - line.x) * s + (b[1] - line.y) * c
            if along_a < 0.0 <= along_b and abs(across) <= line.width / 2 + 0.5:
                state = self.ls.trafficlight.getRedYellowGreenState(line.tls)
                states = {i: _STATE.get(state[i], "off") if i < len(state) else "off" for i, _ in line.links}
                self._crossing = _Crossing(line, states, b[0], b[1])
        cr = self._crossing
        if cr is None or math.hypot(b[0] - cr.x, b[1] - cr.y) < LINK_JUDGED_AFTER_M:
            return None
        self._crossing = None
        index = min(cr.line.links, key=lambda link: math.hypot(link[1][0] - b[0], link[1][1] - b[1]))[0]
        return f"{cr.line.tls}:{index}" if cr.states[index] == "red" else None

    def _lines_near(self, xy: tuple[float, float]) -> list[StopLine]:
        """The stop lines less than LINE_NEAR_M from `xy` along x and along y, in the order of `stop_lines`."""
        x, y = xy
        return [line for line in self._lines_around.get(_cell(x, y), ())
                if abs(line.x - x) < LINE_NEAR_M and abs(line.y - y) < LINE_NEAR_M]
