"""pytest plugin (registered as `odradek` through the pytest11 entry point).

    def test_my_pipeline(odradek_cluster):            # 3 brokers, fresh for the test
        producer = Producer({"bootstrap.servers": odradek_cluster.bootstrap_servers})

    @pytest.mark.odradek_cluster(brokers=1, overrides={"num.partitions": "4"})
    def test_small(odradek_cluster): ...

`odradek_cluster_factory(brokers=..., **kwargs)` starts more clusters inside one test; all are
stopped at teardown.

A secured cluster (certificates generated for the test, users and ACLs declared in code):

    @pytest.mark.odradek_cluster(brokers=3, security=ClusterSecurity(
        listeners=("SASL_SSL",), users={"alice": "alice-secret"},
        acls=[ClusterAcl("User:alice", "Write", "Topic", "events")]))
    def test_secured(odradek_cluster):
        producer = Producer(odradek_cluster.client_config("alice", style="librdkafka"))

Faults (docs/faults.md): with ``network_faults=True`` the fixture's cluster can cut, slow and
heal links, pause brokers and cut them from the store:

    @pytest.mark.odradek_cluster(brokers=3, network_faults=True)
    def test_partition(odradek_cluster):
        handle = odradek_cluster.faults.partition([0], [1, 2, "store"])
        ...
        odradek_cluster.faults.heal(handle)

`odradek_secure_cluster` is the same with a default: 3 brokers, one SASL_SSL listener with
SCRAM-SHA-256, users alice and bob, no authorizer (override it with the marker's ``security``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster import Cluster, ClusterSecurity

#: `odradek_secure_cluster`'s default security.
DEFAULT_SECURITY = ClusterSecurity(listeners=("SASL_SSL",), sasl_mechanisms=("SCRAM-SHA-256",),
                                   users={"alice": "alice-secret", "bob": "bob-secret"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "odradek_cluster(brokers=3, **kwargs): options of the odradek_cluster fixture")


@pytest.fixture
def odradek_cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(brokers: int = 3, **kwargs: Any) -> Cluster:
        kwargs.setdefault("data_dir", tmp_path / f"odradek-cluster-{len(started)}")
        cluster = Cluster(brokers, **kwargs).start()
        started.append(cluster)
        return cluster

    yield make
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def odradek_cluster(request: pytest.FixtureRequest,
                    odradek_cluster_factory: Callable[..., Cluster]) -> Cluster:
    marker = request.node.get_closest_marker("odradek_cluster")
    kwargs = dict(marker.kwargs) if marker else {}
    return odradek_cluster_factory(**kwargs)


@pytest.fixture
def odradek_secure_cluster(request: pytest.FixtureRequest,
                           odradek_cluster_factory: Callable[..., Cluster]) -> Cluster:
    """A secured cluster: `DEFAULT_SECURITY` unless the odradek_cluster marker gives one."""
    marker = request.node.get_closest_marker("odradek_cluster")
    kwargs = dict(marker.kwargs) if marker else {}
    kwargs.setdefault("security", DEFAULT_SECURITY)
    return odradek_cluster_factory(**kwargs)
