"""Compression codecs of record batches (odradek.protocol.compression)."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import Codec, compress, decompress

XERIAL_MAGIC = b"\x82SNAPPY\x00"


@settings(max_examples=40, deadline=None)
@given(codec=st.sampled_from(list(Codec)), data=st.binary(max_size=4096))
def test_round_trip(codec: Codec, data: bytes) -> None:
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(int(codec), bytearray(packed)) == data


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_compressible_data_shrinks(codec: Codec) -> None:
    data = b"odradek " * 1000
    packed = compress(codec, data)
    assert len(packed) < len(data) // 4
    assert decompress(codec, packed) == data


def test_none_is_identity() -> None:
    assert compress(Codec.NONE, b"abc") == b"abc"
    assert decompress(Codec.NONE, memoryview(b"abc")) == b"abc"


def test_formats_are_the_standard_ones() -> None:
    """What other Kafka clients send: a gzip member, raw snappy, an LZ4 frame, a zstd frame."""
    data = b"hello kafka " * 20
    assert gzip.decompress(compress(Codec.GZIP, data)) == data
    assert decompress(Codec.GZIP, gzip.compress(data)) == data
    assert bytes(cramjam.snappy.decompress_raw(compress(Codec.SNAPPY, data))) == data
    assert compress(Codec.LZ4, data)[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert compress(Codec.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic


def _xerial(chunks: list[bytes]) -> bytes:
    out = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for chunk in chunks:
        raw = bytes(cramjam.snappy.compress_raw(chunk))
        out += struct.pack(">i", len(raw)) + raw
    return out


@pytest.mark.parametrize(
    "chunks",
    [[b"single chunk of data"], [b"a" * 100, b"", b"b" * 3000, b"tail"], []],
    ids=["one", "several", "none"],
)
def test_snappy_xerial_framing(chunks: list[bytes]) -> None:
    assert decompress(Codec.SNAPPY, _xerial(chunks)) == b"".join(chunks)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=5))
def test_snappy_xerial_framing_random(chunks: list[bytes]) -> None:
    assert decompress(Codec.SNAPPY, _xerial(chunks)) == b"".join(chunks)


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 99])
def test_unknown_codec_id(codec: int) -> None:
    with pytest.raises(ValueError, match="unknown compression codec"):
        compress(codec, b"x")
    with pytest.raises(ValueError, match="unknown compression codec"):
        decompress(codec, b"x")


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", Codec.NONE), ("uncompressed", Codec.NONE), ("GZIP", Codec.GZIP),
     ("snappy", Codec.SNAPPY), ("lz4", Codec.LZ4), ("Zstd", Codec.ZSTD)],
)
def test_codec_from_name(name: str, codec: Codec) -> None:
    assert Codec.from_name(name) is codec


def test_codec_from_unknown_name() -> None:
    with pytest.raises(ValueError, match="brotli"):
        Codec.from_name("brotli")
