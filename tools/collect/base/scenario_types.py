"""The leaderboard 2.0 scenario types a route file may name: `CATALOGUE` (each type, its kind, what the embedded
world does with it), the parameters a `<scenario>` block may carry (`check_params`, `value`, `interval`,
`direction`) and where a type's site lies relative to its trigger point (the distances route generation places
by and the embedded world executes by). Route files are read and generated against it (tools.collect.base.routes,
route_gen); the embedded world executes the types (tools.collect.sim.scenarios)."""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tools.dataset import semantics as sem
from tools.expert.expert import PASS_CLEAR_M, PASS_RAMP_M

OBSTACLE, JUNCTION, PEDESTRIAN = "obstacle", "junction", "pedestrian"
EXECUTED, APPROXIMATED, NAME_ONLY = "executed", "approximated", "name only"

#: A scenario starts when the ego is this many route metres before its trigger point (leaderboard: the
#: route scenario's trigger distance).
TRIGGER_M = 30.0
#: It ends when the ego is this far past its site (its last actor, or the junction's exit), metres.
END_M = 30.0
#: A trigger point farther than this from the route is not on it: the scenario is skipped (logged).
ON_ROUTE_M = 10.0
#: Obstacles stay this far before the next junction of the route, metres.
JUNCTION_CLEARANCE_M = 15.0
#: Beyond an obstacle's last actor, the room the expert needs to get back into its lane (it never passes
#: inside a junction), metres.
PASS_ROOM_M = PASS_CLEAR_M + PASS_RAMP_M + 2.0
#: Before an obstacle, the room (from the last junction) the expert needs to stop behind it and move out, metres.
BEFORE_M = PASS_RAMP_M + 10.0
#: How far an obstacle's actors reach beyond its site (the first of them), metres.
EXTENT_M = {"Accident": 19.0, "AccidentTwoWays": 19.0, "ParkedObstacle": 3.0, "ParkedObstacleTwoWays": 3.0,
            "VehicleOpensDoorTwoWays": 3.0, "ConstructionObstacle": 17.5, "ConstructionObstacleTwoWays": 17.5,
            "HazardAtSideLane": 10.0, "HazardAtSideLaneTwoWays": 10.0}
#: Pedestrians start crossing when the ego would reach their crossing point in this many seconds (at least
#: MIN_TRIGGER_M away), as scenario_runner's reaction time.
REACTION_S = 2.1
MIN_TRIGGER_M = 6.0
#: The oncoming flow of a TwoWays obstacle holds (spawns nothing) from this far before the obstacle until the
#: ego is past it, metres.
HOLD_M = 40.0
#: Junction flows run this long from the scenario's start (the leaderboard runs them until the ego has
#: crossed; a finite flow lets the ego find its gap behind the last vehicle).
FLOW_S = 25.0

#: (length, width, height, class) of the things scenarios place; length along the heading they are placed at
#: (the props' as scenario_runner turns them: 90 degrees off the lane's, their broad side across it).
POLICE_CAR = (4.9, 2.0, 1.5, sem.CAR)
PARKED_CAR = (4.6, 1.9, 1.5, sem.CAR)
WARNING_PROP = (1.1, 0.5, 1.3, sem.STATIC)  # static.prop.warningaccident / warningconstruction
TRAFFIC_WARNING = (2.2, 1.6, 2.6, sem.STATIC)  # static.prop.trafficwarning (an arrow board on a trailer)
DEBRIS = (1.6, 1.6, 0.2, sem.STATIC)  # static.prop.dirtdebris02 (a patch of dirt on the road; its size a guess)
CONE = (0.4, 0.4, 0.7, sem.STATIC)
BICYCLE = (1.8, 0.7, 1.7, sem.BICYCLE)
WALKER = (0.5, 0.6, 1.8, sem.PEDESTRIAN)
BLOCKERS = {  # blocker_model of DynamicObjectCrossing: (along the road, across it, height) of the prop
    "static.prop.vendingmachine": (1.2, 1.0, 2.0),
    "static.prop.advertisement": (2.4, 0.6, 2.6),
    "static.prop.busstop": (4.0, 1.6, 2.7),
    "static.prop.container": (6.0, 2.5, 2.6),
}


@dataclass(frozen=True)
class ScenarioType:
    kind: str | None  # OBSTACLE, JUNCTION, PEDESTRIAN; None for name only
    handling: str  # EXECUTED, APPROXIMATED, NAME_ONLY
    what: str  # what happens on the road
    why: str = ""  # why it is not executed as the leaderboard does (approximated, name only)


