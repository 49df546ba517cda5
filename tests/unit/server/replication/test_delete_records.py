"""DeleteRecords as pure-ish logic: the leader's deleteRecordsOnLeader (HW bound, -1, the
cleanup policy), the low watermark over live followers, the follower taking the leader's log
start offset, and the tool's offset JSON and output lines (Kafka's DeleteRecordsCommand)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.protocol.records import build_batch, validate_batches
from odradek.server.replication.fetcher import (
    FetcherConfig,
    InitialFetchState,
    ReplicaFetcher,
    initial_fetch_offset,
)
from odradek.server.replication.partition import NotLeaderError, Partition, PolicyViolationError
from odradek.storage.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from odradek.tools.command import ToolError
from odradek.tools.delete_records import check_duplicates, parse_offset_json, result_lines
from tests.replication_support import LocalLeaderEndpoint, replica_manager

NOW = 1_000_000


def leader(tmp_path: Path, policy: str = "delete") -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig.from_props({"cleanup.policy": policy}))
    p = Partition("t", 0, log, 1, clock=lambda: NOW)
    p.make_leader(0, [1, 2, 3], [1, 2, 3])
    buf = bytearray(build_batch([(b"k", b"v")] * 10))
    p.append_records_to_leader(buf, validate_batches(buf), 1, 1, NOW)
    for follower in (2, 3):  # both at the log end: HW 10, their log start offsets 0
        p.update_follower_fetch_state(follower, 10, 0, NOW)
    assert p.high_watermark == 10
    return p


def test_the_leader_moves_its_log_start_up_to_the_high_watermark(tmp_path: Path) -> None:
    p = leader(tmp_path)
    moved: list[int] = []
    p.log_start_listener = lambda part: moved.append(part.log_start_offset)
    assert p.delete_records_on_leader(4) == 4
    assert p.log_start_offset == 4 and moved == [4]
    assert p.delete_records_on_leader(2) == 2  # below: nothing moves, not an error
    assert p.log_start_offset == 4 and moved == [4]
    with pytest.raises(OffsetOutOfRangeError):
        p.delete_records_on_leader(11)
    with pytest.raises(OffsetOutOfRangeError):
        p.delete_records_on_leader(-7)
    assert p.delete_records_on_leader(-1) == 10  # -1: the high watermark
    assert p.log_start_offset == 10


def test_compacted_only_topics_refuse_and_followers_are_not_leaders(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolationError):
        leader(tmp_path / "c", "compact").delete_records_on_leader(1)
    assert leader(tmp_path / "cd", "compact,delete").delete_records_on_leader(1) == 1
    p = leader(tmp_path / "f")
    p.make_follower(2, 1, [1, 2, 3], [1, 2, 3])
    with pytest.raises(NotLeaderError):
        p.delete_records_on_leader(1)


def test_the_low_watermark_counts_followers_on_live_brokers(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.delete_records_on_leader(6)
    assert p.low_watermark(lambda b: True) == 0
    outcome = p.update_follower_fetch_state(2, 10, 6, NOW)
    assert outcome.log_start_moved
    assert not p.update_follower_fetch_state(2, 10, 6, NOW).log_start_moved
    assert p.low_watermark(lambda b: True) == 0  # follower 3 still at 0
    assert p.low_watermark(lambda b: b != 3) == 6  # ... but its broker is gone
    p.update_follower_fetch_state(3, 10, 6, NOW)
    assert p.low_watermark(lambda b: True) == 6


def test_a_follower_takes_the_leaders_log_start_never_past_its_high_watermark(
        tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    f = Partition("t", 0, log, 2, clock=lambda: NOW)
    f.make_follower(1, 0, [1, 2], [1, 2])
    f.append_records_to_follower(build_batch([(b"k", b"v")] * 10))
    moved: list[int] = []
    f.log_start_listener = lambda part: moved.append(part.log_start_offset)
    f.update_follower_high_watermark(5, 7)
    assert (f.high_watermark, f.log_start_offset) == (5, 5)
    f.update_follower_high_watermark(10, 7)
    assert (f.high_watermark, f.log_start_offset, moved) == (10, 7, [5, 7])


# -- the tool ------------------------------------------------------------------------------------

entry = st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 1000),
                  st.integers(-1, 2**62))


@given(st.lists(entry, max_size=6))
def test_the_offset_json_round_trips(entries: list[tuple[str, int, int]]) -> None:
    import json

    text = json.dumps({"partitions": [{"topic": t, "partition": p, "offset": o}
                                      for t, p, o in entries], "version": 1})
    assert parse_offset_json(text) == entries


@pytest.mark.parametrize(("text", "message"), [
    ("{", "The input string is not a valid JSON"),
    ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
    ('{"version": 1}', "Missing partitions field"),
])
def test_bad_offset_json(text: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        parse_offset_json(text)


def test_no_version_means_1_and_duplicates_are_refused() -> None:
    entries = parse_offset_json('{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
                                '{"topic": "a", "partition": 0, "offset": 2}]}')
    with pytest.raises(ToolError, match="duplicate topic partitions: a-0"):
        check_duplicates(entries)


def test_result_lines_are_kafkas() -> None:
    lines = result_lines([("a", 0, 3), ("b", 1, 9)],
                         {("a", 0): 3, ("b", 1): ErrorCode.policy_violation})
    assert lines == [
        "Records delete operation completed:",
        "partition: a-0\tlow_watermark: 3",
        "partition: b-1\terror: org.apache.kafka.common.errors.PolicyViolationException: "
        "Request parameters do not satisfy the configured policy."]


def test_a_new_follower_fetches_from_a_log_start_inside_a_batch(tmp_path: Path) -> None:
    """DeleteRecords to offset 5 of one batch of 10 leaves the leader's log start inside that
    batch; a follower with an empty log starts there (OFFSET_OUT_OF_RANGE, truncate fully at
    5) and gets the whole batch from offset 0. As Kafka's Partition.appendRecordsToFollower
    does on UnexpectedAppendOffsetException, it restarts its empty log at the batch's base
    offset and appends it, then takes the leader's log start offset: no failed partition."""
    tp = ("t", 0)

    async def body() -> None:
        rms = [replica_manager(b, LogManager([tmp_path / f"logs-{b}"], lock_dirs=False),
                               lambda _t: LogConfig()) for b in (1, 2)]
        leader_rm, follower_rm = rms
        for rm in rms:
            rm.start()
            assert rm.become_leader_or_follower(tp, 1, 0, [1], [1, 2], 0) == ErrorCode.none
        fetcher = ReplicaFetcher("f", 2, 1, LocalLeaderEndpoint(leader_rm, 2),
                                 follower_rm.partitions.get, FetcherConfig())
        try:
            res = leader_rm.append_records(1, 1000, {tp: build_batch([(b"k", b"v")] * 10)})
            assert isinstance(res, dict) and res[tp].error == ErrorCode.none
            lead = leader_rm.partitions[tp]
            assert lead.high_watermark == 10
            assert lead.delete_records_on_leader(5) == 5 and lead.log_start_offset == 5
            follower = follower_rm.partitions[tp]
            fetcher.add_partitions({tp: InitialFetchState(1, None, 0,
                                                          initial_fetch_offset(follower))})
            for _ in range(5):
                await fetcher.do_work(wait_if_idle=False)
            assert tp not in fetcher.failed
            assert fetcher.states[tp].fetch_offset == 10
            assert (follower.log_start_offset, follower.log_end_offset,
                    follower.high_watermark) == (5, 10, 10)
            assert follower.log.read(5, 1 << 20).read_bytes() == \
                lead.log.read(5, 1 << 20).read_bytes()
        finally:
            fetcher.stop()
            for rm in rms:
                rm.shutdown()
    asyncio.run(body())


