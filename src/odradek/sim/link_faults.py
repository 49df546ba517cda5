"""The in-process cluster's link faults on the simulated network: `cluster.faults.partition`,
`isolate`, one-way partitions, `slow` (latency and loss), `pause` and `heal`
(cluster/faults.py, docs/faults.md) act on the simulated links between the brokers' hosts and
the clients' instead of on the fault network's TCP proxies, which do not exist in a simulation.

The policy is the fault network's own (`faults.network`: `blocked`, `link_shape`); this module
only applies it to every directed link of the `SimNetwork`, and to each link created later
(a client host seen for the first time). A broker is the host ``broker-<id>``; every other
host is a client (the policy's ``"clients"``). A blocked link is `SimNetwork.cut` (segments
wait, a connection gives up after TCP's timeout, as behind a real cut); a shaped one gets the
rules' extra latency and loss. The store is not on the network: store cuts stay the cluster's
(`ClusterFaults.apply` disconnects the broker's embedded store client).
"""

from __future__ import annotations

from collections.abc import Callable

from ..faults.network import CLIENTS, NetworkState, Node, blocked, link_shape
from .network import Link, SimNetwork

__all__ = ["SimLinkFaults", "node_of_host"]


def node_of_host(host: str) -> Node:
    """The fault policy's node of a simulated host: ``broker-<id>`` is the broker id, every
    other host a client."""
    if host.startswith("broker-") and host[7:].isdigit():
        return int(host[7:])
    return CLIENTS


class SimLinkFaults:
    """`cluster.faults`' `LinkFaults` on a `SimNetwork`. Links it did not cut or shape are
    left alone, so faults injected on the network directly (`SimNetwork.cut`) stay."""

    def __init__(self, network: SimNetwork,
                 node_of: Callable[[str], Node] = node_of_host) -> None:
        self.network = network
        self.node_of = node_of
        self.state = NetworkState()
        self._cut: set[tuple[str, str]] = set()
        self._shaped: set[tuple[str, str]] = set()
        network.link_observers.append(self._apply)

    def set_state(self, state: NetworkState) -> None:
        """The rules in force and the paused nodes changed: every link follows."""
        self.state = state
        for link in list(self.network.links.values()):
            self._apply(link)

    def _apply(self, link: Link) -> None:
        src, dst = self.node_of(link.src), self.node_of(link.dst)
        if src == dst:
            return
        key = (link.src, link.dst)
        net = self.network
        if blocked(self.state, src, dst):
            if key not in self._cut:
                self._cut.add(key)
                net.cut(link.src, link.dst, oneway=True)
        elif key in self._cut:
            self._cut.discard(key)
            net.heal(link.src, link.dst, oneway=True)
        shape = link_shape(self.state, src, dst)
        if not shape.clean:
            self._shaped.add(key)
            link.extra, link.loss = shape.latency_ms / 1000, shape.loss
        elif key in self._shaped:
            self._shaped.discard(key)
            link.extra = link.loss = 0.0
