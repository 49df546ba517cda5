"""`odradek dump-log` (Kafka's DumpLogSegments, S-6.6).

    odradek dump-log --files 00000000000000000000.log[,...] [--print-data-log]
        [--deep-iteration] [--index-sanity-check] [--verify-index-only]
        [--max-message-size N] [--key-decoder-class string|hex] [--value-decoder-class ...]
        [--offsets-decoder | --transaction-log-decoder]

* ``.log``: one line per batch (baseOffset, lastOffset, count, sequences, producer, leader epoch,
  flags, position, CreateTime/LogAppendTime, size, magic, compresscodec, crc, isvalid), and with
  ``--deep-iteration`` / ``--print-data-log`` one ``| offset: ...`` line per record (the latter
  with key and payload). A batch whose CRC does not match is printed with ``isvalid: false``;
  bytes at the end that do not form a whole batch are reported as Kafka does ("Found N invalid
  bytes at the end of FILE").
* ``.index`` / ``.timeindex``: one line per entry, each checked against the segment's ``.log``
  (Kafka's "Mismatches in :FILE" / "Found timestamp mismatch in :FILE" / "Found out of order
  timestamp in :FILE" reports, on stderr at the end). ``--index-sanity-check`` only runs the
  broker's own index sanity check; ``--verify-index-only`` checks without printing entries.
* ``.snapshot`` (producer state), ``.txnindex`` (aborted transactions: "version: 0
  producerId: P firstOffset: F lastOffset: L lastStableOffset: S") and
  ``leader-epoch-checkpoint`` files are printed entry by entry.
* Control batches: their records print Kafka's ``endTxnMarker: COMMIT coordinatorEpoch: N``
  (``controlType: NAME(id)`` for another control type) and never a key or payload.
  ``--transaction-log-decoder`` prints `__transaction_state` records as Kafka does
  ("key: transaction_metadata::transactionalId=... payload: producerId:...,state=...") and,
  like Kafka's decoders, implies ``--print-data-log``.
* ``--offsets-decoder`` prints `__consumer_offsets` records in Kafka 2.8's shape
  (GroupMetadataManager.formatRecordKeyAndValue), with what 2.8 reads but does not print
  appended after its fields:

    key: offset_commit::group=G,partition=T-P
      payload: offset=O[,metadata=M][,leaderEpoch=E],commitTimestamp=C[,expireTimestamp=X]
    key: group_metadata::group=G
      payload: {"protocolType":"consumer","protocol":"range","generationId":N,
                "assignment":"{member=[t-0, t-1]}","leader":"member"}

  ``<DELETE>`` for a tombstone. A consumer group's assignments are decoded (Kafka's
  ConsumerProtocol: "member=[partitions]", ":USERDATA" in hex when there is user data); other
  protocol types', and an assignment that does not decode, are printed as hex. A record that is
  no offsets record gets "(not an offsets record: ...)" where Kafka's tool would stop.

Exit status: 0 when every file was read and nothing was flagged, 1 when something was flagged
(corrupt batch, invalid trailing bytes, index mismatch, failed sanity check), 2 when a file
cannot be read at all. (Kafka's tool always exits 0; a status is more useful to scripts.)

The dumping functions are generators of output lines that record problems in a `DumpReport`,
so that tests and other tools can use them without a process.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..client.assignors import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from ..client.assignors import decode_assignment
from ..protocol import group_metadata_records as gm
from ..protocol import records as rb
from ..protocol.control_records import ControlRecordType, EndTransactionMarker
from ..protocol.primitives import SchemaError
from ..protocol.transaction_log_records import format_record_key_and_value
from ..storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CheckpointError,
    LeaderEpochCheckpointFile,
)
from ..storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from ..storage.producer_state import CorruptSnapshotError, ProducerStateManager
from ..storage.transaction_index import ENTRY_SIZE, AbortedTxn
from .command import Subcommands, ToolError, prefixed, run_tool

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Kafka's --max-message-size default
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")

Decoder = Callable[[bytes], str]


def string_decoder(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def hex_decoder(data: bytes) -> str:
    return data.hex()


DECODERS: dict[str, Decoder] = {
    "string": string_decoder,
    "kafka.serializer.StringDecoder": string_decoder,
    "hex": hex_decoder,
}


@dataclass
class DumpOptions:
    print_data_log: bool = False
    deep_iteration: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    key_decoder: Decoder = string_decoder
    value_decoder: Decoder = string_decoder
    transaction_log_decoder: bool = False
    offsets_decoder: bool = False


@dataclass
class DumpReport:
    """Problems found while dumping, printed (to stderr) after all files as Kafka does."""

    # index file -> [(index offset, log offset)]
    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # time index file -> [(index timestamp, log timestamp)]
    timestamp_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # time index file -> [(index timestamp, previous index timestamp)]
    out_of_order_timestamps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # time index file -> [(indexed offset, log offset found)]
    offsets_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # log file -> number of bytes at the end that are no whole batch
    invalid_trailing_bytes: dict[str, int] = field(default_factory=dict)
    corrupt_batches: int = 0
    other: list[str] = field(default_factory=list)
    unreadable_files: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.index_mismatches or self.timestamp_mismatches
                    or self.out_of_order_timestamps or self.offsets_not_found
                    or self.invalid_trailing_bytes or self.corrupt_batches or self.other)

    def error_lines(self) -> list[str]:
        out: list[str] = []
        for name, pairs in self.index_mismatches.items():
            out.append(f"Mismatches in :{name}")
            out += [f"  Index offset: {i}, log offset: {o}" for i, o in pairs]
        for name, pairs in self.timestamp_mismatches.items():
            out.append(f"Found timestamp mismatch in :{name}")
            out += [f"  Index timestamp: {i}, log timestamp: {t}" for i, t in pairs]
        for name, pairs in self.out_of_order_timestamps.items():
            out.append(f"Found out of order timestamp in :{name}")
            out += [f"  Index timestamp: {i}, Previously indexed timestamp: {p}"
                    for i, p in pairs]
        for name, pairs in self.offsets_not_found.items():
            out.append(f"The following indexed offsets are not found in the log {name}.")
            out += [f"Indexed offset: {i}, found log offset: {o}" for i, o in pairs]
        out += self.other
        return out


def base_offset_of(path: Path) -> int:
    """The segment base offset a file is named after (00000000000000000042.index -> 42)."""
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        raise ValueError(f"{path.name} is not named after a base offset") from None


# -- .log -------------------------------------------------------------------------------------


def batch_line(h: rb.BatchHeader, position: int, valid: bool) -> str:
    """One batch in Kafka's DumpLogSegments shape (magic 2)."""
    ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} "
            f"isControl: {str(h.is_control).lower()} position: {position} "
            f"{ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {h.compression.name.lower()} crc: {h.crc} "
            f"isvalid: {str(valid).lower()}")


