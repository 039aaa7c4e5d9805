"""The CARLA attempt of one route run (`--world=carla`): a CARLA server of our own, the CARLA leaderboard 2.0
evaluator driving the route with our agent (tools.collect.carla.agent, the expert) or a researcher's leaderboard agent
file (--agent=leaderboard: `bin/evaluate --world=carla --agent-file`), its result published as the run's.

tools.collect.runner.attempt.run_route calls `check_setup` and `check_route` before it claims the run, then `drive`
in place of the embedded world's drive; the claim, the lock, discard_run, logging and the result file stay there. One
attempt:

  1. the server's and the Traffic Manager's ports reserved for the whole attempt; the server (CarlaUE4.sh) on
     the worker's GPU in its own process group, its output appended to the attempt's log, polled until it answers
     (tools.collect.carla.server.start_server); the route's town must be one of its maps
  2. our agent's config (logs/.../agent-NN.json; a researcher's agent file gets its own --agent-config as given:
     --agent=leaderboard, tools.evaluate's --agent-file), then leaderboard/leaderboard_evaluator.py (run by
     tools.collect.carla.evaluator: scenario_runner seeded per repetition, the record named after it, and
     --stop-on-infraction) in its own process group, output appended to the attempt's log. Its --checkpoint
     is logs/.../leaderboard-NN.json, never ROOT/results/: the evaluator writes that file early, with no
     records, and in place
  3. while it runs: the run's heartbeat kept fresh (our agent beats too, once it drives); a server that dies
     gives the evaluator crash_grace() seconds to record the crash itself, then its group is ended
  4. its checkpoint, when it holds a finished record, becomes ROOT/results/<Scenario>/<run>.json unchanged
     (results.publish_checkpoint); an evaluator that ended without one is `Failed - Simulation crashed`
  Both process groups are ended at exit whatever happened (SIGTERM included: it raises SystemExit here).

One server per route run, its start included (10 to 60 s against routes of minutes): a fresh server per
attempt leaves no state (a map, settings, actors, a leaked sensor, a wedged Traffic Manager) from one route
to the next, a crash costs one route run only, and the claim-and-run protocol and retries stay those of
the embedded world (one child process per route run). A server kept across the runs of a task would save
the start; measure it before changing this.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.collect.base.config import CollectSettings
from tools.collect.base.processes import end_group, start_group
from tools.collect.base.routes import Route
from tools.collect.base.scenario_types import PARAMETERS
from tools.collect.base.town import user_cache
from tools.collect.carla.agent import AGENT_FILE, AgentConfig
from tools.collect.carla.server import CarlaServer, Ports, pick_gpu, start_server
from tools.collect.carla.versions import (
    DEFAULT,
    LEADERBOARD_URL,
    RELEASES,
    SCENARIO_RUNNER_URL,
    Release,
    VersionError,
    check_release,
)
from tools.core.errors import ToolError
from tools.dataset import claims, heartbeats, results
from tools.dataset.layout import Layout, RunKey

log = logging.getLogger("collect.carla")

#: The folder that holds the `tools` package (a checkout, or site-packages in the image): the agent file the
#: evaluator loads imports `tools.*`.
TOOLS_HOME = Path(__file__).resolve().parents[3]
#: The module that runs the evaluator with scenario_runner's seed, the repetition's number and
#: --stop-on-infraction set (tools/collect/carla/evaluator.py).
EVALUATOR_WRAPPER = "tools.collect.carla.evaluator"
HOST = "127.0.0.1"
TRACK = "SENSORS"  # the leaderboard track: our agent declares camera and LiDAR sensors
#: The evaluator's --timeout: its client timeout, and its watchdogs on the agent's set-up and on every tick
#: (the evaluator's own default; loading a large town takes minutes).
EVALUATOR_TIMEOUT_S = 300.0
#: Seconds a server death leaves the evaluator to record the crash itself (env DRIVEKIT_CARLA_CRASH_GRACE_S).
CRASH_GRACE_S = 10.0
CRASH_GRACE_ENV = "DRIVEKIT_CARLA_CRASH_GRACE_S"
POLL_S = 0.2  # how often the evaluator and the server are looked at
EVALUATOR_STOP_GRACE_S = 10.0  # SIGTERM to the evaluator's group, then SIGKILL after this long
#: The same grace when we are ended by a signal: a collector SIGKILLs its child 10 s after SIGTERM
#: (local.TERM_GRACE_S), and both groups must have had their SIGKILL by then.
SIGNALLED_STOP_GRACE_S = 3.0
#: Where a CARLA release keeps its towns' OpenDRIVE, relative to CARLA_ROOT (install_towns).
INSTALL_TOWNS = ("CarlaUE4/Content/Carla/Maps/OpenDrive/*.xodr", "CarlaUE4/Content/Carla/Maps/*/OpenDrive/*.xodr")
#: What the client's get_server_version needs at most once the server listens (the town check's timeout).
CLIENT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class CarlaSetup:
    """Where the CARLA server, the leaderboard and scenario_runner are (checked by `check_setup`)."""

    carla_root: Path
    leaderboard_root: Path
    scenario_runner_root: Path
    #: The CARLA release all of them are (tools.collect.carla.versions.check_release).
    release: Release = RELEASES[DEFAULT]

    @property
    def evaluator(self) -> Path:
        return self.leaderboard_root / "leaderboard" / "leaderboard_evaluator.py"

    @property
    def python_api(self) -> Path:
        """CARLA's PythonAPI/carla: its `agents` package, which scenario_runner and the leaderboard import."""
        return self.carla_root / "PythonAPI" / "carla"


