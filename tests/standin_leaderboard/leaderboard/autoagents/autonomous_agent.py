"""Stand-in of leaderboard/autoagents/autonomous_agent.py (leaderboard aec81319): Track, the base class's
constructor and set_global_plan, as the evaluator calls them: agent_class(host, port, debug),
set_global_plan(gps route, world route), then setup(config path); and __call__, which the evaluator's
AgentWrapper calls every tick and which prints a line every tick, as the real one does."""

import datetime
from enum import Enum

import carla
from srunner.scenariomanager.timer import GameTime


class Track(Enum):
    SENSORS = "SENSORS"
    MAP = "MAP"
    SENSORS_QUALIFIER = "SENSORS_QUALIFIER"
    MAP_QUALIFIER = "MAP_QUALIFIER"


class SensorInterface:
    """The leaderboard's SensorInterface as __call__ uses it: get_data(frame) -> {id: (frame, data)}."""

    def __init__(self):
        self.data = {}

    def get_data(self, frame):
        return self.data


class AutonomousAgent:
    def __init__(self, carla_host, carla_port, debug=False):
        self.track = Track.SENSORS
        self._global_plan = None
        self._global_plan_world_coord = None
        self.sensor_interface = SensorInterface()
        self.wallclock_t0 = None

    def set_global_plan(self, global_plan_gps, global_plan_world_coord):
        # Like the real one, the base class keeps only a downsampled copy (route_manipulation.downsample_route:
        # where the command changes and every 200 m; here every 50th point and the last).
        ids = sorted(set(range(0, len(global_plan_world_coord), 50)) | {len(global_plan_world_coord) - 1})
        self._global_plan_world_coord = [global_plan_world_coord[i] for i in ids]
        self._global_plan = [global_plan_gps[i] for i in ids]

    def run_step(self, input_data, timestamp):
        return carla.VehicleControl()

    def __call__(self):
        input_data = self.sensor_interface.get_data(GameTime.get_frame())
        timestamp = GameTime.get_time()
        if not self.wallclock_t0:
            self.wallclock_t0 = datetime.datetime.now()
        wallclock = datetime.datetime.now()
        print('=== [Agent] -- Wallclock = {} -- Game time = {}'.format(str(wallclock)[:-3], format(timestamp, '.3f')))
        control = self.run_step(input_data, timestamp)
        control.manual_gear_shift = False
        return control
