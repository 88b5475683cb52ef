"""The inner backends the enforcer issues motifs on: which one per device, and how to make one.

``P2_INNER_BACKEND`` chooses: a single name (``gloo``, ``nccl``, ``ucc``) for
every device, or a map like ``cpu:gloo,cuda:nccl``. Unset: gloo for CPU
tensors; for CUDA tensors NCCL when torch has it and a GPU is present (else
gloo, which also handles CUDA tensors, slowly). UCC (CPU tensors) is used only
when asked for; it is our own backend (:mod:`enforcer.comm.ucc`, the ``enforcer._ucc``
extension), not torch's, which the CPU wheel lacks.

Inner backends are made directly from a store (no ``new_group``, which is
collective over the whole world and would re-enter this backend): only the
members of a group take part in creating its backend. A channel's backend is
bound to one network interface (gloo's transport device), so motifs on
different channels travel over different NICs.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from enforcer.comm import ucc
from optimizer_service.plan import InvalidInputError

ENV_VAR = "P2_INNER_BACKEND"
KNOWN = ("gloo", "nccl", "ucc")


class InnerBackendError(InvalidInputError):
    """A ``P2_INNER_BACKEND`` value this torch cannot honour."""


def _available(name: str) -> bool:
    return {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available,
            "ucc": ucc.available}[name]()


def default_map() -> dict[str, str]:
    devices = {"cpu": "gloo"}
    if torch.cuda.is_available():
        devices["cuda"] = "nccl" if dist.is_nccl_available() else "gloo"
    return devices


def parse_inner(value: str | None) -> dict[str, str]:
    """``P2_INNER_BACKEND`` as ``{device type: backend name}``."""
    if value is None or not value.strip():
        return default_map()
    value = value.strip().lower()
    if ":" not in value:
        # ucc is ours and CPU-only: alone it takes the CPU and leaves CUDA tensors to the default
        mapping = {**default_map(), "cpu": "ucc"} if value == "ucc" else {device: value for device in default_map()}
    else:
        mapping = {}
        for item in value.split(","):
            device, _, name = item.partition(":")
            if not device.strip() or not name.strip():
                raise InnerBackendError(f"{ENV_VAR}={value!r}: expected DEVICE:BACKEND pairs like cpu:gloo,cuda:nccl")
            mapping[device.strip()] = name.strip()
    for device, name in mapping.items():
        if name not in KNOWN:
            raise InnerBackendError(f"{ENV_VAR}: unknown inner backend {name!r} for {device}; use one of {', '.join(KNOWN)}")
        if name == "ucc" and device != "cpu":
            raise InnerBackendError(f"{ENV_VAR}: the ucc backend handles CPU tensors only; use "
                                    f"{'nccl or gloo' if device == 'cuda' else 'gloo'} for {device}")
        if name == "ucc" and not ucc.available():
            raise InnerBackendError(f"{ENV_VAR}: {ucc.why_unavailable()}")
        if not _available(name):
            raise InnerBackendError(f"{ENV_VAR}: torch {torch.__version__} was built without {name}; "
                                    f"use {'gloo' if device == 'cpu' else 'gloo or nccl'} for {device}")
    return mapping


def create(name: str, store: dist.Store, rank: int, size: int, timeout: timedelta,
           interface: str | None = None) -> dist.Backend:
    """A fresh inner backend of ``name`` for ``size`` members (this one ``rank``)."""
    if timeout is None:
        timeout = timedelta(minutes=30)
    if name == "gloo":
        if not interface:       # torch's own default: honours GLOO_SOCKET_IFNAME
            return dist.ProcessGroupGloo(store, rank, size, timeout)
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        options._devices = [dist.ProcessGroupGloo.create_device(interface=interface)]
        return dist.ProcessGroupGloo(store, rank, size, options)
    if name == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options)
    if name == "ucc":
        return ucc.create(store, rank, size, timeout, interface=interface)
    raise InnerBackendError(f"unknown inner backend {name!r}")


def backend_type(name: str) -> dist.ProcessGroup.BackendType:
    """The type a group registers ``name``'s backend under: ours for UCC is a
    custom backend (``BackendType.UCC`` means torch's own ProcessGroupUCC)."""
    return {"gloo": dist.ProcessGroup.BackendType.GLOO, "nccl": dist.ProcessGroup.BackendType.NCCL,
            "ucc": dist.ProcessGroup.BackendType.CUSTOM}[name]
