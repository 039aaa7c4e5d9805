"""The embedded world: SUMO traffic, the ego's vehicle model, leaderboard scenarios and the drive loop."""
