"""Sparse segment indexes, in Kafka's on-disk format (S-2.2, S-2.3; ARCHITECTURE principle 6).

* ``OffsetIndex`` (``<base>.index``): 8-byte entries, relative offset u32 + file position u32,
  big-endian. An entry (offset, position) says: the message set appended at `position` ends
  at `offset`; a lookup returns the largest entry with offset <= target, and the caller scans
  batch headers forward from that position.
* ``TimeIndex`` (``<base>.timeindex``): 12-byte entries, timestamp i64 + relative offset u32.
  An entry (ts, offset) says: every message up to `offset` has a timestamp <= ts. Timestamps
  strictly increase from entry to entry.

Kafka mmaps a preallocated file (``segment.index.bytes``) and trims it on roll/close. odradek
keeps the entries in a ``bytearray`` that is byte-for-byte the file content and writes each new
entry with one plain append, so the file on disk always holds exactly the real entries, as a
Kafka file does after trimming. ``segment.index.bytes`` still caps the number of entries: a
full index makes the log roll. Entries are loaded lazily (first lookup) and can be dropped again
(``release``) so that thousands of idle segments cost neither memory nor file descriptors.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path

from ..common import file_system
from ..protocol.primitives import INT64 as _Q
from ..protocol.records import NO_TIMESTAMP
from .checkpoints import fsync_open_or_path
from .log_config import INT_MAX as _INT_MAX

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes
_U32_MAX = 0xFFFFFFFF
_U32 = struct.Struct(">I")
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class CorruptIndexError(Exception):
    """The index file cannot be trusted (Kafka's CorruptIndexException): the log rebuilds it."""


class InvalidOffsetError(ValueError):
    """An index append that would break the ordering (Kafka's InvalidOffsetException)."""


class IndexFullError(ValueError):
    """An append to an index that already holds ``segment.index.bytes`` worth of entries."""


class IndexFile:
    """An append-only file of fixed-size entries mirrored in memory: lazy loading, appends through
    one O_APPEND descriptor, fsync on flush, release, rename, delete. The offset and time
    indexes and the transaction index (``.txnindex``) are all of this kind."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._buf: bytearray | None = None
        self._fd: int | None = None
        self._dirty = False

    @property
    def loaded(self) -> bool:
        return self._buf is not None

    @property
    def has_open_file(self) -> bool:
        return self._fd is not None

    def _read_file(self) -> bytearray:
        """The file's bytes (empty when it does not exist)."""
        try:
            with open(self.path, "rb") as f:
                return bytearray(f.read())
        except FileNotFoundError:
            return bytearray()

    def _data(self) -> bytearray:
        raise NotImplementedError

    def load(self) -> None:
        """Read the file now."""
        self._data()

    def _write_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                               0o644)
        return self._fd

    def _write(self, data: bytes) -> None:
        fd = self._write_fd()
        view = memoryview(data)
        while view:
            n = file_system.write(fd, view)
            view = view[n:]
        self._dirty = True

    def write_all(self) -> None:
        """Rewrite the file from memory (after a rebuild done with ``persist=False`` appends)."""
        buf = self._data()
        self.close_file()
        with open(self.path, "wb") as f:
            f.write(buf)
        self._dirty = True

    def release(self) -> None:
        """Close the file descriptor and drop the in-memory entries (they reload on demand)."""
        self.close_file()
        self._buf = None

    def close_file(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def flush(self) -> None:
        """fsync the file if entries were written since the last flush."""
        if not self._dirty:
            return
        fsync_open_or_path(self._fd, self.path)
        self._dirty = False

    def delete(self) -> bool:
        """Delete the file; True if one was there."""
        self.release()
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename(self, new_path: Path) -> None:
        """Move the file (the segment's suffix changes: ``.deleted``, ``.swap``, ...)."""
        self.close_file()
        if self.path.exists():
            file_system.replace(self.path, new_path)
        self.path = Path(new_path)

    def size_in_bytes(self) -> int:
        return len(self._data())

    def _truncate_bytes(self, size: int) -> bool:
        """Keep the first `size` bytes, in memory and in the file; False if already no longer."""
        buf = self._data()
        if size >= len(buf):
            return False
        del buf[size:]
        if self._fd is not None:
            os.ftruncate(self._fd, size)
        elif self.path.exists():
            os.truncate(self.path, size)
        self._dirty = True
        return True


class _Index(IndexFile):
    """What the offset and time indexes share: a base offset, a maximum size, entries of
    ENTRY.size bytes (a file of any other size is corrupt), truncation."""

    ENTRY = _OFFSET_ENTRY  # the entry's two fields; ENTRY.size bytes
    KIND = "index"  # what the messages call it

    def __init__(self, path: Path, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE) -> None:
        super().__init__(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.ENTRY.size

    def _data(self) -> bytearray:
        buf = self._buf
        if buf is None:
            buf = self._read_file()
            if len(buf) % self.ENTRY.size:
                raise CorruptIndexError(
                    f"index file {self.path} is corrupt: {len(buf)} bytes is not a multiple of "
                    f"{self.ENTRY.size}"
                )
            self._buf = buf
            self._on_load(buf)
        return buf

    def _on_load(self, buf: bytearray) -> None:
        """Hook for subclasses that cache the last entry."""

    def load(self) -> None:
        """Read the file now (raises CorruptIndexError when its size is not whole entries)."""
        self._data()

    # -- content --------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._data()) // self.ENTRY.size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _truncate_to_entries(self, n: int) -> None:
        if self._truncate_bytes(n * self.ENTRY.size):
            self._on_load(self._data())

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self._buf = bytearray()
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
        else:
            with open(self.path, "wb"):
                pass
        self._dirty = True
        self._on_load(self._buf)

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > _INT_MAX:
            raise InvalidOffsetError(
                f"offset {offset} does not fit an index with base offset {self.base_offset}"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT_MAX

    def _entry_fields(self, n: int) -> tuple[int, int]:
        """The two fields of entry `n` as stored (IndexError when there is none)."""
        buf = self._data()
        if not 0 <= n < len(buf) // self.ENTRY.size:
            raise IndexError(f"{self.KIND} {self.path} has no entry {n}")
        return self.ENTRY.unpack_from(buf, n * self.ENTRY.size)

    def _check_sorted(self, values: Sequence[int], strictly: bool, what: str) -> None:
        """Part of Kafka's sanityCheck: CorruptIndexError unless `values` (a column of the
        entries, `what` in the message) increase, `strictly` or never decreasing."""
        if not all(map(operator.lt if strictly else operator.le, values, values[1:])):
            raise CorruptIndexError(f"{self.KIND} {self.path} has unsorted {what}")

    def _largest_lower_bound_slot(self, buf: bytearray, key: struct.Struct, key_at: int,
                                  target: int) -> int:
        """Kafka's AbstractIndex.largestLowerBoundSlotFor: the largest slot whose key (`key`
        at byte `key_at` of the entry; the keys are sorted) is <= `target`, -1 when none."""
        size = self.ENTRY.size
        hi = len(buf) // size - 1
        unpack = key.unpack_from
        if hi < 0 or unpack(buf, key_at)[0] > target:
            return -1
        lo = 0
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buf, mid * size + key_at)[0] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo


class OffsetIndex(_Index):
    """Kafka's ``.index``: relative offset -> physical position, one entry per
    ``index.interval.bytes`` of appended data."""

    ENTRY = _OFFSET_ENTRY
    KIND = "offset index"

    def __init__(self, path: Path, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._last_offset = base_offset

    def _on_load(self, buf: bytearray) -> None:
        if buf:
            self._last_offset = self.base_offset + _U32.unpack_from(buf, len(buf) - 8)[0]
        else:
            self._last_offset = self.base_offset

    @property
    def last_offset(self) -> int:
        """The offset of the last entry (the base offset when empty)."""
        self._data()
        return self._last_offset

    def entry(self, n: int) -> tuple[int, int]:
        rel, pos = self._entry_fields(n)
        return self.base_offset + rel, pos

    def _slot_for_offset(self, buf: bytearray, rel: int) -> int:
        """Largest slot whose relative offset <= rel, -1 when none."""
        return self._largest_lower_bound_slot(buf, _U32, 0, rel)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, or (base, 0)."""
        buf = self._data()
        rel = target_offset - self.base_offset
        if rel < 0:
            return self.base_offset, 0
        slot = self._slot_for_offset(buf, min(rel, _U32_MAX))
        if slot < 0:
            return self.base_offset, 0
        r, pos = _OFFSET_ENTRY.unpack_from(buf, slot * 8)
        return self.base_offset + r, pos

    def lookup_position(self, max_position: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose position <= max_position, or (base, 0):
        a batch boundary at or before `max_position` (Kafka's fetchUpperBoundOffset, reversed)."""
        buf = self._data()
        hi = len(buf) // 8 - 1
        if hi < 0 or _U32.unpack_from(buf, 4)[0] > max_position:
            return self.base_offset, 0
        lo = 0
        unpack = _U32.unpack_from
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buf, mid * 8 + 4)[0] <= max_position:
                lo = mid
            else:
                hi = mid - 1
        r, pos = _OFFSET_ENTRY.unpack_from(buf, lo * 8)
        return self.base_offset + r, pos

    def append(self, offset: int, position: int, *, persist: bool = True) -> None:
        """Add (offset, position); offsets must strictly increase (InvalidOffsetError)."""
        buf = self._data()
        if len(buf) // 8 >= self.max_entries:
            raise IndexFullError(f"offset index {self.path} is full ({len(buf) // 8} entries)")
        if buf and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to {self.path}, not larger than the last "
                f"offset {self._last_offset}"
            )
        entry = _OFFSET_ENTRY.pack(self._relative(offset), position)
        buf += entry
        self._last_offset = offset
        if persist:
            self._write(entry)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        buf = self._data()
        rel = offset - self.base_offset
        if rel < 0:
            self._truncate_to_entries(0)
            return
        slot = self._slot_for_offset(buf, min(rel, _U32_MAX))
        if slot < 0:
            n = 0
        elif _U32.unpack_from(buf, slot * 8)[0] == rel:
            n = slot
        else:
            n = slot + 1
        self._truncate_to_entries(n)

    def last_position(self) -> int:
        buf = self._data()
        return _U32.unpack_from(buf, len(buf) - 4)[0] if buf else 0

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError unless offsets strictly increase, positions strictly
        increase and (when given) every position lies inside the log file."""
        buf = self._data()
        if not buf:
            return
        words = array("I", bytes(buf))
        if sys.byteorder == "little":
            words.byteswap()
        rel, pos = words[0::2], words[1::2]
        self._check_sorted(rel, True, "offsets")
        self._check_sorted(pos, True, "positions")
        if rel[-1] > _INT_MAX:
            raise CorruptIndexError(f"offset index {self.path} has an offset out of range")
        if log_size is not None and pos[-1] >= log_size:
            raise CorruptIndexError(
                f"offset index {self.path} points at position {pos[-1]} past the end of the "
                f"log ({log_size} bytes)"
            )


class TimeIndex(_Index):
    """Kafka's ``.timeindex``: max timestamp so far -> relative offset. One slot is reserved for
    the final entry written when the segment becomes inactive (so "full" is max - 1)."""

    ENTRY = _TIME_ENTRY
    KIND = "time index"

    def __init__(self, path: Path, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._last_entry: tuple[int, int] = (NO_TIMESTAMP, base_offset)
        self._tail_known = False

    def _on_load(self, buf: bytearray) -> None:
        if buf:
            ts, rel = _TIME_ENTRY.unpack_from(buf, len(buf) - 12)
            self._last_entry = (ts, self.base_offset + rel)
        else:
            self._last_entry = (NO_TIMESTAMP, self.base_offset)
        self._tail_known = True

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset). Reads only the file's
        last 12 bytes when the index is not loaded (retention asks this of every segment)."""
        if self._buf is None and not self._tail_known:
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size % 12:
                        raise CorruptIndexError(
                            f"time index file {self.path} is corrupt: {size} bytes is not a "
                            "multiple of 12"
                        )
                    if size:
                        f.seek(size - 12)
                        ts, rel = _TIME_ENTRY.unpack(f.read(12))
                        self._last_entry = (ts, self.base_offset + rel)
            except FileNotFoundError:
                pass
            self._tail_known = True
        return self._last_entry

    def entry(self, n: int) -> tuple[int, int]:
        ts, rel = self._entry_fields(n)
        return ts, self.base_offset + rel

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, or (-1, base)."""
        buf = self._data()
        slot = self._largest_lower_bound_slot(buf, _Q, 0, target_timestamp)
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        ts, rel = _TIME_ENTRY.unpack_from(buf, slot * 12)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False,
                     persist: bool = True) -> None:
        """Append (timestamp, offset) if timestamp is larger than the last one (Kafka's rule;
        equal timestamps are ignored so that roll/close can re-offer the last entry)."""
        buf = self._data()
        n = len(buf) // 12
        if not skip_full_check and n >= self.max_entries - 1:
            raise IndexFullError(f"time index {self.path} is full ({n} entries)")
        last_ts, last_off = self._last_entry
        if n and offset < last_off:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to {self.path}, smaller than the last "
                f"offset {last_off}"
            )
        if n and timestamp < last_ts:
            raise InvalidOffsetError(
                f"attempt to append timestamp {timestamp} to {self.path}, smaller than the "
                f"last timestamp {last_ts}"
            )
        if timestamp > last_ts:
            if n >= self.max_entries:
                raise IndexFullError(f"time index {self.path} is full ({n} entries)")
            entry = _TIME_ENTRY.pack(timestamp, self._relative(offset))
            buf += entry
            self._last_entry = (timestamp, offset)
            if persist:
                self._write(entry)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset >= `offset`."""
        buf = self._data()
        rel = offset - self.base_offset
        # entries are sorted by offset too: largest slot with offset <= rel
        slot = self._largest_lower_bound_slot(buf, _U32, 8, rel)
        unpack = _U32.unpack_from
        if rel < 0 or slot < 0:
            n = 0
        elif unpack(buf, slot * 12 + 8)[0] == rel:
            # drop every entry at exactly `offset` (there may be several with equal offsets)
            n = slot
            while n > 0 and unpack(buf, (n - 1) * 12 + 8)[0] == rel:
                n -= 1
        else:
            n = slot + 1
        self._truncate_to_entries(n)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless timestamps strictly increase and offsets never
        decrease."""
        buf = self._data()
        if not buf:
            return
        entries = list(_TIME_ENTRY.iter_unpack(bytes(buf)))
        stamps = [e[0] for e in entries]
        offsets = [e[1] for e in entries]
        self._check_sorted(stamps, True, "timestamps")
        self._check_sorted(offsets, False, "offsets")
        if offsets[-1] > _INT_MAX:
            raise CorruptIndexError(f"time index {self.path} has an offset out of range")
