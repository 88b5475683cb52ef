"""Names and addresses of an emulated cluster, derived from its name alone.

Everything a cluster creates is named from the cluster name, so that two
clusters never collide and ``p2 cluster down`` can find the leftovers of one
whose state folder is gone (a crash) by looking at ``ip netns list``:

* node ``i`` is the namespace ``p2-NAME-n<i>``; the bridges live in
  ``p2-NAME-br``;
* node ``i``'s NIC on channel ``c`` is ``nic<c>`` inside its namespace; the
  other end of that veth is ``n<i>c<c>`` in the bridge namespace, a port of
  bridge ``br<c>`` (one bridge per channel, so two NICs are independent paths);
* node ``i`` has the address ``10.<slot>.<c>.<i+1>/24`` on channel ``c``, where
  ``slot`` is a number no other cluster uses.

A namespace name is parsed from the right (``p2-<cluster>-<role>``, the role
never contains ``-``), so cluster ``a`` never claims cluster ``a-n0``'s
``p2-a-n0-br``.
"""

from __future__ import annotations

import re

from deploy.errors import DeployError

DEFAULT_NAME = "p2"
NAMESPACE_PREFIX = "p2-"
MAX_NAME_LENGTH = 16
MAX_NODES = 254  # node i is host i+1 of a /24
MAX_CHANNELS = 2
#: ``10.<slot>.*`` blocks handed out to clusters.
SLOTS = range(1, 255)

_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
_NAMESPACE = re.compile(r"^p2-(?P<cluster>[a-z0-9-]+)-(?P<role>br|n(?P<node>[0-9]+))$")


def check_name(name: str) -> str:
    """``name`` if it is a valid cluster name, else a one-line error."""
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_NAME_LENGTH:
        raise DeployError(
            f"cluster name {name!r} must be 1 to {MAX_NAME_LENGTH} characters of a-z, 0-9 and '-', "
            f"starting and ending with a letter or digit (e.g. {DEFAULT_NAME!r} or 'demo-2')")
    return name


def node_namespace(cluster: str, node: int) -> str:
    return f"{NAMESPACE_PREFIX}{cluster}-n{node}"


def bridge_namespace(cluster: str) -> str:
    return f"{NAMESPACE_PREFIX}{cluster}-br"


def node_ifname(channel: int) -> str:
    """The NIC of channel ``channel`` inside a node namespace."""
    return f"nic{channel}"


def bridge_ifname(node: int, channel: int) -> str:
    """The bridge-side end of node ``node``'s channel-``channel`` veth."""
    return f"n{node}c{channel}"


def bridge_name(channel: int) -> str:
    return f"br{channel}"


def node_address(slot: int, channel: int, node: int) -> str:
    """``10.<slot>.<channel>.<node+1>`` (without the prefix length)."""
    return f"10.{slot}.{channel}.{node + 1}"


PREFIX_LENGTH = 24


def parse_namespace(namespace: str) -> tuple[str, str] | None:
    """``(cluster, role)`` of a namespace this tool made (role ``br`` or
    ``n<i>``), or ``None`` for any other namespace."""
    match = _NAMESPACE.match(namespace)
    if not match:
        return None
    return match.group("cluster"), match.group("role")