_HOLD = (f"the oncoming flow holds once the ego is {HOLD_M:.0f} m before the obstacle, until it is past, so the ego "
         "passes after the last oncoming vehicle (gaps of `frequency` metres are rarely long enough for a pass at the "
         "expert's 6 m/s)")
_NO_BACKGROUND = "needs the leaderboard's background-activity manager, which the embedded world does not have"
CATALOGUE: dict[str, ScenarioType] = {
    "Accident": ScenarioType(OBSTACLE, EXECUTED, "a police car and two crashed cars in the ego's lane, a warning "
                             "prop; the ego changes lanes"),
    "AccidentTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as Accident, with oncoming traffic (gaps `frequency`); "
                                    "the ego passes through the oncoming lane in a gap", _HOLD),
    "ParkedObstacle": ScenarioType(OBSTACLE, EXECUTED, "a parked car sticking into the ego's lane, a warning prop"),
    "ParkedObstacleTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as ParkedObstacle, with oncoming traffic",
                                          _HOLD),
    "ConstructionObstacle": ScenarioType(OBSTACLE, EXECUTED, "an arrow board and a taper of cones in the ego's lane"),
    "ConstructionObstacleTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as ConstructionObstacle, with oncoming "
                                                "traffic", _HOLD),
    "HazardAtSideLane": ScenarioType(OBSTACLE, APPROXIMATED, "two cyclists riding at the right of the ego's lane "
                                     "(`bicycle_speed`, `bicycle_drive_distance`), then standing",
                                     "the cyclists stop after their drive distance instead of riding on"),
    "HazardAtSideLaneTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "as HazardAtSideLane, with oncoming traffic",
                                            "as HazardAtSideLane; " + _HOLD),
    "InvadingTurn": ScenarioType(OBSTACLE, APPROXIMATED, "oncoming cars driving `offset` metres over the centre "
                                 "line towards the ego", "our own cars on a fixed path, not SUMO's"),
    "VehicleOpensDoorTwoWays": ScenarioType(OBSTACLE, APPROXIMATED, "a parked car whose open door sticks into the "
                                            "ego's lane, oncoming traffic",
                                            "the door is open from the start; " + _HOLD),
    "SignalizedJunctionLeftTurn": ScenarioType(JUNCTION, APPROXIMATED, "oncoming SUMO traffic (`flow_speed`, gaps "
                                               "`source_dist_interval`) while the ego turns left",
                                               "the lights are SUMO's (the leaderboard freezes them green) and the "
                                               f"flow runs {FLOW_S:.0f} s"),
    "SignalizedJunctionRightTurn": ScenarioType(JUNCTION, APPROXIMATED, "SUMO traffic from the left crossing the "
                                                "ego's right turn", "as SignalizedJunctionLeftTurn"),
    "NonSignalizedJunctionLeftTurn": ScenarioType(JUNCTION, EXECUTED, "oncoming SUMO traffic while the ego turns "
                                                  f"left at a junction without lights (the flow runs {FLOW_S:.0f} s)"),
    "NonSignalizedJunctionRightTurn": ScenarioType(JUNCTION, EXECUTED, "SUMO traffic from the left while the ego "
                                                   "turns right"),
    "EnterActorFlow": ScenarioType(JUNCTION, APPROXIMATED, "a SUMO flow from the left at the next junction",
                                   "a junction flow instead of a motorway on-ramp's"),
    "EnterActorFlowV2": ScenarioType(JUNCTION, APPROXIMATED, "as EnterActorFlow", "as EnterActorFlow"),
    "OppositeVehicleRunningRedLight": ScenarioType(JUNCTION, EXECUTED, "a SUMO car from `direction` running its "
                                                   "red light, timed to meet the ego in the junction"),
    "OppositeVehicleTakingPriority": ScenarioType(JUNCTION, EXECUTED, "a SUMO car from `direction` ignoring right "
                                                  "of way at a junction without lights"),
    "DynamicObjectCrossing": ScenarioType(PEDESTRIAN, EXECUTED, "a pedestrian stepping out from behind a blocker "
                                          "(`blocker_model`) across the ego's lane"),
    "ParkingCrossingPedestrian": ScenarioType(PEDESTRIAN, EXECUTED, "a pedestrian crossing from between parked "
                                              "cars"),
    "PedestrianCrossing": ScenarioType(PEDESTRIAN, EXECUTED, "three pedestrians crossing the road just after the "
                                       "next junction"),
    "VehicleTurningRoutePedestrian": ScenarioType(PEDESTRIAN, APPROXIMATED, "a pedestrian crossing the ego's exit "
                                                  "lane after the next junction", "crosses whether or not the "
                                                  "ego turns"),
    "ControlLoss": ScenarioType(None, NAME_ONLY, "", "a loss of control is noise on the ego's own controls, not an "
                                "actor; not modelled"),
    "HardBreakRoute": ScenarioType(None, NAME_ONLY, "", _NO_BACKGROUND + " (a leader braking hard)"),
    "PriorityAtJunction": ScenarioType(None, NAME_ONLY, "", "turns the ego's lights green: " + _NO_BACKGROUND),
    "BlockedIntersection": ScenarioType(None, NAME_ONLY, "", "a car stopping inside the junction after the ego "
                                        "turned: " + _NO_BACKGROUND),
    "StaticCutIn": ScenarioType(None, NAME_ONLY, "", "a cut-in needs lateral control of SUMO vehicles (sublane "
                                "model) that the world does not use"),
    "ParkingCutIn": ScenarioType(None, NAME_ONLY, "", "as StaticCutIn"),
    "HighwayCutIn": ScenarioType(None, NAME_ONLY, "", "as StaticCutIn"),
    "VehicleTurningRoute": ScenarioType(None, NAME_ONLY, "", "a bicycle crossing after a turn: walkers are modelled, "
                                        "crossing cyclists not yet"),
    "CrossingBicycleFlow": ScenarioType(None, NAME_ONLY, "", "bicycle lanes are not in the SUMO networks"),
    "YieldToEmergencyVehicle": ScenarioType(None, NAME_ONLY, "", "the expert does not yield to emergency vehicles"),
    "MergerIntoSlowTraffic": ScenarioType(None, NAME_ONLY, "", "motorway merges: " + _NO_BACKGROUND),
    "MergerIntoSlowTrafficV2": ScenarioType(None, NAME_ONLY, "", "as MergerIntoSlowTraffic"),
    "InterurbanActorFlow": ScenarioType(None, NAME_ONLY, "", "interurban flows: " + _NO_BACKGROUND),
    "InterurbanAdvancedActorFlow": ScenarioType(None, NAME_ONLY, "", "as InterurbanActorFlow"),
    "HighwayExit": ScenarioType(None, NAME_ONLY, "", "as InterurbanActorFlow"),
    "ParkingExit": ScenarioType(None, NAME_ONLY, "", "the ego would start in a parking lane; routes start in a "
                                "driving lane"),
    "BackgroundActivityParametrizer": ScenarioType(None, NAME_ONLY, "", "changes the leaderboard's background "
                                                   "traffic (how many, how far apart): " + _NO_BACKGROUND),
}
#: Types the route generator can place (every type something happens for).
PLACEABLE = tuple(name for name, t in CATALOGUE.items() if t.kind is not None)


