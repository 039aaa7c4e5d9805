"""Stand-in of leaderboard/utils/route_parser.py (leaderboard aec81319): RouteParser.parse_routes_file as the
evaluator uses it: one config per <route> (name RouteScenario_<id>, its town, keypoints: a carla.Location per
<position>), each <scenario> a config with its name, type,
trigger_points (a carla.Transform per <trigger_point>) and other_parameters (every other child: its tag -> its
attributes); is_scenario_at_route: a route point within 2 m (in x, y), the trigger at most 2 m above it, and the
yaws within 10 degrees. Written here from their description."""

import math
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import carla

DIST_THRESHOLD = 2.0
ANGLE_THRESHOLD = 10


class RouteParser:
    @staticmethod
    def parse_routes_file(route_filename, routes_subset=""):
        configs = []
        for route in ET.parse(route_filename).iter("route"):
            scenarios = []
            for scenario in route.find("scenarios").iter("scenario"):
                sc = SimpleNamespace(name=scenario.attrib.get("name"), type=scenario.attrib.get("type"),
                                     trigger_points=[], other_parameters={}, route=None, ego_vehicles=[])
                for elem in scenario:
                    if elem.tag == "trigger_point":
                        x, y, z, yaw = (float(elem.attrib[k]) for k in ("x", "y", "z", "yaw"))
                        sc.trigger_points.append(carla.Transform(carla.Location(x, y, z), carla.Rotation(yaw=yaw)))
                    else:
                        sc.other_parameters[elem.tag] = elem.attrib
                scenarios.append(sc)
            keypoints = [carla.Location(*(float(p.attrib[k]) for k in ("x", "y", "z")))
                         for p in route.find("waypoints").iter("position")]
            configs.append(SimpleNamespace(name=f"RouteScenario_{route.attrib['id']}", town=route.attrib["town"],
                                           keypoints=keypoints, scenario_configs=scenarios))
        return configs

    @staticmethod
    def is_scenario_at_route(trigger_transform, route):
        t = trigger_transform
        for transform, _ in route:
            close = math.hypot(t.location.x - transform.location.x, t.location.y - transform.location.y)
            turn = (t.rotation.yaw - transform.rotation.yaw) % 360
            if close < DIST_THRESHOLD and t.location.z - transform.location.z < DIST_THRESHOLD and \
                    (turn < ANGLE_THRESHOLD or turn > 360 - ANGLE_THRESHOLD):
                return True
        return False
