"""The pure parts of broker-api-versions, get-offsets, producer-perf-test and
consumer-perf-test: Kafka's printed lines from given numbers, the argument parsing, and
DescribeCluster's endpoint-type answer."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.types import Node, PartitionDescription
from odradek.server.apis.describe_cluster import endpoint_type_error
from odradek.tools.broker_api_versions import api_line, broker_lines, format_versions, node_text
from odradek.tools.command import ToolError
from odradek.tools.consumer_perf_test import (
    DETAILED_HEADER,
    SUMMARY_HEADER,
    fmt4,
    java_date,
    progress_line,
    ratio,
    summary_line,
)
from odradek.tools.get_offsets import offset_lines, parse_partitions, select, valid_host_ports
from odradek.tools.producer_perf_test import (
    Stats,
    Throttler,
    metrics_table,
    parse_props,
    percentiles,
    random_payload,
)


# -- broker-api-versions -------------------------------------------------------------------------
def test_api_lines_say_what_is_usable() -> None:
    assert api_line(0, 0, 10, (3, 10)) == "Produce(0): 0 to 10 [usable: 10]"
    assert api_line(36, 0, 2, (1, 1)) == "SaslAuthenticate(36): 0 to 2 [usable: 1]"
    assert api_line(47, 0, 0, (0, 0)) == "OffsetDelete(47): 0 [usable: 0]"
    assert api_line(1, 13, 17, (4, 12)) == "Fetch(1): 13 to 17 [unusable: node too new]"
    assert api_line(1, 0, 3, (4, 12)) == "Fetch(1): 0 to 3 [unusable: node too old]"
    # spoken by the broker only (an inter-broker API), and an api key with no name
    assert api_line(4, 0, 5, None) == "LeaderAndIsr(4): 0 to 5"
    assert api_line(56, 0, 0, None) == "AlterIsr(56): 0"
    assert api_line(999, 0, 1, None) == "UNKNOWN(999): 0 to 1"


def test_a_broker_block_lists_kafka_28_apis_it_lacks_as_unsupported() -> None:
    text = format_versions({0: (0, 9), 18: (0, 3), 60: (0, 1), 999: (0, 0)},
                           {0: (3, 10), 18: (0, 3)})
    lines = text.splitlines()
    assert lines[0] == "(" and lines[-1] == ")"
    assert lines[1] == "\tProduce(0): 0 to 9 [usable: 9],"
    assert "\tFetch(1): UNSUPPORTED," in lines
    assert "\tApiVersions(18): 0 to 3 [usable: 3]," in lines
    assert "\tDescribeCluster(60): 0 to 1," in lines
    assert "\tUpdateFeatures(57): UNSUPPORTED," in lines
    assert lines[-2] == "\tUNKNOWN(999): 0"  # the last API: no comma
    keys = [int(line.split("(")[1].split(")")[0]) for line in lines[1:-1]]
    assert keys == sorted(keys)


def test_node_and_error_lines() -> None:
    n = Node(2, "127.0.0.1", 9094, None)
    assert node_text(n) == "127.0.0.1:9094 (id: 2 rack: null)"
    assert node_text(Node(1, "h", 1, "r1")) == "h:1 (id: 1 rack: r1)"
    from odradek.client.errors import KafkaConnectionError

    lines = broker_lines({n: KafkaConnectionError("refused")}, {})
    assert lines == ["127.0.0.1:9094 (id: 2 rack: null) -> ERROR: refused"]
    lines = broker_lines({n: {18: (0, 3)}}, {18: (0, 3)})
    assert lines[0].startswith("127.0.0.1:9094 (id: 2 rack: null) -> (\n\tProduce(0): ")


# -- get-offsets -----------------------------------------------------------------------------------
def test_get_offsets_parsing_and_lines() -> None:
    assert parse_partitions("") == set()
    assert parse_partitions("0,2,2") == {0, 2}
    with pytest.raises(ToolError, match="--partitions expects a comma separated list of "
                                        "numeric partition ids, but received: 0,x"):
        parse_partitions("0,x")
    assert valid_host_ports("a:1,b:2") and not valid_host_ports("a") \
        and not valid_host_ports("a:x")
    assert offset_lines("t", {1: 5, 0: 42, 2: None}) == ["t:0:42", "t:1:5", "t:2:"]


def test_get_offsets_selection() -> None:
    parts = [PartitionDescription(i, leader, 0, [0], [0]) for i, leader in ((0, 0), (1, -1),
                                                                          (2, 1))]
    warn: list[str] = []
    assert select("t", parts, set(), warn) == [0, 2]
    assert warn == ["Error: partition 1 does not have a leader. Skip getting offsets"]
    warn.clear()
    assert select("t", parts, {2, 7}, warn) == [2]
    assert warn == ["Error: partition 7 does not exist"]
    with pytest.raises(ToolError, match=r"^Topic t does not exist$"):
        select("t", None, set(), [])
    with pytest.raises(ToolError, match=r"^Topic t has 0 partitions$"):
        select("t", [], set(), [])
    with pytest.raises(ToolError,
                       match=r"^Topic t does not have any of the requested partitions 7,9$"):
        select("t", parts, {9, 7}, [])


# -- producer-perf-test ---------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000

    def __call__(self) -> int:
        return self.now


def test_stats_print_a_window_every_interval_and_kafkas_total_line() -> None:
    clock, out = Clock(), []
    stats = Stats(10, 5000, out.append, clock)
    for i, latency in enumerate((5, 7, 30)):
        clock.now += 1000
        stats.record(i, latency, 100)
    assert out == []
    clock.now = 6000  # 5 s after the start: the window is printed, then a new one starts
    stats.record(3, 10, 100)
    assert out == ["4 records sent, 0.8 records/sec (0.00 MB/sec), 13.0 ms avg latency, "
                   "30.0 ms max latency."]
    clock.now = 11000
    assert stats.total_line() == (
        "4 records sent, 0.400000 records/sec (0.00 MB/sec), 13.00 ms avg latency, "
        "30.00 ms max latency, 10 ms 50th, 30 ms 95th, 30 ms 99th, 30 ms 99.9th.")


def test_stats_sample_at_most_500000_latencies() -> None:
    stats = Stats(1_500_000, out=lambda _: None, clock=Clock())
    assert stats.sampling == 3
    for i in range(9):
        stats.record(i, i, 1, now=1000)
    assert stats.latencies == [0, 3, 6]
    assert Stats(7, clock=Clock()).sampling == 1 and Stats(0, clock=Clock()).sampling == 1


def test_delivery_callbacks_count_errors_as_sent(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    stats = Stats(2, out=lambda _: None, clock=clock)
    ok, failed = stats.next_completion(10), stats.next_completion(10)
    clock.now += 4
    ok(None, object())
    failed("NOT_ENOUGH_REPLICAS", None)
    assert (stats.count, stats.errors, stats.max_latency) == (2, 1, 4)
    assert "NOT_ENOUGH_REPLICAS" in capsys.readouterr().err


def test_percentiles_throttle_props_payload_and_metrics() -> None:
    assert percentiles(list(range(100, 0, -1)), (0.5, 0.95, 0.99, 0.999)) == [51, 96, 100, 100]
    assert percentiles([], (0.5,)) == [0]
    t = Throttler(100, 0)
    assert t.delay_s(50, 100) == pytest.approx(0.4)
    assert t.delay_s(5, 1000) == 0.0
    assert Throttler(1000, 0).delay_s(1001, 1000) == 0.0  # 1 ms ahead: not worth a sleep yet
    assert Throttler(-1, 0).delay_s(10**9, 0) == 0.0
    assert parse_props(["acks=all", "bootstrap.servers=h:1"]) == {
        "acks": "all", "bootstrap.servers": "h:1"}
    with pytest.raises(ToolError, match="Invalid property: a=b=c"):
        parse_props(["a=b=c"])
    import random

    p = random_payload(50, random.Random(0))
    assert len(p) == 50 and set(p) <= set(range(65, 91))
    lines = metrics_table("g", "c", {"record-send-total": 3, "record-send-rate": 1.5})
    assert lines == ["", f"{'Metric Name':<33}   Value",
                     "g:record-send-rate:{client-id=c}  : 1.500",
                     "g:record-send-total:{client-id=c} : 3"]


# -- consumer-perf-test ---------------------------------------------------------------------------
def test_consumer_perf_lines() -> None:
    assert SUMMARY_HEADER == ("start.time, end.time, data.consumed.in.MB, MB.sec, "
                              "data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
                              "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    assert DETAILED_HEADER.startswith("time, threadId, data.consumed.in.MB, MB.sec, ")
    start = int(datetime.datetime(2024, 3, 5, 7, 8, 9, 12000).timestamp() * 1000)
    assert java_date("yyyy-MM-dd HH:mm:ss:SSS", start) == "2024-03-05 07:08:09:012"
    assert java_date("yy/M 'at' H''", start) == "24/3 at 7'"
    line = summary_line("HH:mm:ss", start, start + 2000, 2 * 1024 * 1024, 1000, 500)
    assert line == "07:08:09, 07:08:11, 2.0000, 1.0000, 1000, 500.0000, 500, 1500, " \
                   "1.3333, 666.6667"
    assert summary_line("ss", start, start, 0, 0, 0).endswith(", 0, 0, NaN, NaN")
    line = progress_line("ss", 3 * 1024 * 1024, 1024 * 1024, 300, 100, start, start + 1000, 200)
    assert line == "10, 0, 3.0000, 2.0000, 300, 200.0000, 200, 800, 2.5000, 250.0000"
    assert fmt4(ratio(1, 0)) == "Infinity" and fmt4(ratio(0, 0)) == "NaN"


# -- DescribeCluster ---------------------------------------------------------------------------
def test_describe_cluster_endpoint_types() -> None:
    assert endpoint_type_error(1) is None
    code, message = endpoint_type_error(2)  # type: ignore[misc]
    assert code == ErrorCode.mismatched_endpoint_type
    assert message == ("The request was sent to an endpoint of type BROKER, but we wanted an "
                       "endpoint of type CONTROLLER")
    assert endpoint_type_error(7) == (ErrorCode.unsupported_endpoint_type,
                                      "Unsupported endpoint type 7")


def test_java_client_properties_for_librdkafka() -> None:
    from odradek.tools.producer_perf_test import librdkafka_props

    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="s3;cret";')
    assert librdkafka_props({
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": ""}) == {
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "s3;cret",
        "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"}
    assert librdkafka_props({"ssl.keystore.location": "/me.pem"}) == {
        "ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem"}
    with pytest.raises(ToolError, match=r"PEM files only, not ssl\.truststore\.type=JKS"):
        librdkafka_props({"ssl.truststore.type": "JKS", "ssl.truststore.location": "/t.jks"})
