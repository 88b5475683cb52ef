"""The service image's HEALTHCHECK: the standard gRPC health service of ``p2 serve``.

    python healthcheck.py [ADDRESS] [--service NAME] [--ca FILE]

Asks ADDRESS (default ``127.0.0.1:50051``, the image's ``--listen`` port) for
NAME (default ``liveness``: SERVING on every live service, a standby too, so
that Docker does not restart a healthy standby; ``--service ""`` asks for
readiness, SERVING on the leader only). A service that has no ``liveness`` name
(before leader election) is asked for ``""``. Exit 0 when SERVING, else 1 with
one line. Health checks need no token; ``--ca`` checks a service that serves TLS.
A compose file or an operator that moves the port gives the health check the
same address.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, names: tuple[str, ...], ca_file: str | None) -> str | None:
    """``None`` when the first name the service knows is SERVING; otherwise why not."""
    credentials = grpc.ssl_channel_credentials(Path(ca_file).read_bytes()) if ca_file else None
    with (grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in names:
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=3).status
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    continue
                return f"{address}: {error.code().name} {error.details() or ''}".strip()
            if status == health_pb2.HealthCheckResponse.SERVING:
                return None
            return f"{address} {name or 'readiness'}: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}"
    return f"{address}: none of {names} is known to its health service"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", nargs="?", default="127.0.0.1:50051")
    parser.add_argument("--service", default="liveness", help="the health service name to ask ('' for readiness)")
    parser.add_argument("--ca", help="the CA certificate of a service that serves TLS (PEM)")
    args = parser.parse_args(argv)
    names = (args.service, "") if args.service else ("",)
    problem = check(args.address, names, args.ca)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
