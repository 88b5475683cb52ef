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
* ``fit.other_reading``, ``fit.per_motif_reading`` and
  ``fit.slowest_round_reading``: on a cluster state's first search, the other
  readings of the same window that the search chose by together with the fit,
  the worst of the four per motif
  (:func:`optimizer_service.syndicate.live_search.live_search`): every link at
  its calibrated rate, the excess per round and per motif; every link at its
  calibrated rate and round, all the excess per motif; and every link at its
  calibrated rate and fixed cost, every round at the slowest the window
  measured. Each carries the chosen plan's time under the worst reading; None
  on later searches;
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


#: The other readings a first search chose by (module docstring): their field in ``fit``, how they read,
#: and the value each is shown by (its entries' field and what it is).
READINGS = (("other_reading", "every link at its calibrated rate", "motif_seconds", "per motif"),
            ("per_motif_reading", "every link at its calibrated rate and round", "motif_seconds", "per motif"),
            ("slowest_round_reading", "every link at its calibrated rate and fixed cost", "round_seconds",
             "per round"))


def other_readings(fit: Mapping) -> tuple[list[tuple[str, list[tuple[str, float]], str]], float | None] | None:
    """The other readings of a first search's window (module docstring): per reading its
    description, its value ``(where, seconds)`` in :func:`fit_rows`' order (the fixed cost per
    motif, or the time of a round) and what that value is ("per motif", "per round"), and the
    chosen plan's time under the worst reading; None where the search chose by the fit alone."""
    found, chosen = [], None
    for field, how, value, unit in READINGS:
        reading = fit.get(field)
        if not reading:
            continue
        found.append((how, [(where, entry[value]) for where, entry in fit_rows(reading)
                            if isinstance(entry.get(value), (int, float))], unit))
        if isinstance(reading.get("chosen_seconds"), (int, float)):
            chosen = reading["chosen_seconds"]
    return (found, chosen) if found else None
