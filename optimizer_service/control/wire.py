"""The control messages (:mod:`optimizer_service.control.messages`) on the wire: as
``p2.v1`` protos and back; the plan itself goes through
:mod:`optimizer_service.plan.proto_codec`. Used by the service and the
enforcer's link alike, so both planes speak the same bytes."""

from __future__ import annotations

from optimizer_service.control.messages import Abort, Ack, Commit, Prepare, Vote
from optimizer_service.plan.proto_codec import plan_from_proto, plan_to_proto
from p2.v1 import enforcer_link_pb2 as link


def to_service_message(message: Prepare | Commit | Abort) -> link.ServiceMessage:
    if isinstance(message, Prepare):
        return link.ServiceMessage(prepare=link.Prepare(
            job_id=message.job, version=message.version, epoch=message.epoch,
            switch_iteration=message.switch_iteration, plan=plan_to_proto(message.plan)))
    if isinstance(message, Commit):
        return link.ServiceMessage(commit=link.Commit(job_id=message.job, version=message.version,
                                                      epoch=message.epoch, switch_iteration=message.switch_iteration))
    return link.ServiceMessage(abort=link.Abort(job_id=message.job, version=message.version, epoch=message.epoch,
                                                reason=message.reason))


def from_service_message(message: link.ServiceMessage) -> Prepare | Commit | Abort | None:
    """The decision message a ServiceMessage carries (None for the others); a
    Prepare whose plan is malformed raises PlanError."""
    body = message.WhichOneof("body")
    if body == "prepare":
        m = message.prepare
        return Prepare(job=m.job_id, version=m.version, epoch=m.epoch, switch_iteration=m.switch_iteration,
                       plan=plan_from_proto(m.plan))
    if body == "commit":
        m = message.commit
        return Commit(job=m.job_id, version=m.version, epoch=m.epoch, switch_iteration=m.switch_iteration)
    if body == "abort":
        m = message.abort
        return Abort(job=m.job_id, version=m.version, epoch=m.epoch, reason=m.reason)
    return None


def vote_to_proto(vote: Vote) -> link.RankMessage:
    return link.RankMessage(vote=link.Vote(job_id=vote.job, version=vote.version, epoch=vote.epoch, yes=vote.yes,
                                           reason=vote.reason))


def ack_to_proto(ack: Ack) -> link.RankMessage:
    return link.RankMessage(ack=link.Ack(job_id=ack.job, version=ack.version, epoch=ack.epoch,
                                         committed=ack.committed, have_plan=ack.have_plan))


def vote_from_proto(message: link.Vote, rank: int) -> Vote:
    return Vote(job=message.job_id, rank=rank, version=message.version, epoch=message.epoch, yes=message.yes,
                reason=message.reason)


def ack_from_proto(message: link.Ack, rank: int) -> Ack:
    return Ack(job=message.job_id, rank=rank, version=message.version, epoch=message.epoch,
               committed=message.committed, have_plan=message.have_plan)
