"""A pipeline-parallel runtime with resharding at every stage boundary (Zhuang et al., §4).

* :mod:`.runtime` — runs a schedule; :mod:`.check` — what it refuses before building;
* :mod:`.stage` — one stage's compute; :mod:`.records` — what one iteration did.

May import :mod:`enforcer.reshard` and :mod:`enforcer.comm`.
"""
