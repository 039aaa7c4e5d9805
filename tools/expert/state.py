"""The world state handed from a world backend (embedded SUMO world, or CARLA) to the drivers, the sensors and
the frame recorder (tools.collect.base.recording: a frame is recorded from one Snapshot).

All positions are in CARLA's world frame (tools.dataset.geometry): metres, x east, y = -y(OpenDRIVE)
(left-handed), z up; yaw in degrees, positive turning from +x towards +y (a right turn seen from above).
A vehicle's local frame is x forward, y right, z up, as in CARLA. What a recorded frame says about
these boxes is tools.dataset.measurements.BoxLabel (tools.collect.base.recording.box_label).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Box:
    """An oriented 3D box: an actor (vehicle) or a static structure."""

    id: int  # stable within a run; 0 is the ego
    cls: int  # semantic class (tools.dataset.semantics)
    x: float  # centre of the box, world frame
    y: float
    z: float
    yaw: float  # degrees
    length: float  # full extents, metres
    width: float
    height: float
    speed: float = 0.0  # m/s along the heading

    def corners(self) -> np.ndarray:
        """(8, 3) world coordinates of the corners."""
        c, s = math.cos(math.radians(self.yaw)), math.sin(math.radians(self.yaw))
        dx = np.array([1, 1, -1, -1, 1, 1, -1, -1]) * self.length / 2
        dy = np.array([1, -1, -1, 1, 1, -1, -1, 1]) * self.width / 2
        dz = np.array([-1, -1, -1, -1, 1, 1, 1, 1]) * self.height / 2
        return np.stack([self.x + c * dx - s * dy, self.y + s * dx + c * dy, self.z + dz], axis=1)


@dataclass(frozen=True)
class Light:
    """One signalled link (a connection from an incoming lane through a junction): its stop line and state.

    The links leaving one lane share its stop line. The id names the link as the world's traffic-light
    controller does, "<tls id>:<link index>" (SUMO: the index into trafficlight.getControlledLinks and the
    network's `connection linkIndex`); the renderer finds the lane's head by it (tools.collect.sensors.render).
    """

    id: str  # "<tls id>:<link index>"
    x: float  # centre of the stop line (end of the incoming lane), world frame
    y: float
    yaw: float  # driving direction of the incoming lane, degrees
    width: float  # lane width, metres
    state: str  # "red" | "yellow" | "green" | "off"
    #: A point on the link's way through the junction (world frame), telling the links of one stop line
    #: apart (a left turn may be red while straight on is green); None where all links show one state.
    via: tuple[float, float] | None = None


@dataclass
class Snapshot:
    """Everything the sensors need at one instant, and what a recorded frame says of the ego besides
    (tools.collect.base.recording.measurements)."""

    time: float  # simulated seconds since the start of the run
    ego: Box
    actors: list[Box] = field(default_factory=list)  # other vehicles (not the ego)
    lights: list[Light] = field(default_factory=list)
    speed_limit: float = 0.0  # of the ego's lane, m/s
    lane: str = ""  # the world's id of the ego's lane ("" while it has none)
    acceleration: float = 0.0  # the ego's, along its heading, m/s^2
    #: The running scenario nearest ahead of the ego (the embedded world's scenarios:
    #: tools.collect.sim.scenarios.Scenarios.active), None: none.
    scenario: dict | None = None
