"""Reading a stored plan for the dashboard: parse it, view it, compare it — the work whose cost
grows with what a client stored (a plan may have 64 MiB of JSON and ~10^5 ops).

These functions are what :mod:`.offload` runs away from the event loop: on its threads for a
small plan, in a child process of their own for a large one (:data:`ISOLATE_BYTES`). A thread is
not enough for a large plan: ``json.loads`` of 18 MB holds the interpreter's lock for ~0.8 s and
the garbage collector's passes over the parsed plan for more, so a thread would still stall the
loop that answers gRPC health (measured 1.8 s). This module imports only the plan's own modules,
so a child starts in a fraction of a second. Answers list at most :data:`MAX_OPS_LISTED` ops.
"""

from __future__ import annotations

from optimizer_service.plan import Plan
from optimizer_service.service.plan_view import plan_diff, plan_view

#: Ops one plan or diff answer lists (the rest are counted): listing 10^5 ops made a 30 MB answer.
MAX_OPS_LISTED = 2_000
#: Plans longer than this (characters of JSON) are read in a child process rather than on a thread.
ISOLATE_BYTES = 1 << 20


def plan_detail(job_id: str, record: dict, plan_json: str, submitted_unix: float, topology: str) -> dict:
    """The plan page's data: the plan's record (``views.plan_state``) and its bounded view."""
    view = plan_view(Plan.parse(plan_json), topology)
    view["ops"] = view["ops"][:MAX_OPS_LISTED]
    view["ops_listed"] = len(view["ops"])
    return {"job_id": job_id, "record": record, "plan": view, "submitted_unix": submitted_unix}


def diff(old_json: str | None, new_json: str) -> dict:
    """The diff, listing at most :data:`MAX_OPS_LISTED` ops (the changed ones first; ``counts`` has them all)."""
    result = plan_diff(None if old_json is None else Plan.parse(old_json), Plan.parse(new_json))
    rows = [r for r in result["ops"] if r["status"] != "same"] + [r for r in result["ops"] if r["status"] == "same"]
    result["ops"] = sorted(rows[:MAX_OPS_LISTED], key=lambda r: (r["seq"], r["group"]))
    result["ops_listed"] = len(result["ops"])
    return result
