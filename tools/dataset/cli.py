"""Command-line plumbing shared by every tool: arguments checked before anything acts, typed conversion
of flags, and the dataset root a later stage reads.

`main(prog, commands)` is what a tool's `__main__` calls. Before fire runs a command, the whole command
line is checked against the command's signature: an unknown flag, a value given to a switch
(`--force=yes`), a missing or extra positional argument is one line on stderr and exit status 2, and the
command never starts. (Fire itself calls the command first and complains about leftover arguments
afterwards, when the command has already acted.) Switches are passed on as `--name=True` so fire never
takes the next word as their value. A command with `**settings` takes any other `--key=value`: it must
check them itself before acting (the settings dataclasses do, with near matches).

Fire guesses types from the text ("2024" is an int, "1e3" a float, "a,b" a tuple): commands convert every
argument in their first lines with `integer`, `number`, `text` and `switch`, which name the flag and the
fix when the value does not fit. Options that several commands share are declared once, as a dataclass whose
fields become the commands' flags, signature and --help (tools.dataset.options, where those conversions live).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from tools.dataset import options
from tools.dataset.errors import ToolError, run_cli
from tools.dataset.layout import Layout, resolve_root

# ----------------------------------------------------------------------------- conversion
# One value of a flag, converted and checked (tools.dataset.options, where the options' dataclasses are read).

switch, integer, number, text, optional_text = (options.switch, options.integer, options.number, options.text,
                                                options.optional_text)


# ----------------------------------------------------------------------------- the dataset root


def open_root(root: Any) -> Layout:
    """The existing dataset root a later stage reads (`--root`, else $DATA_ROOT, else ./data)."""
    layout = Layout(resolve_root(optional_text(root, "root")))
    if not layout.root.is_dir():
        raise ToolError(f"--root {layout.root}: no such dataset root; give the --root you collected into "
                        "(bin/collect ROUTES_DIR --root ROOT)")
    if not layout.manifest.is_file() and not (layout.root / "data").is_dir():
        raise ToolError(f"--root {layout.root}: not a dataset root (no manifest.json, no data/); "
                        "collect into it first: bin/collect ROUTES_DIR --root ROOT")
    layout.check_no_links()
    return layout


# ----------------------------------------------------------------------------- checking a command line


def _flag_name(arg: str) -> tuple[str, str | None]:
    body = arg[2:]
    name, eq, value = body.partition("=")
    return name.replace("-", "_"), (value if eq else None)


def check_args(prog: str, fn: Callable[..., Any], args: list[str]) -> list[str]:
    """Check `args` (after the command's name) against `fn`'s signature; return them with switches
    normalised to `--name=True/False`. ToolError for anything fire would act on wrongly."""
    params = inspect.signature(fn).parameters
    named = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    open_kwargs = any(p.kind == p.VAR_KEYWORD for p in params.values())
    # Switches: its bool parameters, and the bool settings it takes through **kwargs (`fn.setting_switches()`),
    # which may also be given a value (--record=False), as any setting.
    switches = {n for n, p in named.items() if isinstance(p.default, bool)}
    settings = set(getattr(fn, "setting_switches", set)()) - set(named)
    switches |= settings
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD and n not in switches]
    given: set[str] = set()
    loose: list[str] = []
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            raise ToolError(f"'--' is not understood here; see {prog} --help")
        if arg.startswith("--") and len(arg) > 2:
            name, value = _flag_name(arg)
            negated = name not in named and next((name[len(p):] for p in ("no_", "no")
                                                  if name.startswith(p) and name[len(p):] in switches), None)
            if negated:
                name = negated
            if name in switches and not (value is not None and name in settings and not negated):
                if value is not None:
                    raise ToolError(f"--{name.replace('_', '-')} takes no value (got {value!r}): write "
                                    f"--{name.replace('_', '-')} alone")
                out.append(f"--{name}={not negated}")
                given.add(name)
                i += 1
                continue
            if name not in named and not open_kwargs:
                import difflib

                near = difflib.get_close_matches(name, list(named), n=2)
                hint = f"; did you mean {' or '.join('--' + n.replace('_', '-') for n in near)}?" if near else ""
                raise ToolError(f"unknown flag {arg.split('=')[0]}{hint} (see {prog} --help)")
            if name in given:
                raise ToolError(f"--{name.replace('_', '-')} given twice")
            given.add(name)
            if value is None:  # `--name VALUE`: the next word is the value
                if i + 1 >= len(args) or (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                    raise ToolError(f"--{name.replace('_', '-')} needs a value")
                out.extend([arg, args[i + 1]])
                i += 2
                continue
            out.append(arg)
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            raise ToolError(f"unknown option {arg} (see {prog} --help)")
        loose.append(arg)
        out.append(arg)
        i += 1
    free = [n for n in positional if n not in given]
    if len(loose) > len(free):
        raise ToolError(f"unexpected argument(s) {' '.join(loose[len(free):])} (see {prog} --help)")
    required = [n for n in free[len(loose):] if named[n].default is inspect.Parameter.empty]
    if required:
        raise ToolError(f"missing {', '.join(n.upper() for n in required)} (see {prog} --help)")
    return out


def _is_number(arg: str) -> bool:
    try:
        float(arg)
        return True
    except ValueError:
        return False


def main(prog: str, commands: dict[str, Callable[..., Any]], name: str, argv: list[str] | None = None) -> None:
    """Check the command line, then run the command with fire; a ToolError is one line and exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def go() -> None:
        import fire

        if argv and not argv[0].startswith("-") and argv[0] not in commands:
            raise ToolError(f"unknown command {argv[0]!r}; commands: {', '.join(sorted(commands))} (see {name} --help)")
        if any(a in ("-h", "--help") for a in argv) or not argv:
            # explicitly (after "--"), so that a command's **settings cannot swallow it
            command = [argv[0], "--", "--help"] if argv and argv[0] in commands else ["--", "--help"]
        else:
            command = [argv[0], *check_args(f"{name} {argv[0]}", commands[argv[0]], argv[1:])]
        fire.Fire(commands, command=command, name=name)

    run_cli(prog, go)
