"""Command-line plumbing shared by every tool: arguments checked before anything acts, and typed conversion
of flags (the dataset root a later stage reads: tools.dataset.layout.open_root).

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
fields become the commands' flags, signature and --help (tools.core.options, which converts each with
`convert`).
"""

from __future__ import annotations

import inspect
import math
import shlex
import sys
from collections.abc import Callable
from typing import Any

from tools.core.errors import ToolError, run_cli

# ----------------------------------------------------------------------------- conversion
# One value of a flag, converted and checked (tools.core.options reads a dataclass of options through `convert`).


def flag(name: str) -> str:
    """The flag of a field or parameter: runs_per_task -> --runs-per-task."""
    return "--" + name.replace("_", "-")


def switch(value: Any, name: str) -> bool:
    """A flag that takes no value (`--force`)."""
    if isinstance(value, bool):
        return value
    raise ToolError(f"--{name} takes no value (got {value!r}): write --{name} alone")


def integer(value: Any, name: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer flag within [lo, hi]."""
    try:
        if isinstance(value, bool) or value is None:
            raise ValueError
        number = float(value) if not isinstance(value, int) else value
        if not float(number).is_integer():
            raise ValueError
        out = int(number)
    except (TypeError, ValueError, OverflowError):
        raise ToolError(f"--{name} {value!r}: expected an integer") from None
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        bounds = f"at least {lo}" if hi is None else f"from {lo} to {hi}" if lo is not None else f"at most {hi}"
        raise ToolError(f"--{name} {out}: expected an integer {bounds}")
    return out


def number(value: Any, name: str, lo: float | None = None, hi: float | None = None) -> float:
    """A finite number flag within [lo, hi]."""
    try:
        if isinstance(value, bool) or value is None:
            raise ValueError
        out = float(value)
        if not math.isfinite(out):
            raise ValueError
    except (TypeError, ValueError):
        raise ToolError(f"--{name} {value!r}: expected a finite number") from None
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        bounds = f"at least {lo:g}" if hi is None else f"from {lo} to {hi}" if lo is not None else f"at most {hi:g}"
        raise ToolError(f"--{name} {out:g}: expected a number {bounds}")
    return out


def text(value: Any, name: str) -> str:
    """A text flag: fire may have made a number or a tuple of it; a bare `--name` is an error."""
    if value is None or isinstance(value, bool):
        raise ToolError(f"--{name} needs a value")
    if isinstance(value, list | tuple | dict):
        raise ToolError(f"--{name} {value!r}: expected one value (quote text with commas)")
    return str(value)


def optional_text(value: Any, name: str) -> str | None:
    return None if value is None else text(value, name)


def words(value: Any, name: str) -> tuple[str, ...]:
    """Options as one quoted string (`--sbatch-args="--qos=high --nice=10"`) -> its words."""
    if value is None or value == "" or value == ():
        return ()
    if isinstance(value, list | tuple):  # already words (a dataclass field handed on)
        return tuple(str(v) for v in value)
    try:
        return tuple(shlex.split(text(value, name)))
    except ValueError as e:
        raise ToolError(f"--{name} {value!r}: {e} (quote it as one string)") from None


def integers(value: Any, name: str) -> tuple[int, ...]:
    """Comma-separated integers: fire hands "3,5" over as a tuple and "3" as an int; a parser, as text."""
    parts = [p for p in value.split(",") if p.strip()] if isinstance(value, str) else \
        value if isinstance(value, list | tuple) else [value]
    try:
        return tuple(integer(v, name) for v in parts)
    except ToolError:
        raise ToolError(f"--{name} {value!r}: expected comma-separated integers") from None


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def convert(value: Any, kind: str, name: str) -> Any:
    """`value` as the type `kind` names (a field's annotation as written: "int", "str | None", ...)."""
    base = kind.removesuffix(" | None")
    if value is None and base != kind:
        return None
    dashed = name.replace("_", "-")
    if base == "bool":
        if isinstance(value, str) and value.lower() in _TRUE + _FALSE:  # key=value text (bin/train)
            return value.lower() in _TRUE
        return switch(value, dashed)
    conversions: dict[str, Callable[[Any, str], Any]] = {
        "int": integer, "float": number, "str": text, "tuple[str, ...]": words, "tuple[int, ...]": integers}
    if base not in conversions:
        raise TypeError(f"{name}: a field of type {kind} cannot be a flag")
    return conversions[base](value, dashed)


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
