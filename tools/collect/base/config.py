"""Collection settings: one frozen dataclass, written into every run's run.json."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core.errors import ToolError
from tools.dataset.rig import RecordingRate, RigConfig, read_rig_file

_RATE = RecordingRate()
#: Who can drive the ego: our privileged expert, a trained policy, or a researcher's own leaderboard 2.0 agent file
#: (closed-loop evaluation: tools.evaluate.leaderboard).
AGENTS = ("expert", "policy", "leaderboard")
#: The child command (module, command) that drives one route run of each agent: collection's own for the expert;
#: a trained policy's lives with the evaluation, which needs torch (nothing under tools/collect imports it).
ROUTE_RUN_COMMAND = {"expert": ("tools.collect", "run"), "policy": ("tools.evaluate", "route"),
                     "leaderboard": ("tools.evaluate", "route")}
#: Per agent: the modules its route runs import beyond the expert's, which a worker's zygote imports once for them
#: (tools.collect.runner.zygote): torch and the model take about 2 s a run to import.
ROUTE_RUN_PRELOAD = {"policy": ("tools.evaluate.driver",)}
#: Settings that name a file or folder. They are made absolute as they are read, and before any child process gets
#: them (`absolute_flags`): the CARLA agent reads them inside the leaderboard evaluator, whose working folder is the
#: run's log folder, and a SLURM task or an image may start in another folder than the command that was typed.
PATH_SETTINGS = ("rig", "checkpoint", "agent_file", "agent_config")


def _absolute(value: Any) -> Any:
    """A path setting's value made absolute (`~` expanded); an empty value (the default) stays empty."""
    return str(Path(value).expanduser().absolute()) if isinstance(value, str) and value else value


def absolute_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """--key=value flags as given, each path setting's value made absolute: what child processes are passed."""
    return {k: _absolute(v) if k.replace("-", "_") in PATH_SETTINGS else v for k, v in flags.items()}


@dataclass(frozen=True)
class CollectSettings:
    world: str = "sim"  # a name of tools.collect.runner.world.WORLDS, which checks it and what the world cannot
    # honour of these settings. "sim": the embedded world (SUMO + carla.Map + our renderer); "carla": a CARLA server
    # driven by the leaderboard 2.0 evaluator (tools.collect.carla.run)
    vehicles: int = 40  # background vehicles kept in the town
    sim_hz: int = _RATE.sim_hz  # simulation ticks per simulated second (tools.dataset.rig.RecordingRate)
    record_every: int = _RATE.record_every  # record one frame every N ticks (20 Hz / 5 = 4 Hz)
    seed: int = 0  # added to the seed derived from (route, repetition)
    blocked_after: float = 90.0  # seconds with the ego standing still before "Agent got blocked"
    max_deviation: float = 30.0  # metres from the route before "Agent deviated from the route"
    timeout_base: float = 60.0  # route time budget: base seconds + length / timeout_speed
    timeout_speed: float = 2.0  # m/s
    route_ahead: int = 20  # route points stored per frame (every 2 m ahead of the ego)
    rig: str = ""  # JSON file of a sensor rig (tools.dataset.rig.RigConfig); default rig when empty
    agent: str = "expert"  # who drives the ego: "expert" (tools.expert) or "policy" (a trained checkpoint)
    checkpoint: str = ""  # the policy's checkpoint (a step folder or a training run), with --agent=policy
    agent_file: str = ""  # a leaderboard 2.0 agent file (its get_entry_point() class), with --agent=leaderboard
    agent_config: str = ""  # what the agent's setup() is given (the evaluator's --agent-config), with agent_file
    sensor_noise: bool = True  # the leaderboard's sensor noise for agent_file (GNSS, IMU, the LiDAR's drop-off);
    # --no-sensor-noise for checks (the policy agent's oracle: docs/leaderboard-agent.md); CARLA always adds it
    record: bool = True  # write frames (evaluation drives without recording)
    stop_on_infraction: bool = False  # end a run at the ego's first infraction, as Failed with it in its record
    # (the referee's in the embedded world, the leaderboard's criteria in CARLA): retried, no time spent driving on

    def __post_init__(self) -> None:
        for name in PATH_SETTINGS:
            object.__setattr__(self, name, _absolute(getattr(self, name)))
        checks = {
            "agent": self.agent in AGENTS,
            "vehicles": 0 <= self.vehicles <= 2000,
            "sim_hz": 1 <= self.sim_hz <= 200,
            "record_every": 1 <= self.record_every <= 1000,
            "blocked_after": self.blocked_after > 0,
            "max_deviation": self.max_deviation > 0,
            "timeout_base": self.timeout_base >= 0,
            "timeout_speed": self.timeout_speed > 0,
            "route_ahead": 1 <= self.route_ahead <= 500,
        }
        if self.agent == "policy" and not self.checkpoint:
            raise ToolError("--agent=policy needs --checkpoint=PATH (a training run or one of its step folders)")
        if self.agent == "leaderboard" and not self.agent_file:
            raise ToolError("--agent=leaderboard needs --agent-file=PATH (a leaderboard 2.0 agent file)")
        for name, ok in checks.items():
            if not ok:
                hint = {"agent": f" (agents: {', '.join(AGENTS)})"}.get(name, "")
                raise ToolError(f"--{name.replace('_', '-')}={getattr(self, name)!r} is out of range{hint}")

    @classmethod
    def from_flags(cls, flags: dict[str, Any]) -> CollectSettings:
        """Build from --key=value flags; an unknown key is an error naming the near matches."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for raw, value in flags.items():
            key = raw.replace("-", "_")
            if key not in fields:
                near = difflib.get_close_matches(key, fields, n=3)
                hint = f"; did you mean {', '.join('--' + n for n in near)}?" if near else ""
                raise ToolError(f"unknown setting --{raw}{hint} (settings: {', '.join(sorted(fields))})")
            kind = type(fields[key].default)
            if kind is bool and not isinstance(value, bool):  # bool("false") is True: only these words
                words = {"true": True, "false": False}
                if str(value).lower() not in words:
                    raise ToolError(f"--{raw}={value!r}: a switch; write --{raw} or --no-{raw}")
                value = words[str(value).lower()]
            try:
                values[key] = kind(value) if kind is not bool else bool(value)
            except (TypeError, ValueError):
                raise ToolError(f"--{raw}={value!r}: expected a {kind.__name__}") from None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def rate(self) -> RecordingRate:
        """The recording rate (run.json keeps sim_hz and record_every in `settings`: rig.run_rate)."""
        return RecordingRate(sim_hz=self.sim_hz, record_every=self.record_every)

    def load_rig(self) -> RigConfig:
        """The rig of --rig, or the default rig; ToolError naming --rig when the file is missing or wrong."""
        if not self.rig:
            return RigConfig()
        try:
            return read_rig_file(self.rig)
        except ValueError as e:
            raise ToolError(f"--rig: {e}") from None


def setting_switches() -> set[str]:
    """The settings that are switches (--stop-on-infraction, --no-record, --no-sensor-noise): CollectSettings' bools,
    which the commands taking settings as --key=value declare to tools.core.cli (`fn.setting_switches`)."""
    return {f.name for f in dataclasses.fields(CollectSettings) if isinstance(f.default, bool)}
