"""A stand-in for the CARLA leaderboard 2.0 evaluator (leaderboard/leaderboard_evaluator.py at the pinned commit
aec81319): no CARLA server runs here. Placed as LEADERBOARD_ROOT/leaderboard/leaderboard_evaluator.py of a tree a
test makes, so the collector runs it with its real command line and environment.

Like the real one it parses the same flags with the same argparse definitions in main(), loads the agent file as
LeaderboardEvaluator.__init__ does (its folder first on sys.path, then get_entry_point()), needs CARLA's `agents`
package on PYTHONPATH (scenario_runner imports it) and SCENARIO_RUNNER_ROOT/srunner, asks the server for its
version with the real carla client, and writes its checkpoint as StatisticsManager does: first with no records
(run(): clear_records, save_progress, write_statistics), then the finished record of the one route
(compute_route_statistics, compute_global_statistics, validate_and_write_statistics), json.dump with indent 4.

Told what to do by the environment, STANDIN_EVALUATOR:
  ok (default)        the finished record, status STANDIN_STATUS (default Perfect); exit 0
  norecord            exits 1 after the first write (an exception before any record)
  crash-server        SIGKILLs the server (pids in STANDIN_PID_FILE), records nothing, waits (as the real one
                      blocked in world.tick until its client timeout)
  crash-server-record SIGKILLs the server, records "Failed - Simulation crashed" itself, exits 255 (sys.exit(-1))
  hang                records nothing, waits
It appends its pid to STANDIN_EVALUATOR_PIDS when set, and writes the flags it parsed to argv.json in its
working directory.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import time

INFRACTIONS = ["collisions_layout", "collisions_pedestrian", "collisions_vehicle", "red_light", "stop_infraction",
               "outside_route_lanes", "min_speed_infractions", "yield_emergency_vehicle_infractions",
               "scenario_timeouts", "route_dev", "vehicle_blocked", "route_timeout"]




def results(records: list, entry_status: str, global_record: dict | None = None) -> dict:
    return {"_checkpoint": {"global_record": global_record or {}, "progress": [0 if not records else 1, 1],
                            "records": records},
            "entry_status": entry_status, "eligible": entry_status == "Finished", "sensors": [], "values": [],
            "labels": []}


def record(route_id: str, status: str) -> dict:
    done = status in ("Perfect", "Completed")
    return {"index": 0, "route_id": f"RouteScenario_{route_id}_rep0", "status": status, "num_infractions": 0,
            "infractions": {k: [] for k in INFRACTIONS},
            "scores": {"score_route": 100.0 if done else 12.5, "score_penalty": 1.0,
                       "score_composed": 100.0 if done else 12.5},
            "meta": {"route_length": 180.123, "duration_game": 41.25, "duration_system": 55.5}}


def global_record(rec: dict) -> dict:
    return {"index": -1, "route_id": -1, "status": "Failed" if "Failed" in rec["status"] else rec["status"],
            "infractions": {k: 0.0 for k in INFRACTIONS}, "scores_mean": dict(rec["scores"]),
            "scores_std_dev": {k: 0 for k in rec["scores"]},
            "meta": {"total_length": rec["meta"]["route_length"], "duration_game": rec["meta"]["duration_game"],
                     "duration_system": rec["meta"]["duration_system"], "exceptions": []}}


def write(path: str, data: dict) -> None:
    with open(path, 'w') as fd:  # in place, as checkpoint_tools.save_dict writes it
        json.dump(data, fd, indent=4)


def kill_server() -> None:
    with open(os.environ["STANDIN_PID_FILE"]) as f:
        os.kill(int(f.readline()), signal.SIGKILL)


def main() -> None:
    """The real evaluator's argparse in main(), flag for flag (defaults and types included), then the run."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--host', default='localhost')
    parser.add_argument('--port', default=2000, type=int)
    parser.add_argument('--traffic-manager-port', default=8000, type=int)
    parser.add_argument('--traffic-manager-seed', default=0, type=int)
    parser.add_argument('--debug', type=int, default=0)
    parser.add_argument('--record', type=str, default='')
    parser.add_argument('--timeout', default=300.0, type=float)
    parser.add_argument('--routes', required=True)
    parser.add_argument('--routes-subset', default='', type=str)
    parser.add_argument('--repetitions', type=int, default=1)
    parser.add_argument("-a", "--agent", type=str, required=True)
    parser.add_argument("--agent-config", type=str, default="")
    parser.add_argument("--track", type=str, default='SENSORS')
    parser.add_argument('--resume', type=bool, default=False)
    parser.add_argument("--checkpoint", type=str, default='./simulation_results.json')
    parser.add_argument("--debug-checkpoint", type=str, default='./live_results.txt')
    run(parser.parse_args())


def run(args: argparse.Namespace) -> None:
    mode = os.environ.get("STANDIN_EVALUATOR", "ok")
    if os.environ.get("STANDIN_EVALUATOR_PIDS"):
        with open(os.environ["STANDIN_EVALUATOR_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\n")
    with open("argv.json", "w") as f:
        json.dump({"argv": sys.argv[1:], "flags": vars(args)}, f, indent=1)
    print(f"stand-in leaderboard evaluator: mode {mode}", flush=True)

    import agents  # noqa: F401  CARLA's PythonAPI/carla on PYTHONPATH, as scenario_runner needs it
    import carla

    assert os.path.isdir(os.path.join(os.environ["SCENARIO_RUNNER_ROOT"], "srunner")), "SCENARIO_RUNNER_ROOT"
    client = carla.Client(args.host, args.port)
    client.set_timeout(5.0)
    print(f"server {client.get_server_version()}", flush=True)
    sys.path.insert(0, os.path.dirname(args.agent))  # the agent, loaded as LeaderboardEvaluator.__init__ does
    try:
        module = importlib.import_module(os.path.basename(args.agent).split('.')[0])
        print(f"agent entry point {module.get_entry_point()}", flush=True)
    except ModuleNotFoundError as e:  # what only the real leaderboard, scenario_runner and CARLA trees hold
        if (e.name or "").split(".")[0] not in ("leaderboard", "srunner", "agents"):
            raise
        print(f"stand-in: the agent imports {e.name}, which the stand-in trees lack", flush=True)
    import tools.dataset  # noqa: F401  the folder of our tools package is on PYTHONPATH: the agent imports it

    with open(args.agent_config) as f:
        config = json.load(f)
    assert config["route_id"] == args.routes_subset, (config["route_id"], args.routes_subset)
    assert config["settings"]["world"] == "carla", config["settings"]

    with open(args.checkpoint, 'w') as fd:  # StatisticsManager.clear_records
        fd.truncate(0)
    write(args.checkpoint, results([], "Started"))  # run(): save_progress(0, 1), write_statistics()
    if mode == "norecord":
        raise SystemExit(1)
    if mode in ("crash-server", "crash-server-record"):
        kill_server()
        if mode == "crash-server-record":
            rec = record(args.routes_subset, "Failed - Simulation crashed")
            write(args.checkpoint, results([rec], "Crashed"))
            sys.exit(-1)
    if mode in ("crash-server", "hang"):
        time.sleep(600)
    rec = record(args.routes_subset, os.environ.get("STANDIN_STATUS", "Perfect"))
    write(args.checkpoint, results([rec], "Finished", global_record(rec)))
    sys.exit(0)


if __name__ == '__main__':
    main()
