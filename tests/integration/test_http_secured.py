"""The console on a secured cluster: HTTP basic auth checked against the brokers' SASL
credentials (SCRAM over SASL_SSL, PLAIN over SASL_PLAINTEXT), so a wrong password is a 401 and
ACLs decide which topics a user sees."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from odradek.client import Admin, NewTopic
from odradek.cluster import Cluster, ClusterAcl, ClusterSecurity
from odradek.console.console_api import CSRF_HEADER
from tests.integration.test_http_listener import http
from tests.security_support import secure_cluster  # noqa: F401  (a fixture)


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.parametrize(("listener", "mechanism", "tls"), [
    ("SASL_SSL", "SCRAM-SHA-256", True), ("SASL_PLAINTEXT", "PLAIN", False)])
def test_basic_auth_and_acl_filtered_topics(
        secure_cluster: Callable[..., Cluster], listener: str, mechanism: str,  # noqa: F811
        tls: bool) -> None:
    security = ClusterSecurity(
        listeners=(listener,), sasl_mechanisms=(mechanism,), tls=tls,
        users={"alice": "alice-secret", "bob": "bob-secret"},
        acls=[ClusterAcl("User:alice", "Describe", "Topic", "events"),
              ClusterAcl("User:alice", "DescribeConfigs", "Topic", "events")])
    cluster = secure_cluster(2, security=security, console_faults=True)
    with Admin(cluster.client_config()) as admin:  # the brokers' user: a super user
        admin.create_topics([NewTopic("events", 2, 2), NewTopic("secret", 1, 2)])
        admin.wait_for_topics(["events", "secret"], 60)
    base = cluster.http_urls[0]

    status, _, headers = http(base + "/api/topics")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert http(base + "/api/topics", headers=basic("alice", "wrong"))[0] == 401
    assert http(base + "/api/topics", headers=basic("mallory", "x"))[0] == 401
    assert http(base + "/metrics")[0] == 401

    status, body, _ = http(base + "/api/topics", headers=basic("alice", "alice-secret"))
    assert status == 200
    assert [t["name"] for t in json.loads(body)] == ["events"]
    status, body, _ = http(base + "/api/topics/events", headers=basic("alice", "alice-secret"))
    assert status == 200 and len(json.loads(body)["partitions"]) == 2
    assert http(base + "/api/topics/secret", headers=basic("alice", "alice-secret"))[0] in (
        403, 404)
    status, body, _ = http(base + "/api/topics", headers=basic("bob", "bob-secret"))
    assert status == 200 and json.loads(body) == []
    status, body, _ = http(base + "/api/topics",
                           headers=basic(security.broker_user, security.broker_password))
    assert {t["name"] for t in json.loads(body)} >= {"events", "secret"}

    # the cluster's timeline: each broker checks the forwarded credentials and shows only the
    # topics the user may describe
    status, body, _ = http(base + "/api/timeline", headers=basic("alice", "alice-secret"))
    merged = json.loads(body)
    assert status == 200 and all(b["ok"] for b in merged["brokers"]), merged["brokers"]
    assert {e["topic"] for e in merged["events"]} == {"events"}
    assert {e["broker"] for e in merged["events"]} == {0, 1}
    status, body, _ = http(base + "/api/timeline", headers=basic("bob", "bob-secret"))
    assert status == 200 and json.loads(body)["events"] == []
    assert http(base + "/api/timeline", headers=basic("alice", "wrong"))[0] == 401
    # the page itself carries no data: served without credentials (its form asks for them);
    # the console's own fetches get a 401 without a challenge (no browser dialog)
    assert http(base + "/")[0] in (200, 404)
    status, _, headers = http(base + "/api/cluster", headers={"X-Odradek-Console": "1"})
    assert status == 401 and "WWW-Authenticate" not in headers

    # a fault action needs the credentials too (the CSRF token alone is not enough)
    status, body, _ = http(base + "/api/cluster", headers=basic("alice", "alice-secret"))
    token = json.loads(body)["csrf_token"]
    assert http(base + "/api/faults/kill", method="POST", body={"broker": 1},
                headers={CSRF_HEADER: token})[0] == 401
    assert cluster.live_brokers() == [0, 1]
