"""Stand-in of scenario_runner's srunner/scenariomanager/traffic_events.py (v0.9.16): the event types (the
same values) and a TrafficEvent with the getters the leaderboard reads (its type, frame, message, and its
dictionary: route_completed for ROUTE_COMPLETION)."""

from enum import Enum


class TrafficEventType(Enum):
    NORMAL_DRIVING = 0
    COLLISION_STATIC = 1
    COLLISION_VEHICLE = 2
    COLLISION_PEDESTRIAN = 3
    ROUTE_DEVIATION = 4
    ROUTE_COMPLETION = 5
    ROUTE_COMPLETED = 6
    TRAFFIC_LIGHT_INFRACTION = 7
    WRONG_WAY_INFRACTION = 8
    ON_SIDEWALK_INFRACTION = 9
    STOP_INFRACTION = 10
    OUTSIDE_LANE_INFRACTION = 11
    OUTSIDE_ROUTE_LANES_INFRACTION = 12
    VEHICLE_BLOCKED = 13
    MIN_SPEED_INFRACTION = 14
    YIELD_TO_EMERGENCY_VEHICLE = 15
    SCENARIO_TIMEOUT = 16


class TrafficEvent:
    def __init__(self, event_type, frame, message="", dictionary=None):
        self._type, self._frame, self._message, self._dict = event_type, frame, message, dictionary

    def get_type(self):
        return self._type

    def get_frame(self):
        return self._frame

    def get_message(self):
        return self._message

    def set_dict(self, dictionary):
        self._dict = dictionary

    def get_dict(self):
        return self._dict
