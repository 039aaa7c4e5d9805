"""The referee of a route run, in either world: route progress and infractions, as the leaderboard's criteria
judge them. In the embedded world it judges the run (its statuses and infractions are the run's record); under
the CARLA leaderboard the evaluator judges, and the referee only tracks the ego's place on the route.

The minimum speed (scenario_runner's MinimumSpeedRouteTest, atomic_criteria.py, v0.9.15 and v0.9.16 alike; read
there, our own code): the route is cut into equal lengths at checkpoints; over each, the ego's mean speed is compared
with the mean, over the same ticks, of the background traffic's mean speed (`MinSpeedCheckpoints`). The leaderboard
2.0 builds it with 4 checkpoints (an event under 100%, a penalty); Bench2Drive's fork with 20, every one kept, which
its efficiency metric averages. The referee judges both into the record's meta (`min_speed`, `bench2drive_min_speed`)
and puts no event among the infractions: the embedded world's traffic is already moving when the ego starts from
standstill (in CARLA the background activity starts standing too), so its first checkpoint would be harsher than
CARLA's, and the driving score leaves the minimum speed out, as Bench2Drive's does (docs/evaluation.md). The
background traffic is the world's to say (the embedded world: tools.collect.sim.world.StepEvents.traffic_speed).
"""

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
#: The leaderboard 2.0's minimum-speed checkpoints (leaderboard/scenarios/route_scenario.py, `checkpoints=4`; in
#: CARLA an event for each one under 100%).
MIN_SPEED_CHECKPOINTS = 4
#: Bench2Drive's (its fork's route_scenario.py, `checkpoints=20`): every one recorded.
BENCH2DRIVE_MIN_SPEED_CHECKPOINTS = 20
#: MinimumSpeedRouteTest.terminate: the last checkpoint is judged when the route ends with the ego past this share of
#: it ("routes end at around 99%").
MIN_SPEED_LAST_FRACTION = 0.95


class MinSpeedCheckpoints:
    """scenario_runner's MinimumSpeedRouteTest: the route's length cut into `checkpoints` equal parts. Every tick
    (`update`) with background traffic adds the ego's speed and the traffic's mean speed; when the ego's place on the
    route is more than one part beyond the last checkpoint, that checkpoint is judged (before this tick's speeds
    count): the ego's mean speed over the traffic's mean, percent, rounded to 2 digits; 100 when no tick had traffic
    (or the traffic stood still throughout). `finish` judges the last one when the ego is past
    MIN_SPEED_LAST_FRACTION of the route. The values, in order: `values`."""

    def __init__(self, length: float, checkpoints: int):
        self.length = float(length)
        self.part = self.length / checkpoints
        self.last_s = 0.0  # route distance of the last checkpoint
        self.ego = self.traffic = 0.0  # sums of speeds since then
        self.ticks = 0  # ticks since then with background traffic
        self.values: list[float] = []

    def update(self, s: float, ego_speed: float, traffic_speed: float | None) -> float | None:
        """One tick: the ego at route distance `s` with `ego_speed`; `traffic_speed` the background traffic's mean
        speed (None: no background vehicle). The value of the checkpoint judged now, else None."""
        judged = None
        if s - self.last_s > self.part:
            judged = self._judge()
            self.last_s = s
        if traffic_speed is not None:
            self.ego += ego_speed
            self.traffic += traffic_speed
            self.ticks += 1
        return judged

    def finish(self, s: float) -> float | None:
        """The route ended with the ego at route distance `s`: the last checkpoint's value when it is past
        MIN_SPEED_LAST_FRACTION of the route, else None."""
        if self.length > 0 and s / self.length > MIN_SPEED_LAST_FRACTION:
            return self._judge()
        return None

    def _judge(self) -> float:
        if self.ticks and self.traffic:
            value: float = round(self.ego / self.traffic * 100, 2)  # (sum / ticks) / (sum / ticks)
        else:
            value = 100  # the criterion's integer 100, as its message writes it
        self.values.append(value)
        self.ego = self.traffic = 0.0
        self.ticks = 0
        return value


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
        self.min_speed = MinSpeedCheckpoints(route.length, MIN_SPEED_CHECKPOINTS)
        self.min_speed_bench2drive = MinSpeedCheckpoints(route.length, BENCH2DRIVE_MIN_SPEED_CHECKPOINTS)

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
        s = float(self.route.s[self.index])
        self.min_speed.update(s, speed, events.traffic_speed)
        self.min_speed_bench2drive.update(s, speed, events.traffic_speed)
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

    def finish(self) -> None:
        """The route ended (MinimumSpeedRouteTest.terminate): the last minimum-speed checkpoints, judged when the ego
        got past MIN_SPEED_LAST_FRACTION of the route. Called once, after the last tick (and after an arrived run's
        place was set to the route's end)."""
        s = float(self.route.s[self.index])
        self.min_speed.finish(s)
        self.min_speed_bench2drive.finish(s)

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
