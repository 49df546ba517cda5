"""pytest plugin: a real ZooKeeper for tests, and both coordination backends behind one fixture.

Register with ``pytest_plugins = ["zookeeper_fixture"]`` (``tests/`` on ``sys.path``).

Fixtures:

* ``zookeeper_server`` (module scope): a standalone Debian ZooKeeper on a free port
  (tickTime 500 ms, ~1 s to start), stopped and cleaned up after the module;
* ``zookeeper_connect``: a connect string with a fresh chroot per test (isolation on a shared
  server);
* ``coordination_backend``: parametrized ``embedded`` / ``zookeeper``: a
  :class:`CoordinationBackend` to open stores and expire sessions, so a test suite runs
  unchanged against both backends.

Helpers: :func:`expire_zookeeper_session` (a real server-side expiry: a second kazoo client
started with the victim's session id and password, then stopped), :class:`EventRecorder`,
:func:`wait_until`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient

from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from odradek.coordination.store import CoordinationStore, WatchEvent
from odradek.coordination.zk_server import ZooKeeperServer
from odradek.coordination.zookeeper import ZooKeeperStore, parse_connect_string

T = TypeVar("T")

#: Session timeout of test clients (the server clamps to [1 s, 10 s] with tickTime 500).
TEST_SESSION_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper shared by the tests of one module."""
    server = ZooKeeperServer(tick_time=500)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_connect(zookeeper_server: ZooKeeperServer) -> str:
    """``host:port/<fresh chroot>`` on the module's server."""
    return f"{zookeeper_server.connect_string}/odradek-test-{uuid.uuid4().hex[:12]}"


def expire_zookeeper_session(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Expire a session server-side for real: join it from a second client, then close it.

    (kazoo.testing's ``expire_session`` only fakes the expiry on the client side.)
    """
    hosts, _ = parse_connect_string(hosts)
    other = KazooClient(hosts=hosts, client_id=client_id, timeout=TEST_SESSION_TIMEOUT_MS / 1000)
    try:
        other.start(timeout=10)
        other.stop()
    finally:
        other.close()


class CoordinationBackend:
    """Opens stores of one backend for one test and closes them afterwards."""

    def __init__(self, name: str, connect: str | None = None) -> None:
        self.name = name
        self.connect = connect
        self.server = EmbeddedZooKeeper() if name == "embedded" else None
        self._stores: list[CoordinationStore] = []

    async def new_store(self, *, start: bool = True) -> CoordinationStore:
        """A new client session (a "broker"); started unless ``start=False``."""
        store: CoordinationStore
        if self.server is not None:
            store = self.server.client()
        else:
            assert self.connect is not None
            store = ZooKeeperStore(self.connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS)
        self._stores.append(store)
        if start:
            await store.start()
        return store

    async def expire(self, store: CoordinationStore) -> None:
        """Expire ``store``'s session server-side (its ephemerals go, it gets a new session)."""
        if isinstance(store, EmbeddedStore):
            store.expire_session()
            return
        assert isinstance(store, ZooKeeperStore) and self.connect is not None
        client_id = store.client_id
        assert client_id is not None, "the store is not connected"
        await asyncio.to_thread(expire_zookeeper_session, self.connect, client_id)

    @property
    def settle_time(self) -> float:
        """How long to wait before concluding that no (more) event comes."""
        return 0.05 if self.server is not None else 0.3

    def run(self, fn: Callable[[CoordinationBackend], Awaitable[T]], timeout: float = 20.0) -> T:
        """Run ``fn(self)`` on a fresh loop; close every store opened meanwhile."""

        async def main() -> T:
            try:
                return await asyncio.wait_for(fn(self), timeout)
            finally:
                for store in reversed(self._stores):
                    await store.close()
                self._stores.clear()

        return asyncio.run(main())

    def __repr__(self) -> str:
        return f"<CoordinationBackend {self.name}>"


@pytest.fixture(params=["embedded", "zookeeper"])
def coordination_backend(request: pytest.FixtureRequest) -> CoordinationBackend:
    """Each test using it runs twice: on the embedded store and on a real ZooKeeper."""
    if request.param == "zookeeper":
        return CoordinationBackend("zookeeper", request.getfixturevalue("zookeeper_connect"))
    return CoordinationBackend("embedded")


class EventRecorder:
    """A watch callback that records events and checks it runs on the loop's thread."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.off_loop_calls = 0
        self._changed: asyncio.Event | None = None

    def __call__(self, event: WatchEvent) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.off_loop_calls += 1
            raise
        self.events.append(event)
        if self._changed is not None:
            self._changed.set()

    async def wait(self, count: int, timeout: float = 5.0) -> list[WatchEvent]:
        """Wait until ``count`` events have been recorded; return them all."""
        if self._changed is None:
            self._changed = asyncio.Event()
        deadline = time.monotonic() + timeout
        while len(self.events) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"expected {count} events, got {self.events}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return list(self.events)


async def wait_until(
    predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01
) -> None:
    """Poll ``predicate`` on the loop until it is true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)
