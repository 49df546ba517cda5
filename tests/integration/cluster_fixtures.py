"""Module-scoped cluster and admin fixtures shared by integration test modules: an in-process
`odradek.Cluster` started once per module, and an `odradek.client.Admin` on it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from odradek.client import Admin
from odradek.cluster import Cluster


def module_cluster(tmp_path_factory: pytest.TempPathFactory, name: str,
                   overrides: Mapping[str, str], brokers: int = 3) -> Iterator[Cluster]:
    """`yield from` this in a module-scoped fixture: the cluster is stopped after the module."""
    c = Cluster(brokers, data_dir=tmp_path_factory.mktemp(name), overrides=dict(overrides))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def module_admin(cluster: Cluster) -> Iterator[Admin]:
    a = Admin({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        yield a
    finally:
        a.close()
