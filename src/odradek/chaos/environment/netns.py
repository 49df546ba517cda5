"""Network faults between processes with Linux network namespaces.

The topology: one bridge in the root namespace, created for the run (``odb<suffix>``), holding
a /24 of 10.77.0.0/16 not in use on the machine; its own address (``.1``) is the ``clients``
group (the chaos process and its Kafka clients stay in the root namespace). Every other node
(``broker-<id>``, ``zk-<n>``) gets a namespace of its own (``odk-<suffix>-<node>``) joined to
the bridge by a veth pair (``eth0`` inside, ``od<suffix><index>`` outside) with an address of
its own (``.10`` and up). Processes run inside with ``ip netns exec``.

Faults are declared, not patched in: the active faults (`LinkFault`) are turned by pure
functions into the complete filter rules of every namespace (`nft_rules`, or `blackhole_routes`
where ``nft`` is missing) and the traffic shaping of every interface (`shaping`), and the
edge (`Network.apply`) replaces each namespace's rules with the new ones. Healing a fault is
removing it from the set and applying again; `heal()` clears them all.

* ``cut(a, b)``: nothing passes between a and b, either way;
* ``cut_one_way(src, dst)``: packets from src to dst are dropped (nftables in dst's namespace;
  without nft, a blackhole route to dst in src's namespace). TCP needs both directions, so a
  connection either side opens stalls: what differs is who sees it time out first;
* ``isolate(node)``: node from every other node, clients included;
* ``slow(a, b, latency_ms, loss)``: a random share of the packets between a and b dropped
  (nftables ``numgen random``) and, with the ``sch_netem`` qdisc, a delay added on both nodes'
  interfaces (netem is per interface: every peer of a and b sees the delay). Where netem is
  missing the delay is skipped and `Network.netem_problem` says why.

Everything lives in namespaces, a bridge and addresses created here, all removed by `close()`
(also at exit). Needs root (``CAP_NET_ADMIN``); `NetnsUnavailable` says why not.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "CLIENTS",
    "LinkFault",
    "NetnsUnavailable",
    "Network",
    "blackhole_routes",
    "netns_problem",
    "nft_rules",
    "nft_script",
    "shaping",
]

CLIENTS = "clients"  # the root namespace's group: the bridge's own address
NFT_TABLE = "odradek_faults"
NS_IFACE = "eth0"
_SUBNET = ipaddress.ip_network("10.77.0.0/16")
_FAULT_KINDS = ("cut", "one-way", "isolate", "slow")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used here (not root, no iproute2, a kernel without)."""


@dataclass(frozen=True)
class LinkFault:
    """One active network fault. ``kind``: cut (a and b, both ways), one-way (from a to b),
    isolate (a from everyone), slow (between a and b: ``loss`` in [0, 1], ``latency_ms``)."""

    kind: str
    a: str
    b: str | None = None
    latency_ms: int = 0
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in _FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {_FAULT_KINDS}, not {self.kind!r}")
        if (self.kind == "isolate") != (self.b is None):
            raise ValueError(f"{self.kind} needs {'one node' if self.kind == 'isolate' else 'two'}")
        if self.b is not None and self.a == self.b:
            raise ValueError(f"{self.kind} of {self.a} with itself")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss {self.loss} is not in [0, 1]")

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.a,) if self.b is None else (self.a, self.b)


# -- decisions (pure) -----------------------------------------------------------------------------


