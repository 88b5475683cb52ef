"""System topology: the hardware hierarchy and the links between its devices.

P² §2 models a system as (1) a hierarchy of levels, each with a name and a
cardinality (``[(node, 4), (gpu, 16)]``: 4 nodes of 16 GPUs), and (2) switched
interconnects. Devices are the leaves; device ``g`` has one index per level
and ``g`` is their mixed-radix number, outermost level most significant.

A :class:`Link` says which traffic it carries and how fast:

* ``levels`` — the hierarchy levels it joins devices at: a transfer between
  devices ``u`` and ``v`` whose indices first differ at level ``L`` crosses
  every link that lists ``L``. In ``gcp-v100-2n`` a cross-node transfer crosses
  both the PCIe link and the NIC, so both list ``node``; intra-node traffic
  uses the NVLink ring (level ``gpu``).
* ``bandwidth`` (bytes/s, per direction) and ``latency`` (s) of one instance.
* ``shared_by`` — how many consecutive devices share one instance (a node's
  NIC is shared by all its GPUs; an NVSwitch port belongs to one GPU; the
  emulated cluster's loopback is one instance for every rank, because one
  host's CPUs copy every byte that crosses it). It divides the device count.
* ``channel`` — 0 (the default) for the path every transfer takes. A link on
  channel ``c > 0`` is an alternative path, e.g. a node's second NIC: traffic
  sent on channel ``c`` uses it instead of the channel-0 links of the levels it
  serves (:meth:`Topology.links_at`). P² programs run on channel 0.
* ``incast`` — 0 (the default) or the slowdown per concurrent incoming flow
  beyond ``shared_by`` (one flow per device behind the instance): its incoming
  bandwidth is divided by ``1 + incast × (flows − shared_by)``, as a switch
  port that many senders converge on drops or pauses traffic
  (:mod:`optimizer_service.hardware.cost_model`, "Incast"). Rings and trees stay within
  that fan-in; a whole all-to-all does not, which is why Syndicate splines it
  (§6.6).
* ``reduction`` — 0 (the default: not limiting) or how many bytes per second
  a device can combine of what it receives over this link in a reducing
  collective (the receive half of a ring's ReduceScatter, a tree's way up, a
  Reduce). Syndicate §6.6 (Figure 18) puts all-reduce on the GPU-driven
  channel because "all-reduce also does compute (gradient aggregation) which
  is faster with GPUs"; a CPU-driven channel staging through host memory
  sums on host cores, which this rate models
  (:mod:`optimizer_service.hardware.cost_model`, "Reduction").
* ``compute_slowdown`` — 0 (the default) or how much longer the GPU's compute
  takes while a motif on this link's channel runs: 0.25 means 25 % longer. A
  GPU-driven channel (NCCL) runs kernels that hold some of the SMs; a
  host-staged channel leaves them free. A channel's value is the largest of its
  links' (:meth:`Topology.compute_slowdowns`); the scheduler applies it
  (:mod:`optimizer_service.syndicate.scheduler`, "Interference").

Topologies are values: built from a dict or YAML text (``from_yaml``), written
back by ``to_yaml`` (round-trip), and validated on construction with messages
that name the bad field and value. Reading files and presets is the shell's job
(:mod:`optimizer_service.catalog`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import yaml

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware import bounded_yaml
from optimizer_service.hardware.bounded_yaml import PREVIEW_CHARS, preview
from optimizer_service.units import (
    format_rate,
    format_seconds,
    parse_rate,
    parse_seconds,
)

#: Name of the level the synthesis hierarchy adds above all others (P² App. B).
ROOT_LEVEL = "root"

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
#: Bounds on a topology's size, far above any real system's (a hierarchy has a
#: handful of levels, a system a few kinds of link): they keep a topology from
#: outside (a form, a rank's Register) small once it is a value and written back.
MAX_LEVELS = 16
MAX_LINKS = 256
MAX_DESCRIPTION = 1_024
MAX_NAME = 256
#: Characters of a bandwidth or latency text (``"270GB/s"``, ``"2us"``).
MAX_QUANTITY_CHARS = 64


@dataclass(frozen=True)
class Level:
    """One level of the hardware hierarchy: ``cardinality`` instances per parent."""

    name: str
    cardinality: int

    def __str__(self) -> str:
        return f"({self.name}, {self.cardinality})"


@dataclass(frozen=True)
class Link:
    """A class of interconnect, e.g. a node's NIC or a GPU's NVSwitch port."""

    name: str
    levels: tuple[str, ...]
    bandwidth: float
    latency: float
    shared_by: int = 1
    channel: int = 0
    incast: float = 0.0
    reduction: float = 0.0
    compute_slowdown: float = 0.0

    def __str__(self) -> str:
        text = (f"{self.name}@{','.join(self.levels)} {format_rate(self.bandwidth)} "
                f"{format_seconds(self.latency)} shared_by={self.shared_by}")
        text += f" channel={self.channel}" if self.channel else ""
        text += f" incast={self.incast:g}" if self.incast else ""
        text += f" reduction={format_rate(self.reduction)}" if self.reduction else ""
        return text + (f" compute_slowdown={self.compute_slowdown:g}" if self.compute_slowdown else "")


@dataclass(frozen=True)
class Topology:
    """A hierarchy of levels plus the links that carry traffic between them."""

    name: str
    levels: tuple[Level, ...]
    links: tuple[Link, ...]
    description: str = ""

    def __post_init__(self) -> None:
        _validate(self)

    # ----------------------------------------------------------------- shape
    @property
    def hierarchy(self) -> tuple[int, ...]:
        """Cardinalities, outermost first (P²'s ``H``, e.g. ``(4, 16)``)."""
        return tuple(level.cardinality for level in self.levels)

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    @cached_property
    def device_count(self) -> int:
        return math.prod(self.hierarchy)

    def level_index(self, name: str) -> int:
        for index, level in enumerate(self.levels):
            if level.name == name:
                return index
        raise InvalidInputError(
            f"topology {self.name!r} has no level {name!r}; its levels are {', '.join(self.level_names)}")

    def devices_per_instance(self, level: int) -> int:
        """How many devices one instance of ``level`` contains (1 for the leaf level)."""
        return math.prod(self.hierarchy[level + 1:])

    def links_at(self, level: int, channel: int = 0) -> tuple[Link, ...]:
        """The links a transfer on ``channel`` crosses when its endpoints first
        differ at ``level``: that channel's links there, else channel 0's."""
        name = self.levels[level].name
        serving = [link for link in self.links if name in link.levels]
        own = tuple(link for link in serving if link.channel == channel)
        return own or tuple(link for link in serving if link.channel == 0)

    @property
    def channels(self) -> tuple[int, ...]:
        """The channels some link is on, ascending (always includes 0)."""
        return tuple(sorted({0} | {link.channel for link in self.links}))

    def compute_slowdowns(self) -> dict[int, float]:
        """Channel -> how much longer compute takes while one of its motifs runs
        (the largest ``compute_slowdown`` of the channel's links; channels with
        none are left out)."""
        slowdowns: dict[int, float] = {}
        for link in self.links:
            if link.compute_slowdown > slowdowns.get(link.channel, 0.0):
                slowdowns[link.channel] = link.compute_slowdown
        return slowdowns

    def describe(self) -> str:
        """Multi-line human description (``p2 topology show``)."""
        lines = [f"topology {self.name}: {self.device_count} devices, hierarchy "
                 f"[{' '.join(str(c) for c in self.hierarchy)}]"]
        if self.description:
            lines.append(f"  {self.description}")
        lines.append("  levels (outermost first):")
        for index, level in enumerate(self.levels):
            lines.append(f"    {level.name:<10} x{level.cardinality:<5} "
                         f"{self.devices_per_instance(index)} device(s) per {level.name}")
        lines.append("  links:")
        for link in self.links:
            instances = self.device_count // link.shared_by
            lines.append(f"    {link.name:<10} joins at {','.join(link.levels):<12} "
                         f"{format_rate(link.bandwidth):>10} per direction, latency "
                         f"{format_seconds(link.latency):>6}, shared by {link.shared_by} "
                         f"device(s) ({instances} instance(s))"
                         + (f", incast {link.incast:g} per extra flow" if link.incast else "")
                         + (f", reduces {format_rate(link.reduction)} per device" if link.reduction else "")
                         + (f", compute {link.compute_slowdown:.0%} slower while its channel runs a motif"
                            if link.compute_slowdown else ""))
        return "\n".join(lines)

    # ------------------------------------------------------------ text form
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name}
        if self.description:
            data["description"] = self.description
        data["levels"] = [{"name": lv.name, "cardinality": lv.cardinality} for lv in self.levels]
        data["links"] = [
            {
                "name": link.name,
                "levels": list(link.levels),
                "bandwidth": format_rate(link.bandwidth),
                "latency": format_seconds(link.latency),
                "shared_by": link.shared_by,
                **({"channel": link.channel} if link.channel else {}),
                **({"incast": link.incast} if link.incast else {}),
                **({"reduction": format_rate(link.reduction)} if link.reduction else {}),
                **({"compute_slowdown": link.compute_slowdown} if link.compute_slowdown else {}),
            }
            for link in self.links
        ]
        return data

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "topology") -> Topology:
        """A topology from plain values (what YAML gives); every field's type is
        checked here, and messages quote at most a short preview of a value."""
        if not isinstance(data, dict):
            raise InvalidInputError(f"{source}: expected a mapping with 'name', 'levels' and 'links'")
        _check_keys(data, {"name", "description", "levels", "links"}, {"levels", "links"}, source)
        name = data.get("name", source)
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise InvalidInputError(f"{source}: 'name' must be a non-empty string of at most {MAX_NAME} characters")
        levels_raw = data["levels"]
        if not isinstance(levels_raw, list) or not levels_raw:
            raise InvalidInputError(f"{source}: 'levels' must be a non-empty list")
        if len(levels_raw) > MAX_LEVELS:
            raise InvalidInputError(f"{source}: 'levels' has {len(levels_raw)} levels; at most {MAX_LEVELS}")
        links_raw = data["links"]
        if not isinstance(links_raw, list):
            raise InvalidInputError(f"{source}: 'links' must be a list")
        if len(links_raw) > MAX_LINKS:
            raise InvalidInputError(f"{source}: 'links' has {len(links_raw)} links; at most {MAX_LINKS}")
        description = data.get("description", "")
        if not isinstance(description, str):
            raise InvalidInputError(f"{source}: 'description' must be a string")
        if len(description) > MAX_DESCRIPTION:
            raise InvalidInputError(f"{source}: 'description' has {len(description)} characters; at most "
                                    f"{MAX_DESCRIPTION}")
        levels = tuple(_level_from(item, i, source) for i, item in enumerate(levels_raw))
        links = tuple(_link_from(item, i, source) for i, item in enumerate(links_raw))
        return cls(name=name, levels=levels, links=links, description=description)

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "topology") -> Topology:
        """A topology from YAML text, read by :func:`bounded_yaml.load`: a
        document too big, too deep or whose aliases expand too far is refused
        before it is built (topologies come from forms and ranks)."""
        return cls.from_dict(bounded_yaml.load(text, source=source), source=source)


