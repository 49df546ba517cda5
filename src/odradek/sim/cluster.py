"""Whole brokers on the simulation: odradek's in-process cluster (`cluster.AsyncCluster`, the
same wiring of brokers and the embedded coordination store the tests and the console use) in
the simulated world (`SimBrokers`, its `BrokerEnvironment`).

Each broker is a host of the simulated network (``broker-<id>``): its listeners are served by
`serve_socket_server` (the `Binder` seam of `server.broker.Broker`), its outgoing connections
(controller channel, replica fetchers, transaction markers, controlled shutdown) go through the
network's connector from its host, and it starts no thread or helper process (its log manager
writes checkpoints inline). Clients get the connector of their own host through `connect`. So
the whole cluster runs on the one virtual-time loop, as FoundationDB's simulator runs every
role of a cluster in one process. The disk is real (files in the cluster's data dir).

    async def main(sim: Simulation) -> None:
        async with sim_cluster(sim, brokers=3) as cluster:
            producer = connect(sim, "client-1", AsyncProducer(
                bootstrap_servers=cluster.bootstrap_servers, acks="all"))
            ...
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..cluster.async_cluster import AsyncCluster
from ..security.connector import Connector
from ..server.network import Binder, Listener, SocketServer
from .broker_network import serve_socket_server
from .link_faults import SimLinkFaults
from .simulation import Simulation

__all__ = ["SimBrokers", "broker_host", "connect", "sim_cluster"]

_C = TypeVar("_C")


def broker_host(broker_id: int) -> str:
    """The simulated host of broker `broker_id`."""
    return f"broker-{broker_id}"


class SimBrokers:
    """The simulation as an `AsyncCluster`'s `BrokerEnvironment`; the cluster's link faults
    (`cluster.faults.partition`, `isolate`, `slow`, `pause`) act on the simulated links
    (`SimLinkFaults`)."""

    threads = False

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.link_faults = SimLinkFaults(sim.network)

    def host(self, broker_id: int) -> str:
        return broker_host(broker_id)

    def connector(self, broker_id: int) -> Connector:
        return self.sim.network.connector(broker_host(broker_id))

    def binder(self, broker_id: int) -> Binder:
        network = self.sim.network

        async def bind(server: SocketServer, host: str, port: int, listener: Listener) -> int:
            return serve_socket_server(network, host, port, server, listener).port

        return bind


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
