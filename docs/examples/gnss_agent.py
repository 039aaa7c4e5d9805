"""A leaderboard 2.0 sensor agent to copy: it follows the route with GNSS, IMU and speedometer only.

It runs unchanged under the real leaderboard evaluator (leaderboard_evaluator.py --agent=gnss_agent.py) and in
drivekit's embedded world (bin/evaluate --agent-file docs/examples/gnss_agent.py). What a real agent meets, shown
here in a few lines each:

- the plan: the base class keeps a copy downsampled to one point every 200 m; `set_global_plan` also keeps the
  whole (about 1 m apart) to follow it;
- GNSS to CARLA's world frame: the map's reference (lat_0, lon_0) is not exposed, so it is solved from the plan,
  which comes both in GPS (the leaderboard's Mercator) and world coordinates; the GNSS sensor then projects with
  the simulator's own projection: CARLA 0.9.16's spherical transverse Mercator (scale 0.9996, latitude growing with
  CARLA's y), the leaderboard's Mercator (latitude falling with y) before 0.9.16;
- the compass: radians clockwise from north (CARLA's -y); CARLA's yaw is compass - 90 degrees.
"""

import functools
import math
from importlib import metadata

import carla
from leaderboard.autoagents.autonomous_agent import AutonomousAgent, Track

EARTH_RADIUS = 6378137.0  # the leaderboard's and CARLA's
TMERC_SCALE = 0.9996  # CARLA 0.9.16's transverse Mercator


def get_entry_point():
    return "GnssAgent"


@functools.cache  # read once: importlib.metadata takes milliseconds, and the agent converts every tick
def carla_version():
    try:
        return tuple(int(p) for p in metadata.version("carla").split(".")[:3])
    except (metadata.PackageNotFoundError, ValueError):
        return (0, 9, 16)


def reference_from_plan(gps_plan, world_plan):
    """(lat_0, lon_0) of the map: the leaderboard's Mercator of the first plan point, solved for its reference."""
    lat, lon = gps_plan[0][0]["lat"], gps_plan[0][0]["lon"]
    x, y = world_plan[0][0].location.x, world_plan[0][0].location.y
    lat_ref = lat
    for _ in range(30):  # the scale depends on lat_ref: a fixed point
        scale = math.cos(math.radians(lat_ref))
        my = scale * EARTH_RADIUS * math.log(math.tan(math.radians(90.0 + lat) / 2.0)) + y
        lat_ref = 2.0 * math.degrees(math.atan(math.exp(my / (EARTH_RADIUS * scale)))) - 90.0
    lon_ref = lon - math.degrees(x / (EARTH_RADIUS * math.cos(math.radians(lat_ref))))
    return lat_ref, lon_ref


def gnss_to_world(lat, lon, lat_ref, lon_ref, version=None):
    """CARLA world (x, y) of a GNSS reading."""
    if (version or carla_version()) >= (0, 9, 16):
        phi, dlon = math.radians(lat), math.radians(lon - lon_ref)
        b = math.cos(phi) * math.sin(dlon)
        x = TMERC_SCALE * EARTH_RADIUS * math.atanh(b)
        y = TMERC_SCALE * EARTH_RADIUS * (math.atan2(math.tan(phi), math.cos(dlon)) - math.radians(lat_ref))
        return x, y
    scale = math.cos(math.radians(lat_ref))
    x = scale * EARTH_RADIUS * math.radians(lon - lon_ref)
    y = scale * EARTH_RADIUS * (math.log(math.tan(math.radians(90.0 + lat_ref) / 2.0))
                                - math.log(math.tan(math.radians(90.0 + lat) / 2.0)))
    return x, y


class GnssAgent(AutonomousAgent):
    CRUISE = 6.0  # m/s
    LOOKAHEAD = 5.0  # m

    def setup(self, path_to_conf_file):
        self.track = Track.SENSORS
        self.index = 0

    def sensors(self):
        return [
            {"type": "sensor.other.gnss", "x": 0.0, "y": 0.0, "z": 0.0, "id": "gps"},
            {"type": "sensor.other.imu", "x": 0.0, "y": 0.0, "z": 0.0, "roll": 0.0, "pitch": 0.0, "yaw": 0.0,
             "id": "imu"},
            {"type": "sensor.speedometer", "reading_frequency": 20, "id": "speed"},
        ]

    def set_global_plan(self, global_plan_gps, global_plan_world_coord):
        super().set_global_plan(global_plan_gps, global_plan_world_coord)
        self.route = [(t.location.x, t.location.y) for t, _ in global_plan_world_coord]
        self.lat_ref, self.lon_ref = reference_from_plan(global_plan_gps, global_plan_world_coord)

    def run_step(self, input_data, timestamp):
        lat, lon, _ = input_data["gps"][1]
        x, y = gnss_to_world(lat, lon, self.lat_ref, self.lon_ref)
        compass = input_data["imu"][1][6]
        yaw = (0.0 if math.isnan(compass) else compass) - math.pi / 2.0
        speed = input_data["speed"][1]["speed"]

        # Progress along the route (never backwards), then the point one lookahead ahead.
        window = self.route[self.index:self.index + 50]
        self.index += min(range(len(window)), key=lambda k: math.hypot(window[k][0] - x, window[k][1] - y))
        goal = self.route[-1]
        for px, py in self.route[self.index:]:
            if math.hypot(px - x, py - y) >= self.LOOKAHEAD:
                goal = (px, py)
                break
        # Pure pursuit: the angle to the goal in the ego frame (CARLA: y right, angles clockwise).
        angle = math.atan2(goal[1] - y, goal[0] - x) - yaw
        angle = (angle + math.pi) % (2.0 * math.pi) - math.pi
        steer = max(-1.0, min(1.0, 1.5 * angle))
        target = self.CRUISE * (0.5 if abs(angle) > 0.3 else 1.0)
        at_end = self.index >= len(self.route) - 3

        control = carla.VehicleControl()
        control.steer = steer
        control.throttle = 0.0 if at_end else max(0.0, min(0.75, 0.5 * (target - speed)))
        control.brake = 1.0 if at_end or speed > target + 1.5 else 0.0
        return control
