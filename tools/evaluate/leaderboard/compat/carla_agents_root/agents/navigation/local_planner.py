"""drivekit's stand-in for CARLA's PythonAPI `agents.navigation.local_planner`: only RoadOption, the command type
of the leaderboard's route plan. Put on sys.path by tools.evaluate.leaderboard.host when no `agents` package is
importable (CARLA's own, from ${CARLA_ROOT}/PythonAPI/carla, is used when it is)."""

from enum import Enum


class RoadOption(Enum):
    """What the route does at a plan point (the values of CARLA's agents.navigation.local_planner.RoadOption)."""

    VOID = -1
    LEFT = 1
    RIGHT = 2
    STRAIGHT = 3
    LANEFOLLOW = 4
    CHANGELANELEFT = 5
    CHANGELANERIGHT = 6
