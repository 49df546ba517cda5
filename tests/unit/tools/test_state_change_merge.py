"""state-change-log merge (S-6.5, Kafka's StateChangeLogMerger): line parsing, the time / topic /
partition filters, file discovery, and the k-way merge (hypothesis: the merged output is sorted
by time and is exactly the kept input lines, each once)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cli import main
from odradek.tools.command import ToolError
from odradek.tools.state_change_log import (
    Criteria,
    find_logs,
    keep,
    line_time,
    make_criteria,
    merge,
    parse_time,
    select,
)

CTRL = ("[2026-11-21 23:38:44,309] INFO [Controller id=0 epoch=1] Changed partition t-0 state "
        "from NewPartition to OnlinePartition with leader=0 leader_epoch=0 isr=[0,1,2] "
        "(state.change.logger)")
BROKER = ("[2026-11-21 23:38:44,325] INFO [Broker id=2 epoch=1] Changed partition my-topic-12 "
          "state from Follower to Leader with leader=2 leader_epoch=1 isr=[2,0] "
          "(LeaderAndIsr correlationId 6 from controller 0) (state.change.logger)")
NO_PARTITION = ("[2026-11-21 23:38:45,000] INFO [Controller id=0 epoch=2] Resigned "
                "(state.change.logger)")


def test_line_time_and_non_lines() -> None:
    assert line_time(CTRL) == "2026-11-21 23:38:44,309"
    assert line_time(BROKER) == "2026-11-21 23:38:44,325"
    assert line_time("\tat kafka.controller.KafkaController.foo(KafkaController.scala:1)") is None
    assert line_time("") is None


def test_parse_time_canonical_and_errors() -> None:
    assert parse_time(" 2026-11-21 23:38:44,309 ") == "2026-11-21 23:38:44,309"
    assert parse_time("2026-11-21 23:38:44,5") == "2026-11-21 23:38:44,500"
    for bad in ("2026-11-21", "2026-11-21T23:38:44", "yesterday", "2026-13-01 00:00:00,000"):
        with pytest.raises(ToolError, match="yyyy-MM-dd HH:mm:ss,SSS"):
            parse_time(bad)


def test_filters_time_topic_partitions() -> None:
    everything = Criteria()
    assert keep(CTRL, line_time(CTRL) or "", everything)
    c = make_criteria(start="2026-11-21 23:38:44,310")
    assert not keep(CTRL, "2026-11-21 23:38:44,309", c)
    assert keep(BROKER, "2026-11-21 23:38:44,325", c)
    c = make_criteria(end="2026-11-21 23:38:44,309")  # both ends inclusive
    assert keep(CTRL, "2026-11-21 23:38:44,309", c)
    assert not keep(BROKER, "2026-11-21 23:38:44,325", c)
    # topic names with dashes: the partition is the last number
    t = make_criteria(topic="my-topic")
    assert keep(BROKER, line_time(BROKER) or "", t) and not keep(CTRL, line_time(CTRL) or "", t)
    assert keep(BROKER, "2026-11-21 23:38:44,325", make_criteria(topic="my-topic",
                                                                  partitions="3,12"))
    assert not keep(BROKER, "2026-11-21 23:38:44,325", make_criteria(topic="my-topic",
                                                                      partitions="0"))
    # a line naming no partition: kept without --topic only (as Kafka's merger)
    assert keep(NO_PARTITION, line_time(NO_PARTITION) or "", everything)
    assert not keep(NO_PARTITION, line_time(NO_PARTITION) or "", t)


def test_bad_criteria() -> None:
    with pytest.raises(ToolError, match="--partitions needs --topic"):
        make_criteria(partitions="0")
    with pytest.raises(ToolError, match="comma-separated partition numbers"):
        make_criteria(topic="t", partitions="a,b")
    with pytest.raises(ToolError, match="after --end-time"):
        make_criteria(start="2026-01-02 00:00:00,000", end="2026-01-01 00:00:00,000")


def test_select_skips_stack_traces_and_strips_newlines() -> None:
    got = list(select([CTRL + "\n", "java.lang.IllegalStateException: x\n", BROKER + "\r\n"],
                      Criteria()))
    assert got == [("2026-11-21 23:38:44,309", CTRL), ("2026-11-21 23:38:44,325", BROKER)]


def _line(ms: int, broker: int, partition: int, n: int) -> str:
    s, ms = divmod(ms, 1000)
    m, s = divmod(s, 60)
    return (f"[2026-11-21 23:{m:02d}:{s:02d},{ms:03d}] INFO [Broker id={broker} epoch=1] "
            f"Changed partition t-{partition} state from Follower to Leader with leader="
            f"{broker} leader_epoch={n} isr=[{broker}] (state.change.logger)")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 3)), max_size=25),
                min_size=1, max_size=5))
def test_merge_is_sorted_and_a_permutation_of_the_inputs(
        files: list[list[tuple[int, int]]]) -> None:
    sources = []
    for b, entries in enumerate(files):
        lines = [_line(ms, b, p, n) for n, (ms, p) in enumerate(sorted(entries))]
        sources.append((f"broker-{b}/state-change.log", lines))
    out = list(merge(sources, Criteria()))
    assert Counter(out) == Counter(f"{label}: {x}" for label, lines in sources for x in lines)
    times = [line_time(x.split(": ", 1)[1]) or "" for x in out]
    assert times == sorted(times)
    # ties: earlier source first, and each file's own order kept
    keyed = [(t, int(x.split("/")[0].split("-")[1])) for t, x in zip(times, out, strict=True)]
    assert keyed == sorted(keyed)
    # filtered merge = merge, then filter
    c = make_criteria(topic="t", partitions="1,2", start="2026-11-21 23:00:01,000")
    filtered = list(merge(sources, c))
    assert filtered == [x for x in out if keep(x.split(": ", 1)[1],
                                               line_time(x.split(": ", 1)[1]) or "", c)]


def test_merge_reads_lazily() -> None:
    consumed = []

    def lines(b: int):  # type: ignore[no-untyped-def]
        for i in range(1000):
            consumed.append(b)
            yield _line(i, b, 0, i)

    it = merge([("a", lines(0)), ("b", lines(1))], Criteria())
    first = [next(it) for _ in range(4)]
    assert len(first) == 4 and len(consumed) < 10


def test_find_logs_dirs_files_and_rotation(tmp_path: Path) -> None:
    for b in (0, 1):
        d = tmp_path / f"broker-{b}"
        d.mkdir()
        (d / "state-change.log").write_text(_line(b, b, 0, 0) + "\n")
        (d / "server.log").write_text("noise\n")
    (tmp_path / "broker-1" / "state-change.log.1").write_text(_line(0, 1, 0, 0) + "\n")
    got = find_logs([str(tmp_path)])
    assert [p.relative_to(tmp_path).as_posix() for p in got] == [
        "broker-0/state-change.log", "broker-1/state-change.log.1", "broker-1/state-change.log"]
    single = tmp_path / "broker-0" / "state-change.log"
    assert find_logs([str(single), str(tmp_path / "broker-0")]) == [single]
    with pytest.raises(ToolError, match="neither a file nor a directory"):
        find_logs([str(tmp_path / "nope")])
    with pytest.raises(ToolError, match="no state change log files"):
        find_logs([str(tmp_path)], r"kafka\.log")
    with pytest.raises(ToolError, match="not a valid regex"):
        find_logs([str(tmp_path)], "(")


def test_cli_merges_broker_logs_in_time_order_and_filters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for b in (0, 1):
        d = tmp_path / f"broker-{b}"
        d.mkdir()
        (d / "state-change.log").write_text(
            "".join(_line(ms, b, ms % 2, 0) + "\n" for ms in range(b, 10, 2)))
    assert main(["state-change-log", "--logs", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 10
    assert [int(x.split(",")[1][:3]) for x in out] == list(range(10))
    assert out[0].startswith("broker-0/state-change.log: [2026-11-21 23:00:00,000] INFO")
    assert main(["state-change-log", "--logs", str(tmp_path), "--topic", "t",
                 "--partitions", "1", "--end-time", "2026-11-21 23:00:00,005"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [int(x.split(",")[1][:3]) for x in out] == [1, 3, 5]
    assert main(["state-change-log", "--logs-regex", f"{tmp_path}/broker-1/state-change.*"]
                ) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert main(["state-change-log", "--logs", str(tmp_path), "--start-time", "noon"]) == 2
    assert "yyyy-MM-dd HH:mm:ss,SSS" in capsys.readouterr().err
    assert main(["state-change-log", "--logs", str(tmp_path), "--output", str(tmp_path / "o")]
                ) == 0
    assert len((tmp_path / "o" / "merged-state-change.log").read_text().splitlines()) == 10
