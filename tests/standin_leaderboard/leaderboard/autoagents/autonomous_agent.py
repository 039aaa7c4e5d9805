"""Stand-in of leaderboard/autoagents/autonomous_agent.py (leaderboard aec81319): Track and the base class's
constructor, as the evaluator calls them: agent_class(host, port, debug), then setup(config path)."""

from enum import Enum


class Track(Enum):
    SENSORS = "SENSORS"
    MAP = "MAP"
    SENSORS_QUALIFIER = "SENSORS_QUALIFIER"
    MAP_QUALIFIER = "MAP_QUALIFIER"


class AutonomousAgent:
    def __init__(self, carla_host, carla_port, debug=False):
        self.track = Track.SENSORS
        self._global_plan = None
        self._global_plan_world_coord = None

    def set_global_plan(self, global_plan_gps, global_plan_world_coord):
        self._global_plan_world_coord = global_plan_world_coord
