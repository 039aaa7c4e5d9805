"""A researcher's own leaderboard 2.0 agent file driving in the embedded world, as the leaderboard 2.0 evaluator
drives it (docs/leaderboard-agent.md):

    host      the agent as a tools.expert.drivers.Driver: import, construction, plan, set-up, the tick, destroy;
              the leaderboard's statuses for what fails (`agent_factory`: the drive loop's driver factory)
    sensors   the leaderboard's sensor checks, the rig that renders the agent's sensors, each tick's input_data
    world     the hero actor and carla.World stand-ins CarlaDataProvider hands out
    geo       GNSS: the plan's GPS (the leaderboard's Mercator) and the sensor's (the installed CARLA's projection)
    policy_inputs  our own trained policy as a leaderboard sensor agent: its sensors, the leaderboard's input as the
              model's (agent_file/policy_agent.py is the agent file the evaluator loads)
    compat/   stand-ins of the leaderboard's, scenario_runner's and CARLA's `agents` modules an agent imports, put
              first on sys.path when the user's LEADERBOARD_ROOT / SCENARIO_RUNNER_ROOT are not set
"""