def _check_keys(data: dict, allowed: set[str], required: set[str], where: str) -> None:
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown field {preview(unknown[0])} (expected {', '.join(sorted(allowed))})")
    missing = sorted(required - set(data))
    if missing:
        raise InvalidInputError(f"{where}: missing field {missing[0]!r}")


def _name(item: dict, where: str) -> str:
    """A level's or link's name: a string as written (never ``str()`` of a list or mapping)."""
    name = item["name"]
    if not isinstance(name, str):
        raise InvalidInputError(f"{where}: name {preview(name)} must be a string (a letter, then letters, digits, "
                                "'_' or '-')")
    return name


def _bare(name: str) -> str:
    """A name as it is when short, else its preview (names are checked later, in :func:`_validate`)."""
    return name if len(name) <= PREVIEW_CHARS and name.isprintable() else preview(name)


def _level_from(item: Any, index: int, source: str) -> Level:
    where = f"{source}: levels[{index}]"
    if not isinstance(item, dict):
        raise InvalidInputError(f"{where} must be a mapping with 'name' and 'cardinality'")
    _check_keys(item, {"name", "cardinality"}, {"name", "cardinality"}, where)
    name = _name(item, where)
    cardinality = item["cardinality"]
    if isinstance(cardinality, bool) or not isinstance(cardinality, int):
        raise InvalidInputError(f"{where}: cardinality {preview(cardinality)} must be a whole number")
    return Level(name=name, cardinality=cardinality)


