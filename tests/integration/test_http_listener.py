"""The broker's HTTP listener on in-process clusters: every route and the JSON shapes of
docs/console.md, /metrics, the fault routes (refused without --console-faults or the CSRF
header; kill and restart with them), bad input on the HTTP port never disturbing the Kafka
listeners, and the request log at DEBUG."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from odradek.client import Admin, NewTopic, Producer
from odradek.cluster import Cluster
from odradek.common import TopicPartition
from odradek.console.console_api import CSRF_HEADER
from odradek.console.http_listener import MAX_CONNECTIONS


def http(url: str, method: str = "GET", body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    data = None if body is None else (body if isinstance(body, bytes) else
                                      json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def get_json(url: str, **kwargs: Any) -> Any:
    status, body, _ = http(url, **kwargs)
    assert status == 200, (url, status, body)
    return json.loads(body)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=2) as c:
        with Admin({"bootstrap.servers": c.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("t", 3, 2)])
            admin.wait_for_topics(["t"], 30)
            with Producer({"bootstrap.servers": c.bootstrap_servers}) as producer:
                for i in range(30):
                    producer.send("t", f"v{i}".encode(), partition=i % 3)
                assert producer.flush(30) == 0
            admin.alter_consumer_group_offsets("g", {TopicPartition("t", 0): 4})
        yield c


def test_every_route_and_its_shape(cluster: Cluster) -> None:
    assert len(cluster.http_urls) == 2 and cluster.console_url == cluster.http_urls[0] + "/"
    base = cluster.http_urls[1]
    info = get_json(base + "/api/cluster")
    assert set(info) >= {"cluster_id", "broker_id", "controller", "brokers", "under_replicated",
                         "offline", "faults_enabled", "csrf_token"}
    assert info["broker_id"] == 1 and info["controller"]["id"] == cluster.controller_id()
    assert info["controller"]["epoch"] >= 1
    assert [(b["id"], b["alive"]) for b in info["brokers"]] == [(0, True), (1, True)]
    assert info["faults_enabled"] is False and info["offline"] == []

    topics = get_json(base + "/api/topics")
    t = next(x for x in topics if x["name"] == "t")
    assert t == {"name": "t", "partitions": 3, "replication_factor": 2, "internal": False,
                 "under_replicated": 0}

    detail = get_json(base + "/api/topics/t")
    assert detail["name"] == "t" and "retention.ms" in detail["configs"]
    parts = detail["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert set(p) >= {"partition", "leader", "replicas", "isr", "log_start_offset",
                          "high_watermark", "log_end_offset", "size_bytes", "under_replicated",
                          "offline"}
        assert p["high_watermark"] == 10 and p["log_start_offset"] == 0
        assert 1 in p["replicas"]  # broker 1 hosts every replica (RF 2 of 2)
        assert p["log_end_offset"] == 10 and p["size_bytes"] > 0
    assert http(base + "/api/topics/nope")[0] == 404

    groups = get_json(base + "/api/groups")
    assert {"group_id": "g", "state": "Empty", "protocol_type": "", "members": 0} in groups \
        or any(g["group_id"] == "g" for g in groups)
    group = get_json(base + "/api/groups/g")
    assert group["group_id"] == "g" and group["members"] == []
    assert group["offsets"] == [{"topic": "t", "partition": 0, "committed": 4,
                                 "log_end_offset": 10, "lag": 6}]

    local = get_json(base + "/api/timeline?local=1")
    assert local and {"time_ms", "broker", "partition", "topic", "what", "leader", "isr",
                      "leader_epoch", "line"} <= set(local[0])
    assert {e["broker"] for e in local} == {1}
    assert any(e["partition"] == "t-0" for e in local)
    assert get_json(base + "/api/timeline?local=1&since_ms=99999999999999") == []
    # the cluster's timeline: broker 1's events and broker 0's (the controller's elections),
    # found through the http_endpoint of /brokers/ids/0, ordered by time
    merged = get_json(base + "/api/timeline")
    assert [(b["id"], b["ok"]) for b in merged["brokers"]] == [(1, True), (0, True)]
    events = merged["events"]
    assert {e["broker"] for e in events} == {0, 1}
    assert [e["time_ms"] for e in events] == sorted(e["time_ms"] for e in events)
    newest = {b["id"]: b["newest_ms"] for b in merged["brokers"]}
    later = get_json(base + f"/api/timeline?since=0:{newest[0] + 1},1:{newest[1] + 1}")
    assert later["events"] == []
    assert get_json(base + "/api/faults") == []  # no fault actions: no fault events

    status, body, headers = http(base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    list(text_string_to_metric_families(body.decode()))  # parses

    # /api/metrics/history answers once the broker has a metrics history (odradek.metrics)
    assert http(base + "/api/metrics/history?names=a")[0] in (200, 404)

    status, body, _ = http(base + "/")
    assert status in (200, 404)  # index.html once the console's files are installed
    assert http(base + "/static/../../etc/passwd")[0] in (403, 404)


def test_unknown_paths_methods_and_bodies(cluster: Cluster) -> None:
    base = cluster.http_urls[0]
    assert http(base + "/nope")[0] == 404
    assert http(base + "/api/topics", method="POST", body={})[0] == 405
    assert http(base + "/api/faults/kill")[0] == 405
    token = get_json(base + "/api/cluster")["csrf_token"]
    big = b"x" * (64 * 1024)
    assert http(base + "/api/faults/kill", method="POST", body=big,
                headers={CSRF_HEADER: token})[0] in (403, 413)
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), 5) as s:
        s.sendall(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100)[:10] in (b"HTTP/1.1 4", b"HTTP/1.0 4")


def test_faults_refused_without_the_flag(cluster: Cluster) -> None:
    base = cluster.http_urls[0]
    token = get_json(base + "/api/cluster")["csrf_token"]
    assert http(base + "/api/faults/kill", method="POST", body={"broker": 1},
                headers={CSRF_HEADER: token})[0] == 403
    assert http(base + "/api/faults/kill", method="POST", body={"broker": 1})[0] == 403
    assert cluster.live_brokers() == [0, 1]


def _kafka_metadata_time(cluster: Cluster) -> float:
    start = time.monotonic()
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        assert admin.describe_cluster().brokers
    return time.monotonic() - start


def test_garbage_and_slow_clients_do_not_disturb_kafka(cluster: Cluster) -> None:
    base = cluster.http_urls[0]
    port = int(base.rsplit(":", 1)[1])
    garbage = []
    for payload in (b"\x00\xff" * 5000, b"\x16\x03\x01\x02\x00" + b"\x01" * 600,
                    b"GET / HTTP/9.9\r\n\r\n", b"\r\n" * 1000):
        s = socket.create_connection(("127.0.0.1", port), 5)
        s.sendall(payload)
        garbage.append(s)
    slow = [socket.create_connection(("127.0.0.1", port), 5) for _ in range(20)]
    for s in slow:
        s.sendall(b"GET /api/cluster HTTP/1.1\r\nHost: x\r\n")  # never finished
    try:
        assert _kafka_metadata_time(cluster) < 5
        for s in garbage:  # answered with a 400, or closed (by the header deadline: 10 s)
            s.settimeout(20)
            try:
                reply = s.recv(100)
            except ConnectionResetError:
                reply = b""
            assert reply == b"" or reply[:10] in (b"HTTP/1.1 4", b"HTTP/1.0 4")
        assert get_json(base + "/api/cluster")["broker_id"] == 0  # still serving
        for s in slow:  # the slow clients were dropped by the header deadline
            s.settimeout(20)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(100) == b""
    finally:
        for s in garbage + slow:
            s.close()


def test_request_log_at_debug(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("kafka.request.logger")
    with caplog.at_level(logging.DEBUG, logger="kafka.request.logger"):
        _kafka_metadata_time(cluster)
    lines = [r.getMessage() for r in caplog.records if r.name == "kafka.request.logger"]
    assert lines, "no request log lines"
    desc = json.loads(lines[-1].removeprefix("Completed request:"))
    assert lines[-1].startswith("Completed request:{")
    assert desc["securityProtocol"] == "PLAINTEXT" and desc["listener"] == "PLAINTEXT"
    assert desc["principal"] == "User:ANONYMOUS" and desc["totalTimeMs"] >= 0
    assert {r["requestHeader"]["requestApiKey"] for r in
            map(lambda m: json.loads(m.removeprefix("Completed request:")), lines)} >= {3, 18}
    caplog.clear()
    assert not logger.isEnabledFor(logging.DEBUG)  # measured only when enabled
    _kafka_metadata_time(cluster)
    assert not [r for r in caplog.records if r.name == "kafka.request.logger"]


def test_faults_kill_and_restart_with_the_flag() -> None:
    with Cluster(brokers=3, console_faults=True) as c:
        with Admin({"bootstrap.servers": c.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("f", 1, 3)])
            admin.wait_for_topics(["f"], 30)
        base = c.http_urls[0]
        info = get_json(base + "/api/cluster")
        assert info["faults_enabled"] is True
        assert info["fault_actions"] == ["kill", "restart", "pause", "resume", "isolate", "heal"]
        token = info["csrf_token"]
        other_token = get_json(c.http_urls[1] + "/api/cluster")["csrf_token"]
        assert other_token != token  # per listener
        assert http(base + "/api/faults/kill", method="POST", body={"broker": 2},
                    headers={CSRF_HEADER: token, "Origin": "http://evil.example"})[0] == 403
        assert http(base + "/api/faults/kill", method="POST", body={"broker": 2},
                    headers={CSRF_HEADER: other_token})[0] == 403
        assert http(base + "/api/faults/kill", method="POST", body={"nobody": 2},
                    headers={CSRF_HEADER: token})[0] == 400
        assert http(base + "/api/faults/explode", method="POST", body={"broker": 2},
                    headers={CSRF_HEADER: token})[0] == 404
        origin = base
        status, body, _ = http(base + "/api/faults/kill", method="POST", body={"broker": 2},
                               headers={CSRF_HEADER: token, "Origin": origin})
        assert (status, json.loads(body)) == (200, {"ok": True})
        assert c.live_brokers() == [0, 1]
        faults = get_json(base + "/api/faults")  # the cluster's faults.log
        assert [(f["kind"], f["phase"], f["targets"]) for f in faults] == [
            ("kill", "instant", ["broker-2"])]
        c.wait_for(lambda: {"id": 2, "host": None, "port": None, "alive": False} in
                   get_json(base + "/api/cluster")["brokers"], 30, "broker 2 shown dead")
        assert c.brokers[2].http_url is None  # its listener went with it
        status, body, _ = http(base + "/api/faults/restart", method="POST", body={"broker": 2},
                               headers={CSRF_HEADER: token})
        assert (status, json.loads(body)) == (200, {"ok": True})
        assert c.live_brokers() == [0, 1, 2]
        assert c.brokers[2].http_url is not None and len(c.http_urls) == 3
        c.wait_for(lambda: all(b["alive"] for b in get_json(base + "/api/cluster")["brokers"]),
                   30, "broker 2 back")
        # a broker killing itself through its own console: answered, then done
        own = c.http_urls[1]
        own_token = get_json(own + "/api/cluster")["csrf_token"]
        status, body, _ = http(own + "/api/faults/kill", method="POST", body={"broker": 1},
                               headers={CSRF_HEADER: own_token})
        assert status == 200 and json.loads(body)["ok"] is True
        c.wait_for(lambda: c.live_brokers() == [0, 2], 30, "broker 1 killed")


def test_connection_cap(cluster: Cluster) -> None:
    base = cluster.http_urls[1]
    port = int(base.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port), 5) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # all accepted
        with socket.create_connection(("127.0.0.1", port), 5) as extra:
            extra.settimeout(5)
            extra.sendall(b"GET /api/cluster HTTP/1.1\r\nHost: x\r\n\r\n")
            with contextlib.suppress(ConnectionResetError):
                assert extra.recv(100) == b""  # closed at once, not served
        assert _kafka_metadata_time(cluster) < 5
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert get_json(base + "/api/cluster")["broker_id"] == 1  # served again
