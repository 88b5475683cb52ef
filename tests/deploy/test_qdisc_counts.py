"""The root qdiscs' drops read over rtnetlink (``deploy/emulated/qdisc_counts.py``): the kernel's
answer parsed from bytes here; against ``tc`` on a real lossy cluster in ``test_fabrics.py``."""

from __future__ import annotations

import struct

import pytest

from deploy.emulated import netns
from deploy.emulated.qdisc_counts import (
    ATTR,
    HEADER,
    IFINFO,
    IFLA_IFNAME,
    NLMSG_DONE,
    NLMSG_ERROR,
    RTM_GETLINK,
    RTM_NEWLINK,
    RTM_NEWQDISC,
    TC_H_ROOT,
    TCA_STATS,
    TCA_STATS2,
    TCA_STATS_QUEUE,
    TCMSG,
    QdiscReadError,
    qdisc_drops_in,
    read_drops,
)


def attr(kind: int, payload: bytes) -> bytes:
    padded = payload + b"\0" * (-len(payload) % 4)
    return ATTR.pack(ATTR.size + len(payload), kind) + padded


def message(kind: int, sequence: int, payload: bytes) -> bytes:
    return HEADER.pack(HEADER.size + len(payload), kind, 0, sequence, 0) + payload


def link(index: int, name: str) -> bytes:
    return IFINFO.pack(0, 1, index, 0, 0) + attr(IFLA_IFNAME, name.encode() + b"\0")


def qdisc(index: int, parent: int, *attrs: bytes) -> bytes:
    return TCMSG.pack(0, index, 0x10000, parent, 1) + b"".join(attrs)


def queue_stats(drops: int) -> bytes:                 # TCA_STATS2 { TCA_STATS_QUEUE { qlen, backlog, drops, ... } }
    return attr(TCA_STATS2, attr(TCA_STATS_QUEUE, struct.pack("=IIIII", 1, 2, drops, 0, 9)))


class Kernel:
    """A netlink socket's peer: each request's answer, in the pieces ``recv`` returns."""

    def __init__(self, answers: dict[int, list[bytes]]) -> None:
        self.answers, self.pending, self.sent = answers, [], []

    def send(self, data: bytes) -> int:
        _, kind, flags, sequence, _ = HEADER.unpack_from(data)
        self.sent.append((kind, flags))
        self.pending = [chunk(sequence) for chunk in self.answers[kind]]
        return len(data)

    def recv(self, size: int) -> bytes:
        return self.pending.pop(0)


def test_each_device_s_root_qdisc_drops_by_its_name():
    links = [lambda s: message(RTM_NEWLINK, s, link(1, "lo")) + message(RTM_NEWLINK, s, link(7, "nic0")),
             lambda s: message(RTM_NEWLINK, s, link(8, "nic1")) + message(NLMSG_DONE, s, b"\0" * 4)]
    old_stats = attr(TCA_STATS, struct.pack("=QIIIIIII", 100, 10, 3, 0, 0, 0, 0, 0))
    qdiscs = [lambda s: message(RTM_NEWQDISC, s, qdisc(7, TC_H_ROOT, attr(1, b"tbf\0"), queue_stats(42)))
              + message(RTM_NEWQDISC, s, qdisc(7, 0xFFFFFFF1, queue_stats(5)))          # not the root
              + message(RTM_NEWQDISC, s - 1, qdisc(8, TC_H_ROOT, queue_stats(99)))      # another request's
              + message(RTM_NEWQDISC, s, qdisc(8, TC_H_ROOT, old_stats))
              + message(RTM_NEWQDISC, s, qdisc(1, TC_H_ROOT))
              + message(RTM_NEWQDISC, s, qdisc(3, TC_H_ROOT, queue_stats(1)))            # no such link
              + message(NLMSG_DONE, s, b"\0" * 4)]
    kernel = Kernel({RTM_GETLINK: links, 38: qdiscs})
    assert read_drops(kernel) == {"nic0": 42, "nic1": 3, "lo": 0}
    assert all(flags & 0x300 == 0x300 for _, flags in kernel.sent)        # dumps


def test_an_error_answer_is_an_error_and_an_unreadable_namespace_too(tmp_path):
    kernel = Kernel({RTM_GETLINK: [lambda s: message(NLMSG_ERROR, s, struct.pack("=i", -1) + b"\0" * 16)]})
    with pytest.raises(QdiscReadError, match="not permitted"):
        read_drops(kernel)
    with pytest.raises(QdiscReadError, match="no-such-namespace"):
        qdisc_drops_in(tmp_path / "no-such-namespace")


def test_without_its_namespace_file_the_reading_falls_back_to_tc(monkeypatch):
    monkeypatch.setattr(netns, "qdisc_drops_by_tc", lambda namespace: {"seen": namespace})
    monkeypatch.setattr(netns, "NETNS_DIR", netns.Path("/nonexistent-netns-dir"))
    assert netns.qdisc_drops("ns1") == {"seen": "ns1"}
