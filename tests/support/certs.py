"""A throwaway certificate authority for TLS tests, made with the openssl command."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MISSING = "the openssl command is not installed"


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _issue(folder: Path, name: str, subject: str, ca: Path, ca_key: Path, extensions: str) -> tuple[Path, Path]:
    key, request, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    config = folder / f"{name}.ext"
    config.write_text(extensions)
    _run("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(request), "-subj", subject)
    _run("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-out", str(cert), "-days", "2", "-extfile", str(config))
    return cert, key


def make_certificates(folder: Path) -> Certificates:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
         "-subj", "/CN=p2 test CA")
    server = _issue(folder, "server", "/CN=localhost", ca, ca_key,
                    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    client = _issue(folder, "client", "/CN=p2 test client", ca, ca_key, "extendedKeyUsage=clientAuth\n")
    return Certificates(ca, *server, *client)
