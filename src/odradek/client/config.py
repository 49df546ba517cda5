"""Client configuration: Kafka's names, meanings and defaults.

Clients take a dict keyed by Kafka's config names (`{"bootstrap.servers": ..., "acks": "all"}`,
as confluent-kafka does) and/or Python keyword arguments with underscores for dots
(`bootstrap_servers=...`). Values may be strings (as in a properties file) or Python values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

COMMON: dict[str, Any] = {
    "bootstrap.servers": None,
    "client.id": "odradek",
    "request.timeout.ms": 30000,
    "metadata.max.age.ms": 300000,
    "retry.backoff.ms": 100,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 10000,
    "allow.auto.create.topics": True,
    # security (the Java client's names; librdkafka's ssl.ca.location,
    # ssl.certificate.location, ssl.key.location, sasl.mechanisms, sasl.username and
    # sasl.password are read too): see security/connector.ClientSecurity.from_client_props
    "security.protocol": "PLAINTEXT",
    "ssl.truststore.location": None,
    "ssl.truststore.type": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.keystore.location": None,
    "ssl.keystore.type": None,
    "ssl.keystore.password": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "sasl.mechanism": None,
    "sasl.jaas.config": None,
}

PRODUCER: dict[str, Any] = {
    **COMMON,
    "acks": "all",
    "batch.size": 16384,
    "linger.ms": 5,
    "max.request.size": 1048576,
    "compression.type": "none",
    "retries": 2147483647,
    "enable.idempotence": True,
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
    "max.in.flight.requests.per.connection": 5,
    "delivery.timeout.ms": 120000,
    "max.block.ms": 60000,
    "buffer.memory": 33554432,
    "queue.buffering.max.messages": 100000,  # librdkafka's bound on undelivered records
    "partitioner": "murmur2_random",
    "key.serializer": None,
    "value.serializer": None,
}

CONSUMER: dict[str, Any] = {
    **COMMON,
    "group.id": None,
    "group.instance.id": None,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "max.poll.records": 500,
    "max.poll.interval.ms": 300000,
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "partition.assignment.strategy": "range,roundrobin",
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 52428800,
    "fetch.max.wait.ms": 500,
    "max.partition.fetch.bytes": 1048576,
    "isolation.level": "read_uncommitted",
    "check.crcs": True,
    "key.deserializer": None,
    "value.deserializer": None,
}

ADMIN: dict[str, Any] = {
    **COMMON,
    "default.api.timeout.ms": 60000,
}

_BOOL = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def _coerce(name: str, value: Any, default: Any) -> Any:
    if isinstance(value, str):
        if isinstance(default, bool):
            try:
                return _BOOL[value.strip().lower()]
            except KeyError:
                raise ValueError(f"{name} expects true or false, got {value!r}") from None
        if isinstance(default, int) and not isinstance(default, bool):
            try:
                return int(value.strip())
            except ValueError:
                raise ValueError(f"{name} expects an integer, got {value!r}") from None
    return value


def build_config(defaults: Mapping[str, Any], config: Mapping[str, Any] | None,
                 kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults, then `config`, then keyword arguments (underscores read as dots). Unknown
    names are kept (they may be meant for another layer) but never required."""
    out = dict(defaults)
    explicit: set[str] = set()
    for source in (config or {}), {k.replace("_", "."): v for k, v in kwargs.items()}:
        for key, value in source.items():
            out[key] = _coerce(key, value, defaults.get(key))
            explicit.add(key)
    out["_explicit"] = explicit
    if not out.get("bootstrap.servers"):
        raise ValueError("bootstrap.servers is required")
    return out


def parse_servers(value: str | list[str]) -> list[tuple[str, int]]:
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        if not host:
            host, port = port, "9092"
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no servers in bootstrap.servers={value!r}")
    return out


def acks_value(value: Any) -> int:
    if isinstance(value, str):
        value = value.strip().lower()
        if value == "all":
            return -1
        value = int(value)
    if value not in (-1, 0, 1):
        raise ValueError(f"acks must be all, -1, 0 or 1, got {value!r}")
    return int(value)


Serializer = Callable[[Any], bytes | None]


def to_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected bytes, str or None, got {type(value).__name__} "
                    "(set key.serializer / value.serializer)")
