"""drivekit's stand-in for the leaderboard's `leaderboard.envs.sensor_interface`: where a tick's sensor data waits
for the agent. tools.evaluate.leaderboard.host registers each of the agent's sensors and puts every measurement of a
tick (register_sensor, update_sensor) before it calls the agent; `get_data(frame)` hands them over as the
leaderboard's does: {id: (frame, data)}, every sensor of the frame but the OpenDRIVE map, which comes once."""


class SensorConfigurationInvalid(Exception):
    """The agent's sensors are not allowed (the leaderboard's name)."""


class SensorReceivedNoData(Exception):
    """A sensor sent nothing for the frame the agent asked for (the leaderboard's name)."""


class SensorInterface:
    def __init__(self):
        self._sensors_objects = {}
        self._opendrive_tag = None
        self._data = {}

    def register_sensor(self, tag, sensor_type, sensor):
        if tag in self._sensors_objects:
            raise SensorConfigurationInvalid(f"Duplicated sensor tag [{tag}]")
        self._sensors_objects[tag] = sensor
        if sensor_type == "sensor.opendrive_map":
            self._opendrive_tag = tag

    def update_sensor(self, tag, data, frame):
        if tag not in self._sensors_objects:
            raise SensorConfigurationInvalid(f"The sensor with tag [{tag}] has not been created!")
        self._data[tag] = (frame, data)

    def get_data(self, frame):
        """Every sensor's data of `frame` (the OpenDRIVE map only when it was sent for it)."""
        out = {tag: (f, data) for tag, (f, data) in self._data.items() if f == frame}
        missing = [tag for tag in self._sensors_objects if tag not in out and tag != self._opendrive_tag]
        if missing:
            raise SensorReceivedNoData(f"no data of frame {frame} from {', '.join(map(str, missing))}")
        self._data = {}
        return out
