"""Stand-in of scenario_runner's GameTime (v0.9.16): the frame number the test sets."""


class GameTime:
    frame = 0

    @staticmethod
    def get_frame():
        return GameTime.frame
