"""Count the comm-ops that reach an enforcer group's inner backend without the enforcer.

Two routes skip :class:`~enforcer.group.python.EnforcerGroup`'s Python methods:
the c10d dispatcher ops (``torch.ops.c10d.*``, which look up the group's
per-device backend and call it directly) and the functional collectives
(``torch.ops._c10d_functional.*``, used by FSDP2 internals, DTensor and
``torch.compile``) whose C++ implementation calls a group method that torch's
Python trampoline does not forward.

We observe both namespaces with a Python kernel on the Autograd dispatch keys
that forwards, unchanged, to the kernel below it (``redispatch``). When the
op's group is an enforcer group and none of our methods was entered on this
thread while it ran, the op bypassed us: it is counted per op name (in the
trace's ``bypassed`` and :func:`enforcer.metrics_text`) and the first one of
each kind is logged. Ops on other groups are forwarded without a look.

Set ``P2_COUNT_BYPASS=0`` to leave the dispatcher untouched.
"""

from __future__ import annotations

import logging
import threading

import torch
import torch.distributed as dist
from enforcer import groups, state
from enforcer.group.core import GroupCore

log = logging.getLogger("enforcer")

NAMESPACES = ("c10d", "_c10d_functional")
KEYS = ("AutogradCPU", "AutogradCUDA")
_installed = False
_libraries: list = []
_tls = threading.local()


def _group_argument(schema) -> tuple[int, str] | None:
    """Index and kind (``pg`` or ``name``) of the argument that names the group."""
    for index, argument in enumerate(schema.arguments):
        if "ProcessGroup" in str(argument.type):
            return index, "pg"
        if argument.name == "group_name":
            return index, "name"
    return None


def _is_enforcer_group(value, how: str) -> bool:
    if how == "name":
        return groups.named(str(value)) is not None
    try:
        return isinstance(dist.ProcessGroup.unbox(value), GroupCore)
    except Exception:  # noqa: BLE001 — not a boxed ProcessGroup: not ours
        return False


def _observer(packet, op_name: str, where: tuple[int, str]):
    index, how = where

    def kernel(keyset, *args, **kwargs):
        below = keyset & torch._C._after_autograd_keyset
        value = args[index] if index < len(args) else kwargs.get("group_name", kwargs.get("process_group"))
        if getattr(_tls, "depth", 0) or value is None or not _is_enforcer_group(value, how):
            return packet.redispatch(below, *args, **kwargs)
        before = entered_count()
        _tls.depth = 1
        try:
            result = packet.redispatch(below, *args, **kwargs)
        finally:
            _tls.depth = 0
        if entered_count() == before:
            _count(op_name)
        return result

    return kernel


def entered() -> None:
    """Mark that an op entered an enforcer group on this thread (the Python group calls it)."""
    _tls.entered = getattr(_tls, "entered", 0) + 1


def entered_count() -> int:
    return getattr(_tls, "entered", 0)


def _count(op_name: str) -> None:
    count = state.tracer().bypass(op_name)
    if count == 1:
        log.warning("p2enforcer: %s reached the inner backend directly (not traced, not planned); "
                    "counting these as bypassed[%r]", op_name, op_name)


def install() -> None:
    """Observe every c10d and functional collective op (idempotent)."""
    global _installed
    if _installed or not state.settings().count_bypass:
        return
    _installed = True
    for namespace in NAMESPACES:
        library = torch.library.Library(namespace, "IMPL")
        _libraries.append(library)
        for qualified in torch._C._dispatch_get_all_op_names():
            if not qualified.startswith(namespace + "::"):
                continue
            name = qualified.split("::", 1)[1]
            overload_name = "default"
            if "." in name:
                name, overload_name = name.split(".", 1)
            packet = getattr(getattr(getattr(torch.ops, namespace), name), overload_name)
            where = _group_argument(packet._schema)
            if where is None:
                continue
            op_name = f"{namespace}.{name}" if overload_name == "default" else f"{namespace}.{name}.{overload_name}"
            target = name if overload_name == "default" else f"{name}.{overload_name}"
            for key in KEYS:
                library.impl(target, _observer(packet, op_name, where), key, with_keyset=True)
