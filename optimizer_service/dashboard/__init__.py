"""The operators' dashboard (shell): a FastAPI app over the service core.

``p2 serve`` serves it on its HTTP port (``--http``, default 127.0.0.1:8080)
in the same process and event loop as the gRPC server:

* ``/`` the jobs, ``/jobs/{job}`` one job live (iteration-time chart with plan
  switches and replanning events, ranks, dispatcher waits, plans and passthrough
  with predicted and measured times beside the lower bound on the iteration
  time, the model the latest search fitted to the job's telemetry with each fitted
  value's effect, the event log, the token-guarded controls), ``/jobs/{job}/plans/{v}`` a plan (motifs
  and predicted costs, predicted vs measured Gantt, 2PC per rank, the diff),
  ``/topology``, ``/explore`` (the P² explorer);
* ``/api/...`` the JSON behind every page (OpenAPI at ``/docs``);
* ``/metrics`` Prometheus, ``/healthz`` liveness.

Pages are rendered on the server (:mod:`.pages`, readable without
JavaScript) from the same dicts the API returns (:mod:`.views`);
``static/dashboard.js`` keeps them live by polling. May import: ``service``,
``plan``, ``errors``, ``metrics`` (tests/test_layering.py).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DashboardConfig", "create_app"]


def __getattr__(name: str) -> Any:
    """``create_app`` and ``DashboardConfig`` on first use: the child processes that read large
    plans (:mod:`.plan_reading`) import this package and need none of FastAPI."""
    if name in __all__:
        from optimizer_service.dashboard import app
        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
