"""Stand-in of leaderboard/utils/route_indexer.py (aec81319): one config per route of the file (those of
--routes-subset, here a single id) and repetition, named RouteScenario_<id> (route_parser), numbered as the
real one numbers them: index = i * repetitions + repetition, repetition_index = repetition."""

import copy
import xml.etree.ElementTree as ET


class RouteConfiguration:
    def __init__(self, name: str, town: str):
        self.name, self.town = name, town
        self.index = self.repetition_index = 0


class RouteIndexer:
    def __init__(self, routes_file, repetitions, routes_subset):
        routes = [r for r in ET.parse(routes_file).getroot().iter("route")
                  if not routes_subset or r.get("id") == routes_subset]
        self._configs_list = []
        self.index = 0
        self.total = len(routes) * repetitions
        for i, route in enumerate(routes):
            config = RouteConfiguration(f"RouteScenario_{route.get('id')}", route.get("town"))
            for repetition in range(repetitions):
                config.index = i * repetitions + repetition
                config.repetition_index = repetition
                self._configs_list.append(copy.copy(config))

    def peek(self):
        return self.index < self.total

    def get_next_config(self):
        config = self._configs_list[self.index]
        self.index += 1
        return config
