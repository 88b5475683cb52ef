"""``p2 rule-plan`` end to end, through the real entry point."""

from __future__ import annotations

import json

from optimizer_service.plan.plan import Plan
from tests.support.cli import p2
from tests.support.traces import op, trace


def test_rule_plan_writes_a_plan_for_the_last_complete_iteration(tmp_path):
    ops = [op("all_reduce", 4096, 0.0, 0.001), op("broadcast", 256, 0.002, 0.003)]
    (tmp_path / "trace.json").write_text(json.dumps(trace(ops, ops, ops)))
    result = p2("rule-plan", str(tmp_path / "trace.json"), str(tmp_path / "plan.json"), "--channels", "2")
    assert result.returncode == 0, result.stderr
    plan = Plan.parse((tmp_path / "plan.json").read_text())
    assert [o.key.kind for o in plan.ops] == ["all_reduce", "broadcast"] and plan.channel_ids() == (0, 1)
    assert "2 ops planned" in result.stdout


def test_rule_plan_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "not-a-trace.json").write_text('{"ops": 3}')
    (tmp_path / "short.json").write_text(json.dumps(trace([op("all_reduce", 64, 0.0, 0.1)])))
    cases = [(["missing.json"], "trace file missing.json does not exist"),
             ([str(tmp_path / "not-a-trace.json")], "not a p2enforcer trace"),
             ([str(tmp_path / "short.json")], "fewer than two iterations")]
    for args, message in cases:
        result = p2("rule-plan", *args, str(tmp_path / "plan.json"))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = p2("rule-plan", str(tmp_path / "short.json"), str(tmp_path / "plan.json"), "--segments", "0")
    assert result.returncode == 2 and "--segments" in result.stderr
    assert not (tmp_path / "plan.json").exists()
