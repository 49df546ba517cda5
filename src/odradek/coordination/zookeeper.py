"""The ZooKeeper backend: :class:`CoordinationStore` over a real ensemble through kazoo.

kazoo runs its own threads (a connection thread and callback threads); odradek runs one asyncio
loop per broker. The bridge:

* znode operations use kazoo's ``*_async`` methods; their completion callbacks hand the result
  back to the loop with ``loop.call_soon_threadsafe`` (no thread per call, no blocking);
* persistent watches are kazoo ``DataWatch`` (data) and a children watcher of the same design
  that also reports the deletion of the watched znode; they are created inside a worker thread
  (``asyncio.to_thread``: their constructor reads synchronously) and their callbacks reach the
  loop through ``call_soon_threadsafe``;
* kazoo's session states (CONNECTED / SUSPENDED / LOST) reach the loop the same way. After
  LOST, kazoo reconnects on a NEW session: the store reports ``EXPIRED`` then ``CONNECTED`` so
  the owner re-creates its ephemeral znodes (a broker its ``/brokers/ids/<id>``) and a
  controller resigns (S-5.1). A CONNECTED on a different session id without a LOST seen before
  is reported the same way.
* kazoo's ``transaction().commit()`` returns exceptions in its result list instead of raising:
  :meth:`ZooKeeperStore.multi` raises the first real failure.

The connect string is Kafka's ``zookeeper.connect``: ``host:port[,host:port...][/chroot]``; a
missing chroot path is created first, as Kafka does.

Security (Kafka's ``zookeeper.set.acl``): ``auth_data`` is what the session sends as ``addauth``
(``[("digest", "user:password")]``) before its first request, on every new session; ``acls`` gives
the ACL of each znode this store creates (``create``, ``makepath`` parents, ``multi`` creates, the
chroot) as ``(perms, scheme, id)`` triples, ZooKeeper's; odradek.security.zk_auth builds both from
the brokers' JAAS ``Client`` login. Without them znodes are open to all, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType as KzEventType
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import DataWatch
from kazoo.retry import KazooRetry
from kazoo.security import ACL, Id

from odradek.coordination.store import (
    ANY_VERSION,
    AuthFailedError,
    BadVersionError,
    CheckVersionOp,
    ConnectionLossError,
    CoordinationError,
    CoordinationStore,
    CreateOp,
    DeleteOp,
    EventType,
    NoAuthError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionState,
    SetDataOp,
    Stat,
    StoreClosedError,
    WatchCallback,
    WatchEvent,
    WatchHandle,
    as_bytes,
    join_path,
    validate_create_path,
    validate_path,
)

__all__ = ["AclProvider", "ZooKeeperStore", "parse_connect_string"]

#: The ACL of a new znode by its path: ``(perms, scheme, id)`` triples (ZooKeeper's ACL entries).
AclProvider = Callable[[str], Sequence[tuple[int, str, str]]]

log = logging.getLogger(__name__)

# kazoo exception -> store exception (looked up along the MRO: kazoo's ConnectionClosedError is a
# subclass of its SessionExpiredError).
_ERRORS: dict[type[BaseException], type[CoordinationError]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
    kz.NoChildrenForEphemeralsError: NoChildrenForEphemeralsError,
    kz.ConnectionClosedError: StoreClosedError,
    kz.SessionExpiredError: SessionExpiredError,
    kz.ConnectionLoss: ConnectionLossError,
    kz.OperationTimeoutError: ConnectionLossError,
    kz.SessionMovedError: ConnectionLossError,
    kz.NoAuthError: NoAuthError,
    kz.AuthFailedError: AuthFailedError,
    KazooTimeoutError: ConnectionLossError,
}
# Results kazoo puts for the non-failing ops of a failed transaction.
_MULTI_NOISE = (kz.RolledBackError, kz.RuntimeInconsistency)


def _map_error(exc: BaseException, path: str | None = None) -> BaseException:
    """Translate a kazoo exception into the store's (others are returned unchanged)."""
    if isinstance(exc, CoordinationError):
        return exc
    for cls in type(exc).__mro__:
        target = _ERRORS.get(cls)
        if target is not None:
            detail = str(exc)
            message = f"{target.code}: {path}" if path else target.code
            if detail:
                message = f"{message} ({detail})"
            error = target(message, path=path)
            error.__cause__ = exc
            return error
    if isinstance(exc, kz.KazooException):
        error = CoordinationError(f"{type(exc).__name__}: {exc} ({path})", path=path)
        error.__cause__ = exc
        return error
    return exc


