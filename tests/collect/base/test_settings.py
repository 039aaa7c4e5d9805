"""Collection settings from --key=value flags (tools.collect.base.config.CollectSettings.from_flags): a switch
takes a bool or the words true/false; anything else is one line (bool("false") would have been True)."""

from __future__ import annotations

import pytest

from tools.collect.base.config import CollectSettings, setting_switches
from tools.core.errors import ToolError


@pytest.mark.parametrize(("value", "expected"), [(False, False), (True, True), ("false", False), ("True", True)])
def test_a_switch_takes_a_bool_or_the_words_true_and_false(value, expected):
    assert CollectSettings.from_flags({"record": value}).record is expected
    assert CollectSettings.from_flags({"sensor-noise": value}).sensor_noise is expected


@pytest.mark.parametrize("value", ["no", "0", "off", ""])
def test_a_switch_given_another_value_is_one_line_naming_it(value):
    with pytest.raises(ToolError, match=rf"--record={value!r}: a switch; write --record or --no-record"):
        CollectSettings.from_flags({"record": value})


def test_the_switches_are_the_bool_settings():
    assert {"record", "sensor_noise", "stop_on_infraction"} <= setting_switches()
    assert "vehicles" not in setting_switches()
