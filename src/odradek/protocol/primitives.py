"""Wire primitives shared by the hand-written encoders (hot-path responses) and by the readers and
writers of the schemas Kafka embeds in bytes fields (consumer protocol, `__consumer_offsets`)."""

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


# -- the non-flexible encodings of Kafka's embedded schemas --------------------------------------
# (ConsumerProtocol's subscription and assignment, the `__consumer_offsets` keys and values):
# int16/int32/int64 big-endian, strings as int16 length + UTF-8, bytes as int32 length + data,
# a negative length meaning null (Kafka's Type.NULLABLE_STRING / NULLABLE_BYTES).


class SchemaError(ValueError):
    """Bytes that do not parse as their schema says, or a value the schema cannot carry
    (Kafka's SchemaException)."""


def write_string(out: bytearray, s: str | None) -> None:
    """int16 length + UTF-8; -1 for null."""
    if s is None:
        out += INT16.pack(-1)
        return
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise SchemaError(f"string of {len(b)} bytes is too long for an int16 length")
    out += INT16.pack(len(b))
    out += b


def write_bytes(out: bytearray, b: bytes | None) -> None:
    """int32 length + data; -1 for null."""
    if b is None:
        out += INT32.pack(-1)
        return
    out += INT32.pack(len(b))
    out += b


class Reader:
    """Reads the fields above from `buf` in order. A read past the end raises SchemaError with
    `truncated` (formatted with the position, ``{pos}``)."""

    __slots__ = ("_truncated", "buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview,
                 truncated: str = "record field runs past the end of the record") -> None:
        self.buf = bytes(buf)
        self.pos = 0
        self._truncated = truncated

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise SchemaError(self._truncated.format(pos=self.pos))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def int16(self) -> int:
        return int(INT16.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(INT32.unpack(self.take(4))[0])

    def int64(self) -> int:
        return int(INT64.unpack(self.take(8))[0])

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"invalid UTF-8 in a string: {exc}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise SchemaError("null in a non-nullable string field")
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.take(n)

    def bytes_(self) -> bytes:
        """Non-nullable bytes (a null reads as empty)."""
        b = self.nullable_bytes()
        return b"" if b is None else b
