"""The coordinator's durable log: replay reads back what the coordinator
writes, and a log that breaks the rules is refused in one line."""

from __future__ import annotations

import json

import pytest

from optimizer_service.control.messages import Ack, Commit, Prepare, Vote
from optimizer_service.control.records import decision_record, prepare_record, recover_record, replay
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan import Plan


def test_records_are_json_and_replay_summarises_them():
    log = [prepare_record(1, 1, 4, 0.5), decision_record(1, "commit", "", 4, 1, 1.0),
           prepare_record(3, 1, 8, 2.0), decision_record(3, "abort", "rank 0 voted no: x", 8, 1, 2.5),
           recover_record(2, 3.0), prepare_record(4, 2, 12, 4.0)]
    assert json.loads(json.dumps(log)) == log
    seen = replay(log)
    assert seen.prepared == {1: 4, 3: 8, 4: 12}
    assert seen.decisions == {1: ("commit", ""), 3: ("abort", "rank 0 voted no: x")}
    assert (seen.committed, seen.undecided, seen.last, seen.max_epoch) == (1, (4,), 4, 2)


def test_an_empty_log_means_nothing_happened():
    seen = replay([])
    assert (seen.committed, seen.undecided, seen.last, seen.max_epoch) == (0, (), 0, 0)


@pytest.mark.parametrize("log,expect", [
    ([decision_record(1, "commit", "", 4, 1, 0.0)], "record 0: decision for version 1, which was never prepared"),
    ([prepare_record(1, 1, 4, 0.0), decision_record(1, "commit", "", 4, 1, 0.0),
      decision_record(1, "abort", "x", 4, 1, 0.0)], "record 2: a second decision for version 1 (commit, then abort)"),
    ([prepare_record(2, 1, 4, 0.0), prepare_record(2, 1, 4, 0.0)], "version 2 prepared after version 2"),
    ([prepare_record(1, 2, 4, 0.0), prepare_record(2, 1, 4, 0.0)], "record 1: epoch 1 after epoch 2"),
    ([recover_record(2, 0.0), recover_record(2, 1.0)], "recovery epoch 2 is not above 2"),
    ([{"type": "vote", "epoch": 1}], "unknown record type 'vote'"),
    ([{"type": "prepare", "epoch": True, "version": 1}], "'epoch' must be int, got True"),
    ([prepare_record(1, 1, 4, 0.0) | {"decision": "maybe", "type": "decision"}], "decision must be 'commit' or"),
    (["prepare"], "expected a JSON object"),
])
def test_a_broken_log_is_refused_in_one_line(log, expect):
    with pytest.raises(InvalidInputError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        replay(log)


def test_messages_have_a_one_line_text_form():
    body = Plan(version=3, world_size=2, channels={0: None}, ops=())
    assert str(Prepare("j", 3, 1, 12, body)) == "Prepare(j v3 e1 switch@12)"
    assert str(Commit("j", 3, 1, 12)) == "Commit(j v3 e1 switch@12)"
    assert str(Vote("j", 2, 3, 1, False, "world size")) == "Vote(j r2 v3 e1 no: world size)"
    assert str(Vote("j", 2, 3, 1, True)) == "Vote(j r2 v3 e1 yes)"
    assert str(Ack("j", 2, 3, 1, True, have_plan=False)) == "Ack(j r2 v3 e1 commit without the plan)"
    assert str(Ack("j", 2, 3, 1, False)) == "Ack(j r2 v3 e1 abort)"