def _stat(zstat: ZnodeStat) -> Stat:
    return Stat(
        czxid=zstat.czxid,
        mzxid=zstat.mzxid,
        pzxid=zstat.pzxid,
        ctime=zstat.ctime,
        mtime=zstat.mtime,
        version=zstat.version,
        cversion=zstat.cversion,
        aversion=zstat.aversion,
        ephemeral_owner=zstat.ephemeralOwner,
        data_length=zstat.dataLength,
        num_children=zstat.numChildren,
    )


def parse_connect_string(connect: str) -> tuple[str, str | None]:
    """Split Kafka's ``zookeeper.connect`` into ``(hosts, chroot)``; ``chroot`` is ``None`` when
    absent or ``/``."""
    connect = connect.strip()
    idx = connect.find("/")
    if idx < 0:
        return connect, None
    hosts, chroot = connect[:idx], connect[idx:].rstrip("/")
    if not chroot:
        return hosts, None
    validate_path(chroot)
    return hosts, chroot


def _retry_policy() -> dict[str, Any]:
    # Reconnect quickly (kazoo's default backoff grows to an hour between attempts).
    return {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_jitter": 0.2, "max_delay": 1.0}


class _ChildrenWatcher:
    """A persistent children watch in kazoo's ``ChildrenWatch`` design, which also reports the
    deletion of the watched znode (kazoo's ends silently) and sorts the children.

    Runs on kazoo's threads: ``on_change(children)`` / ``on_deleted()`` are called from there.
    """

    def __init__(
        self,
        client: KazooClient,
        path: str,
        on_change: Callable[[tuple[str, ...]], None],
        on_deleted: Callable[[], None],
    ) -> None:
        self._client = client
        self._path = path
        self._on_change = on_change
        self._on_deleted = on_deleted
        self._lock = threading.Lock()
        self._stopped = False
        self._established = False
        self._prior: tuple[str, ...] | None = None
        self._retry = KazooRetry(sleep_func=client.handler.sleep_func, **_retry_policy())
        client.add_listener(self._session_watcher)
        try:
            self.initial = self._fetch(initial=True)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self._stopped = True
        self._client.remove_listener(self._session_watcher)

    def _fetch(self, initial: bool = False) -> tuple[str, ...]:
        with self._lock:
            if self._stopped:
                return ()
            try:
                children = self._retry(self._client.get_children, self._path, self._watcher)
            except kz.NoNodeError:
                if initial:
                    raise
                self.stop()
                self._on_deleted()
                return ()
            except kz.ConnectionClosedError:
                self.stop()
                return ()
            self._established = True
            current = tuple(sorted(children))
            if initial:
                self._prior = current
            elif current != self._prior:
                self._prior = current
                self._on_change(current)
            return current

    def _fetch_quietly(self) -> None:
        try:
            self._fetch()
        except Exception:
            log.exception("children watch on %s failed", self._path)

    def _watcher(self, event: WatchedEvent) -> None:
        # NONE events only say the connection changed; the session watcher re-registers.
        if event.type != KzEventType.NONE:
            self._fetch_quietly()

    def _session_watcher(self, state: str) -> None:
        if state in (KazooState.LOST, KazooState.SUSPENDED):
            self._established = False
        elif state == KazooState.CONNECTED and not self._established and not self._stopped:
            self._client.handler.spawn(self._fetch_quietly)


class ZooKeeperStore(CoordinationStore):
    """A kazoo session to a ZooKeeper ensemble (Kafka's ``zookeeper.connect``).

    ``session_timeout_ms`` is Kafka's ``zookeeper.session.timeout.ms`` (the server clamps it to
    2 to 20 ticks); ``connection_timeout_ms`` (``zookeeper.connection.timeout.ms``, default:
    the session timeout) bounds :meth:`start`. ``loop`` defaults to the loop running ``start``.
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        *,
        connection_timeout_ms: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        auth_data: Sequence[tuple[str, str]] = (),
        acls: AclProvider | None = None,
    ) -> None:
        super().__init__()
        self.auth_data = list(auth_data)
        self._acl_provider = acls
        self.connect = connect
        self.hosts, self.chroot = parse_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = (
            session_timeout_ms if connection_timeout_ms is None else connection_timeout_ms
        )
        self._loop = loop
        self._client: KazooClient | None = None
        self._expired_reported = False
        self._closing = False
        self._children_watchers: list[_ChildrenWatcher] = []

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """kazoo's ``(session id, password)``: lets a test expire this session server-side."""
        return None if self._client is None else self._client.client_id

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client (for tools; do not call its blocking methods on the loop)."""
        if self._client is None:
            raise StoreClosedError("the store is not started")
        return self._client

    def _new_client(self, hosts: str) -> KazooClient:
        # kazoo sends auth_data on every (re)connection, before anything else.
        return KazooClient(
            hosts=hosts,
            timeout=self.session_timeout_ms / 1000.0,
            connection_retry=_retry_policy(),
            command_retry=_retry_policy(),
            auth_data=self.auth_data or None,
        )

    def acl_for(self, path: str) -> list[ACL] | None:
        """kazoo ACLs of a znode created at ``path`` (``None``: kazoo's default, open)."""
        if self._acl_provider is None:
            return None
        return [ACL(perms, Id(scheme, ident)) for perms, scheme, ident in self._acl_provider(path)]

    async def start(self) -> None:
        if self._client is not None:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._closing = False
        self._expired_reported = False
        if self.chroot:
            await asyncio.to_thread(self._create_chroot)
        client = self._new_client(self.connect)
        client.add_listener(self._kazoo_listener)
        self._client = client
        try:
            await asyncio.to_thread(client.start, self.connection_timeout_ms / 1000.0)
        except BaseException as exc:
            self._client = None
            await asyncio.to_thread(self._stop_client, client)
            if isinstance(exc, KazooTimeoutError | kz.KazooException):
                raise ConnectionLossError(
                    f"cannot connect to ZooKeeper at {self.connect} within "
                    f"{self.connection_timeout_ms} ms"
                ) from exc
            raise
        client_id = client.client_id
        session_id = client_id[0] if client_id else None
        # Report CONNECTED exactly once for the first session, whether kazoo's own CONNECTED
        # reached the loop before this point or arrives later (then it is a duplicate).
        if self._state is not SessionState.CONNECTED or self._session_id != session_id:
            self._session_id = session_id
            self._report(SessionState.CONNECTED)

    def _create_chroot(self) -> None:
        """Create the chroot path with a chroot-less session (Kafka does the same)."""
        assert self.chroot is not None
        client = self._new_client(self.hosts)
        try:
            client.start(self.connection_timeout_ms / 1000.0)
            client.ensure_path(self.chroot, acl=self.acl_for(self.chroot))
        except (KazooTimeoutError, kz.KazooException) as exc:
            raise _map_error(exc, self.chroot) from exc
        finally:
            self._stop_client(client)

    @staticmethod
    def _stop_client(client: KazooClient) -> None:
        try:
            client.stop()
        finally:
            client.close()

    async def close(self) -> None:
        client = self._client
        if client is None:
            return
        self._closing = True
        self._cancel_watches()
        for watcher in self._children_watchers:
            watcher.stop()
        self._children_watchers.clear()
        client.remove_listener(self._kazoo_listener)
        await asyncio.to_thread(self._stop_client, client)
        self._client = None
        self._state = None
        self._session_id = None

    # -- session states -------------------------------------------------------------------------

    def _kazoo_listener(self, state: str) -> None:
        """kazoo's state listener (connection thread): forward to the loop, never block."""
        client = self._client
        loop = self._loop
        if client is None or loop is None or self._closing:
            return
        client_id = client.client_id if state == KazooState.CONNECTED else None
        session_id = client_id[0] if client_id else None
        with contextlib.suppress(RuntimeError):  # RuntimeError: the loop is closed
            loop.call_soon_threadsafe(self._on_kazoo_state, state, session_id)

    def _on_kazoo_state(self, state: str, session_id: int | None) -> None:
        if self._closing or self._client is None:
            return
        if state == KazooState.CONNECTED:
            if self._state is SessionState.CONNECTED and session_id == self._session_id:
                return  # a duplicate (the first session's CONNECTED, reported by start())
            if (
                self._session_id is not None
                and session_id is not None
                and session_id != self._session_id
                and not self._expired_reported
            ):
                self._report(SessionState.EXPIRED)
            self._expired_reported = False
            if session_id is not None:
                self._session_id = session_id
            self._report(SessionState.CONNECTED)
        elif state == KazooState.SUSPENDED:
            self._report(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._expired_reported = True
            self._session_id = None
            self._report(SessionState.EXPIRED)

    def _report(self, state: SessionState) -> None:
        self._state = state
        self._notify_session(state)

    # -- bridging -------------------------------------------------------------------------------

    def _require(self) -> tuple[KazooClient, asyncio.AbstractEventLoop]:
        client, loop = self._client, self._loop
        if client is None or loop is None or self._closing:
            raise StoreClosedError("the store is closed")
        return client, loop

    async def _await(self, async_result: Any, path: str | None) -> Any:
        """Await a kazoo IAsyncResult on the loop."""
        _, loop = self._require()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(_map_error(value, path))

        def on_done(result: Any) -> None:  # a kazoo thread
            exc = result.exception
            try:
                if exc is None:
                    loop.call_soon_threadsafe(settle, True, result.value)
                else:
                    loop.call_soon_threadsafe(settle, False, exc)
            except RuntimeError:  # loop closed
                pass

        async_result.rawlink(on_done)
        return await future

    async def _in_thread(self, fn: Callable[..., Any], *args: Any, path: str | None = None) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except (kz.KazooException, KazooTimeoutError) as exc:
            raise _map_error(exc, path) from exc

    # -- znodes ---------------------------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        client, _ = self._require()
        validate_create_path(path, sequence)
        if makepath and self._acl_provider is not None:
            # kazoo gives parents the child's ACL: create them one by one with their own.
            await self._ensure_parents(path)
        result = client.create_async(
            path, as_bytes(data), acl=self.acl_for(path), ephemeral=ephemeral,
            sequence=sequence, makepath=makepath
        )
        return await self._await(result, path)

    async def _ensure_parents(self, path: str) -> None:
        client, _ = self._require()
        parts = path.strip("/").split("/")[:-1]
        parent = ""
        for part in parts:
            parent = f"{parent}/{part}"
            if await self._await(client.exists_async(parent), parent) is not None:
                continue
            with contextlib.suppress(NodeExistsError):
                await self._await(
                    client.create_async(parent, b"", acl=self.acl_for(parent)), parent)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        client, _ = self._require()
        validate_path(path)
        data, zstat = await self._await(client.get_async(path), path)
        return data or b"", _stat(zstat)

    async def exists(self, path: str) -> Stat | None:
        client, _ = self._require()
        validate_path(path)
        zstat = await self._await(client.exists_async(path), path)
        return None if zstat is None else _stat(zstat)

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        client, _ = self._require()
        validate_path(path)
        zstat = await self._await(client.set_async(path, as_bytes(data), version), path)
        return _stat(zstat)

    async def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        client, _ = self._require()
        validate_path(path)
        if recursive:
            await self._in_thread(self._delete_tree, client, path, version, path=path)
        else:
            await self._await(client.delete_async(path, version), path)

    @staticmethod
    def _delete_tree(client: KazooClient, path: str, version: int) -> None:
        """Recursive delete (worker thread): not atomic, ``version`` applies to ``path``."""
        if version != ANY_VERSION:
            zstat = client.exists(path)
            if zstat is None:
                raise kz.NoNodeError()
            if zstat.version != version:
                raise kz.BadVersionError()

        def delete_subtree(node: str) -> None:
            try:
                children = client.get_children(node)
            except kz.NoNodeError:
                return
            for child in children:
                delete_subtree(join_path(node, child))
            with contextlib.suppress(kz.NoNodeError):
                client.delete(node)

        for attempt in range(5):
            for child in client.get_children(path):
                delete_subtree(join_path(path, child))
            try:
                client.delete(path, version)
                return
            except kz.NotEmptyError:  # a child was created meanwhile: go again
                if attempt == 4:
                    raise

    async def get_children(self, path: str) -> list[str]:
        client, _ = self._require()
        validate_path(path)
        children = await self._await(client.get_children_async(path), path)
        return sorted(children)

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        client, _ = self._require()
        ops = list(ops)
        if not ops:
            return []
        txn = client.transaction()
        for op in ops:
            if isinstance(op, CreateOp):
                validate_create_path(op.path, op.sequence)
                txn.create(
                    op.path, as_bytes(op.data), acl=self.acl_for(op.path),
                    ephemeral=op.ephemeral, sequence=op.sequence
                )
            elif isinstance(op, SetDataOp):
                validate_path(op.path)
                txn.set_data(op.path, as_bytes(op.data), op.version)
            elif isinstance(op, DeleteOp):
                validate_path(op.path)
                txn.delete(op.path, op.version)
            elif isinstance(op, CheckVersionOp):
                validate_path(op.path)
                txn.check(op.path, op.version)
            else:
                raise TypeError(f"not a multi op: {op!r}")
        results = await self._await(txn.commit_async(), None)
        failures = [
            (i, r)
            for i, r in enumerate(results)
            if isinstance(r, BaseException) and not isinstance(r, _MULTI_NOISE)
        ]
        if not failures and any(isinstance(r, BaseException) for r in results):
            failures = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
        if failures:
            index, exc = failures[0]
            op = ops[index]
            error = _map_error(exc, op.path)
            if not isinstance(error, CoordinationError):
                error = CoordinationError(str(exc), path=op.path)
            error.failed_op(index, op)
            raise error
        out: list[Any] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, CreateOp):
                out.append(result)
            elif isinstance(op, SetDataOp):
                out.append(_stat(result))
            else:
                out.append(None)
        return out

    # -- watches ----------------------------------------------------------------------------

    async def _watch(
        self, kind: Literal["data", "children"], path: str, callback: WatchCallback
    ) -> WatchHandle:
        client, loop = self._require()
        validate_path(path)
        handle = WatchHandle(kind, path, callback, loop)
        if kind == "data":
            await self._in_thread(self._start_data_watch, client, handle, path=path)
        else:
            watcher = await self._in_thread(self._start_children_watch, client, handle, path=path)
            self._children_watchers.append(watcher)
            handle.on_cancel(watcher.stop)
        if self._closing:
            handle.cancel()
            raise StoreClosedError("the store was closed while registering a watch")
        self._handles.append(handle)
        handle.mark_ready()
        return handle

    def _start_data_watch(self, client: KazooClient, handle: WatchHandle) -> None:
        """Create a kazoo DataWatch (worker thread): its first call is the initial state."""
        first = True
        prior: Stat | None = None
        path = handle.path

        def on_data(data: bytes | None, zstat: ZnodeStat | None, event: Any = None) -> Any:
            # Never let an exception escape: DataWatch re-calls the function on TypeError.
            nonlocal first, prior
            try:
                if not handle.active or self._closing:
                    return False
                stat = None if zstat is None else _stat(zstat)
                if first:
                    first = False
                    prior = stat
                    if stat is not None:
                        handle.initial_data, handle.initial_stat = data or b"", stat
                    return None
                before, prior = prior, stat
                if stat is None:
                    if before is None:
                        return None
                    handle.deliver_threadsafe(WatchEvent(EventType.DELETED, path))
                    return None
                kind = (
                    EventType.CHANGED
                    if before is not None and before.czxid == stat.czxid
                    else EventType.CREATED
                )
                handle.deliver_threadsafe(WatchEvent(kind, path, data or b"", stat))
            except Exception:
                log.exception("data watch on %s failed", path)
            return None

        DataWatch(client, path, on_data)

    def _start_children_watch(self, client: KazooClient, handle: WatchHandle) -> _ChildrenWatcher:
        """Create a children watcher (worker thread)."""
        path = handle.path

        def on_change(children: tuple[str, ...]) -> None:
            if handle.active and not self._closing:
                handle.deliver_threadsafe(WatchEvent(EventType.CHILD, path, children=children))

        def on_deleted() -> None:
            if handle.active and not self._closing:
                handle.deliver_threadsafe(WatchEvent(EventType.DELETED, path))

        watcher = _ChildrenWatcher(client, path, on_change, on_deleted)
        handle.initial_children = watcher.initial
        return watcher

    def _repr_target(self) -> str:
        return f" {self.connect}"
