"""dump-log (Kafka's DumpLogSegments, S-6.6): segments written by the storage code, and
hand-corrupted copies (flipped CRC byte, truncated tail, an index entry at the wrong position,
time index entries out of order) - each flagged, never a traceback."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.protocol.compression import Codec
from odradek.protocol.records import build_batch, iter_headers, validate_batches
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.tools.dump_log import DumpOptions, DumpReport, dump_file

NOW = 1_700_000_000_000
SEG = "00000000000000000000"


def write_log(tmp_path: Path, batches: int = 12, per_batch: int = 3,
              compression: int = Codec.NONE) -> Path:
    """A one-segment partition written by the broker's Log with an index entry every batch."""
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(index_interval_bytes=1), clock=lambda: NOW)
    for b in range(batches):
        buf = bytearray(build_batch(
            [(f"k{b}-{i}".encode(), f"value-{b}-{i}".encode()) for i in range(per_batch)],
            timestamp_ms=NOW + b, compression=compression))
        log.append_as_leader(buf, validate_batches(buf), 4, NOW)
    log.flush(force=True)
    log.close()
    return d


def dump(path: Path, **opts: object) -> tuple[list[str], DumpReport]:
    report = DumpReport()
    lines = list(dump_file(path, DumpOptions(**opts), report))  # type: ignore[arg-type]
    return lines, report


def test_segment_batches_and_records_in_kafkas_shape(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    lines, report = dump(d / f"{SEG}.log", print_data_log=True)
    assert report.clean
    assert lines[:2] == [f"Dumping {d / f'{SEG}.log'}", "Log starting offset: 0"]
    batches = [x for x in lines if x.startswith("baseOffset:")]
    records = [x for x in lines if x.startswith("| offset:")]
    assert len(batches) == 12 and len(records) == 36
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 4 isTransactional: false "
        "isControl: false position: 0 CreateTime: 1700000000000 size: ")
    assert batches[0].endswith("magic: 2 compresscodec: none crc: " +
                               batches[0].split("crc: ")[1].split()[0] + " isvalid: true")
    assert records[4] == ("| offset: 4 CreateTime: 1700000000001 keySize: 4 valueSize: 9 "
                          "sequence: -1 headerKeys: [] key: k1-1 payload: value-1-1")
    # positions are where the batches really are
    data = (d / f"{SEG}.log").read_bytes()
    positions = [h.position for h in iter_headers(data)]
    assert [int(b.split("position: ")[1].split()[0]) for b in batches] == positions


def test_deep_iteration_reads_compressed_batches_without_payloads(tmp_path: Path) -> None:
    d = write_log(tmp_path, batches=2, per_batch=5, compression=Codec.GZIP)
    lines, report = dump(d / f"{SEG}.log", deep_iteration=True)
    assert report.clean
    assert sum("compresscodec: gzip" in x for x in lines) == 2
    records = [x for x in lines if x.startswith("| offset:")]
    assert [int(r.split()[2]) for r in records] == list(range(10))
    assert not any("payload:" in r for r in records)
    shallow, _ = dump(d / f"{SEG}.log")
    assert not any(x.startswith("| offset:") for x in shallow)


