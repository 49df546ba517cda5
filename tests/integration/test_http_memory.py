"""A console page left open for days: a thousand polls of the API (what the page asks every
1.5 s, on kept-alive and on new connections) leave the brokers' memory where it was (traced by
tracemalloc, this process holding the whole in-process cluster), and the listeners keep no
per-connection state afterwards. No speed is asserted."""

from __future__ import annotations

import gc
import http.client
import time
import tracemalloc
from urllib.parse import urlsplit

import pytest

from odradek.client import Admin, NewTopic
from odradek.cluster import Cluster

# what an open console page polls: the cluster, a page's data, the merged timeline (each
# broker asks its peers), the injected faults; and a Prometheus scrape now and then
ROUTES = ["/api/cluster", "/api/topics", "/api/topics/t", "/api/timeline?since=0:0,1:0",
          "/api/faults", "/api/groups", "/api/metrics/history?names=messages_in_per_sec"]
REQUESTS = 1000
BOUND = 256 * 1024  # bytes the HTTP side may keep more after REQUESTS requests
# what serves the console: the listener, its JSON builders, aiohttp, the admin clients behind
# the API (the brokers' own work meanwhile -- replica fetchers in flight, the metrics history
# filling its 10-minute window -- is not the console's and is left out)
HTTP_SIDE = [tracemalloc.Filter(True, pattern, all_frames=True) for pattern in (
    "*/odradek/server/http_listener.py", "*/odradek/server/console_api.py", "*/aiohttp/*",
    "*/odradek/client/*")]


def poll(base: str, n: int) -> None:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        for i in range(n):
            if i % 50 == 0:  # a new connection now and then (a page reloaded, a new tab)
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            path = "/metrics" if i % 100 == 99 else ROUTES[i % len(ROUTES)]
            conn.request("GET", path, headers={"X-Odradek-Console": "1"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, (path, resp.status)
    finally:
        conn.close()


@pytest.mark.timeout(900)
def test_thousands_of_polls_do_not_grow_the_brokers_memory() -> None:
    with Cluster(brokers=2, console_faults=True) as cluster:
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("t", 4, 2)])
            admin.wait_for_topics(["t"], 30)
        base = cluster.http_urls[0]
        poll(base, 200)  # admin clients, peer sessions, caches warm
        time.sleep(0.5)
        gc.collect()
        tracemalloc.start(8)
        try:
            before = tracemalloc.take_snapshot()
            poll(base, REQUESTS)
            time.sleep(0.5)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        before, after = before.filter_traces(HTTP_SIDE), after.filter_traces(HTTP_SIDE)
        diffs = after.compare_to(before, "lineno")
        growth = sum(d.size_diff for d in diffs)
        top = "\n".join(str(d) for d in diffs[:8])
        assert growth < BOUND, f"{growth} bytes more after {REQUESTS} requests:\n{top}"
        # no per-connection state left: the listener's connections are closed
        listener = cluster.brokers[0].http_listener
        assert listener is not None
        cluster.wait_for(lambda: listener.open_connections() == 0, timeout=20,
                         what="the HTTP connections closed")
