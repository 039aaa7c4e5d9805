"""The embedded world's traffic: SUMO through libsumo, in-process and seeded.

SUMO drives everything, the ego included: its car-following and right-of-way model is the expert.
This module converts SUMO's frame (network coordinates, angles clockwise from north, front-bumper
positions) into CARLA's frame once, so everything downstream speaks CARLA.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from tools.collect.planner import DenseRoute
from tools.collect.state import Box, Light, Snapshot
from tools.collect.town import Town
from tools.dataset import semantics
from tools.dataset.errors import ToolError

EGO = "ego"
#: (class, length, width, height, share) of background vehicles.
VEHICLE_TYPES = (
    (semantics.CAR, 4.6, 1.9, 1.5, 0.80),
    (semantics.TRUCK, 7.5, 2.4, 3.0, 0.12),
    (semantics.BUS, 11.0, 2.5, 3.2, 0.08),
)
EGO_SIZE = (4.9, 2.1, 1.5)
#: SUMO lane-change mode of the ego: the default 1621 without speed-gain (bit 4) and keep-right (bit 6) changes.
EGO_LANE_CHANGE_MODE = 1621 - 16 - 64  # a CARLA Lincoln MKZ, roughly
_STATE = {"r": "red", "R": "red", "s": "red", "y": "yellow", "Y": "yellow", "u": "yellow", "G": "green",
          "g": "green", "o": "off", "O": "off"}


class WorldError(ToolError):
    pass


@dataclass
class StepEvents:
    """What happened to the ego during one tick."""

    collisions: list[str] = field(default_factory=list)  # ids of vehicles the ego collided with
    ran_red_light: str | None = None  # "<tls>:<link>" crossed on red
    arrived: bool = False  # the ego reached the end of its route
    teleported: bool = False  # SUMO removed the ego from a jam


class SumoWorld:
    """One SUMO simulation (libsumo allows one per process): background traffic and the ego on its route."""

    def __init__(self, town: Town, route: DenseRoute, seed: int, vehicles: int, sim_hz: int):
        import libsumo

        from tools.collect.town import sumo_binary

        self.ls = libsumo
        self.town = town
        self.rng = random.Random(seed)
        self.dt = 1.0 / sim_hz
        self.time = 0.0
        self.tick = 0
        self._ids: dict[str, int] = {EGO: 0}
        self._types: dict[str, tuple[int, float, float, float]] = {EGO: (semantics.CAR, *EGO_SIZE)}
        self._next_bg = 0
        self._last_tls: tuple[str, int, float, str] | None = None
        self.target_vehicles = vehicles
        libsumo.start([
            sumo_binary("sumo"), "-n", str(town.net), "--step-length", f"{self.dt}", "--seed", str(seed),
            "--no-step-log", "true", "--no-warnings", "true", "--collision.action", "warn",
            "--collision.check-junctions", "true", "--time-to-teleport", "60", "--ignore-route-errors", "true",
            "--default.action-step-length", f"{self.dt}", "--lanechange.duration", "2.0",
        ])
        try:
            self._edges = [e for e in libsumo.edge.getIDList() if not e.startswith(":")]
            self._setup_types()
            self._add_ego(route)
            for _ in range(vehicles):
                self._add_background(depart_pos="random_free")
            self._lights = self._light_geometry()
        except BaseException:
            libsumo.close()
            raise

    # ------------------------------------------------------------------ setup
    def _setup_types(self) -> None:
        vt = self.ls.vehicletype
        vt.copy("DEFAULT_VEHTYPE", "ego")
        length, width, height = EGO_SIZE
        vt.setLength("ego", length)
        vt.setWidth("ego", width)
        vt.setHeight("ego", height)
        vt.setImperfection("ego", 0.0)
        vt.setSpeedDeviation("ego", 0.0)
        vt.setMinGap("ego", 2.5)
        for cls, length, width, height, _ in VEHICLE_TYPES:
            name = f"bg{cls}"
            vt.copy("DEFAULT_VEHTYPE", name)
            vt.setLength(name, length)
            vt.setWidth(name, width)
            vt.setHeight(name, height)
            vt.setImperfection(name, 0.5)
            vt.setSpeedDeviation(name, 0.1)

    def _route_edges(self, route: DenseRoute) -> tuple[list[str], float, int, float]:
        """SUMO edges along the dense route, the start position and lane, the arrival position."""
        sumo_xy = self.town.carla_to_sumo(route.xy)
        hits = []
        for x, y in sumo_xy[:: max(1, len(sumo_xy) // 400)].tolist() + [sumo_xy[-1].tolist()]:
            edge, pos, lane = self.ls.simulation.convertRoad(x, y, False, "passenger")
            if edge and not edge.startswith(":"):
                hits.append((edge, pos, lane))
        if not hits:
            raise WorldError("the route does not lie on any SUMO edge")
        edges = [hits[0][0]]
        for edge, _, _ in hits[1:]:
            if edge == edges[-1]:
                continue
            link = self.ls.simulation.findRoute(edges[-1], edge, vType="ego")
            if not link.edges:
                raise WorldError(f"SUMO finds no way from edge {edges[-1]} to {edge} along the route")
            edges += list(link.edges[1:])
        return edges, hits[0][1], hits[0][2], hits[-1][1]

    def _add_ego(self, route: DenseRoute) -> None:
        edges, start_pos, start_lane, end_pos = self._route_edges(route)
        self.ls.route.add("ego_route", edges)
        lane_len = self.ls.lane.getLength(f"{edges[0]}_{start_lane}")
        depart = min(start_pos + EGO_SIZE[0], lane_len - 0.1)
        self.ls.vehicle.add(EGO, "ego_route", typeID="ego", depart="now", departPos=f"{depart:.2f}",
                            departLane=str(start_lane), departSpeed="0", arrivalPos=f"{max(end_pos, 0.1):.2f}")
        self.ls.vehicle.setSpeedFactor(EGO, 1.0)
        # The expert changes lanes only where its route needs it (no overtaking, no keep-right moves).
        self.ls.vehicle.setLaneChangeMode(EGO, EGO_LANE_CHANGE_MODE)
        self.ls.simulationStep()
        self.time += self.dt
        self.tick += 1
        if EGO not in self.ls.vehicle.getIDList():
            raise WorldError("SUMO could not place the ego at the start of the route")

    def _add_background(self, depart_pos: str = "base") -> None:
        for _ in range(20):
            a, b = self.rng.sample(self._edges, 2)
            found = self.ls.simulation.findRoute(a, b)
            if found.edges and len(found.edges) >= 2:
                break
        else:
            return
        cls = self.rng.choices([t[0] for t in VEHICLE_TYPES], weights=[t[-1] for t in VEHICLE_TYPES])[0]
        vid = f"bg{self._next_bg}"
        self._next_bg += 1
        self.ls.route.add(f"r_{vid}", list(found.edges))
        self.ls.vehicle.add(vid, f"r_{vid}", typeID=f"bg{cls}", depart="now", departPos=depart_pos,
                            departLane="best", departSpeed="avg")
        self.ls.vehicle.setSpeedFactor(vid, self.rng.uniform(0.8, 1.1))

    def _light_geometry(self) -> list[tuple[str, str, list[int], float, float, float, float]]:
        """Static stop lines: (tls, incoming lane, its link indices, x, y, yaw, width) in CARLA's frame.

        A link index is the position of a connection in the signal's state string, as in
        trafficlight.getControlledLinks and the network's `connection linkIndex` (tools.collect.scene)."""
        out = []
        for tls in self.ls.trafficlight.getIDList():
            lanes: dict[str, list[int]] = {}
            for index, links in enumerate(self.ls.trafficlight.getControlledLinks(tls)):
                for in_lane, _, _ in links:
                    lanes.setdefault(in_lane, []).append(index)
            for lane, indices in lanes.items():
                shape = np.array(self.ls.lane.getShape(lane))[-2:, :2]
                xy = self.town.sumo_to_carla(shape)
                yaw = math.degrees(math.atan2(xy[1, 1] - xy[0, 1], xy[1, 0] - xy[0, 0]))
                out.append((tls, lane, indices, float(xy[1, 0]), float(xy[1, 1]), yaw, self.ls.lane.getWidth(lane)))
        return out

    # ------------------------------------------------------------------ stepping
    def step(self) -> StepEvents:
        ls = self.ls
        ev = StepEvents()
        before = self._next_tls()
        lane_before = ls.vehicle.getLaneID(EGO)
        ls.simulationStep()
        self.time += self.dt
        self.tick += 1
        arrived = set(ls.simulation.getArrivedIDList())
        ev.arrived = EGO in arrived
        ev.teleported = EGO in ls.simulation.getStartingTeleportIDList()
        for c in ls.simulation.getCollisions():
            if EGO in (c.collider, c.victim):
                ev.collisions.append(c.victim if c.collider == EGO else c.collider)
        if not ev.arrived and not ev.teleported:
            # Ran a red light: entered the junction (an internal lane) while its signal showed red.
            entered = ls.vehicle.getLaneID(EGO).startswith(":") and not lane_before.startswith(":")
            if entered and before and before[2] < 3.0 and before[3] in "rR":
                ev.ran_red_light = f"{before[0]}:{before[1]}"
        # Keep the traffic density: a vehicle that arrived is replaced by a new one elsewhere.
        for vid in arrived - {EGO}:
            self._ids.pop(vid, None)
            self._types.pop(vid, None)
            self._add_background()
        return ev

    def _next_tls(self) -> tuple[str, int, float, str] | None:
        nxt = self.ls.vehicle.getNextTLS(EGO) if EGO in self.ls.vehicle.getIDList() else ()
        return tuple(nxt[0]) if nxt else None

    # ------------------------------------------------------------------ state
    def _box(self, vid: str) -> Box:
        ls = self.ls
        if vid not in self._types:
            tid = ls.vehicle.getTypeID(vid)
            cls = int(tid[2:]) if tid.startswith("bg") else semantics.CAR
            self._types[vid] = (cls, ls.vehicle.getLength(vid), ls.vehicle.getWidth(vid), ls.vehicle.getHeight(vid))
        if vid not in self._ids:
            self._ids[vid] = len(self._ids)
        cls, length, width, height = self._types[vid]
        fx, fy = ls.vehicle.getPosition(vid)  # front bumper, SUMO frame
        angle = ls.vehicle.getAngle(vid)
        yaw = self.town.sumo_angle_to_yaw(angle)
        front = self.town.sumo_to_carla(np.array([fx, fy]))
        c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
        return Box(id=self._ids[vid], cls=cls, x=float(front[0] - c * length / 2), y=float(front[1] - s * length / 2),
                   z=height / 2, yaw=yaw, length=length, width=width, height=height,
                   speed=float(ls.vehicle.getSpeed(vid)))

    def ego_box(self) -> Box:
        return self._box(EGO)

    def snapshot(self) -> Snapshot:
        ids = self.ls.vehicle.getIDList()
        lights = []
        states = {tls: self.ls.trafficlight.getRedYellowGreenState(tls) for tls in self.ls.trafficlight.getIDList()}
        for tls, _, indices, x, y, yaw, width in self._lights:
            for i in indices:  # one light per link, on its lane's stop line
                state = _STATE.get(states[tls][i], "off") if i < len(states[tls]) else "off"
                lights.append(Light(id=f"{tls}:{i}", x=x, y=y, yaw=yaw, width=width, state=state))
        return Snapshot(time=self.time, ego=self._box(EGO), actors=[self._box(v) for v in ids if v != EGO],
                        lights=lights)

    def ego_state(self) -> dict:
        """The expert's view: speed, acceleration, allowed and target speed, leader and next light."""
        v = self.ls.vehicle
        speed = v.getSpeed(EGO)
        allowed = v.getAllowedSpeed(EGO)
        target = allowed * v.getSpeedFactor(EGO)
        leader = v.getLeader(EGO, 60.0)
        lead = None
        if leader and leader[0]:
            lid, gap = leader
            lspeed = v.getSpeed(lid)
            lead = {"id": self._box(lid).id, "gap": round(gap, 3), "speed": round(lspeed, 3)}
            target = min(target, v.getFollowSpeed(EGO, speed, max(gap, 0.0), lspeed, v.getDecel(lid), lid))
        tls = self._next_tls()
        light = None
        if tls:
            tid, index, dist, state = tls
            light = {"id": f"{tid}:{index}", "distance": round(dist, 3), "state": _STATE.get(state, "off")}
            if state in "rRyYs" and dist < 60.0:
                target = min(target, v.getStopSpeed(EGO, speed, max(dist - 1.0, 0.0)))
        return {
            "speed": speed,
            "acceleration": v.getAcceleration(EGO),
            "speed_limit": allowed,
            "target_speed": max(target, 0.0),
            "lane": v.getLaneID(EGO),
            "leader": lead,
            "light": light,
        }

    def close(self) -> None:
        self.ls.close()
