"""Kafka's ``retryRequestsUntilConnected`` (KafkaZkClient) for the controller's requests.

A request to the coordination store that fails on a lost connection (CONNECTIONLOSS) is not
failed back to the controller: it waits until the session is connected again, the same session
after a short cut or a new one after an expiry, and is sent again. A controller event thus
finishes on the other side of a store outage instead of being abandoned midway; and when its
session expired meanwhile and another broker became controller, its next fenced write fails
the controller epoch's version check (``ControllerMovedError``) and it resigns: a request
sent again on a new session is what that check keeps out (a deposed controller's write).

`UntilConnectedStore` wraps one `CoordinationStore`: the data methods retry, everything else
(session state and listeners, watches' delivery) is the wrapped store's. `stop_waiting()` ends
every wait with `StoreClosedError` (the controller's shutdown: a broker that stops while cut
from the store must not wait for it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from .store import (
    ANY_VERSION,
    ConnectionLossError,
    CoordinationStore,
    Op,
    SessionListener,
    SessionState,
    Stat,
    StoreClosedError,
    WatchCallback,
    WatchHandle,
)

__all__ = ["UntilConnectedStore"]

T = TypeVar("T")

#: how often a waiting request looks whether its store was closed under it (no session
#: state is reported on a close)
CLOSED_POLL_S = 1.0


class UntilConnectedStore(CoordinationStore):
    """`inner`'s requests, each retried after a lost connection once connected again."""

    def __init__(self, inner: CoordinationStore) -> None:
        super().__init__()
        self.inner = inner
        self._changed: asyncio.Event | None = None
        self._stopped = False
        inner.add_session_listener(self._on_state)

    # -- the session is the wrapped store's ----------------------------------------------------
    @property
    def session_id(self) -> int | None:
        return self.inner.session_id

    @property
    def state(self) -> SessionState | None:
        return self.inner.state

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        self.stop_waiting()
        await self.inner.close()

    def add_session_listener(self, listener: SessionListener) -> None:
        self.inner.add_session_listener(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        self.inner.remove_session_listener(listener)

    def stop_waiting(self) -> None:
        """End every wait for a connection, now and later, with `StoreClosedError`."""
        self._stopped = True
        if self._changed is not None:
            self._changed.set()

    def _on_state(self, state: SessionState) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _until_connected(self, request: Callable[[], Awaitable[T]]) -> T:
        """Kafka's retryRequestsUntilConnected: `request()`, sent again after every lost
        connection once the session is connected again."""
        while True:
            if self._stopped:
                raise StoreClosedError("the store's requests were stopped")
            try:
                return await request()
            except ConnectionLossError:
                await self._wait_connected()

    async def _wait_connected(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        while not self._stopped and self.inner.state is not SessionState.CONNECTED:
            if self.inner.state is None:
                raise StoreClosedError("the store was closed while its requests waited")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), CLOSED_POLL_S)

    # -- data methods ---------------------------------------------------------------------------
    async def create(self, path: str, data: bytes = b"", ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        return await self._until_connected(
            lambda: self.inner.create(path, data, ephemeral, sequence, makepath))

    async def get(self, path: str) -> tuple[bytes, Stat]:
        return await self._until_connected(lambda: self.inner.get(path))

    async def exists(self, path: str) -> Stat | None:
        return await self._until_connected(lambda: self.inner.exists(path))

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        return await self._until_connected(lambda: self.inner.set(path, data, version))

    async def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        await self._until_connected(lambda: self.inner.delete(path, version, recursive))

    async def get_children(self, path: str) -> list[str]:
        return await self._until_connected(lambda: self.inner.get_children(path))

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        return await self._until_connected(lambda: self.inner.multi(ops))

    async def _watch(self, kind: Literal["data", "children"], path: str,
                     callback: WatchCallback) -> WatchHandle:
        return await self._until_connected(
            lambda: self.inner.watch_data(path, callback) if kind == "data"
            else self.inner.watch_children(path, callback))
