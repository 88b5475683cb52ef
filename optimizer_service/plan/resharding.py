"""Lowered cross-mesh resharding programs: what the enforcer runs to move a
sharded tensor from one device mesh to another (Zhuang et al., MLSys 2023,
§2.2 and §3).

The planner (:mod:`optimizer_service.resharding`) decides *what* moves (unit
tasks: one unique data slice each), *how* (a strategy per task: send/recv,
send/recv with a local or global all-gather, or a pipelined broadcast chain)
and *when* (one sender per task and a global order). This module holds only
the result, fully lowered to global ranks and index boxes, so the data plane
needs nothing of the planner:

* :class:`Box` — a half-open index range per tensor dimension of the global
  tensor (``"0:512,0:1024,0:512"``);
* :class:`ReshardTask` — one unit task: its box, strategy, sender rank,
  receivers grouped by host (the chain order of a broadcast is the flattened
  groups), the partitions a broadcast pipelines, its position in the
  global order, and (optional) ``after``: the earlier tasks it must wait for
  beyond its own ranks' order;
* :class:`ReshardProgram` — the global shape, the box every source rank holds
  and every destination rank must end with, and the tasks.

Every rank runs the tasks it takes part in, in ``order``; because all ranks
follow one global order, ops cannot deadlock, and tasks on disjoint hosts run
at the same time. The text form round-trips (:meth:`ReshardProgram.parse`).

Host-level order (§3.2, Eq. 3): the planner schedules *hosts* — a task
starts when every earlier task on its sender host's sending side and on its
receiver hosts' receiving side has finished — while the ranks' own order only
keeps a *device* from overlapping itself: four devices of one host could send
at once and share its NIC. A task's ``after`` lists the tasks it follows on
those hosts (the latest one per host side, lowered by the planner), so the
enforcer can start it only once they have finished, as planned. Empty
``after`` (the default, and what a program without it parses to) asks for
nothing beyond the ranks' own order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from optimizer_service.errors import InvalidInputError, PlanError


class Strategy(str, Enum):
    """How one unit task moves its slice (§3.1, Figure 3 a–d)."""

    SEND_RECV = "send-recv"                  # the sender sends the whole slice to every receiver
    LOCAL_ALLGATHER = "local-allgather"      # one part to each device of a host, then an all-gather per host
    GLOBAL_ALLGATHER = "global-allgather"    # one part to each receiver, then one all-gather over all of them
    BROADCAST = "broadcast"                  # a chain sender → receivers, pipelined in K partitions

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> Strategy:
        try:
            return cls(text.strip().lower().replace("_", "-"))
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise InvalidInputError(f"unknown resharding strategy {text!r}; use one of {names}") from None


@dataclass(frozen=True)
class Box:
    """Half-open ranges ``[start, stop)`` per dimension of the global tensor."""

    starts: tuple[int, ...]
    stops: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.starts) != len(self.stops) or not self.starts:
            raise InvalidInputError(f"box needs one start and one stop per dimension, got {self.starts} and {self.stops}")
        for start, stop in zip(self.starts, self.stops):
            if start < 0 or stop < start:
                raise InvalidInputError(f"box range {start}:{stop} is not 0 <= start <= stop")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in zip(self.starts, self.stops))

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def empty(self) -> bool:
        return self.elements == 0

    def contains(self, other: Box) -> bool:
        return all(a <= c and d <= b for a, b, c, d in zip(self.starts, self.stops, other.starts, other.stops))

    def intersect(self, other: Box) -> Box:
        starts = tuple(max(a, c) for a, c in zip(self.starts, other.starts))
        stops = tuple(max(s, min(b, d)) for s, b, d in zip(starts, self.stops, other.stops))
        return Box(starts, stops)

    def relative_to(self, outer: Box) -> tuple[slice, ...]:
        """Index of this box inside a tensor that holds ``outer`` (which must contain it)."""
        if not outer.contains(self):
            raise PlanError(f"box {self} is not inside {outer}")
        return tuple(slice(a - o, b - o) for a, b, o in zip(self.starts, self.stops, outer.starts))

    def __str__(self) -> str:
        return ",".join(f"{a}:{b}" for a, b in zip(self.starts, self.stops))

    @classmethod
    def parse(cls, text: str) -> Box:
        ranges = [part.strip() for part in text.split(",")]
        starts, stops = [], []
        for part in ranges:
            match = re.fullmatch(r"(\d+):(\d+)", part)
            if not match:
                raise InvalidInputError(f"box {text!r} is not 'START:STOP,START:STOP,...'")
            starts.append(int(match.group(1)))
            stops.append(int(match.group(2)))
        return cls(tuple(starts), tuple(stops))

    @classmethod
    def whole(cls, shape: Iterable[int]) -> Box:
        shape = tuple(shape)
        return cls(tuple(0 for _ in shape), shape)


@dataclass(frozen=True)
class ReshardTask:
    """One unit communication task (§2.2): send ``box`` from ``sender`` to every
    rank in ``receiver_hosts``, grouped by host in chain order."""

    order: int
    box: Box
    strategy: Strategy
    sender: int
    receiver_hosts: tuple[tuple[int, ...], ...]
    partitions: int = 1
    after: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise PlanError(f"task {self.order}: partitions must be >= 1, got {self.partitions}")
        if list(self.after) != sorted(set(self.after)) or any(p < 0 or p >= self.order for p in self.after):
            raise PlanError(f"task {self.order}: after {list(self.after)} must name earlier tasks, "
                            "ascending, each once")
        if not self.receiver_hosts or any(not host for host in self.receiver_hosts):
            raise PlanError(f"task {self.order}: every receiver host needs at least one rank")
        if self.sender in self.receivers:
            raise PlanError(f"task {self.order}: rank {self.sender} both sends and receives")
        if len(set(self.receivers)) != len(self.receivers):
            raise PlanError(f"task {self.order}: a receiver is listed twice")

    @property
    def receivers(self) -> tuple[int, ...]:
        return tuple(rank for host in self.receiver_hosts for rank in host)

    @property
    def ranks(self) -> tuple[int, ...]:
        return (self.sender, *self.receivers)

    def __str__(self) -> str:
        hosts = "|".join(",".join(map(str, host)) for host in self.receiver_hosts)
        after = f" after {','.join(map(str, self.after))}" if self.after else ""
        return (f"task {self.order} [{self.box}] {self.strategy} K={self.partitions} from {self.sender} "
                f"to {hosts}{after}")

    @classmethod
    def parse(cls, text: str) -> ReshardTask:
        match = re.fullmatch(r"\s*task\s+(\d+)\s+\[([^\]]*)\]\s+(\S+)\s+K=(\d+)\s+from\s+(\d+)\s+to\s+([0-9,|\s]+?)"
                             r"(?:\s+after\s+([0-9,\s]+))?\s*", text)
        if not match:
            raise InvalidInputError(f"resharding task {text!r} is not "
                                    "'task ORDER [BOX] STRATEGY K=N from RANK to R,R|R,R [after T,T]'")
        hosts = tuple(tuple(int(r) for r in host.split(",") if r.strip())
                      for host in match.group(6).split("|"))
        after = tuple(int(t) for t in (match.group(7) or "").split(",") if t.strip())
        return cls(int(match.group(1)), Box.parse(match.group(2)), Strategy.parse(match.group(3)),
                   int(match.group(5)), hosts, int(match.group(4)), after)


def _boxes_text(kind: str, boxes: Mapping[int, Box]) -> list[str]:
    return [f"{kind} {rank} [{box}]" for rank, box in sorted(boxes.items())]


@dataclass(frozen=True)
class ReshardProgram:
    """A whole cross-mesh resharding, lowered (the module docstring).

    ``sources``: the box of the global tensor each source rank holds;
    ``destinations``: the box each destination rank ends with (possibly empty
    where an uneven shard leaves a device nothing); ``tasks`` in their global
    order. ``element_bytes``, ``algorithm`` and ``predicted_seconds`` record
    what the plan was made for; the data plane does not need them.
    """

    shape: tuple[int, ...]
    sources: Mapping[int, Box]
    destinations: Mapping[int, Box]
    tasks: tuple[ReshardTask, ...]
    element_bytes: int = 4
    algorithm: str = ""
    predicted_seconds: float = 0.0
    _by_rank: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        whole = Box.whole(self.shape)
        for kind, boxes in (("source", self.sources), ("destination", self.destinations)):
            for rank, box in boxes.items():
                if len(box.starts) != len(self.shape) or not whole.contains(box):
                    raise PlanError(f"{kind} rank {rank}'s box [{box}] is not inside the tensor {whole}")
        overlap = set(self.sources) & set(self.destinations)
        if overlap:
            raise PlanError(f"ranks {sorted(overlap)} are in both meshes; cross-mesh resharding needs disjoint meshes")
        orders = [task.order for task in self.tasks]
        if orders != sorted(orders) or len(set(orders)) != len(orders):
            raise PlanError("tasks must be listed in strictly increasing order")
        known = set(orders)
        for task in self.tasks:
            missing = [p for p in task.after if p not in known]
            if missing:
                raise PlanError(f"task {task.order}: after names task {missing[0]}, which the program lacks")
        for task in self.tasks:
            if task.sender not in self.sources or not self.sources[task.sender].contains(task.box):
                raise PlanError(f"task {task.order}: rank {task.sender} does not hold [{task.box}]")
            for rank in task.receivers:
                if rank not in self.destinations or not self.destinations[rank].contains(task.box):
                    raise PlanError(f"task {task.order}: rank {rank} does not need [{task.box}]")

    def tasks_of(self, rank: int) -> tuple[ReshardTask, ...]:
        """The tasks ``rank`` sends or receives in, in the global order."""
        if rank not in self._by_rank:
            self._by_rank[rank] = tuple(task for task in self.tasks if rank in task.ranks)
        return self._by_rank[rank]

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.sources) | set(self.destinations)))

    def __str__(self) -> str:
        shape = "x".join(map(str, self.shape))
        head = (f"reshard {shape} element_bytes={self.element_bytes} algorithm={self.algorithm or '-'} "
                f"predicted={self.predicted_seconds!r}")
        return "\n".join([head, *_boxes_text("src", self.sources), *_boxes_text("dst", self.destinations),
                          *(str(task) for task in self.tasks)])

    @classmethod
    def parse(cls, text: str) -> ReshardProgram:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if not lines:
            raise InvalidInputError("empty resharding program")
        head = re.fullmatch(r"reshard\s+([0-9x]+)\s+element_bytes=(\d+)\s+algorithm=(\S+)\s+predicted=(\S+)",
                            lines[0])
        if not head:
            raise InvalidInputError(f"resharding program header {lines[0]!r} is not "
                                    "'reshard AxBxC element_bytes=N algorithm=NAME predicted=SECONDS'")
        shape = tuple(int(v) for v in head.group(1).split("x"))
        sources: dict[int, Box] = {}
        destinations: dict[int, Box] = {}
        tasks = []
        for line in lines[1:]:
            boxed = re.fullmatch(r"(src|dst)\s+(\d+)\s+\[([^\]]*)\]", line)
            if boxed:
                target = sources if boxed.group(1) == "src" else destinations
                target[int(boxed.group(2))] = Box.parse(boxed.group(3))
            else:
                tasks.append(ReshardTask.parse(line))
        algorithm = "" if head.group(3) == "-" else head.group(3)
        return cls(shape, sources, destinations, tuple(tasks), int(head.group(2)), algorithm, float(head.group(4)))

    def to_dict(self) -> dict:
        return {"text": str(self)}

    @classmethod
    def from_dict(cls, data: Mapping) -> ReshardProgram:
        if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
            raise InvalidInputError("a resharding program's JSON form is {\"text\": \"reshard ...\"}")
        return cls.parse(data["text"])
