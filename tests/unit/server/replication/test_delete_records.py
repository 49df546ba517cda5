"""DeleteRecords as pure-ish logic: the leader's deleteRecordsOnLeader (HW bound, -1, the
cleanup policy), the low watermark over live followers, the follower taking the leader's log
start offset, and the tool's offset JSON and output lines (Kafka's DeleteRecordsCommand)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.protocol.records import build_batch, validate_batches
from odradek.server.replication.partition import NotLeaderError, Partition, PolicyViolationError
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.tools.command import ToolError
from odradek.tools.delete_records import check_duplicates, parse_offset_json, result_lines

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