# ----------------------------------------------------------------------------- checks before anything starts


def _root(env: Mapping[str, str], var: str, fix: str, what: str = "--world=carla") -> Path:
    value = env.get(var, "").strip()
    if not value:
        raise ToolError(f"{what}: {var} is not set; {fix}")
    return Path(value).expanduser().absolute()


def check_setup(env: Mapping[str, str] | None = None, client_version: str | None = None) -> CarlaSetup:
    """The CARLA install, the leaderboard, scenario_runner and the carla client of a CARLA run, checked before
    anything starts: one ToolError line for the first thing wrong (what, which variable, the fix), a set-up whose
    parts are different CARLA releases included (tools.collect.carla.versions.check_release).
    `client_version`: the carla client's version (default: what the installed client says)."""
    env = os.environ if env is None else env
    supported = " or ".join(RELEASES)
    install = (f"set it to a CARLA {supported} install (the folder holding CarlaUE4.sh), or build the CARLA "
               "image (make images: containers/carla.sif), which bin/collect then runs in")
    carla_root = _root(env, "CARLA_ROOT", install)
    if not (carla_root / "CarlaUE4.sh").is_file():
        raise ToolError(f"--world=carla: CARLA_ROOT={carla_root} has no CarlaUE4.sh; {install}")
    if not (carla_root / "PythonAPI" / "carla" / "agents").is_dir():
        raise ToolError(f"--world=carla: CARLA_ROOT={carla_root} has no PythonAPI/carla/agents (CARLA's agents "
                        f"package, which scenario_runner imports); set CARLA_ROOT to a complete CARLA "
                        f"{supported} release")
    leaderboard = leaderboard_root(env)
    runner = scenario_runner_root(env)
    try:
        release = check_release(env, carla_root, leaderboard, runner, client_version)
    except VersionError as e:
        raise ToolError(str(e)) from None
    crash_grace(env)  # a bad DRIVEKIT_CARLA_CRASH_GRACE_S is refused here too, before anything starts
    return CarlaSetup(carla_root, leaderboard, runner, release)


_CLONE = "clone {url} at commit {commits} and set {var} to it; docs/carla.md shows how"


def _commits(field: str) -> str:
    """Each release's commit of the leaderboard or scenario_runner, in words."""
    return " or ".join(f"{getattr(r, field)} for CARLA {v}" for v, r in RELEASES.items())


def leaderboard_root(env: Mapping[str, str], what: str = "--world=carla") -> Path:
    """LEADERBOARD_ROOT, checked: one ToolError line naming the variable and the fix."""
    fix = _CLONE.format(url=LEADERBOARD_URL, commits=_commits("leaderboard_commit"), var="LEADERBOARD_ROOT")
    root = _root(env, "LEADERBOARD_ROOT", fix, what)
    if not (root / "leaderboard" / "leaderboard_evaluator.py").is_file():
        raise ToolError(f"{what}: LEADERBOARD_ROOT={root} has no leaderboard/leaderboard_evaluator.py; {fix}")
    return root


