"""drivekit's stand-in for scenario_runner's `srunner.scenariomanager.timer`: GameTime, the simulated clock an
agent's base class reads (its frame and time). tools.evaluate.leaderboard.host ticks it once per 20 Hz tick with
the embedded world's timestamp, as scenario_runner's ScenarioManager does with CARLA's."""

import datetime


class GameTime:
    """The simulated time since the route started and the frame of the last tick (class-level, as in
    scenario_runner)."""

    _current_game_time = 0.0
    _carla_time = 0.0
    _last_frame = 0
    _platform_timestamp = 0
    _init = False

    @staticmethod
    def on_carla_tick(timestamp):
        """Advance to `timestamp` (frame, delta_seconds, elapsed_seconds), once per frame."""
        if GameTime._last_frame < timestamp.frame:
            frames = timestamp.frame - GameTime._last_frame if GameTime._init else 1
            GameTime._current_game_time += timestamp.delta_seconds * frames
            GameTime._last_frame = timestamp.frame
            GameTime._platform_timestamp = datetime.datetime.now()
            GameTime._init = True
            GameTime._carla_time = timestamp.elapsed_seconds

    @staticmethod
    def restart():
        GameTime._current_game_time = 0.0
        GameTime._carla_time = 0.0
        GameTime._last_frame = 0
        GameTime._init = False

    @staticmethod
    def get_time():
        return GameTime._current_game_time

    @staticmethod
    def get_carla_time():
        return GameTime._carla_time

    @staticmethod
    def get_wallclocktime():
        return GameTime._platform_timestamp

    @staticmethod
    def get_frame():
        return GameTime._last_frame
