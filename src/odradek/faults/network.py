"""The fault network's policy: which directed links are cut, slowed or lossy.

A node is a broker id (``int``), ``"store"`` (the in-process coordination store) or
``"clients"`` (everything that reaches the brokers' client listeners from outside). Bytes
flowing *from* node ``x`` *to* node ``y`` travel the directed link ``(x, y)``; a TCP
connection that ``x`` opened to ``y`` uses ``(x, y)`` for its requests and ``(y, x)`` for its
responses.

Everything here is pure: a `Rule` is one injected fault, a `NetworkState` the set of rules
in force plus the paused nodes, and the decisions (`blocked`, `link_shape`, `store_cut`) are
functions of them. The proxies (faults/proxy.py) and the cluster ask these functions; nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Node = int | str
STORE = "store"
CLIENTS = "clients"
SPECIAL_NODES = (STORE, CLIENTS)

#: What TCP does with a lost segment, as the fault network emulates it: the segment arrives
#: one retransmission timeout late (Linux's minimum RTO is 200 ms), and everything behind it
#: on the same connection waits (in-order delivery).
RETRANSMISSION_TIMEOUT_MS = 200

RuleKind = Literal["partition", "one-way-partition", "isolate", "isolate-store", "slow-link"]


def node_name(node: Node) -> str:
    """The fault log's name of a node: ``broker-<id>``, ``store`` or ``clients``."""
    return f"broker-{node}" if isinstance(node, int) else str(node)


def check_node(node: object) -> Node:
    """A node as given by a user (a broker id, ``"store"``, ``"clients"``); ValueError else."""
    if isinstance(node, bool):
        raise ValueError(f"not a node: {node!r}")
    if isinstance(node, int):
        if node < 0:
            raise ValueError(f"not a broker id: {node}")
        return node
    if isinstance(node, str):
        if node in SPECIAL_NODES:
            return node
        if node.startswith("broker-") and node[7:].isdigit():
            return int(node[7:])
        if node.isdigit():
            return int(node)
    raise ValueError(f"not a node: {node!r} (a broker id, 'store' or 'clients')")


def group(nodes: Iterable[object]) -> frozenset[Node]:
    out = frozenset(check_node(n) for n in nodes)
    if not out:
        raise ValueError("a group of nodes cannot be empty")
    return out


@dataclass(frozen=True)
class Rule:
    """One fault on links: traffic from a node of ``sources`` to a node of ``targets`` (and
    back, unless ``one_way``) is cut (``latency_ms`` 0 and ``loss`` 0) or shaped.
    ``targets`` None means every node not in ``sources`` (an isolation)."""

    kind: RuleKind
    sources: frozenset[Node]
    targets: frozenset[Node] | None
    one_way: bool = False
    latency_ms: float = 0.0
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.targets is not None and self.sources & self.targets:
            raise ValueError("a node cannot be on both sides of a partition: "
                             f"{sorted(map(node_name, self.sources & self.targets))}")
        if self.latency_ms < 0 or not 0.0 <= self.loss <= 1.0:
            raise ValueError("latency_ms >= 0 and 0 <= loss <= 1")

    @property
    def cuts(self) -> bool:
        return self.kind != "slow-link"

    def covers(self, src: Node, dst: Node) -> bool:
        """Whether bytes from ``src`` to ``dst`` are subject to this rule."""
        if src == dst:
            return False
        if self._forward(src, dst):
            return True
        return not self.one_way and self._forward(dst, src)

    def _forward(self, src: Node, dst: Node) -> bool:
        if src not in self.sources:
            return False
        return dst not in self.sources if self.targets is None else dst in self.targets

    def targets_for_log(self) -> tuple[str, ...]:
        """The fault log's targets: the nodes of both sides (`describe` tells the sides)."""
        nodes = self.sources | (self.targets or frozenset())
        return tuple(node_name(n) for n in sorted(nodes, key=_order))

    def sides(self) -> str:
        """``broker-1 | broker-2, store`` (``|`` between the sides, ``->`` one way)."""
        a = ", ".join(node_name(n) for n in sorted(self.sources, key=_order))
        b = ("everyone else" if self.targets is None
             else ", ".join(node_name(n) for n in sorted(self.targets, key=_order)))
        return f"{a} {'->' if self.one_way else '|'} {b}"


def _order(node: Node) -> tuple[int, int, str]:
    return (0, node, "") if isinstance(node, int) else (1, 0, node)


@dataclass(frozen=True)
class NetworkState:
    """The rules in force (by fault id) and the paused nodes."""

    rules: Mapping[int, Rule] = field(default_factory=dict)
    paused: frozenset[Node] = frozenset()

    def without(self, fault_id: int) -> NetworkState:
        return NetworkState({k: r for k, r in self.rules.items() if k != fault_id}, self.paused)

    def without_link_rules(self) -> NetworkState:
        return NetworkState({}, self.paused)


def blocked(state: NetworkState, src: Node, dst: Node) -> bool:
    """Whether bytes from ``src`` to ``dst`` are held (a cut link or a paused end)."""
    if src == dst:
        return False
    if src in state.paused or dst in state.paused:
        return True
    return any(r.cuts and r.covers(src, dst) for r in state.rules.values())


@dataclass(frozen=True)
class LinkShape:
    """How a link that is not cut delays its bytes: ``latency_ms`` added to every chunk;
    with probability ``loss`` a chunk is also delayed by one retransmission timeout."""

    latency_ms: float = 0.0
    loss: float = 0.0

    @property
    def clean(self) -> bool:
        return self.latency_ms == 0 and self.loss == 0


def link_shape(state: NetworkState, src: Node, dst: Node) -> LinkShape:
    """The combined shaping of the link ``src -> dst``: latencies add up, losses compound
    (a chunk gets through clean only if every rule lets it)."""
    latency = 0.0
    clean = 1.0
    for r in state.rules.values():
        if not r.cuts and r.covers(src, dst):
            latency += r.latency_ms
            clean *= 1.0 - r.loss
    return LinkShape(latency, 1.0 - clean)


def chunk_delay_ms(shape: LinkShape, draw: float) -> float:
    """The delay of one chunk on a link of ``shape``, ``draw`` a uniform number in [0, 1):
    its latency, plus a retransmission timeout if the draw falls in the loss."""
    lost = draw < shape.loss
    return shape.latency_ms + (RETRANSMISSION_TIMEOUT_MS if lost else 0.0)


def store_cut(state: NetworkState, broker: int) -> bool:
    """Whether a broker has lost its coordination store: either direction cut (a ZooKeeper
    session needs both: requests one way, responses and pings the other)."""
    return blocked(state, broker, STORE) or blocked(state, STORE, broker)


def describe(rule: Rule) -> str:
    """A line for the fault log's ``detail``."""
    parts = [rule.sides()]
    if rule.latency_ms:
        parts.append(f"latency {rule.latency_ms:g} ms")
    if rule.loss:
        parts.append(f"loss {rule.loss:g}")
    return ", ".join(parts)


__all__ = [
    "CLIENTS", "RETRANSMISSION_TIMEOUT_MS", "STORE", "LinkShape", "NetworkState", "Node", "Rule",
    "blocked", "check_node", "chunk_delay_ms", "describe", "group", "link_shape", "node_name",
    "store_cut",
]
