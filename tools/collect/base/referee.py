"""The referee of a route run, in either world: route progress and infractions, as the leaderboard's criteria
judge them. In the embedded world it judges the run (its statuses and infractions are the run's record); under
the CARLA leaderboard the evaluator judges, and the referee only tracks the ego's place on the route."""

from __future__ import annotations

import numpy as np

from tools.collect.base.config import CollectSettings
from tools.dataset import results
from tools.expert.route import DenseRoute

#: The referee looks for the ego's place on the route this far beyond the last one, metres.
PROGRESS_WINDOW_M = 30.0
#: Standing still within this distance (of the ego's centre) before a stop sign's line counts as stopping, metres.
STOP_AREA_M = 8.0
#: The ego whose place on the route is this close to its end has completed it, metres.
ARRIVAL_TOLERANCE_M = 2.0


class Referee:
    """Route progress and infractions, as the leaderboard's criteria judge them."""

    def __init__(self, route: DenseRoute, settings: CollectSettings, stops: np.ndarray | None = None):
        self.route = route
        self.settings = settings
        #: Route distances of the stop signs' lines (tools.expert.route.stop_signs); the next one to judge; whether the
        #: ego stood still near it.
        self.stops = np.zeros(0) if stops is None else np.asarray(stops, dtype=np.float64)
        self._next_stop = 0
        self._stood = False
        self.index = 0
        self.still_since: float | None = None
        self.infractions: dict[str, list[str]] = {k: [] for k in results.INFRACTION_KEYS}
        self.status: str | None = None  # set when the run must end with a failure
        self.stopped: str | None = None  # the infraction that ended the run (settings.stop_on_infraction)
        self.budget = settings.timeout_base + route.length / settings.timeout_speed

    @property
    def completion(self) -> float:
        return 100.0 * float(self.route.s[self.index]) / max(self.route.length, 1e-6)

    def track(self, xy: np.ndarray) -> float:
        """Move the ego's place on the route (`index`) to `xy`; its distance from the route, metres. In CARLA
        this is all the referee does (the leaderboard judges the run)."""
        self.index, off = self.route.advance(self.index, float(xy[0]), float(xy[1]), PROGRESS_WINDOW_M)
        return off

    def update(self, t: float, xy: np.ndarray, speed: float, events) -> None:
        """Judge one tick: the ego at `xy` with `speed`, and what the world saw happen (world.StepEvents). With
        settings.stop_on_infraction the first infraction ends the run: `Failed` (unless the same tick ended it
        otherwise), the infraction in the record, `stopped` naming it."""
        before = {k: len(v) for k, v in self.infractions.items()}
        self._judge(t, xy, speed, events)
        if self.settings.stop_on_infraction and self.stopped is None:
            new = [(k, v[before[k]]) for k, v in self.infractions.items() if len(v) > before[k]]
            if new:
                self.stopped = f"{new[0][0]}: {new[0][1]}"
                self.status = self.status or results.FAILED

    def _judge(self, t: float, xy: np.ndarray, speed: float, events) -> None:
        off = self.track(xy)
        if off > self.settings.max_deviation:
            self.infractions["route_dev"].append(f"Agent deviated from the route at (x={xy[0]:.1f}, y={xy[1]:.1f})")
            self.status = results.FAILED_DEVIATED
        for other, kind in events.collisions:
            self.infractions[f"collisions_{kind}"].append(
                f"Agent collided against object with type={kind} and id={other} at (x={xy[0]:.1f}, y={xy[1]:.1f})")
        if events.ran_red_light:
            self.infractions["red_light"].append(
                f"Agent ran a red light {events.ran_red_light} at (x={xy[0]:.1f}, y={xy[1]:.1f})")
        self._judge_stop(speed, xy)
        if speed > 0.1:
            self.still_since = None
        elif self.still_since is None:
            self.still_since = t
        if self.still_since is not None and t - self.still_since > self.settings.blocked_after:
            self.infractions["vehicle_blocked"].append(f"Agent got blocked at (x={xy[0]:.1f}, y={xy[1]:.1f})")
            self.status = results.FAILED_BLOCKED
        if t > self.budget:
            self.infractions["route_timeout"].append("Route timeout.")
            self.status = results.FAILED

    def _judge_stop(self, speed: float, xy: np.ndarray) -> None:
        """A stop sign run: the ego's centre passed the stop line without standing still (below 0.1 m/s, the
        leaderboard's threshold) within STOP_AREA_M before it."""
        if self._next_stop >= len(self.stops):
            return
        line, s = float(self.stops[self._next_stop]), float(self.route.s[self.index])
        if line - STOP_AREA_M <= s and speed < 0.1:
            self._stood = True
        if s > line + 1.0:
            if not self._stood:
                self.infractions["stop_infraction"].append(
                    f"Agent ran a stop sign at (x={xy[0]:.1f}, y={xy[1]:.1f})")
            self._next_stop += 1
            self._stood = False

    @property
    def arrived(self) -> bool:
        """The ego reached the route's end."""
        return self.route.length - float(self.route.s[self.index]) < ARRIVAL_TOLERANCE_M

    def final_status(self) -> str:
        if self.status:
            return self.status
        if self.completion < 100.0 - 1e-6:
            return results.FAILED
        return results.COMPLETED if any(self.infractions.values()) else results.PERFECT
