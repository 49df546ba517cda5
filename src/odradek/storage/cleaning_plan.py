"""Planning a cleaning pass (the planning half of Kafka's LogCleanerManager, its LogToClean
and the Cleaner's groupSegmentsBySize): which logs are cleanable and how dirty, the dirty range
[first dirty offset, first uncleanable offset) -- which stops at the log's first unstable offset,
so that no transaction still open is cleaned --, the groups of segments cleaned into one, and
the ``CleaningPlan`` snapshot of a log that the off-loop work reads (taken on the loop that
owns the log: with the aborted transactions of the range and each producer's last record).
Everything but ``segment_views``, ``plan_cleaning`` and ``last_records_of_active_producers`` is
pure."""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .cleaned_transaction_metadata import LastRecord
from .index import NO_TIMESTAMP
from .log import Log
from .log_config import INT_MAX, LONG_MAX
from .segment import LogSegment
from .transaction_index import AbortedTxn

# ---------------------------------------------------------------------------------------------
# Planning (pure): which logs, which range, which groups
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentView:
    """The facts planning needs about one segment (the last one of a log is the active one)."""

    base_offset: int
    size: int
    largest_timestamp: int = NO_TIMESTAMP
    first_batch_timestamp: int | None = None
    last_modified_ms: int = 0
    index_bytes: int = 0
    time_index_bytes: int = 0


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    """Kafka's OffsetsToClean: [first dirty, first uncleanable), and whether the checkpointed
    offset was invalid (to be reset to the first dirty offset)."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def segments_in_range(segments: Sequence[SegmentView], start: int, end: int
                      ) -> list[SegmentView]:
    """The segments holding offsets in [start, end) (Kafka's ``logSegments(from, to)``): each
    segment whose base offset is below `end` and whose successor starts after `start`."""
    out: list[SegmentView] = []
    for i, seg in enumerate(segments):
        if seg.base_offset >= end:
            break
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if nxt is not None and nxt <= start:
            continue
        out.append(seg)
    return out


def segment_floor(segments: Sequence[SegmentView], offset: int) -> int:
    """The base offset of the segment holding `offset` (the first segment's base if below)."""
    bases = [s.base_offset for s in segments]
    i = bisect.bisect_right(bases, offset) - 1
    return bases[max(i, 0)]


def cleanable_offsets(segments: Sequence[SegmentView], *, log_start_offset: int,
                      log_end_offset: int, last_clean_offset: int | None,
                      high_watermark: int | None = None,
                      first_unstable_offset: int | None = None,
                      min_compaction_lag_ms: int = 0, now_ms: int = 0) -> OffsetsToClean:
    """Kafka's LogCleanerManager.cleanableOffsets. The first dirty offset is the checkpoint
    (reset to the log start offset when it is below it or past the log end offset). The first
    uncleanable offset is the lowest of: the active segment's base offset, the high watermark
    (None: the log end offset), the first unstable offset, and the base offset of the first
    dirty segment holding a record newer than ``min.compaction.lag.ms``; rounded down to a
    segment boundary, so that only whole segments below it are cleaned."""
    checkpoint = log_start_offset if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < log_start_offset or checkpoint > log_end_offset:
        checkpoint, force = log_start_offset, True
    first_dirty = checkpoint
    active_base = segments[-1].base_offset
    candidates = [active_base, log_end_offset if high_watermark is None else high_watermark]
    if first_unstable_offset is not None:
        candidates.append(first_unstable_offset)
    lag = max(min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in segments_in_range(segments[:-1], first_dirty, active_base):
            if seg.largest_timestamp > now_ms - lag:
                candidates.append(seg.base_offset)
                break
    uncleanable = segment_floor(segments, min(candidates))
    return OffsetsToClean(first_dirty, max(first_dirty, uncleanable), force)


def calculate_cleanable_bytes(segments: Sequence[SegmentView], first_dirty_offset: int,
                              uncleanable_offset: int) -> tuple[int, int]:
    """(first uncleanable segment base offset, bytes of the segments in
    [first dirty, that offset)) -- Kafka's calculateCleanableBytes."""
    first_uncleanable = segment_floor(segments, uncleanable_offset)
    cleanable = sum(s.size for s in segments_in_range(
        segments, min(first_dirty_offset, first_uncleanable), first_uncleanable))
    return first_uncleanable, cleanable


def max_compaction_delay(segments: Sequence[SegmentView], first_dirty_offset: int,
                         max_compaction_lag_ms: int, now_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty non-active segment is (by its
    first batch timestamp); > 0 forces a clean whatever the dirty ratio."""
    if max_compaction_lag_ms >= LONG_MAX:
        return 0
    dirty = segments_in_range(segments[:-1], first_dirty_offset, segments[-1].base_offset)
    stamps = [s.first_batch_timestamp for s in dirty
              if s.first_batch_timestamp is not None and s.first_batch_timestamp > 0]
    if not stamps:
        return 0
    clean_until = now_ms - max(max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return clean_until - earliest if earliest < clean_until else 0


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's LogToClean: a compacted log's clean and cleanable bytes."""

    name: str
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def log_to_clean(name: str, segments: Sequence[SegmentView], offsets: OffsetsToClean,
                 needs_compaction_now: bool = False) -> LogToClean:
    clean_bytes = sum(s.size for s in segments_in_range(segments, -1,
                                                        offsets.first_dirty_offset))
    first_uncleanable, cleanable = calculate_cleanable_bytes(
        segments, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
    return LogToClean(name, offsets.first_dirty_offset, first_uncleanable, clean_bytes,
                      cleanable, needs_compaction_now)


def is_cleanable(ltc: LogToClean, min_cleanable_ratio: float) -> bool:
    """Kafka's filter: the dirty ratio is above ``min.cleanable.dirty.ratio``, or
    ``max.compaction.lag.ms`` forces it (and there is something to clean)."""
    if ltc.total_bytes <= 0:
        return False
    return ((ltc.needs_compaction_now and ltc.cleanable_bytes > 0)
            or ltc.cleanable_ratio > min_cleanable_ratio)


def filthiest(candidates: Sequence[tuple[LogToClean, float]]) -> LogToClean | None:
    """The cleanable log with the highest dirty ratio (Kafka's ``cleanableLogs.max``);
    `candidates` pairs each log with its ``min.cleanable.dirty.ratio``."""
    cleanable = [ltc for ltc, ratio in candidates if is_cleanable(ltc, ratio)]
    return max(cleanable, key=lambda ltc: ltc.cleanable_ratio) if cleanable else None


def group_segments_by_size(segments: Sequence[SegmentView], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[SegmentView]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose total log size, offset index
    size and time index size each fit one segment, and whose offsets fit 32-bit relative
    offsets from the group's base offset."""
    groups: list[list[SegmentView]] = []
    segs = list(segments)
    i = 0
    while i < len(segs):
        group = [segs[i]]
        log_size, index_size, time_index_size = (segs[i].size, segs[i].index_bytes,
                                                 segs[i].time_index_bytes)
        i += 1
        while i < len(segs):
            seg = segs[i]
            last_offset = (segs[i + 1].base_offset - 1 if i + 1 < len(segs)
                           else first_uncleanable_offset - 1)
            if (log_size + seg.size > max_size
                    or index_size + seg.index_bytes > max_index_size
                    or time_index_size + seg.time_index_bytes > max_index_size
                    or last_offset - group[0].base_offset > INT_MAX):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.index_bytes
            time_index_size += seg.time_index_bytes
            i += 1
        groups.append(group)
    return groups


# ---------------------------------------------------------------------------------------------
# The plan: what the off-loop work reads, taken on the loop
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """A segment to read off the loop: its file (opened by path) and its size at plan time;
    `segment` is kept only to check, at swap time, that the log still holds it."""

    view: SegmentView
    path: Path
    segment: LogSegment


@dataclass(slots=True)
class CleaningPlan:
    log_name: str
    directory: Path
    first_dirty_offset: int
    first_uncleanable_offset: int
    dirty_start_position: int  # where the map scan starts in the first dirty segment
    sources: list[SourceSegment]  # every segment below the first uncleanable offset
    delete_horizon_ms: int
    cleanable_horizon_ms: int
    segment_bytes: int
    max_index_size: int
    index_interval_bytes: int
    max_message_bytes: int
    active_producers: dict[int, LastRecord]  # producer id -> its last data offset and epoch
    truncations: int
    # the aborted transactions overlapping [log start, first uncleanable offset), by the
    # segments' transaction indexes (their ABORT markers may lie further on)
    aborted_txns: list[AbortedTxn]

    def views(self) -> list[SegmentView]:
        return [s.view for s in self.sources]

    def dirty_sources(self) -> list[SourceSegment]:
        views = self.views()
        dirty = {id(v) for v in segments_in_range(views, self.first_dirty_offset,
                                                  self.first_uncleanable_offset)}
        return [s for s in self.sources if id(s.view) in dirty]

    def groups(self, end_offset: int) -> list[list[SourceSegment]]:
        """The segments from the log start up to `end_offset` (the end of the mapped dirty
        section), grouped by ``group_segments_by_size``."""
        by_view = {id(s.view): s for s in self.sources}
        views = segments_in_range(self.views(), 0, end_offset)
        return [[by_view[id(v)] for v in group] for group in group_segments_by_size(
            views, self.segment_bytes, self.max_index_size, self.first_uncleanable_offset)]


def _stat_mtime_ms(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return 0


def _stat_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def segment_views(log: Log, *, with_timestamps: bool = True,
                  with_files: bool = False) -> list[SegmentView]:
    """SegmentViews of a Log's segments (on the loop that owns the log). Timestamps read batch
    headers or the time index; `with_files` stats the files (mtime, index sizes)."""
    cfg = log.config
    need_largest = with_timestamps and cfg.min_compaction_lag_ms > 0
    need_first = with_timestamps and cfg.max_compaction_lag_ms < LONG_MAX
    views = []
    segments = log.segments
    for i, seg in enumerate(segments):
        inactive = i < len(segments) - 1
        views.append(SegmentView(
            base_offset=seg.base_offset, size=seg.size,
            largest_timestamp=seg.largest_timestamp() if need_largest and inactive
            else NO_TIMESTAMP,
            first_batch_timestamp=seg.first_batch_timestamp() if need_first and inactive
            else None,
            last_modified_ms=_stat_mtime_ms(seg.log_path) if with_files else 0,
            index_bytes=_stat_size(seg.index_path) if with_files else 0,
            time_index_bytes=_stat_size(seg.time_index_path) if with_files else 0,
        ))
    return views


def offsets_to_clean(log: Log, last_clean_offset: int | None, now_ms: int,
                     views: Sequence[SegmentView] | None = None) -> OffsetsToClean:
    return cleanable_offsets(
        views if views is not None else segment_views(log),
        log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset,
        last_clean_offset=last_clean_offset, high_watermark=log.high_watermark,
        first_unstable_offset=log.first_unstable_offset,
        min_compaction_lag_ms=log.config.min_compaction_lag_ms, now_ms=now_ms)


def plan_cleaning(log: Log, now_ms: int, last_clean_offset: int | None = None
                  ) -> CleaningPlan | None:
    """The snapshot of `log` a pass works from (on the loop that owns the log), whatever the
    dirty ratio; None when nothing is cleanable."""
    views = segment_views(log, with_files=True)
    offsets = offsets_to_clean(log, last_clean_offset, now_ms, views)
    first_dirty, uncleanable = offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset
    if uncleanable <= first_dirty:
        return None
    segments = log.segments
    sources = [SourceSegment(v, seg.log_path, seg)
               for v, seg in zip(views, segments, strict=True)
               if v.base_offset < uncleanable and seg is not segments[-1]]
    if not sources:
        return None
    dirty_seg = log.floor_segment(first_dirty)
    _, start_position = dirty_seg.offset_index.lookup(first_dirty)
    clean_section = segments_in_range(views, 0, first_dirty)
    delete_horizon = (clean_section[-1].last_modified_ms - log.config.delete_retention_ms
                      if clean_section else 0)
    below = segments_in_range(views, 0, uncleanable)
    cleanable_horizon = below[-1].last_modified_ms if below else 0
    producers = last_records_of_active_producers(log)
    aborted = sorted(log.collect_aborted_transactions(log.log_start_offset, uncleanable),
                     key=lambda t: (t.first_offset, t.last_offset))
    cfg = log.config
    return CleaningPlan(
        log_name=log.name, directory=log.dir, first_dirty_offset=first_dirty,
        first_uncleanable_offset=uncleanable, dirty_start_position=start_position,
        sources=sources, delete_horizon_ms=delete_horizon,
        cleanable_horizon_ms=cleanable_horizon, segment_bytes=cfg.segment_bytes,
        max_index_size=cfg.segment_index_bytes, index_interval_bytes=cfg.index_interval_bytes,
        max_message_bytes=cfg.max_message_bytes, active_producers=producers,
        truncations=log.truncations, aborted_txns=aborted)


def last_records_of_active_producers(log: Log) -> dict[int, LastRecord]:
    """Each producer's last data offset (None when it has none: its last entry is a marker of a
    new epoch) and epoch (Kafka's ``Log.lastRecordsOfActiveProducers``)."""
    return {pid: LastRecord(entry.last_data_offset if entry.last_data_offset >= 0 else None,
                            entry.producer_epoch)
            for pid, entry in log.producer_state.producers.items()}


__all__ = [
    "CleaningPlan",
    "LogToClean",
    "OffsetsToClean",
    "SegmentView",
    "SourceSegment",
    "calculate_cleanable_bytes",
    "cleanable_offsets",
    "filthiest",
    "group_segments_by_size",
    "is_cleanable",
    "last_records_of_active_producers",
    "log_to_clean",
    "max_compaction_delay",
    "offsets_to_clean",
    "plan_cleaning",
    "segment_floor",
    "segment_views",
    "segments_in_range",
]
