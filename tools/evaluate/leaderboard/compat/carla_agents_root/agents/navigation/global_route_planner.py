"""drivekit's stand-in for CARLA's PythonAPI `agents.navigation.global_route_planner` (agents that plan their own
routes on the map): `GlobalRoutePlanner(map, sampling_resolution).trace_route(origin, destination)` ->
[(carla.Waypoint, RoadOption)] about `sampling_resolution` metres apart, planned by drivekit's route planner
(tools.expert.planner.RoutePlanner: GlobalRoutePlanner's A* on the map's lanes; its docstring says where the two
differ), the waypoints the map's own (`carla.Map.get_waypoint`)."""

import carla
import numpy as np

from agents.navigation.local_planner import RoadOption
from tools.expert.planner import RoutePlanner


class GlobalRoutePlanner:
    def __init__(self, wmap, sampling_resolution):
        self._wmap = wmap
        self._sampling_resolution = sampling_resolution
        self._planner = RoutePlanner(wmap, spacing=float(sampling_resolution))

    def trace_route(self, origin, destination):
        """The route from `origin` to `destination` (carla.Location): [(carla.Waypoint, RoadOption)]."""
        dense = self._planner.trace(np.array([[origin.x, origin.y], [destination.x, destination.y]]))
        route = []
        for (x, y), option in zip(dense.xy.tolist(), dense.option.tolist(), strict=True):
            route.append((self._wmap.get_waypoint(carla.Location(x=x, y=y, z=0.0)), RoadOption(int(option))))
        return route
