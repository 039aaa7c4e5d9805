"""How each attempt of a route run ended: its record in logs/<Scenario>/<run>/attempts.json (`record_attempt`,
`read_attempts`), what crashed, read from the attempt's log (`crash_message`, `last_exception`), and the routes
that crash the same way on every attempt (`crash_history`). The attempts themselves are counted by their logs
(tools.dataset.claims.attempts)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core import atomic, files
from tools.dataset.layout import Layout, RunKey
from tools.dataset.results import CRASH_STATUSES, RunState

#: How much of a crash's message an attempt record keeps, characters.
MESSAGE_CHARS = 400
_TRACEBACK = "Traceback (most recent call last):"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: What differs between two attempts of the same crash (ports, pids, times, addresses): left out when messages
#: are compared.
_VARYING = re.compile(r"0x[0-9a-fA-F]+|\d{4,}")


def record_attempt(layout: Layout, key: RunKey, attempt: int, status: str, message: str = "",
                   detail: str = "", route: str = "") -> None:
    """Note how an attempt of a run ended in logs/<Scenario>/<run>/attempts.json (`layout.attempts_record`): its
    status and, for a crash, what crashed (`message`, one line: the exception, else how the process ended) and
    how the process ended (`detail`), and the route it drove (`route`: Route.digest, given by the run itself, which
    knows it). Written by whoever writes the attempt's result (the run itself, a collector whose child died, the
    SLURM monitor for a task that ended): it outlives the result, which the next attempt replaces."""
    entries = [e for e in read_attempts(layout, key) if e["attempt"] != attempt]
    entries.append({"attempt": int(attempt), "status": status, "message": _line(message), "detail": _line(detail),
                    **({"route": str(route)} if route else {})})
    atomic.write_json(layout.attempts_record(key), {"attempts": sorted(entries, key=lambda e: e["attempt"])})


def _line(text: str) -> str:
    return " ".join(text.split())[:MESSAGE_CHARS]


def read_attempts(layout: Layout, key: RunKey) -> list[dict[str, Any]]:
    """The run's attempt records ({"attempt", "status", "message", "detail", "route": "" where not recorded}), by
    attempt; [] without any."""
    try:
        entries = files.read_json(layout.attempts_record(key))["attempts"]
        return [{"attempt": int(e["attempt"]), "status": str(e["status"]), "message": str(e.get("message", "")),
                 "detail": str(e.get("detail", "")), "route": str(e.get("route", ""))} for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def crash_message(log: Path, how: str) -> tuple[str, str]:
    """(message, detail) of a crashed attempt: the last exception in its log, else `how` (how its process
    ended); and `how`."""
    return last_exception(log) or how, how


def last_exception(log: Path) -> str:
    """The exception line of the last Python traceback in a log (its first unindented line after the last
    "Traceback (most recent call last):"), colour codes removed; "" when there is none."""
    try:
        with files.open_regular(log, None) as f:  # (a FIFO planted there: refused, not waited on)
            f.seek(max(0, f.seek(0, os.SEEK_END) - 256 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    starts = [i for i, line in enumerate(lines) if _TRACEBACK in line]
    for line in lines[starts[-1] + 1:] if starts else []:
        line = _ANSI.sub("", line).rstrip()
        if line and not line[0].isspace():
            return line
    return ""


@dataclass(frozen=True)
class CrashHistory:
    """Routes that crash the same way on every attempt (`repeated`: key -> (attempts, the last one's status and
    message)), apart from runs that crashed and then finished (`recovered`)."""

    repeated: dict[RunKey, tuple[int, str]]
    recovered: list[RunKey]


def crash_history(layout: Layout, states: dict[RunKey, RunState]) -> CrashHistory:
    """Read the attempt records of the runs that ended (`states`: run_states): a failed run whose every attempt,
    two or more, ended with the same crash status and message (ports, pids and times aside) is `repeated`; a
    finished one with a crash among its attempts is `recovered`."""
    repeated: dict[RunKey, tuple[int, str]] = {}
    recovered: list[RunKey] = []
    for key, state in states.items():
        if state not in (RunState.FAILED, RunState.FINISHED):
            continue
        entries = read_attempts(layout, key)
        crashes = [e for e in entries if e["status"] in CRASH_STATUSES]
        if not crashes:
            continue
        if state is RunState.FINISHED:
            recovered.append(key)
        elif len(crashes) == len(entries) >= 2 and len({_crash_signature(e) for e in crashes}) == 1:
            last = crashes[-1]
            repeated[key] = (len(crashes), f"{last['status']}: {last['message']}" if last["message"]
                             else last["status"])
    return CrashHistory(repeated, recovered)


def _crash_signature(entry: dict[str, Any]) -> tuple[str, str]:
    return entry["status"], _VARYING.sub("#", entry["message"])
