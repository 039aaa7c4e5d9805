"""Stand-in of leaderboard/scenarios/scenario_manager.py (aec81319): the loop of run_scenario, which ticks
(_tick_scenario) while `_running`; a tick ends the loop when the scenario's tree ends (the route completed);
`scenario` is the route scenario, whose get_criteria() the statistics read. The scenario here is the stand-in
evaluator's (a route of `ticks` ticks)."""


class ScenarioManager:
    def __init__(self, timeout, statistics_manager=None, debug_mode=0):
        self.scenario = None
        self._running = False

    def load_scenario(self, scenario, agent, route_index, rep_number):
        self.scenario = scenario

    def run_scenario(self):
        self._running = True
        while self._running:
            self._tick_scenario()

    def _tick_scenario(self):
        self.scenario.tick()
        if self.scenario.done:
            self._running = False