def record_line(h: rb.BatchHeader, r: rb.Record, opts: DumpOptions) -> str:
    ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
    seq = ((h.base_sequence + (r.offset - h.base_offset)) & 0x7FFFFFFF
           if h.base_sequence >= 0 else -1)
    keys = ",".join(k for k, _ in r.headers)
    line = (f"| offset: {r.offset} {ts_type}: {r.timestamp} "
            f"keySize: {-1 if r.key is None else len(r.key)} "
            f"valueSize: {-1 if r.value is None else len(r.value)} "
            f"sequence: {seq} headerKeys: [{keys}]")
    if h.is_control:
        return line + control_record_text(r)
    parser = _internal_topic_parser(opts)
    if parser is not None:
        parse, what = parser
        try:
            key, payload = parse(r.key, r.value)
        except (SchemaError, ValueError) as exc:
            return line + f" (not {what}: {exc})"
        return line + f" key: {key} payload: {payload}"
    if opts.print_data_log:
        if r.key is not None:
            line += f" key: {opts.key_decoder(r.key)}"
        line += f" payload: {'null' if r.value is None else opts.value_decoder(r.value)}"
    return line


def _internal_topic_parser(opts: DumpOptions
                           ) -> tuple[Callable[[bytes | None, bytes | None], tuple[str, str]],
                                      str] | None:
    """Kafka's DumpLogSegments parser of an internal topic's records, with what a record it
    cannot read is not: --offsets-decoder's (OffsetsMessageParser) before
    --transaction-log-decoder's (TransactionLogMessageParser), or None."""
    if opts.offsets_decoder:
        return format_offsets_record, "an offsets record"
    if opts.transaction_log_decoder:
        return format_record_key_and_value, "a transaction log record"
    return None


