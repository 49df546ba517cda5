"""What the replicas' logs say after a clean stop, read from their segment files: each CRC-valid
batch in offset order (`valid_batches`), every replica byte-for-byte that of the partition's
first replica below the highest checkpointed high watermark, which covers every acknowledged
offset (`compare_replicas`, one `ReplicaCheck` a partition), and each replica's records for the
consistency checker's replica row (`replica_records`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...protocol import records as rb
from ...storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from ..environment.processes import ProcessCluster


@dataclass
class ReplicaCheck:
    topic: str
    partition: int
    high_watermarks: dict[int, int]  # broker -> checkpointed HW
    compared_below: int
    problem: str | None = None


def valid_batches(partition_dir: Path) -> list[tuple[int, int, bytes]]:
    """(base offset, last offset, bytes) of each CRC-valid batch of a replica, in offset order
    across its segment files (a replica's segment boundaries need not match another's)."""
    out: list[tuple[int, int, bytes]] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for h in rb.scan_valid_prefix(data):
            out.append((h.base_offset, h.last_offset, data[h.position:h.position + h.size]))
    return out


def compare_replicas(cluster: ProcessCluster, topic: str, assignment: dict[int, list[int]],
                     acked_end: dict[int, int]) -> list[ReplicaCheck]:
    """After a clean stop: every replica's batches below the highest checkpointed HW of the
    partition are byte-for-byte those of the partition's first replica, and that HW covers
    every acknowledged offset (`acked_end`: partition -> last acknowledged offset + 1)."""
    hws = {b: OffsetCheckpointFile(bp.log_dir / REPLICATION_OFFSET_CHECKPOINT).read()
           for b, bp in cluster.brokers.items()}
    checks = []
    for p, replicas in sorted(assignment.items()):
        high = {b: hws[b].get((topic, p), -1) for b in replicas}
        hw = max(high.values())
        check = ReplicaCheck(topic, p, high, hw)
        logs = {b: [x for x in valid_batches(cluster.brokers[b].log_dir / f"{topic}-{p}")
                    if x[0] < hw] for b in replicas}
        problems = [_first_difference(logs, hw)]
        if hw < acked_end.get(p, 0):
            problems.append(f"the HW {hw} is below acknowledged offset {acked_end[p] - 1}")
        check.problem = "; ".join(x for x in problems if x) or None
        checks.append(check)
    return checks


def _first_difference(logs: dict[int, list[tuple[int, int, bytes]]], hw: int) -> str | None:
    problems = []
    for b, batches in logs.items():
        end = batches[-1][1] + 1 if batches else 0
        if end < hw:
            problems.append(f"broker {b}'s log ends at {end} below the HW {hw}")
    ref_id, ref = next(iter(logs.items()))
    for b, batches in logs.items():
        for mine, theirs in zip(ref, batches, strict=False):
            if mine != theirs:
                problems.append(f"brokers {ref_id} and {b} differ at offset "
                                f"{min(mine[0], theirs[0])}")
                break
    return "; ".join(problems) or None


def replica_records(cluster: ProcessCluster, topic: str, assignment: dict[int, list[int]]
                    ) -> dict[int, dict[int, list[tuple[int, str | None]]]]:
    """Each replica's records (offset, value) from its segment files (after a clean stop),
    for the checker's replica row; control records and unreadable batches left out."""
    out: dict[int, dict[int, list[tuple[int, str | None]]]] = {}
    for p, replicas in sorted(assignment.items()):
        out[p] = {}
        for b in replicas:
            entries: list[tuple[int, str | None]] = []
            for _base, _last, data in valid_batches(cluster.brokers[b].log_dir / f"{topic}-{p}"):
                if rb.read_header(data).is_control:
                    continue
                try:
                    records = rb.decode_records(data)
                except ValueError:
                    continue
                entries.extend((r.offset, r.value.decode("utf-8", "replace")
                                if r.value is not None else None) for r in records)
            out[p][b] = entries
    return out
