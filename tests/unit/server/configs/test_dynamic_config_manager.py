"""The one `/config/changes` watcher (server/configs/dynamic_config_manager.py, Kafka's
DynamicConfigManager and ZkNodeChangeNotificationListener) on the embedded coordination store:
each notification is processed once and in order and goes to every handler of its entity type,
an unknown type is skipped, a failing handler does not stop the others, stop() cancels, and
notifications older than 15 minutes are purged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from odradek.coordination import paths
from odradek.coordination.admin_zk import write_user_config
from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from odradek.security.scram import credential_from_password
from odradek.server.configs.dynamic_config_manager import (
    CHANGE_EXPIRATION_MS,
    DynamicConfigManager,
    expired_notifications,
    handlers_for,
    new_notifications,
    split_entity_path,
)
from odradek.server.credential_cache import CredentialCache
from odradek.server.quotas.client_quota_manager import QuotaEntity, QuotaManagers
from odradek.server.quotas.quota_config import ClientQuotaConfigManager, write_entity_config


def run(fn: Callable[[EmbeddedZooKeeper], Awaitable[Any]],
        server: EmbeddedZooKeeper | None = None) -> Any:
    return asyncio.run(fn(server or EmbeddedZooKeeper()))


async def connect(server: EmbeddedZooKeeper) -> EmbeddedStore:
    store = server.client()
    await store.start()
    return store


async def notify(store: EmbeddedStore, entity_path: str) -> str:
    """Write a change notification as AdminZkClient does; its znode name."""
    created = await store.create(paths.config_change_path(),
                                 paths.encode_config_change(entity_path),
                                 sequence=True, makepath=True)
    return created.rsplit("/", 1)[1]


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), timeout)


async def settle() -> None:
    """Let watch deliveries and the manager's pass run to the end."""
    for _ in range(20):
        await asyncio.sleep(0)


class Recorder:
    """A handler recording (name) calls, optionally raising or waiting."""

    def __init__(self, calls: list[tuple[str, str]], tag: str, *,
                 fail: bool = False, gate: asyncio.Event | None = None) -> None:
        self.calls, self.tag, self.fail, self.gate = calls, tag, fail, gate

    async def __call__(self, name: str) -> None:
        self.calls.append((self.tag, name))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise RuntimeError(f"{self.tag} failed on {name}")


# -- pure decisions --------------------------------------------------------------------------------
def test_split_entity_path_and_handlers_for() -> None:
    assert split_entity_path("topics/t") == ("topics", "t")
    assert split_entity_path("users/alice/clients/app") == ("users", "alice/clients/app")
    assert split_entity_path("clients/<default>") == ("clients", "<default>")
    for bad in ("topics", "topics/", "/t", ""):
        assert split_entity_path(bad) is None

    async def a(_: str) -> None: ...

    async def b(_: str) -> None: ...

    handlers = {"users": (a, b), "topics": (a,)}
    assert handlers_for("users/alice/clients/app", handlers) == ("alice/clients/app", (a, b))
    assert handlers_for("topics/t", handlers) == ("t", (a,))
    assert handlers_for("ips/1.2.3.4", handlers) is None
    assert handlers_for("users", handlers) is None


def test_new_notifications_in_sequence_order() -> None:
    children = ["config_change_0000000010", "config_change_0000000002", "config_change_0000000001"]
    assert new_notifications(children, {"config_change_0000000001"}) == [
        "config_change_0000000002", "config_change_0000000010"]
    assert new_notifications(children, children) == []


def test_expired_notifications() -> None:
    now = 100 * CHANGE_EXPIRATION_MS
    ctimes = {"c3": now - CHANGE_EXPIRATION_MS - 1, "c1": now - 10 * CHANGE_EXPIRATION_MS,
              "c2": now - CHANGE_EXPIRATION_MS, "c4": now}
    assert expired_notifications(ctimes, now, CHANGE_EXPIRATION_MS) == ["c1", "c3"]
    assert expired_notifications({}, now, CHANGE_EXPIRATION_MS) == []


