"""Wire primitives shared by the hand-written encoders (hot-path responses)."""

from __future__ import annotations

import struct

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def uvarint(n: int) -> bytes:
    """Unsigned varint (compact lengths, tag counts)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_or_legacy_length(n: int, flexible: bool, legacy: struct.Struct = INT32) -> bytes:
    """An array/string length: compact (n + 1 as uvarint) in flexible versions, else fixed."""
    return uvarint(n + 1) if flexible else legacy.pack(n)


def string(s: str, flexible: bool) -> bytes:
    b = s.encode()
    return compact_or_legacy_length(len(b), flexible, INT16) + b


def nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    return string(s, flexible)
