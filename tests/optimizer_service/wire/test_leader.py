"""The addresses a client is given and the order it tries them in (optimizer_service/wire/leader.py)."""

from __future__ import annotations

import grpc
import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.wire.leader import (
    LEADER_METADATA_KEY,
    Targets,
    expand,
    from_standby,
    leader_hint,
    parse_addresses,
)


class Refusal(grpc.RpcError):
    """An RpcError as a client sees it: a code, details and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str = "", leader: str | None = None) -> None:
        self._code, self._details = code, details
        self._trailing = ((LEADER_METADATA_KEY, leader),) if leader else ()

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


def test_addresses_are_parsed_in_order_without_repeats():
    assert parse_addresses("a:1", "P2_SERVICE") == ("a:1",)
    assert parse_addresses(" a:1, b:2 ,a:1,", "P2_SERVICE") == ("a:1", "b:2")
    assert parse_addresses("[::1]:50051", "P2_SERVICE") == ("[::1]:50051",)
    for bad in ("a", "a:", ":1", "a:x", "a:0", "a:70000", "a:1,b"):
        with pytest.raises(InvalidInputError, match="is not HOST:PORT"):
            parse_addresses(bad, "P2_SERVICE")
    with pytest.raises(InvalidInputError, match="P2_SERVICE is empty"):
        parse_addresses(" , ", "P2_SERVICE")


def test_a_named_leader_is_tried_next_and_a_failed_one_not_twice():
    targets = Targets(("a:1", "b:2"))
    assert targets.current == "a:1"
    assert not targets.failed(Refusal(grpc.StatusCode.UNAVAILABLE, "failed to connect"))
    assert targets.current == "b:2"
    assert targets.failed(Refusal(grpc.StatusCode.UNAVAILABLE, "standby", leader="a:1"))  # b names a dead a
    assert targets.current == "a:1" and targets.hinted
    assert not targets.failed(Refusal(grpc.StatusCode.UNAVAILABLE, "failed to connect"))
    assert targets.current == "b:2", "a, just failed, is not tried again at once"
    assert targets.failed(Refusal(grpc.StatusCode.UNAVAILABLE, "standby", leader="c:3"))   # a leader not listed
    assert targets.current == "c:3"
    assert not targets.failed(None) and targets.current in ("a:1", "b:2")
    lone = Targets(("a:1",))
    assert not lone.failed(None) and lone.current == "a:1" and not lone.several


def test_a_standby_refusal_is_told_from_other_errors():
    assert from_standby(Refusal(grpc.StatusCode.UNAVAILABLE, "this p2 serve is a standby; no leader yet"))
    assert from_standby(Refusal(grpc.StatusCode.UNAVAILABLE, "x", leader="a:1"))
    assert not from_standby(Refusal(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"))
    assert not from_standby(Refusal(grpc.StatusCode.UNAUTHENTICATED, "standby"))
    assert not from_standby(None)
    assert leader_hint(Refusal(grpc.StatusCode.UNAVAILABLE, "x", leader="a:1")) == "a:1"
    assert leader_hint(Refusal(grpc.StatusCode.UNAVAILABLE, "x")) is None


def test_a_name_that_resolves_to_several_addresses_is_tried_as_each_and_looked_up_every_round():
    answers = {"svc": ["10.0.0.1", "10.0.0.2", "10.0.0.1"]}

    def resolver(host: str, port: int) -> list[str]:
        return answers.get(host, [])

    targets = Targets(("svc:50051", "other:7"), resolver)
    assert targets.addresses == ("10.0.0.1:50051", "10.0.0.2:50051", "other:7") and targets.several
    assert targets.options((("a", 1),)) == (("a", 1), ("grpc.ssl_target_name_override", "svc"))
    answers["svc"] = ["10.0.0.3", "fd00::4"]                        # the pods moved
    for _ in range(3):
        targets.failed(None)
    assert targets.addresses == ("10.0.0.3:50051", "[fd00::4]:50051", "other:7")
    assert targets.current == "10.0.0.3:50051"
    assert Targets(("other:7",), resolver).options() == ()          # a name that resolves to one: as given
    assert Targets(("127.0.0.1:5",), resolver).addresses == ("127.0.0.1:5",)
    assert expand("[::1]:5", resolver) == ("[::1]:5",) and expand("nowhere:5", resolver) == ("nowhere:5",)


def test_names_are_resolved_by_the_system_resolver():
    """localhost through getaddrinfo: one address (kept as the name) or several (each, in order)."""
    found = expand("localhost:50051")
    assert found == ("localhost:50051",) or all(t.endswith(":50051") and "localhost" not in t for t in found)
