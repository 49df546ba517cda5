"""An embedded N-broker cluster in one process, on one shared embedded coordination store.

    with odradek.Cluster(brokers=3) as cluster:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.kill_broker(cluster.controller_id())   # crash: no flush, session gone
        cluster.restart_broker(...)

`Cluster` runs its brokers on an asyncio loop in a background thread so that synchronous code
(tests, notebooks, the real clients) can use it; `AsyncCluster` is the same inside a running
loop (``async with AsyncCluster(brokers=3) as cluster:``). Brokers keep their ports across
restarts, so clients reconnect to the same addresses.

A secured cluster (TLS and SASL listeners, SCRAM users, ACLs) is declared with `ClusterSecurity`:

    security = ClusterSecurity(listeners=("SASL_SSL",), sasl_mechanisms=("SCRAM-SHA-256",),
                               users={"alice": "alice-secret"}, acls=[
                                   ClusterAcl("User:alice", "Read", "Topic", "events")])
    with odradek.Cluster(brokers=3, security=security) as cluster:
        producer = confluent_kafka.Producer(cluster.client_config("alice", style="librdkafka"))

Certificates are generated for the cluster with trustme (a CA, one server certificate for
127.0.0.1/localhost, client certificates on request) under `<data_dir>/security/`; SCRAM
credentials and ACLs are written to the store before the brokers start (Kafka's
`/config/users/<user>` and `/kafka-acl/...` znodes); `client_config(user)` gives the properties
a client needs.

The package: `security` (`ClusterSecurity`, `ClusterAcl`, certificates, the brokers' security
configs and the znodes written before they start), `faults` (`ClusterFaults`, the fault API),
`async_cluster` (`AsyncCluster`) and `sync_cluster` (`Cluster`, its loop on a
`odradek.common.loop_thread.LoopThread`, and `BlockingFaults`).
"""

from .async_cluster import AsyncCluster
from .faults import ActiveFault, ClusterAccess, ClusterFaults
from .security import (
    AUTHORIZER,
    BROKER_CERT_NAME,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    ClusterAcl,
    ClusterSecurity,
    SecurityFiles,
    acl_znodes,
    broker_jaas,
    client_jaas,
    scram_user_znodes,
    security_broker_props,
)
from .sync_cluster import BlockingFaults, Cluster

__all__ = [
    "AUTHORIZER",
    "BROKER_CERT_NAME",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "ActiveFault",
    "AsyncCluster",
    "BlockingFaults",
    "Cluster",
    "ClusterAccess",
    "ClusterAcl",
    "ClusterFaults",
    "ClusterSecurity",
    "SecurityFiles",
    "acl_znodes",
    "broker_jaas",
    "client_jaas",
    "scram_user_znodes",
    "security_broker_props",
]
