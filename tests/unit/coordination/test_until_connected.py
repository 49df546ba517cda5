"""coordination/until_connected.py (Kafka's retryRequestsUntilConnected) on a real embedded
store: a request made while the connection is lost waits and goes through once connected
again, on the same session or on a new one after an expiry (where a fenced write then fails
its version check); `stop_waiting` and a closed store end the wait."""

from __future__ import annotations

import asyncio

import pytest

from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from odradek.coordination.store import (
    BadVersionError,
    CheckVersionOp,
    ConnectionLossError,
    SetDataOp,
    StoreClosedError,
)
from odradek.coordination.until_connected import UntilConnectedStore


async def _wrapped(zk: EmbeddedZooKeeper) -> tuple[EmbeddedStore, UntilConnectedStore]:
    """A started client of `zk` and the wrapper around it."""
    inner = zk.client()
    await inner.start()
    return inner, UntilConnectedStore(inner)


async def _pending(task: asyncio.Task[object]) -> bool:
    for _ in range(5):
        await asyncio.sleep(0)
    return not task.done()


def test_a_request_waits_for_the_connection_and_goes_through() -> None:
    async def body() -> None:
        inner, store = await _wrapped(EmbeddedZooKeeper())
        await store.create("/a", b"1")
        inner.disconnect()
        with pytest.raises(ConnectionLossError):
            await inner.get("/a")  # the wrapped store fails at once
        task = asyncio.ensure_future(store.set("/a", b"2"))
        assert await _pending(task)
        inner.reconnect()
        stat = await asyncio.wait_for(task, 5)
        assert stat.version == 1 and (await store.get("/a"))[0] == b"2"
        await inner.close()
    asyncio.run(body())


def test_after_an_expiry_the_request_goes_on_a_new_session_and_is_fenced() -> None:
    """The controller's case: its fenced write waits through a cut, its session expires,
    another controller bumps /controller_epoch; sent again on the new session, the write
    fails its version check instead of landing."""
    async def body() -> None:
        zk = EmbeddedZooKeeper()
        inner, other = zk.client(), zk.client()
        await inner.start()
        await other.start()
        store = UntilConnectedStore(inner)
        await store.create("/controller_epoch", b"1")
        await store.create("/state", b"old")
        first = inner.session_id
        inner.disconnect()
        task = asyncio.ensure_future(store.multi(
            [CheckVersionOp("/controller_epoch", 0), SetDataOp("/state", b"zombie")]))
        assert await _pending(task)
        inner.expire_session()  # the server's side: the session is gone
        await other.set("/controller_epoch", b"2")  # a new controller
        inner.reconnect()
        with pytest.raises(BadVersionError):
            await asyncio.wait_for(task, 5)
        assert inner.session_id != first
        assert (await other.get("/state"))[0] == b"old"
        await inner.close()
        await other.close()
    asyncio.run(body())


def test_stop_waiting_and_a_closed_store_end_the_wait() -> None:
    async def body() -> None:
        zk = EmbeddedZooKeeper()
        inner, store = await _wrapped(zk)
        inner.disconnect()
        task = asyncio.ensure_future(store.get_children("/"))
        assert await _pending(task)
        store.stop_waiting()
        with pytest.raises(StoreClosedError):
            await asyncio.wait_for(task, 5)
        with pytest.raises(StoreClosedError):
            await store.exists("/")  # stopped for good

        inner2, store2 = await _wrapped(zk)
        inner2.disconnect()
        task = asyncio.ensure_future(store2.get("/"))
        assert await _pending(task)
        await inner2.close()
        with pytest.raises(StoreClosedError):
            await asyncio.wait_for(task, 5)
        await inner.close()
    asyncio.run(body())
