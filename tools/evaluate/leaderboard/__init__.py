"""A researcher's own leaderboard 2.0 agent file driving in the embedded world, as the leaderboard 2.0 evaluator
drives it (docs/leaderboard-agent.md):

    host      the agent as a tools.expert.drivers.Driver: import, construction, plan, set-up, the tick, destroy;
              the leaderboard's statuses for what fails (`agent_factory`: the drive loop's driver factory)
    sensors   the leaderboard's sensor checks, the rig that renders the agent's sensors, each tick's input_data
    world     the hero actor and carla.World stand-ins CarlaDataProvider hands out
    geo       GNSS: the plan's GPS (the leaderboard's Mercator) and the sensor's (the installed CARLA's projection)
    compat/   stand-ins of the leaderboard's, scenario_runner's and CARLA's `agents` modules an agent imports, put
              first on sys.path when the user's LEADERBOARD_ROOT / SCENARIO_RUNNER_ROOT are not set
"""
