"""`odradek dump-log` (Kafka's DumpLogSegments, S-6.6): batches and records of `.log` segments,
entries of `.index` and `.timeindex` files."""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

from ..protocol import records as rb


def dump_segment(path: Path, print_data: bool, out: list[str]) -> None:
    data = path.read_bytes()
    base = int(path.stem)
    out.append(f"Dumping {path}")
    out.append(f"Log starting offset: {base}")
    pos = 0
    while pos < len(data):
        try:
            h = rb.check_batch(data, pos, len(data))
            valid = True
        except (rb.CorruptRecordError, rb.InvalidRecordError) as exc:
            if len(data) - pos < rb.HEADER_SIZE:
                out.append(f"Found {len(data) - pos} trailing bytes at position {pos}: {exc}")
                break
            h = rb.read_header(data, pos)
            valid = False
            if h.size <= 0 or pos + h.size > len(data):
                out.append(f"Found an unreadable batch at position {pos}: {exc}")
                break
        out.append(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} "
            f"isControl: {str(h.is_control).lower()} position: {pos} "
            f"CreateTime: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {h.compression.name.lower()} crc: {h.crc} "
            f"isvalid: {str(valid).lower()}")
        if print_data and valid:
            for r in rb.decode_records(memoryview(data)[pos:pos + h.size]):
                keys = ",".join(k for k, _ in r.headers)
                seq = (h.base_sequence + (r.offset - h.base_offset)
                       if h.base_sequence >= 0 else -1)
                out.append(
                    f"| offset: {r.offset} CreateTime: {r.timestamp} "
                    f"keySize: {-1 if r.key is None else len(r.key)} "
                    f"valueSize: {-1 if r.value is None else len(r.value)} "
                    f"sequence: {seq} "
                    f"headerKeys: [{keys}] "
                    f"key: {_show(r.key)} payload: {_show(r.value)}")
        pos += h.size


def _show(b: bytes | None) -> str:
    if b is None:
        return "null"
    return b.decode("utf-8", "replace")


def dump_index(path: Path, out: list[str]) -> None:
    data = path.read_bytes()
    base = int(path.stem)
    out.append(f"Dumping {path}")
    if path.suffix == ".index":
        for i in range(0, len(data) - len(data) % 8, 8):
            rel, position = struct.unpack_from(">II", data, i)
            if i and rel == 0 and position == 0:
                break
            out.append(f"offset: {base + rel} position: {position}")
    else:
        for i in range(0, len(data) - len(data) % 12, 12):
            ts, rel = struct.unpack_from(">qI", data, i)
            if i and ts == 0 and rel == 0:
                break
            out.append(f"timestamp: {ts} offset: {base + rel}")


def run(args: argparse.Namespace) -> int:
    out: list[str] = []
    for f in args.files.split(","):
        path = Path(f.strip())
        if path.suffix == ".log":
            dump_segment(path, args.print_data_log, out)
        elif path.suffix in (".index", ".timeindex"):
            dump_index(path, out)
        else:
            out.append(f"Ignoring unknown file {path}")
    print("\n".join(out))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dump-log", help="print log segments and indexes (DumpLogSegments)")
    p.add_argument("--files", required=True, help="comma-separated .log/.index/.timeindex files")
    p.add_argument("--print-data-log", action="store_true", help="print every record")
    p.set_defaults(func=run)
