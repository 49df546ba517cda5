"""The running log of one partition (Kafka's UnifiedLog + LocalLog, S-2): a directory
``<topic>-<partition>`` holding an ordered list of segments (``LogSegments``), the last one
active. ``Log.open`` loads the directory with ``LogLoader`` (storage/log_loader.py); the
topic-level configs are ``LogConfig`` (storage/log_config.py).

* Appends: ``append_as_leader`` assigns offsets by patching batch headers in place (and stamps
  LogAppendTime), checks idempotent producers, rolls when needed and writes the whole buffer with
  one write; ``append_as_follower`` keeps the leader's offsets.
* Reads: ``read`` returns FileRegions bounded by ``max_offset`` (the high watermark) and by
  whole batches; ``offset_for_timestamp`` serves ListOffsets.
* Durability: every append is in the OS page cache when it returns (kill -9 safe); fsync follows
  ``flush.messages``/``flush.ms`` and advances the recovery point. ``Log.open`` recovers every
  segment from the recovery point (CRC check, truncation at the first bad batch, index rebuild),
  so after a crash at any moment the log is a valid prefix of what was written.
* Retention: ``delete_retention_segments`` (retention.ms, retention.bytes, log start offset).

Deleted segments (retention, truncation, recovery) are renamed ``*.deleted`` (an atomic marker
a crash leaves for the next ``Log.open`` to remove, as Kafka's loader does), then unlinked at
once, not after ``file.delete.delay.ms``: Kafka waits for in-flight reads of its files, but a
FileRegion holds its own open file, which POSIX keeps readable after the unlink.
"""

from __future__ import annotations

import bisect
import functools
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..common.clock import now_ms
from ..protocol.control_records import EndTransactionMarker, end_txn_marker_of
from ..protocol.records import (
    BatchHeader,
    InvalidRecordError,
    assign_offsets,
    set_log_append_time,
)
from .append_origin import AppendOrigin
from .checkpoint_writer import CheckpointWriter
from .checkpoints import fsync_dir
from .errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    StorageError,
)
from .index import NO_TIMESTAMP
from .leader_epoch import UNDEFINED_EPOCH_OFFSET, LeaderEpochFileCache
from .log_config import LogConfig
from .log_dir_name import parse_topic_partition
from .log_loader import LogLoader, rebuild_producer_state, replay_producer_batches
from .log_results import AppendInfo, FetchData, FlushPlan, OffsetAndTimestamp, fsync_files
from .log_segments import LogSegments, segment_kwargs
from .log_validator import (
    check_follower_offsets,
    check_timestamps,
    follower_append_runs,
    read_follower_batches,
    validate_leader_batches,
)
from .producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateEntry,
    ProducerStateManager,
)
from .segment import DELETED_SUFFIX, SWAP_SUFFIX, FileHandleCache, LogSegment
from .transaction_index import AbortedTxn
from .transaction_state import TxnCompletion, collect_aborted_transactions

EARLIEST_TIMESTAMP = -2  # ListOffsets special timestamps
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


_F = TypeVar("_F", bound=Callable[..., Any])


def _io(what: str) -> Callable[[_F], _F]:
    """Kafka's maybeHandleIOException: an OSError in the decorated method is reported to the
    log's ``on_io_error`` (the log manager's LogDirFailureChannel: the dir goes offline) and
    raised as KafkaStorageError (KAFKA_STORAGE_ERROR to clients). A log already failed raises
    KafkaStorageError at once."""
    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        def wrapper(self: Log, *args: Any, **kwargs: Any) -> Any:
            if self.io_failed:
                raise KafkaStorageError(f"the log directory of {self.name} is offline")
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                raise self.io_error(f"Error while {what} {self.name} in dir {self.dir.parent}",
                                    exc) from exc
        return wrapper  # type: ignore[return-value]
    return decorate


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------












# ---------------------------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------------------------


def _leader_markers(buf: bytearray, headers: Sequence[BatchHeader], origin: AppendOrigin
                    ) -> list[EndTransactionMarker | None] | None:
    """The markers of a leader append's control batches (None when it has none). Clients
    may not write control batches (Kafka's LogValidator); a coordinator's must hold a
    COMMIT or ABORT marker."""
    if not any(h.is_control for h in headers):
        return None
    if origin is AppendOrigin.CLIENT:
        raise InvalidRecordError("clients are not allowed to write control records")
    markers: list[EndTransactionMarker | None] = []
    for h in headers:
        if not h.is_control:
            markers.append(None)
            continue
        try:
            marker = end_txn_marker_of(memoryview(buf)[h.position:h.position + h.size])
        except ValueError as exc:
            raise InvalidRecordError(f"unreadable control batch: {exc}") from None
        if marker is None:
            raise InvalidRecordError("a control batch without a transaction marker")
        markers.append(marker)
    return markers


