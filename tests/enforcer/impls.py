"""The p2enforcer implementations tests run against: the C++ backend when it is built, and the Python group.

Tests that exercise both take ``impl`` from :data:`IMPLS` and pass
``P2_ENFORCER_IMPL`` to the ranks they start; where the C++ extension was not
built (no compiler), its cases are skipped with the reason."""

import pytest
from enforcer.group import native

CPP = pytest.param("cpp", marks=pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "built"))
IMPLS = [CPP, "python"]


def impl_env(impl: str) -> dict[str, str]:
    """The environment that selects ``impl`` in a rank."""
    return {"P2_ENFORCER_IMPL": impl}
