"""The controller's writes to the coordination store, fenced by ``/controller_epoch`` (S-5.3).

Kafka's KafkaZkClient takes ``expectedControllerEpochZkVersion`` on every controller write and
runs it as a ZooKeeper transaction with a check of ``/controller_epoch``'s version: a
controller that was paused past its session cannot write after a successor took over.
:meth:`ControllerZkClient.fenced` is the one place that adds the check; every controller write
(state nodes, topic assignments, admin nodes, notification and topic znode deletes) goes
through it. The controller's election itself (``/controller``, the epoch increment) is the
only write outside it: it establishes the epoch the others are fenced by.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ..common import TopicPartition
from ..coordination import paths
from ..coordination.optimistic_update import VersionConflict, optimistic_update
from ..coordination.store import (
    BadVersionError,
    CheckVersionOp,
    CoordinationStore,
    CreateOp,
    DeleteOp,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SetDataOp,
    Stat,
    parent_path,
)
from .context import ControllerContext, LeaderAndIsr
from .events import ControllerMovedError
from .pipeline import run_bounded

__all__ = ["DELETE_NODE", "ControllerZkClient"]

DELETE_NODE = b"\x00delete"
"""What an :meth:`ControllerZkClient.update_node` computation returns to delete the node."""

_MAX_OPS = 1000  # znodes per transaction of a recursive delete (ZooKeeper's 1 MB request cap)
_STATE_WRITES_PER_TXN = 50  # state node writes coalesced into one fenced transaction
_BULK_TXNS_IN_FLIGHT = 8  # transactions in flight of write_leader_and_isrs

_PendingWrite = tuple[str, bytes, int, "asyncio.Future[Stat]"]


class ControllerZkClient:
    """Fenced, version-checked writes of the active controller (one per controller)."""

    def __init__(self, store: CoordinationStore, context: ControllerContext) -> None:
        self.store = store
        self.ctx = context
        # state node writes of this loop iteration, sent together (see _set_state_node)
        self._pending: list[_PendingWrite] = []
        self._flush_scheduled = False
        self._flushes: set[asyncio.Task[None]] = set()

    async def fenced(self, ops: Sequence[Op]) -> list[Any]:
        """Run ``ops`` in one transaction with the check of ``/controller_epoch``'s version.

        Returns the results of ``ops``. A failed check raises :class:`ControllerMovedError`;
        another op's error is raised as the store raised it (its ``op_index`` counts the check
        as op 0)."""
        check = CheckVersionOp(paths.CONTROLLER_EPOCH, self.ctx.epoch_zk_version)
        try:
            results = await self.store.multi([check, *ops])
        except (BadVersionError, NoNodeError) as exc:
            if exc.op_index == 0:
                raise ControllerMovedError("Controller epoch zkVersion check fails") from None
            raise
        return results[1:]

    # -- znodes ---------------------------------------------------------------------------------
    async def ensure_path(self, path: str) -> None:
        """Create ``path`` (and missing ancestors) as empty persistent znodes if absent."""
        try:
            await self.fenced([CreateOp(path, b"")])
        except NodeExistsError:
            return
        except NoNodeError:
            await self.ensure_path(parent_path(path))
            try:
                await self.fenced([CreateOp(path, b"")])
            except NodeExistsError:
                return

    async def delete(self, path: str) -> bool:
        """Delete a childless znode; False if it was gone already."""
        try:
            await self.fenced([DeleteOp(path)])
        except NoNodeError:
            return False
        return True

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and its subtree (children first), fenced (Kafka's deleteRecursive
        with the epoch check); nothing if it is gone. A subtree that changed meanwhile is read
        again."""
        while True:
            nodes = await self._subtree(path)
            if not nodes:
                return
            try:
                for i in range(0, len(nodes), _MAX_OPS):
                    await self.fenced([DeleteOp(n) for n in nodes[i:i + _MAX_OPS]])
                return
            except (NoNodeError, NotEmptyError):
                continue

    async def _subtree(self, path: str) -> list[str]:
        try:
            children = await self.store.get_children(path)
        except NoNodeError:
            return []
        out: list[str] = []
        for child in children:
            out += await self._subtree(f"{path}/{child}")
        return [*out, path]

    async def update_node(self, path: str, compute: Callable[[bytes], bytes | None]
                          ) -> Stat | None:
        """Read-compute-write of an existing znode (``compute(data)``: the new data, None for
        nothing to do, :data:`DELETE_NODE` to delete it), version-checked and fenced, retried
        on a concurrent change (:func:`optimistic_update`). Nothing if the node is absent."""

        def decide(found: tuple[bytes, Stat]) -> bytes | None:
            return compute(found[0])

        async def write(found: tuple[bytes, Stat], data: bytes) -> Stat | None:
            op: Op = (DeleteOp(path, found[1].version) if data == DELETE_NODE
                      else SetDataOp(path, data, found[1].version))
            try:
                return (await self.fenced([op]))[0]
            except (BadVersionError, NoNodeError):
                raise VersionConflict() from None

        return await optimistic_update(lambda: self.store.get_or_none(path), decide, write)

    # -- partition state nodes (/brokers/topics/<t>/partitions/<p>/state) -----------------------
    async def write_leader_and_isr(self, tp: TopicPartition, new: LeaderAndIsr,
                                   create: bool = False) -> LeaderAndIsr | None:
        """Write a partition state node conditionally on its version (``new.zk_version``) or,
        with ``create``, create it. Returns the stored value (with its new version, also put
        in the context), or None if the node moved, exists or is gone (S-4.2)."""
        path = paths.partition_state_path(tp.topic, tp.partition)
        data = paths.encode_partition_state(paths.LeaderIsrAndControllerEpoch(
            new.leader, new.leader_epoch, tuple(new.isr), self.ctx.epoch))
        try:
            if create:
                await self.ensure_path(paths.topic_partition_path(tp.topic, tp.partition))
                await self.fenced([CreateOp(path, data)])
                version = 0
            else:
                version = (await self._set_state_node(path, data, new.zk_version)).version
        except (BadVersionError, NodeExistsError, NoNodeError):
            return None
        stored = LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr), version,
                              self.ctx.epoch)
        self.ctx.put_leader_and_isr(tp, stored)
        return stored

    async def write_leader_and_isrs(self, items: Sequence[tuple[TopicPartition, LeaderAndIsr]]
                                    ) -> list[LeaderAndIsr | None]:
        """Many :meth:`write_leader_and_isr` (no create) decided beforehand: the version-checked
        SetData ops go ``_STATE_WRITES_PER_TXN`` to a fenced transaction, a few transactions
        in flight. Returns the stored values in the order of ``items`` (also put in the
        context); None for every item of a transaction that failed on a node's version or a
        gone node (nothing of it was applied: the caller takes those partitions one by one).
        A failed epoch check raises :class:`ControllerMovedError`."""
        epoch = self.ctx.epoch
        encode = paths.encode_partition_state
        state = paths.LeaderIsrAndControllerEpoch
        ops = [SetDataOp(paths.partition_state_path(tp.topic, tp.partition),
                         encode(state(new.leader, new.leader_epoch, tuple(new.isr), epoch)),
                         new.zk_version) for tp, new in items]
        out: list[LeaderAndIsr | None] = [None] * len(items)

        async def chunk(start: int) -> None:
            end = min(start + _STATE_WRITES_PER_TXN, len(items))
            try:
                stats = await self.fenced(ops[start:end])
            except (BadVersionError, NoNodeError):
                return  # none applied: these stay None
            for i, stat in zip(range(start, end), stats, strict=True):
                tp, new = items[i]
                stored = LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr),
                                      stat.version, epoch)
                self.ctx.put_leader_and_isr(tp, stored)
                out[i] = stored

        await run_bounded(range(0, len(items), _STATE_WRITES_PER_TXN), chunk,
                          _BULK_TXNS_IN_FLIGHT)
        return out

    async def _set_state_node(self, path: str, data: bytes, version: int) -> Stat:
        """The fenced, version-checked SetData of one state node, coalesced with the other
        state node writes started in the same loop iteration: up to
        ``_STATE_WRITES_PER_TXN`` of them go as one transaction (one epoch check, one round
        trip, one kazoo call) instead of one transaction each. A controller event moving
        thousands of partitions spent most of its time in the per-transaction overhead.
        If the transaction fails on a partition's version (or a gone node), nothing of it was
        applied and each write is retried alone, so every caller gets its own outcome, as
        with its own transaction; a failed epoch check fails them all (ControllerMovedError)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Stat] = loop.create_future()
        self._pending.append((path, data, version, fut))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush_state_writes)
        return await fut

    def _flush_state_writes(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), _STATE_WRITES_PER_TXN):
            task = asyncio.ensure_future(self._write_chunk(pending[i:i + _STATE_WRITES_PER_TXN]))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _write_chunk(self, chunk: list[_PendingWrite]) -> None:
        live = [w for w in chunk if not w[3].done()]  # a cancelled caller writes nothing
        if len(live) > 1:
            try:
                stats = await self.fenced([SetDataOp(p, d, v) for p, d, v, _ in live])
            except (BadVersionError, NoNodeError):
                pass  # one partition's node moved: each alone, for its own outcome
            except Exception as exc:  # ControllerMovedError, the session, ...
                for *_, fut in live:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            else:
                for (*_, fut), stat in zip(live, stats, strict=True):
                    if not fut.done():
                        fut.set_result(stat)
                return
        await asyncio.gather(*(self._write_one(w) for w in live))

    async def _write_one(self, write: _PendingWrite) -> None:
        path, data, version, fut = write
        try:
            stat = (await self.fenced([SetDataOp(path, data, version)]))[0]
        except Exception as exc:
            if not fut.done():
                fut.set_exception(exc)
            return
        if not fut.done():
            fut.set_result(stat)

    async def refresh_leadership(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """Read a partition's state node into the context; a value written by a newer
        controller raises :class:`ControllerMovedError`."""
        found = await self.store.get_or_none(paths.partition_state_path(tp.topic, tp.partition))
        if found is None:
            return None
        decoded = paths.decode_partition_state(found[0])
        if decoded is None:
            return None
        value = LeaderAndIsr(decoded.leader, decoded.leader_epoch, tuple(decoded.isr),
                             found[1].version, decoded.controller_epoch)
        if decoded.controller_epoch > self.ctx.epoch:
            raise ControllerMovedError("A newer controller wrote the partition state")
        self.ctx.put_leader_and_isr(tp, value)
        return value

    async def update_leader_and_isr(
            self, tp: TopicPartition, compute: Callable[[LeaderAndIsr], LeaderAndIsr | None]
    ) -> LeaderAndIsr | None:
        """The optimistic update of a partition's leadership: ``compute`` from the context's
        value, version-checked write; on a conflict the stored value is read into the context
        and ``compute`` decides again. None when ``compute`` has nothing to write or the node
        is gone.

        "Nothing to write" is decided on the node, not on the context alone: the context lags
        a leader's own ISR writes until their isr_change_notification is processed (a replica
        a reassignment removes may have just joined the ISR), and no version check would
        catch a write skipped on a stale value. Kafka reads the state nodes before deciding."""
        checked = False

        async def read() -> LeaderAndIsr | None:
            nonlocal checked
            current = self.ctx.leader_and_isr(tp)
            if not checked and (current is None or compute(current) is None):
                checked = True
                current = await self.refresh_leadership(tp)
            return current

        async def write(_current: LeaderAndIsr, new: LeaderAndIsr) -> LeaderAndIsr | None:
            stored = await self.write_leader_and_isr(tp, new)
            if stored is None:
                if await self.refresh_leadership(tp) is None:
                    return None  # the node is gone: nothing to retry
                raise VersionConflict()
            return stored

        return await optimistic_update(read, compute, write)

