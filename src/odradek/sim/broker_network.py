"""The broker's network layer on the simulated network: `server/network.py`'s `SocketServer`
and its `Connection` protocol, unchanged, accepting simulated connections.

A real listener binds sockets and runs an accept loop (`loop.sock_accept`); here the simulated
network's listener stands in for both and hands each connection to the server's seam, as the
accept loop does: `SocketServer.admit` (max.connections.per.ip and the broker-wide limit,
Kafka's ConnectionQuotas), then `SocketServer.connection_for` for the protocol. Not modelled
yet: waiting for a connection slot before accepting (`max.connections`), which the real accept
loop does with the kernel's backlog holding the waiting clients; TLS listeners.
"""

from __future__ import annotations

import asyncio

from ..server.network import Listener, SocketServer
from ..server.quotas.connection_quotas import normalize_ip
from .loop import NotSimulated
from .network import SimListener, SimNetwork

__all__ = ["serve_socket_server"]


class _Rejected(asyncio.Protocol):
    """A connection over its address's limit: closed at once, as the accept loop closes it."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


def serve_socket_server(net: SimNetwork, host: str, port: int, server: SocketServer,
                        listener: Listener | None = None) -> SimListener:
    """Serve `server` on the simulated (host, port) under `listener` (PLAINTEXT by default;
    port 0 picks one: the returned listener's `port`)."""
    listener = listener or Listener()
    if listener.ssl_context is not None:
        raise NotSimulated("TLS listeners are not simulated")

    def accept(peer: tuple[str, int]) -> asyncio.BaseProtocol:
        ip = normalize_ip(peer[0])
        if not server.admit(listener, ip):
            return _Rejected()
        return server.connection_for(listener, ip)

    sim_listener = net.listen(host, port, accept, peer_aware=True)
    server.add_listener(listener, sim_listener.port, sim_listener.close)
    return sim_listener
