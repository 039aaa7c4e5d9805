"""Stand-in of scenario_runner's traffic_events (v0.9.16): the event a criterion records, as StatisticsManager reads
it (its type, and its dictionary: route_completed for ROUTE_COMPLETION)."""

from enum import Enum


class TrafficEventType(Enum):
    COLLISION_VEHICLE = 2
    ROUTE_COMPLETION = 9


class TrafficEvent:
    def __init__(self, event_type, frame, message="", dictionary=None):
        self._type, self._frame, self._message, self._dict = event_type, frame, message, dictionary

    def get_type(self):
        return self._type

    def set_dict(self, dictionary):
        self._dict = dictionary

    def get_dict(self):
        return self._dict