# ----------------------------------------------------------------------------- what the leaderboard reads

#: The shapes in which scenario_runner reads a block's parameter, and the attributes each needs:
#: get_value_parameter reads ['value'], get_interval_parameter ['from'] and ['to'], convert_dict_to_location
#: x, y and z. A missing attribute (or a missing required parameter) makes the class fail: the leaderboard then
#: skips the scenario with a warning and drives the route without it.
VALUE, INTERVAL, LOCATION = "value", "interval", "location"
SHAPE_KEYS = {VALUE: ("value",), INTERVAL: ("from", "to"), LOCATION: ("x", "y", "z")}
_OBSTACLE = {"distance": (VALUE, False), "direction": (VALUE, False), "speed": (VALUE, False)}
_TWO_WAYS = {**_OBSTACLE, "frequency": (INTERVAL, False)}
_FLOW = {"flow_speed": (VALUE, False), "source_dist_interval": (INTERVAL, False)}
_ENDS = {"start_actor_flow": (LOCATION, True), "end_actor_flow": (LOCATION, True)}
_SIDE_LANE = {"distance": (VALUE, False), "speed": (VALUE, False), "bicycle_speed": (VALUE, False),
              "bicycle_drive_distance": (VALUE, False)}
#: What the class of each type in scenario_runner v0.9.16 (srunner/scenarios) reads of its block
#: (config.other_parameters), base classes included: {parameter: (shape, required)}. Read once from its source;
#: `python -m tools.collect carla-check` compares it with the classes of the scenario_runner it is given.
PARAMETERS: dict[str, dict[str, tuple[str, bool]]] = {
    "Accident": _OBSTACLE, "AccidentTwoWays": _TWO_WAYS,
    "ParkedObstacle": _OBSTACLE, "ParkedObstacleTwoWays": _TWO_WAYS,
    "ConstructionObstacle": _OBSTACLE, "ConstructionObstacleTwoWays": _TWO_WAYS,
    "HazardAtSideLane": _SIDE_LANE, "HazardAtSideLaneTwoWays": {**_SIDE_LANE, "frequency": (VALUE, False)},
    "InvadingTurn": {"distance": (VALUE, False), "offset": (VALUE, False)},
    "VehicleOpensDoorTwoWays": _TWO_WAYS,
    "SignalizedJunctionLeftTurn": _FLOW, "SignalizedJunctionRightTurn": _FLOW,
    "NonSignalizedJunctionLeftTurn": _FLOW, "NonSignalizedJunctionRightTurn": _FLOW,
    "EnterActorFlow": {**_FLOW, **_ENDS}, "EnterActorFlowV2": {**_FLOW, **_ENDS},
    "OppositeVehicleRunningRedLight": {"direction": (VALUE, False)},
    "OppositeVehicleTakingPriority": {"direction": (VALUE, False)},
    "DynamicObjectCrossing": {"distance": (VALUE, False), "direction": (VALUE, False), "blocker_model": (VALUE, False),
                              "crossing_angle": (VALUE, False)},
    "ParkingCrossingPedestrian": {"distance": (VALUE, False), "direction": (VALUE, False),
                                  "crossing_angle": (VALUE, False)},
    "PedestrianCrossing": {}, "VehicleTurningRoutePedestrian": {}, "ControlLoss": {}, "HardBreakRoute": {},
    "PriorityAtJunction": {}, "BlockedIntersection": {},
    "StaticCutIn": {"distance": (VALUE, False), "direction": (VALUE, False)},
    "ParkingCutIn": {"direction": (VALUE, False)},
    "HighwayCutIn": {"other_actor_location": (LOCATION, True)},
    "VehicleTurningRoute": {},
    "CrossingBicycleFlow": {**_FLOW, "start_actor_flow": (LOCATION, True)},
    "YieldToEmergencyVehicle": {"distance": (VALUE, False)},
    "MergerIntoSlowTraffic": {**_FLOW, **_ENDS}, "MergerIntoSlowTrafficV2": {**_FLOW, **_ENDS},
    "InterurbanActorFlow": {**_FLOW, **_ENDS}, "InterurbanAdvancedActorFlow": {**_FLOW, **_ENDS},
    "HighwayExit": {**_FLOW, **_ENDS},
    "ParkingExit": {"direction": (VALUE, False), "front_vehicle_distance": (VALUE, False),
                    "behind_vehicle_distance": (VALUE, False), "flow_distance": (VALUE, False),
                    "speed": (VALUE, False)},
    "BackgroundActivityParametrizer": {name: (VALUE, False) for name in (
        "num_front_vehicles", "num_back_vehicles", "road_spawn_dist", "opposite_source_dist", "opposite_max_actors",
        "opposite_spawn_dist", "opposite_active", "junction_source_dist", "junction_max_actors",
        "junction_spawn_dist", "junction_source_perc")},
}


