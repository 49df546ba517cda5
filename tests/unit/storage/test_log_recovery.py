"""Crash recovery (S-2.5): whatever happens to the tail of the files, ``Log.open`` yields a valid
prefix of what was written, with consistent indexes.

Damage that Kafka's format cannot detect is left out on purpose: the base offset (bytes 0-7)
and the partition leader epoch (bytes 12-15) of a batch are outside its CRC, in Kafka as here.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import Codec
from odradek.protocol.records import (
    Record,
    build_batch,
    check_batch,
    decode_records,
    iter_headers,
    validate_batches,
)
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=90, segment_index_bytes=120)
SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Written:
    log_dir: Path
    batches: list[bytes]           # every batch as stored (offsets and epochs patched)
    epochs: list[int]              # the leader epoch of each batch
    segment_of: list[int]          # index of the segment holding each batch
    position_of: list[int]         # the batch's position in its segment file
    segment_bases: list[int]


record_st = st.tuples(st.integers(0, 40), st.integers(-500, 5000))
append_st = st.tuples(
    st.lists(st.lists(record_st, min_size=1, max_size=4), min_size=1, max_size=2),
    st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP]),
    st.sampled_from([0, 0, 0, 1]),  # epoch bump
)
appends_st = st.lists(append_st, min_size=1, max_size=16)


def write_log(root: Path, appends: list) -> Written:
    log = Log.open(root / "t-0", CONFIG, clock=lambda: NOW)
    epoch = 0
    batches: list[bytes] = []
    epochs: list[int] = []
    for batch_specs, codec, bump in appends:
        epoch += bump
        buf = bytearray()
        for specs in batch_specs:
            recs = [Record(0, NOW + ts, b"k%d" % size, b"x" * size) for size, ts in specs]
            buf += build_batch(recs, compression=codec)
        log.append_as_leader(buf, validate_batches(buf), epoch, NOW)
        for h in iter_headers(buf):
            batches.append(bytes(buf[h.position:h.position + h.size]))
            epochs.append(epoch)
    bases = [s.base_offset for s in log.segments]
    segment_of, position_of = [], []
    seg, pos = 0, 0
    offset = 0
    for data in batches:
        while seg + 1 < len(bases) and offset >= bases[seg + 1]:
            seg, pos = seg + 1, 0
        segment_of.append(seg)
        position_of.append(pos)
        pos += len(data)
        offset += decode_records(data)[-1].offset - decode_records(data)[0].offset + 1
    log.release_handles()  # a crash: no close, no final index entries, no snapshot
    return Written(root / "t-0", batches, epochs, segment_of, position_of, bases)


def seg_file(w: Written, seg: int, suffix: str) -> Path:
    return w.log_dir / f"{w.segment_bases[seg]:020d}{suffix}"


def check_valid_prefix(log: Log, w: Written, survivors: int) -> None:
    expected = w.batches[:survivors]
    data = log.read(0, 10**9).read_bytes() if log.log_end_offset > 0 else b""
    assert data == b"".join(expected)
    headers = list(iter_headers(data))
    assert len(headers) == survivors
    next_offset = 0
    for h in headers:
        assert h.base_offset == next_offset  # contiguous offsets from 0
        check_batch(data, h.position, len(data))
        next_offset = h.next_offset
    assert log.log_end_offset == next_offset
    assert not list(log.dir.glob("*.deleted"))
    # every offset is found through the indexes, in the right batch
    for h, batch in zip(headers, expected, strict=True):
        for offset in {h.base_offset, h.last_offset}:
            first = log.read(offset, 1, min_one_message=True)
            assert first.read_bytes() == batch
    # index entries point at batch starts, in order
    for segment in log.segments:
        idx = segment.offset_index
        idx.sanity_check(segment.size)
        starts = {hh.position: hh for hh in segment.iter_headers()}
        for i in range(idx.entries):
            off, pos = idx.entry(i)
            assert pos in starts and starts[pos].base_offset <= off
        segment.time_index.sanity_check()
        assert segment.time_index.last_entry()[1] < max(log.log_end_offset, segment.base_offset
                                                         + 1)
    # ListOffsets by time agrees with a brute-force scan of the surviving records
    records = [(r.offset, r.timestamp) for b in expected for r in decode_records(b)]
    for target in [*sorted({ts for _, ts in records})[:12], NOW - 10**6, NOW + 10**6]:
        hits = [(o, ts) for o, ts in records if ts >= target]
        answer = log.offset_for_timestamp(target)
        assert (answer is None) == (not hits)
        if hits:
            assert answer is not None and answer.offset == hits[0][0]
            assert answer.timestamp == hits[0][1]
    # the leader epoch cache keeps exactly the epochs that still have data
    seen: dict[int, int] = {}
    for h, e in zip(headers, w.epochs, strict=False):
        seen.setdefault(e, h.base_offset)
    assert log.leader_epoch_cache.entries() == sorted(seen.items())
    # and the log goes on from its end
    buf = bytearray(build_batch([(b"after", b"crash")], timestamp_ms=NOW))
    info = log.append_as_leader(buf, validate_batches(buf), 99, NOW)
    assert info.first_offset == next_offset
    assert log.read(next_offset, 10**6).read_bytes() == bytes(buf)


@SETTINGS
@given(appends_st, st.data())
def test_truncated_tail(appends: list, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = write_log(Path(tmp), appends)
        # A kill -9 can only tear the active segment; a torn batch elsewhere (a power loss)
        # is still detected, but a segment cut exactly at a batch boundary is not (in Kafka
        # neither: gaps between segments are legal, e.g. after compaction).
        seg = data.draw(st.integers(0, len(w.segment_bases) - 1), label="segment")
        path = seg_file(w, seg, ".log")
        if seg == len(w.segment_bases) - 1:
            cut = data.draw(st.integers(0, path.stat().st_size), label="cut")
        else:
            victim = data.draw(st.sampled_from(
                [i for i, s in enumerate(w.segment_of) if s == seg]), label="torn batch")
            cut = w.position_of[victim] + data.draw(
                st.integers(1, len(w.batches[victim]) - 1), label="cut")
        os.truncate(path, cut)
        survivors = sum(1 for i, s in enumerate(w.segment_of)
                        if s < seg or (s == seg and w.position_of[i] + len(w.batches[i]) <= cut))
        log = Log.open(w.log_dir, CONFIG, clock=lambda: NOW)
        assert not any(s.base_offset > w.segment_bases[seg] for s in log.segments) or \
            survivors == len(w.batches)
        check_valid_prefix(log, w, survivors)


@SETTINGS
@given(appends_st, st.data())
def test_corrupt_byte(appends: list, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = write_log(Path(tmp), appends)
        victim = data.draw(st.integers(0, len(w.batches) - 1), label="batch")
        size = len(w.batches[victim])
        inside = data.draw(st.sampled_from([8, 9, 10, 11, *range(16, size)]), label="byte")
        flip = data.draw(st.integers(1, 255), label="xor")
        path = seg_file(w, w.segment_of[victim], ".log")
        with open(path, "r+b") as f:
            pos = w.position_of[victim] + inside
            f.seek(pos)
            old = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([old ^ flip]))
        log = Log.open(w.log_dir, CONFIG, clock=lambda: NOW)
        check_valid_prefix(log, w, victim)


@SETTINGS
@given(appends_st, st.data())
def test_damaged_index_files(appends: list, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = write_log(Path(tmp), appends)
        for seg in range(len(w.segment_bases)):
            damage = data.draw(st.sampled_from(
                ["none", "delete-index", "delete-timeindex", "partial-entry", "unsorted",
                 "empty", "beyond-log"]), label=f"damage {seg}")
            index, timeindex = seg_file(w, seg, ".index"), seg_file(w, seg, ".timeindex")
            if damage == "delete-index":
                index.unlink()
            elif damage == "delete-timeindex":
                timeindex.unlink()
            elif damage == "partial-entry":
                with open(index, "ab") as f:
                    f.write(b"\x00\x00\x01")
            elif damage == "unsorted":
                index.write_bytes(struct.pack(">IIII", 9, 500, 3, 100))
                timeindex.write_bytes(struct.pack(">qIqI", NOW + 9, 5, NOW + 1, 6))
            elif damage == "empty":
                index.write_bytes(b"")
                timeindex.write_bytes(b"")
            elif damage == "beyond-log":
                index.write_bytes(struct.pack(">II", 1, 10**6))
        # segments below the recovery point are not recovered, only their indexes repaired
        recovery_point = w.segment_bases[-1]
        log = Log.open(w.log_dir, CONFIG, recovery_point=recovery_point, clock=lambda: NOW)
        check_valid_prefix(log, w, len(w.batches))


@SETTINGS
@given(appends_st, st.booleans())
def test_clean_restart_keeps_everything(appends: list, truncate_marker: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = write_log(Path(tmp), appends)
        log = Log.open(w.log_dir, CONFIG, clock=lambda: NOW)
        log.flush(force=True)
        log.close()
        again = Log.open(w.log_dir, CONFIG, recovery_point=log.recovery_point,
                         had_clean_shutdown=True, clock=lambda: NOW)
        check_valid_prefix(again, w, len(w.batches))


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from odradek.protocol.records import build_batch, validate_batches
    from odradek.storage.log import Log
    from odradek.storage.log_config import LogConfig
    log = Log.open(Path(sys.argv[1]), LogConfig(segment_bytes=3000, index_interval_bytes=200))
    i = 0
    while True:
        buf = bytearray(build_batch([(b"key", b"value-%d" % i)] * (1 + i % 3),
                                    timestamp_ms=1000 + i))
        info = log.append_as_leader(buf, validate_batches(buf), i // 50, 5000 + i)
        print(info.last_offset, flush=True)  # the acknowledgement
        i += 1
""")


def test_acknowledged_appends_survive_kill_9(tmp_path: Path) -> None:
    log_dir = tmp_path / "acks-0"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log_dir)],
                             stdout=subprocess.PIPE, text=True)
    acked = -1
    assert child.stdout is not None
    for _ in range(400):
        acked = int(child.stdout.readline())
    os.kill(child.pid, signal.SIGKILL)  # at an arbitrary moment of the append loop
    child.wait()
    child.stdout.close()
    log = Log.open(log_dir, LogConfig(segment_bytes=3000, index_interval_bytes=200))
    assert log.num_segments > 3
    assert log.log_end_offset > acked
    data = log.read(0, 10**9).read_bytes()
    expected = 0
    for h in iter_headers(data):
        check_batch(data, h.position, len(data))
        assert h.base_offset == expected
        expected = h.next_offset
    assert expected == log.log_end_offset
