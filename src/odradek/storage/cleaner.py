"""The log cleaner (log compaction, S-2.7): Kafka's ``Cleaner``, ``SkimpyOffsetMap`` and the
record filter of ``MemoryRecords.filterTo``; the planning half of ``LogCleanerManager`` is in
storage/cleaning_plan.py.

A compacted log (``cleanup.policy`` containing ``compact``) has a *clean* head, already
deduplicated, from the log start offset to the *first dirty offset* (the offset recorded in
``cleaner-offset-checkpoint``), then a *dirty* section. A cleaning pass:

1. **Plans** (on the broker's loop; ``plan_cleaning``): the cleanable dirty section ends at the
   first uncleanable offset -- the active segment, the segment holding the high watermark, the
   segment holding the first unstable offset (the first offset of a transaction still open or
   whose marker is not replicated yet: an ongoing transaction is never touched), and the first
   segment with a record newer than ``min.compaction.lag.ms`` -- always at a segment boundary.
   The plan also takes the aborted transactions overlapping the range (from the segments'
   ``.txnindex``) and each producer's last data offset and epoch.
2. **Builds the offset map** (off the loop; ``Cleaner.build_offset_map``): key -> last offset
   over the dirty section, at most ``log.cleaner.dedupe.buffer.size / 24 * 0.9`` keys (Kafka's
   load factor and 24 bytes per entry: a 16-byte MD5 digest and an 8-byte offset). A full map
   ends the pass's dirty section early; the next pass starts there. Control batches and batches
   of aborted transactions are not mapped (Kafka's buildOffsetMapForSegment), so an aborted
   record never hides a committed one.
3. **Cleans** (off the loop; ``Cleaner.clean_group``) the segments from the log start up to the
   end of the mapped section, in groups that fit one segment (``group_segments_by_size``), each
   into ``<base>.log.cleaned`` (+ indexes), flushed: a record stays when its offset is >= the
   map's offset for its key; keyless records go; tombstones stay until the delete horizon.
   Batches keep base offset, last offset delta, producer id/epoch, base sequence and leader
   epoch; a batch losing some records is rebuilt (recompressed with its codec), one losing all
   goes -- unless it holds its producer's last sequence (kept as an empty batch, as Kafka does)
   or it is the group's last batch (kept as an empty batch so that the cleaned segment's offset
   range covers the whole group: see ``docs/compaction.md``, crash safety; such a filler carries
   no producer nor transaction). Transactions (KIP-98, ``cleaned_transaction_metadata.py``):
   batches of aborted transactions go whole; a COMMIT or ABORT marker stays until a pass reads
   no batch of its transaction and its segment is past the delete horizon; an ABORT marker
   that stays writes its aborted transaction into the cleaned segment's ``.txnindex``; a
   producer whose last entry is a marker keeps that marker.
4. **Swaps** (on the loop; ``swap_in``): if the log still holds the very segments that were
   cleaned, ``Log.replace_segments`` renames ``.cleaned`` -> ``.swap``, the old segments ->
   ``.deleted``, ``.swap`` -> final (Kafka's replaceSegments order). Otherwise the result is
   discarded and the log is tried again later.

The delete horizon is Kafka 2.x's: the last modification time of the last segment of the clean
section minus ``delete.retention.ms``; a segment modified after it keeps its tombstones and its
transaction markers (cleaned segments keep the modification time of the last segment they
replace).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..protocol.compression import Codec, compress, decompress
from ..protocol.control_records import ControlRecordType, parse_control_record_type
from ..protocol.records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    compute_crc,
    read_varint,
)
from .cleaned_transaction_metadata import (
    BatchRetention,
    CleanedTransactionMetadata,
    batch_retention,
    overlapping,
    should_discard_batch,
)
from .cleaning_plan import CleaningPlan, SourceSegment, plan_cleaning
from .index import NO_TIMESTAMP
from .log import Log
from .log_config import INT_MAX
from .segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from .transaction_index import TXN_INDEX_SUFFIX

log_ = logging.getLogger("kafka.log.LogCleaner")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
_TXN_CONTROL_MASK = 0x30  # the transactional (0x10) and control (0x20) attribute bits


class LogCleaningAbortedError(Exception):
    """The pass was aborted (shutdown, or the log changed under it): Kafka's
    LogCleaningAbortedException."""


# ---------------------------------------------------------------------------------------------
# Configuration (Kafka's CleanerConfig)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings, with Kafka's defaults."""

    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_message_size: int = 1048588
    max_io_bytes_per_second: float = float("inf")
    backoff_ms: int = 15000
    enable_cleaner: bool = True
    hash_algorithm: str = "MD5"

    @property
    def map_memory(self) -> int:
        """The offset map memory of one cleaner thread (Kafka caps it at 2 GiB per thread)."""
        return min(self.dedupe_buffer_size // max(1, self.num_threads), INT_MAX)


# ---------------------------------------------------------------------------------------------
# The offset map (Kafka's SkimpyOffsetMap, with a dict for the open-addressed array)
# ---------------------------------------------------------------------------------------------


class OffsetMap:
    """key hash -> last offset (Kafka's SkimpyOffsetMap), a dict of 16-byte MD5 digests. Kafka's
    array costs 24 bytes a slot; a Python dict entry with its digest and offset objects costs
    about 123 bytes, up to 160 while the dict resizes (measured with tracemalloc at 0.1-1.5 M
    entries), so ``slots`` = memory / 160: the configured `log.cleaner.dedupe.buffer.size` bounds
    the memory the map really takes, at the price of fewer keys per pass than Kafka maps
    (a log with more distinct keys than that is cleaned over several passes)."""

    BYTES_PER_ENTRY = 160
    HASH_SIZE = 16

    def __init__(self, memory: int, hash_algorithm: str = "MD5") -> None:
        self.memory = memory
        self.hash_algorithm = hash_algorithm
        self.slots = memory // self.BYTES_PER_ENTRY
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1
        self._digest: Callable[[bytes], Any] = (
            hashlib.md5 if hash_algorithm.upper() == "MD5"
            else functools.partial(hashlib.new, hash_algorithm))

    def _hash(self, key: bytes) -> bytes:
        return self._digest(key).digest()  # type: ignore[no-any-return]

    def put(self, key: bytes, offset: int) -> None:
        digest = self._hash(key)
        if len(self._map) >= self.slots and digest not in self._map:
            raise OverflowError("attempted to add a new entry to a full offset map")
        self._map[digest] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The offset stored for `key`, -1 if none."""
        return self._map.get(self._hash(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self._map)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots if self.slots else 0.0

    def max_entries(self, load_factor: float) -> int:
        """How many entries one pass may put: Kafka's ``(slots * dupBufferLoadFactor).toInt``."""
        return int(self.slots * load_factor)


# ---------------------------------------------------------------------------------------------
# Records (off the hot path: the cleaner parses each record's key)
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RawRecord:
    """One record of a batch, as bytes: its absolute offset and timestamp, its key, whether it
    has a value, and [start, end) in the (decompressed) records payload."""

    offset: int
    timestamp: int
    key: bytes | None
    has_value: bool
    start: int
    end: int


def iter_raw_records(header: BatchHeader, payload: bytes) -> Iterator[RawRecord]:
    """The records of a batch whose (decompressed) records payload is `payload`."""
    pos = 0
    n = len(payload)
    base_offset, base_ts = header.base_offset, header.base_timestamp
    log_append = header.is_log_append_time
    for _ in range(header.records_count):
        start = pos
        length, pos = read_varint(payload, pos)
        end = pos + length
        if length < 0 or end > n:
            raise CorruptRecordError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        key_len, pos = read_varint(payload, pos)
        key: bytes | None = None
        if key_len >= 0:
            key = payload[pos:pos + key_len]
            pos += key_len
        value_len, pos = read_varint(payload, pos)
        if pos > end:
            raise CorruptRecordError("record fields run past the record's length")
        yield RawRecord(base_offset + off_delta,
                        header.max_timestamp if log_append else base_ts + ts_delta,
                        key, value_len >= 0, start, end)
        pos = end


def records_payload(header: BatchHeader, batch: bytes | memoryview) -> bytes:
    data = bytes(batch[HEADER_SIZE:header.size])
    if header.compression != Codec.NONE:
        data = decompress(header.compression, data)
    return data


def rebuild_batch(header: BatchHeader, payload: bytes, kept: Sequence[RawRecord]) -> bytes:
    """The batch with only the `kept` records (Kafka's buildRetainedRecordsInto for magic 2):
    same base offset, last offset delta, base timestamp, producer id/epoch, base sequence,
    leader epoch and codec; records copied byte for byte (their offset and timestamp deltas
    still refer to the same base); max timestamp recomputed (LogAppendTime batches keep it)."""
    body = b"".join(payload[r.start:r.end] for r in kept)
    if header.compression != Codec.NONE:
        body = compress(header.compression, body)
    max_ts = header.max_timestamp if header.is_log_append_time else max(r.timestamp for r in kept)
    out = bytearray(_HEADER.pack(
        header.base_offset, MIN_BATCH_LENGTH + len(body), header.partition_leader_epoch, 2, 0,
        header.attributes, header.last_offset_delta, header.base_timestamp, max_ts,
        header.producer_id, header.producer_epoch, header.base_sequence, len(kept)))
    out += body
    _U32.pack_into(out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def control_type_of(header: BatchHeader, batch: bytes | memoryview) -> ControlRecordType | None:
    """The type in the key of a control batch's (first) record; None for an emptied one."""
    if header.records_count == 0:
        return None
    for record in iter_raw_records(header, records_payload(header, batch)):
        return parse_control_record_type(record.key)
    return None


def filler_batch(header: BatchHeader) -> bytes:
    """The empty batch that keeps a cleaned group's offset range when its last batch went (see
    the module docstring): `header`'s empty batch, but with no producer, transaction or control
    bits when it was transactional -- it must not count as data of a transaction (which would
    keep that transaction's marker) nor as a producer's entry."""
    if not header.is_transactional and not header.is_control:
        return empty_batch(header)
    return empty_batch(dataclasses.replace(
        header, attributes=header.attributes & ~_TXN_CONTROL_MASK, producer_id=-1,
        producer_epoch=-1, base_sequence=-1))


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's DefaultRecordBatch.writeEmptyHeader: no records, no compression, the batch's
    offsets (base and last), producer id/epoch, base sequence, leader epoch and max
    timestamp -- what keeps a producer's last sequence in a compacted log."""
    attributes = header.attributes & ~COMPRESSION_MASK
    out = bytearray(_HEADER.pack(
        header.base_offset, MIN_BATCH_LENGTH, header.partition_leader_epoch, 2, 0, attributes,
        header.last_offset_delta, NO_TIMESTAMP, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, 0))
    _U32.pack_into(out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Reading segment files off the loop
# ---------------------------------------------------------------------------------------------


def iter_file_batches(path: Path, start: int, end: int, buffer_size: int,
                      check: Callable[[], None] | None = None
                      ) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Whole batches in [start, end) of a segment file, read with its own descriptor in
    chunks of `buffer_size` (grown for a larger batch). FileNotFoundError if the file went."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        pos = start
        size = buffer_size
        while end - pos >= HEADER_SIZE:
            if check is not None:
                check()
            chunk = os.pread(fd, min(size, end - pos), pos)
            view = memoryview(chunk)
            off = 0
            while len(chunk) - off >= HEADER_SIZE:
                header = BatchHeader(*_HEADER.unpack_from(chunk, off), position=pos + off)
                if header.batch_length < MIN_BATCH_LENGTH or header.magic != 2:
                    raise CorruptRecordError(f"invalid batch at position {pos + off} of {path}")
                if off + header.size > len(chunk):
                    break
                yield header, view[off:off + header.size]
                off += header.size
            if off == 0:
                if len(chunk) < HEADER_SIZE:
                    return
                header = BatchHeader(*_HEADER.unpack_from(chunk, 0), position=pos)
                if pos + header.size > end:
                    raise CorruptRecordError(
                        f"batch of {header.size} bytes at {pos} runs past the end of {path}")
                size = max(size, header.size)
                continue
            pos += off
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Statistics and the cleaner
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CleanerStats:
    """Kafka's CleanerStats."""

    start_time: float = field(default_factory=time.monotonic)
    map_complete_time: float = -1.0
    end_time: float = -1.0
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages_read: int = 0
    buffer_utilization: float = 0.0

    def index_done(self) -> None:
        self.map_complete_time = time.monotonic()

    def all_done(self) -> None:
        self.end_time = time.monotonic()

    @property
    def elapsed_secs(self) -> float:
        return max((self.end_time if self.end_time >= 0 else time.monotonic())
                   - self.start_time, 1e-9)

    @property
    def elapsed_index_secs(self) -> float:
        end = self.map_complete_time if self.map_complete_time >= 0 else time.monotonic()
        return max(end - self.start_time, 1e-9)


def _java_date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%a %b %d %H:%M:%S UTC %Y")


def format_stats(cleaner_id: int, name: str, start: int, end: int, stats: CleanerStats) -> str:
    """Kafka's CleanerThread.recordStats message."""
    def mb(n: float) -> float:
        return n / (1024 * 1024)

    total, index = stats.elapsed_secs, stats.elapsed_index_secs
    clean = max(total - index, 1e-9)
    read = max(stats.bytes_read, 1)
    messages = max(stats.messages_read, 1)
    return (
        f"\n\tLog cleaner thread {cleaner_id} cleaned log {name} (dirty section = "
        f"[{start}, {end}])\n"
        f"\t{mb(stats.bytes_read):,.1f} MB of log processed in {total:,.1f} seconds "
        f"({mb(stats.bytes_read) / total:,.1f} MB/sec).\n"
        f"\tIndexed {mb(stats.map_bytes_read):,.1f} MB in {index:.1f} seconds "
        f"({mb(stats.map_bytes_read) / index:,.1f} Mb/sec, {100 * index / total:.1f}% of "
        f"total time)\n"
        f"\tBuffer utilization: {100 * stats.buffer_utilization:.1f}%\n"
        f"\tCleaned {mb(stats.bytes_read):,.1f} MB in {clean:.1f} seconds "
        f"({mb(stats.bytes_read) / clean:,.1f} Mb/sec, {100 * clean / total:.1f}% of total "
        f"time)\n"
        f"\tStart size: {mb(stats.bytes_read):,.1f} MB ({stats.messages_read:,} messages)\n"
        f"\tEnd size: {mb(stats.bytes_written):,.1f} MB ({stats.messages_written:,} messages)\n"
        f"\t{100.0 * (1.0 - stats.bytes_written / read):.1f}% size reduction "
        f"({100.0 * (1.0 - stats.messages_written / messages):.1f}% fewer messages)\n")


class Cleaner:
    """The work of one pass over one log (Kafka's Cleaner). ``build_offset_map`` and
    ``clean_group`` only read files and write new ``.cleaned`` files, so they may run on any
    thread; ``plan_cleaning`` and ``swap_in`` run where the log is owned (the broker's loop).
    `check_done` is called between batches and may raise LogCleaningAbortedError."""

    def __init__(self, cleaner_id: int = 0, config: CleanerConfig | None = None,
                 check_done: Callable[[], None] | None = None) -> None:
        self.id = cleaner_id
        self.config = config or CleanerConfig()
        self.offset_map = OffsetMap(self.config.map_memory, self.config.hash_algorithm)
        if self.offset_map.slots * self.config.dedupe_buffer_load_factor <= 1:
            raise ValueError(
                "offset map is too small to fit in even a single message, so log cleaning "
                "will never make progress. You can increase log.cleaner.dedupe.buffer.size or "
                "decrease log.cleaner.threads")
        self.check_done = check_done or (lambda: None)

    def _info(self, msg: str, *args: object) -> None:
        log_.info("Cleaner %d: " + msg, self.id, *args)

    # -- step 2: the offset map -----------------------------------------------------------------

    def build_offset_map(self, plan: CleaningPlan, stats: CleanerStats) -> int:
        """Map the dirty section's keys to their last offsets; returns the end offset of the
        mapped section (the map's latest offset + 1)."""
        omap = self.offset_map
        omap.clear()
        self._info("Beginning cleaning of log %s.", plan.log_name)
        self._info("Building offset map for %s...", plan.log_name)
        dirty = plan.dirty_sources()
        start, end = plan.first_dirty_offset, plan.first_uncleanable_offset
        self._info("Building offset map for log %s for %d segments in offset range [%d, %d).",
                   plan.log_name, len(dirty), start, end)
        omap.update_latest_offset(start - 1)
        max_entries = omap.max_entries(self.config.dedupe_buffer_load_factor)
        txns = CleanedTransactionMetadata.of(overlapping(plan.aborted_txns, start, end))
        for i, source in enumerate(dirty):
            nxt = dirty[i + 1].view.base_offset if i + 1 < len(dirty) else end
            position = plan.dirty_start_position if i == 0 else 0
            if self._map_segment(source, position, start, omap, max_entries, txns, stats):
                log_.debug("Cleaner %d: Offset map is full, %d segments fully mapped, segment "
                          "with base offset %d is partially mapped", self.id, i,
                          source.view.base_offset)
                break
            omap.update_latest_offset(nxt - 1)
        self._info("Offset map for log %s complete.", plan.log_name)
        stats.index_done()
        return omap.latest_offset + 1

    def _map_segment(self, source: SourceSegment, position: int, start: int, omap: OffsetMap,
                     max_entries: int, txns: CleanedTransactionMetadata,
                     stats: CleanerStats) -> bool:
        """Kafka's buildOffsetMapForSegment: control batches only move the transaction state,
        batches of aborted transactions are not mapped (their records go anyway)."""
        for header, batch in iter_file_batches(source.path, position, source.view.size,
                                               self.config.io_buffer_size, self.check_done):
            stats.map_bytes_read += header.size
            if header.is_control:
                txns.on_control_batch_read(header, control_type_of(header, batch))
                stats.map_messages_read += 1
            elif txns.on_batch_read(header):
                stats.map_messages_read += header.records_count
            elif header.records_count > 0 and header.last_offset >= start:
                for record in iter_raw_records(header, records_payload(header, batch)):
                    if record.key is not None and record.offset >= start:
                        if omap.size < max_entries:
                            omap.put(record.key, record.offset)
                        else:
                            return True
                    stats.map_messages_read += 1
            if header.last_offset >= start:
                omap.update_latest_offset(header.last_offset)
        return False

    # -- step 3: cleaning a group into a .cleaned segment ---------------------------------------

    def clean_group(self, plan: CleaningPlan, group: Sequence[SourceSegment],
                    stats: CleanerStats,
                    txns: CleanedTransactionMetadata | None = None) -> LogSegment:
        """Write the group's retained batches into ``<base>.log.cleaned`` (+ indexes, and the
        ``.txnindex`` of the aborted transactions whose marker stays), flushed, with the last
        source segment's modification time. `txns` carries the transaction state from group
        to group of one pass (a pass's first group: the plan's aborted transactions). The
        caller swaps the segment in or discards it (``discard_cleaned``)."""
        if txns is None:
            txns = CleanedTransactionMetadata.of(plan.aborted_txns)
        base = group[0].view.base_offset
        cleaned = create_cleaned_segment(plan, base)
        try:
            dropped_last: BatchHeader | None = None
            for source in group:
                retain = source.view.last_modified_ms > plan.delete_horizon_ms
                self._info("Cleaning LogSegment(baseOffset=%d, size=%d) in log %s into %d "
                           "with deletion horizon %d, %s deletes.", source.view.base_offset,
                           source.view.size, plan.log_name, base, plan.delete_horizon_ms,
                           "retaining" if retain else "discarding")
                for header, batch in iter_file_batches(source.path, 0, source.view.size,
                                                       self.config.io_buffer_size,
                                                       self.check_done):
                    out = self.filter_batch(plan, header, batch, retain, stats, txns)
                    if out is None:
                        dropped_last = header
                        continue
                    dropped_last = None
                    self._append(cleaned, header, out)
            if dropped_last is not None:
                # keep the group's offset range: see the module docstring
                self._append(cleaned, dropped_last, filler_batch(dropped_last))
            kept_aborted = txns.take_retained_aborted()
            for txn in kept_aborted:
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
            if kept_aborted:
                cleaned.txn_index.flush()
            cleaned.close_handles()
            mtime = group[-1].view.last_modified_ms
            paths = [cleaned.log_path, cleaned.index_path, cleaned.time_index_path]
            if kept_aborted:
                paths.append(cleaned.txn_index_path)
            for path in paths:
                os.utime(path, ns=(mtime * 1_000_000, mtime * 1_000_000))
        except BaseException:
            discard_cleaned(cleaned)
            raise
        return cleaned

    @staticmethod
    def _append(cleaned: LogSegment, source_header: BatchHeader, data: bytes) -> None:
        header = BatchHeader(*_HEADER.unpack_from(data, 0))
        cleaned.append(header.last_offset, header.max_timestamp, header.last_offset, data)

    def filter_batch(self, plan: CleaningPlan, header: BatchHeader,
                     batch: bytes | memoryview, retain_deletes: bool,
                     stats: CleanerStats,
                     txns: CleanedTransactionMetadata | None = None) -> bytes | None:
        """The bytes to keep of one batch (the original, a rebuilt batch, an empty batch) or
        None (Kafka's MemoryRecords.filterTo with the cleaner's RecordFilter).
        `retain_deletes` keeps tombstones and transaction markers (the segment is newer than
        the delete horizon); `txns` is the pass's transaction state, fed this batch."""
        if txns is None:
            txns = CleanedTransactionMetadata.of(plan.aborted_txns)
        stats.bytes_read += header.size
        control_type = control_type_of(header, batch) if header.is_control else None
        discard = should_discard_batch(header, control_type, txns, retain_deletes)
        retention = batch_retention(header, discard, plan.active_producers)
        if retention is BatchRetention.DELETE:
            return None
        kept: list[RawRecord] = []
        total = header.records_count
        payload = b""
        if discard:
            pass  # kept only to hold its producer's state: no record stays
        elif header.is_control:
            if total:  # a marker that stays stays whole
                stats.messages_read += total
                stats.messages_written += total
                stats.bytes_written += header.size
                return bytes(batch)
        else:
            omap = self.offset_map
            latest = omap.latest_offset
            payload = records_payload(header, batch) if total else b""
            total = 0
            for record in iter_raw_records(header, payload):
                total += 1
                if record.offset > latest:
                    kept.append(record)
                elif record.key is None:
                    stats.invalid_messages_read += 1
                elif record.offset >= omap.get(record.key) \
                        and (record.has_value or retain_deletes):
                    kept.append(record)
        stats.messages_read += total
        if kept:
            stats.messages_written += len(kept)
            out = bytes(batch) if len(kept) == total else rebuild_batch(header, payload, kept)
            stats.bytes_written += len(out)
            return out
        if retention is BatchRetention.RETAIN_EMPTY:
            out = empty_batch(header)
            stats.bytes_written += len(out)
            return out
        return None


def cleaned_paths(directory: Path, base_offset: int) -> list[Path]:
    prefix = directory / f"{base_offset:020d}"
    return [Path(f"{prefix}{s}{CLEANED_SUFFIX}") for s in (LOG_SUFFIX, INDEX_SUFFIX,
                                                           TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)]


def create_cleaned_segment(plan: CleaningPlan, base_offset: int) -> LogSegment:
    """A new ``<base>.log.cleaned`` segment (stale ``.cleaned`` files of that name go first),
    with no handle cache: it belongs to the cleaner until it is swapped in."""
    return LogSegment.create(plan.directory, base_offset, suffix=CLEANED_SUFFIX,
                             index_interval_bytes=plan.index_interval_bytes,
                             max_index_size=plan.max_index_size)


def discard_cleaned(cleaned: LogSegment) -> None:
    """Remove a cleaned segment that will not be swapped in."""
    cleaned.close_handles()
    for path in cleaned_paths(cleaned.dir, cleaned.base_offset):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Step 4: the swap, on the loop
# ---------------------------------------------------------------------------------------------


def still_holds(log: Log, plan: CleaningPlan, group: Sequence[SourceSegment]) -> bool:
    """Whether `log` still holds exactly the group's segments, unchanged (same objects, same
    sizes, consecutive, none active) and was neither truncated nor closed since the plan."""
    if log.closed or log.truncations != plan.truncations:
        return False
    segments = log.segments
    try:
        i = next(k for k, s in enumerate(segments) if s is group[0].segment)
    except StopIteration:
        return False
    if i + len(group) >= len(segments):  # the active segment cannot be replaced
        return False
    for k, source in enumerate(group):
        seg = segments[i + k]
        if seg is not source.segment or seg.size != source.view.size:
            return False
    return True


def swap_in(log: Log, plan: CleaningPlan, group: Sequence[SourceSegment],
            cleaned: LogSegment, step: Callable[[str], None] | None = None) -> bool:
    """Replace the group's segments by the cleaned one (one synchronous step on the loop);
    False (and the cleaned files removed) when the log changed since the plan."""
    if not still_holds(log, plan, group):
        discard_cleaned(cleaned)
        return False
    cleaned.attach_handle_cache(log.handle_cache)
    old = [s.segment for s in group]
    log_.info("Swapping in cleaned segment %r for segment(s) %r in log %s", cleaned, old,
              log.name)
    log.replace_segments([cleaned], old, step=step)
    return True


# ---------------------------------------------------------------------------------------------
# One whole pass, driven by a caller that owns the log
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CleanResult:
    first_dirty_offset: int
    end_offset: int  # the new first dirty offset (cleaner checkpoint)
    stats: CleanerStats
    groups: int
    completed: bool


def clean_log(log: Log, now_ms: int, *, last_clean_offset: int | None = None,
              cleaner: Cleaner | None = None, config: CleanerConfig | None = None
              ) -> CleanResult | None:
    """Clean `log` now, all in the calling thread (which must own the log), whatever its dirty
    ratio. None when nothing is cleanable."""
    cleaner = cleaner or Cleaner(0, config)
    gen = clean_steps(cleaner, log, now_ms, last_clean_offset)
    return run_steps(gen)


Work = tuple[Callable[..., object], tuple[object, ...]]


def clean_steps(cleaner: Cleaner, log: Log, now_ms: int, last_clean_offset: int | None
                ) -> Iterator[Work]:
    """The pass as a generator: it runs the loop-side parts itself and yields the off-loop
    parts (function, args) for its driver to run (inline or in the cleaner thread) and send
    back the result. Its return value (StopIteration.value) is the CleanResult or None."""
    plan = plan_cleaning(log, now_ms, last_clean_offset)
    if plan is None:
        return None
    stats = CleanerStats()
    end_offset = yield (cleaner.build_offset_map, (plan, stats))
    assert isinstance(end_offset, int)
    if end_offset <= plan.first_dirty_offset:
        log_name = plan.log_name
        log_.warning(
            "Cleaner %d: no progress possible on %s: the offset map cannot hold one batch's "
            "keys", cleaner.id, log_name)
        return None
    cleaner._info("Cleaning log %s (cleaning prior to %s, discarding tombstones prior to %s)...",
                  plan.log_name, _java_date(plan.cleanable_horizon_ms),
                  _java_date(plan.delete_horizon_ms))
    groups = plan.groups(end_offset)
    completed = True
    txns = CleanedTransactionMetadata.of(plan.aborted_txns)
    for group in groups:
        cleaned = yield (cleaner.clean_group, (plan, group, stats, txns))
        assert isinstance(cleaned, LogSegment)
        try:
            cleaner.check_done()  # aborted meanwhile (a move of the replica): no swap
        except LogCleaningAbortedError:
            discard_cleaned(cleaned)
            raise
        if not swap_in(log, plan, group, cleaned):
            cleaner._info("Log %s changed while it was being cleaned: the cleaned segment %d "
                          "is discarded", plan.log_name, cleaned.base_offset)
            completed = False
            break
    stats.buffer_utilization = cleaner.offset_map.utilization
    stats.all_done()
    cleaner.offset_map.clear()
    return CleanResult(plan.first_dirty_offset, end_offset, stats, len(groups), completed)


def run_steps(gen: Iterator[Work]) -> CleanResult | None:
    """Drive `clean_steps` inline."""
    try:
        item = next(gen)
        while True:
            fn, args = item
            try:
                result = fn(*args)
            except BaseException as exc:
                item = gen.throw(exc)  # type: ignore[attr-defined]
                continue
            item = gen.send(result)  # type: ignore[attr-defined]
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
