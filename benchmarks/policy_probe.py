"""Drive one route with a post-trained checkpoint and log what the policy saw and predicted at every tick.

One JSON line per policy tick (the frame rate it was trained on): time, ego pose and speed, the command and
target point it was given, the predicted target speed (after the driver's curve cap), the forward and
sideways offsets of its waypoints 1, 4 and 8, and the control. This is how docs/training.md ("Why the
policy stopped") found the policy standing at a free road with a predicted target speed of 0.00-0.09 m/s.

    .venv/bin/python benchmarks/policy_probe.py ROUTE.xml CHECKPOINT OUT_ROOT LOG.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tools

import tools.evaluate.driver as driver_module  # noqa: E402
import tools.evaluate.policy as policy_module  # noqa: E402
from tools.evaluate.__main__ import route  # noqa: E402


def main(route_file: str, checkpoint: str, root: str, log_path: str) -> None:
    predict, step = policy_module.Policy.predict, driver_module.PolicyDriver.step
    last: dict = {}

    def logged_predict(self, sensors, m):
        plan = predict(self, sensors, m)
        last.update(plan=plan, m=m)
        return plan

    with open(log_path, "w") as log:
        def logged_step(self, world, inputs=None):
            decision = step(self, world, inputs)
            if inputs is not None:
                ego, plan, m, c = world.ego_box(), last["plan"], last["m"], decision.control
                wp = np.asarray(plan.waypoints)[[0, 3, 7]]
                log.write(json.dumps({
                    "t": round(world.time, 2), "x": round(ego.x, 1), "y": round(ego.y, 1), "yaw": round(ego.yaw, 1),
                    "speed": round(ego.speed, 2), "command": m.command, "target_point": [round(v, 1) for v in
                                                                                         m.target_point],
                    "target_speed": round(self.target_speed, 2), "waypoints_x": wp[:, 0].round(2).tolist(),
                    "waypoints_y": wp[:, 1].round(2).tolist(), "steer": round(c.steer, 2),
                    "throttle": round(c.throttle, 2), "brake": round(c.brake, 2)}) + "\n")
            return decision

        policy_module.Policy.predict = logged_predict
        driver_module.PolicyDriver.step = logged_step
        route(route_file, root=root, agent="policy", checkpoint=checkpoint, record=False, force=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    main(*sys.argv[1:])
