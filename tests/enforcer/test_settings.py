"""The enforcer's settings: read from a mapping once, one line per bad value."""

from __future__ import annotations

import pytest

from enforcer.settings import DEFAULT_TRACE_LIMIT, EnforcerSettings, default_job
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


def test_the_service_variables_are_read():
    settings = EnforcerSettings.from_env({
        "P2_SERVICE": "svc:50051", "P2_TOKEN": " t0k ", "P2_TOKEN_FILE": "/run/token", "P2_TLS_CA": "ca.pem",
        "P2_TLS_CERT": "rank.pem", "P2_TLS_KEY": "rank.key", "P2_JOB": "job-7", "P2_SWITCH_EVERY": "25",
        "P2_PREPARE_TIMEOUT": "2.5", "P2_TELEMETRY_EVERY": "1"})
    assert settings == EnforcerSettings(service="svc:50051", token="t0k", token_file="/run/token", tls_ca="ca.pem",
                                        tls_cert="rank.pem", tls_key="rank.key", job="job-7", switch_every=25,
                                        prepare_timeout=2.5, telemetry_every=1)
    assert "t0k" not in repr(settings)             # the token never reaches a log line


def test_without_a_service_nothing_is_linked():
    settings = EnforcerSettings.from_env({"P2_SWITCH_EVERY": "3"})
    assert settings.service is None and settings.switch_every == 3
    assert (EnforcerSettings().switch_every, EnforcerSettings().prepare_timeout) == (10, 30.0)
    assert EnforcerSettings.from_env({}).telemetry_every == 4


@pytest.mark.parametrize("name,value", [("P2_SWITCH_EVERY", "0"), ("P2_SWITCH_EVERY", "often"),
                                        ("P2_PREPARE_TIMEOUT", "-1"), ("P2_PREPARE_TIMEOUT", "nan"),
                                        ("P2_PREPARE_TIMEOUT", "soon"), ("P2_SERVICE", "no-port"),
                                        ("P2_TELEMETRY_EVERY", "0"), ("P2_TELEMETRY_EVERY", "33"),
                                        ("P2_TELEMETRY_EVERY", "some")])
def test_a_bad_service_value_is_one_line_naming_the_variable(name, value):
    with pytest.raises(InvalidInputError) as error:
        EnforcerSettings.from_env({name: value})
    assert name in str(error.value) and "\n" not in str(error.value)


def test_a_client_certificate_needs_its_key():
    with pytest.raises(InvalidInputError, match="P2_TLS_CERT and P2_TLS_KEY"):
        EnforcerSettings.from_env({"P2_SERVICE": "svc:1", "P2_TLS_CERT": "rank.pem"})


@pytest.mark.parametrize("environ,store,expected", [
    ({"TORCHELASTIC_RUN_ID": "abc123", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}, "h:1", "abc123"),
    ({"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}, "h:1", "node0:29500"),
    ({"MASTER_ADDR": "node0"}, "127.0.0.1:4711", "127.0.0.1:4711"),
    ({}, None, None),
])
def test_the_job_id_defaults_to_the_run_id_then_the_store_address(environ, store, expected):
    assert default_job(environ, store) == expected
