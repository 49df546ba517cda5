"""The embedded coordination backend: ZooKeeper semantics without sockets (S-5).

Covers what the in-process cluster relies on: versions and BadVersion, sequential names,
ephemeral znodes removed when a session expires or closes (how a dead broker is simulated),
watches delivered once per change on the loop and never re-entrantly, multi atomicity,
connection loss, and several brokers (and servers) on one loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from odradek.coordination.store import (
    BadVersionError,
    CheckVersionOp,
    ConnectionLossError,
    CreateOp,
    DeleteOp,
    EventType,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionState,
    SetDataOp,
    StoreClosedError,
    WatchEvent,
)


def run(fn: Callable[[EmbeddedZooKeeper], Awaitable[Any]]) -> Any:
    return asyncio.run(fn(EmbeddedZooKeeper()))


async def connect(server: EmbeddedZooKeeper) -> EmbeddedStore:
    store = server.client()
    await store.start()
    return store


async def drain() -> None:
    """Let every scheduled delivery run."""
    for _ in range(3):
        await asyncio.sleep(0)


class Recorder:
    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.threads: set[int] = set()

    def __call__(self, event: WatchEvent) -> None:
        asyncio.get_running_loop()  # raises off the loop
        self.threads.add(threading.get_ident())
        self.events.append(event)

    @property
    def types(self) -> list[EventType]:
        return [e.type for e in self.events]


def test_versions_and_bad_version() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        s = await connect(server)
        assert await s.get_children("/") == ["zookeeper"]
        await s.create("/p", b"a")
        assert (await s.set("/p", b"b", version=0)).version == 1
        with pytest.raises(BadVersionError):
            await s.set("/p", b"c", version=0)
        with pytest.raises(BadVersionError):
            await s.delete("/p", version=0)
        with pytest.raises(BadVersionError):
            await s.multi([CheckVersionOp("/p", 0)])
        assert await s.multi([CheckVersionOp("/p", -1), CheckVersionOp("/p", 1)]) == [None, None]
        assert (await s.get("/p"))[0] == b"b"
        await s.delete("/p", version=1)
        assert await s.exists("/p") is None
        with pytest.raises(NodeExistsError):
            await s.create("/")
        with pytest.raises(ValueError):
            await s.get("no-slash")
        with pytest.raises(ValueError):
            await s.create("/trailing/")
        with pytest.raises(TypeError):
            await s.create("/str", "not bytes")  # type: ignore[arg-type]

    run(body)


def test_stat_fields_and_injected_clock() -> None:
    now = [1_700_000_000.0]
    server = EmbeddedZooKeeper(clock=lambda: now[0])

    async def body() -> None:
        s = await connect(server)
        stat = (await s.get(await s.create("/n", b"xyz")))[1]
        assert (stat.ctime, stat.mtime, stat.data_length) == (1_700_000_000_000,) * 2 + (3,)
        now[0] += 2.5
        stat2 = await s.set("/n", b"")
        assert (stat2.ctime, stat2.mtime) == (1_700_000_000_000, 1_700_000_002_500)
        assert stat2.version == 1
        assert stat2.mzxid == server.last_zxid > stat.czxid
        await s.create("/n/c")
        parent = await s.exists("/n")
        assert parent is not None
        assert (parent.cversion, parent.num_children, parent.version) == (1, 1, 1)
        assert parent.pzxid == server.last_zxid

    asyncio.run(body())


def test_sequential_names_zero_padded() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        s = await connect(server)
        await s.create("/q")
        names = [await s.create("/q/item-", sequence=True) for _ in range(3)]
        assert names == ["/q/item-0000000000", "/q/item-0000000001", "/q/item-0000000002"]
        await s.create("/q/plain")  # any child creation advances the counter
        await s.delete("/q/plain")  # a deletion does not (as ZooKeeper 3.8)
        assert await s.create("/q/item-", sequence=True) == "/q/item-0000000004"
        assert await s.create("/q/", sequence=True) == "/q/0000000005"
        for _ in range(7):
            await s.create("/q/x", sequence=True)
        assert (await s.get_children("/q"))[-1] == "x0000000012"

    run(body)


def test_ephemerals_removed_on_expire_and_listener_sees_expired_then_connected() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        brokers = [await connect(server) for _ in range(3)]
        controller = await connect(server)
        await paths.create_top_level_paths(controller)
        for broker_id, broker in enumerate(brokers, start=1):
            await broker.create(paths.broker_path(broker_id), b"{}", ephemeral=True)
        ids = Recorder()
        await controller.watch_children(paths.BROKER_IDS, ids)
        states: list[SessionState] = []
        victim = brokers[1]
        victim.add_session_listener(states.append)
        old = victim.session_id
        assert old in server.sessions

        victim.expire_session()
        assert await controller.exists(paths.broker_path(2)) is None  # gone at once
        await drain()
        assert states == [SessionState.EXPIRED, SessionState.CONNECTED]
        assert victim.session_id not in (None, old) and old not in server.sessions
        assert ids.events[-1].children == ("1", "3")
        await victim.create(paths.broker_path(2), b"{}", ephemeral=True)
        await drain()
        assert ids.events[-1].children == ("1", "2", "3")
        owner = (await controller.exists(paths.broker_path(2))).ephemeral_owner  # type: ignore[union-attr]
        assert owner == victim.session_id

        server.expire_session(brokers[0].session_id)  # type: ignore[arg-type]
        await brokers[2].close()
        await drain()
        assert ids.events[-1].children == ("2",)
        with pytest.raises(StoreClosedError):
            await brokers[2].exists("/")

    run(body)


def test_ephemeral_rules() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        s = await connect(server)
        await s.create("/e", ephemeral=True)
        with pytest.raises(NoChildrenForEphemeralsError):
            await s.create("/e/c")
        with pytest.raises(NoChildrenForEphemeralsError):
            await s.create("/e/c/d", makepath=True)
        with pytest.raises(NoNodeError):
            await s.create("/a/b")
        await s.create("/a/b/c", ephemeral=True, makepath=True)
        assert (await s.exists("/a/b")).ephemeral_owner == 0  # type: ignore[union-attr]
        await s.close()
        other = await connect(server)
        assert await other.exists("/e") is None
        assert await other.exists("/a/b/c") is None and await other.exists("/a/b") is not None

    run(body)


def test_watch_events_are_async_once_per_change_and_on_the_loop() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        writer, watcher = await connect(server), await connect(server)
        rec = Recorder()
        handle = await watcher.watch_data("/w", rec)
        await writer.create("/w", b"0")
        assert rec.events == []  # never delivered inside the writer's call
        await drain()
        assert rec.types == [EventType.CREATED]
        for i in range(1, 4):
            await writer.set("/w", str(i).encode())
        await drain()
        assert rec.types == [EventType.CREATED] + [EventType.CHANGED] * 3
        assert [e.stat.version for e in rec.events[1:]] == [1, 2, 3]  # type: ignore[union-attr]
        assert [e.data for e in rec.events[1:]] == [b"1", b"2", b"3"]
        await writer.create("/w/child")
        await drain()
        assert len(rec.events) == 4  # child changes are not data changes
        await writer.delete("/w", recursive=True)
        await drain()
        assert rec.types[-1] is EventType.DELETED and len(rec.events) == 5
        assert rec.threads == {threading.get_ident()}
        handle.cancel()
        await writer.create("/w")
        await drain()
        assert len(rec.events) == 5

    run(body)


def test_watcher_sees_event_before_its_next_read() -> None:
    """ZooKeeper's guarantee: a client sees the watch event before the data that follows."""

    async def body(server: EmbeddedZooKeeper) -> None:
        writer, watcher = await connect(server), await connect(server)
        await writer.create("/c", b"old")
        seen: list[bytes | None] = []
        await watcher.watch_data("/c", lambda e: seen.append(e.data))
        await writer.set("/c", b"new")
        data, _ = await watcher.get("/c")
        assert data == b"new" and seen == [b"new"]

    run(body)


