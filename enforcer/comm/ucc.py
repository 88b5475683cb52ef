"""UCC as an inner backend and a plan channel's transport, through our own extension.

torch's CPU wheel is built without ``ProcessGroupUCC``; ``enforcer._ucc``
(``cpp_ext/ucc``: pybind11 bindings to UCC 1.3.0's C API and a
``c10d::Backend`` on them, built by ``cpp_ext/build_native.py --ucc``) takes
its place. This module is the one place the enforcer reaches it from:
:func:`available` says whether it is built and loads, :func:`why_unavailable`
says why not in one line, :func:`create` makes a backend.

``interface`` binds one backend to one NIC: its UCX context gets
``NET_DEVICES=<interface>`` and ``TLS=tcp`` (set for that context alone; see
``cpp_ext/ucc/README.md``). TCP only, because UCX would otherwise carry the
traffic between processes of one host over shared memory and never touch the
NIC (the emulated cluster's nodes are namespaces of one host).
"""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import torch.distributed as dist

from optimizer_service.plan import InvalidInputError

BUILD_HINT = ".venv/bin/python cpp_ext/build_native.py --only ucc --ucc $(cpp_ext/ucc/build_ucc.sh)"

_loaded: list[ModuleType | str] = []      # the module, or why it did not load (once per process)


class UccUnavailableError(InvalidInputError):
    """UCC was asked for but its extension is not built (or does not load)."""


def _module() -> ModuleType | None:
    if not _loaded:
        try:
            from enforcer import _ucc
            _loaded.append(_ucc)
        except ImportError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            _loaded.append(f"the UCC extension enforcer._ucc is not built or does not load ({first}); "
                           f"build it with {BUILD_HINT}")
    found = _loaded[0]
    return found if isinstance(found, ModuleType) else None


def available() -> bool:
    """Whether the UCC backend can be made in this process."""
    return _module() is not None


def why_unavailable() -> str:
    """One line saying why :func:`available` is False (empty when it is True)."""
    return "" if _module() is not None else str(_loaded[0])


def version() -> str:
    """UCC's version string (``UccUnavailableError`` without the extension)."""
    return _require().version()


def _require() -> ModuleType:
    module = _module()
    if module is None:
        raise UccUnavailableError(why_unavailable())
    return module


def create(store: dist.Store, rank: int, size: int, timeout: timedelta,
           interface: str | None = None) -> dist.Backend:
    """A UCC backend for ``size`` members (this one ``rank``), collective over
    ``store`` (give each backend its own prefix); its collectives fail after
    ``timeout``. ``interface``: the NIC its traffic takes (TCP over it only)."""
    module = _require()
    if interface:
        check_interface(interface)
    return module.UccBackend(store, rank, size, timeout, interface or "", "tcp" if interface else "")


def check_interface(interface: str, sysfs: Path = Path("/sys/class/net")) -> None:
    """UCX finds NICs by listing ``/sys/class/net``: one line when ``interface`` is not there —
    missing altogether, or present in this process's network namespace while ``/sys`` shows
    another namespace's (a rank entered into a namespace with ``nsenter --net`` keeps the host's
    sysfs; ``ip netns exec`` remounts it)."""
    if (sysfs / interface).exists():
        return
    try:
        socket.if_nametoindex(interface)
    except OSError:
        raise InvalidInputError(f"UCC: no network interface {interface!r} here; name one of this host's "
                                f"interfaces for the channel") from None
    raise InvalidInputError(f"UCC: interface {interface!r} is in this process's network namespace but not in "
                            f"{sysfs}, where UCX looks for NICs (/sys shows another namespace); start the rank "
                            f"with its namespace's sysfs (ip netns exec, or unshare -m and mount -t sysfs sysfs /sys)")