# -- the watcher -----------------------------------------------------------------------------------
def test_each_notification_once_in_order_and_to_every_handler_of_its_type() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {
            "topics": Recorder(calls, "topic"),
            "users": [Recorder(calls, "credentials"), Recorder(calls, "quotas")],
            "clients": Recorder(calls, "client-quotas"),
        })
        await manager.start()
        await notify(store, "topics/t1")
        await notify(store, "users/alice")
        await notify(store, "users/alice/clients/app")
        await notify(store, "clients/<default>")
        await notify(store, "topics/t2")
        await until(lambda: len(calls) == 7)
        # more passes (a late watch event, a direct call, two at once) process nothing again
        await asyncio.gather(manager.process_changes(), manager.process_changes())
        await settle()
        assert calls == [
            ("topic", "t1"),
            ("credentials", "alice"), ("quotas", "alice"),
            ("credentials", "alice/clients/app"), ("quotas", "alice/clients/app"),
            ("client-quotas", "<default>"),
            ("topic", "t2"),
        ]
        manager.stop()
        await store.close()

    run(body)


def test_concurrent_passes_process_each_notification_once() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {"topics": Recorder(calls, "topic")})
        await manager.skip_existing()
        for name in ("a", "b", "c"):
            await notify(store, f"topics/{name}")
        await asyncio.gather(*(manager.process_changes() for _ in range(3)))
        assert calls == [("topic", "a"), ("topic", "b"), ("topic", "c")]
        await store.close()

    run(body)


def test_notifications_written_in_a_burst_are_processed_in_sequence_order() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {"topics": Recorder(calls, "topic")})
        await manager.start()
        names = [f"t{i}" for i in range(30)]
        await asyncio.gather(*(notify(store, f"topics/{n}") for n in names))
        await until(lambda: len(calls) == len(names))
        await settle()
        children = sorted(await store.get_children(paths.CONFIG_CHANGES))
        written = [paths.decode_config_change((await store.get(
            f"{paths.CONFIG_CHANGES}/{c}"))[0]) for c in children]
        assert [f"topics/{name}" for _, name in calls] == written  # the sequence's order
        manager.stop()
        await store.close()

    run(body)


def test_existing_notifications_are_skipped_and_ones_written_before_start_are_not() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        await notify(store, "topics/before")
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {"topics": Recorder(calls, "topic")})
        await manager.skip_existing()
        await notify(store, "topics/during-the-initial-loads")
        await settle()
        assert calls == []  # not watching yet
        await manager.start()
        await until(lambda: len(calls) == 1)
        await notify(store, "topics/after")
        await until(lambda: len(calls) == 2)
        await settle()
        assert calls == [("topic", "during-the-initial-loads"), ("topic", "after")]
        manager.stop()
        await store.close()

    run(body)


def test_unknown_or_malformed_notifications_are_logged_and_skipped(
        caplog: pytest.LogCaptureFixture) -> None:
    unreadable: list[str] = []

    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {"topics": Recorder(calls, "topic")})
        await manager.start()
        await notify(store, "ips/1.2.3.4")
        await notify(store, "topics")
        unreadable.append(await store.create(paths.config_change_path(), b"not json",
                                             sequence=True))
        await notify(store, "topics/t")
        await until(lambda: len(calls) == 1)
        await settle()
        assert calls == [("topic", "t")]
        manager.stop()
        await store.close()

    with caplog.at_level(logging.INFO, logger="odradek.config"):
        run(body)
    records = [r for r in caplog.records if r.name == "odradek.config"]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings
    assert "ips/1.2.3.4" in warnings[0]
    assert "'topics'" in warnings[1]
    assert unreadable[0] in warnings[2]
    infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert infos == ["Processing override for entity path topics/t"]


