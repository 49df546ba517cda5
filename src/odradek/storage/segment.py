"""One log segment (Kafka's LogSegment, S-2.2): ``<20-digit base offset>.log`` holding record
batches exactly as appended, plus its sparse ``.index`` and ``.timeindex``, and its ``.txnindex``
(``txn_index``: the transactions aborted by a marker in this segment, created by the first one).

Hot paths stay at batch-header level: an append is one ``pwrite`` (and, every
``index.interval.bytes``, one 8-byte and one 12-byte index append); a read is an index lookup, a
short forward scan of batch headers, and a ``FileRegion`` the network layer can ``sendfile``.

File handles are opened lazily and may be released at any time (``close_handles``), e.g. by a
``FileHandleCache`` (an LRU shared by the logs of a broker), so that a broker with many segments
keeps a bounded number of descriptors. A released handle is not closed under a reader's feet:
every ``FileRegion`` keeps a reference to its ``SegmentFile``, which closes when the last
reference goes (CPython reference counting), and POSIX keeps unlinked files readable.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..common import file_system
from ..protocol.control_records import end_txn_marker_of
from ..protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    check_batch,
    decode_records,
)
from .index import (
    DEFAULT_MAX_INDEX_SIZE,
    NO_TIMESTAMP,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
)
from .producer_state import ProducerStateManager
from .transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

DEFAULT_INDEX_INTERVAL_BYTES = 4096
_SCAN_CHUNK = 16 * 1024
_RECOVERY_CHUNK = 1024 * 1024
# The v2 batch header (see protocol.records); parsed here with the batch's *file* position.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
# lastOffsetDelta: after baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 8 + 4 + 4 + 1 + 4 + 2


def filename_prefix(offset: int) -> str:
    """Kafka names segment files after their base offset, zero-padded to 20 digits."""
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    return int(name.split(".", 1)[0])


class SegmentOffsetOverflowError(ValueError):
    """An offset that does not fit the segment's 32-bit relative index offsets
    (Kafka's LogSegmentOffsetOverflowException): the log must roll first."""


class SegmentFile(io.FileIO):
    """The segment's ``.log`` file, opened read-write and unbuffered. Closes quietly when the
    last reference (the segment's or a FileRegion's) goes away."""

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _open_rw(path: str, flags: int) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)


class FileRegion(NamedTuple):
    """``size`` bytes at ``position`` of a segment file: what a fetch sends (zero-copy with
    ``os.sendfile(sock, region.fileno(), region.position, region.size)``)."""

    file: SegmentFile
    position: int
    size: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read_bytes(self) -> bytes:
        """The region's bytes (for callers that cannot sendfile). May be shorter if the log
        was truncated meanwhile."""
        if self.size <= 0:
            return b""
        fd = self.file.fileno()
        data = os.pread(fd, self.size, self.position)
        if len(data) == self.size:
            return data
        parts = [data]
        got = len(data)
        while got < self.size:
            more = os.pread(fd, self.size - got, self.position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)


class LogOffsetPosition(NamedTuple):
    """Where the first batch whose last offset >= a target offset starts."""

    base_offset: int
    last_offset: int
    position: int
    size: int


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int


