"""An in-process broker with a SASL_PLAINTEXT listener for the SASL tests.

The broker has two listeners: SASL_PLAINTEXT (first, `bound_ports[0]`) and PLAINTEXT (second,
`bound_ports[1]`), the inter-broker listener (Kafka's default security.inter.broker.protocol)
and the tests' way in without credentials. It is the broker as it runs: Metadata and
FindCoordinator answer each listener with that listener's endpoints, as Kafka's do, so a client
that bootstraps on the SASL listener stays on it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from odradek.server.broker import Broker
from odradek.server.configs.config import KafkaConfig

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def sasl_props(log_dir: Path, **overrides: str) -> dict[str, str]:
    props = {"broker.id": "0", "log.dirs": str(log_dir),
             "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
             "sasl.enabled.mechanisms": MECHANISMS,
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
             "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
             "group.initial.rebalance.delay.ms": "0"}
    props.update(overrides)
    return props


@contextlib.asynccontextmanager
async def sasl_broker(log_dir: Path, **overrides: str) -> AsyncIterator[Broker]:
    broker = Broker(KafkaConfig.from_properties(sasl_props(log_dir, **overrides)))
    await broker.start()
    try:
        yield broker
    finally:
        if broker.started:
            await broker.stop()
