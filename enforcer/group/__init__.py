"""The c10d process group ``p2enforcer`` in its two implementations.

* :mod:`.core` — what both share: identity, inner backends, the installed plan runtime;
* :mod:`.python` — the Python group (``P2_ENFORCER_IMPL=python``), every c10d op traced and passed
  through or submitted to the plan; :mod:`.works` — the Work objects it hands back;
* :mod:`.native` — the C++ group (``enforcer._native``), :mod:`.native_trace` — its trace;
* :mod:`.bypass` — counts ops that reach a group's inner backend without the enforcer.

May import :mod:`enforcer.runtime` (a group holds a plan runtime), :mod:`enforcer.comm` and the
modules on top (settings, state, groups, trace); never :mod:`enforcer.link`.
"""
