"""This machine's live processes, read from /proc: what a test looks for when it asks what a killed parent left
running, which process is a run's training, or (conftest, at the end of the run) what the tests left behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    argv: tuple[str, ...]

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv)


def live_processes() -> list[Process]:
    """Every process but zombies; one that ends while it is being read is left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]  # after "pid (comm) ": state, ppid, ...
        if state != "Z":
            # Each argument ends in NUL, unless the process rewrote its command line (a title such as slurmstepd's).
            words = tuple(a.decode(errors="replace") for a in argv.removesuffix(b"\0").split(b"\0")) if argv else ()
            found.append(Process(int(entry.name), int(ppid), words))
    return found
