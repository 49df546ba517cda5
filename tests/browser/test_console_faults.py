"""The console's cluster-wide timeline, its fault buttons beyond kill (pause, resume, isolate,
heal: whatever the cluster's fault API advertises) and its login on a secured cluster, end to
end on real in-process clusters in headless chromium."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek import Cluster
from odradek.client import Admin, NewTopic
from odradek.cluster import ClusterAcl, ClusterSecurity
from tests.browser.pages import rows, text, wait
from tests.browser.test_console_cluster import TOPIC, api, console_of, create_topic, start_cluster
from tests.security_support import secure_cluster  # noqa: F401  (a fixture)


@pytest.fixture
def faulty_cluster() -> Iterator[Cluster]:
    c = start_cluster(console_faults=True)
    try:
        yield c
    finally:
        c.stop()


def fault_api(cluster: Cluster) -> Any:
    """The cluster's fault API (Cluster.faults)."""
    return cluster.faults


def broker_row_class(driver: Any, broker: int) -> str:
    found = rows(driver, f'#brokers tr[data-broker="{broker}"]')
    return found[0].get_attribute("class") if found else ""


def test_timeline_merges_every_broker_and_marks_the_kill(driver: Any, faulty_cluster: Cluster,
                                                         screenshot: Any) -> None:
    """The page is served by a broker that is not the controller: the leader elections come
    from the controller's state-change.log, fetched by the serving broker from its peer; the
    killed broker is reported as down, not as an error."""
    cluster = faulty_cluster
    create_topic(cluster)
    controller = cluster.controller_id()
    page_broker = next(i for i in sorted(cluster.brokers) if i != controller)
    topic = api(console_of(cluster, controller), f"/api/topics/{TOPIC}")
    victim, partition = next(((p["leader"], p["partition"]) for p in topic["partitions"]
                              if p["leader"] not in (controller, page_broker)), (None, None))
    if victim is None:  # no partition led by the third broker: kill a follower instead
        victim = next(i for i in sorted(cluster.brokers) if i not in (controller, page_broker))
    driver.get(console_of(cluster, page_broker) + "#timeline")
    rows(driver, "#timeline-changes-only")[0].click()  # every line: the brokers' own too
    wait(driver, lambda d: {r.get_attribute("data-broker") for r in rows(d, "#timeline tr.event")}
         == {str(i) for i in cluster.brokers}, timeout=20)
    rows(driver, "#timeline-changes-only")[0].click()
    wait(driver, lambda d: len(rows(d, "#timeline-brokers .peer.up")) == 3)

    driver.get(console_of(cluster, page_broker) + "#cluster")
    wait(driver, lambda d: rows(d, f"#fault-kill-{victim}"))[0].click()
    cluster.wait_for(lambda: victim not in cluster.live_brokers(), timeout=20,
                     what=f"broker {victim} killed from the console")
    driver.get(console_of(cluster, page_broker) + "#timeline")
    wait(driver, lambda d: rows(d, f'#timeline-brokers .peer.down[data-broker="{victim}"]'),
         timeout=20)
    if partition is not None:  # the controller's election, seen on another broker's page
        wait(driver, lambda d: any(
            r.get_attribute("data-partition") == f"{TOPIC}-{partition}"
            and r.get_attribute("data-broker") == str(controller)
            for r in rows(d, "#timeline tr.event.leader-change")), timeout=20)
    if callable(getattr(fault_api(cluster), "events", None)):  # the fault API keeps a record
        wait(driver, lambda d: rows(d, '#timeline tr.fault-event[data-kind="kill"]'), timeout=20)
        assert rows(driver, '#timeline-lanes line.fault-mark[data-kind="kill"]')
    times = [r.find_elements("css selector", "td")[0].text
             for r in rows(driver, "#timeline tr.event")]
    assert times == sorted(times, reverse=True)  # newest first, every broker's together
    screenshot("timeline-cluster-wide")


