"""What ``p2 jobs show`` and the dashboard's job page show of a job's latest search.

A job's latest search is its stored ``searched`` decision
(:attr:`optimizer_service.service.jobs.Job.latest_search`; GetJob's
``latest_search``). Of it they show (issue 32, items 3 and 6):

* ``fit``: the model the search fitted to the job's telemetry, as the search
  stored it (:attr:`optimizer_service.service.planning.SearchOutcome.fit`, from
  :meth:`optimizer_service.syndicate.telemetry_fit.TelemetryFit.to_dict`): per
  channel and for the host the fixed cost per motif, the latency of one round
  and the rate, beside their calibrated values, the samples and how each was
  set; the chosen plan's ``predicted_seconds`` and, per fitted parameter, its
  ``effects``: the prediction with that parameter back at its calibrated value;
* ``fit.other_reading``: on a cluster state's first search, the second reading
  of the same window (every link at its calibrated rate, all of the excess
  on each motif) that the search chose by together with the fit, the worse of
  the two per motif (:func:`optimizer_service.syndicate.live_search.live_search`),
  and the chosen plan's time under the worse one; None on later searches;
* ``bound``: the lower bound on the job's iteration time the search computed
  (:meth:`optimizer_service.syndicate.bound.Bound.to_dict`);
* ``search_version``: the plan version the search made.

Each is None before the job's first search.
"""

from __future__ import annotations

from collections.abc import Mapping


def latest_search(decision: Mapping | None) -> dict:
    """``fit``, ``bound`` and ``search_version`` of a stored ``searched`` decision (module docstring)."""
    if not decision:
        return {"fit": None, "bound": None, "search_version": None}
    search = decision.get("search") or {}
    return {"fit": search.get("fit") or None, "bound": search.get("bound"), "search_version": decision.get("version")}


def fit_rows(fit: Mapping) -> list[tuple[str, dict]]:
    """The fitted model's lines as ``(where, entry)``: every channel in channel order, then the host."""
    channels = sorted(fit.get("channels", {}).items(), key=lambda item: int(item[0]))
    return [(f"channel {c}", entry) for c, entry in channels] + ([("host", fit["host"])] if "host" in fit else [])


def other_reading(fit: Mapping) -> tuple[list[tuple[str, float]], float | None] | None:
    """The second reading of a first search's window (module docstring) as its fixed cost
    per motif ``(where, seconds)`` in :func:`fit_rows`' order and the chosen plan's time
    under the worse of the two readings; None where the search chose by the fit alone."""
    other = fit.get("other_reading")
    if not other:
        return None
    rows = [(where, entry["motif_seconds"]) for where, entry in fit_rows(other)
            if isinstance(entry.get("motif_seconds"), (int, float))]
    chosen = other.get("chosen_seconds")
    return rows, chosen if isinstance(chosen, (int, float)) else None
