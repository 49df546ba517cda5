"""An in-process broker with a SASL_PLAINTEXT listener for the SASL tests.

Until the listener-aware Metadata and inter-broker connector (helper SA) are merged, the broker
also has a PLAINTEXT listener for its own controller channel, and its metadata cache is wrapped
so that a request that came in on the SASL listener sees every broker at the SASL listener's
port (what Kafka's listener-aware Metadata/FindCoordinator answers do)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

from odradek.server.broker import Broker
from odradek.server.configs.config import KafkaConfig
from odradek.server.metadata_cache import MetadataCache

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


_LISTENER: contextvars.ContextVar[str] = contextvars.ContextVar("listener", default="")


class _SaslAdvertisingCache(MetadataCache):
    """While a SASL listener's request is handled, brokers are at the SASL listener's port."""

    sasl_port: int | None = None

    @property  # type: ignore[override]
    def brokers(self) -> dict[int, Any]:
        found = self.__dict__.get("_brokers", {})
        if self.sasl_port is None or _LISTENER.get() != "SASL_PLAINTEXT":
            return found
        return {k: dataclasses.replace(v, port=self.sasl_port) for k, v in found.items()}

    @brokers.setter
    def brokers(self, value: dict[int, Any]) -> None:
        self.__dict__["_brokers"] = value


def sasl_props(log_dir: Path, **overrides: str) -> dict[str, str]:
    props = {"broker.id": "0", "log.dirs": str(log_dir),
             "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
             "sasl.enabled.mechanisms": MECHANISMS,
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
             "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
             "group.initial.rebalance.delay.ms": "0"}
    props.update(overrides)
    return props


async def _in_listener(listener: str, result: Awaitable[Any]) -> Any:
    _LISTENER.set(listener)
    return await result


@contextlib.asynccontextmanager
async def sasl_broker(log_dir: Path, **overrides: str) -> AsyncIterator[Broker]:
    broker = Broker(KafkaConfig.from_properties(sasl_props(log_dir, **overrides)))
    cache = broker.metadata_cache
    cache.__class__ = _SaslAdvertisingCache
    cache.__dict__["_brokers"] = cache.__dict__.pop("brokers", {})
    await broker.start()
    assert isinstance(cache, _SaslAdvertisingCache)
    cache.sasl_port = broker.bound_ports[0]
    server = broker.socket_server
    assert server is not None
    handle = server.handler

    def handler(conn: Any, payload: bytes) -> Any:
        token = _LISTENER.set(conn.listener_name)
        try:
            result = handle(conn, payload)
        finally:
            _LISTENER.reset(token)
        if isinstance(result, Awaitable):
            return _in_listener(conn.listener_name, result)
        return result

    server.handler = handler
    try:
        yield broker
    finally:
        if broker.started:
            await broker.stop()
