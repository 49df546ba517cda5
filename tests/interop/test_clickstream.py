"""The clickstream example end to end (S-9.2, over the source of S-9.1): a small fixed input of
page views in a real broker process, the Structured Streaming job on the session's local Spark,
and its two outputs — Parquet and the `page-counts` topic — checked against counts written out
by hand.

Independent of micro-batch timing: the input arrives in phases, and each phase is one
availableNow run of the job (which stops when it has processed what the topic held and
finalized what the watermark allows). Between runs the job restarts from its checkpoints, so a
source that lost or repeated records across restarts would show up in the counts too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from odradek.client import Consumer, TopicPartition
from odradek.examples.clickstream import generator, job, report
from odradek.examples.clickstream.events import PageView, expected_output, heartbeat

from .conftest import BrokerProcess, unique_topic

pytestmark = pytest.mark.interop

M = 60_000
WINDOW, WATERMARK = "1 minute", "5 minutes"


def _t0() -> int:
    """A minute-aligned event-time origin an hour ago: recent enough that the broker's
    retention (retention.ms, 7 days) keeps the records, aligned so windows start at T0."""
    now = int(time.time() * 1000) - 3600_000
    return now - now % M


T0 = _t0()


def pv(page: str, at_ms: int, user: str) -> PageView:
    return PageView(user, f"{user}-s1", page, "/", T0 + at_ms)


# Three pages in four one-minute windows (offsets from T0 in ms; users spread the events over
# the source's partitions).
PHASES: list[list[PageView]] = [
    [  # 1: windows 0:00, 0:01, 0:02 (watermark after it: 2:50 - 5:00, below T0)
        pv("/", 1_000, "u1"), pv("/", 5_000, "u2"), pv("/search", 9_000, "u3"),
        pv("/", 20_000, "u4"), pv("/search", 40_000, "u1"), pv("/cart", 59_999, "u2"),
        pv("/", 60_000, "u3"), pv("/search", 61_000, "u4"), pv("/search", 90_000, "u1"),
        pv("/search", 119_000, "u2"),
        pv("/cart", 120_000, "u3"), pv("/", 130_000, "u4"), pv("/cart", 150_000, "u1"),
        pv("/", 170_000, "u2"),
    ],
    [  # 2: out of order but in time (its window 0:00 is still open): counted; the heartbeat
       # moves the watermark to 3:30, which finalizes windows 0:00 - 0:02
        pv("/cart", 50_000, "u3"), heartbeat(T0 + 8 * M + 30_000),
    ],
    [  # 3: one view too late (window 0:00 was finalized: dropped), one older than the
       # watermark in a window still open (3:00 - 4:00: counted); watermark -> 5:00
        pv("/", 30_000, "late"), pv("/", 3 * M + 10_000, "u4"), heartbeat(T0 + 10 * M),
    ],
]

EXPECTED: dict[tuple[int, str], int] = {
    (T0, "/"): 3, (T0, "/search"): 2, (T0, "/cart"): 2,
    (T0 + M, "/"): 1, (T0 + M, "/search"): 3,
    (T0 + 2 * M, "/"): 2, (T0 + 2 * M, "/cart"): 2,
    (T0 + 3 * M, "/"): 1,
}


def test_the_fixed_input_and_the_reference_agree() -> None:
    """The hand-written counts are what append mode with this watermark must emit."""
    ref = expected_output(PHASES, M, 5 * M)
    assert ref.emitted == EXPECTED
    assert [e.user_id for e in ref.dropped] == ["late"]
    assert ref.open_windows == {}


def _sink_records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False})
    try:
        tp = TopicPartition(topic, 0)
        end = c.end_offsets([tp], 10)[tp]
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(out) < end and time.monotonic() < deadline:
            out += [(r.key, r.value) for r in c.poll(0.5)]
        return out
    finally:
        c.close(autocommit=False)


def test_clickstream_counts_are_right_on_a_small_fixed_input(
        spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    assert broker.bootstrap is not None
    bootstrap = broker.bootstrap
    src, sink = unique_topic("page-views"), unique_topic("page-counts")
    generator.ensure_topics(bootstrap, {src: 3, sink: 1})
    cfg = job.JobConfig(bootstrap_servers=bootstrap, output_dir=tmp_path / "out",
                        source_topic=src, sink_topic=sink, window=WINDOW, watermark=WATERMARK)

    for i, phase in enumerate(PHASES, 1):
        assert generator.produce(bootstrap, src, phase) == len(phase)
        job.run_available_now(spark, cfg, timeout_s=240)
        if i == 1:  # nothing is final yet: the watermark is still below T0
            assert report.read_parquet(spark, cfg.parquet_dir) == []
            assert report.read_topic(bootstrap, sink) == []

    parquet = report.read_parquet(spark, cfg.parquet_dir)
    assert report.compare(EXPECTED, report.as_counts(parquet)) == []
    assert all(r.window_end == r.window_start + M for r in parquet)

    records = _sink_records(bootstrap, sink)
    from_topic = [report.WindowCount.from_value(v) for _k, v in records if v is not None]
    assert len(from_topic) == len(records)
    assert report.compare(EXPECTED, report.as_counts(from_topic)) == []  # each window once
    assert [k for k, _v in records] == [r.page.encode() for r in from_topic]
    assert all(r.window_end == r.window_start + M for r in from_topic)