def test_a_failing_handler_is_logged_and_the_others_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {
            "users": [Recorder(calls, "credentials", fail=True), Recorder(calls, "quotas")],
            "topics": Recorder(calls, "topic"),
        })
        await manager.start()
        await notify(store, "users/alice")
        await notify(store, "topics/t")
        await until(lambda: len(calls) == 3)
        await settle()
        assert calls == [("credentials", "alice"), ("quotas", "alice"), ("topic", "t")]
        manager.stop()
        await store.close()

    with caplog.at_level(logging.INFO, logger="odradek.config"):
        run(body)
    errors = [r for r in caplog.records
              if r.name == "odradek.config" and r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "users/alice" in errors[0].getMessage()
    assert errors[0].exc_info is not None and "credentials failed on alice" in str(
        errors[0].exc_info[1])


def test_stop_cancels_the_running_pass_and_the_watch() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        calls: list[tuple[str, str]] = []
        gate = asyncio.Event()  # never set: the handler hangs until cancelled
        manager = DynamicConfigManager(store, {"topics": Recorder(calls, "topic", gate=gate)})
        await manager.start()
        await notify(store, "topics/t1")
        await until(lambda: len(calls) == 1)
        runner = manager._runner
        assert runner is not None and not runner.done()
        manager.stop()
        await settle()
        assert runner.cancelled()
        await notify(store, "topics/t2")
        await settle()
        await asyncio.sleep(0.05)
        assert calls == [("topic", "t1")]  # no watch any more
        await store.close()

    run(body)


def test_notifications_older_than_the_expiration_are_purged() -> None:
    now = [1_000_000.0]  # seconds, the embedded server's clock

    def clock() -> float:
        return now[0]

    server = EmbeddedZooKeeper(clock=clock)

    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        skipped = await notify(store, "topics/old-skipped")  # present at start-up
        calls: list[tuple[str, str]] = []
        manager = DynamicConfigManager(store, {"topics": Recorder(calls, "topic")},
                                       now_ms=lambda: int(clock() * 1000))
        await manager.start()
        old = await notify(store, "topics/old")
        await until(lambda: len(calls) == 1)
        await settle()
        assert set(await store.get_children(paths.CONFIG_CHANGES)) == {skipped, old}
        now[0] += CHANGE_EXPIRATION_MS / 1000 / 2
        middle = await notify(store, "topics/middle")
        await until(lambda: len(calls) == 2)
        await settle()
        assert set(await store.get_children(paths.CONFIG_CHANGES)) == {skipped, old, middle}
        now[0] += CHANGE_EXPIRATION_MS / 1000 / 2 + 1  # old ones: 15 min + 1 s
        new = await notify(store, "topics/new")
        await until(lambda: len(calls) == 3)
        await settle()
        assert set(await store.get_children(paths.CONFIG_CHANGES)) == {middle, new}
        assert calls == [("topic", "old"), ("topic", "middle"), ("topic", "new")]
        # another broker's manager purging the same notifications does no harm
        other_store = await connect(server)
        other_calls: list[tuple[str, str]] = []
        other = DynamicConfigManager(other_store, {"topics": Recorder(other_calls, "topic")},
                                     now_ms=lambda: int(clock() * 1000))
        await other.start()
        now[0] += CHANGE_EXPIRATION_MS / 1000 + 1
        last = await notify(store, "topics/last")
        await until(lambda: len(calls) == 4 and len(other_calls) == 1)
        await settle()
        await asyncio.sleep(0.05)
        assert await store.get_children(paths.CONFIG_CHANGES) == [last]
        manager.stop()
        other.stop()
        await store.close()
        await other_store.close()

    run(body, server)


def test_users_go_to_the_credentials_and_the_quotas() -> None:
    """The broker's wiring: one notification of a user updates its SCRAM credentials and its
    quotas; a user/client one only the quotas."""
    async def body(server: EmbeddedZooKeeper) -> None:
        store = await connect(server)
        credentials = CredentialCache(store)
        quotas = QuotaManagers(clock=lambda: 0)
        quota_configs = ClientQuotaConfigManager(store, quotas)
        manager = DynamicConfigManager(store, {
            "users": (credentials.on_user_config_change, quota_configs.on_user_config_change),
            "clients": quota_configs.on_client_config_change,
        })
        await manager.skip_existing()
        await credentials.start()
        await quota_configs.start()
        await manager.start()
        credential = credential_from_password("SCRAM-SHA-256", "secret", iterations=4096)
        await write_user_config(store, "alice", {"SCRAM-SHA-256": credential.to_text(),
                                                 "producer_byte_rate": "1024"})
        await until(lambda: credentials.get("SCRAM-SHA-256", "alice") is not None)
        await until(lambda: quotas.produce.quota("alice", "app") == 1024)
        assert credentials.get("SCRAM-SHA-256", "alice") == credential
        await write_entity_config(store, QuotaEntity("alice", "app"),
                                  {"producer_byte_rate": "2048"})
        await until(lambda: quotas.produce.quota("alice", "app") == 2048)
        await write_entity_config(store, QuotaEntity(None, "<default>"),
                                  {"consumer_byte_rate": "512"})
        await until(lambda: quotas.fetch.quota("bob", "other") == 512)
        assert set(credentials.users()) == {"alice"}
        manager.stop()
        await store.close()

    run(body)