def _quantity(item: dict, key: str, where: str) -> str | int | float:
    """A bandwidth or latency as written: a number or a short text with a unit."""
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (
            isinstance(value, str) and len(value) > MAX_QUANTITY_CHARS):
        raise InvalidInputError(f"{where}: {key} {preview(value)} must be a number or a short text with a unit "
                                "(270GB/s, 2us)")
    return value


def _link_from(item: Any, index: int, source: str) -> Link:
    where = f"{source}: links[{index}]"
    if not isinstance(item, dict):
        raise InvalidInputError(f"{where} must be a mapping")
    allowed = {"name", "level", "levels", "bandwidth", "latency", "shared_by", "channel", "incast", "reduction",
               "compute_slowdown"}
    _check_keys(item, allowed, {"name", "bandwidth", "latency"}, where)
    name = _name(item, where)
    if ("level" in item) == ("levels" in item):
        raise InvalidInputError(f"{where}: give exactly one of 'level' (a name) or 'levels' (a list)")
    levels = item.get("levels", [item.get("level")])
    if isinstance(levels, str) or not isinstance(levels, list) or not levels:
        raise InvalidInputError(f"{where}: 'levels' must be a non-empty list of level names")
    if len(levels) > MAX_LEVELS or not all(isinstance(level, str) for level in levels):
        raise InvalidInputError(f"{where}: 'levels' {preview(levels)} must be a list of at most {MAX_LEVELS} "
                                "level names")
    shared_by = item.get("shared_by", 1)
    if isinstance(shared_by, bool) or not isinstance(shared_by, int):
        raise InvalidInputError(f"{where}: shared_by {preview(shared_by)} must be a whole number")
    channel = item.get("channel", 0)
    if isinstance(channel, bool) or not isinstance(channel, int):
        raise InvalidInputError(f"{where}: channel {preview(channel)} must be a whole number")
    incast = item.get("incast", 0.0)
    if isinstance(incast, bool) or not isinstance(incast, (int, float)):
        raise InvalidInputError(f"{where}: incast {preview(incast)} must be a number (the slowdown per incoming "
                                "flow beyond shared_by)")
    compute_slowdown = item.get("compute_slowdown", 0.0)
    if isinstance(compute_slowdown, bool) or not isinstance(compute_slowdown, (int, float)):
        raise InvalidInputError(f"{where}: compute_slowdown {preview(compute_slowdown)} must be a number (0.25: "
                                f"compute takes 25 % longer while a motif on this channel runs)")
    try:
        bandwidth = parse_rate(_quantity(item, "bandwidth", where))
        latency = parse_seconds(_quantity(item, "latency", where))
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where} ({_bare(name)}): {exc}") from None
    try:
        reduction = parse_rate(_quantity(item, "reduction", where)) if "reduction" in item else 0.0
    except InvalidInputError:
        raise InvalidInputError(f"{where} ({_bare(name)}): reduction {preview(item['reduction'])} must be a "
                                f"positive rate such as 5GB/s (bytes a device combines per second), or left "
                                f"out") from None
    return Link(name=name, levels=tuple(levels), bandwidth=bandwidth, latency=latency, shared_by=shared_by,
                channel=channel, incast=float(incast), reduction=reduction, compute_slowdown=float(compute_slowdown))


