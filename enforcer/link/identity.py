"""Who a rank is to the optimizer service: :class:`RankIdentity`, sent in ``Register``.

``Register`` opens every stream (:mod:`.stream`): the rank's identity, found
once when the link starts (:meth:`RankIdentity.of`), and its protocol state at
that moment — the plan it runs, the versions it holds committed and built, its
iteration (:meth:`RankIdentity.register`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch

from enforcer.link.default_group import DefaultGroup
from enforcer.settings import EnforcerSettings, default_job
from optimizer_service.wire.limits import MAX_TOPOLOGY_CHARACTERS
from p2.v1 import enforcer_link_pb2 as link_pb2

log = logging.getLogger("enforcer")


@dataclass(frozen=True)
class RankIdentity:
    """What a rank tells the service in ``Register``, besides its protocol state."""

    job: str
    rank: int
    world_size: int
    host: str
    local_rank: int
    backend: str                # the inner backend(s), e.g. "cpu:gloo"
    torch_version: str
    enforcer_version: str
    switch_every: int
    topology: str = ""          # a preset name or a topology YAML document (P2_TOPOLOGY)

    @classmethod
    def of(cls, group: DefaultGroup, settings: EnforcerSettings, environ: Mapping[str, str]) -> RankIdentity:
        """The default group's rank; ``job`` is "" when no job id can be found
        (see :func:`enforcer.settings.default_job`)."""
        job = settings.job or default_job(environ, store_address(group.store)) or ""
        try:
            local_rank = int(environ.get("LOCAL_RANK", group.rank()))
        except ValueError:
            local_rank = group.rank()
        return cls(job, group.rank(), group.size(), socket.gethostname(), local_rank,
                   ",".join(f"{device}:{name}" for device, name in group.inner_names.items()),
                   torch.__version__, _enforcer_version(), settings.switch_every, register_topology(settings.topology))

    def register(self, running: int, held: tuple[int, ...], iteration: int) -> link_pb2.RankMessage:
        """``Register``: this identity, with the version the rank runs, those it holds and its iteration."""
        return link_pb2.RankMessage(register=link_pb2.Register(
            job_id=self.job, rank=self.rank, world_size=self.world_size, host=self.host, local_rank=self.local_rank,
            backend=self.backend, torch_version=self.torch_version, enforcer_version=self.enforcer_version,
            running_version=running, held_versions=held, iteration=iteration, switch_every=self.switch_every,
            topology=self.topology))


def store_address(store) -> str | None:
    """``host:port`` of the TCPStore under ``store``'s prefixes, or None."""
    try:
        base = store._underlying_non_prefix_store
    except AttributeError:
        base = store
    host, port = getattr(base, "host", None), getattr(base, "port", None)
    return f"{host}:{port}" if host and port else None


def register_topology(value: str | None) -> str:
    """``P2_TOPOLOGY`` as Register carries it: a YAML file's text, else the name
    as given (a preset the service knows). A file that cannot be read, or is longer
    than the service takes, is logged and not sent."""
    if not value:
        return ""
    path = Path(value)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        return value
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        log.warning("p2enforcer: P2_TOPOLOGY=%s cannot be read (%s); the service plans on its own topology",
                    value, type(error).__name__)
        return ""
    if len(text) > MAX_TOPOLOGY_CHARACTERS:
        log.warning("p2enforcer: P2_TOPOLOGY=%s is over %d characters; not sent", value, MAX_TOPOLOGY_CHARACTERS)
        return ""
    return text


def _enforcer_version() -> str:
    try:
        return metadata.version("p2-collectives")
    except metadata.PackageNotFoundError:
        return "0+unknown"