def scenario_runner_root(env: Mapping[str, str], what: str = "--world=carla") -> Path:
    """SCENARIO_RUNNER_ROOT, checked: one ToolError line naming the variable and the fix."""
    fix = _CLONE.format(url=SCENARIO_RUNNER_URL, commits=_commits("scenario_runner_commit"),
                        var="SCENARIO_RUNNER_ROOT")
    root = _root(env, "SCENARIO_RUNNER_ROOT", fix, what)
    if not (root / "srunner").is_dir():
        raise ToolError(f"{what}: SCENARIO_RUNNER_ROOT={root} has no srunner/; {fix}")
    return root


def check_route(route_file: Path, route: Route) -> None:
    """What the leaderboard's route parser needs of a route, checked before anything starts: scenario types that
    are scenario_runner classes (read_routes has checked each block's parameters and trigger point), an integer id
    (--routes-subset sorts ids as integers, and reads "a-b" as a range) and a <scenarios> element (it may be
    empty; the parser fails without one)."""
    for sc in route.scenarios:
        if sc["type"] not in PARAMETERS:
            raise ToolError(f"{route_file}: route {route.id} scenario {sc['name']} has type {sc['type']!r}, which no "
                            "scenario class of scenario_runner implements (the leaderboard would skip it and drive the "
                            "route with no scenario); use a leaderboard 2.0 type (docs/scenarios.md)")
    if not route.id.isdigit():
        raise ToolError(f"{route_file}: route id {route.id!r} is not an integer; the leaderboard evaluator selects "
                        "routes by integer id (--routes-subset): renumber the route")
    for el in ET.parse(route_file).getroot().iter("route"):
        if el.get("id") == route.id and el.find("scenarios") is None:
            raise ToolError(f"{route_file}: route {route.id} has no <scenarios> element, which the leaderboard "
                            "evaluator needs: add <scenarios/> (it may be empty)")


def install_towns(setup: CarlaSetup) -> Path:
    """The CARLA install's own towns as one folder of <Town>.xodr (links made once under the user's cache), the
    towns folder of CARLA routes that have none of their own: a route's town the install lacks is then refused
    before anything starts, like a town missing from towns/. A release keeps Town01-07 and Town10HD in
    Maps/OpenDrive/ and the large maps (Town12, Town13, Town15) in Maps/<town>/OpenDrive/ (INSTALL_TOWNS)."""
    found = {p.stem: p for pattern in INSTALL_TOWNS for p in sorted(setup.carla_root.glob(pattern))}
    digest = hashlib.sha256(str(setup.carla_root).encode()).hexdigest()[:12]
    folder = user_cache("carla-install-towns", digest)
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in found.items():
        link = folder / f"{name}.xodr"
        if not link.is_symlink() or link.readlink() != target:
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            tmp.replace(link)  # atomic: collectors making the folder at once never see a half-made link
    return folder


def check_town(route_file: Path, route: Route, host: str, port: int) -> None:
    """The route's town must be one of the server's maps (Client.get_available_maps: paths such as
    /Game/Carla/Maps/Town01, compared by their last part as the evaluator compares its loaded map)."""
    import carla

    client = carla.Client(host, port)
    client.set_timeout(CLIENT_TIMEOUT_S)
    towns = sorted({str(m).rsplit("/", 1)[-1] for m in client.get_available_maps()})
    if route.town not in towns:
        raise ToolError(f"{route_file}: route {route.id} drives in {route.town}, which the CARLA server does not "
                        f"have (its towns: {', '.join(towns) or 'none'}); install the CARLA package holding "
                        f"{route.town} (CARLA's additional maps) or drop the route")


def crash_grace(env: Mapping[str, str] | None = None) -> float:
    """CRASH_GRACE_S, or DRIVEKIT_CARLA_CRASH_GRACE_S when set (a positive number of seconds)."""
    env = os.environ if env is None else env
    raw = env.get(CRASH_GRACE_ENV, "").strip()
    if not raw:
        return CRASH_GRACE_S
    try:
        value = float(raw)
        if not value >= 0:
            raise ValueError
    except ValueError:
        raise ToolError(f"{CRASH_GRACE_ENV}={raw!r}: expected a number of seconds (default {CRASH_GRACE_S:g})") \
            from None
    return value


