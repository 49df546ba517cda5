"""The console end to end: a real `odradek.Cluster` of 3 brokers, each with its HTTP listener,
and headless chromium on the console one of them serves."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from odradek import Cluster
from odradek.client import Admin, Consumer, Producer
from odradek.common import TopicPartition
from tests.browser.pages import rows, text, wait

TOPIC = "orders"


def start_cluster(**kwargs: Any) -> Cluster:
    cluster = Cluster(3, **kwargs).start()
    assert len(cluster.http_urls) == 3, cluster.http_urls
    return cluster


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = start_cluster()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def faulty_cluster() -> Iterator[Cluster]:
    c = start_cluster(console_faults=True)
    try:
        yield c
    finally:
        c.stop()


def console_of(cluster: Cluster, broker_id: int) -> str:
    url = cluster.brokers[broker_id].http_url
    assert url, f"broker {broker_id} has no HTTP listener"
    return url.rstrip("/") + "/"


def api(url: str, path: str) -> Any:
    with urllib.request.urlopen(url.rstrip("/") + path, timeout=10) as r:
        return json.loads(r.read())


def create_topic(cluster: Cluster, partitions: int = 3, records: int = 30) -> None:
    admin = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        admin.create_topic(TOPIC, partitions, 3)
        admin.wait_for_topics([TOPIC])
    finally:
        admin.close()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        for i in range(records):
            producer.send(TOPIC, f"value {i}".encode(), key=str(i).encode())
        producer.flush(30)
    finally:
        producer.close()


def test_console_shows_brokers_and_controller(driver: Any, cluster: Cluster,
                                              screenshot: Any) -> None:
    assert cluster.console_url
    driver.get(cluster.console_url)
    wait(driver, lambda d: len(rows(d, "#brokers tr.broker.alive")) == 3)
    controller = cluster.controller_id()
    wait(driver, lambda d: text(d, "#controller-id") == str(controller))
    assert text(driver, "#under-replicated-count") == "0"
    assert text(driver, "#offline-count") == "0"
    assert "controller" in rows(driver, f'#brokers tr[data-broker="{controller}"]')[0].text
    assert rows(driver, "button.fault") == []  # console_faults not given: no buttons
    screenshot("cluster")


def test_killed_broker_shows_under_replicated_then_healthy(driver: Any, cluster: Cluster,
                                                           screenshot: Any) -> None:
    create_topic(cluster)
    controller = cluster.controller_id()
    # the page from the controller (its state-change log has the leader elections), a victim
    # that leads a partition and is not the controller (so that partition changes leader)
    topic = api(console_of(cluster, controller), f"/api/topics/{TOPIC}")
    victim, partition = next((p["leader"], p["partition"]) for p in topic["partitions"]
                             if p["leader"] != controller)
    driver.get(console_of(cluster, controller))
    wait(driver, lambda d: len(rows(d, "#brokers tr.broker.alive")) == 3)

    cluster.kill_broker(victim)
    wait(driver, lambda d: text(d, "#under-replicated-count") not in ("0", "\u2013"), timeout=20)
    assert "under-replicated" in rows(driver, "#under-replicated-card")[0].get_attribute("class")
    wait(driver, lambda d: "dead" in rows(d, f'#brokers tr[data-broker="{victim}"]')[0]
         .get_attribute("class"))
    screenshot("cluster-broker-killed")

    driver.get(console_of(cluster, controller) + f"#topics/{TOPIC}")
    wait(driver, lambda d: len(rows(d, "#topic-partitions tr.partition.under-replicated")) == 3,
         timeout=20)
    led = rows(driver, f'#topic-partitions tr[data-partition="{partition}"]')[0]
    assert led.find_elements("css selector", "td")[1].text != str(victim)
    screenshot("topic-under-replicated")

    driver.get(console_of(cluster, controller) + "#timeline")
    wait(driver, lambda d: any(r.get_attribute("data-partition") == f"{TOPIC}-{partition}"
                               for r in rows(d, "#timeline tr.event.leader-change")), timeout=20)
    screenshot("timeline")

    cluster.restart_broker(victim)
    driver.get(console_of(cluster, controller))
    wait(driver, lambda d: text(d, "#under-replicated-count") == "0"
         and len(rows(d, "#brokers tr.broker.alive")) == 3, timeout=60)
    assert "under-replicated" not in rows(driver, "#under-replicated-card")[0] \
        .get_attribute("class")


def test_metrics_page_draws_charts(driver: Any, cluster: Cluster, screenshot: Any) -> None:
    create_topic(cluster, records=1)
    page_broker = cluster.controller_id()
    try:
        api(console_of(cluster, page_broker), "/api/metrics/history?names=messages_in_per_sec")
    except urllib.error.HTTPError as e:
        pytest.fail(f"the broker's HTTP listener has no /api/metrics/history ({e}): the "
                    "broker's MetricsHistory is not handed to its HttpListener")
    driver.get(console_of(cluster, page_broker) + "#metrics")
    wait(driver, lambda d: len(rows(d, ".chart")) >= 7)
    # the history is sampled every second: a few points make a line
    wait(driver, lambda d: rows(d, "#chart-active-controller polyline")
         and rows(d, "#chart-under-replicated polyline"), timeout=20)
    assert float(rows(driver, "#chart-active-controller")[0].get_attribute("data-max")) == 1
    # records produced while the page is open show as messages in /s on the serving broker
    # (it leads one of the topic's 3 partitions)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        deadline = time.monotonic() + 20
        while float(rows(driver, "#chart-messages-in")[0].get_attribute("data-max")) <= 0:
            assert time.monotonic() < deadline, "no messages in /s charted"
            for i in range(100):
                producer.send(TOPIC, b"x", key=str(i).encode())
            producer.flush(10)
            time.sleep(0.5)
    finally:
        producer.close()
    time.sleep(2)  # a few more samples
    screenshot("metrics")


def test_fault_button_kills_a_broker(driver: Any, faulty_cluster: Cluster,
                                     screenshot: Any) -> None:
    cluster = faulty_cluster
    page_broker = cluster.controller_id()
    victim = next(i for i in sorted(cluster.brokers) if i != page_broker)
    create_topic(cluster, partitions=1, records=1)  # the victim is a replica: listed when dead
    driver.get(console_of(cluster, page_broker))
    button = wait(driver, lambda d: rows(d, f"#fault-kill-{victim}"))[0]
    screenshot("fault-buttons")
    button.click()
    cluster.wait_for(lambda: victim not in cluster.live_brokers(), timeout=20,
                     what=f"broker {victim} killed from the console")
    wait(driver, lambda d: "dead" in rows(d, f'#brokers tr[data-broker="{victim}"]')[0]
         .get_attribute("class"), timeout=20)
    wait(driver, lambda d: "done" in text(d, "#fault-result"))


def test_page_says_when_its_own_broker_dies_and_recovers(driver: Any, faulty_cluster: Cluster,
                                                         screenshot: Any) -> None:
    cluster = faulty_cluster
    page_broker = next(i for i in sorted(cluster.brokers) if i != cluster.controller_id())
    driver.get(console_of(cluster, page_broker))
    wait(driver, lambda d: f"broker {page_broker}" in text(d, "#connection"))
    wait(driver, lambda d: rows(d, f"#fault-kill-{page_broker}"))[0].click()  # itself
    cluster.wait_for(lambda: page_broker not in cluster.live_brokers(), timeout=20,
                     what=f"broker {page_broker} killed from its own console")
    wait(driver, lambda d: text(d, "#connection") == "unreachable", timeout=20)
    banner = text(driver, "#banner")
    assert f"broker {page_broker}" in banner and "unreachable" in banner, banner
    screenshot("own-broker-unreachable")
    cluster.restart_broker(page_broker)  # the same HTTP port again
    wait(driver, lambda d: f"broker {page_broker}" in text(d, "#connection")
         and len(rows(d, "#brokers tr.broker.alive")) == 3, timeout=30)
    assert not rows(driver, "#banner")[0].is_displayed()


def test_group_page_shows_members_and_lag(driver: Any, cluster: Cluster,
                                          screenshot: Any) -> None:
    create_topic(cluster, records=30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "console-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": "false",
                         "client.id": "console-test"})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 3:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.5)
        # committed offset 0 on each partition: the lag is every record, 30 in all
        consumer.commit({TopicPartition(TOPIC, p): 0 for p in range(3)})
        driver.get(cluster.console_url + "#groups")
        wait(driver, lambda d: rows(d, "#groups tr.group"), timeout=20)[0].click()
        wait(driver, lambda d: text(d, "#group-total-lag") == "30", timeout=20)
        assert text(driver, "#group-name") == "console-g"
        assert "console-test" in text(driver, "#group-members")
        assert f"{TOPIC}-0" in text(driver, "#group-members")
        assert len(rows(driver, "#group-offsets tr.offset")) == 3
        screenshot("group")
    finally:
        consumer.close()