def nft_rules(addresses: Mapping[str, str], namespaced: Iterable[str],
              faults: Iterable[LinkFault]) -> dict[str, list[str]]:
    """The nftables rules (``<chain> <match> drop``) each namespaced node needs for `faults`.
    `addresses`: node -> IPv4 address (``clients`` too); `namespaced`: the nodes with a
    namespace of their own (``clients`` has none, so rules about it go on the other side).
    Every namespaced node has an entry, empty when nothing touches it."""
    ns = set(namespaced)
    rules: dict[str, list[str]] = {n: [] for n in sorted(ns)}

    def add(node: str, rule: str) -> None:
        if rule not in rules[node]:
            rules[node].append(rule)

    def both_ways(here: str, peer: str, action: str = "drop") -> None:
        add(here, f"input ip saddr {addresses[peer]} {action}")
        add(here, f"output ip daddr {addresses[peer]} {action}")

    for f in faults:
        for n in f.targets:
            if n not in addresses:
                raise KeyError(f"unknown node {n!r}; nodes: {sorted(addresses)}")
        if f.kind == "cut":
            assert f.b is not None
            for here, peer in ((f.a, f.b), (f.b, f.a)):
                if here in ns:
                    both_ways(here, peer)
        elif f.kind == "one-way":
            assert f.b is not None
            if f.b in ns:
                add(f.b, f"input ip saddr {addresses[f.a]} drop")
            else:
                add(f.a, f"output ip daddr {addresses[f.b]} drop")
        elif f.kind == "isolate":
            if f.a in ns:
                add(f.a, f'input iifname "{NS_IFACE}" drop')
                add(f.a, f'output oifname "{NS_IFACE}" drop')
            else:
                for other in sorted(ns):
                    both_ways(other, f.a)
        elif f.kind == "slow" and f.loss > 0:
            assert f.b is not None
            percent = max(1, min(100, round(f.loss * 100)))
            for here, peer in ((f.b, f.a), (f.a, f.b)):
                if here in ns:
                    add(here, f"input ip saddr {addresses[peer]} numgen random mod 100 "
                              f"< {percent} drop")
    return rules


def nft_script(rules: Sequence[str]) -> str:
    """The ``nft -f -`` script that replaces a namespace's fault table with `rules` in one
    transaction (the table is created, deleted and made anew, so it need not exist)."""
    lines = [f"add table inet {NFT_TABLE}", f"delete table inet {NFT_TABLE}",
             f"add table inet {NFT_TABLE}"]
    for chain in ("input", "output"):
        lines.append(f"add chain inet {NFT_TABLE} {chain} "
                     f"{{ type filter hook {chain} priority 0 ; policy accept ; }}")
    lines += [f"add rule inet {NFT_TABLE} {r}" for r in rules]
    return "\n".join(lines) + "\n"


def blackhole_routes(addresses: Mapping[str, str], namespaced: Iterable[str],
                     faults: Iterable[LinkFault]) -> dict[str, set[str]]:
    """Without nftables: the addresses each node (``clients``: the root namespace) must route
    to a blackhole for `faults`. A route only drops what a node sends, so a one-way cut from
    src to dst is a blackhole to dst in src; packet loss cannot be expressed (ValueError)."""
    ns = set(namespaced)
    nodes = sorted(ns | {CLIENTS}) if CLIENTS in addresses else sorted(ns)
    routes: dict[str, set[str]] = {n: set() for n in nodes}
    for f in faults:
        if f.kind == "cut":
            assert f.b is not None
            routes[f.a].add(addresses[f.b])
            routes[f.b].add(addresses[f.a])
        elif f.kind == "one-way":
            assert f.b is not None
            routes[f.a].add(addresses[f.b])
        elif f.kind == "isolate":
            for other in nodes:
                if other != f.a:
                    routes[f.a].add(addresses[other])
                    routes[other].add(addresses[f.a])
        elif f.kind == "slow" and f.loss > 0:
            raise ValueError("packet loss needs nftables (`apt-get install nftables`)")
    return routes


def shaping(namespaced: Iterable[str], faults: Iterable[LinkFault]) -> dict[str, int]:
    """The netem delay (ms) on each namespaced node's interface: the largest latency of the
    slow links it is on; 0: no qdisc. Only nodes with a namespace can be shaped."""
    ns = set(namespaced)
    delay = {n: 0 for n in sorted(ns)}
    for f in faults:
        if f.kind == "slow" and f.latency_ms > 0:
            for n in f.targets:
                if n in ns:
                    delay[n] = max(delay[n], f.latency_ms)
    return delay