def test_children_watch_and_its_end() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        writer, watcher = await connect(server), await connect(server)
        with pytest.raises(NoNodeError):
            await watcher.watch_children("/t", Recorder())
        await writer.create("/t/partitions/0/state", b"{}", makepath=True)
        rec = Recorder()
        handle = await watcher.watch_children("/t", rec)
        assert handle.initial_children == ("partitions",)
        state = Recorder()
        await watcher.watch_data("/t/partitions/0/state", state)
        await writer.delete("/t", recursive=True)
        await drain()
        assert rec.types == [EventType.DELETED] and not handle.active
        assert state.types == [EventType.DELETED]
        await writer.create("/t/x", makepath=True)
        await drain()
        assert rec.types == [EventType.DELETED]

    run(body)


def test_failing_callback_does_not_stop_others() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        s = await connect(server)

        def boom(event: WatchEvent) -> None:
            raise RuntimeError("boom")

        rec = Recorder()
        await s.watch_data("/x", boom)
        await s.watch_data("/x", rec)
        await s.create("/x")
        await s.set("/x", b"1")
        await drain()
        assert rec.types == [EventType.CREATED, EventType.CHANGED]

    run(body)


def test_multi_is_atomic_and_fires_after_commit() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        s, watcher = await connect(server), await connect(server)
        await s.create("/brokers/topics", makepath=True)
        await s.create(paths.CONTROLLER_EPOCH, b"3")
        topics, epoch = Recorder(), Recorder()
        await watcher.watch_children("/brokers/topics", topics)
        await watcher.watch_data(paths.CONTROLLER_EPOCH, epoch)
        before = server.dump()
        with pytest.raises(BadVersionError) as info:
            await s.multi(
                [
                    CreateOp("/brokers/topics/a", b"{}"),
                    CreateOp("/brokers/topics/a/partitions"),
                    SetDataOp(paths.CONTROLLER_EPOCH, b"4", version=0),
                    SetDataOp(paths.CONTROLLER_EPOCH, b"5", version=0),  # now version 1
                ]
            )
        assert info.value.op_index == 3 and "multi op #3" in str(info.value)
        assert server.dump() == before
        await drain()
        assert topics.events == [] and epoch.events == []

        results = await s.multi(
            [
                CreateOp("/brokers/topics/a", b"{}"),
                CreateOp("/brokers/topics/b", b"{}"),
                CreateOp(paths.CONTROLLER, b"{}", ephemeral=True),
                SetDataOp(paths.CONTROLLER_EPOCH, b"4", version=0),
                DeleteOp("/brokers/topics/b"),
            ]
        )
        assert results[:3] == ["/brokers/topics/a", "/brokers/topics/b", paths.CONTROLLER]
        assert results[3].version == 1 and results[4] is None
        await drain()
        # One event per watched path per transaction, with the committed state.
        assert [e.children for e in topics.events] == [("a",)]
        assert [(e.type, e.data) for e in epoch.events] == [(EventType.CHANGED, b"4")]
        assert (await s.exists(paths.CONTROLLER)).ephemeral_owner == s.session_id  # type: ignore[union-attr]
        with pytest.raises(NotEmptyError):
            await s.multi([DeleteOp("/brokers/topics")])
        with pytest.raises(TypeError):
            await s.multi(["not an op"])  # type: ignore[list-item]

    run(body)


