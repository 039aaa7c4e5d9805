"""The embedded world: SUMO through libsumo, in-process and seeded, around an ego it does not drive.

SUMO drives every other vehicle. The ego is an external vehicle: a kinematic bicycle
(tools.collect.sim.vehicle) moved by its driver's control (the expert, tools.expert, or a trained policy)
and placed into SUMO each tick with `moveToXY`, so background traffic sees it and reacts to it.
What happens to the ego is judged here from geometry, as the leaderboard's criteria judge it:
collisions from box overlap, red lights from crossing a stop line while the link taken shows red
(tools.collect.sim.signals). The background traffic is tools.collect.sim.traffic's (around the ego on a large
town); the actors scenarios place and move (tools.collect.sim.scenarios) are kept here, as boxes with SUMO
stand-ins that SUMO's traffic stops behind.
This module converts SUMO's frame (network coordinates, angles clockwise from north, front-bumper
positions) into CARLA's frame once, so everything downstream speaks CARLA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import traci.constants as _tc  # libsumo's variable ids (libsumo shares TraCI's constants)

from tools.collect.base.town import Town, sumo_binary
from tools.collect.sim.signals import Signals
from tools.collect.sim.traffic import REGION_CHECK_TICKS, Background
from tools.collect.sim.vehicle import Bicycle
from tools.core.errors import ToolError
from tools.dataset import semantics
from tools.dataset.geometry import boxes_overlap, wrap_degrees
from tools.expert.control import Control
from tools.expert.route import DenseRoute
from tools.expert.state import Box, Snapshot

EGO = "ego"
EGO_SIZE = (4.9, 2.1, 1.5)  # a CARLA Lincoln MKZ, roughly
#: The world state (snapshot) holds the vehicles and lights within this distance of the ego, metres: what
#: the expert looks at (80 m ahead), the sensors see (the camera's far lamps are a pixel at this range).
VIEW_RADIUS_M = 150.0
#: No background vehicle starts this close behind the ego (in its lane or beside it), metres.
START_CLEAR_M = 30.0
#: The leaderboard's collision kind (collisions_<kind>) of each actor kind (semantics.actor_kind).
_COLLISION_KIND = {"vehicle": "vehicle", "pedestrian": "pedestrian", "cyclist": "pedestrian", "obstacle": "layout"}
#: In an oncoming lane the ego drives in (passing), SUMO's traffic stops this far ahead of it, metres.
SHADOW_AHEAD_M = 15.0
#: A shadow no longer needed stands this far from its lane's far end for its last steps in SUMO, metres.
SHADOW_END_M = 0.5
#: The minimum-speed criterion's "surrounding traffic" (tools.collect.base.referee.MinSpeedCheckpoints): the
#: background vehicles (not the scenarios' actors) whose front bumpers are within this distance of the ego's centre,
#: metres. In CARLA the criterion averages every vehicle of the leaderboard's background activity, which lives only
#: near the hero (scenario_runner's BackgroundBehavior: two vehicles ahead and two behind in each route lane within
#: 45 m plus 1.7 m per m/s of the ego's speed, oncoming sources 80 m ahead, the sources of the route's next junction
#: 40 m up its entries within 30 m plus 1.5 m per m/s of it); SUMO's traffic covers the whole town, so its vehicles
#: count within the farthest of those reaches.
TRAFFIC_SPEED_RADIUS_M = 80.0
#: The background's drivers brake for the ego where its box stands in their way, as CARLA's Traffic Manager brakes
#: for every vehicle it does not drive, the hero too (its collision stage: each vehicle's path ahead, extended with
#: its speed, against the other actors' boxes). SUMO's drivers see the ego only as the leader on the one lane SUMO
#: maps it onto, and inside a junction that lane jumps between the overlapping connections as the ego slows: the
#: vehicle behind, on the connection the ego stands on, saw no leader and drove into it (Bench2Drive
#: BlockedIntersection 2989, 8 m/s into the standing ego). The way looked along: from its front this far
#: plus GUARD_TIME_S of its speed along its lanes (through the junction its route takes), as wide as the vehicle and
#: GUARD_SIDE_M on each side.
GUARD_MIN_M = 4.0
GUARD_TIME_S = 1.5
GUARD_SIDE_M = 0.2
#: The way ahead is looked at in pieces this long, metres.
GUARD_STEP_M = 1.0
#: A guarded vehicle stops this short of the ego's box, braking at SUMO's default deceleration (m/s^2).
GUARD_GAP_M = 1.5
GUARD_DECEL = 4.5
#: A braked vehicle drives on by itself once the speed that stops it short of the ego is this far above its own, m/s.
GUARD_RELEASE_MPS = 2.0


def _opposite(angle_a: float, angle_b: float) -> bool:
    """Two headings (degrees) more than 90 degrees apart."""
    return abs(wrap_degrees(angle_a - angle_b)) > 90.0


def _reach(length: float, width: float) -> float:
    """How far from the ego's centre the front bumper of a vehicle of this size can be while its box touches the
    ego's, metres: half of both boxes' diagonals and of the vehicle's length, and a metre to spare."""
    return (math.hypot(EGO_SIZE[0], EGO_SIZE[1]) + math.hypot(length, width) + length) / 2 + 1.0


