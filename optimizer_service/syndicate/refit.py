"""A topology re-fitted to what the job measured (pure).

The live loop plans from the calibrated topology, but what a channel and the
host deliver while the job trains differs. :mod:`.telemetry_fit` fits, per
channel and for the host, a fixed cost per motif, a latency per round and a
rate to the job's own trace window; :func:`refit` gives each channel's own
links between nodes, and the links inside a node, the fitted rate and latency
(the fixed costs go to the cost model:
:meth:`~optimizer_service.syndicate.telemetry_fit.TelemetryFit.motif_cost`).

**Where the time went** (issue 32, item 3), measured on the emulated 2 × 4
cluster, two 200 Mbit/s NICs per node (25 MB/s), lossless fabric, the
DLRM-like job (``examples/train_dlrm.py``, 40 steps, traces of every rank),
8 ranks on a 2-core host that other work loaded too (load average 7–23);
"model" is the calibrated model's time for the same piece:

* *Small-message latency, CPU wake-ups.* The loss all-reduce (4 bytes over 8
  ranks, a ring of 14 rounds) took 25 ms, model 1.4 ms; a 2-rank all-reduce of
  4 bytes across the nodes 12 ms, model 0.2 ms. Each round waits for a gloo
  thread to get a core among 8 ranks: fitted on passthrough, channel 0's round
  takes 0.9 ms (9× the calibrated 0.1 ms) and every motif costs 5.1 ms more
  (issuing on the inner backend, the hand-off to its thread); the NIC's rate
  itself fits at its shaped 25 MB/s.
* *Ranks sharing two cores (per motif, per byte reduced).* Inside a node, a
  plan's reduce-scatter of 526 KB over 4 ranks took 8.8–10 ms against 0.69 ms
  modelled (13–15×), a 66 KB reduce of 2 ranks 0.55–1.0 ms against 0.05 ms
  (12–22×), a 4-byte all-gather 8–11 ms: fitted, the host's round is 0.70 ms
  (35× the calibrated 20 µs) and its rate 0.57 GB/s, 4.4× under the 2.5 GB/s
  a quiet copy in the node measured. Large motifs across the NICs are close to
  the model (a 501 KB reduce-scatter or all-gather over 8 ranks: 20–25 ms,
  model 18.2 ms): the NIC is the bottleneck there and CPU contention shows as
  the fixed cost.
* *Overlap in passthrough.* gloo runs two of a group's ops at once: DDP's
  three bucket all-reduces and the backward all-to-all took 233 ms from the
  first issue to the last completion, 163 ms modelled as one after another;
  read op by op they look 3.4× and 0.4× their model. A sample is therefore
  their busy period (:func:`~.telemetry_fit.passthrough_samples`).
* *Skewed ranks.* Ranks start a collective up to 100 ms apart (issue skew of
  the slowest rank per op, passthrough): a rank's own motif time counts its
  wait for the last one, which the DAG's compute (its slowest rank's) already
  has. Samples run from the last rank's start to the last rank's end.
* *One traced iteration.* The traced compute per iteration (the slowest rank
  of every gap) ranged 248–322 ms over ten passthrough iterations (and
  114–197 ms under a plan); the fitted model's prediction from one iteration
  spread over 13–20 % of its median across ten iterations, which decided
  whether a first plan looked worth committing. The search reads the
  window's median (:mod:`~optimizer_service.syndicate.trace_window`).
* *TCP after idle* could not be told apart from the per-round latency here:
  in this job every NIC carries traffic every few milliseconds.

Predicted against measured (median of steps 5–40 on rank 0), the same
traces: passthrough calibrated −15 %, fitted with the window's median
+4 % (all 37 iterations) / +8 % (the service's window of 9); the plan a
calibrated search found, calibrated −38 %, fitted −2 % / −3 %; the plan the
fitted search found, calibrated −22 %, fitted −3 %. And the fitted first
search found the better plan: measured in two interleaved rounds,
passthrough 405 / 395 ms, the calibrated search's plan 298 / 331 ms
(1.36× / 1.19×), the fitted search's 244 / 276 ms (1.66× / 1.43×).

In the live loop (``p2 demo --steps 200``, same cluster, the second NIC
slowed 4× at step 65): passthrough predicted −4 %, the first plan +10 %
(1.61× over passthrough); the replanned plan −18 % (383 ms measured, 315
predicted; 1.16× over passthrough, 1.88× over gloo on both NICs).

What remains: the fit is a straight line per channel over motif shapes the
model's form does not all share (an all-to-all whose early ranks push their
blocks before the last rank starts measures shorter than its bytes; a
broadcast's root returns once the data is buffered), so it is right on
average over the plan's motifs, not for each. The slowed NIC is the worst
case: its token bucket refills while the NIC idles, so a motif of up to its
burst (80 KB) crosses at line rate — a 133 KB all-reduce of 2-rank pairs
took 6.5 ms where 6.25 MB/s needs 21 ms — while large ones queue behind the
bucket (a 10 ms-at-25 MB/s all-to-all took 35 ms, 3.3×): the line through
both fits the channel at 2.5× slower, not 4×, and the replanned plan is
under-predicted. A channel the window does not use keeps an earlier
window's values or its calibration, and what other work on the host does
between windows moves every measured time (one plan measured 326–397 ms in
one run).

Replaced here: the re-fit of issue 16, each channel's measured-over-predicted
motif seconds relative to channel 0's, with motifs inside a node left out. It
could not price the fixed costs above, so the first search (no motif records
yet) planned from the calibrated microseconds.
"""

from __future__ import annotations

from dataclasses import replace

from optimizer_service.hardware.topology import Topology
from optimizer_service.syndicate.telemetry_fit import Line, TelemetryFit, host_links, nic_links


def refit(topology: Topology, fit: TelemetryFit) -> Topology:
    """``topology`` with each channel's own links between nodes, and the links inside a
    node, at the rate and latency ``fit`` measured (their fixed costs go to the cost
    model: :meth:`TelemetryFit.motif_cost`)."""
    changed: dict[str, Line] = {}
    for channel, line in fit.channels.items():
        changed.update({link.name: line for link in nic_links(topology, channel)})
    changed.update({link.name: fit.host for link in host_links(topology)})
    changed = {name: line for name, line in changed.items() if line.scale != 1.0 or line.latency_scale != 1.0}
    if not changed:
        return topology
    links = tuple(replace(link, bandwidth=link.bandwidth / changed[link.name].scale,
                          latency=link.latency * changed[link.name].latency_scale) if link.name in changed else link
                  for link in topology.links)
    note = ", ".join(f"{name} rate x{1 / line.scale:.2f} latency x{line.latency_scale:.3g}"
                     for name, line in sorted(changed.items()))
    return replace(topology, links=links, description=f"{topology.description} (re-fitted: {note})")
