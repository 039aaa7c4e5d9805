"""Stand-in of leaderboard/utils/statistics_manager.py (leaderboard aec81319): PENALTY_NAME_DICT, the event
types the record lists as infractions under their record keys (the same table), and the calls the evaluator
makes for one route, writing the checkpoint JSON in place (json.dump, indent 4) as checkpoint_tools.save_dict
does. Written here from the real one's behaviour: a route that completes with no infraction is Perfect, one
stopped by the evaluator is "Failed - <message>"; entry_status Finished is eligible, Crashed is not."""

import json

from srunner.scenariomanager.traffic_events import TrafficEventType

PENALTY_NAME_DICT = {
    TrafficEventType.COLLISION_STATIC: 'collisions_layout',
    TrafficEventType.COLLISION_PEDESTRIAN: 'collisions_pedestrian',
    TrafficEventType.COLLISION_VEHICLE: 'collisions_vehicle',
    TrafficEventType.TRAFFIC_LIGHT_INFRACTION: 'red_light',
    TrafficEventType.STOP_INFRACTION: 'stop_infraction',
    TrafficEventType.OUTSIDE_ROUTE_LANES_INFRACTION: 'outside_route_lanes',
    TrafficEventType.MIN_SPEED_INFRACTION: 'min_speed_infractions',
    TrafficEventType.YIELD_TO_EMERGENCY_VEHICLE: 'yield_emergency_vehicle_infractions',
    TrafficEventType.SCENARIO_TIMEOUT: 'scenario_timeouts',
    TrafficEventType.ROUTE_DEVIATION: 'route_dev',
    TrafficEventType.VEHICLE_BLOCKED: 'vehicle_blocked',
}

INFRACTIONS = ["collisions_layout", "collisions_pedestrian", "collisions_vehicle", "red_light", "stop_infraction",
               "outside_route_lanes", "min_speed_infractions", "yield_emergency_vehicle_infractions",
               "scenario_timeouts", "route_dev", "vehicle_blocked", "route_timeout"]


class StatisticsManager:
    def __init__(self, endpoint, debug_endpoint):
        self._endpoint, self._scenario = endpoint, None
        self._results = {"_checkpoint": {"global_record": {}, "progress": [], "records": []},
                         "entry_status": "Started", "eligible": False, "sensors": [], "values": [], "labels": []}

    def clear_records(self):
        with open(self._endpoint, "w") as fd:
            fd.truncate(0)

    def save_progress(self, route_index, total_routes):
        self._results["_checkpoint"]["progress"] = [route_index, total_routes]

    def create_route_data(self, route_id, index):
        self._results["_checkpoint"]["records"][index:index + 1] = [
            {"index": index, "route_id": route_id, "status": "Started", "num_infractions": 0,
             "infractions": {k: [] for k in INFRACTIONS}, "scores": {}, "meta": {}}]

    def set_scenario(self, scenario):
        self._scenario = scenario

    def save_sensors(self, sensors):
        self._results["sensors"] = sensors

    def save_entry_status(self, entry_status):
        self._results["entry_status"], self._results["eligible"] = entry_status, entry_status == "Finished"

    def compute_route_statistics(self, route_index, duration_time_system=-1, duration_time_game=-1,
                                 failure_message=""):
        record = self._results["_checkpoint"]["records"][route_index]
        done = 0.0
        for node in self._scenario.get_criteria() if self._scenario else []:
            for event in node.events:
                if event.get_type() == TrafficEventType.ROUTE_COMPLETION:
                    done = event.get_dict()["route_completed"]
        record["scores"] = {"score_route": done, "score_penalty": 1.0, "score_composed": done}
        record["meta"] = {"route_length": 0.0, "duration_game": duration_time_game,
                          "duration_system": duration_time_system}
        record["status"] = "Perfect" if done >= 100 else "Failed" + (f" - {failure_message}" if failure_message else "")

    def compute_global_statistics(self):
        self._results["_checkpoint"]["global_record"] = {"index": -1, "route_id": -1}
        self._results["values"] = ["0"]

    def validate_and_write_statistics(self, sensors_initialized, crashed):
        self.write_statistics()

    def write_statistics(self):
        with open(self._endpoint, "w") as fd:
            json.dump(self._results, fd, indent=4)
