"""Who a caller is on the wire: the bearer token and TLS, read from files.

The token travels as call metadata, ``authorization: Bearer TOKEN``
(:func:`bearer`); it is read from a file holding exactly one token
(:func:`read_token`). TLS channel credentials come from PEM files: a CA to
trust and, for mutual TLS, a client certificate with its key
(:func:`channel_credentials`). A file that cannot be used raises
:class:`AuthSetupError`, one line naming the file the way its user named it:
the service's command-line options (:data:`OPTION_NAMES`) or the enforcer's
environment variables (:data:`VARIABLE_NAMES`).

The service's own acceptance rules (the shortest token it takes, which calls
need one) are the service's: ``optimizer_service/service/auth.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from optimizer_service.errors import InvalidInputError

METADATA_KEY = "authorization"


class AuthSetupError(InvalidInputError):
    """A token or certificate file that cannot be used."""


@dataclass(frozen=True)
class FileNames:
    """What one-line errors call the credential files: the name their user gave
    each, then the path (``the TLS key /etc/p2/key.pem``, ``P2_TLS_KEY=/etc/p2/key.pem``)."""

    token: str
    ca: str
    cert: str
    key: str
    pair: str                   # how to give a client certificate with its key
    separator: str = " "        # between a name and its path

    def of(self, name: str, path: str | Path) -> str:
        return f"{name}{self.separator}{path}"


OPTION_NAMES = FileNames(token="the token file", ca="the TLS CA certificate", cert="the TLS certificate",
                         key="the TLS key", pair="--tls-cert and --tls-key")
VARIABLE_NAMES = FileNames(token="P2_TOKEN_FILE", ca="P2_TLS_CA", cert="P2_TLS_CERT", key="P2_TLS_KEY",
                           pair="P2_TLS_CERT and P2_TLS_KEY", separator="=")


def read_file(path: str | Path, label: str) -> bytes:
    """The bytes of the credential file ``path``; ``label`` names it in the error."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise AuthSetupError(f"cannot read {label}: {error.strerror}") from None


def read_token(path: str | Path, names: FileNames = OPTION_NAMES) -> str:
    """The one token in ``path``, surrounding whitespace stripped; one line if it cannot be."""
    label = names.of(names.token, path)
    try:
        token = read_file(path, label).decode()
    except UnicodeDecodeError:
        raise AuthSetupError(f"{label} is not text") from None
    token = token.strip()
    if not token or any(c.isspace() for c in token):
        raise AuthSetupError(f"{label} must hold one token (no spaces), got "
                             f"{'nothing' if not token else 'several words'}")
    return token


def authorization(token: str) -> str:
    """The ``authorization`` metadata value that carries ``token``."""
    return f"Bearer {token}"


def bearer(token: str | None) -> list[tuple[str, str]]:
    """The call metadata that carries ``token`` (none without one)."""
    return [(METADATA_KEY, authorization(token))] if token else []


def channel_credentials(ca: str | Path | None, cert: str | Path | None = None, key: str | Path | None = None,
                        names: FileNames = OPTION_NAMES) -> grpc.ChannelCredentials | None:
    """Client TLS credentials, or ``None`` (plaintext) without a CA or a client certificate:
    trust ``ca`` (default: the system's roots); a client certificate and its key for mutual TLS."""
    if not ca and not cert:
        return None
    if bool(cert) != bool(key):
        raise AuthSetupError(f"a client certificate needs its key too ({names.pair})")
    return grpc.ssl_channel_credentials(root_certificates=read_file(ca, names.of(names.ca, ca)) if ca else None,
                                        private_key=read_file(key, names.of(names.key, key)) if key else None,
                                        certificate_chain=read_file(cert, names.of(names.cert, cert)) if cert else None)
