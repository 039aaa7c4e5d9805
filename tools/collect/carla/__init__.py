"""The CARLA backend: the server's life, the leaderboard evaluator's run, our leaderboard agent."""
