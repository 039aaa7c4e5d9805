"""drivekit's stand-in for the leaderboard's `leaderboard.utils.route_manipulation`: `downsample_route`, which the
agent's base class applies to the plan it is given (the plan itself is built by tools.evaluate.leaderboard.host)."""

from agents.navigation.local_planner import RoadOption

_LANE_CHANGES = (RoadOption.CHANGELANELEFT, RoadOption.CHANGELANERIGHT)


def downsample_route(route, sample_factor):
    """Indices of the plan points kept: the first and last, every lane change, every change of command (into or
    out of a junction), and one at least every `sample_factor` metres driven."""
    keep = []
    previous = None
    dist = 0.0
    for i, (transform, option) in enumerate(route):
        if previous is None:
            keep.append(i)
            dist = 0.0
        elif option in _LANE_CHANGES:
            keep.append(i)
            dist = 0.0
        elif option != previous and previous not in _LANE_CHANGES:
            keep.append(i)
            dist = 0.0
        elif dist > sample_factor:
            keep.append(i)
            dist = 0.0
        elif i == len(route) - 1:
            keep.append(i)
            dist = 0.0
        else:
            dist += transform.location.distance(route[i - 1][0].location)
        previous = option
    return keep