class WorldError(ToolError):
    pass


@dataclass
class StepEvents:
    """What happened to the ego during one tick."""

    #: (id, kind) of the actors whose boxes the ego's overlaps; kind "vehicle", "pedestrian" (pedestrians and
    #: cyclists) or "layout" (props), as the leaderboard's collision infractions are split.
    collisions: list[tuple[int, str]] = field(default_factory=list)
    ran_red_light: str | None = None  # "<tls>:<link>" crossed on red
    #: The mean speed of the background vehicles within TRAFFIC_SPEED_RADIUS_M of the ego after the tick, m/s; None
    #: when there is none (the minimum-speed criterion skips such a tick).
    traffic_speed: float | None = None


class _Near:
    """The SUMO vehicles near the ego after one SUMO step (the ego and the stand-ins left out): the context
    subscription's results, which change only when SUMO steps, and each vehicle's (class, length, width, height)."""

    def __init__(self, found: dict[str, dict[int, Any]], vids: list[str],
                 types: list[tuple[int, float, float, float]], town: Town):
        self.vids = vids
        self.types = types
        self.fronts: list[tuple[float, float]] = [found[v][_tc.VAR_POSITION] for v in vids]  # SUMO's frame
        self._found = found
        self._town = town

    def mean_speed(self, x: float, y: float, radius: float, prefix: str) -> float | None:
        """The mean speed of the vehicles whose ids start with `prefix` and whose fronts are within `radius` of (x, y)
        (SUMO's frame), m/s; None when there is none."""
        total, count, reach = 0.0, 0, radius * radius
        for vid, (fx, fy) in zip(self.vids, self.fronts, strict=True):
            if vid.startswith(prefix) and (fx - x) ** 2 + (fy - y) ** 2 < reach:
                total += self._found[vid][_tc.VAR_SPEED]
                count += 1
        return total / count if count else None

    @cached_property
    def rows(self) -> np.ndarray:
        """(N, 6) rows of centre x, y, yaw, length, width, speed in CARLA's frame."""
        found = self._found
        # SUMO's x, y, angle, then length, width, speed: the last three are the rows' already.
        rows = np.array([(*front, found[v][_tc.VAR_ANGLE], length, width, found[v][_tc.VAR_SPEED])
                         for v, front, (_, length, width, _) in zip(self.vids, self.fronts, self.types, strict=True)],
                        dtype=np.float64).reshape(-1, 6)
        front = self._town.sumo_to_carla(rows[:, :2])
        yaw = self._town.sumo_angle_to_yaw(rows[:, 2])
        rad = np.radians(yaw)
        rows[:, 0] = front[:, 0] - np.cos(rad) * rows[:, 3] / 2
        rows[:, 1] = front[:, 1] - np.sin(rad) * rows[:, 3] / 2
        rows[:, 2] = yaw
        return rows


