"""The real clients' settings for a secured `odradek.Cluster`, derived from its
``client_config(user, style="librdkafka")`` (so the cluster, not the test, says what a client
needs), and a bounded poll.

* ``rdkafka``: confluent-kafka's dict (librdkafka names);
* ``kafka_python``/``aiokafka``: the keyword arguments of kafka-python's and aiokafka's clients;
* ``kcat_args``: ``-X k=v`` pairs for Debian's kcat (``sasl.mechanisms``, librdkafka's name);
* ``each_broker``: every running broker's address on the first listener, one per bootstrap;
* ``eventually``: poll a check until it holds or a deadline passes (never a fixed sleep).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from odradek.cluster import Cluster

T = TypeVar("T")


def rdkafka(cluster: Cluster, user: str | None, mechanism: str | None = None,
            bootstrap: str | None = None, listener: str | None = None, **extra: Any
            ) -> dict[str, Any]:
    conf: dict[str, Any] = cluster.client_config(user, mechanism=mechanism, listener=listener,
                                                 style="librdkafka")
    if bootstrap is not None:
        conf["bootstrap.servers"] = bootstrap
    conf.update(extra)
    return conf


def kafka_python(cluster: Cluster, user: str | None, mechanism: str | None = None,
                 bootstrap: str | None = None, listener: str | None = None) -> dict[str, Any]:
    """kafka-python's keyword arguments (SASL_SSL or SASL_PLAINTEXT)."""
    c = rdkafka(cluster, user, mechanism, bootstrap, listener)
    kw: dict[str, Any] = {"bootstrap_servers": c["bootstrap.servers"],
                          "security_protocol": c["security.protocol"],
                          "sasl_mechanism": c["sasl.mechanism"],
                          "sasl_plain_username": c["sasl.username"],
                          "sasl_plain_password": c["sasl.password"]}
    if "ssl.ca.location" in c:
        kw["ssl_cafile"] = c["ssl.ca.location"]
    return kw


def aiokafka(cluster: Cluster, user: str | None, mechanism: str | None = None) -> dict[str, Any]:
    """aiokafka's keyword arguments: kafka-python's, with an ``ssl.SSLContext``."""
    from aiokafka.helpers import create_ssl_context

    kw = kafka_python(cluster, user, mechanism)
    cafile = kw.pop("ssl_cafile", None)
    if cafile is not None:
        kw["ssl_context"] = create_ssl_context(cafile=cafile)
    return kw


def kcat_args(cluster: Cluster, user: str | None, mechanism: str | None = None,
              bootstrap: str | None = None, login: tuple[str, str] | None = None
              ) -> list[str]:
    """kcat's ``-b`` and ``-X`` options for ``user`` (or for ``login``: a user name and password
    the cluster need not know)."""
    c = rdkafka(cluster, user, mechanism, bootstrap)
    c["sasl.mechanisms"] = c.pop("sasl.mechanism")
    if login is not None:
        c["sasl.username"], c["sasl.password"] = login
    args = ["-b", c.pop("bootstrap.servers")]
    for k, v in c.items():
        args += ["-X", f"{k}={v}"]
    return args


def each_broker(cluster: Cluster) -> dict[int, str]:
    """broker id -> its address on the first listener (bootstrap one broker alone)."""
    return {i: f"{cluster.c.host}:{cluster.c.listener_ports[i][0]}"
            for i in cluster.live_brokers()}


def eventually(check: Callable[[], T], timeout: float, what: str,
               done: Callable[[T], bool] = bool, interval: float = 0.2) -> T:
    """``check()``'s first result that is ``done``; AssertionError (with the last result) after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if done(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {result!r})")
        time.sleep(interval)
