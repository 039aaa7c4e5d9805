"""drivekit's stand-in for the leaderboard's `leaderboard.autoagents.autonomous_agent`: the base class a leaderboard
2.0 agent derives from, and its Track. Put first on sys.path by tools.evaluate.leaderboard.host when LEADERBOARD_ROOT
is not set, so that an agent file written for the leaderboard runs unchanged in the embedded world.

It behaves as the leaderboard's (leaderboard-2.0 leaderboard/autoagents/autonomous_agent.py): the evaluator builds
it with (host, port, debug), hands it the plan (set_global_plan keeps a copy downsampled to a point every 200 m and
at every change of command), calls setup(config path), reads sensors(), then calls the agent once per 20 Hz tick,
which reads the tick's sensor data and the game time and calls run_step(input_data, timestamp)."""

from enum import Enum

import carla
from srunner.scenariomanager.timer import GameTime

from leaderboard.envs.sensor_interface import SensorInterface
from leaderboard.utils.route_manipulation import downsample_route


class Track(Enum):
    """The leaderboard's tracks: SENSORS (cameras, LiDAR, radar, GNSS, IMU, speedometer), MAP (and the OpenDRIVE
    map)."""

    SENSORS = "SENSORS"
    MAP = "MAP"
    SENSORS_QUALIFIER = "SENSORS_QUALIFIER"
    MAP_QUALIFIER = "MAP_QUALIFIER"


class AutonomousAgent:
    """Base class of every leaderboard agent."""

    def __init__(self, carla_host, carla_port, debug=False):
        self.track = Track.SENSORS
        self._global_plan = None
        self._global_plan_world_coord = None
        self.sensor_interface = SensorInterface()
        self.wallclock_t0 = None

    def setup(self, path_to_conf_file):
        """Set the agent up from its configuration file, and its track."""

    def sensors(self):
        """The agent's sensors: a list of dicts with type, id and the type's settings (x, y, z, roll, pitch, yaw,
        width, height, fov, ...)."""
        return []

    def run_step(self, input_data, timestamp):
        """One tick: the control of the ego."""
        control = carla.VehicleControl()
        control.steer = 0.0
        control.throttle = 0.0
        control.brake = 0.0
        control.hand_brake = False
        return control

    def destroy(self):
        """Clean up at the end of the route."""

    def __call__(self):
        input_data = self.sensor_interface.get_data(GameTime.get_frame())
        timestamp = GameTime.get_time()
        if not self.wallclock_t0:
            self.wallclock_t0 = GameTime.get_wallclocktime()
        control = self.run_step(input_data, timestamp)
        if not isinstance(control, carla.VehicleControl):  # the leaderboard's fails on the next line, less clearly
            raise TypeError(f"run_step returned {type(control).__name__}, not a carla.VehicleControl")
        control.manual_gear_shift = False
        return control

    @staticmethod
    def get_ros_version():
        return -1

    def set_global_plan(self, global_plan_gps, global_plan_world_coord):
        """Keep the plan, downsampled (a point every 200 m at most, and at every change of command)."""
        keep = downsample_route(global_plan_world_coord, 200)
        self._global_plan_world_coord = [(global_plan_world_coord[i][0], global_plan_world_coord[i][1]) for i in keep]
        self._global_plan = [global_plan_gps[i] for i in keep]
