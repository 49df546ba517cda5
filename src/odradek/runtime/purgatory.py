"""Kafka's delayed-operation purgatory (``DelayedOperation`` / ``DelayedOperationPurgatory``).

A request that cannot be answered yet -- a produce with ``acks=all`` waiting for the ISR, a fetch
waiting for ``min_bytes`` (S-3.6) -- becomes a :class:`DelayedOperation`. The purgatory
*watches* it under one or more keys (typically the partitions it touches) and puts its timeout in
a hierarchical timing wheel (:mod:`odradek.runtime.timer`, S-8.2). Whoever changes the state
the operation waits on calls :meth:`DelayedOperationPurgatory.check_and_complete` with that key;
if the operation's condition holds it completes at once, and its timer entry is unlinked in O(1).
Otherwise the timer expires it.

Completed operations may linger in the watch lists of keys other than the one that completed
them; like Kafka, the purgatory sweeps them out of all lists at once when the number of such
operations exceeds ``purge_interval`` (Kafka's ``*.purgatory.purge.interval.requests``), and it
drops a key's watch list as soon as it is empty. So memory follows the pending operations, not the
completed ones. Two refinements over Kafka's estimate (operations ever watched minus those in the
timer): an operation removed from its last watch list by ``check_and_complete`` no longer counts
(so single-key operations, the common case, never cause a sweep), and a sweep waits until the
lingering operations also outnumber the pending ones, so that its O(watched) cost is amortised
O(1) per completion even with a million operations pending (memory stays within twice the
pending operations' watch entries).

Concurrency: Kafka guards each operation with a lock because request handler threads and the
expiration reaper race. Here everything -- request handling, ``check_and_complete`` and the timer's
expiry (:class:`~odradek.runtime.timer.AsyncTimerDriver`) -- runs on the broker's single asyncio
loop, so there are no locks: "only the first caller completes it" holds because callers run one
after another. Do not call into a purgatory from another thread.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from .timer import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation(TimerTask, metaclass=ABCMeta):
    """An operation that completes when its condition holds or when ``delay_ms`` has passed.

    Subclasses implement :meth:`try_complete` (check the condition; if it holds, call
    :meth:`force_complete` and return its result) and :meth:`on_complete` (build and send the
    response; called exactly once). :meth:`on_expiration` is called after ``on_complete`` when
    the completion was caused by the timeout, as in Kafka (``run`` = ``if forceComplete()
    onExpiration()``); :attr:`timed_out` is already True during that ``on_complete``.
    """

    __slots__ = ("_completed", "_timed_out", "_watch_refs")

    def __init__(self, delay_ms: float) -> None:
        super().__init__(delay_ms)
        self._completed = False
        self._timed_out = False
        self._watch_refs = 0  # how many watch lists hold it (purgatory bookkeeping)

    @abstractmethod
    def try_complete(self) -> bool:
        """Complete the operation (via :meth:`force_complete`) if it can be; True iff it did."""

    def try_complete_for(self, key: Hashable) -> bool:
        """:meth:`try_complete` after :meth:`DelayedOperationPurgatory.check_and_complete` of
        `key`: only `key`'s state may have changed. The whole check by default; an operation
        over many keys may re-check only `key` (a follower's DelayedFetch of thousands of
        partitions, re-checked once per partition whose state moved, was quadratic)."""
        return self.try_complete()

    @abstractmethod
    def on_complete(self) -> None:
        """The completion logic; called exactly once, by the first :meth:`force_complete`."""

    def on_expiration(self) -> None:
        """Called once, after :meth:`on_complete`, if the operation completed by timing out."""

    def force_complete(self) -> bool:
        """Complete now if not yet completed: cancel the timeout and call :meth:`on_complete`.

        Returns True iff this call completed the operation (only the first caller does).
        """
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        self.on_complete()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completed

    @property
    def timed_out(self) -> bool:
        """True if the operation was (or is being) completed by its timeout."""
        return self._timed_out

    def run(self) -> None:
        """The timer task: on timeout, force-complete and then call :meth:`on_expiration`."""
        if self._completed:
            return
        self._timed_out = True
        if self.force_complete():
            self.on_expiration()


T = TypeVar("T", bound=DelayedOperation)


class _Watchers(Generic[T]):
    """The operations watched under one key, in insertion order (Kafka's ``Watchers``).

    Keyed by ``id(op)`` so that removal is O(1) and operations need not be hashable; the dict's
    values keep the operations alive, so an id cannot be reused while it is a key. Methods that
    remove operations also return how many of them left their *last* watch list.
    """

    __slots__ = ("key", "ops")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.ops: dict[int, T] = {}

    def watch(self, op: T) -> None:
        if id(op) not in self.ops:
            self.ops[id(op)] = op
            op._watch_refs += 1

    def _drop(self, op: T) -> int:
        """Remove ``op`` if present; 1 if that was its last watch list, else 0."""
        if self.ops.pop(id(op), None) is None:
            return 0
        op._watch_refs -= 1
        return 1 if op._watch_refs == 0 else 0

    def try_complete_watched(self, changed: Hashable = None) -> tuple[int, int]:
        """Try to complete every watched operation and drop the completed ones; `changed` is
        what moved (passed to ``try_complete_for``; None: this list's key).

        Returns (operations this call completed, operations that left their last list).
        """
        key = self.key if changed is None else changed
        completed = gone = 0
        # Iterate over a snapshot: completing an operation may re-enter the purgatory.
        for op in list(self.ops.values()):
            if op.is_completed:
                gone += self._drop(op)
            elif op.try_complete_for(key):
                completed += 1
                gone += self._drop(op)
            elif op.is_completed:
                gone += self._drop(op)
        return completed, gone

    def purge_completed(self) -> tuple[int, int]:
        """Drop completed operations. Returns (entries removed, operations that left their last
        list)."""
        done = [op for op in self.ops.values() if op.is_completed]
        return len(done), sum(self._drop(op) for op in done)

    def cancel(self) -> tuple[list[T], int]:
        """Drop everything, cancelling the timeouts (not completing). Returns (ops, gone)."""
        ops = list(self.ops.values())
        gone = 0
        for op in ops:
            op.cancel()
            gone += self._drop(op)
        return ops, gone


class DelayedOperationPurgatory(Generic[T]):
    """Kafka's ``DelayedOperationPurgatory``: watch lists by key plus a timing-wheel timer.

    ``timer`` must be dedicated to this purgatory (Kafka gives each purgatory its own
    ``SystemTimer``): :meth:`delayed` is the timer's size, and the purge estimate relies on it.
    If omitted, a :class:`~odradek.runtime.timer.Timer` on the monotonic clock is created. Someone
    must drive the timer: an :class:`~odradek.runtime.timer.AsyncTimerDriver` on the broker's
    loop, or :meth:`advance_clock` in tests.
    """

    def __init__(self, name: str, timer: Timer | None = None, purge_interval: int = 1000) -> None:
        if timer is None:
            timer = Timer()
        if timer.owner is not None and timer.owner != name:
            raise ValueError(
                f"timer already used by purgatory {timer.owner!r}; each purgatory needs its own"
            )
        timer.owner = name
        self.name = name
        self.timer = timer
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, _Watchers[T]] = {}
        # Operations in at least one watch list, reset to delayed() by a sweep (Kafka's
        # estimatedTotalOperations, but decremented when an operation leaves its last list).
        # Minus delayed() it estimates the completed operations still lingering in watch lists.
        self._estimated_total = 0

    def try_complete_else_watch(self, op: T, keys: Iterable[Hashable], *,
                                tried: bool = False) -> bool:
        """Complete ``op`` now if possible; otherwise watch it under every key and time it.

        As in Kafka: try; if not done, watch under all keys, then try once more (an event that
        happened between the first try and the watching would otherwise be missed); if still not
        done, add it to the timer. Returns True iff ``op`` completed during this call.

        ``tried``: the caller has just found ``op`` cannot complete, in the same synchronous step
        (nothing can have moved since on this single-threaded loop), so neither try is repeated
        (a follower's fetch of thousands of partitions would check each of them twice more).
        """
        keys = list(keys)
        if not keys:
            raise ValueError("the watch key list can't be empty")
        if not tried and op.try_complete():
            return True
        was_watched = op._watch_refs > 0
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers is None:
                watchers = self._watchers[key] = _Watchers(key)
            watchers.watch(op)
        if not was_watched:
            self._estimated_total += 1
        if not tried and op.try_complete():
            self._maybe_purge()
            return True
        if not op.is_completed:
            self.timer.add(op)
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable, changed: Hashable = None) -> int:
        """Try to complete the operations watched under ``key``; returns how many completed.
        ``changed``: what moved, when the operations are watched under a coarser key than it
        (a follower's fetch watched once per fetching replica, re-checked for one of its
        partitions); their ``try_complete_for`` gets it instead of ``key``."""
        watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed, gone = watchers.try_complete_watched(changed)
        self._estimated_total -= gone
        self._remove_key_if_empty(key, watchers)
        self._maybe_purge()
        return completed

    def watched(self) -> int:
        """Entries in all watch lists (an operation counts once per key; may include completed
        operations not purged yet), Kafka's ``PurgatorySize`` gauge."""
        return sum(len(w.ops) for w in self._watchers.values())

    def delayed(self) -> int:
        """Operations pending in the timer, Kafka's ``NumDelayedOperations`` gauge."""
        return self.timer.size()

    def num_watch_keys(self) -> int:
        """How many keys have a (non-empty, once purged) watch list."""
        return len(self._watchers)

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``: remove its watch list and cancel the timeouts of its
        operations, *without* completing them (e.g. the partition went away). Returns them."""
        watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        ops, gone = watchers.cancel()
        self._estimated_total -= gone
        return ops

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list and empty lists from the purgatory.
        Returns how many entries were removed. Normally triggered automatically."""
        purged = 0
        for key, watchers in list(self._watchers.items()):
            removed, _ = watchers.purge_completed()
            purged += removed
            self._remove_key_if_empty(key, watchers)
        self._estimated_total = self.delayed()
        return purged

    def advance_clock(self, now_ms: float | None = None) -> bool:
        """Expire due operations (``Timer.advance_clock``) and purge if due, like Kafka's reaper.
        For callers that drive the timer by hand; the asyncio driver drives the timer directly."""
        progressed = self.timer.advance_clock(now_ms)
        self._maybe_purge()
        return progressed

    def shutdown(self) -> None:
        """Cancel every watched operation's timeout and forget all watch lists (not completing
        anything), as the broker does when it stops."""
        for key in list(self._watchers):
            self.cancel_for_key(key)
        self._estimated_total = 0

    # -- internals -----------------------------------------------------------------------------

    def _maybe_purge(self) -> None:
        delayed = self.delayed()
        if self._estimated_total - delayed > max(self.purge_interval, delayed):
            self.purge_completed()

    def _remove_key_if_empty(self, key: Hashable, watchers: _Watchers[T]) -> None:
        if not watchers.ops and self._watchers.get(key) is watchers:
            del self._watchers[key]