def _java_hex(data: bytes) -> str:
    """Kafka's hex of an assignment or user data: "%X" of the bytes as one unsigned number
    (no leading zeros; "" for no bytes)."""
    return f"{int.from_bytes(data, 'big'):X}" if data else ""


def _member_assignment(member: gm.MemberRecord, protocol_type: str) -> str:
    if protocol_type == CONSUMER_PROTOCOL_TYPE:
        try:
            assignment = decode_assignment(member.assignment)
        except (SchemaError, ValueError):
            return f"{member.member_id}={_java_hex(member.assignment)}"
        partitions = "[" + ", ".join(str(tp) for tp in assignment.partitions) + "]"
        user_data = _java_hex(assignment.user_data or b"")
        return f"{member.member_id}={partitions}" + (f":{user_data}" if user_data else "")
    return f"{member.member_id}={_java_hex(member.assignment)}"


def format_offsets_record(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """(key string, payload string) of a `__consumer_offsets` record, as Kafka's
    GroupMetadataManager.formatRecordKeyAndValue gives them to DumpLogSegments, with the fields
    it does not print appended (see the module docstring). A record without a key, or with a
    key or value of no known version, is a SchemaError."""
    if key is None:
        raise SchemaError("the record has no key")
    record_key = gm.read_message_key(key)
    if isinstance(record_key, gm.OffsetKey):
        key_string = (f"offset_commit::group={record_key.group},"
                      f"partition={record_key.topic}-{record_key.partition}")
        om = gm.read_offset_value(value)
        if om is None:
            return key_string, "<DELETE>"
        payload = f"offset={om.offset}" + (f",metadata={om.metadata}" if om.metadata else "")
        if om.leader_epoch != gm.NO_LEADER_EPOCH:
            payload += f",leaderEpoch={om.leader_epoch}"
        payload += f",commitTimestamp={om.commit_timestamp}"
        if om.expire_timestamp is not None:
            payload += f",expireTimestamp={om.expire_timestamp}"
        return key_string, payload
    key_string = f"group_metadata::group={record_key.group}"
    group = gm.read_group_value(value)
    if group is None:
        return key_string, "<DELETE>"
    protocol_type = group.protocol_type or ""
    assignment = ",".join(_member_assignment(m, protocol_type) for m in group.members)
    return key_string, json.dumps(
        {"protocolType": protocol_type, "protocol": group.protocol,
         "generationId": group.generation, "assignment": "{" + assignment + "}",
         "leader": group.leader}, separators=(",", ":"), ensure_ascii=False)


def control_record_text(r: rb.Record) -> str:
    """What Kafka prints after a control record's metadata: the end transaction marker, or the
    control type (a control batch's key and value are never printed as data)."""
    key = r.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    type_id = int.from_bytes(key[2:4], "big", signed=True)
    try:
        control_type = ControlRecordType(type_id)
    except ValueError:
        control_type = ControlRecordType.UNKNOWN
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        try:
            marker = EndTransactionMarker.from_key_value(r.key, r.value)
        except ValueError as exc:
            return f" endTxnMarker: corrupt ({exc})"
        return (f" endTxnMarker: {marker.control_type.name} "
                f"coordinatorEpoch: {marker.coordinator_epoch}")
    return f" controlType: {control_type.name}({type_id})"


def dump_log_segment(path: Path, opts: DumpOptions, report: DumpReport) -> Iterator[str]:
    """Batches (and records) of one segment file, from position 0 to the last whole batch."""
    data = path.read_bytes()
    yield f"Log starting offset: {base_offset_of(path)}"
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < rb.HEADER_SIZE:
            break  # not even a header: trailing bytes
        h = rb.read_header(data, pos)
        if h.batch_length < rb.MIN_BATCH_LENGTH or pos + h.size > end:
            break  # a size that runs past the end (truncated tail) or is nonsense
        if h.size > opts.max_message_size:
            report.other.append(
                f"Found a batch of {h.size} bytes at position {pos} of {path}, larger than "
                f"--max-message-size {opts.max_message_size}: stopped there")
            break
        try:
            rb.check_batch(data, pos, end)
            valid = True
        except (rb.CorruptRecordError, rb.InvalidRecordError):
            valid = False
            report.corrupt_batches += 1
        yield batch_line(h, pos, valid)
        if (opts.deep_iteration or opts.print_data_log or opts.transaction_log_decoder
                or opts.offsets_decoder) and h.magic == 2:
            try:
                for r in rb.decode_records(memoryview(data)[pos:pos + h.size]):
                    yield record_line(h, r, opts)
            except (rb.CorruptRecordError, ValueError) as exc:
                # ValueError also covers decompression failures of a damaged batch.
                yield f"| cannot read the records of the batch at position {pos}: {exc}"
                if valid:
                    report.corrupt_batches += 1
        pos += h.size
    if pos < end:
        report.invalid_trailing_bytes[str(path)] = end - pos
        yield f"Found {end - pos} invalid bytes at the end of {path.name}"


def _log_headers(log_path: Path) -> list[rb.BatchHeader]:
    """Headers of the readable batches of a segment (no CRC check: index verification)."""
    return list(rb.iter_headers(log_path.read_bytes()))


# -- .index -----------------------------------------------------------------------------------


def check_offset_entry(headers_by_position: dict[int, int], headers: list[rb.BatchHeader],
                       offset: int, position: int) -> int | None:
    """None when index entry (offset, position) is right, else the log offset found there
    (-1: no batch starts at that position). Right means a batch starts at `position`, and the
    message set appended there ends with a batch whose last offset is `offset` (odradek indexes
    whole appends, Kafka per batch: both pass)."""
    i = headers_by_position.get(position)
    if i is None:
        return -1
    first = headers[i]
    if first.base_offset > offset:
        return first.last_offset
    for h in headers[i:]:
        if h.last_offset >= offset:
            return None if h.last_offset == offset else first.last_offset
    return first.last_offset


def _index_with_log(path: Path) -> tuple[int, bytes, list[rb.BatchHeader] | None]:
    """An index file's base offset and bytes, and the batch headers of its log segment (None
    when there is no segment next to it to verify the entries against)."""
    log_path = path.with_suffix(".log")
    return (base_offset_of(path), path.read_bytes(),
            _log_headers(log_path) if log_path.exists() else None)


def dump_offset_index(path: Path, opts: DumpOptions, report: DumpReport) -> Iterator[str]:
    base, data, headers = _index_with_log(path)
    if headers is None:
        yield f"No log segment {path.with_suffix('.log').name} next to {path.name}: entries are " \
              "not verified"
    by_position = {h.position: i for i, h in enumerate(headers or [])}
    if len(data) % _OFFSET_ENTRY.size:
        report.other.append(f"Index file {path} has {len(data) % _OFFSET_ENTRY.size} bytes "
                            "after its last whole entry")
    for i, (rel, position) in enumerate(_OFFSET_ENTRY.iter_unpack(
            data[:len(data) - len(data) % _OFFSET_ENTRY.size])):
        offset = base + rel
        if i > 0 and rel == 0:
            break  # a preallocated, zero-filled tail (Kafka stops there too)
        if headers is not None:
            found = check_offset_entry(by_position, headers, offset, position)
            if found is not None:
                report.index_mismatches.setdefault(str(path), []).append((offset, found))
        if not opts.verify_index_only:
            yield f"offset: {offset} position: {position}"


def dump_time_index(path: Path, opts: DumpOptions, report: DumpReport) -> Iterator[str]:
    base, data, headers = _index_with_log(path)
    if headers is None:
        yield f"No log segment {path.with_suffix('.log').name} next to {path.name}: entries are " \
              "not verified"
    by_last = {h.last_offset: h for h in headers or []}
    if len(data) % _TIME_ENTRY.size:
        report.other.append(f"Time index file {path} has {len(data) % _TIME_ENTRY.size} bytes "
                            "after its last whole entry")
    prev_ts = None
    for i, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(
            data[:len(data) - len(data) % _TIME_ENTRY.size])):
        offset = base + rel
        if i > 0 and ts == 0 and rel == 0:
            break
        if headers is not None:
            h = by_last.get(offset)
            if h is None:
                after = [x.last_offset for x in headers if x.last_offset > offset]
                report.offsets_not_found.setdefault(str(path), []).append(
                    (offset, after[0] if after else -1))
            elif h.max_timestamp != ts:
                report.timestamp_mismatches.setdefault(str(path), []).append(
                    (ts, h.max_timestamp))
        if prev_ts is not None and ts <= prev_ts:
            report.out_of_order_timestamps.setdefault(str(path), []).append((ts, prev_ts))
        prev_ts = ts
        if not opts.verify_index_only:
            yield f"timestamp: {ts} offset: {offset}"


