import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.units import (
    format_bytes,
    format_rate,
    format_seconds,
    parse_bytes,
    parse_rate,
    parse_seconds,
)


@pytest.mark.parametrize("text,value", [("1024", 1024), ("64MiB", 64 * 2**20), ("1.5GB", 1_500_000_000),
                                        ("2 KiB", 2048), (4096, 4096)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text,value", [("8e9", 8e9), ("270GB/s", 270e9), ("200Mbit/s", 25e6),
                                        ("100 Gbit/s", 12.5e9), (32e9, 32e9)])
def test_parse_rate(text, value):
    assert parse_rate(text) == pytest.approx(value)


@pytest.mark.parametrize("text,value", [("3us", 3e-6), ("0.5ms", 5e-4), ("2e-6", 2e-6), ("0", 0.0), ("1s", 1.0)])
def test_parse_seconds(text, value):
    assert parse_seconds(text) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["", "fast", "12QB", "-3MiB", "0.5", "1e400GB"])
def test_bad_byte_sizes_are_rejected_with_a_message(bad):
    with pytest.raises(InvalidInputError, match="byte size"):
        parse_bytes(bad)


@pytest.mark.parametrize("bad", ["0GB/s", "-1GB/s", "9 furlongs", "nan"])
def test_bad_rates_are_rejected(bad):
    with pytest.raises(InvalidInputError, match="bandwidth"):
        parse_rate(bad)


@pytest.mark.parametrize("value", [1, 1000, 2**20, 3 * 2**30, 123457])
def test_bytes_round_trip(value):
    assert parse_bytes(format_bytes(value)) == value


@pytest.mark.parametrize("value", [8e9, 270e9, 25e6, 12.5e9, 1.0, 3.3333333e9, 0.7])
def test_rate_round_trip(value):
    assert parse_rate(format_rate(value)) == value


@pytest.mark.parametrize("value", [0.0, 3e-6, 2.5e-5, 1.0, 1e-9, 0.123456789])
def test_seconds_round_trip(value):
    assert parse_seconds(format_seconds(value)) == value
