"""The log cleaner (S-2.7, storage/cleaner.py): planning functions, the offset map's bound,
exact results of cleaning hand-built logs, a property test, and crash safety of the swap."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import Codec
from odradek.protocol.records import build_batch, decode_records, iter_headers, validate_batches
from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    CleanerStats,
    OffsetMap,
    clean_log,
    swap_in,
)
from odradek.storage.cleaner_manager import (
    CLEANER_OFFSET_CHECKPOINT,
    LogCleaner,
    LogCleanerManager,
)
from odradek.storage.cleaning_plan import (
    LogToClean,
    OffsetsToClean,
    SegmentView,
    calculate_cleanable_bytes,
    cleanable_offsets,
    filthiest,
    group_segments_by_size,
    is_cleanable,
    log_to_clean,
    max_compaction_delay,
    plan_cleaning,
)
from odradek.storage.log import Log
from odradek.storage.log_config import INT_MAX, LONG_MAX, LogConfig
from odradek.storage.log_manager import LogManager

NOW = 1_700_000_000_000
Rec = tuple[bytes | None, bytes | None]
Content = list[tuple[int, bytes | None, bytes | None]]


# -- helpers -----------------------------------------------------------------------------------

def compact_config(**kw: object) -> LogConfig:
    base = {"cleanup_policy": ("compact",), "segment_bytes": 1 << 20,
            "min_cleanable_dirty_ratio": 0.0}
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def append(lg: Log, records: Sequence[Rec], **kw: object) -> int:
    """Append one batch; returns its first offset. A batch with keyless records goes in as
    it would have before its topic became compacted (cleanup.policy=delete): a compacted log
    refuses them from clients (Kafka's LogValidator.validateKey), so that is how a cleaner
    meets them."""
    kw.setdefault("timestamp_ms", NOW - 10_000)
    buf = bytearray(build_batch(list(records), **kw))  # type: ignore[arg-type]
    config = lg.config
    if any(key is None for key, _ in records):
        lg.config = dataclasses.replace(config, cleanup_policy=("delete",))
    try:
        return lg.append_as_leader(buf, validate_batches(buf), 0, NOW).first_offset
    finally:
        lg.config = config


def content(lg: Log, start: int | None = None) -> Content:
    """Every record as a consumer fetch sees it (through Log.read)."""
    data = lg.read(lg.log_start_offset if start is None else start, 1 << 30).read_bytes()
    return [(r.offset, r.key, r.value) for h in iter_headers(data)
            for r in decode_records(data[h.position:h.position + h.size])]


def set_mtime(lg: Log, base_offset: int, ms: int) -> None:
    for seg in lg.segments:
        if seg.base_offset == base_offset:
            os.utime(seg.log_path, ns=(ms * 1_000_000, ms * 1_000_000))


def views(*sizes_and_bases: tuple[int, int]) -> list[SegmentView]:
    return [SegmentView(base, size) for base, size in sizes_and_bases]


# -- planning (pure) ---------------------------------------------------------------------------

def test_cleanable_range_stops_at_the_active_segment_and_the_high_watermark_segment() -> None:
    segs = views((0, 100), (10, 100), (20, 100), (30, 0))  # (base, size); 30 is active
    o = cleanable_offsets(segs, log_start_offset=0, log_end_offset=30, last_clean_offset=None)
    assert o == OffsetsToClean(0, 30, False)
    # the high watermark inside segment 10 makes that segment (and later ones) uncleanable
    o = cleanable_offsets(segs, log_start_offset=0, log_end_offset=30, last_clean_offset=None,
                          high_watermark=15)
    assert o.first_uncleanable_dirty_offset == 10
    o = cleanable_offsets(segs, log_start_offset=0, log_end_offset=30, last_clean_offset=None,
                          high_watermark=20, first_unstable_offset=12)
    assert o.first_uncleanable_dirty_offset == 10
    # a checkpoint inside the uncleanable part: nothing to clean
    o = cleanable_offsets(segs, log_start_offset=0, log_end_offset=30, last_clean_offset=25,
                          high_watermark=15)
    assert (o.first_dirty_offset, o.first_uncleanable_dirty_offset) == (25, 25)


def test_invalid_checkpoints_reset_to_the_log_start_offset() -> None:
    segs = views((10, 100), (20, 100), (30, 0))
    o = cleanable_offsets(segs, log_start_offset=10, log_end_offset=30, last_clean_offset=5)
    assert o == OffsetsToClean(10, 30, True)
    o = cleanable_offsets(segs, log_start_offset=10, log_end_offset=30, last_clean_offset=99)
    assert o == OffsetsToClean(10, 30, True)
    o = cleanable_offsets(segs, log_start_offset=10, log_end_offset=30, last_clean_offset=20)
    assert o == OffsetsToClean(20, 30, False)


def test_min_compaction_lag_keeps_recent_segments_dirty() -> None:
    segs = [SegmentView(0, 10, largest_timestamp=NOW - 5000),
            SegmentView(10, 10, largest_timestamp=NOW - 500),
            SegmentView(20, 10, largest_timestamp=NOW - 5000), SegmentView(30, 0)]
    o = cleanable_offsets(segs, log_start_offset=0, log_end_offset=30, last_clean_offset=None,
                          min_compaction_lag_ms=1000, now_ms=NOW)
    assert o.first_uncleanable_dirty_offset == 10
    o = cleanable_offsets(segs, log_start_offset=0, log_end_offset=30, last_clean_offset=None,
                          min_compaction_lag_ms=0, now_ms=NOW)
    assert o.first_uncleanable_dirty_offset == 30


def test_dirty_ratio_max_compaction_lag_and_the_filthiest_log() -> None:
    segs = views((0, 300), (10, 100), (20, 100), (30, 7))
    assert calculate_cleanable_bytes(segs, 10, 25) == (20, 100)
    ltc = log_to_clean("a", segs, OffsetsToClean(10, 30))
    assert (ltc.clean_bytes, ltc.cleanable_bytes) == (300, 200)
    assert ltc.cleanable_ratio == pytest.approx(0.4)
    assert is_cleanable(ltc, 0.39) and not is_cleanable(ltc, 0.4)  # strictly above (Kafka)
    forced = log_to_clean("b", segs, OffsetsToClean(10, 30), needs_compaction_now=True)
    assert is_cleanable(forced, 0.99)
    dirtier = LogToClean("c", 0, 10, 100, 300)
    assert filthiest([(ltc, 0.5), (dirtier, 0.5)]) is dirtier
    assert filthiest([(ltc, 0.5)]) is None
    assert filthiest([(ltc, 0.5), (forced, 0.99)]) is forced
    empty = LogToClean("e", 0, 0, 0, 0)
    assert not is_cleanable(empty, 0.0)
    stamped = [SegmentView(0, 1, first_batch_timestamp=NOW - 10_000),
               SegmentView(10, 1, first_batch_timestamp=NOW - 1000), SegmentView(20, 0)]
    assert max_compaction_delay(stamped, 0, 4000, NOW) == 6000
    assert max_compaction_delay(stamped, 10, 4000, NOW) == 0
    assert max_compaction_delay(stamped, 0, LONG_MAX, NOW) == 0


def test_groups_fit_one_segment_its_indexes_and_32_bit_relative_offsets() -> None:
    segs = [SegmentView(0, 40, index_bytes=8, time_index_bytes=12),
            SegmentView(10, 40, index_bytes=8, time_index_bytes=12),
            SegmentView(20, 40, index_bytes=8, time_index_bytes=12),
            SegmentView(30, 90, index_bytes=8, time_index_bytes=12)]
    bases = [[s.base_offset for s in g] for g in group_segments_by_size(segs, 100, 100, 40)]
    assert bases == [[0, 10], [20], [30]]
    bases = [[s.base_offset for s in g] for g in group_segments_by_size(segs, 1000, 24, 40)]
    assert bases == [[0, 10], [20, 30]]  # the time index: 12 + 12 <= 24 < 36
    far = [SegmentView(0, 1), SegmentView(INT_MAX, 1), SegmentView(INT_MAX + 5, 1)]
    bases = [[s.base_offset for s in g] for g in group_segments_by_size(far, 100, 100,
                                                                       INT_MAX + 9)]
    assert bases == [[0], [INT_MAX, INT_MAX + 5]]


# -- the offset map ----------------------------------------------------------------------------

def test_offset_map_is_sized_by_its_real_entry_cost_and_refuses_new_keys_when_full() -> None:
    """160 bytes an entry: what a dict entry with its digest and offset costs (see OffsetMap),
    so the configured buffer bounds the memory, not only the entry count."""
    m = OffsetMap(160 * 10)
    assert m.slots == 10 and m.max_entries(0.9) == 9
    for i in range(10):
        m.put(b"k%d" % i, i)
    m.put(b"k3", 33)  # an existing key can still be updated
    assert m.get(b"k3") == 33 and m.get(b"nope") == -1 and m.latest_offset == 33
    with pytest.raises(OverflowError):
        m.put(b"k10", 10)
    assert m.utilization == 1.0
    with pytest.raises(ValueError, match="too small"):
        Cleaner(0, CleanerConfig(dedupe_buffer_size=160))


def test_a_small_dedupe_buffer_bounds_each_pass_and_later_passes_finish(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", compact_config())
    for i in range(30):
        append(lg, [(b"k%d" % i, b"a")])
        if i % 5 == 4:
            lg.roll()
    for i in range(30):
        append(lg, [(b"k%d" % i, b"b")])
    lg.roll()
    config = CleanerConfig(dedupe_buffer_size=160 * 10)  # 9 entries a pass
    cleaner = Cleaner(0, config)
    checkpoint: int | None = None
    ends = []
    while True:
        result = clean_log(lg, NOW, last_clean_offset=checkpoint, cleaner=cleaner)
        if result is None:
            break
        assert result.completed
        ends.append(result.end_offset)
        checkpoint = result.end_offset
    assert ends[0] == 9  # 9 distinct keys fill the map: the pass ends there
    assert all(b > a for a, b in itertools.pairwise(ends)) and ends[-1] == 60
    assert content(lg) == [(30 + i, b"k%d" % i, b"b") for i in range(30)]


# -- cleaning hand-built logs ------------------------------------------------------------------

def build_mixed_log(directory: Path) -> Log:
    """seg 0: k1=a, k2=b, (no key)=x | gzip: k3=c, k1=a2
    seg 5: k2=tombstone | pid 7: k4=p1 | pid 7: k6=q1 (its last batch)
    seg 8: k1=a3, k5=e | k6=q2 | k7=tombstone
    active segment at 12"""
    lg = Log.open(directory, compact_config())
    append(lg, [(b"k1", b"a"), (b"k2", b"b"), (None, b"x")])
    append(lg, [(b"k3", b"c"), (b"k1", b"a2")], compression=Codec.GZIP)
    lg.roll()
    append(lg, [(b"k2", None)])
    append(lg, [(b"k4", b"p1")], producer_id=7, producer_epoch=0, base_sequence=0)
    append(lg, [(b"k6", b"q1")], producer_id=7, producer_epoch=0, base_sequence=1)
    lg.roll()
    append(lg, [(b"k1", b"a3"), (b"k5", b"e")])
    append(lg, [(b"k6", b"q2")])
    append(lg, [(b"k7", None)])
    lg.roll()
    return lg


def test_cleaning_keeps_the_latest_value_per_key_and_tombstones_before_the_horizon(
        tmp_path: Path) -> None:
    lg = build_mixed_log(tmp_path / "t-0")
    assert lg.log_end_offset == 12
    result = clean_log(lg, NOW)
    assert result is not None and result.completed and result.end_offset == 12
    assert result.stats.invalid_messages_read == 1  # the keyless record
    # no clean section yet: the delete horizon is 0, every tombstone stays
    assert content(lg) == [(3, b"k3", b"c"), (5, b"k2", None), (6, b"k4", b"p1"),
                           (8, b"k1", b"a3"), (9, b"k5", b"e"), (10, b"k6", b"q2"),
                           (11, b"k7", None)]
    headers = list(lg.iter_batch_headers(0))
    # batches keep their base offset, last offset delta and producer fields
    gz = next(h for h in headers if h.base_offset == 3)
    assert (gz.last_offset_delta, gz.records_count, gz.compression) == (1, 1, Codec.GZIP)
    # pid 7's last batch (k6=q1, superseded) is kept as an empty batch: its sequence survives
    empty = next(h for h in headers if h.base_offset == 7)
    assert (empty.records_count, empty.producer_id, empty.base_sequence,
            empty.producer_epoch) == (0, 7, 1, 0)
    assert 0 not in {h.base_offset for h in headers}  # k1=a, k2=b, no key: all gone
    # the read path serves a fetch at a removed offset from the next batch
    data = lg.read(1, 1 << 20).read_bytes()
    first = next(iter_headers(data))
    assert first.base_offset == 3 and first.last_offset >= 1
    assert content(lg, 4) == content(lg)  # offset 4 (k1=a2, removed) is inside batch 3
    # Log.open on the directory reads the same, producer state included
    lg.close()
    again = Log.open(tmp_path / "t-0", compact_config())
    assert content(again) == [(3, b"k3", b"c"), (5, b"k2", None), (6, b"k4", b"p1"),
                              (8, b"k1", b"a3"), (9, b"k5", b"e"), (10, b"k6", b"q2"),
                              (11, b"k7", None)]
    entry = again.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 1 and entry.last_data_offset == 7


def test_tombstones_past_the_delete_horizon_go_on_a_later_pass(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", compact_config(segment_bytes=100))  # a batch a segment
    for rec in [(b"k2", b"b"), (b"k2", None), (b"k4", None), (b"k3", b"c")]:
        append(lg, [rec])
    lg.roll()
    assert [s.base_offset for s in lg.segments] == [0, 1, 2, 3, 4]
    first = clean_log(lg, NOW)
    assert first is not None and first.end_offset == 4
    # no clean section before this pass: the delete horizon was 0, tombstones stayed
    assert content(lg) == [(1, b"k2", None), (2, b"k4", None), (3, b"k3", b"c")]
    append(lg, [(b"k3", b"c2")])
    lg.roll()
    # the clean section's last segment (3) was modified at t: the horizon is
    # t - delete.retention.ms; segment 1 is older (its tombstone goes), segment 2 newer
    retention = lg.config.delete_retention_ms
    t = NOW
    set_mtime(lg, 1, t - retention - 5)
    set_mtime(lg, 2, t - retention + 5)
    set_mtime(lg, 3, t)
    second = clean_log(lg, NOW, last_clean_offset=first.end_offset)
    assert second is not None and second.completed
    assert content(lg) == [(2, b"k4", None), (4, b"k3", b"c2")]


def test_a_batch_only_partly_removed_is_rebuilt_with_its_codec(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", compact_config())
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD, Codec.NONE):
        append(lg, [(b"a%d" % codec, b"1"), (b"b%d" % codec, b"1"), (b"c%d" % codec, b"1")],
               compression=codec)
    lg.roll()
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD, Codec.NONE):
        append(lg, [(b"b%d" % codec, b"2")])
    lg.roll()
    assert clean_log(lg, NOW) is not None
    headers = [h for h in lg.iter_batch_headers(0) if h.base_offset < 15]
    assert [(h.base_offset, h.records_count, h.last_offset_delta, h.compression)
            for h in headers] == [(3 * i, 2, 2, Codec(c)) for i, c in enumerate((1, 2, 3, 4, 0))]
    got = content(lg)
    assert [(o, k) for o, k, _ in got][:4] == [(0, b"a1"), (2, b"c1"), (3, b"a2"), (5, b"c2")]


# -- a property test ---------------------------------------------------------------------------

ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from([b"a", b"b", b"c", b"d", b"e", None]),
              st.one_of(st.none(), st.binary(min_size=0, max_size=20)),
              st.integers(1, 3)),
    st.just(("roll",))), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, segment_bytes=st.sampled_from([200, 500, 4096]), hw_back=st.integers(0, 10))
def test_property_latest_values_survive_at_their_offsets(
        ops: list[tuple[object, ...]], segment_bytes: int, hw_back: int) -> None:
    directory = Path(tempfile.mkdtemp()) / "p-0"
    try:
        cfg = compact_config(segment_bytes=segment_bytes, index_interval_bytes=64)
        lg = Log.open(directory, cfg)
        for op in ops:
            if op[0] == "roll":
                if lg.active_segment.size:
                    lg.roll()
                continue
            _, key, value, n = op
            append(lg, [(key, value)] * int(n))  # type: ignore[list-item]
        lg.high_watermark = max(0, lg.log_end_offset - hw_back)
        before = content(lg)
        plan = plan_cleaning(lg, NOW)
        result = clean_log(lg, NOW)
        after = content(lg)
        offsets = [o for o, _, _ in after]
        assert offsets == sorted(set(offsets))  # strictly increasing
        if result is None:
            assert plan is None and after == before
            return
        end = result.end_offset
        assert plan is not None and end <= plan.first_uncleanable_offset
        assert end <= lg.high_watermark
        # nothing at or after the cleanable end changed
        assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]
        # every key's latest record is still there, at its offset, with its value
        latest: dict[bytes, tuple[int, bytes | None, bytes | None]] = {}
        for rec in before:
            if rec[1] is not None:
                latest[rec[1]] = rec
        for rec in latest.values():
            assert rec in after
        # below the end, only the latest record of each key there is left, and no keyless one
        latest_below: dict[bytes | None, int] = {}
        for o, k, _v in before:
            if o < end:
                latest_below[k] = o
        for o, k, _v in after:
            if o < end:
                assert k is not None and latest_below[k] == o
        # what is gone below the end is superseded or keyless; nothing new appeared
        assert set(after) <= set(before)
        for o, k, _v in set(before) - set(after):
            assert o < end and (k is None or latest[k][0] > o)
        # Log.open gives the same content, with valid indexes
        lg.close()
        again = Log.open(directory, cfg)
        assert content(again) == after
        for seg in again.segments:
            seg.offset_index.sanity_check(seg.size)
            seg.time_index.sanity_check()
        for o in offsets:
            found = again.read(o, 1).regions[0]
            h = next(iter_headers(found.read_bytes()))
            assert h.base_offset <= o <= h.last_offset
        again.close()
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


# -- crash safety of the swap ------------------------------------------------------------------

class Crash(Exception):
    pass


def _three_segment_log(directory: Path) -> Log:
    lg = Log.open(directory, compact_config())
    for round_ in range(3):
        for k in range(4):
            append(lg, [(b"k%d" % k, b"v%d-%d" % (k, round_))])
        lg.roll()
    # a last segment whose records all go (keyless): the cleaned segment must still cover
    # its offsets, or a crash would leave it beside the swapped-in segment
    append(lg, [(None, b"junk"), (None, b"junk")])
    lg.roll()
    append(lg, [(b"k0", b"tail")])  # the active segment, not cleaned
    return lg


def _expected_cleaned(tmp: Path) -> Content:
    lg = _three_segment_log(tmp / "ref" / "t-0")
    assert clean_log(lg, NOW) is not None
    return content(lg)


@pytest.mark.parametrize("crash_after", [
    "cleaned", "log-swap-only", "swap", "deleted-1", "deleted-2", "deleted-3", "deleted-4",
    "final"])
def test_a_crash_at_any_step_of_the_swap_recovers_old_or_cleaned_content(
        tmp_path: Path, crash_after: str) -> None:
    cleaned_content = _expected_cleaned(tmp_path)
    directory = tmp_path / "crash" / "t-0"
    lg = _three_segment_log(directory)
    old_content = content(lg)
    assert cleaned_content != old_content
    cleaner = Cleaner(0, CleanerConfig())
    plan = plan_cleaning(lg, NOW)
    assert plan is not None
    stats = CleanerStats()
    cleaner.build_offset_map(plan, stats)
    [group] = plan.groups(plan.first_uncleanable_offset)
    assert len(group) == 4
    cleaned = cleaner.clean_group(plan, group, stats)
    steps: list[str] = []

    def step(name: str) -> None:
        steps.append(name)
        label = name if name != "deleted" else f"deleted-{steps.count('deleted')}"
        if label == crash_after:
            raise Crash(label)

    if crash_after == "log-swap-only":  # inside the rename of the cleaned files
        os.replace(cleaned.log_path, str(cleaned.log_path).replace(".cleaned", ".swap"))
    elif crash_after != "cleaned":
        with pytest.raises(Crash):
            swap_in(lg, plan, group, cleaned, step=step)
    # the crash: nothing more happens to these objects; the process is gone
    lg.release_handles()
    cleaned.close_handles()
    recovered = Log.open(directory, compact_config())
    got = content(recovered)
    expected = old_content if crash_after in ("cleaned", "log-swap-only") else cleaned_content
    assert got == expected
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    for seg in recovered.segments:
        seg.offset_index.sanity_check(seg.size)


def test_the_swap_is_refused_when_the_log_changed_meanwhile(tmp_path: Path) -> None:
    lg = _three_segment_log(tmp_path / "t-0")
    before = content(lg)
    cleaner = Cleaner(0, CleanerConfig())
    plan = plan_cleaning(lg, NOW)
    assert plan is not None
    stats = CleanerStats()
    cleaner.build_offset_map(plan, stats)
    [group] = plan.groups(plan.first_uncleanable_offset)
    cleaned = cleaner.clean_group(plan, group, stats)
    lg.truncate_to(10)  # a follower truncating after a leader change
    assert not swap_in(lg, plan, group, cleaned)
    assert content(lg) == before[:10]
    assert not [n for n in os.listdir(lg.dir) if n.endswith(".cleaned")]
    # retention removed the first segment meanwhile: refused as well
    lg2 = _three_segment_log(tmp_path / "u-0")
    plan = plan_cleaning(lg2, NOW)
    assert plan is not None
    cleaner.build_offset_map(plan, stats)
    [group] = plan.groups(plan.first_uncleanable_offset)
    cleaned = cleaner.clean_group(plan, group, stats)
    lg2.log_start_offset = 4
    lg2.delete_retention_segments(NOW)
    assert lg2.segments[0].base_offset == 4
    assert not swap_in(lg2, plan, group, cleaned)


# -- the manager: checkpoints, choice of log, truncation and deletion --------------------------

def test_log_manager_cleaner_checkpoint_choice_truncation_and_deletion(tmp_path: Path) -> None:
    lm = LogManager([tmp_path], LogConfig(segment_bytes=1 << 20), clock=lambda: NOW,
                    lock_dirs=False)
    try:
        compacted = lm.get_or_create_log("c", 0, compact_config(min_cleanable_dirty_ratio=0.5))
        plain = lm.get_or_create_log("d", 0)
        for lg in (compacted, plain):
            for k in range(6):
                append(lg, [(b"k%d" % (k % 2), b"v%d" % k)])
            lg.roll()
        cleaner = lm.cleaner
        assert cleaner.clean_once(NOW)  # only the compacted log
        checkpoint = OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
        assert checkpoint == {("c", 0): 6}
        assert content(compacted) == [(4, b"k0", b"v4"), (5, b"k1", b"v5")]
        assert len(content(plain)) == 6
        assert not cleaner.clean_once(NOW)  # clean: ratio 0
        # switching a topic to compact takes effect on the next pass
        lm.update_topic_config("d", compact_config())
        assert cleaner.clean_once(NOW)
        assert content(plain) == [(4, b"k0", b"v4"), (5, b"k1", b"v5")]
        # a truncation below the checkpoint moves it back (to the active segment)
        compacted.truncate_to(5)
        assert lm.cleaner_manager.all_cleaner_checkpoints()[("c", 0)] == 0
        # the checkpoint survives a restart; a deleted topic leaves it
        lm.delete_log("d", 0)
        assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {
            ("c", 0): 0}
    finally:
        lm.shutdown()
    lm2 = LogManager([tmp_path], LogConfig(), clock=lambda: NOW, lock_dirs=False)
    try:
        assert lm2.cleaner_manager.all_cleaner_checkpoints() == {("c", 0): 0}
    finally:
        lm2.shutdown()


def test_background_cleaner_pass_runs_on_a_loop_with_the_thread(tmp_path: Path) -> None:
    import asyncio

    async def main() -> None:
        lm = LogManager([tmp_path], LogConfig(), clock=lambda: NOW, lock_dirs=False)
        try:
            lg = lm.get_or_create_log("c", 0, compact_config())
            for k in range(6):
                append(lg, [(b"k%d" % (k % 2), b"v%d" % k)])
            lg.roll()
            manager = LogCleanerManager(lm.log_dirs, lambda: lm._logs, lm._write_checkpoint)
            cleaner = LogCleaner(manager, CleanerConfig(), clock=lambda: NOW)
            assert await cleaner.clean_once_async()
            assert content(lg) == [(4, b"k0", b"v4"), (5, b"k1", b"v5")]
            assert not await cleaner.clean_once_async()
            await cleaner.shutdown()
        finally:
            lm.shutdown()
    asyncio.run(main())
