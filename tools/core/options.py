"""Options declared once: a frozen dataclass whose fields are a command's flags.

A field is one option: its name is the flag (`--runs-per-task` or `--runs_per_task` for `runs_per_task`), its
annotation the type a value is converted to, its default the flag's, and the docstring under it the help text.
The dataclass's `__post_init__` (or one checker it calls) checks the values together and names the flag to fix.
From that one declaration:

    field_docs(cls)         the help text of every field (the docstring under it, read from the source)
    build(cls, flags)       an instance from flags as fire or `parse_flags` hands them over, each value converted
                            to its field's type (`values`) with a one-line error naming the flag; an unknown flag
                            is one line naming the near matches
    parse_flags(args)       `--key=value` words (or `--key value`, or `key=value`) as a dict, for a tool that
                            fire does not run (train)
    takes(name, cls, ...)   decorator of a fire command: the fields become keyword-only parameters of its
                            signature and entries of its docstring's Args (what `--help` prints, with defaults),
                            and the command is called with `name=` the instance built from the flags given
    help_lines(cls)         the fields as `--name=DEFAULT` and help text, for a tool that fire does not run

Each value is converted by tools.core.cli's `convert` (the conversions every command uses on its own parameters).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import re
import shlex
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from tools.core.cli import convert, flag, switch
from tools.core.errors import ToolError

# ----------------------------------------------------------------------------- a dataclass of options


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (and of the dataclasses it extends), read from its source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return inspect.Parameter.empty


def as_typed(f: dataclasses.Field) -> tuple[str, Any]:
    """A field's type and default as a person types them: words (`tuple[str, ...]`) as one quoted string,
    integers (`tuple[int, ...]`) comma-separated."""
    default = _default(f)
    if str(f.type) == "tuple[str, ...]":
        return "str", shlex.join(default)
    if str(f.type) == "tuple[int, ...]":
        return "str", ",".join(map(str, default))
    return str(f.type), default


def flag_fields(cls: type, exclude: tuple[str, ...] = ()) -> list[dataclasses.Field]:
    """The fields of `cls` that are flags: every init field but those in `exclude`."""
    return [f for f in dataclasses.fields(cls) if f.init and f.name not in exclude]


def values(cls: type, flags: Mapping[str, Any], exclude: tuple[str, ...] = (), see: str = "--help") -> dict[str, Any]:
    """`flags` (name -> value; names with dashes or underscores) as field name -> value of the field's type.
    ToolError naming the flag for a value that does not fit, and for an unknown flag (with its near matches)."""
    fields = {f.name: f for f in flag_fields(cls, exclude)}
    out = {}
    for given, value in flags.items():
        name = given.replace("-", "_")
        if name not in fields:
            near = difflib.get_close_matches(name, list(fields), n=3, cutoff=0.75)
            hint = f"; did you mean {' or '.join(flag(n) for n in near)}?" if near else ""
            raise ToolError(f"unknown flag {flag(name)}{hint} (see {see})")
        out[name] = convert(value, str(fields[name].type), name)
    return out


def build(cls: type, flags: Mapping[str, Any], exclude: tuple[str, ...] = (), see: str = "--help") -> Any:
    """An instance of `cls` from `flags`: each converted (`values`), the rest left at their defaults, then
    checked by the dataclass itself."""
    return cls(**values(cls, flags, exclude, see))


def parse_flags(args: list[str], see: str = "--help") -> dict[str, str]:
    """A command line of `--key=value` (also `--key value`, and `key=value`) as key -> text, keys with underscores;
    the last of a key given twice wins. For a tool that fire does not run."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        key, sep, value = arg.partition("=")
        if not sep and arg.startswith("--") and len(arg) > 2 and i + 1 < len(args) and \
                not args[i + 1].startswith("--"):
            key, sep, value = arg, "=", args[i + 1]
            i += 1
        i += 1
        if not sep or key.lstrip("-") == "":
            raise ToolError(f"{arg!r}: give options as --key=value (for example --max-steps=100); {see} lists them")
        out[key.lstrip("-").replace("-", "_")] = value
    return out


def _entry(name: str, doc: str, indent: str) -> list[str]:
    """One entry of a docstring's Args, wrapped, continuation lines 4 spaces deeper."""
    return textwrap.wrap(f"{name}: {doc}", 116, initial_indent=indent, subsequent_indent=indent + "    ",
                         break_on_hyphens=False)


