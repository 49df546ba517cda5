"""The coordination store: one async interface with ZooKeeper semantics.

Kafka's ZooKeeper-era brokers keep their shared state in ZooKeeper (docs/design.md S-5): the
live brokers are ephemeral znodes under ``/brokers/ids``, the controller is the owner of the
ephemeral ``/controller`` znode, partition state znodes are updated with
version-checked writes (ZooKeeper's optimistic concurrency), and every broker reacts to watches.

:class:`CoordinationStore` is that contract, used from a broker's single asyncio loop:

* znodes with data, a :class:`Stat` (``version``, ``ephemeral_owner``, ctime/mtime in ms, ...);
* ephemeral znodes owned by the client's *session*; sequential znodes named
  ``<prefix><10-digit counter>`` like ZooKeeper's;
* conditional writes (``version=-1`` matches any version) raising :class:`BadVersionError`;
* ``multi``: an all-or-nothing transaction of :class:`CreateOp` / :class:`SetDataOp` /
  :class:`DeleteOp` / :class:`CheckVersionOp` that *raises* on failure (unlike kazoo's
  ``transaction().commit()``, which returns the exceptions in its result list);
* persistent, re-registering watches (like kazoo's ``DataWatch`` / ``ChildrenWatch``) whose
  callbacks run ON THE LOOP and only deliver a :class:`WatchEvent` (Kafka's controller design,
  S-5.5: a watch callback only enqueues an event for the controller's single event thread);
* a session-state listener: :attr:`SessionState.CONNECTED`, :attr:`SessionState.SUSPENDED`
  (connection lost, the session may still be alive) and :attr:`SessionState.EXPIRED` (the
  session is gone with its ephemeral znodes; a new session follows with ``CONNECTED``), so that
  a broker re-registers ``/brokers/ids/<id>`` and a controller resigns (S-5.1).

Two backends implement it: :mod:`odradek.coordination.embedded` (in-process, many brokers on one
loop) and :mod:`odradek.coordination.zookeeper` (a real ZooKeeper ensemble through kazoo).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

__all__ = [
    "ANY_VERSION",
    "AuthFailedError",
    "BadVersionError",
    "CheckVersionOp",
    "ConnectionLossError",
    "CoordinationError",
    "CoordinationStore",
    "CreateOp",
    "DeleteOp",
    "EventType",
    "NoAuthError",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "SessionExpiredError",
    "SessionListener",
    "SessionState",
    "SetDataOp",
    "Stat",
    "StoreClosedError",
    "WatchCallback",
    "WatchEvent",
    "WatchHandle",
    "join_path",
    "parent_path",
    "sequence_name",
    "validate_create_path",
    "validate_path",
]

log = logging.getLogger(__name__)

#: ZooKeeper's "match any version" for conditional set/delete (Kafka's ZkVersion.MatchAnyVersion).
ANY_VERSION = -1


# ---------------------------------------------------------------------------------------------
# Errors (ZooKeeper's KeeperException codes, mapped from kazoo's exceptions by the kazoo backend)
# ---------------------------------------------------------------------------------------------


class CoordinationError(Exception):
    """Base class of every coordination-store error.

    ``path`` is the znode concerned when known. When the error comes from
    :meth:`CoordinationStore.multi`, ``op_index`` is the index of the first failing operation and
    ``op`` that operation.
    """

    code: ClassVar[str] = "SYSTEMERROR"

    def __init__(self, message: str = "", *, path: str | None = None) -> None:
        self.path = path
        self.op_index: int | None = None
        self.op: Op | None = None
        if not message:
            message = self.code if path is None else f"{self.code}: {path}"
        super().__init__(message)

    def failed_op(self, index: int, op: Op) -> None:
        """Mark this error as the failure of ``op``, operation ``index`` of a
        :meth:`CoordinationStore.multi`."""
        self.op_index = index
        self.op = op
        self.args = (f"multi op #{index} {op!r} failed: {self.code}",)


class NoNodeError(CoordinationError):
    """The znode (or, for a create, its parent) does not exist (ZooKeeper NONODE)."""

    code = "NONODE"


class NodeExistsError(CoordinationError):
    """The znode already exists (ZooKeeper NODEEXISTS)."""

    code = "NODEEXISTS"


class BadVersionError(CoordinationError):
    """A conditional write's expected version does not match the znode's (ZooKeeper BADVERSION)."""

    code = "BADVERSION"


class NotEmptyError(CoordinationError):
    """A znode with children cannot be deleted non-recursively (ZooKeeper NOTEMPTY)."""

    code = "NOTEMPTY"


class NoChildrenForEphemeralsError(CoordinationError):
    """Ephemeral znodes cannot have children (ZooKeeper NOCHILDRENFOREPHEMERALS)."""

    code = "NOCHILDRENFOREPHEMERALS"


class NoAuthError(CoordinationError):
    """The znode's ACL refuses this session the operation (ZooKeeper NOAUTH). Only the ZooKeeper
    backend raises it: the embedded store has no ACLs."""

    code = "NOAUTH"


class AuthFailedError(CoordinationError):
    """The server refused the session's credentials (ZooKeeper AUTHFAILED)."""

    code = "AUTHFAILED"


