"""A plan's channel set, without processes: each channel's backend, interface and motif runner, chosen once
when the plan is built; and both runtimes hold one (neither refuses what it has)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from enforcer import state
from enforcer.runtime import channels
from enforcer.runtime.native import NativePlanRuntime
from enforcer.runtime.plan_runtime import PlanRuntime
from enforcer.runtime.sendrecv_motifs import SendRecvMotifs
from enforcer.runtime.ucc_motifs import UccMotifs
from enforcer.settings import EnforcerSettings
from optimizer_service.plan import Collective, OpKey, OpPlan, Plan
from optimizer_service.plan.motif import comm_op, on_channel


@pytest.fixture
def settings():
    def use(**values) -> None:
        state.use_settings(EnforcerSettings(**values))
    yield use
    state.use_settings(None)


def one_rank_group(inner: str = "gloo"):
    return SimpleNamespace(ranks=(0,), rank=lambda: 0, size=lambda: 1, installs=0, inner_names={"cpu": inner},
                           store=None, timeout=timedelta(seconds=5))


def one_rank_plan(channel_names: dict[int, str | None]) -> Plan:
    motifs = [on_channel(comm_op(Collective.ALL_REDUCE, (0,), 4), c) for c in channel_names]
    return Plan(version=3, world_size=1, channels=channel_names,
                ops=tuple(OpPlan.of(OpKey(seq, "all_reduce", 16, (0,)), motif) for seq, motif in enumerate(motifs)))


def test_each_channel_takes_its_backend_interface_and_runner_once(settings):
    settings(channel_backends=("gloo", "ucc"), channel_ifnames=("nic0", "nic1"))
    plan = one_rank_plan({0: None, 1: None, 2: "ib0"})
    built = channels.build(one_rank_group(), plan, list(plan.ops), "p2plan/test/", store=None)
    assert list(built) == [0, 1, 2] and len(built) == 3
    assert [(built[c].backend, built[c].interface) for c in built] == [("gloo", "nic0"), ("ucc", "nic1"),
                                                                       ("gloo", "ib0")]
    assert [type(built[c].runner) for c in built] == [SendRecvMotifs, UccMotifs, SendRecvMotifs]
    assert built.using("ucc") == [1] and built.using("gloo") == [0, 2]
    assert built.backends() == {}           # one rank: no motif needs a communicator


def test_a_channel_without_a_backend_of_its_own_runs_on_the_groups_inner_one():
    assert channels.channel_backend(1, ("gloo",), {"cpu": "ucc"}) == "ucc"
    assert channels.channel_backend(0, ("nccl",), {"cpu": "gloo"}) == "nccl"
    assert channels.channel_backend(0, (), {"cuda": "nccl"}) == "nccl"


def test_installs_name_their_store_keys_unless_the_service_named_them():
    group, plan = one_rank_group(), one_rank_plan({0: None})
    assert channels.store_prefix_of(group, plan, None) == "p2plan/1/v3/"
    assert channels.store_prefix_of(group, plan, None) == "p2plan/2/v3/"
    assert channels.store_prefix_of(group, plan, "p2svc/v3/") == "p2svc/v3/" and group.installs == 2


def test_both_runtimes_hold_a_channel_set_and_neither_refuses_what_it_has(settings):
    settings()
    runtime = PlanRuntime(SimpleNamespace(**vars(one_rank_group()), tracer=None), one_rank_plan({0: None, 1: None}))
    assert isinstance(runtime.channels, channels.ChannelSet) and sorted(runtime.channels) == [0, 1]
    assert not issubclass(NativePlanRuntime, PlanRuntime)
    assert not hasattr(NativePlanRuntime, "submit") and not hasattr(NativePlanRuntime, "waiting_on")
    runtime.close()