def _index_completion(segment: LogSegment, completion: TxnCompletion) -> None:
    """An ABORT that completed a transaction goes into the marker's segment's .txnindex."""
    if completion.aborted_txn is not None:
        segment.txn_index.append(completion.aborted_txn)


# ---------------------------------------------------------------------------------------------
# Log
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _MaxPositionCache:
    offset: int = -1
    segment: LogSegment | None = None
    position: int = 0






class Log:
    """One partition's log. Create with ``Log.open``. Not thread-safe: the broker's loop owns
    it."""

    def __init__(self, directory: Path, config: LogConfig, *,
                 clock: Callable[[], int] | None = None,
                 handle_cache: FileHandleCache | None = None,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 strict_unknown_producer: bool = False,
                 checkpoint_writer: CheckpointWriter | None = None) -> None:
        self.dir = Path(directory)
        self.checkpoint_writer = checkpoint_writer  # leader-epoch-checkpoint off the loop
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config
        self.clock = clock or now_ms
        self.handle_cache = handle_cache if handle_cache is not None else FileHandleCache(64)
        self._segments = LogSegments()
        self.log_start_offset = 0
        self._leo = 0
        self.recovery_point = 0
        self._high_watermark: int | None = None  # set by the partition layer; None -> LEO
        self.last_flush_ms = self.clock()
        self._pending_flush_offset: int | None = None
        self._truncations = 0  # an off-loop flush only advances the recovery point if unchanged
        self._max_pos = _MaxPositionCache()
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir, load=False,
                                                       writer=checkpoint_writer)
        self.producer_state = ProducerStateManager(
            self.dir, producer_id_expiration_ms=producer_id_expiration_ms,
            strict_unknown_producer=strict_unknown_producer)
        self.closed = False
        # called with (log, new log end offset) after a truncation (the cleaner checkpoint)
        self.on_truncated: Callable[[Log, int], None] | None = None
        # called with (log dir, message, error) on an I/O error (KIP-112: the dir goes offline)
        self.on_io_error: Callable[[Path, str, OSError], None] | None = None
        self.io_failed = False

    def io_error(self, message: str, exc: OSError) -> KafkaStorageError:
        """Report an I/O error of this log (its dir goes offline); the error to raise."""
        self.io_failed = True
        if self.on_io_error is not None:
            self.on_io_error(self.dir.parent, message, exc)
        return KafkaStorageError(f"{message}: {exc}")

    # -- loading --------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig | None = None, recovery_point: int = 0,
             log_start_offset: int = 0, *, had_clean_shutdown: bool = False,
             clock: Callable[[], int] | None = None,
             handle_cache: FileHandleCache | None = None,
             producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
             strict_unknown_producer: bool = False,
             checkpoint_writer: CheckpointWriter | None = None) -> Log:
        """Load (or create) the log in `directory` (Kafka's LogLoader): remove stray
        ``.deleted``/``.cleaned`` files, complete interrupted ``.swap``s, drop orphan indexes,
        rebuild missing/corrupt indexes, recover every segment from the one holding
        `recovery_point` (unless `had_clean_shutdown`), then rebuild the leader epoch cache and
        the producer state."""
        log = cls(Path(directory), config or LogConfig(), clock=clock, handle_cache=handle_cache,
                  producer_id_expiration_ms=producer_id_expiration_ms,
                  strict_unknown_producer=strict_unknown_producer,
                  checkpoint_writer=checkpoint_writer)
        loader = LogLoader(log.dir, log.config, log._segments, log.producer_state,
                           clock=log.clock, handle_cache=log.handle_cache,
                           checkpoint_writer=checkpoint_writer)
        loaded = loader.load(recovery_point, log_start_offset, had_clean_shutdown)
        log.leader_epoch_cache = loaded.leader_epoch_cache
        log._leo = loaded.log_end_offset
        log.recovery_point = loaded.recovery_point
        log.log_start_offset = loaded.log_start_offset
        return log

    def _segment_kwargs(self, now_ms: int | None = None) -> dict[str, Any]:
        return segment_kwargs(self.config, self.handle_cache,
                              self.clock() if now_ms is None else now_ms)

    def _rebuild_producer_state(self) -> None:
        rebuild_producer_state(self.producer_state, self._segments, self.log_start_offset,
                               self._leo)

    # -- properties -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._segments.segments)

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments.segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    @property
    def high_watermark(self) -> int | None:
        """The partition's high watermark (None: not set, the log end offset stands for it)."""
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int | None) -> None:
        self._high_watermark = value
        if value is not None:
            self.producer_state.on_high_watermark_updated(value)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of an ongoing transaction, or of a completed one whose marker the
        high watermark has not passed yet (Kafka's firstUnstableOffset); None when none. Never
        below the log start offset, which DeleteRecords may move past an open transaction's
        first offset (Kafka's maybeIncrementFirstUnstableOffset)."""
        psm = self.producer_state
        if self._high_watermark is None:
            psm.on_high_watermark_updated(self._leo)
        first = psm.first_unstable_offset()
        return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, high watermark) (Kafka's lastStableOffset): where
        read_committed fetches stop."""
        hw = self._leo if self._high_watermark is None else self._high_watermark
        first = self.first_unstable_offset
        return hw if first is None or first >= hw else first

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), from the
        transaction indexes of the segment holding `start_offset` on (Kafka's
        collectAbortedTransactions)."""
        segments = self._segments.segments
        i = self._segments.floor_index(start_offset)
        return collect_aborted_transactions((s.txn_index for s in segments[i:]), start_offset,
                                            upper_bound_offset)

    @_io("reading the producer state of")
    def producers_at(self, offset: int) -> list[ProducerStateEntry]:
        """The producer state as it was at `offset` (a batch boundary from the first segment's
        base offset up to the log end offset), the log untouched: the newest readable snapshot
        at or below `offset` and the batches from there up to it (from the first segment when
        there is no snapshot, as a reload does)."""
        psm = self.producer_state
        state = ProducerStateManager(producer_id_expiration_ms=psm.producer_id_expiration_ms)
        start = self._segments.bases[0]
        found = psm.read_latest_snapshot(offset)
        if found is not None:
            state.restore(found[1], found[0])
            start = max(start, found[0])
        replay_producer_batches(state, self._segments, start, offset)
        return list(state.producers.values())

    @_io("writing a producer snapshot of")
    def restore_producers(self, entries: Sequence[ProducerStateEntry]) -> None:
        """An empty log starts with `entries`, the producer state at its start offset of the
        log it copies (``producers_at``): a snapshot at its start offset keeps them across a
        restart."""
        if self.size:
            raise StorageError(f"{self.name} is not empty: its producer state is its own")
        self.producer_state.restore(entries, self._leo)
        if entries:
            self.producer_state.take_snapshot(sync=False)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def __repr__(self) -> str:
        return (f"Log({self.name}, start={self.log_start_offset}, end={self._leo}, "
                f"segments={len(self._segments.segments)})")

    @property
    def truncations(self) -> int:
        """How many times the log was truncated: a plan made off the loop (a flush, a cleaning)
        applies only if this is unchanged."""
        return self._truncations

    def floor_segment(self, offset: int) -> LogSegment:
        """The segment holding `offset` (the first segment for an offset below the log)."""
        return self._segments.segments[self._segments.floor_index(offset)]

    # -- append ---------------------------------------------------------------------------------

    @_io("appending to")
    def append_as_leader(self, buf: bytearray, headers: Sequence[BatchHeader], leader_epoch: int,
                         now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendInfo:
        """Append a produce request's validated batches (``records.validate_batches``):
        assign offsets in place, stamp `leader_epoch` (and LogAppendTime), de-duplicate
        idempotent producers, roll if needed, write with one write. `origin` decides the
        producer checks (``AppendOrigin``); only COORDINATOR appends may hold control batches
        (transaction markers, whose first record is read), and only CLIENT appends to a
        compacted topic have their records' keys read (``log_validator``). Raises
        RecordTooLargeError, RecordValidationError, RecordBatchTooLargeError,
        InvalidTimestampError, InvalidRecordError,
        OutOfOrderSequenceError, InvalidProducerEpochError, InvalidTxnStateError,
        TransactionCoordinatorFencedError."""
        cfg = self.config
        size = len(buf)
        has_producer = validate_leader_batches(buf, headers, cfg, self.name, origin)
        log_append = cfg.log_append_time
        if not log_append:
            check_timestamps(headers, now_ms, cfg, self.name)
        psm = self.producer_state
        markers = _leader_markers(buf, headers, origin) if has_producer else None
        if has_producer:
            dup = psm.check_batches(headers, origin=origin, markers=markers)
            if dup is not None:
                return AppendInfo(dup.first_offset, dup.last_offset,
                                  dup.timestamp if log_append else NO_TIMESTAMP,
                                  self.log_start_offset, dup.timestamp, dup.last_offset,
                                  duplicate=True)
        offset = first = self._leo
        max_ts, shallow = NO_TIMESTAMP, first
        bases: list[int] = []
        for h in headers:
            assign_offsets(buf, h, offset, leader_epoch)
            last = offset + h.last_offset_delta
            if log_append:
                set_log_append_time(buf, h, now_ms)
                ts = now_ms
            else:
                ts = h.max_timestamp
            if ts > max_ts:
                max_ts, shallow = ts, last
            if has_producer:
                bases.append(offset)
            offset = last + 1
        last_offset = offset - 1
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first)
        segment = self._maybe_roll(size, max_ts, last_offset, first, now_ms)
        segment.append(last_offset, max_ts, shallow, buf)
        self._leo = offset
        if has_producer:
            stamp = now_ms if log_append else None
            for i, (h, base) in enumerate(zip(headers, bases, strict=True)):
                if h.producer_id >= 0:
                    completion = psm.update(h, stamp, base_offset=base,
                                            marker=markers[i] if markers is not None else None)
                    if completion is not None:
                        _index_completion(segment, completion)
        psm.update_map_end_offset(offset)
        if self._leo - self.recovery_point >= cfg.flush_messages:
            self.flush()
        return AppendInfo(first, last_offset, now_ms if log_append else NO_TIMESTAMP,
                          self.log_start_offset, max_ts, shallow, valid_bytes=size)

    @_io("appending to")
    def append_as_follower(self, data: bytes | bytearray | memoryview,
                           now_ms: int | None = None) -> AppendInfo | None:
        """Append batches fetched from the leader, keeping their offsets (Kafka's
        appendAsFollower): CRCs checked, offsets must increase from the log end offset, a
        trailing partial batch is ignored. Epoch cache and producer state follow the batches.
        None when `data` holds no complete batch."""
        view = memoryview(data)
        headers, ends = read_follower_batches(view)
        if not headers:
            return None
        first = headers[0].base_offset
        prev, max_ts, shallow = check_follower_offsets(headers, self._leo, self.name)
        pos = ends[-1]
        now = self.clock() if now_ms is None else now_ms
        # One fetch may carry more bytes than a segment holds (every batch was accepted by the
        # leader, one by one): append it in runs of whole batches that each fit a segment, so
        # the follower rolls where it must instead of refusing what the leader acknowledged.
        # A single batch larger than segment.bytes goes alone into a segment of its own.
        for lo, hi in follower_append_runs(ends, self.config.segment_bytes):
            start = 0 if lo == 0 else ends[lo - 1]
            run = headers[lo:hi]
            run_ts, run_shallow = NO_TIMESTAMP, run[0].base_offset
            for h in run:
                if h.max_timestamp > run_ts:
                    run_ts, run_shallow = h.max_timestamp, h.last_offset
            segment = self._maybe_roll(ends[hi - 1] - start, run_ts, run[-1].last_offset,
                                       run[0].base_offset, now)
            segment.append(run[-1].last_offset, run_ts, run_shallow, view[start:ends[hi - 1]])
            for h in run:
                if h.producer_id >= 0:
                    self._apply_replicated(segment, view, h)
        self._leo = prev + 1
        cache, psm = self.leader_epoch_cache, self.producer_state
        for h in headers:
            if h.partition_leader_epoch >= 0:
                cache.assign(h.partition_leader_epoch, h.base_offset)
        psm.update_map_end_offset(self._leo)
        if self._leo - self.recovery_point >= self.config.flush_messages:
            self.flush()
        return AppendInfo(first, prev, NO_TIMESTAMP, self.log_start_offset, max_ts, shallow,
                          valid_bytes=pos)

    def _apply_replicated(self, segment: LogSegment, view: memoryview, h: BatchHeader) -> None:
        """A replicated batch of a producer: the producer state follows it (never refused) and
        an ABORT marker goes into the segment's transaction index."""
        marker = None
        if h.is_control:
            try:
                marker = end_txn_marker_of(view[h.position:h.position + h.size])
            except (InvalidRecordError, ValueError):
                marker = None
        completion = self.producer_state.update(h, marker=marker)
        if completion is not None:
            _index_completion(segment, completion)

    # -- roll -----------------------------------------------------------------------------------

    def _maybe_roll(self, messages_size: int, max_timestamp: int, max_offset: int,
                    first_offset: int, now_ms: int) -> LogSegment:
        segment = self._segments.segments[-1]
        cfg = self.config
        if segment.should_roll(segment_bytes=cfg.segment_bytes, segment_ms=cfg.segment_ms,
                               messages_size=messages_size,
                               max_timestamp_in_messages=max_timestamp,
                               max_offset_in_messages=max_offset, now_ms=now_ms):
            return self.roll(now_ms, expected_next_offset=first_offset)
        return segment

    @_io("rolling")
    def roll(self, now_ms: int | None = None, expected_next_offset: int | None = None
             ) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset); the old one
        gets its final time index entry. An empty active segment is kept instead. A producer
        snapshot is written at the new base offset; the old segments are fsynced at the next
        ``maybe_flush`` (Kafka flushes them asynchronously)."""
        new_offset = max(expected_next_offset or 0, self._leo)
        active = self._segments.segments[-1]
        if active.base_offset == new_offset:
            if active.size == 0:
                return active
            raise StorageError(f"segment {new_offset} of {self.name} already exists")
        if new_offset < active.base_offset:
            raise StorageError(
                f"cannot roll {self.name} to offset {new_offset} below the active segment "
                f"{active.base_offset}"
            )
        active.on_become_inactive()
        segment = LogSegment.create(self.dir, new_offset, **self._segment_kwargs(now_ms))
        self._segments.add_active(segment)
        self.producer_state.update_map_end_offset(new_offset)
        self.producer_state.take_snapshot(sync=False)
        self.producer_state.update_map_end_offset(self._leo)
        self._pending_flush_offset = new_offset
        return segment

    # -- read -----------------------------------------------------------------------------------

    @_io("reading")
    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True, include_aborted_txns: bool = False) -> FetchData:
        """Whole batches from the one holding `fetch_offset`, at most `max_bytes` (the first
        batch whole if `min_one_message`), never a batch at or after `max_offset` (the high
        watermark for consumers, the last stable offset for read_committed ones; None = log end
        offset). Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset]; at the
        log end offset the result is empty. With `include_aborted_txns` (read_committed, Kafka's
        FetchTxnCommitted) the result lists the aborted transactions overlapping the fetched
        range: from `fetch_offset` up to the offset after the returned data (the next segment's
        base offset or the log end offset when the data ends its segment)."""
        result, last_segment = self._read(fetch_offset, max_bytes, max_offset, min_one_message)
        if include_aborted_txns:
            upper = self._upper_bound_offset(result, last_segment)
            result.aborted_transactions = [
                txn.as_aborted_transaction()
                for txn in self.collect_aborted_transactions(fetch_offset, upper)]
        return result

    def _upper_bound_offset(self, data: FetchData, last_segment: int | None) -> int:
        """The offset just after a read's data (Kafka's fetchUpperBoundOffset, exact here: one
        batch header read), for the aborted transactions of a read_committed fetch: the next
        batch's base offset in the data's last segment, else the next segment's base offset,
        else the log end offset."""
        if not data.regions or last_segment is None:
            return data.fetch_offset
        last = data.regions[-1]
        segments = self._segments.segments
        for header in segments[last_segment].iter_headers(last.position + last.size):
            return header.base_offset
        return (segments[last_segment + 1].base_offset if last_segment + 1 < len(segments)
                else self._leo)

    def _read(self, fetch_offset: int, max_bytes: int, max_offset: int | None,
              min_one_message: bool) -> tuple[FetchData, int | None]:
        """``read`` without the aborted transactions, and the index of the segment of the last
        region returned (None when nothing was)."""
        lso, leo = self.log_start_offset, self._leo
        if fetch_offset < lso or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is out of range for {self.name}: log start offset "
                f"{lso}, log end offset {leo}"
            )
        high = leo if max_offset is None else min(max_offset, leo)
        result = FetchData([], fetch_offset, high, lso, leo)
        last_segment: int | None = None
        if fetch_offset >= high or max_bytes < 0:
            return result, last_segment
        segments = self._segments.segments
        max_segment, max_position = self._position_of(high)
        i = self._segments.floor_index(fetch_offset)
        remaining = max_bytes
        first = True
        while i < len(segments):
            segment = segments[i]
            at_max = segment is max_segment
            limit = max_position if at_max else segment.size
            if first:
                found = segment.translate_offset(fetch_offset)
                if found is None:
                    if at_max:
                        break
                    i += 1
                    continue
                start, first_size = found.position, found.size
            else:
                start, first_size = 0, 0
            if start >= limit:
                break
            region = segment.read_at(start, first_size, remaining, limit,
                                     min_one_message and first)
            if region.size == 0:
                if first:
                    result.first_entry_incomplete = True
                break
            result.regions.append(region)
            last_segment = i
            remaining -= region.size
            first = False
            if at_max or remaining <= 0 or region.position + region.size < limit:
                break
            i += 1
        return result, last_segment

    def _position_of(self, offset: int) -> tuple[LogSegment, int]:
        """The segment and file position where batches at or after `offset` begin."""
        segments = self._segments.segments
        if offset >= self._leo:
            return segments[-1], segments[-1].size
        cache = self._max_pos
        if cache.offset == offset and cache.segment is not None:
            return cache.segment, cache.position
        i = self._segments.floor_index(offset)
        segment = segments[i]
        found = segment.translate_offset(offset)
        position = found.position if found is not None else segment.size
        cache.offset, cache.segment, cache.position = offset, segment, position
        return segment, position

    def _invalidate_caches(self) -> None:
        self._max_pos = _MaxPositionCache()

    def iter_batch_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers (no records) of every batch whose last offset >= `from_offset`, in
        order; ``header.position`` is relative to the batch's segment file."""
        start = self.log_start_offset if from_offset is None else from_offset
        yield from self._segments.iter_batch_headers(start)

    # -- ListOffsets ----------------------------------------------------------------------------

    @_io("looking up a timestamp in")
    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first offset whose record timestamp >= `timestamp` (None when no
        record is that recent); -2 (earliest) gives the log start offset, -1 (latest) the log
        end offset, -3 the offset of the record with the largest timestamp."""
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self.log_start_offset, NO_TIMESTAMP)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self._leo, NO_TIMESTAMP)
        segments = list(self._segments.segments)
        if timestamp == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for segment in segments:
                if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                    best = segment
            if best is None or best.max_timestamp_so_far < 0:
                return None
            found = best.find_offset_by_timestamp(best.max_timestamp_so_far,
                                                  self.log_start_offset)
            return OffsetAndTimestamp(found.offset, found.timestamp) if found else None
        for segment in segments:
            if segment.max_timestamp_so_far >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                return OffsetAndTimestamp(found.offset, found.timestamp) if found else None
        return None

    @_io("looking up offsets before a timestamp in")
    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's Log.legacyFetchOffsetsBefore): up to `max_num_offsets`
        offsets, largest first, from the candidates "each segment's base offset (at least the
        log start offset), dated by its file's modification time" and, when the active segment
        holds data, "the log end offset, dated now". -1 (latest) starts from the last candidate,
        -2 (earliest) from the first (so it gives one offset, the log start), any other
        timestamp from the last candidate dated at or before it (none: no offset). A negative
        `max_num_offsets` is a ValueError (Kafka's array of negative size)."""
        if max_num_offsets < 0:
            raise ValueError(f"max_num_offsets {max_num_offsets} is negative")
        segments = list(self._segments.segments)
        candidates = [(max(s.base_offset, self.log_start_offset), s.last_modified_ms())
                      for s in segments]
        if segments[-1].size > 0:
            candidates.append((self._leo, self.clock()))
        if timestamp == LATEST_TIMESTAMP:
            start = len(candidates) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(candidates) - 1
            while start >= 0 and candidates[start][1] > timestamp:
                start -= 1
        count = min(max_num_offsets, start + 1)
        return sorted((candidates[start - i][0] for i in range(count)), reverse=True)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int] | None:
        """OffsetsForLeaderEpoch: (epoch, end offset), None when undefined."""
        epoch, offset = self.leader_epoch_cache.end_offset_for(leader_epoch, self._leo)
        return None if offset == UNDEFINED_EPOCH_OFFSET else (epoch, offset)

    # -- truncation -----------------------------------------------------------------------------

    @_io("truncating")
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch at or after `target_offset` (a batch holding it goes whole);
        returns False (only trimming the epoch cache) when there is nothing to remove."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset")
        if target_offset >= self._leo:
            self.leader_epoch_cache.truncate_from_end(self._leo)
            return False
        if self._segments.bases[0] > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        keep = bisect.bisect_right(self._segments.bases, target_offset)
        doomed = self._segments.segments[keep:]
        self._delete_segments(doomed)
        active = self._segments.segments[-1]
        active.truncate_to(target_offset, self.clock())
        # durable before the epoch checkpoint moves on, or a power loss brings old batches back
        # under a newer epoch (docs/simulation.md, "The exploration so far")
        active.flush()
        if doomed:
            fsync_dir(self.dir)  # the segments' removals, as truncate_fully_and_start_at does
        self._leo = active.read_next_offset()
        self.recovery_point = min(self.recovery_point, self._leo)
        self._truncations += 1
        self.log_start_offset = min(self.log_start_offset, target_offset)
        if self._pending_flush_offset is not None and self._pending_flush_offset > self._leo:
            self._pending_flush_offset = self._leo
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self._rebuild_producer_state()
        if self.high_watermark is not None and self.high_watermark > self._leo:
            self.high_watermark = self._leo
        self._invalidate_caches()
        if self.on_truncated is not None:
            self.on_truncated(self, self._leo)
        return True

    @_io("truncating")
    def truncate_fully_and_start_at(self, new_offset: int,
                                    log_start_offset: int | None = None) -> None:
        """Delete everything and restart the log, empty, at `new_offset`."""
        self._delete_segments(list(self._segments.segments))
        self._segments.add_active(LogSegment.create(self.dir, new_offset, **self._segment_kwargs()))
        fsync_dir(self.dir)  # the removals durable before the emptied epoch checkpoint is
        self._leo = new_offset
        self.recovery_point = min(self.recovery_point, new_offset)
        self._truncations += 1
        self._pending_flush_offset = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)
        self.log_start_offset = new_offset if log_start_offset is None else log_start_offset
        if self.high_watermark is not None:
            self.high_watermark = new_offset
        self._invalidate_caches()
        if self.on_truncated is not None:
            self.on_truncated(self, new_offset)

    def replace_segments(self, new_segments: Sequence[LogSegment],
                         old_segments: Sequence[LogSegment], *,
                         step: Callable[[str], None] | None = None) -> None:
        """Swap cleaned segments (files ``*.cleaned``, flushed) in for `old_segments`, in
        Kafka's replaceSegments order, so that ``Log.open`` recovers from a crash at any step
        (``_remove_temp_files_and_complete_swaps``): the new files are renamed ``.swap``, the
        old segments ``.deleted``, the ``.swap`` files to their final names, and the old files
        are unlinked. `step` (tests) is called after each rename."""
        new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
        old_sorted = sorted(old_segments, key=lambda s: s.base_offset)
        for segment in reversed(new_sorted):
            segment.change_suffix(SWAP_SUFFIX)
            if step is not None:
                step("swap")
        old_ids = {id(s) for s in old_sorted}
        segments = [s for s in self._segments.segments if id(s) not in old_ids] + new_sorted
        segments.sort(key=lambda s: s.base_offset)
        self._segments.replace_all(segments)
        self._invalidate_caches()
        for segment in old_sorted:
            segment.change_suffix(DELETED_SUFFIX)
            if step is not None:
                step("deleted")
        for segment in new_sorted:
            segment.change_suffix("")
            if step is not None:
                step("final")
        for segment in old_sorted:
            segment.delete()

    def _delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Remove segments from the log: rename their files ``*.deleted``, then unlink them."""
        if not doomed:
            return
        self._segments.delete(doomed)
        self._invalidate_caches()

    # -- retention ------------------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """DeleteRecords: move the log start offset forward (never past the high watermark);
        whole segments below it go at the next retention pass."""
        hw = self._leo if self.high_watermark is None else self.high_watermark
        if new_log_start_offset > hw:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset of {self.name} to "
                f"{new_log_start_offset}, beyond the high watermark {hw}"
            )
        if new_log_start_offset <= self.log_start_offset:
            return False
        self.log_start_offset = new_log_start_offset
        self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
        return True

    @_io("deleting segments of")
    def delete_retention_segments(self, now_ms: int) -> int:
        """Kafka's deleteOldSegments: segments wholly below the log start offset, then (with
        cleanup.policy=delete) the oldest segments while the log exceeds retention.bytes and
        those whose largest timestamp is older than retention.ms. Only segments below the high
        watermark go; the active segment goes (after a roll) only if it is not empty.
        Returns the number of segments deleted."""
        deleted = self._delete_old_segments(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
            now_ms)
        if not self.config.delete:
            return deleted
        retention_bytes = self.config.retention_bytes
        size = self.size
        if retention_bytes >= 0 and size >= retention_bytes:
            excess = [size - retention_bytes]

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False

            deleted += self._delete_old_segments(over_size, now_ms)
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_old_segments(
                lambda seg, nxt: now_ms - seg.largest_timestamp() > retention_ms, now_ms)
        return deleted

    def _delete_old_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                             now_ms: int) -> int:
        segments = self._segments.segments
        hw = self._leo if self.high_watermark is None else min(self.high_watermark, self._leo)
        deletable: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            last_and_empty = nxt is None and segment.size == 0
            if hw >= upper and predicate(segment, nxt) and not last_and_empty:
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            new_segment = self.roll(now_ms)
            if deletable[-1] is new_segment:
                deletable.pop()
        if not deletable:
            return 0
        count = len(deletable)
        next_base = self._segments.bases[self._segments.segments.index(deletable[-1]) + 1]
        if next_base > self.log_start_offset:
            self.log_start_offset = next_base
            self.leader_epoch_cache.truncate_from_start(next_base)
        self._delete_segments(deletable)
        self.producer_state.delete_snapshots_before(self._segments.bases[0])
        if self._pending_flush_offset is not None and \
                self._pending_flush_offset <= self._segments.bases[0]:
            self._pending_flush_offset = None
        self.recovery_point = max(self.recovery_point, self._segments.bases[0])
        return count

    # -- flush ----------------------------------------------------------------------------------

    @_io("flushing")
    def flush(self, up_to: int | None = None, *, force: bool = False) -> None:
        """fsync the segments holding offsets [recovery point, up_to) (default: everything) and
        move the recovery point to `up_to`. `force` also fsyncs an empty active segment (clean
        shutdown)."""
        offset = self._leo if up_to is None else min(up_to, self._leo)
        if offset <= self.recovery_point and not force:
            return
        segments = self._segments.segments
        start = self._segments.floor_index(self.recovery_point)
        new_files = False
        for segment in segments[start:]:
            if segment.base_offset >= offset and not force:
                break
            segment.flush()
            if segment.base_offset >= self.recovery_point:
                new_files = True
        if new_files or force:
            fsync_dir(self.dir)
        if offset > self.recovery_point:
            self.recovery_point = offset
        self.last_flush_ms = self.clock()

    @_io("flushing")
    def maybe_flush(self, now_ms: int) -> bool:
        """The periodic flush: segments rolled since the last call, then everything when
        flush.messages unflushed messages or flush.ms since the last flush are reached."""
        flushed = False
        if self._pending_flush_offset is not None:
            pending, self._pending_flush_offset = self._pending_flush_offset, None
            self.flush(pending)
            flushed = True
        unflushed = self._leo - self.recovery_point
        if unflushed > 0 and (unflushed >= self.config.flush_messages
                              or now_ms - self.last_flush_ms >= self.config.flush_ms):
            self.flush()
            flushed = True
        return flushed

    # -- flushes off the event loop (the periodic flusher) --------------------------------------

    def plan_flush(self, up_to: int | None = None) -> FlushPlan | None:
        """``flush``'s files, to fsync elsewhere (``fsync_files``, in a thread), then
        ``complete_flush`` back on the loop: the recovery point moves only once the fsyncs
        covering it completed, and not at all if the log was truncated meanwhile."""
        offset = self._leo if up_to is None else min(up_to, self._leo)
        if offset <= self.recovery_point:
            return None
        files: list[Path] = []
        new_files = False
        for segment in self._segments.segments[self._segments.floor_index(self.recovery_point):]:
            if segment.base_offset >= offset:
                break
            files += (segment.log_path, segment.index_path, segment.time_index_path)
            if segment.txn_index_path.exists():  # created by the segment's first ABORT
                files += (segment.txn_index_path,)
            if segment.base_offset >= self.recovery_point:
                new_files = True
        return FlushPlan(offset, tuple(files), self.dir if new_files else None,
                         self._truncations)

    def maybe_flush_plan(self, now_ms: int) -> FlushPlan | None:
        """``maybe_flush``'s decision (rolled segments, flush.messages, flush.ms) as a plan."""
        pending, self._pending_flush_offset = self._pending_flush_offset, None
        unflushed = self._leo - self.recovery_point
        if unflushed > 0 and (unflushed >= self.config.flush_messages
                              or now_ms - self.last_flush_ms >= self.config.flush_ms):
            return self.plan_flush()
        return self.plan_flush(pending) if pending is not None else None

    def complete_flush(self, plan: FlushPlan, ok: bool = True) -> bool:
        """The plan's fsyncs are done (`ok`) or failed: True if the recovery point moved."""
        if not ok:  # flush those segments again next time
            if self._pending_flush_offset is None or self._pending_flush_offset < plan.offset:
                self._pending_flush_offset = plan.offset
            return False
        self.last_flush_ms = self.clock()
        if plan.truncations != self._truncations or plan.offset <= self.recovery_point:
            return False
        self.recovery_point = min(plan.offset, self._leo)
        return True

    # -- close / delete -------------------------------------------------------------------------

    def close(self, flush: bool = False) -> None:
        """Write a producer snapshot at the log end offset and close every segment (final time
        index entries). With `flush` (a clean shutdown) everything, those last index entries
        included, is fsynced and the recovery point moves to the log end offset."""
        if self.closed:
            return
        psm = self.producer_state
        psm.update_map_end_offset(self._leo)
        if self.dir.is_dir():
            psm.take_snapshot()
        wrote = False
        for segment in self._segments.segments:
            wrote = segment.close() or wrote
        if flush:
            # fsync what is not durable yet: data past the recovery point, final time index
            # entries. As Kafka's flush at the recovery point, nothing for an idle log: a clean
            # shutdown of 10,000 idle partitions was 40,000 fsyncs, and the disk it saturated
            # was the other brokers' too.
            self.flush(force=wrote)
            self.release_handles()
        self.closed = True

    def delete(self) -> None:
        """Remove the whole partition directory."""
        for segment in self._segments.segments:
            segment.close_handles()
        self._segments.clear()
        self.closed = True
        shutil.rmtree(self.dir, ignore_errors=True)

    def release_handles(self) -> None:
        for segment in self._segments.segments:
            segment.close_handles()


__all__ = [
    "AppendInfo",
    "FetchData",
    "FlushPlan",
    "Log",
    "OffsetAndTimestamp",
    "fsync_files",
    "parse_topic_partition",
]
