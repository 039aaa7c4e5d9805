"""A stand-in for the CARLA leaderboard 2.0 evaluator (leaderboard/leaderboard_evaluator.py at the pinned commit
aec81319): no CARLA server runs here. Placed as LEADERBOARD_ROOT/leaderboard/leaderboard_evaluator.py of a tree a
test makes, so the collector runs it with its real command line and environment.

Like the real one it parses the same flags with the same argparse definitions in main(), loads the agent file as
LeaderboardEvaluator.__init__ does (its folder first on sys.path, then get_entry_point()); an agent file other than
ours (a researcher's: bin/evaluate --world=carla --agent-file) it also sets up and drives as _load_and_run_scenario
does: the class built with (host, port, debug), set_global_plan (a two-point plan here), setup(--agent-config),
sensors() checked by validate_sensor_configuration(sensors, agent.track, --track) (imported from agent_wrapper as the
real one imports it, so our wrapper's --track-of-agent reaches it; refused: "Failed - Agent's sensors were invalid",
entry Rejected, exit 255), the agent called every tick, destroy() at the end; what it saw goes to agent.json in its
working directory (the config setup() got, the track, the sensors' ids, the ticks). Our own agent is only imported
(the stand-in has no world for it). It needs CARLA's `agents`
package on PYTHONPATH (scenario_runner imports it) and SCENARIO_RUNNER_ROOT/srunner, asks the server for its
version with the real carla client, and writes its checkpoint as StatisticsManager does: first with no records
(run(): clear_records, save_progress, write_statistics), then the finished record of the one route
(compute_route_statistics, compute_global_statistics, validate_and_write_statistics), json.dump with indent 4.

Like the real one it takes the route's name and repetition from the leaderboard's RouteIndexer, drives the route
through the leaderboard's ScenarioManager (run_scenario's loop of _tick_scenario), and judges it from the
scenario's criteria (an event of a type in PENALTY_NAME_DICT is an infraction; a route not driven to its end is
Failed): the stand-ins of those modules (tests/standin_leaderboard) sit in the LEADERBOARD_ROOT and
SCENARIO_RUNNER_ROOT trees the test makes. It draws once from scenario_runner's random source
(CarlaDataProvider.get_random_seed(), as the scenarios draw their actors) and notes the draw.

Told what to do by the environment, STANDIN_EVALUATOR:
  ok (default)        the route driven to its end: Perfect, or STANDIN_STATUS when set; exit 0
  crash-server-record SIGKILLs the server, prints the tick's time-out as the real one prints an exception, records
                      "Failed - Simulation crashed" itself, exits 255 (sys.exit(-1))
  infraction          the ego collides with a vehicle at tick 5 of the route's ROUTE_TICKS: Completed with the
                      collision, or Failed with it when the route was stopped there; exit 0
  norecord            exits 1 after the first write (an exception before any record)
  crash-server        SIGKILLs the server (pids in STANDIN_PID_FILE), records nothing, waits (as the real one
                      blocked in world.tick until its client timeout)
  hang                records nothing, waits
STANDIN_MODES ({"<run name>": [mode of attempt 1, 2, ...]}) gives a run's attempts their own modes (the run and
the attempt read from --checkpoint, logs/<Scenario>/<run>/leaderboard-NN.json). It appends its pid to
STANDIN_EVALUATOR_PIDS when set, and writes the flags it parsed, its PYTHONPATH, scenario_runner's seed and its first
draw to argv.json in its working directory.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import socket
import sys
import time
import traceback

from leaderboard.autoagents.agent_wrapper import validate_sensor_configuration
from leaderboard.envs.sensor_interface import SensorConfigurationInvalid
from leaderboard.scenarios.scenario_manager import ScenarioManager
from leaderboard.utils.route_indexer import RouteIndexer
from leaderboard.utils.statistics_manager import PENALTY_NAME_DICT
from srunner.scenariomanager.carla_data_provider import CarlaDataProvider
from srunner.scenariomanager.traffic_events import TrafficEvent, TrafficEventType

ROUTE_TICKS = 40  # the stand-in route's length in ticks
COLLISION_TICK = 5  # where the ego collides in mode infraction
INFRACTIONS = ["collisions_layout", "collisions_pedestrian", "collisions_vehicle", "red_light", "stop_infraction",
               "outside_route_lanes", "min_speed_infractions", "yield_emergency_vehicle_infractions",
               "scenario_timeouts", "route_dev", "vehicle_blocked", "route_timeout"]




def results(records: list, entry_status: str, global_record: dict | None = None) -> dict:
    return {"_checkpoint": {"global_record": global_record or {}, "progress": [0 if not records else 1, 1],
                            "records": records},
            "entry_status": entry_status, "eligible": entry_status == "Finished", "sensors": [], "values": [],
            "labels": []}


class Criterion:
    def __init__(self):
        self.events = []


class StandinRoute:
    """The route scenario: ROUTE_TICKS ticks long; with `collide`, the collision criterion's event at
    COLLISION_TICK; `agent` (a researcher's, set up) called every tick as the AgentWrapper calls it."""

    def __init__(self, collide: bool, agent=None):
        self.ticks, self.collide, self.agent = 0, collide, agent
        self.collisions = Criterion()

    def tick(self):
        if self.agent is not None:
            self.agent()
        self.ticks += 1
        if self.collide and self.ticks == COLLISION_TICK:
            self.collisions.events.append(TrafficEvent(
                TrafficEventType.COLLISION_VEHICLE, self.ticks,
                "Agent collided against object with type=vehicle.tesla.model3 and id=77 at (x=12.3, y=4.5, z=0.0)"))

    @property
    def done(self):
        return self.ticks >= ROUTE_TICKS

    def get_criteria(self):
        return [self.collisions]


def record(route_name: str, status: str, route: StandinRoute | None = None) -> dict:
    """The record as compute_route_statistics makes it: infractions from the criteria's events, Perfect or
    Completed when the route was driven to its end, else Failed (`status`: a status the test asks for)."""
    infractions = {k: [] for k in INFRACTIONS}
    completion = 100.0 if status in ("Perfect", "Completed") else 12.5
    if route is not None:
        for node in route.get_criteria():
            for event in node.events:
                infractions[PENALTY_NAME_DICT[event.get_type()]].append(event.get_message())
        completion = round(100.0 * route.ticks / ROUTE_TICKS, 2)
        if not os.environ.get("STANDIN_STATUS"):
            found = any(infractions.values())
            status = ("Completed" if found else "Perfect") if route.done else "Failed"
    return {"index": 0, "route_id": route_name, "status": status,
            "num_infractions": sum(len(v) for v in infractions.values()), "infractions": infractions,
            "scores": {"score_route": completion, "score_penalty": 0.6 ** len(infractions["collisions_vehicle"]),
                       "score_composed": completion * 0.6 ** len(infractions["collisions_vehicle"])},
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


def kill_server(port: int) -> None:
    """SIGKILLs the server on `port` (several workers' servers run at once: each writes its own pid file)."""
    with open(f"{os.environ['STANDIN_PID_FILE']}.{port}") as f:
        os.kill(int(f.readline()), signal.SIGKILL)


def mode_of(checkpoint: str) -> str:
    """STANDIN_EVALUATOR, or this attempt's mode in STANDIN_MODES ({"<run name>": [mode of attempt 1, 2, ...]},
    the last one for later attempts) where it names the run (the run's log folder holds --checkpoint,
    leaderboard-NN.json of attempt NN)."""
    name = os.path.basename(os.path.dirname(os.path.abspath(checkpoint)))
    attempt = int(re.fullmatch(r"leaderboard-(\d+)\.json", os.path.basename(checkpoint)).group(1))
    modes = json.loads(os.environ.get("STANDIN_MODES", "{}")).get(name)
    if modes:
        return modes[min(attempt, len(modes)) - 1]
    return os.environ.get("STANDIN_EVALUATOR", "ok")


def set_up_agent(args: argparse.Namespace, module):
    """A researcher's agent as _load_and_run_scenario sets it up: (agent, None), or (None, why) when its sensors
    are refused for the track."""
    import carla

    agent = getattr(module, module.get_entry_point())(args.host, args.port, args.debug)
    agent.set_global_plan([({"lat": 0.0, "lon": 0.0, "z": 0.0}, None)] * 2, [(carla.Transform(), None)] * 2)
    agent.setup(args.agent_config)
    sensors = agent.sensors()
    try:
        validate_sensor_configuration(sensors, agent.track, args.track)
    except SensorConfigurationInvalid as e:
        print(f"\n\033[91mThe sensor's configuration used is invalid:\n{e}\033[0m\n", flush=True)
        return None, str(e)
    agent.seen = {"setup": args.agent_config, "track": agent.track.value, "sensors": [x["id"] for x in sensors]}
    return agent, None


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
    mode = mode_of(args.checkpoint)
    if os.environ.get("STANDIN_EVALUATOR_PIDS"):
        with open(os.environ["STANDIN_EVALUATOR_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\n")
    config = RouteIndexer(args.routes, args.repetitions, args.routes_subset).get_next_config()
    route_name = f"{config.name}_rep{config.repetition_index}"  # _load_and_run_scenario's
    draw = int(CarlaDataProvider.get_random_seed().randint(2 ** 31 - 1))
    with open("argv.json", "w") as f:
        json.dump({"argv": sys.argv[1:], "flags": vars(args), "random_seed": CarlaDataProvider._random_seed,
                   "first_draw": draw, "pythonpath": os.environ.get("PYTHONPATH", "")}, f, indent=1)
    print(f"stand-in leaderboard evaluator: mode {mode}", flush=True)

    import agents  # noqa: F401  CARLA's PythonAPI/carla on PYTHONPATH, as scenario_runner needs it
    import carla

    assert os.path.isdir(os.path.join(os.environ["SCENARIO_RUNNER_ROOT"], "srunner")), "SCENARIO_RUNNER_ROOT"
    client = carla.Client(args.host, args.port)
    client.set_timeout(5.0)
    print(f"server {client.get_server_version()}", flush=True)
    traffic_manager = socket.socket()  # the Traffic Manager's rpclib server binds its port as Boost.Asio does
    traffic_manager.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    traffic_manager.bind(("", args.traffic_manager_port))
    traffic_manager.listen(8)
    print(f"traffic manager listening on {args.traffic_manager_port}", flush=True)
    sys.path.insert(0, os.path.dirname(args.agent))  # the agent, loaded as LeaderboardEvaluator.__init__ does
    ours = os.path.basename(args.agent) == "drivekit_agent.py"
    try:
        module = importlib.import_module(os.path.basename(args.agent).split('.')[0])
        print(f"agent entry point {module.get_entry_point()}", flush=True)
    except ModuleNotFoundError as e:  # what only the real leaderboard, scenario_runner and CARLA trees hold
        if not ours or (e.name or "").split(".")[0] not in ("leaderboard", "srunner", "agents"):
            raise
        print(f"stand-in: the agent imports {e.name}, which the stand-in trees lack", flush=True)
    import tools.dataset  # noqa: F401  the folder of our tools package is on PYTHONPATH: the agent imports it

    if ours:
        with open(args.agent_config) as f:
            agent_config = json.load(f)
        assert agent_config["route_id"] == args.routes_subset, (agent_config["route_id"], args.routes_subset)
        assert agent_config["settings"]["world"] == "carla", agent_config["settings"]

    with open(args.checkpoint, 'w') as fd:  # StatisticsManager.clear_records
        fd.truncate(0)
    write(args.checkpoint, results([], "Started"))  # run(): save_progress(0, 1), write_statistics()
    if mode == "norecord":
        raise SystemExit(1)
    if mode in ("crash-server", "crash-server-record"):
        kill_server(args.port)
        if mode == "crash-server-record":  # the tick times out: the real one prints the exception, records it
            try:
                raise RuntimeError(f"time-out of 10000ms while waiting for the simulator, make sure the simulator "
                                   f"is ready and connected to {args.host}:{args.port}")
            except RuntimeError:
                print("\n\033[91mError during the simulation:")
                print(f"\n{traceback.format_exc()}\033[0m", flush=True)
            rec = record(route_name, "Failed - Simulation crashed")
            write(args.checkpoint, results([rec], "Crashed"))
            sys.exit(-1)
    if mode in ("crash-server", "hang"):
        time.sleep(600)
    agent = None
    if not ours:
        agent, refused = set_up_agent(args, module)
        if refused:  # FAILURE_MESSAGES["Sensors"]: the entry Rejected, the evaluator stops
            write(args.checkpoint, results([record(route_name, "Failed - Agent's sensors were invalid")], "Rejected"))
            sys.exit(-1)
    route = StandinRoute(collide=mode == "infraction", agent=agent)
    manager = ScenarioManager(args.timeout)
    manager.load_scenario(route, None, config.index, config.repetition_index)
    manager.run_scenario()
    if agent is not None:
        agent.destroy()
        with open("agent.json", "w") as f:
            json.dump({**agent.seen, "ticks": route.ticks}, f, indent=1)
    rec = record(route_name, os.environ.get("STANDIN_STATUS", "Perfect"), route)
    write(args.checkpoint, results([rec], "Finished", global_record(rec)))
    sys.exit(0)


if __name__ == '__main__':
    main()
