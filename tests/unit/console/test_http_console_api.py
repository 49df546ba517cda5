"""The console's JSON documents and request decisions (console/console_api.py), the
http.listener config key, the request log line and the logging config file."""

from __future__ import annotations

import base64
import json
import logging
import time
from pathlib import Path

import pytest

from odradek.client.types import (
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    MemberDescription,
    Node,
    PartitionDescription,
    TopicDescription,
)
from odradek.common import TopicPartition
from odradek.common.log_config import KAFKA_LOGGERS, LogConfigError, alias_kafka_loggers, configure
from odradek.console import console_api
from odradek.server import request_log
from odradek.server.configs.config import ConfigError, KafkaConfig, parse_http_listener


def _topic(name: str, *parts: tuple[int, int, list[int], list[int]],
           internal: bool = False) -> TopicDescription:
    return TopicDescription(name, None, internal, [
        PartitionDescription(p, leader, 0, replicas, isr) for p, leader, replicas, isr in parts])


TOPICS = {
    "t": _topic("t", (0, 0, [0, 1], [0, 1]), (1, 1, [1, 2], [1])),
    "u": _topic("u", (0, -1, [2], [])),
    "__consumer_offsets": _topic("__consumer_offsets", (0, 0, [0], [0]), internal=True),
}


def test_cluster_view_marks_dead_replicas_under_replicated_and_offline() -> None:
    cluster = ClusterDescription("cid", 0, [Node(0, "h", 1), Node(1, "h", 2)])
    view = console_api.cluster_view(1, cluster, TOPICS, 7, False, ("kill",), "tok")
    assert view["cluster_id"] == "cid" and view["broker_id"] == 1
    assert view["controller"] == {"id": 0, "epoch": 7}
    assert view["brokers"] == [{"id": 0, "host": "h", "port": 1, "alive": True},
                               {"id": 1, "host": "h", "port": 2, "alive": True},
                               {"id": 2, "host": None, "port": None, "alive": False}]
    assert view["under_replicated"] == ["t-1"]
    assert view["offline"] == ["u-0"]
    assert view["faults_enabled"] is False and view["fault_actions"] == []
    assert view["csrf_token"] == "tok"


def test_topics_and_topic_view() -> None:
    topics = console_api.topics_view(TOPICS)
    assert [t["name"] for t in topics] == ["__consumer_offsets", "t", "u"]
    t = topics[1]
    assert t == {"name": "t", "partitions": 2, "replication_factor": 2, "internal": False,
                 "under_replicated": 1}
    view = console_api.topic_view(
        TOPICS["t"], {"retention.ms": ConfigEntry("retention.ms", "1000")}, {0: 3}, {0: 9, 1: 4},
        {1: console_api.LocalReplica(5, 123)})
    assert view["configs"] == {"retention.ms": "1000"}
    p0, p1 = view["partitions"]
    assert p0 == {"partition": 0, "leader": 0, "replicas": [0, 1], "isr": [0, 1],
                  "log_start_offset": 3, "high_watermark": 9, "log_end_offset": None,
                  "size_bytes": None, "under_replicated": False, "offline": False}
    assert p1["log_end_offset"] == 5 and p1["size_bytes"] == 123 and p1["under_replicated"]


def test_group_views_and_lag() -> None:
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    desc = GroupDescription("g", "Stable", "consumer", "range", [
        MemberDescription("m-1", None, "c1", "/127.0.0.1", [tp0, tp1], ["t"])])
    groups = console_api.groups_view([GroupListing("g", "consumer", "Stable"),
                                      GroupListing("e", "consumer", "Empty")], {"g": desc})
    assert groups == [{"group_id": "e", "state": "Empty", "protocol_type": "consumer",
                       "members": 0},
                      {"group_id": "g", "state": "Stable", "protocol_type": "consumer",
                       "members": 1}]
    view = console_api.group_view(desc, {tp0: 5, tp1: 2}, {tp0: 9})
    assert view["members"] == [{"member_id": "m-1", "client_id": "c1", "host": "/127.0.0.1",
                                "assignment": [["t", 0], ["t", 1]]}]
    assert view["offsets"] == [
        {"topic": "t", "partition": 0, "committed": 5, "log_end_offset": 9, "lag": 4},
        {"topic": "t", "partition": 1, "committed": 2, "log_end_offset": None, "lag": None}]


def _line(when: str, actor: str, message: str) -> str:
    return f"[{when}] INFO [{actor} id=0 epoch=1] {message} (state.change.logger)"


LINES = [
    _line("2026-11-21 23:38:44,309", "Controller",
          "Changed partition t-0 state from NewPartition to OnlinePartition with leader=0 "
          "leader_epoch=0 isr=[0,1]"),
    "garbage that is not a state change line",
    _line("2026-11-21 23:38:45,000", "Broker",
          "Changed partition t-0 state from Leader to Leader with leader=0 leader_epoch=0 "
          "isr=[0]"),
    _line("2026-11-21 23:38:46,000", "Controller",
          "Changed partition t-0 state from OnlinePartition to OnlinePartition with leader=1 "
          "leader_epoch=1 isr=[1]"),
    _line("2026-11-21 23:38:47,000", "Controller",
          "Changed state of replica 1 for partition t-0 from NewReplica to OnlineReplica"),
]


