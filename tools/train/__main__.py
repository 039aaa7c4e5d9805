"""python -m tools.train pretrain|posttrain [--key=value ...]: train the model (see --help for the keys).

The phase is a word and the keys also come as key=value (the older spelling, what slurm/train.sbatch and the
pipeline pass), which fire would read as flag-less strings and guess types of, so the arguments are parsed
here: the first word is the phase, the rest are TrainConfig overrides (tools.core.options.parse_flags)
typed from the fields' annotations. Errors are one line on stderr with exit status 2; a run stopped by SIGUSR1 or
SIGTERM exits 128 + the signal number after writing its checkpoint.
"""

from __future__ import annotations

import sys

from tools.core.errors import ToolError, run_cli
from tools.train.config import PHASES, help_text, parse_overrides


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help") or any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return 0
    phase, *overrides = argv
    if phase not in PHASES:
        raise ToolError(f"{phase!r}: the first argument is the phase, {' or '.join(PHASES)} "
                        "(python -m tools.train --help)")
    cfg = parse_overrides(phase, overrides)
    from tools.train.loop import train  # torch is imported only when there is something to train

    return train(cfg)


if __name__ == "__main__":
    # SystemExit passes through run_cli, which turns a ToolError into one line and exit status 2.
    run_cli("train", lambda: sys.exit(main(sys.argv[1:])))