class SessionExpiredError(CoordinationError):
    """The session expired: its ephemeral znodes are gone (ZooKeeper SESSIONEXPIRED)."""

    code = "SESSIONEXPIRED"


class ConnectionLossError(CoordinationError):
    """The connection was lost; the outcome of an in-flight write is unknown (CONNECTIONLOSS)."""

    code = "CONNECTIONLOSS"


class StoreClosedError(CoordinationError):
    """The store was closed (or never started)."""

    code = "CLOSED"


# ---------------------------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stat:
    """A znode's ZooKeeper ``Stat`` structure.

    ``version`` is the data version used by conditional writes (Kafka's "zkVersion" of a
    partition state znode); ``ephemeral_owner`` is the owning session id, 0 for a persistent
    znode; ``ctime``/``mtime`` are milliseconds since the epoch.
    """

    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int

    @property
    def is_ephemeral(self) -> bool:
        """Whether the znode is owned by a session."""
        return self.ephemeral_owner != 0


class SessionState(enum.Enum):
    """Session states reported to session listeners (kazoo's KazooState, made explicit)."""

    #: Connected, with :attr:`CoordinationStore.session_id` the current session.
    CONNECTED = "connected"
    #: Connection lost; the session may still be alive (ephemerals kept) until its timeout.
    SUSPENDED = "suspended"
    #: The session is gone together with its ephemeral znodes; a new session follows
    #: (``CONNECTED``): re-create ephemerals, a controller must resign (S-5.1).
    EXPIRED = "expired"