def test_timeline_classifies_and_bounds() -> None:
    events = console_api.timeline(LINES)
    assert [e["what"] for e in events] == ["NewPartition -> OnlinePartition", "isr change",
                                          "leader change", "replica state"]
    assert events[2]["leader"] == 1 and events[2]["isr"] == [1]
    assert events[2]["leader_epoch"] == 1 and events[2]["partition"] == "t-0"
    start = time.mktime(time.strptime("2026-11-21 23:38:44", "%Y-%m-%d %H:%M:%S")) * 1000
    assert events[0]["time_ms"] == start + 309
    assert [e["what"] for e in console_api.timeline(LINES, since_ms=int(start) + 1500)] == [
        "leader change", "replica state"]
    assert len(console_api.timeline(LINES, limit=2)) == 2
    assert console_api.timeline(LINES, limit=0) == []


def test_basic_auth_parsing() -> None:
    good = "Basic " + base64.b64encode(b"alice:s:ecret").decode()
    assert console_api.parse_basic_auth(good) == ("alice", "s:ecret")
    assert console_api.parse_basic_auth(None) is None
    assert console_api.parse_basic_auth("Bearer x") is None
    assert console_api.parse_basic_auth("Basic !!!") is None
    assert console_api.parse_basic_auth("Basic " + base64.b64encode(b"nocolon").decode()) is None


@pytest.mark.parametrize(("token", "origin", "host", "allowed"), [
    ("tok", None, "127.0.0.1:80", True),
    ("tok", "http://127.0.0.1:80", "127.0.0.1:80", True),
    ("tok", "http://evil.example", "127.0.0.1:80", False),
    ("tok", "null", "127.0.0.1:80", False),
    ("bad", None, "127.0.0.1:80", False),
    (None, None, "127.0.0.1:80", False),
    ("", None, "127.0.0.1:80", False),
])
def test_mutation_refusal(token: str | None, origin: str | None, host: str,
                          allowed: bool) -> None:
    refusal = console_api.mutation_refusal(token, "tok", origin, host)
    assert (refusal is None) is allowed


def test_query_parsing() -> None:
    assert console_api.parse_names("a, b,,c") == ["a", "b", "c"]
    assert console_api.parse_names(",".join(str(i) for i in range(100))) == [
        str(i) for i in range(32)]
    assert console_api.parse_since_ms("12") == 12
    assert console_api.parse_since_ms("x") == 0 and console_api.parse_since_ms(None) == 0


def test_http_listener_config() -> None:
    assert parse_http_listener("") is None
    assert parse_http_listener("http://0.0.0.0:9644") == ("0.0.0.0", 9644)
    assert parse_http_listener("http://:0") == ("", 0)
    assert parse_http_listener("http://[::1]:80") == ("::1", 80)
    assert KafkaConfig.from_properties({})["http.listener"] == ""
    for bad in ("9644", "https://h:1", "http://h", "http://h:99999", "http://h:1/x"):
        with pytest.raises(ConfigError, match=r"http\.listener"):
            KafkaConfig.from_properties({"http.listener": bad})


def test_request_log_line() -> None:
    payload = b"\x00\x03\x00\x09\x00\x00\x00\x07\x00\x03abc" + b"body"
    header = request_log.request_header(payload)
    assert header == {"requestApiKey": 3, "requestApiVersion": 9, "correlationId": 7,
                      "clientId": "abc"}
    assert request_log.request_header(b"\x00") == {}
    assert request_log.request_header(b"\x00\x03\x00\x09\x00\x00\x00\x07\xff\xff")[
        "clientId"] is None
    line = request_log.completed_request_line(
        header, request_log.connection_id(("127.0.0.1", 9092), ("127.0.0.1", 5000)),
        total_ms=2.5, local_ms=2.0, response_queue_ms=0.5, security_protocol="PLAINTEXT",
        principal="User:ANONYMOUS", listener="PLAINTEXT", client_software=("odradek", "1"))
    assert line.startswith("Completed request:{")
    desc = json.loads(line.removeprefix("Completed request:"))
    assert desc["connection"] == "127.0.0.1:9092-127.0.0.1:5000-0"
    assert desc["totalTimeMs"] == 2.5 and desc["localTimeMs"] == 2.0
    assert desc["responseQueueTimeMs"] == 0.5
    assert desc["principal"] == "User:ANONYMOUS" and desc["listener"] == "PLAINTEXT"
    assert desc["clientInformation"] == {"softwareName": "odradek", "softwareVersion": "1"}


@pytest.fixture
def restore_loggers() -> object:
    names = {n for names in KAFKA_LOGGERS.values() for n in names} | set(KAFKA_LOGGERS)
    loggers = [logging.getLogger(n) for n in names] + [logging.getLogger()]
    saved = [(lg, lg.level, list(lg.handlers), lg.propagate) for lg in loggers]
    yield
    for lg, level, handlers, propagate in saved:
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate


