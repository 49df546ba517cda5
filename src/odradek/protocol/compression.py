"""Compression codecs of Kafka record batches (attributes bits 0-2), through cramjam.

Only the dump tool, the compactor, tests and the client decompress: the broker stores
compressed batches exactly as producers send them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import cramjam


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Codec:
        try:
            return {"none": cls.NONE, "uncompressed": cls.NONE, "gzip": cls.GZIP,
                    "snappy": cls.SNAPPY, "lz4": cls.LZ4, "zstd": cls.ZSTD}[name.lower()]
        except KeyError:
            raise ValueError(f"unknown compression codec {name!r}") from None


# Java clients (snappy-java's SnappyOutputStream) frame snappy data; librdkafka sends raw snappy.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _xerial_decompress(data: bytes) -> bytes:
    pos = 16  # magic (8) + version (4) + compatible version (4)
    out = bytearray()
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + size]))
        pos += size
    return bytes(out)


def _snappy_decompress(data: bytes) -> bytes:
    if bytes(data[:8]) == _XERIAL_MAGIC:
        return _xerial_decompress(bytes(data))
    return bytes(cramjam.snappy.decompress_raw(data))


# codec -> (compress, decompress); NONE copies
_CODECS: dict[int, tuple[Callable[[bytes], Any], Callable[[bytes], Any]]] = {
    Codec.NONE: (bytes, bytes),
    Codec.GZIP: (cramjam.gzip.compress, cramjam.gzip.decompress),
    Codec.SNAPPY: (cramjam.snappy.compress_raw, _snappy_decompress),
    Codec.LZ4: (cramjam.lz4.compress, cramjam.lz4.decompress),
    Codec.ZSTD: (cramjam.zstd.compress, cramjam.zstd.decompress),
}


def _codec(codec: int) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    try:
        return _CODECS[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec id {codec}") from None


def decompress(codec: int, data: bytes) -> bytes:
    return bytes(_codec(codec)[1](data))


def compress(codec: int, data: bytes) -> bytes:
    return bytes(_codec(codec)[0](data))
