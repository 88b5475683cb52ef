"""The control plane's decisions as pure functions ``(state, event, now) ->
(state, actions)``: the two-phase commit of plans to every rank of a job
(Syndicate §5, "a two-phase commit (2PC) protocol using RPCs so that the same
joint optimizer plan is safely committed ... to all the enforcers").

* :mod:`.messages` — Prepare, Commit, Abort, Vote, Ack as values (the proto mirrors them);
* :mod:`.coordinator` — the service side: :func:`~.coordinator.step` and
  :func:`~.coordinator.recover` from the durable log (:mod:`.records`);
* :mod:`.participant` — one enforcer rank's side;
* :mod:`.switch` — the in-band check at switch boundaries that makes every
  rank take the same plan at the same iteration;
* :mod:`.wire` — the messages as ``p2.v1`` protos and back, shared by the
  service and the enforcer (translation only, no decisions);
* :mod:`.policy` — the replanning policy's step (when to search, commit, roll back), with
  :mod:`.policy_events`, :mod:`.policy_config`, :mod:`.policy_state`, :mod:`.triggers` and
  :mod:`.hysteresis`.

No sockets, sleeps, threads or environment: the gRPC drivers in
``optimizer_service/service/`` and the enforcer execute the actions. The
protocol and its safety argument: ``PROTOCOL.md`` in this folder.

May import: ``plan`` (and ``errors``, ``units``); ``wire`` also the generated contract ``p2.v1``.
"""

from optimizer_service.control import coordinator, participant
from optimizer_service.control.coordinator import Coordinator, Timing, Txn, recover
from optimizer_service.control.messages import Abort, Ack, Commit, Prepare, Vote
from optimizer_service.control.participant import Participant, Prepared
from optimizer_service.control.switch import SwitchError, agree, is_check, proposal

__all__ = [
    "Abort", "Ack", "Commit", "Coordinator", "Participant", "Prepare", "Prepared", "SwitchError", "Timing", "Txn",
    "Vote", "agree", "coordinator", "is_check", "participant", "proposal", "recover",
]
