"""Offset planning of the `odradek` Spark data source (S-9.1), without Spark or sockets:
Spark's KafkaSourceOffset JSON, option validation with Spark's messages, maxOffsetsPerTrigger
(KafkaMicroBatchStream.rateLimit), minPartitions (KafkaOffsetRangeCalculator), micro-batch
planning with new / deleted partitions and data loss, and the executors' record decoding into
Arrow columns (exact schema of Spark's Kafka source)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import Codec
from odradek.protocol.records import Record, build_batch
from odradek.spark.offsets import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetRange,
    OptionError,
    cap_to,
    check_all_partitions,
    check_assigned_exist,
    from_json_offsets,
    kafka_params,
    lower_keys,
    parse_offset_spec,
    parse_partition_offsets,
    parse_partition_timestamps,
    parse_partitions,
    parse_strategy,
    plan_batch_ranges,
    rate_limit,
    resolve_specific,
    select_partitions,
    split_ranges,
    stream_ranges,
    to_json_offsets,
    validate_batch_options,
    validate_stream_options,
)

BS = {"kafka.bootstrap.servers": "h:1"}


# -- JSON offsets ----------------------------------------------------------------------------------
def test_offsets_json_round_trip_in_kafka_source_offset_shape() -> None:
    offsets = {("a", 0): 23, ("a", 1): 5, ("b", 0): 0}
    js = to_json_offsets(offsets)
    assert js == {"a": {"0": 23, "1": 5}, "b": {"0": 0}}
    assert from_json_offsets(js) == offsets
    assert from_json_offsets('{"a":{"0":23,"1":5},"b":{"0":0}}') == offsets


def test_parse_partition_offsets_with_earliest_and_latest() -> None:
    got = parse_partition_offsets('{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}')
    assert got == {("topicA", 0): 23, ("topicA", 1): LATEST, ("topicB", 0): EARLIEST}


@pytest.mark.parametrize("bad", ['{"t":[0,1]}', "[1]", '{"t":{"x":1}}', '{"t":{"0":-3}}',
                                 "{not json", '{"t":{"0":"5"}}'])
def test_bad_offsets_json_is_a_clear_error(bad: str) -> None:
    with pytest.raises(OptionError, match=r"Expected e\.g\."):
        parse_partition_offsets(bad)
    # Through the options, the message names the option (startingOffsets or endingOffsets).
    with pytest.raises(OptionError, match=r"^option 'endingOffsets': Expected e\.g\."):
        validate_batch_options({**BS, "subscribe": "t", "endingoffsets": bad})
    with pytest.raises(OptionError, match=r"^option 'assign': Expected e\.g\."):
        parse_strategy({"assign": bad if bad.startswith("{not") else '{"t":{"0":1}}'})


def test_assign_json() -> None:
    assert parse_partitions('{"b":[2,0],"a":[1]}') == [("a", 1), ("b", 0), ("b", 2)]
    with pytest.raises(OptionError):
        parse_partitions('{"a":["x"]}')


def test_resolve_specific_replaces_minus_two_and_minus_one() -> None:
    req = {("t", 0): EARLIEST, ("t", 1): LATEST, ("t", 2): 7}
    got = resolve_specific(req, {("t", 0): 3, ("t", 1): 0, ("t", 2): 0},
                           {("t", 0): 9, ("t", 1): 11, ("t", 2): 20})
    assert got == {("t", 0): 3, ("t", 1): 11, ("t", 2): 7}


def test_specific_offsets_must_name_every_partition() -> None:
    check_all_partitions([("t", 0), ("t", 1)], [("t", 1), ("t", 0)], "startingOffsets")
    with pytest.raises(OptionError, match="you must specify all TopicPartitions"):
        check_all_partitions([("t", 0)], [("t", 0), ("t", 1)], "startingOffsets")


# -- options -----------------------------------------------------------------------------------
def test_strategy_exactly_one() -> None:
    with pytest.raises(OptionError, match="One of the following options must be specified"):
        parse_strategy({})
    with pytest.raises(OptionError, match="Only one of the following options can be specified"):
        parse_strategy({"subscribe": "a", "assign": '{"a":[0]}'})
    with pytest.raises(OptionError, match="No topics to subscribe to"):
        parse_strategy({"subscribe": " , "})
    with pytest.raises(OptionError, match="Pattern to subscribe is empty"):
        parse_strategy({"subscribepattern": " "})
    with pytest.raises(OptionError, match="No topicpartitions to assign"):
        parse_strategy({"assign": "a:0"})
    assert parse_strategy({"subscribe": "a, b"}).topics == ("a", "b")


def test_select_partitions() -> None:
    topics = {"events-1": [0, 1], "events-2": [0], "other": [0], "__consumer_offsets": [0]}
    assert select_partitions(parse_strategy({"subscribe": "other,missing"}), topics) == [
        ("other", 0)]
    assert select_partitions(parse_strategy({"subscribepattern": "events-.*"}), topics) == [
        ("events-1", 0), ("events-1", 1), ("events-2", 0)]
    assert select_partitions(parse_strategy({"assign": '{"x":[3]}'}), topics) == [("x", 3)]


def test_option_keys_are_case_insensitive_and_kafka_params_are_stripped() -> None:
    opts = lower_keys({"Kafka.Bootstrap.Servers": "h:1", "subscribePattern": "x",
                       "kafka.linger.ms": 5})
    assert opts == {"kafka.bootstrap.servers": "h:1", "subscribepattern": "x",
                    "kafka.linger.ms": "5"}
    assert kafka_params(opts) == {"bootstrap.servers": "h:1", "linger.ms": "5"}


@pytest.mark.parametrize(("opts", "message"), [
    ({"startingoffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"startingoffsets": '{"t":{"0":-1}}'}, "startingOffsets for t-0 can't be latest"),
    ({"endingoffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
    ({"endingoffsets": '{"t":{"0":-2}}'}, "ending offset for t-0 can't be earliest"),
    ({"startingoffsets": '{"t":{"0":1}}', "endingoffsets": '{"u":{"0":2}}'},
     "must cover the same topic partitions"),
    ({"startingoffsets": '{"t":{"0":9}}', "endingoffsets": '{"t":{"0":2}}'},
     "greater than its end offset"),
    ({"minpartitions": "0"}, "minPartitions must be positive"),
    ({"kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
    ({"kafka.value.deserializer": "x"}, "'value.deserializer' is not supported"),
    ({"kafka.enable.auto.commit": "true"}, "'enable.auto.commit' is not supported"),
    ({"failondataloss": "maybe"}, "must be true or false"),
])
def test_batch_option_errors_use_sparks_messages(opts: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        validate_batch_options({**BS, "subscribe": "t", **opts})


def test_bootstrap_servers_required() -> None:
    with pytest.raises(OptionError, match=r"Option 'kafka\.bootstrap\.servers' must be specified"):
        validate_batch_options({"subscribe": "t"})


def test_batch_defaults_and_stream_options() -> None:
    start, end = validate_batch_options({**BS, "subscribe": "t"})
    assert (start.kind, end.kind) == ("earliest", "latest")
    start, end = validate_batch_options({**BS, "subscribe": "t", "startingtimestamp": "1000",
                                         "startingoffsets": "earliest"})
    assert (start.kind, start.timestamp) == ("timestamp", 1000)
    assert validate_stream_options({**BS, "subscribe": "t"}).kind == "latest"
    with pytest.raises(OptionError, match="ending offset not valid in streaming queries"):
        validate_stream_options({**BS, "subscribe": "t", "endingoffsets": "latest"})
    with pytest.raises(OptionError, match="startingTimestamp"):
        parse_offset_spec({"startingtimestamp": "yesterday"}, "starting", "latest")


def test_offsets_by_timestamp_options() -> None:
    """startingOffsetsByTimestamp / endingOffsetsByTimestamp (Spark's option names, a timestamp
    per partition): <x>Timestamp wins over them, they win over <x>Offsets."""
    js = '{"t":{"0":1000,"1":2000}}'
    start, end = validate_batch_options({**BS, "subscribe": "t", "startingoffsets": "earliest",
                                         "startingoffsetsbytimestamp": js,
                                         "endingoffsetsbytimestamp": '{"t":{"0":1500,"1":2500}}'})
    assert (start.kind, start.offset_map) == ("timestamps", {("t", 0): 1000, ("t", 1): 2000})
    assert (end.kind, end.offset_map) == ("timestamps", {("t", 0): 1500, ("t", 1): 2500})
    spec = parse_offset_spec({"startingtimestamp": "5", "startingoffsetsbytimestamp": js},
                             "starting", "latest")
    assert (spec.kind, spec.timestamp) == ("timestamp", 5)
    assert validate_stream_options({**BS, "subscribe": "t",
                                    "startingoffsetsbytimestamp": js}).kind == "timestamps"
    with pytest.raises(OptionError, match="ending timestamp not valid in streaming queries"):
        validate_stream_options({**BS, "subscribe": "t", "endingoffsetsbytimestamp": js})
    with pytest.raises(OptionError, match="must cover the same topic partitions"):
        validate_batch_options({**BS, "subscribe": "t", "startingoffsetsbytimestamp": js,
                                "endingoffsetsbytimestamp": '{"t":{"0":1500}}'})
    with pytest.raises(OptionError, match="start timestamp 2000 of t-1 is greater than its end"):
        validate_batch_options({**BS, "subscribe": "t", "startingoffsetsbytimestamp": js,
                                "endingoffsetsbytimestamp": '{"t":{"0":1500,"1":1999}}'})
    for bad in ('{"t":[0]}', '{"t":{"0":-1}}', '{"t":{"x":1}}', "{oops"):
        with pytest.raises(OptionError, match=r"option 'startingOffsetsByTimestamp': Expected"):
            parse_partition_timestamps(bad, "startingOffsetsByTimestamp")


def test_timestamps_must_name_every_partition() -> None:
    with pytest.raises(OptionError, match=r"If startingOffsetsByTimestamp contains specific "
                                          r"timestamps, you must specify all TopicPartitions\.\n"
                                          r"Specified: \[t-0\] Assigned: \[t-0, t-1\]"):
        check_all_partitions([("t", 0)], [("t", 0), ("t", 1)], "startingOffsetsByTimestamp")


def test_assigned_partitions_must_exist() -> None:
    check_assigned_exist([("t", 0), ("t", 1)], {"t": [0, 1, 2]})
    with pytest.raises(OptionError, match=r"Topic partitions \[t-3, u-0\] of option 'assign' "
                                          "do not exist"):
        check_assigned_exist([("t", 0), ("t", 3), ("u", 0)], {"t": [0, 1, 2]})


def test_plan_batch_ranges() -> None:
    start = {("t", 0): 3, ("t", 1): 0}
    assert plan_batch_ranges(start, {("t", 0): 9, ("t", 1): 0, ("u", 0): 4}) == [
        OffsetRange("t", 0, 3, 9), OffsetRange("t", 1, 0, 0)]
    with pytest.raises(OptionError, match="start offset 3 of t-0 is greater than its end"):
        plan_batch_ranges(start, {("t", 0): 2})


# -- maxOffsetsPerTrigger ------------------------------------------------------------------------
def test_rate_limit_is_proportional_to_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 100}
    # backlogs 1000 and 10 of 1010: 99.0 -> 99, 0.099 -> 1 (never starve), none for t-2
    assert rate_limit(100, start, latest) == {("t", 0): 99, ("t", 1): 1, ("t", 2): 100}


def test_rate_limit_without_backlog_and_for_new_partitions() -> None:
    start = {("t", 0): 5}
    assert rate_limit(10, start, {("t", 0): 5}) == {("t", 0): 5}
    # t-1 is new: it begins at its earliest offset (40), backlog 60 of 60+60
    got = rate_limit(10, start, {("t", 0): 65, ("t", 1): 100}, {("t", 1): 40})
    assert got == {("t", 0): 10, ("t", 1): 45}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10_000),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)), min_size=1,
                max_size=8))
def test_rate_limit_properties(limit: int, parts: list[tuple[int, int]]) -> None:
    start = {("t", i): b for i, (b, _) in enumerate(parts)}
    latest = {("t", i): b + n for i, (b, n) in enumerate(parts)}
    end = rate_limit(limit, start, latest)
    assert set(end) == set(latest)
    for tp in latest:
        assert start[tp] <= end[tp] <= latest[tp]
        if latest[tp] > start[tp]:
            assert end[tp] > start[tp]  # no partition with a backlog is starved
    taken = sum(end[tp] - start[tp] for tp in end)
    backlog = sum(latest[tp] - start[tp] for tp in end)
    assert taken <= max(limit, len(parts)) + len(parts)
    assert taken == backlog or taken >= min(limit, backlog) - len(parts)


def test_cap_to_available_now_target() -> None:
    assert cap_to({("t", 0): 50, ("t", 1): 7, ("t", 2): 3}, {("t", 0): 40, ("t", 1): 9}) == {
        ("t", 0): 40, ("t", 1): 7}


# -- minPartitions ---------------------------------------------------------------------------------
def test_split_ranges_like_sparks_calculator() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10),
              OffsetRange("t", 2, 5, 5)]
    # no minPartitions, or enough partitions already: one range each, empty ones dropped
    assert split_ranges(ranges, None) == ranges[:2]
    assert split_ranges(ranges, 2) == ranges[:2]
    # 4 wanted of 110: t-1 stays whole (round(10/110*4)=0 -> 1), t-0 gets 3 parts of 100
    assert split_ranges(ranges, 4) == [OffsetRange("t", 0, 0, 33), OffsetRange("t", 0, 33, 66),
                                       OffsetRange("t", 0, 66, 100),
                                       OffsetRange("t", 1, 0, 10)]
    # Shares that round to 1 stay whole, as in Spark: 3 x 3 offsets with 4 wanted -> 3 tasks;
    # sizes 1, 3, 3, 3 with 5 wanted: t-0 is unsplit, the others get round(3/9*4)=1 each.
    equal = [OffsetRange("t", i, 0, 3) for i in range(3)]
    assert split_ranges(equal, 4) == equal
    mixed = [OffsetRange("t", 0, 0, 1)] + [OffsetRange("t", i, 0, 3) for i in (1, 2, 3)]
    assert split_ranges(mixed, 5) == mixed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), min_size=1,
                max_size=6),
       st.integers(1, 40))
def test_split_ranges_cover_each_range_exactly(parts: list[tuple[int, int]],
                                               min_parts: int) -> None:
    ranges = [OffsetRange("t", i, b, b + n) for i, (b, n) in enumerate(parts)]
    out = split_ranges(ranges, min_parts)
    for r in ranges:
        pieces = [x for x in out if x.partition == r.partition]
        if r.size == 0:
            assert pieces == []
            continue
        assert pieces[0].from_offset == r.from_offset
        assert pieces[-1].until_offset == r.until_offset
        for a, b in itertools.pairwise(pieces):
            assert a.until_offset == b.from_offset
        assert all(p.size > 0 for p in pieces)
    nonempty = sum(1 for r in ranges if r.size > 0)
    total = sum(r.size for r in ranges)
    assert len(out) >= nonempty
    # Spark's KafkaOffsetRangeCalculator rounds each range's share of minPartitions, so ranges
    # of similar sizes may stay whole (3 ranges of 3 offsets and minPartitions=4: 3 tasks;
    # sizes 1, 3, 3, 3 and minPartitions=5: 4 tasks); one large range is always split in
    # exactly minPartitions pieces.
    if nonempty == 1 and total >= min_parts:
        assert len(out) == min_parts


# -- micro-batch planning --------------------------------------------------------------------------
def test_stream_ranges_new_partition_starts_at_earliest() -> None:
    ranges, losses = stream_ranges({("t", 0): 10}, {("t", 0): 20, ("t", 1): 5},
                                   {("t", 1): 2}, True)
    assert ranges == [OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 2, 5)]
    assert losses == []


def test_stream_ranges_data_loss_fails_or_is_reported() -> None:
    start, end = {("t", 0): 10, ("t", 1): 4}, {("t", 0): 7}
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        stream_ranges(start, end, {}, True)
    ranges, losses = stream_ranges(start, end, {}, False)
    assert ranges == []
    assert any("t-1" in m and "gone" in m for m in losses)
    assert any("changed from 10 to 7" in m for m in losses)


# -- decoding on the executors -------------------------------------------------------------------
def _records(base: int, n: int) -> list[Record]:
    return [Record(0, 1_700_000_000_000 + base + i,
                   None if i % 3 == 0 else f"k{base + i}".encode(),
                   b"v" * (i * 40) if i % 5 else None,  # long values need multi-byte varints
                   [("h", f"{i}".encode()), ("n", None)] if i % 2 else [])
            for i in range(n)]


def test_decode_into_arrow_columns_exactly() -> None:
    pa = pytest.importorskip("pyarrow")
    from odradek.spark.reader import Columns, arrow_schema, decode_into

    first, second = _records(0, 7), _records(7, 6)
    data = (build_batch(first, base_offset=100)
            + build_batch([(None, b"ctl")], base_offset=107, is_control=True)
            + build_batch(second, base_offset=108, compression=Codec.GZIP)
            + build_batch(_records(20, 3), base_offset=114, log_append_time=True,
                          timestamp_ms=5)[:-10])  # cut: a partial trailing batch
    cols = Columns()
    nxt = decode_into(cols, data, 102, 112, with_headers=True)
    assert nxt == 114  # after the last complete batch
    expected = [(100 + i, r) for i, r in enumerate(first)][2:] + [
        (108 + i, r) for i, r in enumerate(second)][:4]
    assert cols.offsets == [o for o, _ in expected]
    assert cols.keys == [r.key for _, r in expected]
    assert cols.values == [r.value for _, r in expected]
    assert cols.timestamps == [r.timestamp for _, r in expected]
    assert cols.headers == [r.headers for _, r in expected]
    batch = cols.to_batch("t", 3, arrow_schema(True))
    assert batch.schema == pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])
    row = batch.slice(1, 1).to_pylist()[0]
    assert row["offset"] == 103 and row["topic"] == "t" and row["partition"] == 3
    assert row["timestamp"].timestamp() * 1000 == pytest.approx(first[3].timestamp)
    assert row["headers"] == [{"key": "h", "value": b"3"}, {"key": "n", "value": None}]


def test_decode_log_append_time() -> None:
    pytest.importorskip("pyarrow")
    from odradek.spark.reader import Columns, decode_into

    cols = Columns()
    decode_into(cols, build_batch([(b"k", b"v"), (b"k2", b"v2")], base_offset=0,
                                  timestamp_ms=1234, log_append_time=True), 0, 10)
    assert cols.ts_types == [1, 1] and cols.timestamps == [1234, 1234]


def test_decode_long_varints() -> None:
    pytest.importorskip("pyarrow")
    from odradek.spark.reader import Columns, decode_into

    recs = [Record(0, 1_000, b"k" * 300, b"v" * 20_000, []),
            Record(0, 1_000 + 3_600_000 * 50, None, b"w" * 70_000, [("h", b"x" * 200)])]
    cols = Columns()
    decode_into(cols, build_batch(recs, base_offset=5), 0, 100, with_headers=True)
    assert cols.offsets == [5, 6]
    assert cols.keys == [b"k" * 300, None]
    assert cols.values == [b"v" * 20_000, b"w" * 70_000]
    assert cols.timestamps == [1_000, 1_000 + 3_600_000 * 50]
    assert cols.headers == [[], [("h", b"x" * 200)]]


@pytest.mark.parametrize(("value", "checked"), [("false", False), ("False", False),
                                                ("true", True), (None, True)])
def test_reader_check_crcs_option_is_parsed_from_a_string(value: str | None,
                                                          checked: bool) -> None:
    """`kafka.check.crcs` arrives as the string "false" from Spark options (S-9.1)."""
    from odradek.spark.reader import RangeReader
    kafka = {"bootstrap.servers": "h:1"} | ({} if value is None else {"check.crcs": value})
    reader = RangeReader(kafka, fail_on_data_loss=True, include_headers=False)
    assert reader.check_crcs is checked
    assert reader.config["allow.auto.create.topics"] is False  # a read never creates a topic
