"""The enforcer's settings: read from a mapping once, one line per bad value."""

from __future__ import annotations

import pytest

from enforcer.settings import DEFAULT_TRACE_LIMIT, EnforcerSettings
from optimizer_service.plan import InvalidInputError


def test_defaults_when_nothing_is_set():
    settings = EnforcerSettings.from_env({})
    assert settings == EnforcerSettings()
    assert settings.trace_limit == DEFAULT_TRACE_LIMIT and settings.count_bypass and settings.channel_ifnames == ()


def test_every_variable_is_read():
    settings = EnforcerSettings.from_env({
        "P2_INNER_BACKEND": "cpu:gloo", "P2_TRACE_FILE": "/tmp/t{rank}.json", "P2_TRACE_LIMIT": "17",
        "P2_PLAN_FILE": "plan.json", "P2_COUNT_BYPASS": "0", "P2_CHANNEL_IFNAMES": "nic0,nic1"})
    assert settings == EnforcerSettings(inner_backend="cpu:gloo", trace_file="/tmp/t{rank}.json", trace_limit=17,
                                        plan_file="plan.json", count_bypass=False, channel_ifnames=("nic0", "nic1"))


@pytest.mark.parametrize("name,value", [("P2_TRACE_LIMIT", "many"), ("P2_TRACE_LIMIT", "0"),
                                        ("P2_COUNT_BYPASS", "yes")])
def test_a_bad_value_is_one_line_naming_the_variable(name, value):
    with pytest.raises(InvalidInputError) as error:
        EnforcerSettings.from_env({name: value})
    assert name in str(error.value) and "\n" not in str(error.value)
