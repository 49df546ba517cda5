"""A Metadata request that reaches a broker before the controller's first UpdateMetadata waits
for it instead of answering from a cache that knows only this broker (server/apis/metadata.py).
No sockets: the handler is called with a decoded request and built on just a cache."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from odradek.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    request_class,
    response_class,
)
from odradek.server.apis import metadata
from odradek.server.metadata_cache import BrokerInfo, MetadataCache, PartitionInfo

# What the handler reads of a connection: its listener (the metadata is answered per listener).
CONN = SimpleNamespace(listener_name="PLAINTEXT", principal=None, peer="127.0.0.1:1")


def _request() -> tuple[Any, Any]:
    req = request_class(3, 12)(topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
    return decode_request(encode_request(req, 7, "t")[4:])


def _decode(frame: bytes) -> Any:
    return decode_response(response_class(request_class(3, 12)), frame[4:])[1]


async def _no_creation(_topics: list[str]) -> None:
    raise AssertionError("no topic is created")


def _registered_only() -> metadata.MetadataApi:
    cache = MetadataCache()
    cache.brokers[1] = BrokerInfo(1, "127.0.0.1", 9093)  # what registration puts there
    return metadata.MetadataApi(cache, auto_create_topics_enable=False,
                                auto_create_topics=_no_creation)


def _first_update_metadata(cache: MetadataCache) -> None:
    cache.controller_id = 0
    cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 9092 + b) for b in range(3)}
    cache.update_partition("t", uuid.uuid4(), 0, PartitionInfo(0, 0, [0, 1, 2], [0, 1, 2]))
    cache.initialized.set()


def test_answers_at_once_when_initialized() -> None:
    api = _registered_only()
    _first_update_metadata(api.metadata_cache)
    header, request = _request()
    out = api.handle(header, request, CONN)  # type: ignore[arg-type]
    assert isinstance(out, bytes)
    body = _decode(out)
    assert body.controller_id == 0 and [b.node_id for b in body.brokers] == [0, 1, 2]


def test_waits_for_the_first_update_metadata() -> None:
    async def main() -> Any:
        api = _registered_only()
        header, request = _request()
        pending = api.handle(header, request, CONN)  # type: ignore[arg-type]
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.05)
        assert not task.done()
        _first_update_metadata(api.metadata_cache)
        return _decode(await asyncio.wait_for(task, 5))

    body = asyncio.run(main())
    assert body.controller_id == 0
    assert [b.node_id for b in body.brokers] == [0, 1, 2]
    assert [t.name for t in body.topics] == ["t"]


def test_answers_what_it_has_when_no_controller_comes(monkeypatch: Any) -> None:
    monkeypatch.setattr(metadata, "INITIAL_METADATA_WAIT_S", 0.05)

    async def main() -> Any:
        api = _registered_only()
        header, request = _request()
        return _decode(await api.handle(header, request, CONN))  # type: ignore[arg-type]

    body = asyncio.run(main())
    assert body.controller_id == -1 and [b.node_id for b in body.brokers] == [1]