def _insert_args(doc: str, before: list[str], lines: list[str]) -> str:
    """`doc` with `lines` put into its Args section before the entry of the first of `before` there, else at the
    section's end."""
    rows = doc.split("\n")
    start = next((i for i, row in enumerate(rows) if row.strip() == "Args:"), None)
    if start is None:
        raise ValueError("a command taking options needs an Args: section in its docstring")
    indent = " " * (len(rows[start]) - len(rows[start].lstrip()) + 4)
    end = start + 1
    while end < len(rows) and (rows[end].startswith(indent) or not rows[end].strip()):
        end += 1
    at = end
    for name in before:
        hit = next((i for i in range(start + 1, end) if re.match(rf"{indent}\**{name}:", rows[i])), None)
        if hit is not None:
            at = hit
            break
    while at > start + 1 and not rows[at - 1].strip():  # after the section's last entry, not after blank lines
        at -= 1
    return "\n".join(rows[:at] + [line.replace("{indent}", indent) for line in lines] + rows[at:])


def takes(name: str, cls: type, *, switch_help: str | None = None, exclude: tuple[str, ...] = ()
          ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a fire command whose parameter `name` takes a `cls`: in the command's signature (what fire and
    tools.core.cli.check_args read) `name` gives way to the fields of `cls` (but `exclude`) as keyword-only
    flags with their defaults, and each field's help goes into the docstring's Args (what `--help` prints). The
    command is called with `name=` the instance built from the flags given (`build`).

    With `switch_help`, `--name` is a switch of its own (its help that text) that turns the options on: without it
    the command gets `name=None`, and the options' flags are not looked at."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        names = [p.name for p in params]
        if name not in names:
            raise TypeError(f"{fn.__name__} has no parameter {name!r} to take {cls.__name__}")
        if any(p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL) for p in params):
            raise TypeError(f"{fn.__name__}: a command taking options has no positional-only or *args parameters")
        docs = field_docs(cls)
        fields = flag_fields(cls, exclude)
        clash = {f.name for f in fields} & (set(names) - {name})
        if clash:
            raise TypeError(f"{fn.__name__}: {', '.join(sorted(clash))} both a parameter and a field of {cls.__name__}")
        options = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=as_typed(f)[1],
                                     annotation=as_typed(f)[0]) for f in fields]
        public: list[inspect.Parameter] = []
        for p in params:
            if p.name == name:
                if switch_help is not None:
                    public.append(p.replace(default=False, annotation="bool"))
                continue
            if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) and options:
                public += options
                options = []
            public.append(p)
        public += options

        signature = sig.replace(parameters=public)

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)  # fire passes the parameters before the options by position
            kwargs = {}
            for key, value in bound.arguments.items():
                kwargs.update(value if signature.parameters[key].kind == inspect.Parameter.VAR_KEYWORD
                              else {key: value})
            given = {f.name: kwargs.pop(f.name) for f in fields if f.name in kwargs}
            on = switch(kwargs.pop(name, False), name.replace("_", "-")) if switch_help is not None else True
            kwargs[name] = build(cls, given, exclude) if on else None
            return fn(**kwargs)

        lines = [*(_entry(name, switch_help, "{indent}") if switch_help is not None else []),
                 *(line for f in fields for line in _entry(f.name, docs.get(f.name, ""), "{indent}"))]
        later = names[names.index(name) + 1:]
        command.__doc__ = _insert_args(fn.__doc__ or "", [*later, *(p.name for p in params
                                                                    if p.kind == p.VAR_KEYWORD)], lines)
        command.__signature__ = signature  # type: ignore[attr-defined]
        return command

    return decorate


def help_lines(cls: type, exclude: tuple[str, ...] = (), width: int = 100) -> list[str]:
    """Every flag of `cls`: `  --name=DEFAULT` (its type), then its help indented under it."""
    docs = field_docs(cls)
    lines = []
    for f in flag_fields(cls, exclude):
        kind, default = as_typed(f)
        lines.append(f"  {flag(f.name)}={default}  ({kind})")
        lines += textwrap.wrap(docs.get(f.name, ""), width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return lines
