"""Size-prefixed framing of the Kafka protocol, sans-IO (bytes in, frames out).

Every request and response is a 4-byte big-endian size followed by that many bytes. A size above
`socket.request.max.bytes` or below the smallest request header is an error the connection
closes on (Kafka's InvalidReceiveException), before any of the body is buffered.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
MIN_REQUEST_SIZE = 8  # api key (2) + api version (2) + correlation id (4)


class FrameError(ValueError):
    """A frame that can never be valid: negative, too small or over the size limit."""


class FrameDecoder:
    """Accumulates received bytes and yields whole frames (payload without the size prefix)."""

    __slots__ = ("_buf", "_max_size", "_need", "limit_name", "min_size")

    def __init__(self, max_size: int, limit_name: str = "socket.request.max.bytes") -> None:
        self._buf = bytearray()
        self._max_size = max_size
        self._need = -1  # size of the frame being received, -1 while reading the prefix
        self.limit_name = limit_name  # named in the error of a frame over the limit
        self.min_size = MIN_REQUEST_SIZE  # 0 while bare SASL tokens are expected (KIP-152)

    def set_limit(self, max_size: int, limit_name: str) -> None:
        """Change the largest frame accepted from the next size prefix on (a SASL listener
        bounds frames by sasl.server.max.receive.size until the client is authenticated)."""
        self._max_size = max_size
        self.limit_name = limit_name

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame now complete. Raises FrameError.

        Each frame's payload is copied once: straight out of `data` when nothing is buffered
        (the common case of whole requests per read), else out of the reassembly buffer."""
        frames: list[bytes] = []
        if not self._buf:
            with memoryview(data) as view:
                pos = self._split(view, 0, len(view), frames)
                if pos < len(view):
                    self._buf += view[pos:]
            return frames
        buf = self._buf
        buf += data
        with memoryview(buf) as view:
            pos = self._split(view, 0, len(buf), frames)
        if pos:
            del buf[:pos]
        return frames

    def _split(self, view: memoryview, pos: int, end: int, frames: list[bytes]) -> int:
        while True:
            if self._need < 0:
                if end - pos < 4:
                    return pos
                (size,) = _SIZE.unpack_from(view, pos)
                if size < self.min_size:
                    raise FrameError(f"invalid frame size {size}")
                if size > self._max_size:
                    raise FrameError(
                        f"frame of {size} bytes is larger than {self.limit_name} "
                        f"({self._max_size})"
                    )
                self._need = size
                pos += 4
            if end - pos < self._need:
                return pos
            frames.append(view[pos:pos + self._need].tobytes())
            pos += self._need
            self._need = -1


def frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)
