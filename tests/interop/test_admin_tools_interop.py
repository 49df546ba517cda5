"""The perf and offset tools as commands (subprocesses) against an `odradek broker` process, with
the real clients on either side: producer-perf-test driving confluent-kafka (`--client
confluent-kafka`), what it wrote counted by get-offsets and read back by consumer-perf-test, and
aiokafka's and kafka-python's describe_cluster agreeing with broker-api-versions' broker line."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid

import pytest

from tests.interop.conftest import BrokerProcess

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]


def odradek(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "odradek.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_perf_tools_as_commands(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    bs = broker.bootstrap
    assert bs is not None
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    ck = AdminClient({"bootstrap.servers": bs})
    ck.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)

    code, out, err = odradek("producer-perf-test", "--topic", topic, "--num-records", "5000",
                             "--record-size", "64", "--throughput", "-1", "--client",
                             "confluent-kafka", "--producer-props", f"bootstrap.servers={bs}",
                             "acks=all", "--print-metrics")
    assert code == 0, err
    lines = out.splitlines()
    total = next(line for line in lines if line.startswith("5000 records sent, "))
    assert re.fullmatch(r"5000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms "
                        r"avg latency, [\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms "
                        r"99th, \d+ ms 99\.9th\.", total)
    assert re.search(r"^producer-performance:record-send-total:\{client-id=perf\} +: 5000$",
                     out, re.M)

    code, out, err = odradek("get-offsets", "--bootstrap-server", bs, "--topic", topic)
    assert code == 0, err
    assert sum(int(line.rsplit(":", 1)[1]) for line in out.splitlines()) == 5000
    assert [line.rsplit(":", 1)[0] for line in out.splitlines()] == [
        f"{topic}:{p}" for p in range(3)]

    code, out, err = odradek("consumer-perf-test", "--broker-list", bs, "--topic", topic,
                             "--messages", "5000", "--timeout", "30000", "--hide-header")
    assert code == 0, err
    (values,) = out.splitlines()
    fields = values.split(", ")
    assert fields[4] == "5000" and fields[2] == f"{5000 * 64 / 1024 / 1024:.4f}"


def test_describe_cluster_and_broker_api_versions_agree(broker: BrokerProcess) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from kafka import KafkaAdminClient

    bs = broker.bootstrap
    assert bs is not None

    async def aio() -> dict[str, object]:
        client = AIOKafkaAdminClient(bootstrap_servers=bs)
        await client.start()
        try:
            return await client.describe_cluster()
        finally:
            await client.close()

    aio_info = asyncio.run(aio())
    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        kp_info = kp.describe_cluster()
    finally:
        kp.close()
    host, port = bs.rsplit(":", 1)
    assert aio_info["cluster_id"] == kp_info["cluster_id"]
    assert aio_info["controller_id"] == kp_info["controller_id"] == 0
    assert kp_info["brokers"] == [{"broker_id": 0, "host": host, "port": int(port),
                                   "rack": None}]

    code, out, err = odradek("broker-api-versions", "--bootstrap-server", bs)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{host}:{port} (id: 0 rack: null) -> ("
    assert lines[-1] == ")"
    assert "\tDescribeCluster(60): 0 to 1," in lines
