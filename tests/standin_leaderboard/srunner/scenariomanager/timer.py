"""Stand-in of scenario_runner's GameTime (v0.9.16): the frame number and game time the test sets."""


class GameTime:
    frame = 0
    time = 0.0

    @staticmethod
    def get_frame():
        return GameTime.frame

    @staticmethod
    def get_time():
        return GameTime.time
