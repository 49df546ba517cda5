"""Client quotas on an embedded broker: DescribeClientQuotas / AlterClientQuotas through the
admin client and `odradek configs`, Kafka's errors for bad input, quotas reaching the broker
through ZooKeeper notifications, throttle_time_ms in Produce, Fetch and Metadata responses with
the connection muted (KIP-219), and max.connections.per.ip changed at run time."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from odradek.cli import main
from odradek.client import Admin
from odradek.client.errors import KafkaError
from odradek.cluster import Cluster
from odradek.server.broker import Broker
from tests.integration.broker_harness import batch, create_topics, fetch, metadata, produce
from tests.integration.cluster_fixtures import module_admin, module_cluster
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "client-quotas", {}, brokers=1)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _broker(cluster: Cluster) -> Broker:
    return next(iter(cluster.brokers.values()))


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_alter_and_describe_users_clients_and_defaults(admin: Admin) -> None:
    alice, app = _name("alice"), _name("app")
    admin.alter_client_quotas([
        ({"user": alice}, {"producer_byte_rate": 1024.0}),
        ({"client-id": app}, {"consumer_byte_rate": 2048.0}),
        ({"user": alice, "client-id": app}, {"request_percentage": 50.5}),
        ({"user": alice, "client-id": None}, {"consumer_byte_rate": 10.0}),
    ])
    found = admin.describe_client_quotas([("user", alice)], strict=True)
    assert found == [({"user": alice}, {"producer_byte_rate": 1024.0})]
    found = admin.describe_client_quotas([("user", alice)])
    assert ({"user": alice, "client-id": app}, {"request_percentage": 50.5}) in found
    assert ({"user": alice, "client-id": None}, {"consumer_byte_rate": 10.0}) in found
    assert len(found) == 3
    assert admin.describe_client_quotas([("client-id", app)], strict=True) == [
        ({"client-id": app}, {"consumer_byte_rate": 2048.0})]
    assert admin.describe_client_quotas([("user", alice), ("client-id", None)], strict=True) \
        == [({"user": alice, "client-id": None}, {"consumer_byte_rate": 10.0})]
    every_user = admin.describe_client_quotas([("user", ...)], strict=True)
    assert ({"user": alice}, {"producer_byte_rate": 1024.0}) in every_user
    # validate_only writes nothing; removing the last quota leaves no entry
    admin.alter_client_quotas([({"user": alice}, {"producer_byte_rate": 1.0})],
                              validate_only=True)
    assert admin.describe_client_quotas([("user", alice)], strict=True)[0][1] == {
        "producer_byte_rate": 1024.0}
    admin.alter_client_quotas([({"user": alice}, {"producer_byte_rate": None})])
    assert admin.describe_client_quotas([("user", alice)], strict=True) == []


def test_bad_input_gets_kafkas_errors(admin: Admin, cluster: Cluster) -> None:
    cases: list[tuple[dict[str, str | None], dict[str, float | None], str]] = [
        ({"user": "u"}, {"bogus": 1.0}, "Invalid configuration key bogus"),
        ({"user": "u"}, {"producer_byte_rate": 10.5}, "must be a LONG value"),
        ({"client-id": "c"}, {"consumer_byte_rate": -5.0}, "non-negative"),
        ({"client-id": "c"}, {"request_percentage": float("nan")}, "non-negative"),
        ({"user": ""}, {"producer_byte_rate": 1.0}, "Empty user not supported"),
        ({"group": "g"}, {"producer_byte_rate": 1.0}, "Unhandled client quota entity type"),
        ({}, {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ]
    for entity, ops, message in cases:
        results = admin.alter_client_quotas([(entity, ops)], raise_errors=False)
        error = results[0][1]
        assert isinstance(error, KafkaError) and error.code == ErrorCode.invalid_request, entity
        assert message in str(error)
    with pytest.raises(KafkaError) as exc:
        admin.describe_client_quotas([("user", "a"), ("user", "b")])
    assert exc.value.code == ErrorCode.invalid_request
    with pytest.raises(KafkaError) as exc:
        admin.describe_client_quotas([("topic", "t")])
    assert exc.value.code == ErrorCode.unsupported_version
    assert admin.describe_client_quotas([("user", "u")], strict=True) == []  # nothing written
    assert _broker(cluster).started


def test_odradek_configs_for_users_and_clients(cluster: Cluster,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bob, cli = _name("bob"), _name("cli")

    def configs(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["configs", "--bootstrap-server", cluster.bootstrap_servers, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = configs("--alter", "--entity-type", "users", "--entity-name", bob,
                             "--add-config", "producer_byte_rate=1048576,request_percentage=25")
    assert code == 0, err
    assert out.strip() == f"Completed updating config for user {bob}."
    code, out, _ = configs("--alter", "--entity-type", "users", "--entity-name", bob,
                           "--entity-type", "clients", "--entity-name", cli,
                           "--add-config", "consumer_byte_rate=4096")
    assert code == 0 and out.strip() == f"Completed updating config for user {bob}."
    code, out, _ = configs("--alter", "--entity-type", "clients", "--entity-default",
                           "--add-config", "consumer_byte_rate=1000000000")
    assert code == 0
    assert out.strip() == "Completed updating default config for clients in the cluster."
    code, out, _ = configs("--describe", "--entity-type", "users", "--entity-name", bob)
    assert code == 0
    assert out.splitlines() == [f"Quota configs for user-principal '{bob}' are "
                                "producer_byte_rate=1048576.0, request_percentage=25.0"]
    code, out, _ = configs("--describe", "--entity-type", "users", "--entity-name", bob,
                           "--entity-type", "clients", "--entity-name", cli)
    assert out.splitlines() == [f"Quota configs for user-principal '{bob}', client-id '{cli}' "
                                "are consumer_byte_rate=4096.0"]
    code, out, _ = configs("--describe", "--client-defaults")
    assert out.splitlines() == ["Quota configs for the default client-id are "
                                "consumer_byte_rate=1.0E9"]
    code, out, _ = configs("--alter", "--entity-type", "users", "--entity-name", bob,
                           "--delete-config", "request_percentage")
    assert code == 0
    code, out, _ = configs("--describe", "--user", bob)
    assert out.splitlines() == [f"Quota configs for user-principal '{bob}' are "
                                "producer_byte_rate=1048576.0"]
    # garbage and refused changes: Kafka's messages, exit 1
    code, _, err = configs("--alter", "--entity-type", "users", "--entity-name", bob,
                           "--add-config", "producer_byte_rate=lots")
    assert code == 1 and "Cannot parse quota configuration value for producer_byte_rate: lots" \
        in err
    code, _, err = configs("--alter", "--entity-type", "clients", "--entity-name", cli,
                           "--add-config", "producer_byte_rate=1.5")
    assert code == 1
    assert "InvalidRequestException: Configuration producer_byte_rate must be a LONG value" \
        in err
    code, _, err = configs("--alter", "--entity-type", "clients", "--entity-name", cli,
                           "--delete-config", "request_percentage")
    assert code == 1 and "Invalid config(s): request_percentage" in err
    code, _, err = configs("--alter", "--entity-type", "clients", "--entity-name", cli,
                           "--add-config", "SCRAM-SHA-256=[password=x]")
    assert code == 1 and "Only quota configs can be added for 'clients'" in err
    code, _, _ = configs("--alter", "--client-defaults", "--delete-config",
                         "consumer_byte_rate")
    assert code == 0


async def _ask(client: WireClient, request: object, client_id: str) -> object:
    cid = client.send(request, client_id=client_id)
    got, response = await client.receive(request)
    assert got == cid
    return response


def test_request_and_byte_rate_quotas_throttle_and_mute(cluster: Cluster, admin: Admin
                                                        ) -> None:
    broker = _broker(cluster)
    quotas = broker.client_quotas
    assert quotas is not None
    busy, writer, reader = _name("busy"), _name("writer"), _name("reader")
    admin.alter_client_quotas([
        ({"client-id": busy}, {"request_percentage": 0.001}),
        ({"client-id": writer}, {"producer_byte_rate": 10_000.0}),
        ({"client-id": reader}, {"consumer_byte_rate": 10_000.0}),
    ])
    _wait(lambda: quotas.fetch.quota("ANONYMOUS", reader) == 10_000.0, "the notification")
    topic = _name("quota-topic")
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)

    async def body() -> None:
        c = await WireClient.connect(host, int(port))
        other = await WireClient.connect(host, int(port))
        try:
            created = await _ask(c, create_topics(topic), "setup")
            assert created.topics[0].error_code == ErrorCode.none  # type: ignore[attr-defined]
            for _ in range(100):
                meta = await _ask(c, metadata([topic]), "setup")
                if meta.topics[0].error_code == ErrorCode.none:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.05)
            # request_percentage: a Metadata request over the quota carries the throttle and
            # mutes the connection (capped at one quota window, 1 s)
            throttle = 0.0
            for _ in range(50):
                meta = await _ask(c, metadata([topic]), busy)
                throttle = meta.throttle_time.total_seconds()  # type: ignore[attr-defined]
                if throttle > 0:
                    break
            assert 0 < throttle <= 1.0
            start = time.monotonic()
            await _ask(c, metadata([topic]), "setup")
            assert time.monotonic() - start >= throttle * 0.8
            # producer_byte_rate: 200 KB against 10 KB/s over 10 s windows: 20 KB/s observed,
            # (20000 - 10000) / 10000 * 10 s = about 10 s of throttle, announced at once
            records = batch([b"x" * 1000 for _ in range(200)])
            resp = await _ask(other, produce(topic, 0, records, acks=1), writer)
            part = resp.responses[0].partition_responses[0]  # type: ignore[attr-defined]
            assert part.error_code == ErrorCode.none
            throttle_ms = resp.throttle_time.total_seconds() * 1000  # type: ignore[attr-defined]
            expected = (len(records) + 100) / 10 - 10_000  # the request is ~100 B more
            assert abs(throttle_ms - expected) < 1500, (throttle_ms, expected)
            other_c = await WireClient.connect(host, int(port))  # other connections are free
            start = time.monotonic()
            await _ask(other_c, metadata([topic]), "setup")
            assert time.monotonic() - start < 1.0
            # consumer_byte_rate: a fetch over the quota is answered empty with its throttle
            first = await _ask(other_c, fetch(topic, 0, 0), reader)
            assert first.throttle_time.total_seconds() > 0  # type: ignore[attr-defined]
            assert first.responses == ()  # type: ignore[attr-defined]
            await other_c.close()
        finally:
            await c.close()
            await other.close()

    cluster.run(body(), timeout=60)


def test_max_connections_per_ip_is_dynamic(cluster: Cluster, admin: Admin) -> None:
    broker = _broker(cluster)
    assert broker.socket_server is not None
    limits = broker.socket_server.connection_quotas
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    admin.incremental_alter_configs({("broker", ""): {"max.connections.per.ip.overrides":
                                                      "127.0.0.1:0"}})
    _wait(lambda: limits.max_for_ip("127.0.0.1") == 0, "the dynamic override")

    async def refused() -> bool:
        c = await WireClient.connect(host, int(port))
        try:
            return await c.is_closed_by_peer(5.0)
        finally:
            await c.close()

    try:
        assert cluster.run(refused(), timeout=20)
    finally:
        admin.incremental_alter_configs({("broker", ""): {
            "max.connections.per.ip.overrides": None}})
        _wait(lambda: limits.max_for_ip("127.0.0.1") > 0, "the override removed")
    results = admin.incremental_alter_configs(
        {("broker", ""): {"max.connections.per.ip.overrides": "garbage"}}, raise_errors=False)
    assert next(iter(results.values())) is not None  # refused, nothing changed
    # the per-listener limit is dynamic too (listener.name.<l>.max.connections)
    listener = next(iter(broker.socket_server.listeners))
    key = f"listener.name.{listener.lower()}.max.connections"
    admin.incremental_alter_configs({("broker", ""): {key: "1000"}})
    _wait(lambda: limits.listener_limits.get(listener) == 1000, "the listener limit")
    admin.incremental_alter_configs({("broker", ""): {key: None}})
    _wait(lambda: listener not in limits.listener_limits, "the listener limit removed")
