"""How ``p2 jobs`` and ``p2 plan`` reach the service: address, token, TLS, and
gRPC errors as one line.

The address is ``--service`` (default ``P2_SERVICE``, else
``127.0.0.1:50051``): one ``HOST:PORT`` or several, comma-separated, of which
the client finds the leader (a standby names it; an address that refuses the
connection is skipped). The token is ``--token-file`` (default ``P2_TOKEN_FILE``,
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
from optimizer_service.wire.channel import MESSAGE_OPTIONS, open_channel
from optimizer_service.wire.credentials import bearer, channel_credentials
from optimizer_service.wire.leader import Targets, leader_hint, parse_addresses
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
        click.option("--service", metavar="HOST:PORT[,...]", help="The service, or several: the leader is found "
                     "(default: P2_SERVICE, else 127.0.0.1:50051)."),
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


#: Words of an UNAVAILABLE answer that say the call did nothing there: a standby's refusal, or no connection.
NOT_DELIVERED = ("standby", "failed to connect", "connection refused", "name resolution", "dns resolution")


@dataclass
class Client:
    targets: Targets
    stub: optimizer_pb2_grpc.OptimizerStub
    channel: grpc.Channel
    metadata: list[tuple[str, str]]
    timeout: float
    credentials: grpc.ChannelCredentials | None = None

    @property
    def address(self) -> str:
        return self.targets.current

    def call(self, method: str, request):
        """One call, at the leader: a standby's refusal or a refused connection moves on to the
        named leader or the next address (a call that may have reached a service is not repeated)."""
        tries = len(self.targets.addresses) + 1
        while True:
            try:
                return getattr(self.stub, method)(request, metadata=self.metadata, timeout=self.timeout)
            except grpc.RpcError as error:
                tries -= 1
                if tries == 0 or not self._elsewhere(error):
                    raise self.explain(error) from None
                self.targets.failed(error)
                self.channel.close()
                self.channel = open_channel(self.targets.current, self.credentials, self.targets.options(MESSAGE_OPTIONS))
                self.stub = optimizer_pb2_grpc.OptimizerStub(self.channel)

    def _elsewhere(self, error: grpc.RpcError) -> bool:
        """Whether another address may answer what this one did not, the call not having run here."""
        if error.code() is not grpc.StatusCode.UNAVAILABLE:
            return False
        if leader_hint(error) is not None:
            return True
        details = (error.details() or "").lower()
        return self.targets.several and any(words in details for words in NOT_DELIVERED)

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
    targets = Targets(parse_addresses(service or settings.service, "--service" if service else "P2_SERVICE"))
    credentials = channel_credentials(tls_ca, tls_cert, tls_key)
    channel = open_channel(targets.current, credentials, targets.options(MESSAGE_OPTIONS))
    return Client(targets, optimizer_pb2_grpc.OptimizerStub(channel), channel,
                  bearer(settings.service_token(token_file)), timeout, credentials)
