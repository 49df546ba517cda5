"""What a read_committed consumer skips (KIP-98), as Kafka's consumer does it
(``CompletedFetch.nextFetchedRecord``).

A Fetch with isolation_level=1 stops at the last stable offset and lists the aborted
transactions overlapping the fetched range: (producer id, first offset). Walking the batches in
offset order, every aborted transaction whose first offset is at or before the batch's last
offset marks its producer as aborted; a transactional batch of an aborted producer is skipped;
that producer's ABORT marker ends the skipping (a later transaction of the same producer is read
again). Control batches (the COMMIT/ABORT markers themselves) are never returned to the
application, under either isolation level.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from ..protocol.control_records import ControlRecordType, parse_control_batch
from ..protocol.records import BatchHeader

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def isolation_level(name: str) -> int:
    """isolation.level's value (Kafka's names, case-insensitive) -> the Fetch field."""
    value = str(name).strip().lower()
    if value == "read_committed":
        return READ_COMMITTED
    if value == "read_uncommitted":
        return READ_UNCOMMITTED
    raise ValueError(f"isolation.level must be read_uncommitted or read_committed, got {name!r}")


def aborted_of(partition_data: Any) -> list[tuple[int, int]]:
    """(producer id, first offset) of a Fetch response partition's aborted transactions."""
    return [(int(a.producer_id), int(a.first_offset))
            for a in (getattr(partition_data, "aborted_transactions", None) or ())]


class AbortedTransactions:
    """The skipping state of one fetched partition's records (one per Fetch response)."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        # by first offset (ties: by producer id, for determinism)
        self._queue = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._queue)
        self.aborted_producers: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        q = self._queue
        while q and q[0][0] <= offset:
            _, pid = heapq.heappop(q)
            self.aborted_producers.add(pid)

    def skip(self, header: BatchHeader, is_abort_marker: Callable[[], bool]) -> bool:
        """Whether the data batch `header` belongs to an aborted transaction (call for every
        batch in offset order; `is_abort_marker` tells whether a control batch is an ABORT
        marker, and is only called for control batches of a producer)."""
        if header.producer_id < 0:
            return False
        self._consume_up_to(header.last_offset)
        if header.is_control:
            if is_abort_marker():
                self.aborted_producers.discard(header.producer_id)
            return False  # control batches are skipped anyway, never as aborted data
        return header.is_transactional and header.producer_id in self.aborted_producers


def abort_marker_checker(buf: memoryview, header: BatchHeader) -> Callable[[], bool]:
    """A callable telling whether the control batch at `header` in `buf` is an ABORT marker."""
    def check() -> bool:
        try:
            control = parse_control_batch(buf[header.position:header.position + header.size])
        except ValueError:
            return False
        return control is not None and control.control_type == ControlRecordType.ABORT
    return check
