"""KIP-320 on the leader (Kafka's Partition.readRecords): a Fetch v12+ carries the epoch of the
fetcher's last fetched batch (`last_fetched_epoch`); if the leader's epoch history shows the
fetcher's log diverging from its own before the fetch offset, it answers `diverging_epoch`
{epoch, end offset} instead of records, and the fetcher truncates there
(server/replication/fetcher.py,
Kafka's truncateOnFetchResponse) without an OffsetForLeaderEpoch round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

UNDEFINED_EPOCH = -1


@dataclass(frozen=True, slots=True)
class EpochCheck:
    """The outcome: read (no error, no divergence), diverge at `diverging_epoch`, or answer
    `error` (OFFSET_OUT_OF_RANGE)."""

    error: ErrorCode = ErrorCode.none
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)


READ = EpochCheck()


def check_last_fetched_epoch(last_fetched_epoch: int, fetch_offset: int, log_start_offset: int,
                             end_offset_for_epoch: Callable[[int], tuple[int, int] | None]
                             ) -> EpochCheck:
    """Kafka's rule. `end_offset_for_epoch(e)` is the leader's (largest epoch <= e, its end
    offset), None when undefined (OffsetForLeaderEpoch's answer).

    * No last fetched epoch (-1, or a fetcher before v12): read.
    * The leader cannot place that epoch: OFFSET_OUT_OF_RANGE (the fetcher then resets its
      offset from the leader's log end / start offsets).
    * A fetch offset below the leader's log start: OFFSET_OUT_OF_RANGE, diverging or not.
    * The leader's largest epoch <= the fetcher's is smaller than it (the fetcher has an epoch
      the leader never had), or that epoch ends before the fetch offset (the fetcher has
      records of that epoch the leader does not): diverging at (that epoch, its end offset).
    * Otherwise: read.
    """
    if last_fetched_epoch < 0:
        return READ
    found = end_offset_for_epoch(last_fetched_epoch)
    if found is None or found[0] == UNDEFINED_EPOCH:
        return EpochCheck(ErrorCode.offset_out_of_range)
    if fetch_offset < log_start_offset:
        return EpochCheck(ErrorCode.offset_out_of_range)
    epoch, end_offset = found
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return EpochCheck(diverging_epoch=(epoch, end_offset))
    return READ
