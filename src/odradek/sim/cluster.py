"""Whole brokers on the simulation: odradek's in-process cluster (`cluster.AsyncCluster`, the
same wiring of brokers and the embedded coordination store the tests and the console use) in
the simulated world (`SimBrokers`, its `BrokerEnvironment`).

Each broker is a host of the simulated network (``broker-<id>``): its listeners are served by
`serve_socket_server` (the `Binder` seam of `server.broker.Broker`), its outgoing connections
(controller channel, replica fetchers, transaction markers, controlled shutdown) go through the
network's connector from its host, and it starts no thread or helper process (its log manager
writes checkpoints inline). Clients get the connector of their own host through `connect`. So
the whole cluster runs on the one virtual-time loop, as FoundationDB's simulator runs every
role of a cluster in one process. The files are real (in the cluster's data dir), the page cache
of the simulated disk (`sim.disk`): `machine_crash(cluster.data_dir / "broker-<id>")` on a
killed broker keeps only what it synced.

    async def main(sim: Simulation) -> None:
        async with sim_cluster(sim, brokers=3) as cluster:
            producer = connect(sim, "client-1", AsyncProducer(
                bootstrap_servers=cluster.bootstrap_servers, acks="all"))
            ...
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..cluster.async_cluster import AsyncCluster
from .brokers import SimBrokers, broker_host
from .simulation import Simulation

__all__ = ["SimBrokers", "broker_host", "connect", "sim_cluster"]

_C = TypeVar("_C")


def sim_cluster(sim: Simulation, brokers: int = 1, **kwargs: Any) -> AsyncCluster:
    """An in-process cluster of `brokers` brokers in `sim` (`AsyncCluster`'s other arguments
    as keywords, except what the simulation does not have: HTTP listeners, the fault network,
    TLS)."""
    return AsyncCluster(brokers, simulation=sim, **kwargs)


def connect(sim: Simulation, host: str, client: _C) -> _C:
    """Make an odradek.client producer, consumer or admin client (not started yet) reach the
    brokers from the simulated `host`; returns it."""
    client.client.connector = sim.network.connector(host)  # type: ignore[attr-defined]
    return client