def test_flipped_crc_byte_is_flagged_invalid_and_the_rest_still_dumped(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    seg = d / f"{SEG}.log"
    data = bytearray(seg.read_bytes())
    third = list(iter_headers(bytes(data)))[2]
    data[third.position + 17] ^= 0xFF  # a byte of the stored CRC
    seg.write_bytes(bytes(data))
    lines, report = dump(seg)
    batches = [x for x in lines if x.startswith("baseOffset:")]
    assert len(batches) == 12
    assert [b.endswith("isvalid: false") for b in batches] == [i == 2 for i in range(12)]
    assert report.corrupt_batches == 1 and not report.clean


def test_flipped_record_byte_is_flagged_invalid(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    seg = d / f"{SEG}.log"
    data = bytearray(seg.read_bytes())
    first = next(iter(iter_headers(bytes(data))))
    data[first.position + first.size - 3] ^= 0x01  # inside the last record's value
    seg.write_bytes(bytes(data))
    lines, report = dump(seg, print_data_log=True)
    assert lines[2].startswith("baseOffset: 0 ") and lines[2].endswith("isvalid: false")
    assert report.corrupt_batches == 1


def test_truncated_tail_reports_invalid_bytes(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    seg = d / f"{SEG}.log"
    data = seg.read_bytes()
    last = list(iter_headers(data))[-1]
    seg.write_bytes(data[:-10])
    lines, report = dump(seg)
    assert sum(x.startswith("baseOffset:") for x in lines) == 11
    assert lines[-1] == f"Found {last.size - 10} invalid bytes at the end of {SEG}.log"
    assert report.invalid_trailing_bytes == {str(seg): last.size - 10}


def test_offset_index_entries_verified_against_the_log(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    lines, report = dump(d / f"{SEG}.index")
    assert report.clean, report.error_lines()
    entries = [x for x in lines if x.startswith("offset:")]
    headers = list(iter_headers((d / f"{SEG}.log").read_bytes()))
    expected = {f"offset: {h.last_offset} position: {h.position}" for h in headers}
    assert entries and set(entries) <= expected


def test_index_entry_at_the_wrong_position_is_a_mismatch(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    idx = d / f"{SEG}.index"
    data = bytearray(idx.read_bytes())
    rel, pos = struct.unpack_from(">II", data, 8)  # the second entry
    headers = list(iter_headers((d / f"{SEG}.log").read_bytes()))
    later = next(h for h in headers if h.position > pos)
    struct.pack_into(">II", data, 8, rel, later.position)  # a later batch's position
    # the third entry points into the middle of a batch
    rel3, pos3 = struct.unpack_from(">II", data, 16)
    struct.pack_into(">II", data, 16, rel3, pos3 + 5)
    idx.write_bytes(bytes(data))
    _lines, report = dump(idx)
    assert report.index_mismatches == {str(idx): [(rel, later.last_offset), (rel3, -1)]}
    assert report.error_lines()[:3] == [f"Mismatches in :{idx}",
                                        f"  Index offset: {rel}, log offset: {later.last_offset}",
                                        f"  Index offset: {rel3}, log offset: -1"]
    verify, report2 = dump(idx, verify_index_only=True)
    assert not any(x.startswith("offset:") for x in verify)
    assert report2.index_mismatches == report.index_mismatches


def test_time_index_checked_for_mismatch_and_order(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    tidx = d / f"{SEG}.timeindex"
    lines, report = dump(tidx)
    assert report.clean, report.error_lines()
    stamps = [int(x.split()[1]) for x in lines if x.startswith("timestamp:")]
    assert stamps and stamps == sorted(stamps)
    data = bytearray(tidx.read_bytes())
    ts1, rel1 = struct.unpack_from(">qI", data, 12)
    struct.pack_into(">qI", data, 12, ts1 + 1000, rel1)  # timestamp no batch has
    ts2, _ = struct.unpack_from(">qI", data, 24)  # now below the previous entry's
    tidx.write_bytes(bytes(data))
    _, report = dump(tidx)
    assert report.timestamp_mismatches == {str(tidx): [(ts1 + 1000, ts1)]}
    assert report.out_of_order_timestamps == {str(tidx): [(ts2, ts1 + 1000)]}
    assert "Found out of order timestamp in :" + str(tidx) in report.error_lines()


def test_index_sanity_check(tmp_path: Path) -> None:
    d = write_log(tmp_path)
    idx = d / f"{SEG}.index"
    lines, report = dump(idx, index_sanity_check=True)
    assert lines[-1] == f"{idx} passed sanity check." and report.clean
    data = bytearray(idx.read_bytes())
    data[8:16], data[16:24] = data[16:24], data[8:16]  # out of order
    idx.write_bytes(bytes(data))
    lines, report = dump(idx, index_sanity_check=True)
    assert lines[-1].startswith(f"{idx} failed sanity check:") and not report.clean


def test_snapshot_and_leader_epoch_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(), clock=lambda: NOW)
    buf = bytearray(build_batch([(None, b"a"), (None, b"b")], timestamp_ms=NOW, producer_id=7,
                                producer_epoch=0, base_sequence=0))
    log.append_as_leader(buf, validate_batches(buf), 3, NOW)
    snap = log.producer_state.take_snapshot()
    log.close()
    assert snap is not None
    lines, report = dump(snap)
    assert report.clean
    assert lines[1].startswith("producerId: 7 producerEpoch: 0 ")
    assert "firstSequence: 0 lastSequence: 1 lastOffset: 1" in lines[1]
    lines, report = dump(d / "leader-epoch-checkpoint")
    assert lines[1:] == ["epoch: 3 startOffset: 0"]


def test_cli_exit_status_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    d = write_log(tmp_path)
    seg = d / f"{SEG}.log"
    assert main(["dump-log", "--files", f"{seg},{d / f'{SEG}.index'}"]) == 0
    out = capsys.readouterr().out
    assert out.count("baseOffset:") == 12 and "offset: " in out
    bad = tmp_path / "bad" / f"{SEG}.log"
    bad.parent.mkdir()
    shutil.copy(seg, bad)
    bad.write_bytes(bad.read_bytes()[:-1])
    assert main(["dump-log", "--files", str(bad)]) == 1
    assert "invalid bytes at the end" in capsys.readouterr().out
    assert main(["dump-log", "--files", str(tmp_path / "missing.log")]) == 2
    assert f"Cannot read {tmp_path / 'missing.log'}: no such file" in capsys.readouterr().out
    assert main(["dump-log", "--files", str(d)]) == 2  # a partition directory, not its files
    assert f"Cannot read {d}: is a directory" in capsys.readouterr().out
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(b"\x00" * 100)
    assert main(["dump-log", "--files", str(garbage)]) == 2
    assert "is not named after a base offset" in capsys.readouterr().out
    assert main(["dump-log", "--files", str(seg), "--value-decoder-class", "avro"]) == 2
    assert "unknown --value-decoder-class" in capsys.readouterr().err


# -- --offsets-decoder ------------------------------------------------------------------------


def offsets_segment(tmp_path: Path) -> Path:
    """__consumer_offsets records of every kind the coordinator writes (and older versions),
    a transactional commit with its COMMIT marker, and one record that is no offsets record."""
    from odradek.client.assignors import Assignment, encode_assignment
    from odradek.client.types import TopicPartition as TP
    from odradek.protocol import group_metadata_records as gm
    from odradek.protocol.control_records import (
        ControlRecordType,
        EndTransactionMarker,
        build_end_txn_marker_batch,
    )

    def member(member_id: str, assignment: bytes) -> gm.MemberRecord:
        return gm.MemberRecord(member_id, "client", "/127.0.0.1", 300000, 45000, b"",
                               assignment)

    consumer_group = gm.GroupMetadataValue("consumer", 3, "range", "m1", NOW, (
        member("m1", encode_assignment(Assignment([TP("t", 0), TP("t", 2)]))),
        member("m2", encode_assignment(Assignment([TP("u", 1)], b"\x00\x0a\xff"))),
        member("m3", b""),  # a member the leader's SyncGroup gave nothing
    ))
    other_group = gm.GroupMetadataValue("connect", 1, "sessioned", None, NOW,
                                        (member("w1", b"\x01\xab"),))
    v0_key = struct.pack(">h", 0) + b"\x00\x01g\x00\x01t" + struct.pack(">i", 9)
    v0_value = struct.pack(">hq", 0, 5) + b"\x00\x00" + struct.pack(">q", NOW)
    records = [
        (gm.offset_commit_key("g", "t", 0),
         gm.offset_commit_value(gm.OffsetAndMetadata(42, 7, "meta", NOW))),
        (gm.offset_commit_key("g", "t", 1),
         gm.offset_commit_value(gm.OffsetAndMetadata(3, -1, "", NOW, NOW + 1000))),
        (v0_key, v0_value),
        (gm.offset_commit_key("g", "t", 2), None),
        (gm.group_metadata_key("g"), gm.group_metadata_value(consumer_group)),
        (gm.group_metadata_key("c"), gm.group_metadata_value(other_group, 0)),
        (gm.group_metadata_key("gone"), None),
        (None, b"not an offsets record"),
    ]
    path = tmp_path / f"{SEG}.log"
    path.write_bytes(b"".join([
        build_batch(records, timestamp_ms=NOW),
        build_batch([(gm.offset_commit_key("txn-group", "t", 0),
                      gm.offset_commit_value(gm.OffsetAndMetadata(11, -1, "", NOW)))],
                    base_offset=8, timestamp_ms=NOW, producer_id=5, producer_epoch=0,
                    base_sequence=0, is_transactional=True),
        build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.COMMIT, 2), 5, 0,
                                   timestamp_ms=NOW, base_offset=9),
    ]))
    return path


def test_offsets_decoder_prints_kafkas_shape(tmp_path: Path) -> None:
    lines, report = dump(offsets_segment(tmp_path), offsets_decoder=True)
    assert report.clean
    got = [line.split(" headerKeys: [] ", 1)[1] for line in lines if line.startswith("| offset")]
    assert got == [
        "key: offset_commit::group=g,partition=t-0 "
        f"payload: offset=42,metadata=meta,leaderEpoch=7,commitTimestamp={NOW}",
        "key: offset_commit::group=g,partition=t-1 "
        f"payload: offset=3,commitTimestamp={NOW},expireTimestamp={NOW + 1000}",
        f"key: offset_commit::group=g,partition=t-9 payload: offset=5,commitTimestamp={NOW}",
        "key: offset_commit::group=g,partition=t-2 payload: <DELETE>",
        'key: group_metadata::group=g payload: {"protocolType":"consumer","protocol":"range",'
        '"generationId":3,"assignment":"{m1=[t-0, t-2],m2=[u-1]:AFF,m3=[]}","leader":"m1"}',
        'key: group_metadata::group=c payload: {"protocolType":"connect",'
        '"protocol":"sessioned","generationId":1,"assignment":"{w1=1AB}","leader":null}',
        "key: group_metadata::group=gone payload: <DELETE>",
        "(not an offsets record: the record has no key)",
        "key: offset_commit::group=txn-group,partition=t-0 "
        f"payload: offset=11,commitTimestamp={NOW}",
        "endTxnMarker: COMMIT coordinatorEpoch: 2",
    ]
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert "isTransactional: true isControl: false" in batches[1]
    assert "isTransactional: true isControl: true" in batches[2]


def test_offsets_decoder_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = offsets_segment(tmp_path)
    assert main(["dump-log", "--files", str(path), "--offsets-decoder"]) == 0
    out = capsys.readouterr().out
    assert "key: offset_commit::group=g,partition=t-0 payload: offset=42,metadata=meta" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 2" in out
