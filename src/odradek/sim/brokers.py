"""The simulated network as an in-process cluster's `BrokerEnvironment` (cluster.AsyncCluster):
each broker is the host ``broker-<id>``, its listeners served by `serve_socket_server` (the
`Binder` seam of `server.broker.Broker`), its outgoing connections (controller channel,
replica fetchers, transaction markers, controlled shutdown) made through the network's
connector from its host, no thread or helper process started, and the cluster's link faults
applied to the simulated links (`SimLinkFaults`). `Simulation.broker_environment` gives one.
"""

from __future__ import annotations

from ..security.connector import Connector
from ..server.network import Binder, Listener, SocketServer
from .broker_network import serve_socket_server
from .link_faults import SimLinkFaults
from .network import SimNetwork

__all__ = ["SimBrokers", "broker_host"]


def broker_host(broker_id: int) -> str:
    """The simulated host of broker `broker_id`."""
    return f"broker-{broker_id}"


class SimBrokers:
    """The simulation as an `AsyncCluster`'s `BrokerEnvironment`; the cluster's link faults
    (`cluster.faults.partition`, `isolate`, `slow`, `pause`) act on the simulated links
    (`SimLinkFaults`)."""

    threads = False

    def __init__(self, network: SimNetwork) -> None:
        self.network = network
        self.link_faults = SimLinkFaults(network)

    def host(self, broker_id: int) -> str:
        return broker_host(broker_id)

    def connector(self, broker_id: int) -> Connector:
        return self.network.connector(broker_host(broker_id))

    def binder(self, broker_id: int) -> Binder:
        network = self.network

        async def bind(server: SocketServer, host: str, port: int, listener: Listener) -> int:
            return serve_socket_server(network, host, port, server, listener).port

        return bind
