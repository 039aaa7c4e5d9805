"""The error every tool reports as one line (`prog: message`) with a non-zero exit, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class ToolError(Exception):
    """Bad input or a state the tool cannot go on from. The message says what, where, and the fix."""


EXIT_TOOL_ERROR = 2


def run_cli(prog: str, main: Callable[[], Any]) -> None:
    """Run a fire CLI; turn a ToolError into one line on stderr and exit status 2."""
    try:
        main()
    except ToolError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        sys.exit(EXIT_TOOL_ERROR)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
