"""The token file, the bearer metadata and TLS credentials, with their one-line errors in both namings."""

from __future__ import annotations

import grpc
import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.service import auth
from optimizer_service.wire.credentials import (
    OPTION_NAMES,
    VARIABLE_NAMES,
    AuthSetupError,
    bearer,
    channel_credentials,
    read_file,
    read_token,
)


def test_the_token_is_the_files_one_word(tmp_path):
    path = tmp_path / "token"
    path.write_text("\n  short-token \n")
    assert read_token(path) == read_token(path, VARIABLE_NAMES) == "short-token"
    with pytest.raises(AuthSetupError, match="fewer than the 16 required"):      # the service's own rule
        auth.read_token(path)
    path.write_text("a" * 32 + "\n")
    assert auth.read_token(path) == "a" * 32


@pytest.mark.parametrize("content,problem", [
    (b"", "must hold one token (no spaces), got nothing"),
    (b" \n\t", "must hold one token (no spaces), got nothing"),
    (b"two words", "must hold one token (no spaces), got several words"),
    (b"\xff\xfe token", "is not text"),
])
def test_a_token_file_that_cannot_be_used_says_why_naming_it_as_its_user_did(tmp_path, content, problem):
    path = tmp_path / "token"
    path.write_bytes(content)
    for names, label in ((OPTION_NAMES, f"the token file {path}"), (VARIABLE_NAMES, f"P2_TOKEN_FILE={path}")):
        with pytest.raises(AuthSetupError) as caught:
            read_token(path, names)
        assert str(caught.value) == f"{label} {problem}"


def test_an_unreadable_file_is_one_line_and_a_user_error(tmp_path):
    absent = tmp_path / "absent"
    with pytest.raises(AuthSetupError) as caught:
        read_token(absent, VARIABLE_NAMES)
    assert str(caught.value) == f"cannot read P2_TOKEN_FILE={absent}: No such file or directory"
    assert isinstance(caught.value, InvalidInputError)          # the CLI answers it with exit code 2
    with pytest.raises(AuthSetupError, match=f"^cannot read the TLS key {tmp_path}: Is a directory$"):
        read_file(tmp_path, OPTION_NAMES.of(OPTION_NAMES.key, tmp_path))


def test_the_bearer_metadata():
    assert bearer("s3cret") == [("authorization", "Bearer s3cret")]
    assert bearer(None) == bearer("") == []


def test_channel_credentials_from_pem_files(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")         # read, not parsed, until a connection uses it
    assert channel_credentials(None) is None                      # plaintext
    assert channel_credentials(None, None, str(ca)) is None       # a key alone asks for nothing
    assert isinstance(channel_credentials(str(ca)), grpc.ChannelCredentials)
    assert isinstance(channel_credentials(None, str(ca), str(ca)), grpc.ChannelCredentials)   # system roots
    with pytest.raises(AuthSetupError, match=r"^a client certificate needs its key too \(--tls-cert and --tls-key\)$"):
        channel_credentials(str(ca), str(ca))
    with pytest.raises(AuthSetupError, match=r"\(P2_TLS_CERT and P2_TLS_KEY\)$"):
        channel_credentials(None, str(ca), names=VARIABLE_NAMES)
    with pytest.raises(AuthSetupError, match=f"^cannot read P2_TLS_KEY={tmp_path}/key.pem: No such file"):
        channel_credentials(str(ca), str(ca), str(tmp_path / "key.pem"), VARIABLE_NAMES)
    with pytest.raises(AuthSetupError, match=f"^cannot read the TLS CA certificate {tmp_path}/none.pem: "):
        channel_credentials(str(tmp_path / "none.pem"))
