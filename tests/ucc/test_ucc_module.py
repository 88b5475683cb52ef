"""``enforcer.comm.ucc`` without ranks: what it says when the extension is missing (so the enforcer
refuses ``ucc`` in one line, with the build command), and its check of a channel's interface.
These run whether or not the extension is built."""

from __future__ import annotations

from datetime import timedelta

import pytest
from enforcer.comm import inner, ucc
from optimizer_service.errors import InvalidInputError


@pytest.fixture
def missing_extension(monkeypatch):
    monkeypatch.setattr(ucc, "_loaded", ["the UCC extension enforcer._ucc is not built (test); build it with X"])


def test_without_the_extension_ucc_is_refused_in_one_line(missing_extension):
    assert not ucc.available()
    assert ucc.why_unavailable().startswith("the UCC extension enforcer._ucc is not built")
    with pytest.raises(ucc.UccUnavailableError, match="not built"):
        ucc.create(None, 0, 1, timedelta(seconds=1))
    with pytest.raises(inner.InnerBackendError, match="P2_INNER_BACKEND: the UCC extension enforcer._ucc is not"):
        inner.parse_inner("ucc")
    assert isinstance(ucc.UccUnavailableError("x"), InvalidInputError)


def test_the_reason_names_the_build_command():
    if ucc.available():
        assert ucc.why_unavailable() == ""
    else:
        assert ucc.BUILD_HINT in ucc.why_unavailable()


def test_an_interface_must_be_where_ucx_looks_for_it(tmp_path):
    ucc.check_interface("lo")                                     # in /sys/class/net: fine
    with pytest.raises(InvalidInputError, match="no network interface 'nosuchnic0' here"):
        ucc.check_interface("nosuchnic0")
    # present in the namespace (the kernel knows lo) but not in the sysfs UCX reads
    with pytest.raises(InvalidInputError, match="is in this process's network namespace but not in"):
        ucc.check_interface("lo", sysfs=tmp_path)