def test_only_an_empty_follower_log_restarts_at_the_batch(tmp_path: Path) -> None:
    """Kafka's condition: the log is empty (log end = log start) and the batch holds its log
    end offset. A follower with records below its log end still refuses a batch from before
    it (a real offset mismatch), and so does an empty log handed a batch wholly below it."""
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, log, 2)
    p.make_follower(1, 0, [1, 2], [1, 2])
    p.append_records_to_follower(build_batch([(b"k", b"v")] * 3, base_offset=0))
    with pytest.raises(UnexpectedAppendOffsetError) as exc:
        p.append_records_to_follower(build_batch([(b"k", b"v")] * 3, base_offset=1))
    assert (exc.value.first_offset, exc.value.last_offset) == (1, 3)
    assert (p.log_start_offset, p.log_end_offset) == (0, 3)
    p.truncate_fully_and_start_at(10)
    with pytest.raises(UnexpectedAppendOffsetError):
        p.append_records_to_follower(build_batch([(b"k", b"v")] * 3, base_offset=5))
    info = p.append_records_to_follower(build_batch([(b"k", b"v")] * 3, base_offset=8))
    assert info is not None and (info.first_offset, info.last_offset) == (8, 10)
    assert (p.log_start_offset, p.log_end_offset) == (8, 11)