def sanity_check_index(path: Path, report: DumpReport) -> Iterator[str]:
    """The broker's own check (the one that makes it rebuild an index on start)."""
    base = base_offset_of(path)
    try:
        if path.suffix == ".index":
            log_path = path.with_suffix(".log")
            size = log_path.stat().st_size if log_path.exists() else None
            OffsetIndex(path, base).sanity_check(size)
        else:
            TimeIndex(path, base).sanity_check()
    except CorruptIndexError as exc:
        report.other.append(f"{path} failed sanity check: {exc}")
        yield f"{path} failed sanity check: {exc}"
        return
    yield f"{path} passed sanity check."


# -- producer snapshots and leader epoch checkpoints -------------------------------------------


def dump_producer_snapshot(path: Path, report: DumpReport) -> Iterator[str]:
    try:
        entries = ProducerStateManager.parse_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        report.other.append(f"{path}: {exc}")
        yield f"Corrupt producer snapshot {path.name}: {exc}"
        return
    for e in entries:
        b = e.batches[-1] if e.batches else None
        yield (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
               f"coordinatorEpoch: {e.coordinator_epoch} "
               f"currentTxnFirstOffset: {e.current_txn_first_offset} "
               f"lastTimestamp: {e.last_timestamp} "
               f"firstSequence: {b.first_seq if b else -1} "
               f"lastSequence: {b.last_seq if b else -1} "
               f"lastOffset: {b.last_offset if b else -1} "
               f"offsetDelta: {b.offset_delta if b else 0} timestamp: {b.timestamp if b else -1}")


