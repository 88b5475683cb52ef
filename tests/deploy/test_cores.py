"""The host's cores as /proc/stat counts them: parsing, the shares between two samples, and a real sample."""

from __future__ import annotations

import os
import time

import pytest

from deploy.emulated import cores
from deploy.emulated.cores import CoreTimes

STAT = """cpu  300 30 90 500 10 5 25 40 0 0
cpu0 100 10 30 300 5 2 10 20 0 0
cpu1 200 20 60 200 5 3 15 20 0 0
intr 3119592 0 0
"""


def test_parse_sums_the_cpus_asked_for_in_seconds():
    both = cores.parse(STAT, ticks_per_second=100)
    assert both == CoreTimes(2, 3.0, 0.3, 0.9, 5.0, 0.1, 0.05, 0.25, 0.4)
    one = cores.parse(STAT, [1], ticks_per_second=100)
    assert one.cpus == 1 and one.user == 2.0 and one.idle == 2.0
    assert CoreTimes.from_list(one.to_list()) == one
    with pytest.raises(ValueError, match="none of the CPUs"):
        cores.parse(STAT, [7])
    with pytest.raises(ValueError, match="9 numbers"):
        CoreTimes.from_list([2, 1.0])


def test_shares_split_the_cores_time_between_two_samples_by_kind_of_work():
    before = CoreTimes(2, user=10, nice=1, system=2, idle=20, iowait=0, irq=0, softirq=1, steal=0)
    # 2 cores x 10 s: 12 s of processes, 3 s of softirq, 2 s niced, 1 s stolen, 2 s idle.
    after = CoreTimes(2, user=20, nice=3, system=4, idle=22, iowait=0, irq=1, softirq=3, steal=1)
    found = cores.shares(before, after)
    assert found == {"cores": 2.0, "processes": pytest.approx(0.6), "kernel": pytest.approx(0.15),
                     "niced": pytest.approx(0.1), "steal": pytest.approx(0.05), "idle": pytest.approx(0.1),
                     "busy": pytest.approx(0.75)}
    assert cores.shares(after, after) is None                   # no time passed
    assert cores.shares(before, CoreTimes(4, user=40)) is None  # other CPUs


def test_a_sample_of_this_host_counts_a_busy_loop_as_processes():
    before = cores.sample()
    assert before is not None and before.cpus == len(os.sched_getaffinity(0))
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    found = cores.shares(before, cores.sample())
    assert found is not None and found["processes"] > 0
    assert sum(found[kind] for kind in ("processes", "kernel", "niced", "steal", "idle")) == pytest.approx(1.0)
