"""Connection limits (Kafka's ConnectionQuotas, KIP-402 and the per-IP limits), no I/O.

- `max.connections.per.ip` (and `max.connections.per.ip.overrides`, "host:count,..."): a new
  connection from an address that already has its maximum is closed at once.
- `max.connections` (broker-wide) and `listener.name.<l>.max.connections` (per listener): when
  a limit is reached the listener stops accepting (its acceptor waits for a slot) and pending
  connections wait in the kernel's bounded backlog, as Kafka's acceptor blocks.
- The inter-broker listener is protected when the broker has several listeners: it is held
  only to its own listener limit, and when its connections take the broker over
  `max.connections`, the least recently active connection of another listener is closed
  (Kafka's Processor closing its lowest-priority channel).

All of these are dynamic broker configs (Kafka's DynamicConnectionQuota).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("odradek.network")

INT_MAX = 2**31 - 1


class TooManyConnections(Exception):
    def __init__(self, address: str, limit: int) -> None:
        super().__init__(f"Too many connections from {address} (maximum = {limit})")
        self.address = address
        self.limit = limit


def parse_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: "host:count,host:count" (Kafka's
    parseCsvMap; IPv6 addresses may be given in brackets). Raises ValueError on garbage."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in (text or "").split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"Invalid entry {item!r}: expected host:count")
        try:
            value = int(count.strip())
        except ValueError:
            raise ValueError(f"Invalid connection count {count!r} for {host}") from None
        if value < 0:
            raise ValueError(f"Invalid connection count {value} for {host}: must be >= 0")
        out[host] = value
    return out


def _address(host: str) -> str:
    """An override's host as the address connections come from (Kafka's
    InetAddress.getByName): IP literals as they are, names resolved once."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        try:
            return socket.gethostbyname(host)
        except OSError:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s; ignored", host)
            return host


def normalize_ip(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class ConnectionQuotas:
    def __init__(self, max_connections: int = INT_MAX, max_per_ip: int = INT_MAX,
                 per_ip_overrides: Mapping[str, int] | None = None,
                 listener_limits: Mapping[str, int] | None = None,
                 inter_broker_listener: str | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides: dict[str, int] = {}
        self.update_overrides(per_ip_overrides or {})
        self.listener_limits: dict[str, int] = dict(listener_limits or {})
        self.inter_broker_listener = inter_broker_listener
        self.counts: dict[str, int] = {}
        self.listener_counts: dict[str, int] = {}
        self.total = 0

    def update_overrides(self, overrides: Mapping[str, int]) -> None:
        self.per_ip_overrides = {_address(h): n for h, n in overrides.items()}

    def add_listener(self, name: str) -> None:
        self.listener_counts.setdefault(name, 0)

    def protected(self, listener: str) -> bool:
        """Kafka's protectedListener: the inter-broker listener when there are others."""
        return listener == self.inter_broker_listener and len(self.listener_counts) > 1

    def max_for_ip(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_per_ip)

    def slot_available(self, listener: str) -> bool:
        """Kafka's connectionSlotAvailable: may this listener accept a connection now?"""
        if self.listener_counts.get(listener, 0) >= self.listener_limits.get(listener, INT_MAX):
            return False
        if self.protected(listener):
            return True
        return self.total < self.max_connections

    def inc(self, listener: str, address: str) -> None:
        """Count a new connection; TooManyConnections (still counted: the caller closes it and
        calls dec) when its address is over its per-IP limit."""
        count = self.counts.get(address, 0)
        self.counts[address] = count + 1
        self.total += 1
        self.listener_counts[listener] = self.listener_counts.get(listener, 0) + 1
        limit = self.max_for_ip(address)
        if count >= limit:
            raise TooManyConnections(address, limit)

    def dec(self, listener: str, address: str) -> None:
        count = self.counts.get(address, 0)
        if count <= 1:
            self.counts.pop(address, None)
        else:
            self.counts[address] = count - 1
        self.total = max(0, self.total - 1)
        if listener in self.listener_counts:
            self.listener_counts[listener] = max(0, self.listener_counts[listener] - 1)

    def max_connections_exceeded(self, listener: str) -> bool:
        """Kafka's maxConnectionsExceeded: over the broker-wide limit (the protected listener
        pushed it there), so a connection of this unprotected listener should be closed."""
        return self.total > self.max_connections and not self.protected(listener)

    def get(self, address: str) -> int:
        return self.counts.get(address, 0)


def listener_max_connections(originals: Mapping[str, Any], listener: str) -> int | None:
    """`listener.name.<listener>.max.connections` (lower-case listener name, as Kafka's
    prefix), if set."""
    value = originals.get(f"listener.name.{listener.lower()}.max.connections")
    return None if value is None else int(str(value).strip())


def configure(quotas: ConnectionQuotas, config: Any) -> None:
    """Apply a KafkaConfig's connection limits (at start-up and after each dynamic change)."""
    quotas.max_connections = int(config["max.connections"])
    quotas.max_per_ip = int(config["max.connections.per.ip"])
    quotas.update_overrides(parse_overrides(config["max.connections.per.ip.overrides"]))
    quotas.inter_broker_listener = config.inter_broker_listener_name
    limits: dict[str, int] = {}
    for endpoint in config.listeners:
        limit = listener_max_connections(config.originals, endpoint.listener)
        if limit is not None:
            limits[endpoint.listener] = limit
    quotas.listener_limits = limits