def dump_txn_index(path: Path, report: DumpReport) -> Iterator[str]:
    """A .txnindex file's aborted transactions (Kafka's dumpTxnIndex)."""
    data = path.read_bytes()
    whole = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, whole, ENTRY_SIZE):
        t = AbortedTxn.from_bytes(data, pos)
        yield (f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
               f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}")
    if whole < len(data):
        report.other.append(f"Transaction index file {path} has {len(data) - whole} bytes "
                            "after its last whole entry")


def dump_leader_epoch_checkpoint(path: Path, report: DumpReport) -> Iterator[str]:
    try:
        entries = LeaderEpochCheckpointFile(path).read()
    except CheckpointError as exc:
        report.other.append(str(exc))
        yield f"Unreadable leader epoch checkpoint: {exc}"
        return
    for epoch, offset in entries:
        yield f"epoch: {epoch} startOffset: {offset}"


# -- driver -----------------------------------------------------------------------------------


def dump_file(path: Path, opts: DumpOptions, report: DumpReport) -> Iterator[str]:
    """The lines for one file of any supported kind."""
    yield f"Dumping {path}"
    name = path.name
    if not path.is_file():
        report.unreadable_files.append(str(path))
        why = "is a directory (give the segment files)" if path.is_dir() else "no such file"
        yield f"Cannot read {path}: {why}"
        return
    try:
        if name.endswith(".log"):
            yield from dump_log_segment(path, opts, report)
        elif name.endswith((".index", ".timeindex")):
            if opts.index_sanity_check:
                yield from sanity_check_index(path, report)
            elif name.endswith(".index"):
                yield from dump_offset_index(path, opts, report)
            else:
                yield from dump_time_index(path, opts, report)
        elif name.endswith(".snapshot"):
            yield from dump_producer_snapshot(path, report)
        elif name.endswith(".txnindex"):
            yield from dump_txn_index(path, report)
        elif name == LEADER_EPOCH_CHECKPOINT:
            yield from dump_leader_epoch_checkpoint(path, report)
        else:
            yield f"Ignoring unknown file {path}"
    except (OSError, ValueError) as exc:
        report.unreadable_files.append(str(path))
        yield f"Cannot read {path}: {exc}"


