"""The producer's per-record encoder (S-7.1) writes exactly what protocol.records.encode_record
writes: table varints in the common case, the general encoder beyond it."""

from __future__ import annotations

import random

import pytest

from odradek.client.producer_batch import encode_plain_record
from odradek.protocol.records import encode_record

EDGES = [0, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 1 << 20]


@pytest.mark.parametrize("offset_delta", EDGES)
@pytest.mark.parametrize("timestamp_delta", [*EDGES, -1, -5000])
def test_deltas_at_the_varint_boundaries(offset_delta: int, timestamp_delta: int) -> None:
    for key, value in [(None, None), (b"", b""), (b"k", b"v" * 100), (None, b"x" * 70)]:
        assert encode_plain_record(offset_delta, timestamp_delta, key, value) == \
            encode_record(offset_delta, timestamp_delta, key, value)


@pytest.mark.parametrize("size", [0, 1, 40, 41, 63, 64, 100, 8150, 8191, 8192, 16383, 16384,
                                  100_000])
def test_key_and_value_sizes(size: int) -> None:
    blob = bytes(range(256)) * (size // 256 + 1)
    for key, value in [(blob[:size], None), (None, blob[:size]), (blob[:size], blob[:size])]:
        assert encode_plain_record(3, 7, key, value) == encode_record(3, 7, key, value)


def test_headers_take_the_general_path() -> None:
    headers = [("h", b"1"), ("n", None)]
    assert encode_plain_record(1, 2, b"k", b"v", headers) == \
        encode_record(1, 2, b"k", b"v", headers)


def test_random_records() -> None:
    rng = random.Random(7)
    for _ in range(500):
        od, td = rng.randrange(0, 20_000), rng.randrange(-100, 20_000)
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 300))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20_000))
        assert encode_plain_record(od, td, key, value) == encode_record(od, td, key, value)