# ----------------------------------------------------------------------------- parameters

SIDES = ("left", "right")
#: The junction entry sides scenario_runner's `filter_junction_wp_direction` names (srunner/tools/scenario_helper.py),
#: by the entry lane's yaw minus the reference's, modulo 360: above 330 or up to 30 `ref`, 30-135 `left`, 135-225
#: `opposite`, 225-330 `right`.
JUNCTION_SIDES = ("ref", "left", "opposite", "right")
#: The `direction` values each type's class accepts (v0.9.15 and v0.9.16 alike), where they are not SIDES (most
#: classes raise "'direction' must be either 'right' or 'left'"); None: any value. OppositeVehicleJunction filters
#: the junction's entries by it (any other value finds no lane and raises); ParkingCutIn reads anything but
#: 'left' as right; the types whose class reads no `direction` ignore it (Bench2Drive's InterurbanAdvancedActorFlow
#: blocks carry one).
DIRECTIONS: dict[str, tuple[str, ...] | None] = {
    "OppositeVehicleRunningRedLight": JUNCTION_SIDES, "OppositeVehicleTakingPriority": JUNCTION_SIDES,
    "ParkingCutIn": None,
    **{kind: None for kind, reads in PARAMETERS.items() if "direction" not in reads},
}

#: Parameters the embedded world reads, with what they must be: a number (`value`, or `from` and `to`) or a
#: side. Others a route file may hold (blocker_model ...) are read as text or kept for the leaderboard.
NUMBERS = ("distance", "speed", "flow_speed", "frequency", "source_dist_interval", "offset", "bicycle_speed",
           "bicycle_drive_distance", "crossing_angle")


