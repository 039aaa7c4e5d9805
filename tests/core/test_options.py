"""Options declared once (tools/core/options.py): a dataclass's fields become a command's flags, its signature
and its --help; values are converted by the field's type and checked by the dataclass, one line naming the flag."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from tests.conftest import PYTHON, run_tool
from tools.collect.runner.slurm_options import SlurmOptions
from tools.core import cli, options
from tools.core.errors import ToolError


@dataclasses.dataclass(frozen=True)
class Knobs:
    size: int = 3
    """how many."""
    name: str | None = None
    """what it is called."""
    extra: tuple[str, ...] = ()
    """more words, as one quoted string."""
    loud: bool = False
    """say it twice."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ToolError(f"--size {self.size}: expected 1 or more")


@options.takes("knobs", Knobs, switch_help="turn the knobs on.")
def command(where: str, count: int = 1, knobs: Knobs | None = None, **rest) -> tuple:
    """Do it.

    Args:
        where: the place.
        count: how often.
        rest: anything else.
    """
    return where, count, knobs, rest


def test_the_fields_become_keyword_flags_with_their_defaults_and_help():
    params = inspect.signature(command).parameters
    assert list(params) == ["where", "count", "knobs", "size", "name", "extra", "loud", "rest"]
    assert params["knobs"].default is False and params["size"].default == 3 and params["loud"].default is False
    assert params["size"].kind is inspect.Parameter.KEYWORD_ONLY
    doc = command.__doc__
    assert "        knobs: turn the knobs on.\n        size: how many.\n" in doc
    assert doc.index("count: how often.") < doc.index("knobs:") < doc.index("loud: say it twice.") < doc.index("rest:")


def test_the_command_gets_the_dataclass_built_from_the_flags_given_or_none_without_its_switch():
    assert command("here", 2, True, size="5", extra="-a 'b c'", other=1) == (
        "here", 2, Knobs(size=5, extra=("-a", "b c")), {"other": 1})
    assert command("here", size=0) == ("here", 1, None, {})  # switched off: its flags are not looked at


@pytest.mark.parametrize(("flags", "message"), [
    ({"size": "many"}, "--size 'many': expected an integer"),
    ({"size": 0}, "--size 0: expected 1 or more"),
    ({"name": ("a", "b")}, "--name ('a', 'b'): expected one value (quote text with commas)"),
    ({"loud": "3"}, "--loud takes no value (got '3'): write --loud alone"),
    ({"sise": 3}, "unknown flag --sise; did you mean --size? (see --help)"),
])
def test_a_bad_value_or_an_unknown_flag_is_one_line_naming_the_flag(flags, message):
    with pytest.raises(ToolError) as e:
        options.build(Knobs, flags)
    assert str(e.value) == message


def test_parse_flags_reads_every_spelling_of_key_value():
    assert options.parse_flags(["--size=2", "name=x", "--extra", "-a", "--loud-ly=1"]) == {
        "size": "2", "name": "x", "extra": "-a", "loud_ly": "1"}
    with pytest.raises(ToolError, match="^'size': give options as --key=value"):
        options.parse_flags(["size"])


def test_check_args_knows_the_generated_flags_and_their_switches():
    assert cli.check_args("prog", command, ["w", "--knobs", "--size", "4", "--no-loud"]) == [
        "w", "--knobs=True", "--size", "4", "--loud=False"]


@pytest.mark.parametrize("argv", [["tools.collect", "collect"], ["tools.evaluate", "run"]])
def test_help_of_collect_and_evaluate_lists_every_slurm_option_with_its_help(argv):
    proc = run_tool(PYTHON, "-m", *argv, "--help")
    text = proc.stdout + proc.stderr  # fire prints help on stderr when it is not a terminal
    assert proc.returncode == 0, text
    docs = options.field_docs(SlurmOptions)
    for f in options.flag_fields(SlurmOptions, exclude=("servers_per_gpu",)):
        assert f"--{f.name}=" in text and docs[f.name][:40] in " ".join(text.split()), f.name
