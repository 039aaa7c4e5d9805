"""Stand-in of leaderboard/utils/route_parser.py (leaderboard aec81319): RouteParser.parse_routes_file as the
evaluator uses it: one config per <route> (name RouteScenario_<id>), each <scenario> a config with its name, type,
trigger_points (one per <trigger_point>) and other_parameters (every other child: its tag -> its attributes)."""

import xml.etree.ElementTree as ET
from types import SimpleNamespace


class RouteParser:
    @staticmethod
    def parse_routes_file(route_filename, routes_subset=""):
        configs = []
        for route in ET.parse(route_filename).iter("route"):
            scenarios = []
            for scenario in route.find("scenarios").iter("scenario"):
                sc = SimpleNamespace(name=scenario.attrib.get("name"), type=scenario.attrib.get("type"),
                                     trigger_points=[], other_parameters={})
                for elem in scenario:
                    if elem.tag == "trigger_point":
                        sc.trigger_points.append({k: float(elem.attrib[k]) for k in ("x", "y", "z", "yaw")})
                    else:
                        sc.other_parameters[elem.tag] = elem.attrib
                scenarios.append(sc)
            configs.append(SimpleNamespace(name=f"RouteScenario_{route.attrib['id']}", town=route.attrib["town"],
                                           scenario_configs=scenarios))
        return configs
