"""Reading the job's output back — the Parquet files and the `page-counts` topic — and showing
the top pages per window. Reading is I/O; ranking, checking and formatting are pure."""

from __future__ import annotations

import datetime
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...client import Consumer, TopicPartition
from .events import WindowKey, iso_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True, order=True)
class WindowCount:
    window_start: int  # ms since the epoch
    window_end: int
    page: str
    count: int

    @property
    def key(self) -> WindowKey:
        return (self.window_start, self.page)

    @classmethod
    def from_value(cls, value: bytes | str) -> WindowCount:
        """A `page-counts` record value: {"window_start": ISO-8601, "window_end": ...,
        "page": ..., "count": n}."""
        d = json.loads(value)
        return cls(iso_to_ms(d["window_start"]), iso_to_ms(d["window_end"]), d["page"],
                   int(d["count"]))


def iso_to_ms(iso: str) -> int:
    """ms since the epoch of an ISO-8601 time (UTC when it names no zone); iso_ms's inverse."""
    dt = datetime.datetime.fromisoformat(iso)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return round(dt.timestamp() * 1000)


def read_parquet(spark: SparkSession, path: Path) -> list[WindowCount]:
    """Everything the Parquet sink committed (its _spark_metadata log decides which files
    count, so a failed batch's leftovers are not read)."""
    if not (path / "_spark_metadata").exists():
        return []
    rows = (spark.read.parquet(str(path))
            .selectExpr("unix_millis(window_start) AS s", "unix_millis(window_end) AS e",
                        "page", "count").collect())
    return sorted(WindowCount(r["s"], r["e"], r["page"], r["count"]) for r in rows)


def read_topic(bootstrap_servers: str, topic: str, timeout_s: float = 30.0
               ) -> list[WindowCount]:
    """Every record of `topic`, from the beginning of each partition to its end now, with
    odradek's own Consumer (independent of the Spark source), read_committed: with the
    exactly-once sink, records of aborted attempts are never counted."""
    c = Consumer({"bootstrap.servers": bootstrap_servers, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        tps = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
        ends = {tp: off for tp, off in c.end_offsets(tps, timeout_s).items() if off > 0}
        c.assign(list(ends))
        for tp in ends:
            c.seek_to_beginning(tp)
        out: list[WindowCount] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within {timeout_s:.0f} s")
            for r in c.poll(0.5):
                tp = TopicPartition(r.topic, r.partition)
                if tp in ends and r.offset < ends[tp]:
                    out.append(WindowCount.from_value(r.value))
            # By position, not by the last record's offset: a transaction's commit marker
            # (the exactly-once sink) takes the last offset and is never returned.
            for tp in [tp for tp in ends if c.position(tp) >= ends[tp]]:
                del ends[tp]
        return sorted(out)
    finally:
        c.close(autocommit=False)


def as_counts(rows: Iterable[WindowCount]) -> dict[WindowKey, int]:
    """(window start, page) -> count; a window written twice shows up as a ValueError."""
    out: dict[WindowKey, int] = {}
    for r in rows:
        if r.key in out:
            raise ValueError(f"window {iso_ms(r.window_start)} page {r.page} written twice "
                             f"({out[r.key]} and {r.count})")
        out[r.key] = r.count
    return out


def top_pages(counts: Mapping[WindowKey, int], n: int = 3) -> dict[int, list[tuple[str, int]]]:
    """Per window start, the `n` most viewed pages (ties by page name)."""
    per_window: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for (start, page), c in counts.items():
        per_window[start].append((page, c))
    return {s: sorted(v, key=lambda pc: (-pc[1], pc[0]))[:n]
            for s, v in sorted(per_window.items())}


def format_top(counts: Mapping[WindowKey, int], window_ms: int, n: int = 3,
               max_windows: int | None = None) -> str:
    """A text table: one line per window, its total views and its top `n` pages."""
    totals: dict[int, int] = defaultdict(int)
    for (start, _page), c in counts.items():
        totals[start] += c
    top = top_pages(counts, n)
    starts = list(top)
    shown: list[int | None] = list(starts)
    if max_windows is not None and len(starts) > max_windows:
        head = max_windows // 2
        shown = [*starts[:head], None, *starts[len(starts) - (max_windows - head):]]
    header = f"{'window (UTC)':<31} {'views':>7}  top pages"
    lines = [header, "-" * max(len(header), 80)]
    for s in shown:
        if s is None:
            lines.append(f"... {len(starts) - len(shown) + 1} more windows ...")
            continue
        pages = ", ".join(f"{p} {c}" for p, c in top[s])
        span = f"{iso_ms(s)[:16]}Z - {iso_ms(s + window_ms)[11:16]}Z"
        lines.append(f"{span:<31} {totals[s]:>7}  {pages}")
    return "\n".join(lines)


def compare(expected: Mapping[WindowKey, int], actual: Mapping[WindowKey, int]) -> list[str]:
    """Differences between two count tables, as readable lines (empty when equal)."""
    out = []
    for k in sorted(set(expected) | set(actual)):
        e, a = expected.get(k), actual.get(k)
        if e != a:
            out.append(f"window {iso_ms(k[0])} page {k[1]}: expected {e}, got {a}")
    return out
