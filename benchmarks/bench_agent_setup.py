"""Our CARLA agent's set-up on a big town, with stand-ins (no CARLA server runs here): the seconds AgentCore.start
takes on the server's map (the map's OpenDRIVE kept as a Town, the leaderboard's plan taken as the route, the expert,
the BEV scene round the route), against the leaderboard evaluator's 300 s limit on an agent's set-up.

The "server's map" is a carla.Map built from the town's OpenDRIVE, as the client gets it from world.get_map();
the hero, the world and its blueprint library are the stand-ins of tests/collect/carla/test_carla_agent.py; the
plan the evaluator hands the agent (set_global_plan) is made before the timed set-up, by our RoutePlanner
(GlobalRoutePlanner's path).
The first set-up on a map builds its scene (kept under the user cache); the second reads it.

    .venv/bin/python benchmarks/bench_agent_setup.py --town Town13       # needs make towns; one route of the town
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def one_setup(route: Path, xodr: Path, root: Path) -> float:
    import carla
    from test_carla_agent import HERO_ID, StandinActor, StandinWorld, leaderboard_plan

    from tools.collect.base.config import CollectSettings
    from tools.collect.base.routes import select_route
    from tools.collect.carla.agent import AgentConfig, AgentCore
    from tools.dataset.layout import RunKey
    from tools.expert.planner import RoutePlanner

    r = select_route(route, None)
    carla_map = carla.Map(r.town, xodr.read_text())  # what world.get_map() gives the agent
    hero = StandinActor(HERO_ID, "vehicle.lincoln.mkz_2020", (2.45, 1.05, 0.75), "car")
    key = RunKey.for_route(r.scenario, route.stem, r.id, 0)
    config = AgentConfig(root=str(root), scenario=key.scenario, name=key.name, route_file=str(route), route_id=r.id,
                         repetition=0, seed=1, attempt=1, settings=CollectSettings().to_dict())
    plan = leaderboard_plan(RoutePlanner(carla_map).trace(r.waypoints))  # the evaluator's, before set-up
    core = AgentCore(config)
    started = time.perf_counter()
    core.start(StandinWorld([hero]), carla_map, hero, plan)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--town", default="Town13")
    parser.add_argument("--towns-dir", type=Path,
                        default=Path(os.environ.get("DRIVEKIT_CARLA_TOWNS", REPO / ".cache" / "carla-towns")))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        seconds = one_setup(*map(Path, args.child))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{seconds:.1f} {peak:.0f}")
        return
    xodr = args.towns_dir / f"{args.town}.xodr"
    if not xodr.is_file():
        parser.error(f"--towns-dir {args.towns_dir}: no {args.town}.xodr (make towns)")
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp / "cache"))  # the server map's town: a fresh user cache
        subprocess.run([sys.executable, "-m", "tools.collect", "routes", "--town", str(xodr), "--count", "1",
                        "--min-length", "300", "--max-length", "700", "--scenarios", "Accident", "--out",
                        str(tmp / "routes")], cwd=REPO, check=True, capture_output=True)
        (route,) = sorted((tmp / "routes" / "Accident").glob("*.xml"))
        for label in ("first set-up (scene built)", "later set-up (scene read)"):
            out = subprocess.run([sys.executable, __file__, "--child", str(route), str(xodr), str(tmp / "root")],
                                 cwd=REPO, env=env, check=True, capture_output=True, text=True).stdout.split()
            print(f"{args.town}: AgentCore.start {out[0]} s, peak {out[1]} MB: {label} (the evaluator allows 300 s)")


if __name__ == "__main__":
    main()