# ----------------------------------------------------------------------------- the evaluator's command line


def evaluator_command(python: str, setup: CarlaSetup, route_file: Path, route_id: str, checkpoint: Path,
                      live: Path, agent_file: Path, agent_config: Path | str, ports: Ports, seed: int, repetition: int,
                      stop_on_infraction: bool = False, agents_track: bool = False, host: str = HOST,
                      timeout: float = EVALUATOR_TIMEOUT_S) -> list[str]:
    """The command of one route, one repetition: leaderboard_evaluator.py with its flags, run by our wrapper
    (tools.collect.carla.evaluator) with what it has no flag for: scenario_runner's seed, the repetition's
    number in the record's name, --stop-on-infraction, and with `agents_track` (a researcher's agent file) the
    track the agent's own (its `track` after setup(), as if --track named it). Never --resume: its argparse type
    is bool, so any value given, "False" included, turns it on. `agent_config` "" is the evaluator's default."""
    return [
        python, "-m", EVALUATOR_WRAPPER, f"--seed={seed}", f"--repetition={repetition}",
        *(["--stop-on-infraction"] if stop_on_infraction else []),
        *(["--track-of-agent"] if agents_track else []), str(setup.evaluator),
        f"--routes={route_file}", f"--routes-subset={route_id}", "--repetitions=1", f"--track={TRACK}",
        f"--checkpoint={checkpoint}", f"--debug-checkpoint={live}",
        f"--agent={agent_file}", f"--agent-config={agent_config}",
        f"--host={host}", f"--port={ports.rpc}", f"--traffic-manager-port={ports.traffic_manager}",
        f"--traffic-manager-seed={seed}", f"--timeout={timeout:g}", "--debug=0",
    ]


def evaluator_env(base: Mapping[str, str], setup: CarlaSetup, tools_home: Path = TOOLS_HOME,
                  agent_dir: Path | None = None) -> dict[str, str]:
    """The evaluator's environment: `base` plus PYTHONPATH with CARLA's PythonAPI/carla (its `agents`
    package), scenario_runner, the leaderboard, the folder of our `tools` package (our agent file imports it;
    the wrapper is ours) and `agent_dir`, a researcher's agent file's folder (the evaluator puts it first on
    sys.path when it loads the file; on PYTHONPATH, processes the agent starts import from it too), in that order
    before any PYTHONPATH of `base`; the three roots (scenario_runner and the leaderboard find scenario files
    through SCENARIO_RUNNER_ROOT); unbuffered output. The run's lock stays with us."""
    env = {k: v for k, v in base.items() if k != claims.LOCK_FD_ENV}
    paths = [str(setup.python_api), str(setup.scenario_runner_root), str(setup.leaderboard_root), str(tools_home)]
    if agent_dir is not None:
        paths.append(str(agent_dir))
    if base.get("PYTHONPATH"):
        paths.append(base["PYTHONPATH"])
    env.update(PYTHONPATH=os.pathsep.join(paths), CARLA_ROOT=str(setup.carla_root),
               LEADERBOARD_ROOT=str(setup.leaderboard_root), SCENARIO_RUNNER_ROOT=str(setup.scenario_runner_root),
               PYTHONUNBUFFERED="1")
    return env


# ----------------------------------------------------------------------------- one attempt


def agent_of(settings: CollectSettings) -> tuple[Path, str, bool]:
    """Who the evaluator runs (its --agent and --agent-config): a researcher's leaderboard agent file and its
    configuration as given (--agent=leaderboard: settings.agent_file and agent_config, absolute paths; "" is the
    evaluator's default), else our agent (AGENT_FILE, its config written per attempt: ""). And whether it is theirs."""
    if settings.agent == "leaderboard":
        return Path(settings.agent_file), settings.agent_config, True
    return AGENT_FILE, "", False


def _sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally that ends both process groups


