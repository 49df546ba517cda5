"""In-process coordination backend: a ZooKeeper "server" shared by many client sessions.

:class:`EmbeddedZooKeeper` holds the znode tree with ZooKeeper's semantics (data versions and
``cversion``, the per-parent counter of sequential names, ephemeral owners, zxids, multi
transactions, watches made persistent the way kazoo's ``DataWatch``/``ChildrenWatch`` do).
Each broker of an in-process cluster gets its own :class:`EmbeddedStore` client, with its own
session id, from :meth:`EmbeddedZooKeeper.client`.

Failure simulation (how the embedded cluster plays a dead or partitioned broker):

* :meth:`EmbeddedStore.close` - a clean shutdown: the session's ephemeral znodes go at once;
* :meth:`EmbeddedStore.expire_session` - the session expires server-side (ephemerals removed,
  watches fire); the client then reports ``EXPIRED`` and, on a new session, ``CONNECTED``;
* :meth:`EmbeddedStore.disconnect` / :meth:`EmbeddedStore.reconnect` - connection loss
  (``SUSPENDED``; operations raise :class:`ConnectionLossError`; the session and its ephemerals
  stay until expired). Watch events for a suspended client are held until it reconnects.
  A client made with ``session_timeout_ms`` has its session expired by the server once it
  has been disconnected that long (a ZooKeeper server expires a session it has not heard
  from within its timeout); reconnecting sooner keeps the session.

Events are delivered asynchronously on each client's loop (``call_soon``), never re-entrantly
inside the writer's call; every operation first yields to the loop, so a client sees the watch
events of earlier changes before the result of a later read (ZooKeeper's ordering guarantee).
Nothing here is global: several servers and many clients can share one loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from odradek.common import file_system
from odradek.common.clock import wall_seconds
from odradek.coordination.store import (
    ANY_VERSION,
    BadVersionError,
    CheckVersionOp,
    ConnectionLossError,
    CoordinationError,
    CoordinationStore,
    CreateOp,
    DeleteOp,
    EventType,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionState,
    SetDataOp,
    Stat,
    StoreClosedError,
    WatchCallback,
    WatchEvent,
    WatchHandle,
    as_bytes,
    parent_path,
    sequence_name,
    validate_create_path,
    validate_path,
)

__all__ = ["EmbeddedStore", "EmbeddedZooKeeper"]

# ZooKeeper's reserved subtree, present on every real server.
_SYSTEM_PATHS = ("/zookeeper", "/zookeeper/config", "/zookeeper/quota")


@dataclass(slots=True)
class _Node:
    data: bytes
    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    version: int = 0
    cversion: int = 0
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)
    # The sequential-name counter: child creations so far. ZooKeeper 3.8 takes it from its
    # request processor's cversion, which counts creations only, while Stat.cversion also
    # counts deletions (measured: create, create, delete -> next sequence 2, cversion 3).
    sequence: int = 0

    def stat(self) -> Stat:
        return Stat(
            czxid=self.czxid,
            mzxid=self.mzxid,
            pzxid=self.pzxid,
            ctime=self.ctime,
            mtime=self.mtime,
            version=self.version,
            cversion=self.cversion,
            aversion=0,
            ephemeral_owner=self.ephemeral_owner,
            data_length=len(self.data),
            num_children=len(self.children),
        )

    def copy(self) -> _Node:
        return replace(self, children=set(self.children))


class _Journal:
    """Persistence of the persistent znodes, as ZooKeeper does it: a snapshot plus a
    transaction log of the znodes each write changed, replayed at start-up (a torn last line,
    from a crash mid-write, is ignored) and folded into a new snapshot. Ephemeral znodes are
    not kept: their sessions end with the process. Writes reach the OS at once (no buffering
    in Python), so a killed process loses nothing it had acknowledged."""

    SNAPSHOT = "snapshot.json"
    LOG = "txnlog.jsonl"

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fd = -1

    @staticmethod
    def _encode(node: _Node) -> dict[str, Any]:
        return {"data": base64.b64encode(node.data).decode(), "czxid": node.czxid,
                "mzxid": node.mzxid, "pzxid": node.pzxid, "ctime": node.ctime,
                "mtime": node.mtime, "version": node.version, "cversion": node.cversion,
                "sequence": node.sequence}

    @staticmethod
    def _decode(obj: dict[str, Any]) -> _Node:
        return _Node(base64.b64decode(obj["data"]), obj["czxid"], obj["mzxid"], obj["pzxid"],
                     obj["ctime"], obj["mtime"], obj["version"], obj["cversion"],
                     sequence=obj.get("sequence", 0))

    def load(self, nodes: dict[str, _Node]) -> int:
        """Fill `nodes` from the snapshot and the log; return the last zxid."""
        zxid = 0
        persisted: dict[str, dict[str, Any]] = {}
        snap = self.dir / self.SNAPSHOT
        if snap.exists():
            obj = json.loads(snap.read_text())
            zxid, persisted = obj["zxid"], obj["nodes"]
        log_path = self.dir / self.LOG
        if log_path.exists():
            for line in log_path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    break  # torn write at the tail
                zxid = max(zxid, entry["zxid"])
                for path, node in entry["nodes"].items():
                    if node is None:
                        persisted.pop(path, None)
                    else:
                        persisted[path] = node
        for path in sorted(persisted, key=lambda p: p.count("/")):
            if path in nodes and path == "/":
                continue
            nodes[path] = self._decode(persisted[path])
        for path in list(nodes):
            if path != "/":
                parent = nodes.get(parent_path(path))
                if parent is None:  # an orphan can't be reached: drop it
                    del nodes[path]
                    continue
                parent.children.add(path.rsplit("/", 1)[1])
        self._write_snapshot(zxid, nodes)
        return zxid

    def _write_snapshot(self, zxid: int, nodes: dict[str, _Node]) -> None:
        body = {"zxid": zxid, "nodes": {p: self._encode(n) for p, n in nodes.items()
                                        if n.ephemeral_owner == 0}}
        tmp = self.dir / (self.SNAPSHOT + ".tmp")
        with open(tmp, "w") as f:
            json.dump(body, f, separators=(",", ":"))
            f.flush()
            file_system.fsync(f.fileno())
        file_system.replace(tmp, self.dir / self.SNAPSHOT)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.dir / self.LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                           0o644)

    def append(self, zxid: int, changed: dict[str, _Node | None]) -> None:
        entry = {p: (None if n is None else self._encode(n)) for p, n in changed.items()
                 if n is None or n.ephemeral_owner == 0}
        if entry:
            line = json.dumps({"zxid": zxid, "nodes": entry}, separators=(",", ":")) + "\n"
            file_system.write(self._fd, line.encode())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(slots=True)
class _Watch:
    client: EmbeddedStore
    handle: WatchHandle


class _Txn:
    """One write transaction: saved node states for rollback and the paths touched, for watches."""

    __slots__ = ("before", "child_touched", "now", "zxid")

    def __init__(self, zxid: int, now: int) -> None:
        self.zxid = zxid
        self.now = now
        self.before: dict[str, _Node | None] = {}
        self.child_touched: dict[str, None] = {}


class EmbeddedZooKeeper:
    """The in-process ZooKeeper "server": one znode tree shared by many :class:`EmbeddedStore`.

    ``clock`` returns seconds since the epoch (injectable; ctime/mtime are its milliseconds).
    Thread-safe; events go to each client's own loop.
    """

    def __init__(self, *, clock: Callable[[], float] = wall_seconds,
                 persist_dir: str | os.PathLike[str] | None = None) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._zxid = 0
        # Session ids look like ZooKeeper's (server id in the high byte, a counter below).
        self._session_ids = itertools.count(0x0100_0000_0000_0001)
        self._sessions: dict[int, EmbeddedStore] = {}
        self._data_watches: dict[str, list[_Watch]] = {}
        self._child_watches: dict[str, list[_Watch]] = {}
        root = _Node(b"", 0, 0, 0, 0, 0)
        self._nodes: dict[str, _Node] = {"/": root}
        now = self._now()
        for path in _SYSTEM_PATHS:
            self._nodes[path] = _Node(b"", 0, 0, 0, now, now)
            self._nodes[parent_path(path)].children.add(path.rsplit("/", 1)[1])
        self._journal: _Journal | None = None
        if persist_dir is not None:
            self._journal = _Journal(Path(persist_dir))
            self._zxid = self._journal.load(self._nodes)

    def client(self, *, loop: asyncio.AbstractEventLoop | None = None,
               session_timeout_ms: int | None = None) -> EmbeddedStore:
        """A new client (a broker's session); call ``await client.start()``. With
        ``session_timeout_ms``, a disconnected session expires after that long."""
        return EmbeddedStore(self, loop=loop, session_timeout_ms=session_timeout_ms)

    def close(self) -> None:
        """Release the journal's file (persistent stores); the tree stays readable."""
        if self._journal is not None:
            self._journal.close()

    # -- introspection (tests, tools) -----------------------------------------------------------

    @property
    def sessions(self) -> list[int]:
        """Ids of the live sessions."""
        with self._lock:
            return sorted(self._sessions)

    @property
    def last_zxid(self) -> int:
        """The zxid of the last committed write."""
        return self._zxid

    def dump(self, path: str = "/") -> dict[str, bytes]:
        """A snapshot ``{path: data}`` of the subtree at ``path`` (for tests and debugging)."""
        with self._lock:
            prefix = path.rstrip("/") + "/"
            nodes = sorted(self._nodes.items())
            return {p: n.data for p, n in nodes if p == path or p.startswith(prefix)}

    def expire_session(self, session_id: int) -> None:
        """Expire a session server-side, as a ZooKeeper session timeout does."""
        with self._lock:
            client = self._sessions.get(session_id)
        if client is not None:
            client.expire_session()

    # -- sessions ----------------------------------------------------------------------------

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _open_session(self, client: EmbeddedStore) -> int:
        with self._lock:
            session_id = next(self._session_ids)
            self._sessions[session_id] = client
            return session_id

    def _close_session(self, session_id: int) -> None:
        """End a session: delete its ephemeral znodes in one transaction and fire watches."""
        with self._lock:
            if self._sessions.pop(session_id, None) is None:
                return
            owned = sorted(
                (p for p, n in self._nodes.items() if n.ephemeral_owner == session_id),
                reverse=True,
            )
            if not owned:
                return
            txn = self._begin()
            for path in owned:
                self._do_delete(txn, path, ANY_VERSION)
            self._commit(txn)

    def _unregister_client(self, client: EmbeddedStore) -> None:
        with self._lock:
            for table in (self._data_watches, self._child_watches):
                for path in list(table):
                    kept = [w for w in table[path] if w.client is not client]
                    if kept:
                        table[path] = kept
                    else:
                        del table[path]

    # -- reads -------------------------------------------------------------------------------

    def _get(self, path: str) -> tuple[bytes, Stat]:
        with self._lock:
            node = self._nodes.get(validate_path(path))
            if node is None:
                raise NoNodeError(path=path)
            return node.data, node.stat()

    def _exists(self, path: str) -> Stat | None:
        with self._lock:
            node = self._nodes.get(validate_path(path))
            return None if node is None else node.stat()

    def _get_children(self, path: str) -> list[str]:
        with self._lock:
            node = self._nodes.get(validate_path(path))
            if node is None:
                raise NoNodeError(path=path)
            return sorted(node.children)

    # -- writes --------------------------------------------------------------------------------

    def _begin(self) -> _Txn:
        self._zxid += 1
        return _Txn(self._zxid, self._now())

    def _save(self, txn: _Txn, path: str) -> _Node | None:
        node = self._nodes.get(path)
        if path not in txn.before:
            txn.before[path] = None if node is None else node.copy()
        return node

    def _rollback(self, txn: _Txn) -> None:
        for path, saved in txn.before.items():
            if saved is None:
                self._nodes.pop(path, None)
            else:
                self._nodes[path] = saved

    def _do_create(
        self, txn: _Txn, path: str, data: bytes, ephemeral_owner: int, sequence: bool
    ) -> str:
        validate_create_path(path, sequence)
        if path == "/":
            raise NodeExistsError(path=path)
        parent_name = parent_path(path)
        parent = self._nodes.get(parent_name)
        if parent is None:
            raise NoNodeError(path=path)
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError(path=path)
        actual = sequence_name(path, parent.sequence) if sequence else path
        if actual in self._nodes:
            raise NodeExistsError(path=actual)
        parent = self._save(txn, parent_name)
        assert parent is not None
        self._save(txn, actual)
        self._nodes[actual] = _Node(
            data, txn.zxid, txn.zxid, txn.zxid, txn.now, txn.now, ephemeral_owner=ephemeral_owner
        )
        parent.children.add(actual.rsplit("/", 1)[1])
        parent.cversion += 1
        parent.sequence += 1
        parent.pzxid = txn.zxid
        txn.child_touched[parent_name] = None
        return actual

    def _node_at(self, path: str, version: int) -> _Node:
        """The znode at ``path``, whose version must match ``version`` (any with ANY_VERSION):
        else NoNodeError / BadVersionError, as a conditional ZooKeeper write checks."""
        node = self._nodes.get(validate_path(path))
        if node is None:
            raise NoNodeError(path=path)
        if version != ANY_VERSION and version != node.version:
            raise BadVersionError(path=path)
        return node

    def _do_set(self, txn: _Txn, path: str, data: bytes, version: int) -> Stat:
        self._node_at(path, version)
        node = self._save(txn, path)
        assert node is not None
        node.data = data
        node.version += 1
        node.mzxid = txn.zxid
        node.mtime = txn.now
        return node.stat()

    def _do_delete(self, txn: _Txn, path: str, version: int) -> None:
        # The root and ZooKeeper's system znodes always exist: BADARGUMENTS, never NONODE.
        if path == "/" or path in _SYSTEM_PATHS:
            raise CoordinationError(f"BADARGUMENTS: cannot delete {path}", path=path)
        node = self._node_at(path, version)
        if node.children:
            raise NotEmptyError(path=path)
        parent_name = parent_path(path)
        self._save(txn, path)
        parent = self._save(txn, parent_name)
        assert parent is not None
        del self._nodes[path]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.cversion += 1
        parent.pzxid = txn.zxid
        txn.child_touched[parent_name] = None
        txn.child_touched[path] = None

    def _do_check(self, path: str, version: int) -> None:
        self._node_at(path, version)

    def _commit(self, txn: _Txn) -> None:
        """Fire the watches of a successful transaction (deliveries are scheduled, not run)."""
        if self._journal is not None:
            self._journal.append(txn.zxid, {p: self._nodes.get(p) for p in txn.before})
        for path, before in txn.before.items():
            watches = self._data_watches.get(path)
            if not watches:
                continue
            after = self._nodes.get(path)
            if after is None and before is None:
                continue
            if after is None:
                event = WatchEvent(EventType.DELETED, path)
            else:
                kind = (
                    EventType.CHANGED
                    if before is not None and before.czxid == after.czxid
                    else EventType.CREATED
                )
                if kind is EventType.CHANGED and before is not None and before.mzxid == after.mzxid:
                    continue  # only its children changed: not a data watch event
                event = WatchEvent(kind, path, after.data, after.stat())
            for watch in list(watches):
                watch.client._post(watch.handle, event)
        for path in txn.child_touched:
            watches = self._child_watches.get(path)
            if not watches:
                continue
            node = self._nodes.get(path)
            if node is None:
                event = WatchEvent(EventType.DELETED, path)
                del self._child_watches[path]
            else:
                event = WatchEvent(EventType.CHILD, path, children=tuple(sorted(node.children)))
            for watch in list(watches):
                watch.client._post(watch.handle, event)

    def _write(self, fn: Callable[[_Txn], Any]) -> Any:
        with self._lock:
            txn = self._begin()
            try:
                result = fn(txn)
            except BaseException:
                self._rollback(txn)
                raise
            self._commit(txn)
            return result

    def _create(
        self, path: str, data: bytes, owner: int, sequence: bool, makepath: bool
    ) -> str:
        validate_create_path(path, sequence)
        with self._lock:
            if makepath:
                # Ancestors are created (persistent, empty) one by one, like kazoo's ensure_path.
                ancestors: list[str] = []
                p = parent_path(path)
                while p != "/":
                    ancestors.append(p)
                    p = parent_path(p)
                for ancestor in reversed(ancestors):
                    if ancestor in self._nodes:
                        continue
                    with contextlib.suppress(NodeExistsError):
                        self._write(lambda txn, a=ancestor: self._do_create(txn, a, b"", 0, False))
            return self._write(lambda txn: self._do_create(txn, path, data, owner, sequence))

    def _set(self, path: str, data: bytes, version: int) -> Stat:
        return self._write(lambda txn: self._do_set(txn, path, data, version))

    def _delete(self, path: str, version: int, recursive: bool) -> None:
        validate_path(path)

        def run(txn: _Txn) -> None:
            if recursive:
                self._node_at(path, version)
                prefix = path.rstrip("/") + "/"
                for p in sorted((p for p in self._nodes if p.startswith(prefix)), reverse=True):
                    self._do_delete(txn, p, ANY_VERSION)
            self._do_delete(txn, path, version)

        with self._lock:
            self._write(run)

    def _multi(self, ops: Sequence[Op], owner: int) -> list[Any]:
        def run(txn: _Txn) -> list[Any]:
            results: list[Any] = []
            for index, op in enumerate(ops):
                try:
                    if isinstance(op, CreateOp):
                        owner_id = owner if op.ephemeral else 0
                        data = as_bytes(op.data)
                        results.append(self._do_create(txn, op.path, data, owner_id, op.sequence))
                    elif isinstance(op, SetDataOp):
                        results.append(self._do_set(txn, op.path, as_bytes(op.data), op.version))
                    elif isinstance(op, DeleteOp):
                        self._do_delete(txn, op.path, op.version)
                        results.append(None)
                    elif isinstance(op, CheckVersionOp):
                        self._do_check(op.path, op.version)
                        results.append(None)
                    else:
                        raise TypeError(f"not a multi op: {op!r}")
                except CoordinationError as exc:
                    exc.failed_op(index, op)
                    raise
            return results

        return self._write(run)

    # -- watches ----------------------------------------------------------------------------

    def _watch(
        self,
        client: EmbeddedStore,
        kind: Literal["data", "children"],
        path: str,
        handle: WatchHandle,
    ) -> None:
        with self._lock:
            node = self._nodes.get(validate_path(path))
            if kind == "children":
                if node is None:
                    raise NoNodeError(path=path)
                handle.initial_children = tuple(sorted(node.children))
                table = self._child_watches
            else:
                if node is not None:
                    handle.initial_data, handle.initial_stat = node.data, node.stat()
                table = self._data_watches
            watch = _Watch(client, handle)
            table.setdefault(path, []).append(watch)

            def unregister() -> None:
                with self._lock:
                    watches = table.get(path)
                    if watches and watch in watches:
                        watches.remove(watch)
                        if not watches:
                            del table[path]

            handle.on_cancel(unregister)


class EmbeddedStore(CoordinationStore):
    """One client session of an :class:`EmbeddedZooKeeper` (one per broker).

    It has no ACLs: ``zookeeper.set.acl`` and the brokers' ZooKeeper login are ignored, since
    nothing outside the brokers' own process can reach an embedded store."""

    def __init__(
        self, server: EmbeddedZooKeeper, *, loop: asyncio.AbstractEventLoop | None = None,
        session_timeout_ms: int | None = None,
    ) -> None:
        super().__init__()
        self.server = server
        self._loop = loop
        self.session_timeout_ms = session_timeout_ms
        self._expiry: asyncio.TimerHandle | None = None  # while disconnected
        self._session_expired = False  # expired while disconnected: reported on reconnect
        self._held: list[tuple[WatchHandle, WatchEvent]] = []

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise StoreClosedError("the store has not been started")
        return self._loop

    async def start(self) -> None:
        if self._state is not None:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._session_id = self.server._open_session(self)
        self._session_expired = False
        self._state = SessionState.CONNECTED
        self._notify_session(SessionState.CONNECTED)  # listeners added before start() see it

    async def close(self) -> None:
        if self._state is None:
            return
        session_id, self._session_id = self._session_id, None
        self._state = None
        self._cancel_expiry()
        self._cancel_watches()
        self._held.clear()
        self.server._unregister_client(self)
        if session_id is not None:
            self.server._close_session(session_id)

    # -- failure simulation ---------------------------------------------------------------------

    def expire_session(self) -> None:
        """Expire this client's session server-side (its ephemeral znodes go, watches fire).

        If connected, the client reports ``EXPIRED`` then ``CONNECTED`` on a new session (kazoo's
        LOST -> CONNECTED); if disconnected, it reports both on :meth:`reconnect`.
        """
        if self._state is None or self._session_id is None:
            return
        old, self._session_id = self._session_id, None
        if self._state is SessionState.SUSPENDED:
            self.server._close_session(old)
            self._session_expired = True
            return
        # As with kazoo: LOST (expired) first; this client's own watch events are held and
        # delivered after CONNECTED on the new session, like a re-registered DataWatch's.
        self._set_state(SessionState.EXPIRED)
        self.server._close_session(old)
        self._session_id = self.server._open_session(self)
        self._set_state(SessionState.CONNECTED)
        self._flush_held()

    def disconnect(self) -> None:
        """Simulate connection loss: ``SUSPENDED``; operations raise ConnectionLossError.
        With a session timeout, the server expires the session once it has passed (call on
        the client's loop)."""
        if self._state is SessionState.CONNECTED:
            self._set_state(SessionState.SUSPENDED)
            if self.session_timeout_ms is not None and self._loop is not None:
                self._cancel_expiry()
                self._expiry = self._loop.call_later(self.session_timeout_ms / 1000,
                                                     self._expire_silent)

    @property
    def connected(self) -> bool:
        """Whether the client is connected (not suspended, not closed)."""
        return self._state is SessionState.CONNECTED

    def _cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _expire_silent(self) -> None:
        """The server's side of a session timeout: the session of a client it has not heard
        from ends (its ephemerals go, watches fire); the client learns it on reconnect."""
        self._expiry = None
        if self._state is SessionState.SUSPENDED and self._session_id is not None:
            self.expire_session()

    def reconnect(self) -> None:
        """End a simulated connection loss (on a new session if it expired meanwhile)."""
        if self._state is not SessionState.SUSPENDED:
            return
        self._cancel_expiry()
        if self._session_expired or self._session_id is None:
            self._session_expired = False
            self._set_state(SessionState.EXPIRED)
            self._session_id = self.server._open_session(self)
        self._set_state(SessionState.CONNECTED)
        self._flush_held()

    def _flush_held(self) -> None:
        held, self._held = self._held, []
        for handle, event in held:
            self._schedule(handle.deliver, event)

    def _set_state(self, state: SessionState) -> None:
        self._state = state
        self._schedule(self._notify_session, state)

    # -- event delivery ------------------------------------------------------------------------

    def _schedule(self, fn: Callable[..., object], *args: object) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(fn, *args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    def _post(self, handle: WatchHandle, event: WatchEvent) -> None:
        """Deliver a watch event to this client (held while it is disconnected)."""
        if self._state is None or not handle.active:
            return
        if self._state is not SessionState.CONNECTED:
            self._held.append((handle, event))
        else:
            self._schedule(handle.deliver, event)

    async def _enter(self) -> int:
        """Yield once (earlier events go first) then check the session is usable."""
        await asyncio.sleep(0)
        if self._state is None:
            raise StoreClosedError("the store is closed")
        if self._state is not SessionState.CONNECTED:
            raise ConnectionLossError("connection to the embedded ZooKeeper is suspended")
        assert self._session_id is not None
        return self._session_id

    # -- znodes ---------------------------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        session_id = await self._enter()
        owner = session_id if ephemeral else 0
        return self.server._create(path, as_bytes(data), owner, sequence, makepath)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        await self._enter()
        return self.server._get(path)

    async def exists(self, path: str) -> Stat | None:
        await self._enter()
        return self.server._exists(path)

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        await self._enter()
        return self.server._set(path, as_bytes(data), version)

    async def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        await self._enter()
        self.server._delete(path, version, recursive)

    async def get_children(self, path: str) -> list[str]:
        await self._enter()
        return self.server._get_children(path)

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        session_id = await self._enter()
        return self.server._multi(list(ops), session_id)

    # -- watches ----------------------------------------------------------------------------

    async def _watch(
        self, kind: Literal["data", "children"], path: str, callback: WatchCallback
    ) -> WatchHandle:
        await self._enter()
        handle = WatchHandle(kind, path, callback, self.loop)
        self.server._watch(self, kind, path, handle)
        handle.mark_ready()
        self._handles.append(handle)
        return handle

