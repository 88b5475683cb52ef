"""Whether this process may build and enter network namespaces.

Creating namespaces, veths and ``tc`` qdiscs needs ``CAP_NET_ADMIN``;
``ip netns add`` (a bind mount under ``/run/netns``) and entering a namespace
(``setns``) also need ``CAP_SYS_ADMIN``. Both are read from the effective set
in ``/proc/self/status`` rather than guessed from the uid, so root with
capabilities dropped (``capsh --drop=cap_net_admin``, a container) is told
plainly instead of meeting a half-built cluster.
"""

from __future__ import annotations

from pathlib import Path

from deploy.errors import DeployError

CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
_NAMES = {CAP_NET_ADMIN: "CAP_NET_ADMIN", CAP_SYS_ADMIN: "CAP_SYS_ADMIN"}


def effective_capabilities() -> int:
    """The effective capability mask of this process (0 if unreadable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def missing_capabilities() -> list[str]:
    """Names of the capabilities namespaces need that this process lacks."""
    mask = effective_capabilities()
    return [name for bit, name in _NAMES.items() if not mask >> bit & 1]


def can_manage_namespaces() -> bool:
    return not missing_capabilities()


def require_namespace_privileges(command: str, fallback: str = "") -> None:
    """Raise a one-line :class:`DeployError` unless the namespace
    capabilities are there; ``fallback`` says what works without them."""
    missing = missing_capabilities()
    if missing:
        hint = f", or {fallback}" if fallback else ""
        raise DeployError(f"{command} needs {' and '.join(missing)} (run as root){hint}")
