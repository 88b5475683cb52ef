"""Syndicate (Mahajan et al., NSDI 2023): joint scheduling and execution planning (pure).

* :mod:`~optimizer_service.syndicate.transforms` — segmentation and splining
  (§4.2, App. A.1); :mod:`~optimizer_service.syndicate.options` — each
  comm-op's execution-plan options, P² programs among them;
* :mod:`~optimizer_service.syndicate.motif_cost` — motifs priced on a topology;
* :mod:`~optimizer_service.syndicate.dag`, ``workloads``, ``trace_dag`` —
  training DAGs: built-in models and recorded jobs (§4.3);
* :mod:`~optimizer_service.syndicate.scheduler` (and its C++ twin
  :mod:`~optimizer_service.syndicate.native_scheduler`) — optSched, the
  critical-path list scheduler (Pseudocode 1);
* :mod:`~optimizer_service.syndicate.problem`,
  :mod:`~optimizer_service.syndicate.mcmc`,
  :mod:`~optimizer_service.syndicate.baselines` — the search problem, the MCMC
  search and the systems of §6.4;
* :mod:`~optimizer_service.syndicate.plan_export` and
  :mod:`~optimizer_service.syndicate.rule_plan` — plans in the enforcer's
  format, searched or by fixed rules;
* :mod:`~optimizer_service.syndicate.facade` — :func:`plan_job`, the one
  entry point the CLI, the benchmarks and the service use.

May import: ``p2``, ``hardware``, ``plan`` (and ``errors``, ``units``).
"""
