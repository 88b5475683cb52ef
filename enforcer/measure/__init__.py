"""Jobs that time programs on a running cluster, one process per rank.

* :mod:`.programs` — ``python -m enforcer.measure.programs SPEC OUT`` (``p2 bench reduce``, ``p2 calibrate``);
* :mod:`.reshard` — ``python -m enforcer.measure.reshard SPEC OUT`` (``p2 reshard --measure``).

May import :mod:`enforcer.programs`, :mod:`enforcer.reshard` and :mod:`enforcer.comm`.
"""