def drive(layout: Layout, key: RunKey, route_file: Path, route: Route, settings: CollectSettings, repetition: int,
          seed: int, attempt: int, setup: CarlaSetup) -> tuple[Path | results.RouteRecord, str]:
    """Drive the route in a CARLA server of our own under the leaderboard evaluator. Returns the evaluator's
    checkpoint when it holds a finished record (run_route publishes it unchanged), else the record of a
    simulation crash; and how the evaluator ended, in words. ToolError when the server does not come up or
    lacks the route's town."""
    started = time.time()
    attempt_log = layout.attempt_log(key, attempt)
    grace = crash_grace()
    server = None
    checkpoint = layout.evaluator_checkpoint(key, attempt)
    evaluator = None
    stop_grace = EVALUATOR_STOP_GRACE_S
    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        gpu = pick_gpu()
        server = start_server(setup.carla_root, gpu, attempt_log, host=HOST)
        ports = server.ports
        check_town(route_file, route, HOST, ports.rpc)
        agent_file, config, theirs = agent_of(settings)  # config: Path | str
        if not theirs:  # our agent: what it drives and where it writes, in its config
            config = layout.agent_config(key, attempt)
            AgentConfig(root=str(layout.root), scenario=key.scenario, name=key.name, route_file=str(route_file),
                        route_id=route.id, repetition=repetition, seed=seed, attempt=attempt,
                        settings=settings.to_dict()).write(config)
        checkpoint.unlink(missing_ok=True)
        argv = evaluator_command(sys.executable, setup, route_file, route.id, checkpoint,
                                 layout.evaluator_live(key, attempt), agent_file, config, ports, seed, repetition,
                                 settings.stop_on_infraction, agents_track=theirs)
        log.info("%s: CARLA server ready on GPU %s, ports %d (RPC), %d, %d, Traffic Manager %d; leaderboard "
                 "evaluator: %s", key, gpu, ports.rpc, ports.streaming, ports.secondary, ports.traffic_manager,
                 " ".join(argv))
        for handler in logging.getLogger().handlers:
            handler.flush()
        env = evaluator_env(os.environ, setup, agent_dir=agent_file.parent if theirs else None)
        evaluator = start_group(argv, attempt_log, env=env, cwd=layout.log_dir(key))
        why = _watch(layout, key, server, evaluator, grace)
    except SystemExit as e:
        log.error("%s: ended by a signal (exit %s): the CARLA server and the evaluator are ended, no result "
                  "written", key, e.code)
        stop_grace = SIGNALLED_STOP_GRACE_S
        raise
    finally:
        end_group(evaluator, stop_grace)
        if server is not None:
            server.stop(stop_grace)  # its process group, then its ports (the Traffic Manager's included)
        signal.signal(signal.SIGTERM, previous)
    status = results.read_status(checkpoint)
    if status is not None and status != results.STARTED:
        log.info("%s: %s (%s; the leaderboard evaluator's result, %.0f s wall)", key, status, why,
                 time.time() - started)
        return checkpoint, why
    log.error("%s: %s: %s with no finished record in %s", key, results.FAILED_SIMULATION, why, checkpoint)
    why += " with no finished record"
    return results.RouteRecord(route_id=route.id, status=results.FAILED_SIMULATION,
                               duration_system=time.time() - started), why


def _watch(layout: Layout, key: RunKey, server: CarlaServer, evaluator, grace: float) -> str:
    """Wait for the evaluator to end, keeping the run's heartbeat fresh (while the world loads, before our agent
    beats itself); a server that dies ends it after `grace` seconds (unless it ends first, having recorded the
    crash). How it ended, in words."""
    last_beat = -heartbeats.HEARTBEAT_EVERY_S
    while True:
        code = evaluator.poll()
        if code is not None:
            return f"the leaderboard evaluator exited with status {code}"
        if not server.alive():
            died = server.process.returncode
            log.error("%s: the CARLA server died mid-route (exit status %s); the evaluator has %.0f s to record "
                      "it", key, died, grace)
            deadline = time.monotonic() + grace
            while evaluator.poll() is None and time.monotonic() < deadline:
                time.sleep(POLL_S)
            code = evaluator.poll()
            ended = (f"the evaluator exited with status {code}" if code is not None else
                     f"the evaluator was ended after {grace:g} s")
            return f"the CARLA server died mid-route (exit status {died}); {ended}"
        if time.monotonic() - last_beat >= heartbeats.HEARTBEAT_EVERY_S:
            last_beat = time.monotonic()
            # the agent's own beat, while fresh, stands
            if heartbeats.heartbeat_age(layout.heartbeat(key)) >= heartbeats.HEARTBEAT_EVERY_S:
                heartbeats.write_heartbeat(layout, key, 0)
        time.sleep(POLL_S)
