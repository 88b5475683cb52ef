"""How ``p2 jobs`` and ``p2 plan`` reach the service: address, token, TLS, and
gRPC errors as one line.

The address is ``--service`` (default ``P2_SERVICE``, else
``127.0.0.1:50051``), the token ``--token-file`` (default ``P2_TOKEN_FILE``,
else ``P2_TOKEN``). A refusal the user can fix (bad argument, no such job or
plan, a plan the job cannot take now, a wrong token) exits 2; an unreachable
service exits 1; both with one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
import grpc

from optimizer_service.errors import InvalidInputError, JobFailedError
from optimizer_service.settings import Settings
from optimizer_service.wire.channel import open_channel
from optimizer_service.wire.credentials import bearer, channel_credentials
from p2.v1 import optimizer_pb2_grpc

USER_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
               grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.ALREADY_EXISTS,
               grpc.StatusCode.OUT_OF_RANGE}


class ServiceRefusedError(InvalidInputError):
    """The service refused the request (exit 2)."""


class ServiceUnreachableError(JobFailedError):
    """The service did not answer (exit 1)."""


def service_options(command):
    """The options every client verb takes."""
    options = [
        click.option("--service", metavar="HOST:PORT", help="The service (default: P2_SERVICE, else 127.0.0.1:50051)."),
        click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
                     help="File with the bearer token (default: P2_TOKEN_FILE, else P2_TOKEN)."),
        click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False),
                     help="Talk TLS, trusting this CA certificate (PEM)."),
        click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False),
                     help="Client certificate for mutual TLS (PEM)."),
        click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="Its private key (PEM)."),
        click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                     help="Seconds to wait for the service."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass
class Client:
    address: str
    stub: optimizer_pb2_grpc.OptimizerStub
    channel: grpc.Channel
    metadata: list[tuple[str, str]]
    timeout: float

    def call(self, method: str, request):
        try:
            return getattr(self.stub, method)(request, metadata=self.metadata, timeout=self.timeout)
        except grpc.RpcError as error:
            raise self.explain(error) from None

    def explain(self, error: grpc.RpcError) -> Exception:
        code, details = error.code(), " ".join((error.details() or "").split())
        if code in USER_ERRORS:
            return ServiceRefusedError(f"{details} ({code.name} from {self.address})")
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return ServiceUnreachableError(f"the service at {self.address} did not answer within {self.timeout:g} s; "
                                           "is 'p2 serve' running there? (--service, P2_SERVICE)")
        if code is grpc.StatusCode.UNAVAILABLE:
            return ServiceUnreachableError(f"cannot reach the service at {self.address} ({details}); start it with "
                                           "'p2 serve' or point --service / P2_SERVICE at it")
        return ServiceUnreachableError(f"the service at {self.address} failed: {code.name}: {details}")

    def close(self) -> None:
        self.channel.close()


def connect(settings: Settings, service: str | None, token_file: Path | None, tls_ca: str | None,
            tls_cert: str | None, tls_key: str | None, timeout: float) -> Client:
    address = service or settings.service
    channel = open_channel(address, channel_credentials(tls_ca, tls_cert, tls_key))
    return Client(address, optimizer_pb2_grpc.OptimizerStub(channel), channel,
                  bearer(settings.service_token(token_file)), timeout)