def check_params(params: dict[str, dict[str, str]], kind: str | None = None) -> str | None:
    """What is wrong with a scenario block's parameters, in words ("distance='abc' is not a number"); None. With
    the block's type `kind`: also a parameter its leaderboard class reads unconditionally that the block lacks, or
    one the block holds without the attributes the class reads (PARAMETERS)."""
    for name, (shape, required) in PARAMETERS.get(kind or "", {}).items():
        keys = SHAPE_KEYS[shape]
        if name not in params:
            if required:
                return (f"lacks <{name} {' '.join(f'{k}=...' for k in keys)}/>, which the leaderboard's {kind} reads "
                        "(without it the leaderboard skips the scenario)")
            continue
        missing = [k for k in keys if k not in params[name]]
        if missing:
            return (f"parameter <{name}> lacks {', '.join(missing)}: the leaderboard's {kind} reads it as "
                    f"{'/'.join(keys)}")
        if shape == LOCATION:
            for k in keys:
                try:
                    if not math.isfinite(float(params[name][k])):
                        raise ValueError
                except ValueError:
                    return f"parameter <{name} {k}=\"{params[name][k]}\"> is not a number"
    for name in NUMBERS:
        for key, text in params.get(name, {}).items():
            if key not in ("value", "from", "to"):
                continue
            try:
                if not math.isfinite(float(text)):
                    raise ValueError
            except ValueError:
                return f"parameter <{name} {key}=\"{text}\"> is not a number"
    side = params.get("direction", {}).get("value")
    accepted = DIRECTIONS.get(kind or "", SIDES if kind in PARAMETERS else None)
    if side is not None and accepted is not None and side not in accepted:
        return f"parameter <direction value=\"{side}\"> must be {' or '.join(accepted)}"
    return None



def value(params: dict, name: str, default: Any, kind=float) -> Any:
    """A `<name value="..."/>` parameter of a scenario block (its default when absent)."""
    if name not in params or "value" not in params[name]:
        return default
    try:
        return kind(params[name]["value"])
    except ValueError:
        raise ValueError(f"scenario parameter {name}={params[name]['value']!r} is not a {kind.__name__}") from None


def interval(params: dict, name: str, default: tuple[float, float]) -> tuple[float, float]:
    """A `<name from="..." to="..."/>` parameter (a `value` stands for both ends)."""
    p = params.get(name)
    if not p:
        return default
    if "value" in p:
        v = float(p["value"])
        return v, v
    lo, hi = float(p.get("from", default[0])), float(p.get("to", default[1]))
    return min(lo, hi), max(lo, hi)


def junction_side(rel_yaw: float) -> str:
    """Where a lane entering a junction comes from, as scenario_runner's `filter_junction_wp_direction` names it
    (JUNCTION_SIDES), from its yaw minus the reference's (the ego's entering the junction), degrees."""
    diff = rel_yaw % 360.0
    return ("ref" if diff > 330.0 else "right" if diff > 225.0 else "opposite" if diff > 135.0
            else "left" if diff > 30.0 else "ref")


def direction(params: dict, default: str = "right") -> str:
    d = value(params, "direction", default, str)
    if d not in ("left", "right"):
        raise ValueError(f"scenario parameter direction={d!r}: expected 'left' or 'right'")
    return d


def catalogue_markdown() -> str:
    """The table of docs/scenarios.md: every leaderboard 2.0 scenario type and what the embedded world does."""
    rows = ["| type | kind | embedded world | what happens on the road | why not as on the leaderboard |",
            "|---|---|---|---|---|"]
    for name, t in CATALOGUE.items():
        rows.append(f"| `{name}` | {t.kind or '-'} | {t.handling} | {t.what or '-'} | {t.why or '-'} |")
    return "\n".join(rows) + "\n"
