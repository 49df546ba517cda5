"""Helpers for the log dir failure tests (KIP-112): reading a partition's records off disk the
way a restarted broker would (log recovery on a copy), produce with error codes."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from odradek.protocol.records import decode_records, iter_headers
from odradek.storage.log import Log
from tests.integration.broker_harness import batch, produce, req_module
from tests.wire import WireClient


def records_of(log: Log) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of a loaded log, in order."""
    out: list[tuple[int, bytes]] = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        for h in iter_headers(data):
            if h.is_control:
                continue
            for r in decode_records(data[h.position:h.position + h.size]):
                out.append((r.offset, r.value or b""))
    return out


def recovered_records(partition_dir: Path) -> list[tuple[int, bytes]]:
    """What log recovery (an unclean start) makes of a partition dir: a copy is opened. Prints
    how many bytes of the segments recovery cut (a torn tail)."""
    with tempfile.TemporaryDirectory(prefix="odradek-recover-") as tmp:
        copy = Path(tmp) / partition_dir.name
        shutil.copytree(partition_dir, copy)
        before = sum(p.stat().st_size for p in copy.glob("*.log"))
        log = Log.open(copy, had_clean_shutdown=False)
        try:
            after = sum(s.size for s in log.segments)
            print(f"{partition_dir.name}: recovery kept {after} of {before} bytes")
            return records_of(log)
        finally:
            log.close()


async def produce_values(client: WireClient, topic: str, partition: int, values: list[bytes]
                         ) -> tuple[int, int]:
    """acks=all produce of one batch: (error code, base offset)."""
    r = await client.request(produce(topic, partition, batch(values), acks=-1), timeout=30)
    p = r.responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset)


def describe_log_dirs(version: int = 2) -> Any:
    m = req_module(35, version)
    return m.DescribeLogDirsRequest(topics=None)