def run(args: argparse.Namespace) -> int:
    return run_tool(lambda: _dump(args), refused=prefixed("dump-log"))


def _dump(args: argparse.Namespace) -> int:
    decoders = {}
    for flag in ("key_decoder_class", "value_decoder_class"):
        name = getattr(args, flag)
        if name not in DECODERS:
            raise ToolError(f"unknown --{flag.replace('_', '-')} {name!r} (choose from "
                            f"{', '.join(sorted(DECODERS))})", exit_code=2)
        decoders[flag] = DECODERS[name]
    if args.max_message_size <= 0:
        raise ToolError("--max-message-size must be positive", exit_code=2)
    opts = DumpOptions(
        print_data_log=args.print_data_log, deep_iteration=args.deep_iteration,
        index_sanity_check=args.index_sanity_check, verify_index_only=args.verify_index_only,
        max_message_size=args.max_message_size, key_decoder=decoders["key_decoder_class"],
        value_decoder=decoders["value_decoder_class"],
        transaction_log_decoder=args.transaction_log_decoder,
        offsets_decoder=args.offsets_decoder)
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    if not files:
        raise ToolError("--files names no file", exit_code=2)
    report = DumpReport()
    out = sys.stdout
    for f in files:
        for line in dump_file(Path(f), opts, report):
            out.write(line + "\n")
    out.flush()
    for line in report.error_lines():
        print(line, file=sys.stderr)
    if report.unreadable_files:
        return 2
    return 0 if report.clean else 1


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("dump-log", help="print log segments, indexes and snapshots "
                       "(Kafka's DumpLogSegments)")
    p.add_argument("--files", required=True,
                   help="comma-separated .log/.index/.timeindex/.snapshot/.txnindex/"
                        "leader-epoch-checkpoint files")
    p.add_argument("--print-data-log", action="store_true",
                   help="print every record with its key and payload")
    p.add_argument("--deep-iteration", action="store_true",
                   help="print every record (also those inside compressed batches)")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only check that each index is usable (the broker's startup check)")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check index entries against the log without printing them")
    p.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE,
                   help=f"the largest batch to read (default {DEFAULT_MAX_MESSAGE_SIZE})")
    p.add_argument("--key-decoder-class", default="string",
                   help="how to print keys: string (default) or hex")
    p.add_argument("--value-decoder-class", default="string",
                   help="how to print payloads: string (default) or hex")
    p.add_argument("--offsets-decoder", action="store_true",
                   help="if set, log data will be parsed as offset data from the "
                        "__consumer_offsets topic")
    p.add_argument("--transaction-log-decoder", action="store_true",
                   help="if set, log data will be parsed as transaction metadata from the "
                        "__transaction_state topic")
    p.set_defaults(func=run)