def _validate(topology: Topology) -> None:
    where = f"topology {preview(topology.name)}"
    if not topology.levels:
        raise InvalidInputError(f"{where}: needs at least one level")
    seen: set[str] = set()
    for level in topology.levels:
        if not _NAME.match(level.name):
            raise InvalidInputError(
                f"{where}: level name {preview(level.name)} must start with a letter and use at most 64 letters, "
                f"digits, '_' or '-'")
        if level.name == ROOT_LEVEL:
            raise InvalidInputError(f"{where}: level name {ROOT_LEVEL!r} is reserved for the synthesis root")
        if level.name in seen:
            raise InvalidInputError(f"{where}: level name {level.name!r} appears twice")
        seen.add(level.name)
        if isinstance(level.cardinality, bool) or not isinstance(level.cardinality, int) or level.cardinality < 1:
            raise InvalidInputError(
                f"{where}: level {level.name!r} has cardinality {preview(level.cardinality)}; it must be a whole "
                f"number >= 1")
    link_names: set[str] = set()
    for link in topology.links:
        if not _NAME.match(link.name):
            raise InvalidInputError(f"{where}: link name {preview(link.name)} must start with a letter and use at most "
                                    f"64 letters, digits, '_' or '-'")
        if link.name in link_names:
            raise InvalidInputError(f"{where}: link name {link.name!r} appears twice")
        link_names.add(link.name)
        if not link.bandwidth > 0 or not math.isfinite(link.bandwidth):
            raise InvalidInputError(f"{where}: link {link.name!r} has bandwidth {link.bandwidth!r}; it must be > 0")
        if not link.latency >= 0 or not math.isfinite(link.latency):
            raise InvalidInputError(f"{where}: link {link.name!r} has latency {link.latency!r}; it must be >= 0")
        if isinstance(link.shared_by, bool) or not isinstance(link.shared_by, int) or link.shared_by < 1:
            raise InvalidInputError(f"{where}: link {link.name!r} has shared_by {preview(link.shared_by)}; it must "
                                    f"be >= 1")
        if isinstance(link.channel, bool) or not isinstance(link.channel, int) or link.channel < 0:
            raise InvalidInputError(f"{where}: link {link.name!r} has channel {preview(link.channel)}; it must "
                                    f"be >= 0")
        if not 0 <= link.incast < 1 or not math.isfinite(link.incast):
            raise InvalidInputError(f"{where}: link {link.name!r} has incast {link.incast!r}; it must be in [0, 1) "
                                    f"(the slowdown per incoming flow beyond shared_by)")
        if not link.reduction >= 0 or not math.isfinite(link.reduction):
            raise InvalidInputError(f"{where}: link {link.name!r} has reduction {link.reduction!r}; it must be a rate > 0 "
                                    f"(bytes a device combines per second), or left out")
        if not 0 <= link.compute_slowdown <= 10 or not math.isfinite(link.compute_slowdown):
            raise InvalidInputError(f"{where}: link {link.name!r} has compute_slowdown {link.compute_slowdown!r}; it "
                                    f"must be in [0, 10] (0.25: compute takes 25 % longer while a motif on its "
                                    f"channel runs)")
        for level_name in link.levels:
            if level_name not in seen:
                raise InvalidInputError(
                    f"{where}: link {link.name!r} joins devices at unknown level {preview(level_name)}; "
                    f"levels are {', '.join(topology.level_names)}")
        if topology.device_count % link.shared_by:
            raise InvalidInputError(
                f"{where}: link {link.name!r} is shared by {link.shared_by} devices, which does not divide "
                f"the {topology.device_count} devices of the topology")
    for index, level in enumerate(topology.levels):
        if level.cardinality > 1 and not topology.links_at(index):
            raise InvalidInputError(
                f"{where}: no link joins devices at level {level.name!r}; add a link with level: {level.name}")
