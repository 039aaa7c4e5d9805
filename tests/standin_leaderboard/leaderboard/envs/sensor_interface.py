"""Stand-in of leaderboard/envs/sensor_interface.py (leaderboard aec81319): the exception the sensor check raises."""


class SensorConfigurationInvalid(Exception):
    pass