def pick_subnet(used: Iterable[str], rng: random.Random) -> ipaddress.IPv4Network:
    """A /24 of 10.77.0.0/16 none of whose addresses is in `used` (addresses on the machine)."""
    taken = {ipaddress.ip_network(f"{a}/24", strict=False) for a in used
             if ipaddress.ip_address(a) in _SUBNET}
    free = [n for n in _SUBNET.subnets(new_prefix=24) if n not in taken
            and n.network_address.packed[2] not in (0, 255)]
    if not free:
        raise NetnsUnavailable("every /24 of 10.77.0.0/16 is in use")
    return rng.choice(free)


def netns_problem() -> str | None:
    """Why network namespaces cannot be used here, or None (a cheap check: root and ip)."""
    if os.geteuid() != 0:
        return "network faults need root (CAP_NET_ADMIN to create namespaces)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) not found"
    return None


# -- the edge: ip, nft, tc ------------------------------------------------------------------------


def _run(cmd: Sequence[str], stdin: str | None = None, check: bool = True
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()
        if "Operation not permitted" in msg:
            raise NetnsUnavailable(f"`{' '.join(cmd)}`: {msg} (network faults need root)")
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {msg}")
    return proc


_open: set[Network] = set()


@atexit.register
def _remove_leftovers() -> None:
    for net in list(_open):
        net.close()


@dataclass
class Network:
    """The bridge and the namespaces of one run. `add(node)` gives a node its namespace and
    address; `exec_prefix(node)` is the command prefix that runs a process inside it."""

    suffix: str = field(default_factory=lambda: f"{random.randrange(16 ** 4):04x}")
    use_nft: bool | None = None  # None: nft when installed
    addresses: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)  # node -> namespace name
    faults: list[LinkFault] = field(default_factory=list)
    netem_problem: str | None = None
    _applied_nft: dict[str, list[str]] = field(default_factory=dict)
    _applied_routes: dict[str, set[str]] = field(default_factory=dict)
    _applied_delay: dict[str, int] = field(default_factory=dict)
    _veths: list[str] = field(default_factory=list)
    _subnet: ipaddress.IPv4Network | None = None
    _created: bool = False

    def __hash__(self) -> int:
        return id(self)

    @property
    def bridge(self) -> str:
        return f"odb{self.suffix}"

    @property
    def backend(self) -> str:
        return "nftables" if self.use_nft else "ip route blackhole"

    def create(self) -> Network:
        problem = netns_problem()
        if problem:
            raise NetnsUnavailable(problem)
        if self.use_nft is None:
            self.use_nft = shutil.which("nft") is not None
        used = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/",
                          _run(["ip", "-4", "-o", "addr", "show"]).stdout)
        self._subnet = pick_subnet(used, random.Random())
        _open.add(self)
        self._created = True
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self._host(1)}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        self.addresses[CLIENTS] = self._host(1)
        self.netem_problem = self._probe_netem()
        return self

    def _host(self, n: int) -> str:
        assert self._subnet is not None
        return str(self._subnet.network_address + n)

    def add(self, node: str) -> str:
        """A namespace for `node` on the bridge; returns its address."""
        if node in self.namespaces or node == CLIENTS:
            raise ValueError(f"node {node!r} exists")
        index = len(self.namespaces)
        ns = f"odk-{self.suffix}-{node}"
        veth = f"od{self.suffix}{index}"
        addr = self._host(10 + index)
        _run(["ip", "netns", "add", ns])
        self.namespaces[node] = ns
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", NS_IFACE, "netns", ns])
        self._veths.append(veth)
        _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", NS_IFACE])
        _run(["ip", "-n", ns, "link", "set", NS_IFACE, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        self.addresses[node] = addr
        return addr

    def exec_prefix(self, node: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[node]]

    def _probe_netem(self) -> str | None:
        """None when a netem qdisc can be added (on a throwaway veth), else why not."""
        probe = f"odq{self.suffix}"
        try:
            _run(["ip", "link", "add", probe, "type", "veth", "peer", "name", probe + "p"])
        except RuntimeError as exc:
            return f"cannot probe netem: {exc}"
        try:
            proc = _run(["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms"],
                        check=False)
            if proc.returncode != 0:
                return ("netem qdisc unavailable (kernel module sch_netem not loaded/built: "
                        f"{proc.stderr.strip()}): latency skipped, packet loss kept")
            return None
        except FileNotFoundError:
            return "`tc` not found: latency skipped"
        finally:
            _run(["ip", "link", "del", probe], check=False)

    # -- faults ---------------------------------------------------------------------------------

    def cut(self, a: str, b: str) -> LinkFault:
        return self.inject(LinkFault("cut", a, b))

    def cut_one_way(self, src: str, dst: str) -> LinkFault:
        return self.inject(LinkFault("one-way", src, dst))

    def isolate(self, node: str) -> LinkFault:
        return self.inject(LinkFault("isolate", node))

    def slow(self, a: str, b: str, latency_ms: int = 50, loss: float = 0.0) -> LinkFault:
        return self.inject(LinkFault("slow", a, b, latency_ms, loss))

    def inject(self, fault: LinkFault) -> LinkFault:
        return self.inject_all([fault])[0]

    def inject_all(self, faults: Sequence[LinkFault]) -> list[LinkFault]:
        """Several faults at once: each namespace's rules change in one nft transaction."""
        self.faults.extend(faults)
        try:
            self.apply()
        except Exception:
            for f in faults:
                self.faults.remove(f)
            self.apply()
            raise
        return list(faults)

    def heal(self, fault: LinkFault | Sequence[LinkFault] | None = None) -> None:
        """Remove `fault` (several: a sequence; None: every fault) and apply what is left."""
        if fault is None:
            self.faults.clear()
        for f in [fault] if isinstance(fault, LinkFault) else (fault or []):
            if f in self.faults:
                self.faults.remove(f)
        self.apply()

    def apply(self) -> None:
        """Bring every namespace's rules and shaping to what the active faults need."""
        ns_nodes = list(self.namespaces)
        if self.use_nft:
            wanted = nft_rules(self.addresses, ns_nodes, self.faults)
            for node, rules in wanted.items():
                if self._applied_nft.get(node, []) != rules:
                    _run([*self.exec_prefix(node), "nft", "-f", "-"], stdin=nft_script(rules))
                    self._applied_nft[node] = rules
        else:
            routes = blackhole_routes(self.addresses, ns_nodes, self.faults)
            for node, want in routes.items():
                have = self._applied_routes.get(node, set())
                ip = ["ip"] if node == CLIENTS else ["ip", "-n", self.namespaces[node]]
                for addr in sorted(want - have):
                    _run([*ip, "route", "replace", "blackhole", f"{addr}/32"])
                for addr in sorted(have - want):
                    _run([*ip, "route", "del", "blackhole", f"{addr}/32"], check=False)
                self._applied_routes[node] = set(want)
        delays = shaping(ns_nodes, self.faults) if self.netem_problem is None else {}
        for node, ms in delays.items():
            if self._applied_delay.get(node, 0) != ms:
                ip_tc = ["tc", "-n", self.namespaces[node], "qdisc"]
                if ms:
                    _run([*ip_tc, "replace", "dev", NS_IFACE, "root", "netem", "delay",
                          f"{ms}ms"])
                else:
                    _run([*ip_tc, "del", "dev", NS_IFACE, "root"], check=False)
                self._applied_delay[node] = ms

    # -- teardown -------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the namespaces, veths, the bridge and any root route added. Never raises."""
        _open.discard(self)
        if not self._created:
            return
        self._created = False
        for addr in self._applied_routes.get(CLIENTS, set()):
            with contextlib.suppress(Exception):
                _run(["ip", "route", "del", "blackhole", f"{addr}/32"], check=False)
        for ns in self.namespaces.values():
            with contextlib.suppress(Exception):
                _run(["ip", "netns", "del", ns], check=False)
        for veth in self._veths:
            with contextlib.suppress(Exception):
                _run(["ip", "link", "del", veth], check=False)  # gone with its namespace
        with contextlib.suppress(Exception):
            _run(["ip", "link", "del", self.bridge], check=False)

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()