def test_pause_button_makes_partitions_under_replicated_then_resume_heals(
        driver: Any, faulty_cluster: Cluster, screenshot: Any) -> None:
    cluster = faulty_cluster
    actions = tuple(fault_api(cluster).actions)
    assert "pause" in actions and "resume" in actions
    create_topic(cluster)
    page_broker = cluster.controller_id()
    victim = next(i for i in sorted(cluster.brokers) if i != page_broker)
    driver.get(console_of(cluster, page_broker))
    for action in actions:  # a button per advertised action, on every broker's row
        wait(driver, lambda d, a=action: rows(d, f"#fault-{a}-{victim}"))
    screenshot("fault-buttons-all")
    rows(driver, f"#fault-pause-{victim}")[0].click()
    # a paused broker stops fetching: its replicas fall out of the ISRs after
    # replica.lag.time.max.ms, the partitions turn under-replicated
    wait(driver, lambda d: text(d, "#under-replicated-count") not in ("0", "\u2013"), timeout=90)
    assert "under-replicated" in rows(driver, "#under-replicated-card")[0].get_attribute("class")
    screenshot("paused-under-replicated")
    driver.get(console_of(cluster, page_broker) + "#timeline")
    wait(driver, lambda d: rows(d, "#timeline tr.event.isr-change"), timeout=20)
    if callable(getattr(fault_api(cluster), "events", None)):
        wait(driver, lambda d: rows(d, '#timeline tr.fault-event[data-kind="pause"]'),
             timeout=20)
    screenshot("paused-timeline")
    driver.get(console_of(cluster, page_broker) + "#cluster")
    wait(driver, lambda d: rows(d, f"#fault-resume-{victim}"))[0].click()
    wait(driver, lambda d: text(d, "#under-replicated-count") == "0"
         and "alive" in broker_row_class(d, victim), timeout=90)
    screenshot("resumed-healthy")


def test_login_on_a_secured_cluster_shows_only_the_users_topics(
        driver: Any, secure_cluster: Callable[..., Cluster], screenshot: Any,  # noqa: F811
        ) -> None:
    security = ClusterSecurity(
        listeners=("SASL_PLAINTEXT",), sasl_mechanisms=("SCRAM-SHA-256",), tls=False,
        users={"alice": "alice-secret"},
        acls=[ClusterAcl("User:alice", "Describe", "Topic", "events"),
              ClusterAcl("User:alice", "DescribeConfigs", "Topic", "events")])
    cluster = secure_cluster(2, security=security)
    with Admin(cluster.client_config()) as admin:  # the brokers' user: a super user
        admin.create_topics([NewTopic("events", 2, 2), NewTopic("secret", 1, 2)])
        admin.wait_for_topics(["events", "secret"], 60)
    assert cluster.console_url
    driver.get(cluster.console_url + "#topics")
    login = wait(driver, lambda d: rows(d, "#login") and rows(d, "#login")[0].is_displayed()
                 and rows(d, "#login")[0])
    assert login
    screenshot("login-form")

    def log_in(user: str, password: str) -> None:
        for css, value in (("#login-user", user), ("#login-password", password)):
            field = rows(driver, css)[0]
            field.clear()
            field.send_keys(value)
        rows(driver, "#login-submit")[0].click()

    log_in("alice", "wrong")
    wait(driver, lambda d: "wrong" in text(d, "#login-error"), timeout=20)
    assert rows(driver, "#topics tr.topic") == []
    log_in("alice", "alice-secret")
    wait(driver, lambda d: [r.text.split()[0] for r in rows(d, "#topics tr.topic")] == ["events"],
         timeout=30)
    assert text(driver, "#user-name") == "alice"
    screenshot("alice-topics")
    # the timeline: both brokers' events, only about the topic alice may describe
    assert not rows(driver, "#login")[0].is_displayed()
    driver.get(cluster.console_url + "#timeline")  # the same page (the hash): still logged in
    wait(driver, lambda d: len(rows(d, "#timeline-brokers .peer.up")) == 2, timeout=30)
    rows(driver, "#timeline-changes-only")[0].click()  # every line, not only the changes
    wait(driver, lambda d: rows(d, '#timeline tr.event[data-partition="events-0"]'), timeout=20)
    time.sleep(2)  # a few more polls
    shown = {r.get_attribute("data-partition").rsplit("-", 1)[0]
             for r in rows(driver, "#timeline tr.event")}
    assert shown == {"events"}, shown
    screenshot("alice-timeline")
