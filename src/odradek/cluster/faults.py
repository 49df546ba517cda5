"""The fault API of an in-process cluster (`ClusterFaults`, docs/faults.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..common.fault_log import FAULT_LOG_NAME, FaultEvent, FaultLog, read_fault_events
from ..coordination.embedded import EmbeddedStore
from ..faults.network import (
    STORE,
    NetworkState,
    Node,
    Rule,
    describe,
    group,
    node_name,
    store_cut,
)

if TYPE_CHECKING:
    from ..faults.proxy import FaultNetwork
    from ..server.broker import Broker


class LinkFaults(Protocol):
    """Where link faults act: the fault network's proxies (`FaultNetwork`), or a simulated
    network's links (odradek.sim's `SimLinkFaults`). Given the rules in force and the paused
    nodes each time they change."""

    def set_state(self, state: NetworkState) -> None: ...


class ClusterAccess(Protocol):
    """What the fault API uses of its cluster (`AsyncCluster`)."""

    data_dir: Path
    brokers: dict[int, Broker]
    network: FaultNetwork | None

    @property
    def link_faults(self) -> LinkFaults | None: ...

    async def kill_broker(self, broker_id: int) -> None: ...

    async def restart_broker(self, broker_id: int, clean: bool = True) -> Broker: ...


@dataclass(frozen=True)
class ActiveFault:
    """A fault in force: what `ClusterFaults.active()` lists and `heal` takes back."""

    fault_id: int
    kind: str
    targets: tuple[str, ...]
    detail: str = ""


class ClusterFaults:
    """Faults injected into an in-process cluster (docs/faults.md): crash and restart brokers,
    pause them, cut or slow the links between groups of nodes (broker ids, ``"store"``,
    ``"clients"``), cut a broker from the coordination store, expire its session.

    Link faults need ``AsyncCluster(network_faults=True)`` (every broker's listeners are then
    reached through `LinkProxy` forwarders) or a simulated cluster
    (``AsyncCluster(simulation=...)``, whose environment maps them onto the simulated network's
    links); cuts between brokers and the store alone work on any cluster. Every fault is
    written to ``<data_dir>/faults.log`` (common/fault_log.py).

    It is also the console's entry point (`FaultActions`: ``actions`` and ``run``), given to
    the brokers' HTTP listeners with ``console_faults=True``. Its tasks are the cluster's, so a
    broker killing itself through its own console still completes the action.
    """

    actions = ("kill", "restart", "pause", "resume", "isolate", "heal")

    def __init__(self, cluster: ClusterAccess) -> None:
        self._cluster = cluster
        self._tasks: set[asyncio.Task[None]] = set()
        self.log = FaultLog(cluster.data_dir / FAULT_LOG_NAME)
        self._rules: dict[int, Rule] = {}
        self._active: dict[int, ActiveFault] = {}
        self._paused: dict[int, int] = {}  # broker id -> its pause's fault id
        self._store_cut: dict[int, EmbeddedStore] = {}  # the store clients we disconnected

    # -- the console's entry point ----------------------------------------------------------
    def run(self, action: str, broker_id: int) -> asyncio.Future[None]:
        if action not in self.actions:
            raise ValueError(f"unknown fault action {action!r}")
        if broker_id not in self._cluster.brokers:
            raise ValueError(f"no broker {broker_id}")
        if action in ("pause", "isolate") and self._cluster.link_faults is None:
            raise ValueError(f"{action} needs the fault network (network_faults=True)")
        task = asyncio.ensure_future(self._run(action, broker_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, action: str, broker_id: int) -> None:
        await asyncio.sleep(0)  # the request that asked is answered first
        if action == "kill":
            if self._cluster.brokers[broker_id].started:
                await self.kill(broker_id)
        elif action == "restart":
            await self.restart(broker_id)
        elif action == "pause":
            await self.pause(broker_id)
        elif action == "resume":
            await self.resume(broker_id)
        elif action == "isolate":
            await self.isolate(broker_id)
        else:  # heal: every link fault naming the broker
            for fault_id, rule in list(self._rules.items()):
                if broker_id in rule.sources or broker_id in (rule.targets or ()):
                    await self.heal(fault_id)

    def events(self) -> list[FaultEvent]:
        """Every fault event written so far (``<data_dir>/faults.log``)."""
        return read_fault_events(self.log.path)

    def active(self) -> list[ActiveFault]:
        """The faults in force (link faults and pauses), oldest first."""
        return [self._active[k] for k in sorted(self._active)]

    # -- brokers ----------------------------------------------------------------------------
    def _broker(self, broker_id: int) -> Broker:
        broker = self._cluster.brokers.get(broker_id)
        if broker is None:
            raise ValueError(f"no broker {broker_id}")
        return broker

    async def kill(self, broker_id: int) -> None:
        """A crash (`AsyncCluster.kill_broker`): connections and session dropped, no flush."""
        self._broker(broker_id)
        self.log.instant("kill", [node_name(broker_id)])
        await self._cluster.kill_broker(broker_id)

    async def restart(self, broker_id: int, clean: bool = True) -> None:
        """A clean stop if running (a kill with ``clean=False``), then a start; link faults in
        force still apply to the restarted broker."""
        self.log.instant("restart", [node_name(broker_id)], "" if clean else "after a crash")
        await self._cluster.restart_broker(broker_id, clean)
        self.apply()

    async def pause(self, broker_id: int) -> None:
        """Every link to and from the broker held, its store connection suspended (its session
        expires after zookeeper.session.timeout.ms). Unlike SIGSTOP, the broker's own timers
        and tasks keep running: it just hears nothing and is heard by nobody."""
        self._need_network("pause")
        self._broker(broker_id)
        if broker_id in self._paused:
            return
        fault_id = self.log.start("pause", [node_name(broker_id)])
        self._paused[broker_id] = fault_id
        self._active[fault_id] = ActiveFault(fault_id, "pause", (node_name(broker_id),))
        self.apply()

    async def resume(self, broker_id: int) -> None:
        """Release what `pause` held."""
        fault_id = self._paused.pop(broker_id, None)
        if fault_id is None:
            return
        self._active.pop(fault_id, None)
        self.apply()
        self.log.end(fault_id, "pause", [node_name(broker_id)])

    async def expire_session(self, broker_id: int) -> None:
        """The store expires the broker's session now (its ephemeral znodes go, watches fire)."""
        broker = self._broker(broker_id)
        store = broker.store
        if not isinstance(store, EmbeddedStore):
            raise RuntimeError(f"broker {broker_id} has no in-process store session")
        self.log.instant("expire-session", [node_name(broker_id), STORE])
        store.expire_session()

    # -- links ----------------------------------------------------------------------------------
    async def partition(self, side_a: Iterable[Node], side_b: Iterable[Node] | None = None, *,
                        one_way: bool = False) -> int:
        """Cut every link between a node of ``side_a`` and one of ``side_b`` (``None``: every
        other node); ``one_way``: only bytes from ``side_a`` to ``side_b`` are held. Nodes are
        broker ids, ``"store"`` and ``"clients"``. Returns the fault's handle for `heal`."""
        a = group(side_a)
        b = None if side_b is None else group(side_b)
        kind = "one-way-partition" if one_way else "partition"
        return self._add(Rule(kind, a, b, one_way=one_way))

    async def isolate(self, broker_id: int) -> int:
        """Cut the broker from every other node: brokers, the store, clients."""
        self._broker(broker_id)
        return self._add(Rule("isolate", frozenset({broker_id}), None))

    async def isolate_from_store(self, broker_id: int) -> int:
        """The broker keeps its brokers and clients and loses the store: its operations fail
        with connection loss and the store expires its session after
        zookeeper.session.timeout.ms; healing sooner keeps the session."""
        self._broker(broker_id)
        return self._add(Rule("isolate-store", frozenset({broker_id}), frozenset({STORE})))

    async def slow(self, side_a: Iterable[Node], side_b: Iterable[Node], *,
                   latency_ms: float = 0.0, loss: float = 0.0, one_way: bool = False) -> int:
        """Every chunk between the two sides (both ways unless ``one_way``) arrives
        ``latency_ms`` late; with probability ``loss`` it is one retransmission timeout
        (200 ms) later still, and what follows it waits (TCP's view of a lost segment)."""
        a, b = group(side_a), group(side_b)
        if STORE in a | b:
            raise ValueError("slow links to the store are not emulated (cut them instead)")
        return self._add(Rule("slow-link", a, b, one_way=one_way, latency_ms=float(latency_ms),
                              loss=float(loss)))

    async def heal(self, handle: int | None = None) -> None:
        """Take back one link fault (its handle), or every link fault (pauses stay: `resume`)."""
        ids = list(self._rules) if handle is None else [handle]
        for fault_id in ids:
            rule = self._rules.pop(fault_id, None)
            if rule is None:
                if handle is not None and fault_id not in self._active:
                    raise ValueError(f"no active link fault {fault_id}")
                continue
            fault = self._active.pop(fault_id)
            self.apply()
            self.log.end(fault_id, fault.kind, fault.targets)

    def _need_network(self, what: str) -> None:
        if self._cluster.link_faults is None:
            raise RuntimeError(f"{what} needs the cluster's links to pass through the fault "
                               "network: AsyncCluster(..., network_faults=True), or a "
                               "simulated network (AsyncCluster(..., simulation=...))")

    def _add(self, rule: Rule) -> int:
        store_only = rule.targets == frozenset({STORE}) or rule.sources == frozenset({STORE})
        if not store_only:
            self._need_network(rule.kind)
        targets = rule.targets_for_log()
        fault_id = self.log.start(rule.kind, targets, describe(rule))
        self._rules[fault_id] = rule
        self._active[fault_id] = ActiveFault(fault_id, rule.kind, targets, describe(rule))
        self.apply()
        return fault_id

    def _state(self) -> NetworkState:
        return NetworkState(dict(self._rules), frozenset(self._paused))

    def apply(self) -> None:
        """Push the policy to the proxies' gates and to the brokers' store clients (the cluster
        calls it when a broker starts, so the faults in force apply to it too)."""
        state = self._state()
        links = self._cluster.link_faults
        if links is not None:
            links.set_state(state)
        for broker_id, broker in self._cluster.brokers.items():
            store = broker.store
            if not broker.started or not isinstance(store, EmbeddedStore):
                self._store_cut.pop(broker_id, None)
                continue
            if store_cut(state, broker_id):
                if self._store_cut.get(broker_id) is not store:  # a restart: a new client
                    self._store_cut[broker_id] = store
                    store.disconnect()
            elif self._store_cut.pop(broker_id, None) is store:
                store.reconnect()

    async def reset(self) -> None:
        """Heal every link fault and resume every paused broker (before the cluster stops)."""
        await self.heal()
        for broker_id in list(self._paused):
            await self.resume(broker_id)
