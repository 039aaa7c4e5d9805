"""Stand-in of leaderboard/autoagents/autonomous_agent.py (leaderboard aec81319): Track and the base class's
constructor and set_global_plan, as the evaluator calls them: agent_class(host, port, debug),
set_global_plan(gps route, world route), then setup(config path)."""

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
        # Like the real one, the base class keeps only a downsampled copy (route_manipulation.downsample_route:
        # where the command changes and every 200 m; here every 50th point and the last).
        ids = sorted(set(range(0, len(global_plan_world_coord), 50)) | {len(global_plan_world_coord) - 1})
        self._global_plan_world_coord = [global_plan_world_coord[i] for i in ids]
        self._global_plan = [global_plan_gps[i] for i in ids]
