"""The console's page logic against a stand-in JSON server (tests/browser/fake_api.py): layout,
highlighting, the fault buttons and their CSRF header, the bounded timeline, and a broker that is
briefly unreachable. The end-to-end tests against odradek.Cluster are in test_console_cluster.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.fake_api import FakeApi
from tests.browser.pages import rows, text, wait


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    try:
        yield fake
    finally:
        fake.stop()


def test_cluster_summary_and_highlights(driver: Any, api: FakeApi, screenshot: Any) -> None:
    api.cluster["brokers"][2]["alive"] = False
    api.cluster["under_replicated"] = ["orders-0", "orders-1"]
    driver.get(api.url)
    wait(driver, lambda d: text(d, "#under-replicated-count") == "2")
    assert text(driver, "#controller-id") == "2"
    assert text(driver, "#controller-epoch") == "7"
    assert text(driver, "#offline-count") == "0"
    assert "under-replicated" in rows(driver, "#under-replicated-card")[0].get_attribute("class")
    assert "offline" not in rows(driver, "#offline-card")[0].get_attribute("class")
    brokers = rows(driver, "#brokers tr")
    assert [b.get_attribute("data-broker") for b in brokers] == ["1", "2", "3"]
    assert "dead" in brokers[2].get_attribute("class")
    assert "controller" in brokers[1].text
    assert rows(driver, "button.fault") == []  # faults not enabled: no buttons
    api.cluster["offline"] = ["orders-2"]
    wait(driver, lambda d: text(d, "#offline-count") == "1")
    assert "offline" in rows(driver, "#offline-card")[0].get_attribute("class")
    screenshot("cluster")


def test_fault_buttons_post_with_the_csrf_header(driver: Any, api: FakeApi) -> None:
    api.cluster["faults_enabled"] = True
    driver.get(api.url)
    button = wait(driver, lambda d: rows(d, "#fault-kill-3"))[0]
    assert len(rows(driver, "button.fault")) == 6  # the actions the API offers
    button.click()
    wait(driver, lambda d: api.posts)
    path, headers, body = api.posts[0]
    assert path == "/api/faults/kill"
    assert headers.get("X-Odradek-CSRF") == "token-123"
    assert body == {"broker": 3}
    wait(driver, lambda d: "done" in text(d, "#fault-result"))


def test_topic_detail_rows_are_highlighted(driver: Any, api: FakeApi, screenshot: Any) -> None:
    api.topics = [{"name": "orders", "partitions": 3, "replication_factor": 3, "internal": False,
                   "under_replicated": 1},
                  {"name": "__consumer_offsets", "partitions": 50, "replication_factor": 3,
                   "internal": True, "under_replicated": 0}]
    parts = [{"partition": p, "leader": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
              "log_start_offset": 0, "high_watermark": 10 * p, "log_end_offset": 10 * p,
              "size_bytes": 1000 * p, "under_replicated": False, "offline": False}
             for p in range(3)]
    parts[1].update(isr=[1, 3], under_replicated=True)
    parts[2].update(leader=-1, isr=[2], offline=True)
    api.topic_details["orders"] = {"name": "orders", "configs": {"retention.ms": "1000"},
                                   "partitions": parts}
    driver.get(api.url + "#topics")
    wait(driver, lambda d: len(rows(d, "#topics tr.topic")) == 1)  # internal topics hidden
    assert "under-replicated" in rows(driver, "#topics tr.topic")[0].get_attribute("class")
    rows(driver, "#topics tr.topic")[0].click()
    wait(driver, lambda d: len(rows(d, "#topic-partitions tr")) == 3)
    classes = [r.get_attribute("class") for r in rows(driver, "#topic-partitions tr")]
    assert "under-replicated" not in classes[0] and "offline" not in classes[0]
    assert "under-replicated" in classes[1]
    assert "offline" in classes[2]
    assert "retention.ms" in text(driver, "#topic-configs")
    screenshot("topic")


def test_group_detail_shows_lag(driver: Any, api: FakeApi) -> None:
    api.groups = [{"group_id": "g1", "state": "Stable", "protocol_type": "consumer", "members": 1}]
    api.group_details["g1"] = {
        "group_id": "g1", "state": "Stable",
        "members": [{"member_id": "m-1", "client_id": "c", "host": "/127.0.0.1",
                     "assignment": [["orders", 0], ["orders", 1]]}],
        "offsets": [{"topic": "orders", "partition": 0, "committed": 5, "log_end_offset": 9,
                     "lag": 4},
                    {"topic": "orders", "partition": 1, "committed": 3, "log_end_offset": 3,
                     "lag": 0}]}
    driver.get(api.url + "#groups")
    wait(driver, lambda d: rows(d, "#groups tr.group"))[0].click()
    wait(driver, lambda d: text(d, "#group-total-lag") == "4")
    assert "orders-0, orders-1" in text(driver, "#group-members")
    assert "lagging" in rows(driver, "#group-offsets tr")[0].get_attribute("class")


def test_timeline_is_newest_first_and_bounded(driver: Any, api: FakeApi) -> None:
    now = int(time.time() * 1000)
    api.timeline = [{"time_ms": now - 700 + i, "partition": f"t-{i % 3}", "what": "isr change",
                     "leader": 1, "isr": [1, 2], "leader_epoch": i, "line": f"event {i}"}
                    for i in range(700)]
    driver.get(api.url + "#timeline")
    wait(driver, lambda d: text(d, "#timeline-count") == "500")
    assert len(rows(driver, "#timeline tr")) == 500
    assert "event 699" in rows(driver, "#timeline tr")[0].text
    # a later event is appended at the top, and the oldest kept one falls off
    api.timeline.append({"time_ms": now + 5, "partition": "t-0", "what": "leader change",
                         "leader": 2, "isr": [2], "leader_epoch": 1000, "line": "new leader"})
    wait(driver, lambda d: "new leader" in rows(d, "#timeline tr")[0].text)
    assert len(rows(driver, "#timeline tr")) == 500
    assert rows(driver, "#timeline-svg circle")


def test_metrics_charts(driver: Any, api: FakeApi, screenshot: Any) -> None:
    t = time.time()
    api.history = {  # a rate series (MetricsHistory's) and a counter drawn as its rate
        "messages_in_per_sec": [[t - 60 + i, 10.0] for i in range(61)],
        "kafka_server_brokertopicmetrics_bytesin_total": [[t - 60 + i, 100.0 * i]
                                                          for i in range(61)],
        "under_replicated_partitions": [[t - 60 + i, i % 2] for i in range(61)]}
    driver.get(api.url + "#metrics")
    wait(driver, lambda d: rows(d, "#chart-messages-in polyline"))
    assert text(driver, "#chart-messages-in .last") == "10"
    assert text(driver, "#chart-bytes-in .last") == "100"
    assert rows(driver, "#chart-under-replicated polyline")
    assert "no data" in text(driver, "#chart-offline")
    screenshot("metrics")


def test_unreachable_broker_is_reported_and_polling_resumes(driver: Any, api: FakeApi) -> None:
    driver.get(api.url)
    wait(driver, lambda d: text(d, "#controller-id") == "2")
    api.stop()
    wait(driver, lambda d: "unreachable" in text(d, "#connection"))
    assert "broker 1" in text(driver, "#banner") and "unreachable" in text(driver, "#banner")
    assert text(driver, "#controller-id") == "2"  # the last known state stays on the page
    api.cluster["controller"] = {"id": 3, "epoch": 8}
    api.start()  # the same port again
    wait(driver, lambda d: text(d, "#controller-id") == "3")
    assert not rows(driver, "#banner")[0].is_displayed()


def test_timeline_hides_repeated_state_lines_unless_asked(driver: Any, api: FakeApi) -> None:
    now = int(time.time() * 1000)
    api.timeline = [
        {"time_ms": now - 10, "partition": "t-0", "what": "leader change", "leader": 2,
         "isr": [2], "leader_epoch": 3, "line": "elected"},
        {"time_ms": now, "partition": "t-0", "what": "replica state", "leader": None,
         "isr": None, "leader_epoch": None, "line": "replica offline"}]
    driver.get(api.url + "#timeline")
    wait(driver, lambda d: text(d, "#timeline-count") == "2")
    wait(driver, lambda d: len(rows(d, "#timeline tr.event")) == 1)
    assert "elected" in rows(driver, "#timeline tr.event")[0].text
    rows(driver, "#timeline-changes-only")[0].click()
    wait(driver, lambda d: len(rows(d, "#timeline tr.event")) == 2)
    assert "replica offline" in rows(driver, "#timeline tr.event")[0].text


def test_faults_on_the_timeline_are_drawn_and_bounded(driver: Any, api: FakeApi) -> None:
    """/api/faults' events are rows of the timeline and lines across its lanes; a page left
    open keeps at most 200 of them (the newest)."""
    now = int(time.time() * 1000)
    api.timeline = [{"time_ms": now - 100_000 + i, "broker": 2, "partition": "t-0",
                     "what": "leader change", "leader": i % 3, "isr": [1], "leader_epoch": i,
                     "line": f"event {i}"} for i in range(3)]
    api.faults = [{"time_ms": now - 50_000 + i * 100, "kind": "kill", "phase": "instant",
                   "targets": [f"broker-{i % 3 + 1}"], "detail": f"fault {i}", "fault_id": i}
                  for i in range(300)]
    api.faults.append({"time_ms": now, "kind": "pause", "phase": "start",
                       "targets": ["broker-3"], "detail": "", "fault_id": 999})
    driver.get(api.url + "#timeline")
    wait(driver, lambda d: len(rows(d, "#timeline tr.fault-event")) == 200)
    newest = rows(driver, "#timeline tr")[0]
    assert newest.get_attribute("data-kind") == "pause" and "broker-3" in newest.text
    assert rows(driver, '#timeline-lanes line.fault-mark[data-kind="pause"]')
    # the events of the brokers are there too, with their broker
    assert {r.get_attribute("data-broker") for r in rows(driver, "#timeline tr.event")} == {"2"}
