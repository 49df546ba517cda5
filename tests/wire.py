"""A minimal Kafka wire client for tests: kio requests over an asyncio socket, raw frames too."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from odradek.protocol.codec import decode_response, encode_request, response_class


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation_id = 0

    @classmethod
    async def connect(cls, host: str, port: int) -> WireClient:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()

    def send(self, request: Any, client_id: str | None = "wire-test") -> int:
        self.correlation_id += 1
        self.writer.write(encode_request(request, self.correlation_id, client_id))
        return self.correlation_id

    async def read_frame(self, timeout: float = 10.0) -> bytes:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))[0]
        return await asyncio.wait_for(self.reader.readexactly(size), timeout)

    async def receive(self, request: Any, timeout: float = 10.0) -> tuple[int, Any]:
        payload = await self.read_frame(timeout)
        return decode_response(response_class(type(request)), payload)

    async def request(self, request: Any, timeout: float = 10.0) -> Any:
        cid = self.send(request)
        got_cid, response = await self.receive(request, timeout)
        assert got_cid == cid, f"correlation id {got_cid} != {cid}"
        return response

    async def raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except (ConnectionError, OSError):
            return True
        return data == b""
