"""The consistency checker: each guarantee, when Kafka promises it, and property-based
histories with injected anomalies (the checker finds exactly them; clean histories pass)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.chaos.checker.consistency import Guarantees, check, check_copy, through_pipeline
from odradek.chaos.checker.history import History
from odradek.chaos.checker.report import checker_svg, per_second
from odradek.common.fault_log import FaultEvent

SAFE = Guarantees(acks="all", min_insync_replicas=2, unclean_leader_election=False,
                  idempotent=True)
ACKS1 = Guarantees(acks="1", min_insync_replicas=1)


def _acked(h: History, process: str, value: str, partition: int, offset: int) -> None:
    h.ok(h.invoke(process, "send", value, partition=partition), offset=offset)


# -- Guarantees ---------------------------------------------------------------------------------


def test_what_kafka_promises_per_setting() -> None:
    assert SAFE.no_loss and SAFE.no_truncated_reads and SAFE.order and SAFE.no_duplicates
    assert not ACKS1.no_loss and ACKS1.no_truncated_reads
    assert not ACKS1.order and not ACKS1.no_duplicates
    assert not Guarantees(acks="-1", min_insync_replicas=1).no_loss
    assert Guarantees(acks="-1", min_insync_replicas=2).acks == "all"
    assert not Guarantees(acks="all", min_insync_replicas=2,
                          unclean_leader_election=True).no_loss
    assert not Guarantees(unclean_leader_election=True).no_truncated_reads
    assert Guarantees(max_in_flight=1).order
    assert Guarantees(transactional=True).no_duplicates
    with pytest.raises(ValueError):
        Guarantees(acks="2")


def test_from_configs_uses_kafka_names_and_defaults() -> None:
    g = Guarantees.from_configs({"min.insync.replicas": "2"},
                                {"acks": "all", "enable.idempotence": "true"})
    assert g == Guarantees("all", 2, False, True, False, 5)
    d = Guarantees.from_configs()
    assert (d.acks, d.min_insync_replicas, d.idempotent) == ("1", 1, False)
    t = Guarantees.from_configs({"unclean.leader.election.enable": "true"},
                                {"transactional.id": "tx-1", "acks": "all"})
    assert t.transactional and t.idempotent and t.unclean_leader_election


# -- each check -----------------------------------------------------------------------------


def test_a_lost_acked_write_fails_when_promised_and_is_expected_with_acks_1() -> None:
    h = History()
    _acked(h, "p0", "a", 0, 0)
    _acked(h, "p0", "b", 0, 1)
    final = {0: [(0, "a")]}
    safe = check(h, SAFE, final)
    assert (safe.row("lost").observed, safe.row("lost").verdict) == (1, "FAIL")
    assert not safe.ok and [o.value for o in safe.lost] == ["b"]
    assert safe.row("lost").expected and safe.row("lost").promised
    loose = check(h, ACKS1, final)
    assert (loose.row("lost").observed, loose.row("lost").verdict) == (1, "expected")
    assert loose.ok


def test_records_lost_by_kafkas_design_are_expected_not_failed() -> None:
    """`lost_by_design`: offsets [1, 3) of partition 0 were lost by a crash of the last ISR
    member (KIP-966's case); a loss or a truncated read outside them still fails."""
    h = History()
    for off, v in enumerate("abcd"):
        _acked(h, "p0", v, 0, off)
    h.read("c0", 0, 1, "b")
    final = {0: [(0, "a"), (1, "x"), (3, "d")]}
    report = check(h, SAFE, final, lost_by_design={0: [(1, 3)]})
    for key in ("lost", "truncated-reads"):
        row = report.row(key)
        assert (row.observed, row.verdict) == ({"lost": 2}.get(key, 1), "expected"), row
        assert "lost by Kafka's design" in row.why
    assert report.ok
    failing = check(h, SAFE, final, lost_by_design={0: [(2, 3)]})
    assert failing.row("lost").verdict == "FAIL"
    assert failing.row("truncated-reads").verdict == "FAIL"


def test_unknown_and_failed_writes_are_never_lost() -> None:
    h = History()
    _acked(h, "p0", "a", 0, 0)
    h.info(h.invoke("p0", "send", "b", partition=0), error="timeout")
    h.fail(h.invoke("p0", "send", "c", partition=0), error="NOT_ENOUGH_REPLICAS")
    h.invoke("p0", "send", "d", partition=0)  # never completed
    report = check(h, SAFE, {0: [(0, "a"), (1, "d")]})
    assert report.ok
    assert report.row("lost").observed == 0
    unknown = report.row("unknown")
    assert (unknown.observed, unknown.verdict) == (2, "info")
    assert unknown.examples[0] == "1 in the final logs, 1 not"


def test_reads_of_truncated_records() -> None:
    h = History()
    _acked(h, "p0", "a", 0, 0)
    h.read("c0", 0, 0, "a")
    h.read("c0", 0, 1, "x")  # the final log has "y" at 1: x was truncated and replaced
    h.read("c0", 0, 2, "z")  # beyond the final log's end
    report = check(h, SAFE, {0: [(0, "a"), (1, "y")]})
    row = report.row("truncated-reads")
    assert (row.checked, row.observed, row.verdict) == (3, 2, "FAIL")
    unclean = check(h, Guarantees(unclean_leader_election=True), {0: [(0, "a"), (1, "y")]})
    assert unclean.row("truncated-reads").verdict == "expected"


def test_reads_below_the_log_start_are_not_checked() -> None:
    h = History()
    h.read("c0", 0, 3, "old")
    row = check(h, SAFE, {0: [(10, "new")]}).row("truncated-reads")
    assert (row.checked, row.observed, row.verdict) == (0, 0, "skipped")


def test_per_producer_order() -> None:
    h = History()
    a = h.invoke("p0", "send", "a", partition=0)
    b = h.invoke("p0", "send", "b", partition=0)
    h.ok(b, offset=0)  # b sent after a but written before it
    h.ok(a, offset=1)
    _acked(h, "p1", "c", 0, 2)  # another producer: its own order
    final = {0: [(0, "b"), (1, "a"), (2, "c")]}
    assert check(h, SAFE, final).row("order").verdict == "FAIL"
    assert check(h, ACKS1, final).row("order").verdict == "expected"
    assert check(h, Guarantees(max_in_flight=1), final).row("order").observed == 1


def test_duplicates_fail_only_with_idempotence() -> None:
    h = History()
    _acked(h, "p0", "a", 0, 1)
    final = {0: [(0, "a"), (1, "a")]}
    assert check(h, SAFE, final).row("duplicates").verdict == "FAIL"
    assert check(h, ACKS1, final).row("duplicates").verdict == "expected"
    across = check(h, SAFE, {0: [(0, "a")], 1: [(0, "a")]}).row("duplicates")
    assert across.observed == 1


def test_replicas_below_the_high_watermark() -> None:
    h = History()
    same = {0: {1: [(0, "a"), (1, "b"), (2, "c")], 2: [(0, "a"), (1, "b")]}}
    assert check(h, SAFE, {}, same, {0: 2}).row("replicas").verdict == "ok"
    assert check(h, SAFE, {}, same).row("replicas").checked == 2  # HW: the shortest log end
    diverged = {0: {1: [(0, "a"), (1, "b")], 2: [(0, "a"), (1, "x")]}}
    row = check(h, SAFE, {}, diverged, {0: 2}).row("replicas")
    assert (row.observed, row.verdict) == (1, "FAIL")
    assert "broker 1='b'" in row.examples[0]
    assert check(h, SAFE, {}).row("replicas").verdict == "skipped"


EOS_SINK = Guarantees(acks="all", min_insync_replicas=2, idempotent=True, transactional=True)
ALO_SINK = Guarantees(acks="all", min_insync_replicas=2)


def test_a_pipeline_is_checked_against_its_output() -> None:
    """Input sends (partition 0 of the input) against the output's partitions: the transform
    applied, any output partition counts; a read_committed read that the final output lacks
    (an aborted transaction's record seen) is a truncated read."""
    h = History()
    _acked(h, "feed", "a", 0, 0)
    _acked(h, "feed", "b", 0, 1)
    _acked(h, "feed", "c", 0, 2)
    h.info(h.invoke("feed", "send", "d"), error="timed out")
    h.read("reader", 1, 1, "A")
    ops = through_pipeline(h, str.upper)
    assert [(o.value, o.partition, o.offset) for o in ops[:2]] == [("A", None, None)] * 2
    output = {0: [(0, "B"), (1, "A")], 1: [(0, "C"), (1, "A")]}
    r = check(ops, EOS_SINK, output)
    assert (r.row("lost").observed, r.row("lost").verdict) == (0, "ok")
    assert (r.row("duplicates").observed, r.row("duplicates").verdict) == (1, "FAIL")
    assert r.row("unknown").observed == 1 and r.row("order").verdict == "skipped"
    assert check(ops, ALO_SINK, output).row("duplicates").verdict == "expected"
    lost = check(ops, ALO_SINK, {0: [(0, "B")], 1: [(0, "C")]})
    assert lost.row("lost").observed == 1 and lost.row("lost").verdict == "FAIL"
    assert lost.row("truncated-reads").verdict == "FAIL"  # "A" was read at p1@1


def test_check_copy() -> None:
    out = {0: [(0, "X"), (1, "Y")]}
    assert check_copy(["x", "y"], out, EOS_SINK, str.upper).ok
    r = check_copy(["x", "y", "z"], {0: [(0, "x"), (1, "x")]}, EOS_SINK)
    assert (r.row("lost").observed, r.row("duplicates").observed) == (2, 1)


def test_partitions_without_a_final_log_are_not_checked() -> None:
    h = History()
    _acked(h, "p0", "a", 5, 0)
    row = check(h, SAFE, {0: []}).row("lost")
    assert (row.checked, row.verdict) == (0, "skipped")


def test_text_table_and_picture() -> None:
    h = History()
    _acked(h, "p0", "a", 0, 0)
    _acked(h, "p0", "b", 0, 1)
    h.info(h.invoke("p0", "send", "c", partition=0), error="timeout")
    report = check(h, SAFE, {0: [(0, "a")]})
    text = report.to_text()
    assert "no acknowledged write lost" in text and "FAIL" in text
    assert "e.g. p0 send 'b' p0@1" in text and text.rstrip().endswith("verdict: FAIL")
    t = h[0].wall
    faults = [FaultEvent("kill", "instant", ("broker-2",), time=t),
              FaultEvent("partition", "start", ("broker-1",), fault_id=7, time=t),
              FaultEvent("partition", "end", ("broker-1",), fault_id=7, time=t + 3)]
    svg = checker_svg(report, faults)
    assert svg.startswith("<svg") and 'class="band"' in svg
    assert "kill broker-2" in svg and "partition broker-1" in svg
    assert "LOST (acked, by ack time)" in svg
    assert "LOST 1 acked writes" in svg  # a marker: seen whatever the y scale


def test_per_second_keeps_the_empty_seconds() -> None:
    assert per_second([10.2, 10.9, 12.5], 10.0) == [(0.0, 2.0), (1.0, 0.0), (2.0, 1.0)]
    assert per_second([], 0.0) == []
    assert per_second([], 0.0, end=1.5) == [(0.0, 0.0), (1.0, 0.0)]


# -- property-based: injected anomalies are found exactly ---------------------------------------


@dataclass
class Scenario:
    history: History
    final: dict[int, list[tuple[int, str]]]
    lost: set[str] = field(default_factory=set)
    truncated: set[tuple[int, int]] = field(default_factory=set)
    dups: set[str] = field(default_factory=set)
    unknown: int = 0


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A workload of producers writing unique values to partitions in order, consumers
    reading the committed ones; then some anomalies are injected by editing the final logs
    and the reads, remembering exactly which."""
    n_parts = draw(st.integers(1, 3))
    n_procs = draw(st.integers(1, 3))
    n_sends = draw(st.integers(0, 40))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    h = History()
    logs: dict[int, list[tuple[int, str]]] = {p: [] for p in range(n_parts)}
    acked: list[tuple[int, int, str]] = []
    unknown = 0
    for i in range(n_sends):
        proc, part, value = f"producer-{rnd.randrange(n_procs)}", rnd.randrange(n_parts), f"v{i}"
        op = h.invoke(proc, "send", value, partition=part)
        outcome = rnd.choice(["ok", "ok", "ok", "fail", "info", "info-written"])
        if outcome == "fail":
            h.fail(op, error="NOT_LEADER_OR_FOLLOWER")
            continue
        offset = len(logs[part])
        if outcome == "info":
            h.info(op, error="timeout")
            unknown += 1
            continue
        logs[part].append((offset, value))
        if outcome == "info-written":
            h.info(op, error="timeout")
            unknown += 1
        else:
            h.ok(op, offset=offset)
            acked.append((part, offset, value))
    for part, log in logs.items():
        for off, value in log:
            if rnd.random() < 0.5:
                h.read("consumer-0", part, off, value)
    s = Scenario(h, {p: list(log) for p, log in logs.items()}, unknown=unknown)
    # Inject: drop some acked records from the tail of a partition (a truncation); reads of
    # them become truncated reads; and duplicate some values at the end of a log.
    for part in range(n_parts):
        log = s.final[part]
        cut = draw(st.integers(0, min(3, len(log))))
        for off, value in log[len(log) - cut:]:
            s.lost.add(value) if any(v == value for _, _, v in acked) else None
            if any(o.f == "read" and o.partition == part and o.offset == off for o in h.ops()):
                s.truncated.add((part, off))
        del log[len(log) - cut:]
    for part in range(n_parts):
        log = s.final[part]
        if log and draw(st.booleans()):
            _, value = log[rnd.randrange(len(log))]
            log.append((len(log) + 10, value))  # past any truncated offset: no new reads hit it
            s.dups.add(value)
    return s


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_checker_finds_exactly_the_injected_anomalies(s: Scenario) -> None:
    report = check(s.history, SAFE, s.final)
    assert {o.value for o in report.lost} == s.lost
    assert {(o.partition, o.offset) for o in report.truncated_reads} == s.truncated
    assert {v for _, v, _ in report.duplicates} == s.dups
    assert report.row("order").observed == 0
    assert report.row("unknown").observed == s.unknown
    assert report.ok == (not s.lost and not s.truncated and not s.dups)
    loose = check(s.history, ACKS1, s.final)
    assert loose.row("lost").observed == len(s.lost)
    assert loose.row("lost").verdict in ("ok", "expected", "skipped")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=60))
def test_clean_histories_pass(sends: list[tuple[int, int]]) -> None:
    h = History()
    logs: dict[int, list[tuple[int, str]]] = {p: [] for p in range(3)}
    for i, (proc, part) in enumerate(sends):
        value = f"v{i}"
        off = len(logs[part])
        logs[part].append((off, value))
        h.ok(h.invoke(f"producer-{proc}", "send", value, partition=part), offset=off)
        h.read("consumer-0", part, off, value)
    replicas = {p: {1: log, 2: list(log), 3: list(log)} for p, log in logs.items()}
    report = check(h, SAFE, logs, replicas)
    assert report.ok, report.to_text()
    assert all(r.verdict in ("ok", "skipped") for r in report.rows), report.to_text()
