"""The replanning policy's triggers as values (:mod:`optimizer_service.control.triggers`):
their words (which actions, stored job events and the dashboard carry) and their texts."""

from __future__ import annotations

import ast
import inspect

import pytest

from optimizer_service.control import policy_config
from optimizer_service.control.triggers import Trigger


def test_every_trigger_reads_back_from_its_word():
    assert {t.value for t in Trigger} == {"cluster", "first", "slow", "waits", "bound", "operator", "restore", "trial"}
    for trigger in Trigger:
        assert Trigger(str(trigger)) is trigger


def test_the_reasons_read_as_before():
    assert Trigger.FIRST.reason(passthrough=20, median=0.2) == (
        "first plan after 20 passthrough iterations (measured 0.200 s)")
    assert Trigger.CLUSTER.reason(due="cluster state changed from A to B", running="v1", median=0.25) == (
        "cluster state changed from A to B; no known plan for it beats the running v1 (0.250 s)")
    assert Trigger.SLOW.reason(median=0.21, over="20.0 %", predicted=0.175, running="v1", streak=10) == (
        "measured 0.210 s is 20.0 % over the predicted 0.175 s of v1 for 10 iterations")
    assert Trigger.WAITS.reason(wait="6.0 %", level="5.0 %", streak=10) == (
        "dispatcher waits are 6.0 % of the iteration time (over 5.0 %) for 10 iterations")
    assert Trigger.OPERATOR.reason(reason="") == "an operator asked for a plan"
    assert Trigger.BOUND.reason(running="v2", median=0.2, over="66.7 %", bound=0.12, cluster="A") == (
        "v2 measures 0.200 s, 66.7 % over the lower bound 0.120 s of cluster state A: a plan can gain that much; "
        "searching again with what the tried plan measured")
    assert Trigger.RESTORE.reason(version="v2", seconds=0.2, cluster="B", gain="20.0 %", running="v1",
                                  median=0.25) == ("v2 measured 0.200 s in cluster state B, 20.0 % faster than the "
                                                   "running v1's 0.250 s")
    assert Trigger.TRIAL.reason(compare="v3 measured", margin="3.0 %", previous="v1") == (
        "v3 measured (margin 3.0 %); rolling back to v1")


def test_only_the_latching_triggers_have_a_cleared_note():
    assert Trigger.SLOW.cleared(median=0.18, over="2.9 %", predicted=0.175, running="v1", clear="10.0 %",
                                needed=10).endswith("below 10.0 % for 10 iterations: the slow trigger is armed again")
    assert Trigger.WAITS.cleared(wait="1.0 %", clear="3.0 %", needed=10) == (
        "dispatcher waits are 1.0 % of the iteration, below 3.0 % for 10 iterations: the waits trigger is armed again")
    with pytest.raises(ValueError, match="first trigger does not latch"):
        Trigger.FIRST.cleared()


def test_every_policy_setting_says_why_beside_it():
    """The reasons for the defaults live on the fields (attribute docstrings), not in a far-away docstring."""
    tree = ast.parse(inspect.getsource(policy_config))
    [config] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "PolicyConfig"]
    body = config.body
    settings = [(i, node.target.id) for i, node in enumerate(body) if isinstance(node, ast.AnnAssign)]
    assert len(settings) == 21
    for i, name in settings:
        following = body[i + 1] if i + 1 < len(body) else None
        assert isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) and \
            len(following.value.value.split()) >= 8, f"PolicyConfig.{name} has no reason beside it"