class FileHandleCache:
    """An LRU of segments holding open files: when more than ``max_open`` are open, the least
    recently used one releases its handles (and index memory). Share one per broker."""

    def __init__(self, max_open: int = 512) -> None:
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self._open: OrderedDict[LogSegment, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def touch(self, segment: LogSegment) -> None:
        opened = self._open
        if segment in opened:
            opened.move_to_end(segment)
            return
        opened[segment] = None
        while len(opened) > self.max_open:
            victim, _ = opened.popitem(last=False)
            victim.close_handles(from_cache=True)

    def discard(self, segment: LogSegment) -> None:
        self._open.pop(segment, None)


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    total = memoryview(data).nbytes
    written = file_system.pwrite(fd, data, position)
    if written == total:
        return
    view = memoryview(data).cast("B")
    while written < total:
        n = file_system.pwrite(fd, view[written:], position + written)
        if n <= 0:
            raise OSError(f"short write: {written} of {total} bytes")
        written += n


class LogSegment:
    """A segment of a partition's log. Not thread-safe (the broker's loop owns it)."""

    def __init__(self, directory: Path, base_offset: int, *,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
                 handle_cache: FileHandleCache | None = None,
                 created_ms: int = 0,
                 roll_jitter_ms: int = 0,
                 suffix: str = "") -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        self.suffix = suffix
        self._cache = handle_cache
        self._file: SegmentFile | None = None
        prefix = self.dir / filename_prefix(base_offset)
        self._offset_index = OffsetIndex(Path(f"{prefix}{INDEX_SUFFIX}{suffix}"), base_offset,
                                         max_index_size)
        self._time_index = TimeIndex(Path(f"{prefix}{TIME_INDEX_SUFFIX}{suffix}"), base_offset,
                                     max_index_size)
        self.txn_index = TransactionIndex(Path(f"{prefix}{TXN_INDEX_SUFFIX}{suffix}"),
                                          base_offset)
        self._indexes_checked = False
        try:
            self._size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            self._size = 0
        self._dirty = False
        self.active = False  # the log's active segment keeps its index memory when evicted
        self._bytes_since_last_index_entry = 0
        self._rolling_ts: int | None = None
        self._max_ts: tuple[int, int] | None = None  # (max timestamp so far, its shallow offset)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, **kwargs: object) -> LogSegment:
        """A new, empty segment: creates ``.log``, ``.index`` and ``.timeindex`` (deleting stale
        files of the same name first, as Kafka's roll does). A `suffix` keyword (e.g.
        ``.cleaned``) names the files ``<base>.log<suffix>`` and so on."""
        prefix = Path(directory) / filename_prefix(base_offset)
        extra = str(kwargs.get("suffix", ""))
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            Path(f"{prefix}{suffix}{extra}").unlink(missing_ok=True)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            with open(f"{prefix}{suffix}{extra}", "xb"):
                pass
        segment = cls(directory, base_offset, **kwargs)  # type: ignore[arg-type]
        segment._indexes_checked = True
        return segment

    # -- paths and simple properties ------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.dir / f"{filename_prefix(self.base_offset)}{LOG_SUFFIX}{self.suffix}"

    @property
    def index_path(self) -> Path:
        return self._offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self._time_index.path

    @property
    def txn_index_path(self) -> Path:
        return self.txn_index.path

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def has_open_handles(self) -> bool:
        return (self._file is not None or self._offset_index.has_open_file
                or self._time_index.has_open_file or self.txn_index.has_open_file)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"

    def index_files_look_valid(self) -> bool:
        """Cheap load-time check (stat only): both index files exist and hold whole entries."""
        try:
            oi = os.stat(self._offset_index.path).st_size
            ti = os.stat(self._time_index.path).st_size
        except FileNotFoundError:
            return False
        return oi % 8 == 0 and ti % 12 == 0

    # -- handles --------------------------------------------------------------------------------

    def _log_file(self) -> SegmentFile:
        f = self._file
        if f is None:
            f = SegmentFile(str(self.log_path), "r+b", opener=_open_rw)
            self._file = f
        if self._cache is not None:
            self._cache.touch(self)
        return f

    def close_handles(self, *, from_cache: bool = False) -> None:
        """Release the file handles and index memory (they reopen on demand; an active segment
        evicted by the LRU keeps its index memory, which its next append needs). Pending
        FileRegions keep their file open until they are dropped."""
        self._file = None
        if from_cache and self.active:
            self._offset_index.close_file()
            self._time_index.close_file()
            self.txn_index.close_file()
        else:
            self._offset_index.release()
            self._time_index.release()
            self.txn_index.release()
        if self._cache is not None and not from_cache:
            self._cache.discard(self)

    def attach_handle_cache(self, cache: FileHandleCache | None) -> None:
        """Hand the segment to a log's handle cache (a cleaned segment, built without one by
        the cleaner thread, when it is swapped in)."""
        self.close_handles()
        self._cache = cache

    @property
    def offset_index(self) -> OffsetIndex:
        if not self._offset_index.loaded:
            self._load_indexes()
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if not self._time_index.loaded:
            self._load_indexes()
        return self._time_index

    def _load_indexes(self) -> None:
        """Load both indexes; the first time, sanity-check them against the log file and
        rebuild them from the batch headers when they cannot be trusted (missing, torn,
        unsorted, pointing past the end, or an empty time index for a non-empty segment)."""
        if self._cache is not None:
            self._cache.touch(self)
        try:
            self._offset_index.load()
            self._time_index.load()
            if not self._indexes_checked:
                self._offset_index.sanity_check(self._size)
                self._time_index.sanity_check()
                if self._size and not (self._offset_index.path.exists()
                                       and self._time_index.path.exists()):
                    raise CorruptIndexError("index file missing")
                if self._size and not self._time_index.entries:
                    raise CorruptIndexError("empty time index for a non-empty segment")
        except CorruptIndexError:
            self.rebuild_indexes()
        self._indexes_checked = True

    # -- append ---------------------------------------------------------------------------------

    def append(self, largest_offset: int, max_timestamp: int,
               shallow_offset_of_max_timestamp: int,
               data: bytes | bytearray | memoryview) -> None:
        """Append record batches whose offsets are already assigned, with one ``pwrite``; the
        bytes are in the OS page cache when this returns (they survive a kill -9). Adds an index
        entry when more than ``index.interval.bytes`` were appended since the last one."""
        size = memoryview(data).nbytes
        if size == 0:
            return
        oi = self.offset_index
        if not oi.can_append_offset(largest_offset):
            raise SegmentOffsetOverflowError(
                f"offset {largest_offset} does not fit segment {self.base_offset}"
            )
        position = self._size
        if position == 0:
            self._rolling_ts = max_timestamp
        f = self._log_file()
        try:
            _pwrite_all(f.fileno(), data, position)
        except OSError:
            os.ftruncate(f.fileno(), position)
            raise
        self._size = position + size
        self._dirty = True
        if max_timestamp > self.max_timestamp_so_far:
            self._max_ts = (max_timestamp, shallow_offset_of_max_timestamp)
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            oi.append(largest_offset, position)
            self._time_index.maybe_append(*self._max_ts_entry())
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def _max_ts_entry(self) -> tuple[int, int]:
        if self._max_ts is None:
            self._max_ts = self.time_index.last_entry()
        return self._max_ts

    @property
    def max_timestamp_so_far(self) -> int:
        """The largest batch max timestamp in the segment (-1 when none): the time index's last
        entry once the indexes have been checked (only its tail is read after that)."""
        if self._max_ts is None:
            if not self._indexes_checked:
                self._load_indexes()
            try:
                self._max_ts = self._time_index.last_entry()
            except CorruptIndexError:
                self.rebuild_indexes()
                self._max_ts = self._time_index.last_entry()
        return self._max_ts[0]

    @property
    def shallow_offset_of_max_timestamp(self) -> int:
        self.max_timestamp_so_far  # noqa: B018 - loads the cache
        assert self._max_ts is not None
        return self._max_ts[1]

    # -- scanning -------------------------------------------------------------------------------

    def iter_headers(self, start_position: int = 0,
                     end_position: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers from `start_position` (a batch boundary) on, without reading records or
        checking CRCs; ``header.position`` is the batch's position in this segment's file."""
        end = self._size if end_position is None else min(end_position, self._size)
        if end - start_position < HEADER_SIZE:
            return
        f = self._log_file()  # the generator keeps the file alive even if the LRU drops it
        fd = f.fileno()
        pos = start_position
        buf = b""
        buf_start = 0
        unpack = _HEADER.unpack_from
        while end - pos >= HEADER_SIZE:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            header = BatchHeader(*unpack(buf, off), position=pos)
            if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > end:
                return
            yield header
            pos += header.size

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset >= `offset`: offset index lookup, then a forward
        scan of batch headers. None when the segment holds no such batch."""
        _, position = self.offset_index.lookup(offset)
        # `iter_headers`' walk, reading of each header only the three fields this needs (a
        # fetch's every read comes here: building each header cost more than finding it)
        pos = max(position, starting_position)
        end = self._size
        if end - pos < HEADER_SIZE:
            return None
        f = self._log_file()
        fd = f.fileno()
        buf = b""
        buf_start = 0
        unpack = _OFFSET_AND_LENGTH.unpack_from
        unpack_delta = _LAST_OFFSET_DELTA.unpack_from
        while end - pos >= HEADER_SIZE:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    return None
            base_offset, batch_length = unpack(buf, off)
            size = batch_length + LOG_OVERHEAD
            if batch_length < MIN_BATCH_LENGTH or pos + size > end:
                return None
            last_offset = base_offset + unpack_delta(buf, off + _LAST_OFFSET_DELTA_AT)[0]
            if last_offset >= offset:
                return LogOffsetPosition(base_offset, last_offset, pos, size)
            pos += size
        return None

    def _boundary_at_or_before(self, start: int, limit: int) -> int:
        """The largest batch boundary b with start <= b <= limit."""
        _, position = self.offset_index.lookup_position(limit)
        boundary = max(position, start)
        for header in self.iter_headers(boundary, limit):
            boundary = header.position + header.size
        return boundary

    def read_next_offset(self) -> int:
        """The offset after the segment's last batch (its base offset when empty)."""
        last: BatchHeader | None = None
        for last in self.iter_headers(self.offset_index.last_position()):  # noqa: B007
            pass
        return last.next_offset if last is not None else self.base_offset

    # -- read -----------------------------------------------------------------------------------

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> FileRegion | None:
        """Whole batches from the one holding `start_offset`, at most `max_size` bytes and never
        past `max_position` (a batch boundary, e.g. the high watermark's position). With
        `min_one_message` the first batch is returned whole even if larger than `max_size`.
        None when no batch of this segment has an offset >= start_offset."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from {self}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        return self.read_at(found.position, found.size, max_size, max_position, min_one_message)

    def read_at(self, start_position: int, first_size: int, max_size: int,
                max_position: int | None, min_one_message: bool) -> FileRegion:
        """Like ``read`` once the first batch (position, size) is known."""
        limit = self._size if max_position is None else min(max_position, self._size)
        f = self._log_file()
        if start_position >= limit:
            return FileRegion(f, start_position, 0)
        budget = max(max_size, first_size) if min_one_message else max_size
        end = start_position + budget
        if end >= limit:
            end = limit
        elif end < start_position + first_size:
            end = start_position
        else:
            end = self._boundary_at_or_before(start_position, end)
        return FileRegion(f, start_position, end - start_position)

    def read_batch(self, position: int, size: int) -> bytes:
        return FileRegion(self._log_file(), position, size).read_bytes()

    # -- timestamps -----------------------------------------------------------------------------

    def find_offset_by_timestamp(self, timestamp: int,
                                 starting_offset: int | None = None) -> TimestampAndOffset | None:
        """The first record with timestamp >= `timestamp` and offset >= `starting_offset`
        (Kafka's LogSegment.findOffsetByTimestamp): time index, offset index, then batch headers;
        only the one batch that holds the answer is decoded (ListOffsets is not a hot path)."""
        start = self.base_offset if starting_offset is None else starting_offset
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start))
        for header in self.iter_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < start:
                continue
            if header.is_log_append_time:
                return TimestampAndOffset(header.max_timestamp, max(header.base_offset, start),
                                          header.partition_leader_epoch)
            try:
                records = decode_records(self.read_batch(header.position, header.size))
            except (CorruptRecordError, InvalidRecordError, ValueError):
                return TimestampAndOffset(header.max_timestamp, max(header.base_offset, start),
                                          header.partition_leader_epoch)
            for record in records:
                if record.timestamp >= timestamp and record.offset >= start:
                    return TimestampAndOffset(record.timestamp, record.offset,
                                              header.partition_leader_epoch)
        return None

    def _read_largest_timestamp(self) -> tuple[int, int]:
        ts, offset = self.time_index.last_entry()
        _, position = self.offset_index.lookup(offset)
        for header in self.iter_headers(position):
            if header.max_timestamp > ts:
                ts, offset = header.max_timestamp, header.last_offset
        return ts, offset

    def largest_timestamp(self) -> int:
        """What retention compares with retention.ms: the largest record timestamp, or the
        ``.log`` file's modification time when no record has one."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms()

    def last_modified_ms(self) -> int:
        try:
            return os.stat(self.log_path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    def first_batch_timestamp(self) -> int | None:
        if self._rolling_ts is None and self._size >= HEADER_SIZE:
            for header in self.iter_headers(0):
                self._rolling_ts = header.max_timestamp
                break
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """segment.ms is measured from the first batch's timestamp, or from the segment's
        creation when batches carry no timestamp (Kafka's timeWaitedForRoll)."""
        ts = self.first_batch_timestamp()
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, *, segment_bytes: int, segment_ms: int, messages_size: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int,
                    now_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll: size, age, a full index, or an offset that does not
        fit the 32-bit relative offsets."""
        size = self._size
        if size > segment_bytes - messages_size:
            return True
        if size > 0 and (self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                         > segment_ms - self.roll_jitter_ms):
            return True
        oi = self.offset_index
        return (oi.is_full() or self.time_index.is_full()
                or not oi.can_append_offset(max_offset_in_messages))

    # -- recovery -------------------------------------------------------------------------------

    def recover(self, max_message_size: int | None = None,
                on_batch: Callable[[BatchHeader], None] | None = None,
                before_truncate: Callable[[], None] | None = None,
                producer_state: ProducerStateManager | None = None) -> int:
        """Validate every batch from the start (size, magic, CRC32C, increasing offsets that fit
        this segment), rebuild both indexes, and truncate the file at the first invalid batch.
        With `producer_state` (the state as of this segment's base offset, Kafka's
        ``recover(producerStateManager, ...)``) every batch of a producer is applied to it and
        the transaction index is rebuilt from the ABORT markers (a control batch's first
        record is read).
        Returns the number of bytes truncated. `max_message_size` only sizes the read chunks:
        a batch larger than the topic's current max.message.bytes is not corrupt (followers
        append without that check). `on_batch` sees each valid header (file positions);
        `before_truncate` runs before the file is cut (the log drops later segments there, so
        that a crash in between cannot leave a hole)."""
        oi, ti = self._offset_index, self._time_index
        oi.reset()
        ti.reset()
        txn = self.txn_index
        if producer_state is not None:
            txn.reset()
        f = self._log_file()
        fd = f.fileno()
        file_size = os.fstat(fd).st_size
        chunk_size = max(_RECOVERY_CHUNK, max_message_size or 0)
        chunk = b""
        chunk_start = 0
        valid = 0
        last_index_entry = 0
        prev_last = self.base_offset - 1
        max_ts, shallow = NO_TIMESTAMP, self.base_offset
        interval = self.index_interval_bytes
        while valid < file_size:
            off = valid - chunk_start
            if off + LOG_OVERHEAD > len(chunk):
                chunk = os.pread(fd, min(chunk_size, file_size - valid), valid)
                chunk_start, off = valid, 0
                if len(chunk) < LOG_OVERHEAD:
                    break
            _, batch_length = _OFFSET_AND_LENGTH.unpack_from(chunk, off)
            size = batch_length + LOG_OVERHEAD
            if batch_length < MIN_BATCH_LENGTH or valid + size > file_size:
                break
            if off + size > len(chunk):
                chunk = os.pread(fd, min(max(chunk_size, size), file_size - valid), valid)
                chunk_start, off = valid, 0
                if len(chunk) < size:
                    break
            try:
                check_batch(chunk, off, off + size)
            except (CorruptRecordError, InvalidRecordError):
                break
            header = BatchHeader(*_HEADER.unpack_from(chunk, off), position=valid)
            if (header.base_offset <= prev_last or header.last_offset_delta < 0
                    or not oi.can_append_offset(header.last_offset)):
                break
            if header.max_timestamp > max_ts:
                max_ts, shallow = header.max_timestamp, header.last_offset
            if valid - last_index_entry > interval:
                if not oi.is_full():
                    oi.append(header.last_offset, valid, persist=False)
                if not ti.is_full():
                    ti.maybe_append(max_ts, shallow, persist=False)
                last_index_entry = valid
            if producer_state is not None and header.producer_id >= 0:
                marker = None
                if header.is_control:
                    with contextlib.suppress(CorruptRecordError, InvalidRecordError):
                        marker = end_txn_marker_of(memoryview(chunk)[off:off + size])
                completion = producer_state.update(header, marker=marker)
                if completion is not None and completion.aborted_txn is not None:
                    txn.append(completion.aborted_txn)
            valid += size
            prev_last = header.last_offset
            if on_batch is not None:
                on_batch(header)
        if producer_state is not None:
            producer_state.update_map_end_offset(prev_last + 1)
        truncated = file_size - valid
        if truncated:
            if before_truncate is not None:
                before_truncate()
            os.ftruncate(fd, valid)
            self._dirty = True
        self._size = valid
        ti.maybe_append(max_ts, shallow, skip_full_check=True, persist=False)
        oi.write_all()
        ti.write_all()
        self._indexes_checked = True
        self._max_ts = (max_ts, shallow) if max_ts >= 0 else ti.last_entry()
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._rolling_ts = None
        return truncated

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from batch headers alone (no CRC check, no truncation): for a
        segment below the recovery point whose index file is missing or corrupt."""
        oi, ti = self._offset_index, self._time_index
        oi.reset()
        ti.reset()
        last_index_entry = 0
        max_ts, shallow = NO_TIMESTAMP, self.base_offset
        prev_last = self.base_offset - 1
        end = self._size
        for header in self.iter_headers(0):
            if header.base_offset <= prev_last or not oi.can_append_offset(header.last_offset):
                end = header.position
                break
            if header.max_timestamp > max_ts:
                max_ts, shallow = header.max_timestamp, header.last_offset
            if header.position - last_index_entry > self.index_interval_bytes:
                if not oi.is_full():
                    oi.append(header.last_offset, header.position, persist=False)
                if not ti.is_full():
                    ti.maybe_append(max_ts, shallow, persist=False)
                last_index_entry = header.position
            prev_last = header.last_offset
        ti.maybe_append(max_ts, shallow, skip_full_check=True, persist=False)
        oi.write_all()
        ti.write_all()
        self._indexes_checked = True
        self._max_ts = (max_ts, shallow) if max_ts >= 0 else ti.last_entry()
        self._bytes_since_last_index_entry = end - last_index_entry

    # -- truncation, roll, flush, close, delete -------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Remove every batch whose last offset >= `offset` (a batch holding `offset` goes
        whole) and the index entries at or after it. Returns the bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        truncated = 0
        if found is not None:
            truncated = self._size - found.position
            os.ftruncate(self._log_file().fileno(), found.position)
            self._size = found.position
            self._dirty = True
        if self._size == 0:
            if now_ms is not None:
                self.created_ms = now_ms
            self._rolling_ts = None
        self._bytes_since_last_index_entry = 0
        self._max_ts = self._read_largest_timestamp()
        return truncated

    def on_become_inactive(self) -> None:
        """On roll: add the final time index entry (the segment's max timestamp, which
        retention reads) and close the index files; they already hold only real entries."""
        if self._size:
            self.time_index.maybe_append(*self._max_ts_entry(), skip_full_check=True)
        self.active = False
        self._offset_index.close_file()
        self._time_index.close_file()
        self.txn_index.flush()
        self.txn_index.close_file()

    def flush(self) -> None:
        """fsync the log and the index files (if written since the last flush)."""
        if self._dirty:
            file_system.fsync(self._log_file().fileno())
            self._dirty = False
        self._offset_index.flush()
        self._time_index.flush()
        self.txn_index.flush()

    @property
    def dirty(self) -> bool:
        return self._dirty

    def close(self) -> bool:
        """Close: write the final time index entry (as Kafka does) and release handles.
        True if that entry was written (it is not on disk until fsynced)."""
        wrote = False
        if self._size and self._max_ts is not None and self._max_ts[0] >= 0:
            with contextlib.suppress(ValueError, OSError, CorruptIndexError):
                if self._time_index.last_entry()[0] < self._max_ts[0]:
                    self.time_index.maybe_append(*self._max_ts, skip_full_check=True)
                    wrote = True
        self.close_handles()
        return wrote

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the segment's files (e.g. to ``.deleted``); handles reopen under the new name."""
        old_log = self.log_path
        self.close_handles()
        self.suffix = new_suffix
        if old_log.exists():
            file_system.replace(old_log, self.log_path)
        prefix = self.dir / filename_prefix(self.base_offset)
        self._offset_index.rename(Path(f"{prefix}{INDEX_SUFFIX}{new_suffix}"))
        self._time_index.rename(Path(f"{prefix}{TIME_INDEX_SUFFIX}{new_suffix}"))
        self.txn_index.rename(Path(f"{prefix}{TXN_INDEX_SUFFIX}{new_suffix}"))

    def delete(self) -> None:
        """Remove the segment's files (readers holding a FileRegion can still finish)."""
        self.close_handles()
        self.log_path.unlink(missing_ok=True)
        self._offset_index.delete()
        self._time_index.delete()
        self.txn_index.delete()
