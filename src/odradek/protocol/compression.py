"""Compression codecs of Kafka record batches (attributes bits 0-2), through cramjam.

Only the dump tool, the compactor, tests and the client decompress: the broker stores
compressed batches exactly as producers send them.
"""

from __future__ import annotations

import struct
from enum import IntEnum

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


def decompress(codec: int, data: bytes) -> bytes:
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == Codec.SNAPPY:
        if bytes(data[:8]) == _XERIAL_MAGIC:
            return _xerial_decompress(bytes(data))
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == Codec.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec id {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Codec.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec id {codec}")
