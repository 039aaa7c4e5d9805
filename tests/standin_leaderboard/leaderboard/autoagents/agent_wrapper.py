"""Stand-in of leaderboard/autoagents/agent_wrapper.py (leaderboard aec81319): its limits and
validate_sensor_configuration's rules (the track, unique ids, no OpenDRIVE map on the SENSORS track, allowed types,
at most 3 m from the hero's origin where a sensor has a place, at most so many sensors of a type), written here from
their description."""

import math

from leaderboard.autoagents.autonomous_agent import Track
from leaderboard.envs.sensor_interface import SensorConfigurationInvalid

MAX_ALLOWED_RADIUS_SENSOR = 3.0
SENSORS_LIMITS = {"sensor.camera.rgb": 8, "sensor.lidar.ray_cast": 2, "sensor.other.radar": 4,
                  "sensor.other.gnss": 1, "sensor.other.imu": 1, "sensor.opendrive_map": 1, "sensor.speedometer": 1}


def validate_sensor_configuration(sensors, agent_track, selected_track):
    if Track(selected_track) != agent_track:
        raise SensorConfigurationInvalid(f"wrong track {selected_track}")
    ids, counts = set(), {}
    for sensor in sensors:
        if sensor["id"] in ids:
            raise SensorConfigurationInvalid(f"Duplicated sensor tag [{sensor['id']}]")
        ids.add(sensor["id"])
        if agent_track == Track.SENSORS and sensor["type"].startswith("sensor.opendrive_map"):
            raise SensorConfigurationInvalid(f"Illegal sensor 'sensor.opendrive_map' used for Track [{agent_track}]!")
        if sensor["type"] not in SENSORS_LIMITS:
            raise SensorConfigurationInvalid(f"Illegal sensor '{sensor['type']}'")
        if all(k in sensor for k in "xyz") and \
                math.sqrt(sensor["x"] ** 2 + sensor["y"] ** 2 + sensor["z"] ** 2) > MAX_ALLOWED_RADIUS_SENSOR:
            raise SensorConfigurationInvalid(f"Illegal sensor extrinsics used for sensor '{sensor['id']}'")
        counts[sensor["type"]] = counts.get(sensor["type"], 0) + 1
    for kind, n in counts.items():
        if n > SENSORS_LIMITS[kind]:
            raise SensorConfigurationInvalid(f"Too many {kind} used!")