class EventType(enum.Enum):
    """What a watch reports (ZooKeeper's NodeCreated / NodeDeleted / NodeDataChanged /
    NodeChildrenChanged)."""

    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    CHILD = "child"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One delivery of a persistent watch.

    For a data watch: ``data``/``stat`` are the znode's content as read when the watch was
    re-registered (``None`` after a deletion). For a children watch: ``children`` is the sorted
    child list (``None`` with type ``DELETED`` when the watched znode itself was deleted, which
    ends the children watch). As with ZooKeeper, several quick changes may be coalesced into one
    event by the ZooKeeper backend: treat an event as "go and look", not as a change log.
    """

    type: EventType
    path: str
    data: bytes | None = None
    stat: Stat | None = None
    children: tuple[str, ...] | None = None


WatchCallback = Callable[[WatchEvent], object]
SessionListener = Callable[[SessionState], object]


# ---------------------------------------------------------------------------------------------
# Multi (transaction) operations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateOp:
    """Create a znode inside :meth:`CoordinationStore.multi` (result: the created path)."""

    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    """Set a znode's data inside :meth:`CoordinationStore.multi` (result: the new :class:`Stat`)."""

    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Delete a childless znode inside :meth:`CoordinationStore.multi` (result: ``None``)."""

    path: str
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class CheckVersionOp:
    """Require a znode's version inside :meth:`CoordinationStore.multi` (result: ``None``).

    Kafka's controller uses it to fence writes with the ``/controller_epoch`` zkVersion.
    ``version=-1`` only checks that the znode exists.
    """

    path: str
    version: int


Op = CreateOp | SetDataOp | DeleteOp | CheckVersionOp


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------


def validate_path(path: str) -> str:
    """Check a ZooKeeper absolute path (``/a/b``; ``/`` is the root) and return it."""
    if not isinstance(path, str):
        raise TypeError(f"znode path must be a str, not {type(path).__name__}")
    if not path.startswith("/"):
        raise ValueError(f"znode path must start with '/': {path!r}")
    if path == "/":
        return path
    if path.endswith("/"):
        raise ValueError(f"znode path must not end with '/': {path!r}")
    for part in path[1:].split("/"):
        if part in ("", ".", "..") or "\x00" in part:
            raise ValueError(f"invalid znode path: {path!r}")
    return path


def validate_create_path(path: str, sequence: bool) -> str:
    """Check the path of a create: with ``sequence`` it may end with ``/`` (the counter is
    appended, ``/parent/`` gives ``/parent/0000000007``)."""
    if sequence and isinstance(path, str):
        validate_path(path + "0")
        return path
    return validate_path(path)


def parent_path(path: str) -> str:
    """The parent of a znode path (``/`` for top-level znodes)."""
    idx = path.rfind("/")
    return "/" if idx <= 0 else path[:idx]


def join_path(parent: str, child: str) -> str:
    """Join a parent path and a child name."""
    return f"/{child}" if parent == "/" else f"{parent}/{child}"


def sequence_name(prefix_path: str, counter: int) -> str:
    """A sequential znode's name: the requested path plus the counter on 10 digits, as
    ZooKeeper formats it (``%010d``)."""
    return f"{prefix_path}{counter:010d}"


def as_bytes(data: bytes | bytearray | memoryview | None) -> bytes:
    """znode data as bytes (``None`` is empty); anything but bytes-like is a TypeError."""
    if data is None:
        return b""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"znode data must be bytes, not {type(data).__name__}")


# ---------------------------------------------------------------------------------------------
# Watch handles
# ---------------------------------------------------------------------------------------------


class WatchHandle:
    """A persistent watch registration returned by ``watch_data`` / ``watch_children``.

    ``initial_data``/``initial_stat`` (data watch) or ``initial_children`` (children watch) hold
    the state read when the watch was registered; the callback then receives one
    :class:`WatchEvent` per later change, always on the store's event loop, never re-entrantly
    inside the call that made the change. :meth:`cancel` stops deliveries.
    """

    def __init__(
        self,
        kind: Literal["data", "children"],
        path: str,
        callback: WatchCallback,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.kind = kind
        self.path = path
        self.callback = callback
        self.initial_data: bytes | None = None
        self.initial_stat: Stat | None = None
        self.initial_children: tuple[str, ...] | None = None
        self._loop = loop
        self._cancelled = False
        self._ready = False
        self._backlog: list[WatchEvent] = []
        self._on_cancel: Callable[[], None] | None = None

    @property
    def active(self) -> bool:
        """Whether the watch still delivers events."""
        return not self._cancelled

    def cancel(self) -> None:
        """Stop delivering events for this watch (idempotent)."""
        if self._cancelled:
            return
        self._cancelled = True
        self._backlog.clear()
        hook, self._on_cancel = self._on_cancel, None
        if hook is not None:
            hook()

    def __repr__(self) -> str:
        state = "active" if self.active else "cancelled"
        return f"<WatchHandle {self.kind} {self.path} {state}>"

    # -- backend side -------------------------------------------------------------------------

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when the watch is cancelled (the backend unregisters it)."""
        self._on_cancel = hook

    def mark_ready(self) -> None:
        """Called (on the loop) once the registering call returns: flush early events."""
        self._ready = True
        if self._backlog:
            backlog, self._backlog = self._backlog, []
            for event in backlog:
                self._loop.call_soon(self.deliver, event)

    def deliver(self, event: WatchEvent) -> None:
        """Invoke the callback (must run on the loop)."""
        if self._cancelled:
            return
        if not self._ready:
            self._backlog.append(event)
            return
        if event.type is EventType.DELETED and self.kind == "children":
            # A children watch ends with the deletion of its znode (as kazoo's ChildrenWatch).
            self._cancelled = True
            self._on_cancel = None
        try:
            self.callback(event)
        except Exception:
            log.exception("watch callback for %s %s failed", self.kind, self.path)

    def deliver_threadsafe(self, event: WatchEvent) -> None:
        """Schedule :meth:`deliver` on the loop from any thread (kazoo's threads)."""
        if self._cancelled:
            return
        try:
            self._loop.call_soon_threadsafe(self.deliver, event)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._cancelled = True


# ---------------------------------------------------------------------------------------------
# The interface
# ---------------------------------------------------------------------------------------------


