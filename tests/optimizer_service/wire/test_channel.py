"""A channel to the service: its options agree with the server's, and TLS with a token goes through."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from optimizer_service.service.auth import server_credentials
from optimizer_service.service.server import OPTIONS
from optimizer_service.wire.channel import (
    MESSAGE_OPTIONS,
    RANK_KEEPALIVE_MS,
    RANK_OPTIONS,
    SERVER_MIN_PING_INTERVAL_MS,
    open_channel,
)
from optimizer_service.wire.credentials import VARIABLE_NAMES, bearer, channel_credentials
from optimizer_service.wire.limits import MAX_MESSAGE_BYTES
from tests.support.certs import MISSING, have_openssl, make_certificates

ECHO = "/wire.test.Echo/Authorization"


def test_the_options_agree_with_the_servers():
    server = dict(OPTIONS)
    for options in (MESSAGE_OPTIONS, RANK_OPTIONS):
        assert dict(options)["grpc.max_receive_message_length"] == MAX_MESSAGE_BYTES
        assert dict(options)["grpc.max_send_message_length"] == MAX_MESSAGE_BYTES
    assert server["grpc.max_receive_message_length"] == server["grpc.max_send_message_length"] == MAX_MESSAGE_BYTES
    # a client pinging more often than the server permits is sent GOAWAY ("too_many_pings")
    assert server["grpc.http2.min_ping_interval_without_data_ms"] == SERVER_MIN_PING_INTERVAL_MS
    assert dict(RANK_OPTIONS)["grpc.keepalive_time_ms"] == RANK_KEEPALIVE_MS >= SERVER_MIN_PING_INTERVAL_MS


def echo_server(credentials: grpc.ServerCredentials | None) -> tuple[grpc.Server, int]:
    """A server answering ECHO with the call's authorization metadata."""
    def echo(request: bytes, context) -> bytes:
        return dict(context.invocation_metadata()).get("authorization", "").encode()

    handler = grpc.method_handlers_generic_handler(
        "wire.test.Echo", {"Authorization": grpc.unary_unary_rpc_method_handler(echo)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = (server.add_insecure_port("127.0.0.1:0") if credentials is None
            else server.add_secure_port("127.0.0.1:0", credentials))
    server.start()
    return server, port


def call(channel: grpc.Channel, token: str | None) -> bytes:
    with channel:
        return channel.unary_unary(ECHO)(b"", metadata=bearer(token), timeout=10)


def test_a_plaintext_channel_carries_the_token():
    server, port = echo_server(None)
    try:
        assert call(open_channel(f"127.0.0.1:{port}", channel_credentials(None), RANK_OPTIONS), "tok") == b"Bearer tok"
        assert call(open_channel(f"127.0.0.1:{port}", None), None) == b""
    finally:
        server.stop(None)


@pytest.mark.skipif(not have_openssl(), reason=MISSING)
def test_mutual_tls_from_the_pem_files(tmp_path):
    certs = make_certificates(tmp_path)
    server, port = echo_server(server_credentials(str(certs.server_cert), str(certs.server_key), str(certs.ca)))
    address = f"localhost:{port}"
    try:
        credentials = channel_credentials(str(certs.ca), str(certs.client_cert), str(certs.client_key), VARIABLE_NAMES)
        assert call(open_channel(address, credentials, RANK_OPTIONS), "tok") == b"Bearer tok"
        with pytest.raises(grpc.RpcError) as refused:           # no client certificate: the handshake fails
            call(open_channel(address, channel_credentials(str(certs.ca))), "tok")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(None)