def test_log_config_json_maps_kafka_names(tmp_path: Path, restore_loggers: object) -> None:
    out = tmp_path / "controller.log"
    cfg = tmp_path / "log.json"
    cfg.write_text(json.dumps({
        "handlers": {"f": {"class": "logging.FileHandler", "filename": str(out)}},
        "loggers": {"kafka.controller": {"level": "DEBUG", "handlers": ["f"]},
                    "kafka.request.logger": {"level": "DEBUG"}}}))
    configure(cfg)
    assert logging.getLogger("odradek.controller").level == logging.DEBUG
    assert logging.getLogger("kafka.request.logger").isEnabledFor(logging.DEBUG)
    logging.getLogger("odradek.controller").debug("elected")
    for h in logging.getLogger("odradek.controller").handlers:
        h.flush()
    assert "elected" in out.read_text()


def test_log_config_ini_and_yaml(tmp_path: Path, restore_loggers: object) -> None:
    ini = tmp_path / "log.ini"
    ini.write_text("[loggers]\nkeys=root,cleaner\n[handlers]\nkeys=h\n[formatters]\nkeys=\n"
                   "[logger_root]\nlevel=WARNING\nhandlers=h\n"
                   "[logger_cleaner]\nlevel=DEBUG\nhandlers=\nqualname=kafka.log.LogCleaner\n"
                   "[handler_h]\nclass=NullHandler\nargs=()\n")
    configure(ini)
    assert logging.getLogger("kafka.log.LogCleaner").level == logging.DEBUG
    yml = tmp_path / "log.yaml"
    yml.write_text("loggers:\n  kafka.server.ReplicaManager:\n    level: ERROR\n")
    configure(yml)
    assert logging.getLogger("odradek.replica_manager").level == logging.ERROR
    assert "odradek.replica_manager" in alias_kafka_loggers()
    with pytest.raises(LogConfigError):
        configure(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"handlers": {"x": {"class": "no.such.Handler"}}}')
    with pytest.raises(LogConfigError, match=r"bad\.json"):
        configure(bad)


def test_merge_timelines_orders_by_time_and_reports_each_broker() -> None:
    own = [{"time_ms": 10, "broker": 0, "partition": "t-0", "what": "a"},
           {"time_ms": 30, "broker": 0, "partition": "t-0", "what": "c"}]
    peers = [console_api.PeerTimeline(2, "http://h:2", error="no answer (timeout)"),
             console_api.PeerTimeline(1, "http://h:1", events=[
                 {"time_ms": 20, "partition": "t-1", "what": "b"}, "junk", {"time_ms": "x"}]),
             console_api.PeerTimeline(3, None, error="no HTTP listener")]
    merged = console_api.merge_timelines(0, own, peers)
    assert [(e["time_ms"], e["broker"]) for e in merged["events"]] == [(10, 0), (20, 1), (30, 0)]
    assert merged["brokers"] == [
        {"id": 0, "ok": True, "error": None, "newest_ms": 30},
        {"id": 1, "ok": True, "error": None, "newest_ms": 20},
        {"id": 2, "ok": False, "error": "no answer (timeout)", "newest_ms": None},
        {"id": 3, "ok": False, "error": "no HTTP listener", "newest_ms": None}]
    assert len(console_api.merge_timelines(0, own, peers, limit=2)["events"]) == 2


def test_http_endpoint_in_the_registration_json() -> None:
    from odradek.coordination import paths
    reg = paths.BrokerRegistration(3, (paths.Endpoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),),
                                   timestamp="1")
    data = console_api.with_http_endpoint(paths.encode_broker_registration(reg),
                                          "http://h:9192")
    assert console_api.http_endpoint_of(data) == "http://h:9192"
    assert paths.decode_broker_registration(3, data) == paths.decode_broker_registration(
        3, paths.encode_broker_registration(reg))  # our own parser ignores the field
    assert console_api.http_endpoint_of(paths.encode_broker_registration(reg)) is None
    assert console_api.http_endpoint_of(b"not json") is None
    assert console_api.with_http_endpoint(b"{}", None) == b"{}"


def test_since_cursors_and_fault_events() -> None:
    from odradek.common.fault_log import FaultEvent
    assert console_api.parse_since_by_broker("0:5,2:7,x:1,3,4:-2") == {0: 5, 2: 7, 4: 0}
    assert console_api.parse_since_by_broker(None) == {}
    events = [FaultEvent("pause", "start", ("broker-1",), "", 1, time=2.5),
              FaultEvent("kill", "instant", ("broker-2",), "", 2, time=1.0)]
    view = console_api.fault_events_view(events)
    assert [(e["time_ms"], e["kind"], e["phase"], e["targets"]) for e in view] == [
        (1000, "kill", "instant", ["broker-2"]), (2500, "pause", "start", ["broker-1"])]