def test_connection_loss_holds_events_and_expiry_while_disconnected() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        broker, writer = await connect(server), await connect(server)
        states: list[SessionState] = []
        broker.add_session_listener(states.append)
        await broker.create("/brokers/ids/1", ephemeral=True, makepath=True)
        rec = Recorder()
        await broker.watch_children("/brokers/ids", rec)
        session = broker.session_id

        broker.disconnect()
        with pytest.raises(ConnectionLossError):
            await broker.get("/")
        await writer.create("/brokers/ids/2", ephemeral=True)
        await drain()
        assert states == [SessionState.SUSPENDED] and rec.events == []
        assert await writer.exists("/brokers/ids/1") is not None  # the session lives on
        broker.reconnect()
        await drain()
        assert states[-1] is SessionState.CONNECTED and broker.session_id == session
        assert [e.children for e in rec.events] == [("1", "2")]

        broker.disconnect()
        broker.expire_session()  # the session times out while the broker is cut off
        assert await writer.exists("/brokers/ids/1") is None
        await drain()
        assert states[-1] is SessionState.SUSPENDED
        broker.reconnect()
        await drain()
        assert states[-3:] == [SessionState.SUSPENDED, SessionState.EXPIRED, SessionState.CONNECTED]
        assert broker.session_id not in (None, session)
        assert rec.events[-1].children == ("2",)

    run(body)


def test_session_listener_and_lifecycle() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        store = server.client()
        states: list[SessionState] = []
        store.add_session_listener(states.append)
        store.add_session_listener(states.append)  # no duplicate registration
        assert store.session_id is None and store.state is None
        with pytest.raises(StoreClosedError):
            await store.get("/")
        async with store:
            assert states == [SessionState.CONNECTED] and store.state is SessionState.CONNECTED
            store.remove_session_listener(states.append)
            store.expire_session()
            await drain()
            assert states == [SessionState.CONNECTED]
        assert store.session_id is None and server.sessions == []

    run(body)


def test_two_servers_and_many_clients_share_one_loop() -> None:
    async def body() -> None:
        a, b = EmbeddedZooKeeper(), EmbeddedZooKeeper()
        ca, cb = await connect(a), await connect(b)
        await ca.create("/only-in-a")
        assert await cb.exists("/only-in-a") is None
        clients = [await connect(a) for _ in range(5)]
        assert len({c.session_id for c in clients}) == 5
        recs = [Recorder() for _ in clients]
        for client, rec in zip(clients, recs, strict=True):
            await client.watch_data("/shared", rec)
        await ca.create("/shared", b"x")
        await drain()
        assert all(rec.types == [EventType.CREATED] for rec in recs)

    asyncio.run(body())


def test_delivery_from_another_thread_uses_the_clients_loop() -> None:
    async def body(server: EmbeddedZooKeeper) -> None:
        watcher = await connect(server)
        rec = Recorder()
        await watcher.watch_data("/from-thread", rec)

        def writer_thread() -> None:
            async def write() -> None:
                writer = await connect(server)
                await writer.create("/from-thread", b"t")
                await writer.close()

            asyncio.run(write())

        await asyncio.to_thread(writer_thread)
        for _ in range(100):
            if rec.events:
                break
            await asyncio.sleep(0.01)
        assert rec.types == [EventType.CREATED] and rec.threads == {threading.get_ident()}

    run(body)
