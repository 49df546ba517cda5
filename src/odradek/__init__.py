"""odradek: Kafka's ZooKeeper-era high-availability design in Python.

    from odradek import Cluster

    with Cluster(brokers=3) as cluster:
        print(cluster.bootstrap_servers, cluster.controller_id())

``Cluster`` and ``AsyncCluster`` (``odradek.cluster``) are loaded on first use, so that
``import odradek.client`` — which PySpark's Python workers do for every task — does not load the
broker.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "AsyncCluster": "odradek.cluster",
    "Cluster": "odradek.cluster",
    "ClusterAcl": "odradek.cluster",
    "ClusterSecurity": "odradek.cluster",
}

__all__ = ["AsyncCluster", "Cluster", "ClusterAcl", "ClusterSecurity", "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = importlib.import_module(module)
    except AttributeError as e:  # raised inside the import: not "no such name" for the caller
        raise ImportError(f"importing {module} failed: {e}") from e
    value = getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
