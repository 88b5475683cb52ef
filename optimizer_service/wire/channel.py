"""A client's gRPC channel to the service: its options and how it is opened.

Every channel takes messages up to :data:`~.limits.MAX_MESSAGE_BYTES` both
ways (a Prepare carries the plan). A rank's channel also pings
(:data:`RANK_OPTIONS`), to find a service host that died without closing the
stream; it pings less often than the service lets a client
(:data:`SERVER_MIN_PING_INTERVAL_MS`), which ``tests/optimizer_service/wire/``
checks: a client pinging faster is sent GOAWAY ("too_many_pings").
"""

from __future__ import annotations

import grpc

from optimizer_service.wire.limits import MAX_MESSAGE_BYTES

MESSAGE_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES))
#: The most often the service accepts a ping on a connection without data in flight.
SERVER_MIN_PING_INTERVAL_MS = 5_000
RANK_KEEPALIVE_MS = 20_000              # a rank pings the service this often ...
RANK_KEEPALIVE_TIMEOUT_MS = 10_000      # ... and drops the connection when a ping goes unanswered this long
RANK_OPTIONS = (*MESSAGE_OPTIONS, ("grpc.keepalive_time_ms", RANK_KEEPALIVE_MS),
                ("grpc.keepalive_timeout_ms", RANK_KEEPALIVE_TIMEOUT_MS))


def open_channel(address: str, credentials: grpc.ChannelCredentials | None,
                 options: tuple[tuple[str, int], ...] = MESSAGE_OPTIONS) -> grpc.Channel:
    """A channel to ``address``: TLS with ``credentials``, plaintext without
    (:func:`~.credentials.channel_credentials` gives either)."""
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)
