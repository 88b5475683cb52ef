"""P² (Xie et al., MLSys 2022): parallelism placement and reduction synthesis (pure).

* :mod:`~optimizer_service.p2.placement` — parallelism matrices (§3.1);
* :mod:`~optimizer_service.p2.program` — the reduction language (§3.3);
* :mod:`~optimizer_service.p2.semantics` — state-matrix semantics, Figure 8;
* :mod:`~optimizer_service.p2.hierarchy` — synthesis hierarchies (§2.5, §3.4);
* :mod:`~optimizer_service.p2.synthesis` — syntax-guided enumeration (§3.5);
* :mod:`~optimizer_service.p2.lowering` — programs to device groups (Figure 6);
* :mod:`~optimizer_service.p2.explain` and :mod:`~optimizer_service.p2.planner`
  — one program explained step by step; every placement's programs ranked
  with the cost model (§5).

May import: ``hardware``, ``plan`` (and ``errors``, ``units``).
"""
