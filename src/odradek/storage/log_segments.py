"""The ordered segments of one log (Kafka's LogSegments): the list, their base offsets for
bisection, and the removal of segments from disk (rename to ``*.deleted``, then unlink: a
crash in between leaves only ``.deleted`` files, which the next load removes)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

from ..common import entropy
from ..protocol.records import BatchHeader
from .log_config import LogConfig
from .segment import DELETED_SUFFIX, FileHandleCache, LogSegment


class LogSegments:
    """A log's segments in offset order, the last one active. `segments` and `bases` (their
    base offsets) are kept in step by the methods below; readers may use both lists."""

    __slots__ = ("bases", "segments")

    def __init__(self) -> None:
        self.segments: list[LogSegment] = []
        self.bases: list[int] = []

    def __len__(self) -> int:
        return len(self.segments)

    def floor_index(self, offset: int) -> int:
        """The index of the segment holding `offset` (the last one whose base is at or below
        it; the first segment for an offset below every base)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def add_loaded(self, segment: LogSegment) -> None:
        """Append a segment found on disk (the loader marks the last one active at the end)."""
        self.segments.append(segment)
        self.bases.append(segment.base_offset)

    def add_active(self, segment: LogSegment) -> None:
        """Append a new active segment; the previous one becomes inactive."""
        if self.segments:
            self.segments[-1].active = False
        segment.active = True
        self.segments.append(segment)
        self.bases.append(segment.base_offset)

    def replace_all(self, segments: Sequence[LogSegment]) -> None:
        """Hold exactly `segments` (in offset order); the last one is the active one."""
        self.segments[:] = segments
        self.bases[:] = [s.base_offset for s in segments]
        for segment in segments:
            segment.active = False
        segments[-1].active = True

    def delete(self, doomed: Sequence[LogSegment]) -> None:
        """Remove segments: drop them from the list, rename their files ``*.deleted``, then
        unlink them."""
        doomed_ids = {id(s) for s in doomed}
        kept = [s for s in self.segments if id(s) not in doomed_ids]
        self.segments[:] = kept
        self.bases[:] = [s.base_offset for s in kept]
        if kept:
            kept[-1].active = True
        for segment in doomed:
            segment.change_suffix(DELETED_SUFFIX)
        for segment in doomed:
            segment.delete()

    def clear(self) -> None:
        self.segments.clear()
        self.bases.clear()

    def iter_batch_headers(self, start: int) -> Iterator[BatchHeader]:
        """Batch headers (no records) of every batch whose last offset >= `start`, in order;
        ``header.position`` is relative to the batch's segment file."""
        for _, header in self.iter_segment_headers(start):
            yield header

    def iter_segment_headers(self, start: int, end: int | None = None
                             ) -> Iterator[tuple[LogSegment, BatchHeader]]:
        """(segment, header) of every batch whose last offset >= `start` and (with `end`) whose
        base offset is below `end`, in order."""
        segments = list(self.segments)
        first = True
        for segment in segments[self.floor_index(start):]:
            if end is not None and segment.base_offset >= end:
                return
            position = 0
            if first:
                _, position = segment.offset_index.lookup(start)
                first = False
            for header in segment.iter_headers(position):
                if end is not None and header.base_offset >= end:
                    return
                if header.last_offset >= start:
                    yield segment, header


def segment_kwargs(config: LogConfig, handle_cache: FileHandleCache,
                   created_ms: int) -> dict[str, Any]:
    """The keyword arguments of a log's ``LogSegment`` (index sizes, handle cache, creation
    time, a roll jitter drawn from segment.jitter.ms)."""
    jitter = 0
    if config.segment_jitter_ms > 0:
        jitter = entropy.shared().randrange(min(config.segment_jitter_ms, config.segment_ms))
    return {
        "index_interval_bytes": config.index_interval_bytes,
        "max_index_size": config.segment_index_bytes,
        "handle_cache": handle_cache,
        "created_ms": created_ms,
        "roll_jitter_ms": jitter,
    }


__all__ = ["LogSegments", "segment_kwargs"]