class SumoWorld:
    """One SUMO simulation (libsumo allows one per process): background traffic, and the ego at the start
    of its route, moved by `step(control)`."""

    def __init__(self, town: Town, route: DenseRoute, seed: int, vehicles: int, sim_hz: int,
                 regional: bool | None = None):
        """`regional`: keep the background traffic within REGION_RADIUS_M of the ego (True) or over the whole town
        (False); None (the default): regional on a large town only (tools.collect.sim.traffic.Background)."""
        import libsumo

        self.ls = libsumo
        self.town = town
        self.dt = 1.0 / sim_hz
        self.time = 0.0
        self.tick = 0
        self._ids: dict[str, int] = {EGO: 0}
        self._next_id = 0  # the last box id given
        self._types: dict[str, tuple[int, float, float, float]] = {}
        self._near: _Near | None = None  # since the last SUMO step (`_vehicles`); None: not read yet
        self._lane_angles: dict[str, float] = {}  # `_lane_angle`, by lane id
        self._collided: set[int] = set()
        self._speed_limit = 13.89  # until the ego is first on a lane: 50 km/h
        self._snap: Snapshot | None = None
        self._ego_box: Box | None = None  # since the ego last moved (`ego_box`); None: not made yet
        self._ego_adds = 0  # times the ego was put into SUMO
        #: Boxes of the actors scenarios place and move (tools.collect.sim.scenarios), by box id; the SUMO vehicles
        #: that stand in for the standing ones, so that SUMO's traffic stops behind them (not reported itself).
        self._statics: dict[int, Box] = {}
        self._blocks: dict[str, int] = {}  # SUMO id of a block -> its box id
        self._hidden: set[str] = set()
        self._removed: set[str] = set()  # taken out (take_out) since the last SUMO step, whose results still name them
        self._stand_ins = 0  # SUMO stand-ins added (each on a route of its own)
        self._next_sc = 0
        #: The ego's stand-in in a neighbouring lane while its box reaches into it (passing an obstacle): SUMO
        #: maps the ego onto one lane, and its drivers see only what is in theirs. (SUMO id, lane) or None.
        self._shadow: tuple[str, str] | None = None
        self._shadows = 0
        #: Shadows no longer needed, moved to the far end of their lane (`_retire_shadow`), and the SUMO step after
        #: which each leaves SUMO.
        self._retired: dict[str, int] = {}
        self._steps = 0  # SUMO steps taken
        self._guarded: set[str] = set()  # vehicles braking for the ego (`_guard`), their speed set
        #: Scenario vehicles that brake for the ego as the background does; the flow each of the others belongs to,
        #: the flows one of whose vehicles hit the ego (all of theirs brake from then on), and the speed each
        #: scenario vehicle holds (`add_vehicle`).
        self._yielders: set[str] = set()
        self._flow_of: dict[str, str] = {}
        self._yielding_flows: set[str] = set()
        self._held: dict[str, float] = {}
        self._lane_ways: dict[str, tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]] = {}  # `_lane_way`, by lane
        libsumo.start([
            sumo_binary("sumo"), "-n", str(town.net), "--step-length", f"{self.dt}", "--seed", str(seed),
            "--no-step-log", "true", "--no-warnings", "true", "--collision.action", "none",
            "--time-to-teleport", "60", "--ignore-route-errors", "true",
            # The network is netconvert's own: validating it against SUMO's schema took a sixth of its loading.
            "--xml-validation", "never", "--xml-validation.net", "never",
            "--default.action-step-length", f"{self.dt}", "--lanechange.duration", "2.0",
        ])
        try:
            # Parking lanes closed to SUMO's vehicles, as CARLA's traffic never drives them: netconvert lets cars use
            # them at the road's speed, and one driving a parking lane merged into the ego's lane at its end, or at an
            # accident standing at the lane's edge, and stood there across it (Bench2Drive AccidentTwoWays 25845).
            for lane in town.parking_lanes:
                libsumo.lane.setDisallowed(lane, ["passenger"])
            self.background = Background(libsumo, town, seed, vehicles, regional, view=VIEW_RADIUS_M)
            self._setup_types()
            # The ego starts with its rear on the route's first point, heading along the route.
            s0 = min(EGO_SIZE[0] / 2, route.length / 2)
            x0, y0 = (float(np.interp(s0, route.s, route.xy[:, i])) for i in (0, 1))
            self.ego = Bicycle(x=x0, y=y0, yaw=float(route.yaw[int(np.searchsorted(route.s, s0))]))
            self._add_ego()
            self.ls.simulationStep()  # the ego first: the background's free places are free of it
            if EGO not in self.ls.vehicle.getIDList():
                raise WorldError("SUMO could not place the ego at the start of the route")
            self.background.start((self.ego.x, self.ego.y))
            self.signals = Signals(libsumo, town)
            self._sumo_step()  # insert the background
            for _ in range(5):
                if not self._clear_start():
                    break
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
        self.background.setup_types()

    def _add_ego(self) -> None:
        """The ego as a SUMO vehicle that SUMO never moves: placed by `_place_ego` every tick."""
        sx, sy = self.town.carla_to_sumo((self.ego.x, self.ego.y))
        edge, _, _ = self.ls.simulation.convertRoad(sx, sy, False, "passenger")
        if not edge or edge.startswith(":"):
            edge = self.background.edges[0]
        self._ego_adds += 1
        route = f"ego_route{self._ego_adds}"  # a route id is for good: a re-added ego needs a new one
        self.ls.route.add(route, [edge])
        try:
            self.ls.vehicle.add(EGO, route, typeID="ego", depart="now", departSpeed="0")
        except self.ls.TraCIException:
            pass  # SUMO still holds it off the road (teleporting): placing it below puts it back
        self.ls.vehicle.setSpeedMode(EGO, 0)
        self.ls.vehicle.setLaneChangeMode(EGO, 0)
        # One call a tick returns every vehicle near the ego with what a box needs (libsumo context subscription).
        self.ls.vehicle.subscribeContext(EGO, _tc.CMD_GET_VEHICLE_VARIABLE, VIEW_RADIUS_M,
                                         [_tc.VAR_POSITION, _tc.VAR_ANGLE, _tc.VAR_SPEED])
        self._near = None  # the new subscription came with results of its own
        self._place_ego()

    def _clear_start(self) -> bool:
        """Take out background vehicles placed on or just behind the standing ego (START_CLEAR_M behind it, in
        its lane or beside it): inserted there, at speed, they would drive into it in the first second. True
        when it took some out (and stepped once, in which vehicles SUMO could not insert before may come)."""
        e = self.ego
        c, s = math.cos(math.radians(e.yaw)), math.sin(math.radians(e.yaw))
        removed = False
        for vid, b in zip(self._vehicles().vids, self._boxes(), strict=True):
            along, across = (b.x - e.x) * c + (b.y - e.y) * s, -(b.x - e.x) * s + (b.y - e.y) * c
            if -START_CLEAR_M < along < EGO_SIZE[0] and abs(across) < 2.5:
                self.ls.vehicle.remove(vid)
                self._ids.pop(vid, None)
                self._types.pop(vid, None)
                self.background.forget(vid)
                removed = True
        if removed:  # one more step: the subscription's results still name the removed vehicles
            self._place_ego()
            self._sumo_step()
        return removed

    def _place_ego(self) -> None:
        """Put SUMO's ego where the bicycle is (SUMO's position is the front bumper's)."""
        sx, sy = self.town.carla_to_sumo(self._front())
        angle = Town.yaw_to_sumo_angle(self.ego.yaw)
        # keepRoute 2: onto any lane (the ego leaves SUMO's idea of its route); a lane within 10 m.
        self.ls.vehicle.moveToXY(EGO, "", -1, sx, sy, angle, 2, 10.0)

    # ------------------------------------------------------------------ stepping
    def step(self, control: Control) -> StepEvents:
        """Move the ego by `control` for one tick, let SUMO move everyone else, judge what happened."""
        before = self._front()
        self.ego.step(control, self.dt)
        self._ego_box = None  # it moved
        self._place_ego()
        self._place_shadow()
        self._guard()
        arrived = self._sumo_step()
        self.time += self.dt
        self.tick += 1
        # Keep the traffic density: a background vehicle that arrived is replaced by a new one elsewhere.
        for vid in arrived - {EGO}:
            self._ids.pop(vid, None)
            self._types.pop(vid, None)
            if vid.startswith("bg"):
                self.background.replace(vid, (self.ego.x, self.ego.y), self.time)
        if self.background.regional and self.tick % REGION_CHECK_TICKS == 0:
            for vid in self.background.keep_region((self.ego.x, self.ego.y), self.time):
                self._ids.pop(vid, None)
                self._types.pop(vid, None)
        ev = StepEvents()
        ego = self.ego_box()
        # Collisions: the ego's box against the boxes of the vehicles close to it. A vehicle has its box id from
        # when it first came this close, or into a snapshot.
        vehicles = self._vehicles()
        sx, sy = self.town.carla_to_sumo((ego.x, ego.y))
        close = [i for i, (x, y) in enumerate(vehicles.fronts) if abs(x - sx) < 16.0 and abs(y - sy) < 16.0]
        for i in close:
            self._box_id(vehicles.vids[i])
        # Of those, only a vehicle whose front is within its reach can touch the ego's box.
        touch = [i for i in close if math.dist(vehicles.fronts[i], (sx, sy)) < _reach(*vehicles.types[i][1:3])]
        if touch:
            hit = boxes_overlap(np.array([ego.x, ego.y, ego.yaw, ego.length, ego.width]), vehicles.rows[touch, :5])
            for k in np.flatnonzero(hit):
                vid = vehicles.vids[touch[k]]
                self._collide(ev, self._ids[vid], semantics.CAR)
                if vid in self._flow_of:  # ActorFlow's collision sensor: its whole flow now brakes for vehicles
                    self._yielding_flows.add(self._flow_of[vid])
        near = [b for b in self._statics.values() if abs(b.x - ego.x) < 16.0 and abs(b.y - ego.y) < 16.0]
        if near:
            rows = np.array([[b.x, b.y, b.yaw, b.length, b.width] for b in near])
            hit = boxes_overlap(np.array([ego.x, ego.y, ego.yaw, ego.length, ego.width]), rows)
            for i in np.flatnonzero(hit):
                self._collide(ev, near[i].id, near[i].cls)
        ev.ran_red_light = self.signals.judge(self.ego.yaw, before, self._front())
        # The background vehicles ("bg<n>": not the scenarios' actors, blocks or the ego's shadow) near the ego.
        ev.traffic_speed = vehicles.mean_speed(sx, sy, TRAFFIC_SPEED_RADIUS_M, "bg")
        return ev

    def _collide(self, ev: StepEvents, aid: int, cls: int) -> None:
        if aid in self._collided:  # one infraction per actor, as the leaderboard counts
            return
        self._collided.add(aid)
        ev.collisions.append((aid, _COLLISION_KIND[semantics.actor_kind(cls)]))

    # ------------------------------------------------------------------ scenario actors (tools.collect.sim.scenarios)
    def add_static(self, cls: int, x: float, y: float, yaw: float, length: float, width: float, height: float,
                   block: bool = False) -> int:
        """A box the caller places and moves (`move_static`): a prop, a parked car, a walker. Its id. `block`:
        a standing SUMO vehicle takes its place in SUMO, so that SUMO's traffic stops behind it."""
        self._next_id += 1
        aid = self._next_id
        self._statics[aid] = Box(id=aid, cls=cls, x=x, y=y, z=height / 2, yaw=yaw, length=length, width=width,
                                 height=height)
        self._snap = None
        if block:
            self._blocks[f"block{aid}"] = aid
            self._add_block(f"block{aid}")
        return aid

    def _add_block(self, vid: str) -> None:
        """A box's SUMO stand-in (add_static's `block`), where the box is."""
        b = self._statics[self._blocks[vid]]
        sx, sy = self.town.carla_to_sumo((b.x, b.y))
        edge, _, _ = self.ls.simulation.convertRoad(sx, sy, False, "passenger")
        if edge and not edge.startswith(":"):
            self._add_stand_in(vid, edge, f"bg{semantics.CAR}")
            self.ls.vehicle.setLength(vid, b.length)
            self.ls.vehicle.setWidth(vid, b.width)
            self._move_block(vid, b)
            self.ls.vehicle.setSpeed(vid, 0.0)

    def _restore_blocks(self, present: set[str]) -> None:
        """Put back the blocks SUMO took out: standing --time-to-teleport seconds, a block counts as jammed and is
        teleported away, and SUMO's traffic drove through the obstacle the ego still waited behind."""
        for vid in self._blocks:
            if vid not in present:
                try:
                    self._add_block(vid)
                except self.ls.TraCIException:  # SUMO still holds it (teleporting): again on the next step
                    pass

    def _move_block(self, vid: str, b: Box) -> None:
        """Put a box's SUMO stand-in (add_static's `block`) where the box is: SUMO's traffic keeps behind it."""
        rad = math.radians(b.yaw)
        fx, fy = self.town.carla_to_sumo((b.x + math.cos(rad) * b.length / 2, b.y + math.sin(rad) * b.length / 2))
        self.ls.vehicle.moveToXY(vid, "", -1, fx, fy, Town.yaw_to_sumo_angle(b.yaw), 2, 10.0)

    def _add_stand_in(self, vid: str, edge: str, type_id: str, lane: str = "first") -> None:
        """A SUMO vehicle that SUMO never moves (placed by moveToXY), left out of the world's actors."""
        self._stand_ins += 1
        route = f"r_{vid}_{self._stand_ins}"  # a route id is for good: a stand-in put back needs a new one
        self.ls.route.add(route, [edge])
        self.ls.vehicle.add(vid, route, typeID=type_id, depart="now", departLane=lane, departSpeed="0")
        self.ls.vehicle.setSpeedMode(vid, 0)
        self.ls.vehicle.setLaneChangeMode(vid, 0)
        self._hidden.add(vid)

    def move_static(self, aid: int, x: float, y: float, yaw: float, speed: float) -> None:
        b = self._statics[aid]
        if (b.x, b.y, b.yaw, b.speed) != (x, y, yaw, speed):
            self._statics[aid] = Box(id=aid, cls=b.cls, x=x, y=y, z=b.z, yaw=yaw, length=b.length, width=b.width,
                                     height=b.height, speed=speed)
            self._snap = None
            if f"block{aid}" in self._blocks:  # a moving block (HazardAtSideLane's bicycles): its stand-in goes along
                try:
                    self._move_block(f"block{aid}", self._statics[aid])
                except self.ls.TraCIException:  # taken out by SUMO: put back after the next step
                    pass

    def flow_route(self, source: tuple[float, float], sink: tuple[float, float]) -> tuple[list[str], int, float] | None:
        """SUMO's way from a source point to a sink point (CARLA frame): (edges, source lane index, source
        position on its edge); None where SUMO has none (a point off its network, no route between)."""
        ends = []
        for point in (source, sink):
            sx, sy = self.town.carla_to_sumo(point)
            edge, pos, lane = self.ls.simulation.convertRoad(sx, sy, False, "passenger")
            if not edge or edge.startswith(":"):
                return None
            ends.append((edge, float(pos), int(lane)))
        (e0, pos, lane), (e1, _, _) = ends
        found = self.ls.simulation.findRoute(e0, e1, "DEFAULT_VEHTYPE")
        if not found.edges:
            return None
        return list(found.edges), lane, pos

    def lane_speed(self, edge: str, lane: int) -> float:
        return float(self.ls.lane.getMaxSpeed(f"{edge}_{lane}"))

    def add_vehicle(self, edges: list[str], lane: int, pos: float, speed: float, rules: bool = True,
                    yields: bool = False, flow: str = "") -> str | None:
        """A SUMO vehicle entering at (edges[0], lane, pos) at `speed`, holding it where traffic allows. `rules`
        False: it ignores red lights and right of way (SUMO speed mode 7). `yields`: it brakes for the ego in its way
        as the background does (`_guard`: scenario_runner's BasicAgent-driven flows); else, with `flow` named, from
        when a vehicle of that flow first hits the ego (ActorFlow: its vehicles ignore every other vehicle until one
        of them collides). Its SUMO id."""
        self._next_sc += 1
        vid = f"sc{self._next_sc}"
        try:
            self.ls.route.add(f"r_{vid}", edges)
            self.ls.vehicle.add(vid, f"r_{vid}", typeID=f"bg{semantics.CAR}", depart="now", departPos=f"{pos:.2f}",
                                departLane=str(lane), departSpeed="max")
        except self.ls.TraCIException:
            return None
        self.ls.vehicle.setSpeed(vid, speed)
        self._held[vid] = speed
        if not rules:
            self.ls.vehicle.setSpeedMode(vid, 7)
        if yields:
            self._yielders.add(vid)
        elif flow:
            self._flow_of[vid] = flow
        return vid

    def take_out(self, box_ids: set[int]) -> int:
        """Take the background vehicles with these box ids out of SUMO, each replaced by one entering elsewhere (as
        one that arrived: the traffic's density kept, tools.collect.sim.traffic.Background.replace); the others
        (the ego, scenario vehicles, stand-ins, boxes of props) stay. How many were taken out."""
        gone = [vid for vid, aid in self._ids.items() if aid in box_ids and vid.startswith("bg")]
        for vid in gone:
            try:
                self.ls.vehicle.remove(vid)
            except self.ls.TraCIException:  # SUMO took it out already (arrived, teleported)
                continue
            self._ids.pop(vid, None)
            self._types.pop(vid, None)
            self.background.forget(vid)
            self.background.replace(vid, (self.ego.x, self.ego.y), self.time)
            self._removed.add(vid)
        if gone:
            self._near, self._snap = None, None  # read again without them (until SUMO steps, its results name them)
        return len(gone)

    def box_ids(self, vids: list[str]) -> list[int]:
        """Box ids of those SUMO vehicles still driving (the ids their boxes have in frames)."""
        present = set(self.ls.vehicle.getIDList())
        return [self._box_id(vid) for vid in vids if vid in present]

    def _box_id(self, vid: str) -> int:
        """The box id of a SUMO vehicle, given when first asked for; never reused: an id names one vehicle for
        the whole run."""
        if vid not in self._ids:
            self._next_id += 1
            self._ids[vid] = self._next_id
        return self._ids[vid]

    def _place_shadow(self) -> None:
        """Keep a standing SUMO vehicle in the lane the ego reaches into or drives in against its direction
        (none otherwise): SUMO maps the ego onto one lane, and its drivers see only what is in theirs. In a
        lane of the ego's direction it stands beside the ego, so that traffic there stops behind the ego; in an
        oncoming lane SHADOW_AHEAD_M ahead, so that oncoming traffic stops where the ego can still get back."""
        ls, e = self.ls, self.ego
        target = None  # (edge, lane index, lane position of the ego there)
        heading = Town.yaw_to_sumo_angle(e.yaw)
        try:
            lane, lateral = ls.vehicle.getLaneID(EGO), ls.vehicle.getLateralLanePosition(EGO)  # left positive
        except self.ls.TraCIException:  # the ego is being put back
            lane = ""
        if lane and not lane.startswith(":"):
            if _opposite(self._lane_angle(lane), heading):
                edge, index = lane.rsplit("_", 1)
                target = (edge, int(index), float(ls.vehicle.getLanePosition(EGO)))
            elif abs(lateral) + EGO_SIZE[1] / 2 - ls.lane.getWidth(lane) / 2 > 0.2:
                rad = math.radians(e.yaw)
                side = math.copysign(abs(lateral) + EGO_SIZE[1] / 2, lateral)  # the box's edge on that side
                sx, sy = self.town.carla_to_sumo((e.x + math.sin(rad) * side, e.y - math.cos(rad) * side))
                edge, pos, index = ls.simulation.convertRoad(sx, sy, False, "passenger")
                if edge and not edge.startswith(":") and f"{edge}_{index}" != lane:
                    target = (edge, int(index), float(pos))
        if target is not None:
            edge, index, pos = target
            if _opposite(self._lane_angle(f"{edge}_{index}"), heading):
                pos = max(pos - SHADOW_AHEAD_M, 0.5)  # its positions grow against the ego's heading
            sx, sy = ls.simulation.convert2D(edge, pos, index)
        if self._shadow is not None and (target is None or self._shadow[1] != f"{target[0]}_{target[1]}"):
            self._retire_shadow(*self._shadow)
            self._shadow = None
        if target is None:
            return
        if self._shadow is None:
            self._shadows += 1
            vid = f"shadow{self._shadows}"
            self._add_stand_in(vid, edge, "ego", lane=str(index))
            self._shadow = (vid, f"{edge}_{index}")
        # On its lane's centre, facing its lane's traffic (an invalid angle: the lane's own).
        try:
            ls.vehicle.moveToXY(self._shadow[0], edge, index, sx, sy, _tc.INVALID_DOUBLE_VALUE, 2, 3.0)
            ls.vehicle.setSpeed(self._shadow[0], 0.0)
        except self.ls.TraCIException:  # gone meanwhile: a new one on the next tick
            self._shadow = None

    def _guard(self) -> None:
        """Brake the vehicles that yield to the ego (`_yields`) whose way ahead (`_way_ahead`: GUARD_MIN_M and
        GUARD_TIME_S of its speed) the ego's box stands in: each to the speed that stops it GUARD_GAP_M short of the box
        (plus what the ego, driving on in its direction, still travels braking as hard); the others braked before get
        their own speed back."""
        near, e = self._vehicles(), self.ego_box()
        rows = near.rows
        erad = math.radians(e.yaw)
        ego = np.array([e.x, e.y, e.yaw, e.length, e.width])
        guarded: set[str] = set()
        for i, vid in enumerate(near.vids):
            x, y, yaw, length, width, speed = rows[i]
            ahead = GUARD_MIN_M + GUARD_TIME_S * speed
            if not self._yields(vid) or math.hypot(x - e.x, y - e.y) > ahead + length + e.length:
                continue
            rad = math.radians(yaw)
            if (e.x - x) * math.cos(rad) + (e.y - y) * math.sin(rad) < -(length + e.length) / 2:
                continue  # the ego is behind it
            way = self._way_ahead(vid, ahead)
            if len(way) < 2:
                continue
            step = np.diff(way, axis=0)
            seg = np.hypot(step[:, 0], step[:, 1])
            boxes = np.stack([way[:-1, 0] + step[:, 0] / 2, way[:-1, 1] + step[:, 1] / 2,
                              np.degrees(np.arctan2(step[:, 1], step[:, 0])), seg,
                              np.full(len(seg), width + 2 * GUARD_SIDE_M)], axis=1)
            hit = np.flatnonzero(boxes_overlap(ego, boxes))
            if not hit.size:
                continue
            gap = float(np.sum(seg[:hit[0]]))  # from its front to the first piece of its way the box is in
            heading = math.atan2(step[hit[0], 1], step[hit[0], 0])
            along = max(0.0, e.speed * math.cos(erad - heading))
            safe = math.sqrt(2 * GUARD_DECEL * max(gap - GUARD_GAP_M, 0.0) + along * along)
            # Braked when it could be faster than that after this step; kept braked (creeping up to its gap) until that
            # speed is GUARD_RELEASE_MPS above its own.
            if safe < speed + (GUARD_RELEASE_MPS if vid in self._guarded else GUARD_DECEL * self.dt):
                self.ls.vehicle.setSpeed(vid, safe)
                guarded.add(vid)
        for vid in self._guarded - guarded:
            try:
                self.ls.vehicle.setSpeed(vid, self._held.get(vid, -1))  # its own speed again
            except self.ls.TraCIException:  # it left SUMO meanwhile
                pass
        self._guarded = guarded

    def _yields(self, vid: str) -> bool:
        """Whether a SUMO vehicle brakes for the ego (`_guard`): the background, and the scenario vehicles that do
        (`add_vehicle`)."""
        return vid.startswith("bg") or vid in self._yielders or self._flow_of.get(vid, "\0") in self._yielding_flows

    def _way_ahead(self, vid: str, ahead: float) -> np.ndarray:
        """The lane centre a SUMO vehicle drives along from its front bumper for `ahead` metres, through the junctions
        its route takes: (N, 2) points GUARD_STEP_M apart in CARLA's frame; empty when SUMO cannot say. From inside a
        junction it ends with the lane after it (SUMO's route index there still names the edge before the junction).
        """
        ls = self.ls
        try:
            lane, pos = ls.vehicle.getLaneID(vid), ls.vehicle.getLanePosition(vid)
            route, at = ls.vehicle.getRoute(vid), ls.vehicle.getRouteIndex(vid)
        except ls.TraCIException:
            return np.zeros((0, 2))
        pieces, left = [], ahead
        while lane and left > 0:
            s, shape, nexts = self._lane_way(lane)
            end = min(pos + left, float(s[-1]))
            if end > pos:
                at_s = np.append(np.arange(pos, end, GUARD_STEP_M), end)
                pieces.append(np.stack([np.interp(at_s, s, shape[:, 0]), np.interp(at_s, s, shape[:, 1])], axis=1))
            left -= end - pos
            pos, nxt = 0.0, ""
            following = route[at + 1] if not lane.startswith(":") and at + 1 < len(route) else None
            for edge, taken in nexts:
                if lane.startswith(":") or edge == following:
                    nxt = taken
                    break
            if following is not None and nxt:
                at += 1
            lane = nxt
        if not pieces:
            return np.zeros((0, 2))
        return self.town.sumo_to_carla(np.concatenate(pieces))

    def _lane_way(self, lane: str) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
        """A lane's centre in SUMO's frame, (N, 2), with each point's distance along it, and its links as (the edge
        each leads to, the lane a vehicle takes next: the junction's internal lane, else that edge's); asked of SUMO
        once a lane (`_way_ahead` runs every tick)."""
        if lane not in self._lane_ways:
            shape = np.array(self.ls.lane.getShape(lane), dtype=np.float64)[:, :2]
            s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(shape, axis=0).T))])
            nexts = [(link[0].rsplit("_", 1)[0], link[4] or link[0]) for link in self.ls.lane.getLinks(lane)]
            self._lane_ways[lane] = (s, shape, nexts)
        return self._lane_ways[lane]

    def _retire_shadow(self, vid: str, lane: str) -> None:
        """Take a shadow out of SUMO: first to the far end of its lane, then out of SUMO two steps later. Taken out
        where it stood, beside the ego entering a junction, SUMO's next step crashed the process (SIGSEGV in
        libsumo 1.28's simulationStep, Bench2Drive route 2790 with the overtake rule, every attempt)."""
        ls = self.ls
        try:
            edge, index = lane.rsplit("_", 1)
            pos, length = ls.vehicle.getLanePosition(vid), ls.lane.getLength(lane)
            far = SHADOW_END_M if pos > length / 2 else max(length - SHADOW_END_M, SHADOW_END_M)
            fx, fy = ls.simulation.convert2D(edge, far, int(index))
            ls.vehicle.moveToXY(vid, edge, int(index), fx, fy, _tc.INVALID_DOUBLE_VALUE, 2, 3.0)
        except self.ls.TraCIException:  # SUMO took it out already (teleported from a jam): nothing to retire
            return
        self._retired[vid] = self._steps + 2

    def _remove_retired(self) -> None:
        """Take out the retired shadows whose time has come (`_retire_shadow`)."""
        for vid in [vid for vid, step in self._retired.items() if step <= self._steps]:
            del self._retired[vid]
            try:
                self.ls.vehicle.remove(vid)
            except self.ls.TraCIException:  # gone meanwhile (it arrived at its route's end)
                pass

    def _lane_angle(self, lane: str) -> float:
        """SUMO's angle of a lane (asked once: a lane's shape never changes)."""
        if lane not in self._lane_angles:
            self._lane_angles[lane] = self.ls.lane.getAngle(lane)
        return self._lane_angles[lane]

    def _sumo_step(self) -> set[str]:
        """One SUMO step; the ids of the vehicles that arrived. The ego is put back where it is if SUMO took it out:
        it arrives at the end of its (one-edge) route when placed there, and standing still for --time-to-teleport
        seconds it counts as jammed and is teleported there."""
        self.ls.simulationStep()
        self._steps += 1
        self._remove_retired()
        self._near = None  # the context subscription's results are this step's
        self._removed.clear()
        arrived = set(self.ls.simulation.getArrivedIDList())
        if self._shadow is not None and self._shadow[0] in arrived:
            self._shadow = None  # it arrived at its (one-edge) route's end: placed anew on the next tick
        present = set(self.ls.vehicle.getIDList()) if self._blocks or EGO not in arrived else set()
        if EGO in arrived or EGO not in present:
            self._add_ego()
        if self._blocks:
            self._restore_blocks(present)
        return arrived

    def _front(self) -> tuple[float, float]:
        rad = math.radians(self.ego.yaw)
        return (self.ego.x + math.cos(rad) * EGO_SIZE[0] / 2, self.ego.y + math.sin(rad) * EGO_SIZE[0] / 2)

    # ------------------------------------------------------------------ state
    def _vehicles(self) -> _Near:
        """The SUMO vehicles near the ego now (read once a SUMO step)."""
        if self._near is None:
            found = self.ls.vehicle.getContextSubscriptionResults(EGO)
            vids = [v for v in found if v != EGO and v not in self._hidden and v not in self._removed]
            for vid in vids:
                if vid not in self._types:
                    tid = self.ls.vehicle.getTypeID(vid)
                    cls = int(tid[2:]) if tid.startswith("bg") else semantics.CAR
                    self._types[vid] = (cls, self.ls.vehicle.getLength(vid), self.ls.vehicle.getWidth(vid),
                                        self.ls.vehicle.getHeight(vid))
            self._near = _Near(found, vids, [self._types[v] for v in vids], self.town)
        return self._near

    def _boxes(self) -> list[Box]:
        """The boxes of `_vehicles` (box ids given in their order)."""
        near = self._vehicles()
        out = []
        for vid, (cls, _, _, height), (x, y, yaw, length, width, speed) in zip(near.vids, near.types,
                                                                              near.rows.tolist(), strict=True):
            out.append(Box(self._box_id(vid), cls, x, y, height / 2, yaw, length, width, height, speed))
        return out

    def ego_box(self) -> Box:
        """The ego's box: the bicycle's pose and speed (made once a tick: only `step` moves the bicycle)."""
        if self._ego_box is None:
            length, width, height = EGO_SIZE
            e = self.ego
            self._ego_box = Box(id=0, cls=semantics.CAR, x=e.x, y=e.y, z=height / 2, yaw=e.yaw, length=length,
                                width=width, height=height, speed=e.speed)
        return self._ego_box

    def snapshot(self) -> Snapshot:
        """The world now: the ego (the bicycle's pose), the vehicles and signalled links near it, the ego's speed
        limit, lane and acceleration (made once per tick, when first asked for)."""
        if self._snap is None or self._snap.time != self.time:
            self._snap = self._snapshot()
        return self._snap

    def _snapshot(self) -> Snapshot:
        e = self.ego
        lights = self.signals.lights(e.x, e.y, VIEW_RADIUS_M)
        return Snapshot(time=self.time, ego=self.ego_box(), actors=self.actors(), lights=lights,
                        speed_limit=self.speed_limit(), lane=self.lane(), acceleration=self.ego.accel)

    def actors(self) -> list[Box]:
        """The snapshot's actors (the vehicles and the scenarios' boxes near the ego), without making one."""
        e = self.ego
        return self._boxes() + [b for b in self._statics.values() if math.hypot(b.x - e.x, b.y - e.y) < VIEW_RADIUS_M]

    def speed_limit(self) -> float:
        """The speed limit of the lane the ego is on (of the last lane it was on, while SUMO maps it to
        none), m/s."""
        lane = self.lane()
        if lane:
            self._speed_limit = float(self.ls.lane.getMaxSpeed(lane))
        return self._speed_limit

    def lane(self) -> str:
        """SUMO's lane of the ego; "" while it has none (re-added this tick: in SUMO from the next step)."""
        try:
            return str(self.ls.vehicle.getLaneID(EGO))
        except self.ls.TraCIException:
            return ""

    def close(self) -> None:
        self.ls.close()