class CoordinationStore(abc.ABC):
    """ZooKeeper semantics for one client session, used from one asyncio loop.

    All data methods are coroutines. Errors are this module's :class:`CoordinationError`
    subclasses. Session listeners and watch callbacks are plain callables invoked on the loop;
    they should only enqueue work (S-5.5).
    """

    def __init__(self) -> None:
        self._session_listeners: list[SessionListener] = []
        self._state: SessionState | None = None
        self._session_id: int | None = None
        self._handles: list[WatchHandle] = []

    # -- lifecycle ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def start(self) -> None:
        """Open the session; listeners added before see ``CONNECTED`` once, before it returns."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the session: its ephemeral znodes are deleted at once; watches stop."""

    @property
    def session_id(self) -> int | None:
        """The current session id (ZooKeeper's 64-bit id; ``None`` when not connected yet)."""
        return self._session_id

    @property
    def state(self) -> SessionState | None:
        """The last session state (``None`` before :meth:`start` or after :meth:`close`)."""
        return self._state

    async def __aenter__(self) -> CoordinationStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- znodes ---------------------------------------------------------------------------------

    @abc.abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode and return its actual path (with the counter if ``sequence``).

        ``makepath`` creates missing ancestors as empty persistent znodes. Raises
        :class:`NodeExistsError`, :class:`NoNodeError` (missing parent) or
        :class:`NoChildrenForEphemeralsError`.
        """

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat]:
        """Read a znode's data and stat; :class:`NoNodeError` if absent."""

    @abc.abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """The znode's stat, or ``None`` if it does not exist."""

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        """Replace a znode's data if its version matches; return the new stat.

        Raises :class:`NoNodeError` or :class:`BadVersionError`.
        """

    @abc.abstractmethod
    async def delete(self, path: str, version: int = ANY_VERSION, recursive: bool = False) -> None:
        """Delete a znode (and its subtree if ``recursive``; ``version`` applies to ``path``).

        Raises :class:`NoNodeError`, :class:`BadVersionError` or :class:`NotEmptyError`.
        A recursive delete is not atomic with the ZooKeeper backend.
        """

    @abc.abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """The names of a znode's children, sorted; :class:`NoNodeError` if absent."""

    @abc.abstractmethod
    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        """Run ``ops`` as one ZooKeeper transaction: all apply or none.

        Returns one result per op (created path, :class:`Stat`, ``None``, ``None``). On failure
        raises the first failing op's error (e.g. :class:`BadVersionError`) with ``op_index`` and
        ``op`` set.
        """

    # -- watches ----------------------------------------------------------------------------

    async def watch_data(self, path: str, callback: WatchCallback) -> WatchHandle:
        """Watch a znode's existence and data (it may not exist yet) until cancelled.

        Events: ``CREATED``, ``CHANGED``, ``DELETED``. The watch survives connection loss and
        session expiry (it is re-registered; a change missed meanwhile is reported once).
        """
        return await self._watch("data", path, callback)

    async def watch_children(self, path: str, callback: WatchCallback) -> WatchHandle:
        """Watch a znode's child list until cancelled or the znode is deleted.

        The znode must exist (:class:`NoNodeError`). Events: ``CHILD`` with the new sorted child
        list, then ``DELETED`` (final) if the znode goes away.
        """
        return await self._watch("children", path, callback)

    @abc.abstractmethod
    async def _watch(
        self, kind: Literal["data", "children"], path: str, callback: WatchCallback
    ) -> WatchHandle:
        """Register a persistent watch of ``kind`` on ``path`` (the backend's half of
        :meth:`watch_data` / :meth:`watch_children`)."""

    def _cancel_watches(self) -> None:
        """Cancel every watch this store registered (on close)."""
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()

    # -- conveniences ---------------------------------------------------------------------------

    async def get_or_none(self, path: str) -> tuple[bytes, Stat] | None:
        """Like :meth:`get` but ``None`` when the znode does not exist."""
        try:
            return await self.get(path)
        except NoNodeError:
            return None

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its ancestors as empty persistent znodes if missing
        (Kafka's makeSurePersistentPathExists)."""
        with contextlib.suppress(NodeExistsError):
            await self.create(path, b"", makepath=True)

    # -- session listeners ----------------------------------------------------------------------

    def add_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener(state)`` on the loop at every session state change."""
        if listener not in self._session_listeners:
            self._session_listeners.append(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        """Stop calling ``listener``."""
        if listener in self._session_listeners:
            self._session_listeners.remove(listener)

    def _notify_session(self, state: SessionState) -> None:
        """Invoke the session listeners (on the loop)."""
        for listener in list(self._session_listeners):
            try:
                listener(state)
            except Exception:
                log.exception("session listener %r failed on %s", listener, state.value)

    def _repr_target(self) -> str:
        """What :meth:`__repr__` shows before the session (a backend's address, or nothing)."""
        return ""

    def __repr__(self) -> str:
        state = self._state.value if self._state else "closed"
        sid = f"0x{self._session_id:x}" if self._session_id else "-"
        return f"<{type(self).__name__}{self._repr_target()} session={sid} {state}>"
