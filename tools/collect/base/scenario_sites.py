"""Where the leaderboard's scenario classes find what they look for: the lane queries scenario_runner's classes
make on a carla.Map while they are built (their `_initialize_actors`, srunner/tools/scenario_helper.py; v0.9.15
and v0.9.16 alike), written once, so that route generation places a scenario only where its real class can build
it (tools.collect.base.route_gen) and the embedded world picks the lanes the class picks.

- junction types (JunctionLeftTurn, JunctionRightTurn, OppositeVehicleJunction): from the trigger point's lane,
  walked forward 1 m at a time (`Waypoint.next(1.0)[0]`) to the first waypoint inside a junction
  (`junction_ahead`); the junction's entry lanes as get_junction_topology finds them (`junction_entries`), named
  by filter_junction_wp_direction from their yaw against that first junction waypoint's (`entry_sides`,
  scenario_types.junction_side); a class raises when no entry lies where it looks (LeftTurn: "opposite",
  RightTurn: "left", OppositeVehicle*: its `direction`);
- the signalized variants need traffic lights in the junction (world.get_traffic_lights_in_junction): CARLA
  spawns one per OpenDRIVE signal of type 1000001 that a controller of the junction names (`light_junctions`);
- the junction flows' and OppositeVehicle*'s sink: straight across the junction from the source
  (`straight_through`, generate_target_waypoint);
- obstacles (Accident, ParkedObstacle, HazardAtSideLane and their TwoWays): from the trigger point's lane,
  `distance` 1 m steps forward, short of a junction (`lane_forward`), then the next car or bicycle as many steps
  on from there;
- PedestrianCrossing: the same walk to the junction, its last waypoint before it, then right lane after right lane
  to a sidewalk (`sidewalk_before_junction`): "Couldn't find a waypoint to start the flow" where there is none.

What no map query foresees (a spawn the server refuses for a collision) is not judged here.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from tools.collect.base.scenario_types import junction_side

#: A walk to a junction gives up after this many 1 m steps (the classes walk on until a lane ends).
_MAX_STEPS = 2000
#: get_junction_topology's step out of a junction onto its entry lanes, metres.
_TOPOLOGY_STEP_M = 0.2
#: OpenDRIVE signal type of a traffic light.
TRAFFIC_LIGHT_TYPE = "1000001"
#: The entry side each junction flow type's class takes its flow from (scenario_runner: `self._direction`).
FLOW_SIDE = {"SignalizedJunctionLeftTurn": "opposite", "NonSignalizedJunctionLeftTurn": "opposite",
             "SignalizedJunctionRightTurn": "left", "NonSignalizedJunctionRightTurn": "left"}


def junction_ahead(wp):
    """(the last waypoint before the junction, the first inside it) walking forward from `wp` 1 m at a time on
    the first successor, as the junction classes do; None where the lane ends first (they raise "Failed to find
    junction")."""
    before = wp
    for _ in range(_MAX_STEPS):
        if wp.is_junction:
            return before, wp
        nxt = wp.next(1.0)
        if not nxt:
            return None
        before, wp = wp, nxt[0]
    return None


def lane_forward(wp, metres: float):
    """`wp`'s lane walked forward `metres` (rounded up) in 1 m steps on the first successor, stopping at the last
    waypoint before a junction: where the obstacle classes put their obstacles (`_move_waypoint_forward`). CARLA
    measures a step along its road's reference line: on a curve a lane away from it is longer or shorter than
    the metres walked (Town10HD: 33 steps were 37.8 m of lane)."""
    walked = 0
    while walked < metres:
        nxt = wp.next(1.0)
        if not nxt or nxt[0].is_junction:
            break
        wp, walked = nxt[0], walked + 1
    return wp


def _lane_key(wp) -> str:
    return f"{wp.road_id}*{wp.lane_id}"


def junction_entries(junction) -> list:
    """The junction's entry lanes as get_junction_topology finds them: each driving connection's entry walked
    back 0.2 m at a time until outside the junction, one per road and lane, in the junction's order."""
    import carla

    seen: set[str] = set()
    out = []
    for entry, _ in junction.get_waypoints(carla.LaneType.Driving):
        while entry is not None and entry.is_junction:
            back = entry.previous(_TOPOLOGY_STEP_M)
            entry = back[0] if back else None
        if entry is not None and _lane_key(entry) not in seen:
            seen.add(_lane_key(entry))
            out.append(entry)
    return out


def entry_sides(trigger_wp) -> dict[str, list]:
    """The entry lanes of the junction ahead of a trigger waypoint by the side filter_junction_wp_direction
    names them ("ref", "left", "opposite", "right"; scenario_types.JUNCTION_SIDES); empty where no junction is
    ahead."""
    found = junction_ahead(trigger_wp)
    if found is None:
        return {}
    reference = found[1]
    out: dict[str, list] = {}
    for entry in junction_entries(reference.get_junction()):
        side = junction_side(entry.transform.rotation.yaw - reference.transform.rotation.yaw)
        out.setdefault(side, []).append(entry)
    return out


def sidewalk_before_junction(trigger_wp):
    """PedestrianCrossing's start: the last waypoint before the junction ahead (1 m steps), then right lanes
    until a sidewalk; None where the class finds none (it raises)."""
    import carla

    found = junction_ahead(trigger_wp)
    if found is None:
        return None
    wp = found[0]
    while wp.lane_type != carla.LaneType.Sidewalk:
        wp = wp.get_right_lane()
        if wp is None:
            return None
    return wp


def straight_through(wp):
    """The first waypoint past the next junction on a lane, going straight across it, as scenario_runner's
    generate_target_waypoint(wp, 0) finds the sink of a flow or an adversary's way: 1 m steps on the first
    successor to where the way forks or enters a junction; there, of each way on 10 m in, the one whose direction
    from the last waypoint makes the smallest cross product with that waypoint's heading (unit vectors; of equal
    ones the last, as the class keys them by it); 1 m steps on until out of the junction. None where a lane ends
    first (the class raises)."""
    import math

    in_junction = False
    for _ in range(_MAX_STEPS):
        ahead = wp.next(1.0)
        if not ahead:
            return None
        if not in_junction and (len(ahead) > 1 or ahead[0].is_junction):
            in_junction = True
            at = wp.transform.location
            rad = math.radians(wp.transform.rotation.yaw)
            by_cross = {}
            for option in ahead:
                to = option.next(10.0)[0]
                d = to.transform.location - at
                norm = math.sqrt(d.x * d.x + d.y * d.y + d.z * d.z) or 1.0
                by_cross[(math.cos(rad) * d.y - math.sin(rad) * d.x) / norm] = to
            wp = by_cross[min(by_cross, key=abs)]
        else:
            wp = ahead[0]
        if in_junction and not wp.is_junction:
            return wp
    return None


def has_sidewalks(opendrive: str) -> bool:
    """Whether an OpenDRIVE text has sidewalk lanes at all (CARLA's towns do; netconvert's generated ones not)."""
    return 'type="sidewalk"' in opendrive


def light_junctions(opendrive: str) -> dict[int, list[str]]:
    """The traffic light signals of each junction of an OpenDRIVE text: {junction id: [signal id]} (a junction's
    <controller> references, each controller's <control signalId>, signals of type 1000001); a junction without
    lights maps to []."""
    controllers: dict[str, list[str]] = {}
    junctions: dict[int, list[str]] = {}
    lights: set[str] = set()
    for _, elem in ET.iterparse(io.StringIO(opendrive), events=("end",)):
        if elem.tag == "signal" and elem.get("type") == TRAFFIC_LIGHT_TYPE:
            lights.add(str(elem.get("id")))
        elif elem.tag == "controller" and elem.find("control") is not None:
            controllers[str(elem.get("id"))] = [str(c.get("signalId")) for c in elem.findall("control")]
        elif elem.tag == "junction":
            junctions[int(elem.get("id"))] = [str(c.get("id")) for c in elem.findall("controller")]
        if elem.tag in ("road", "junction"):  # read: let go (Town13 is 89 MB of text)
            elem.clear()
    return {j: list(dict.fromkeys(s for c in cs for s in controllers.get(c, []) if s in lights))
            for j, cs in junctions.items()}
