"""Our trained policy as a leaderboard 2.0 agent file: the CARLA leaderboard evaluator loads it by path
(`--agent=<this file> --agent-config=CHECKPOINT`), and so does drivekit's embedded world:

    bin/evaluate --agent-file tools/evaluate/leaderboard/agent_file/policy_agent.py --agent-config RUN \
        routes/ --root OUT

`--agent-config` is a post-training checkpoint (a run folder, its newest intact step, or a step folder) or a JSON
file {"checkpoint": PATH}. The agent declares the rig the checkpoint trained with and drives as `bin/evaluate
--checkpoint` does: tools/evaluate/leaderboard/policy_inputs.py says how each tick's input becomes the model's.
Needs drivekit importable (its training image, or `pip install` of the checkout) beside the leaderboard.
"""

import carla
from leaderboard.autoagents.autonomous_agent import AutonomousAgent, Track

from tools.evaluate.leaderboard.policy_inputs import PolicyAgentCore


def get_entry_point():
    return "PolicyAgent"


class PolicyAgent(AutonomousAgent):
    def set_global_plan(self, global_plan_gps, global_plan_world_coord):
        super().set_global_plan(global_plan_gps, global_plan_world_coord)
        self._whole_plan = (global_plan_gps, global_plan_world_coord)  # the base class keeps a point every 200 m
        if getattr(self, "core", None) is not None:
            self.core.set_plan(*self._whole_plan)

    def setup(self, path_to_conf_file):
        self.track = Track.SENSORS
        self.core = PolicyAgentCore(path_to_conf_file)
        if getattr(self, "_whole_plan", None) is not None:  # the evaluator gives the plan before setup
            self.core.set_plan(*self._whole_plan)

    def sensors(self):
        return self.core.sensors()

    def run_step(self, input_data, timestamp):
        c = self.core.step(input_data)
        control = carla.VehicleControl()
        control.steer, control.throttle, control.brake = float(c.steer), float(c.throttle), float(c.brake)
        return control
