"""Network faults between processes: Linux network namespaces, one per broker
and per ZooKeeper server, on a bridge; the Kafka clients in the root namespace.

1. The faults of odradek.chaos.environment.netns really cut what they say (a TCP listener in a
namespace,
   connections from another namespace and from the root namespace), and heal.
2. A short `odradek chaos --network` run on a ZooKeeper ensemble of three: the classic case
   (the leader of a partition loses ZooKeeper and its followers while its clients still reach
   it), a kill -9 of the ZooKeeper leader and a loss and regain of the ZooKeeper quorum; the
   consistency checker must find nothing lost, duplicated or read then truncated on the acks=all
   topic, and identical replicas (the acks=1 topic's losses are counted, not failed).

Needs root and network namespaces (CI runs as root); skipped with the reason otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.chaos.environment.netns import CLIENTS, Network, netns_problem

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]


def _namespaces_problem() -> str | None:
    problem = netns_problem()
    if problem:
        return problem
    name = f"odk-probe-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"`ip netns add` failed: {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@pytest.fixture(scope="module")
def namespaces() -> None:
    problem = _namespaces_problem()
    if problem:
        print(f"skipping network chaos: {problem}")
        pytest.skip(f"network namespaces unavailable: {problem}")


@pytest.fixture(params=["nftables", "routes"])
def network(namespaces: None, request: pytest.FixtureRequest) -> Iterator[Network]:
    """Both backends: nftables rules in the namespaces, or blackhole routes without nft."""
    if request.param == "nftables" and shutil.which("nft") is None:
        pytest.skip("nft not installed (apt-get install nftables)")
    net = Network(use_nft=request.param == "nftables").create()
    try:
        yield net
    finally:
        net.close()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"odk-{net.suffix}-" not in left


_CONNECT = ("import socket,sys\n"
            "try:\n"
            "    socket.create_connection((sys.argv[1], 8000), timeout=1.0).close()\n"
            "    print('ok')\n"
            "except OSError as e:\n"
            "    print('no', e)\n")


def _reaches(net: Network, node: str, addr: str) -> bool:
    cmd = [sys.executable, "-c", _CONNECT, addr]
    if node != CLIENTS:
        cmd = net.exec_prefix(node) + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.startswith("ok")


def test_cuts_isolation_and_one_way_drops_block_what_they_say(network: Network) -> None:
    net = network
    server_addr = net.add("broker-0")
    net.add("zk-1")
    listener = subprocess.Popen(
        [*net.exec_prefix("broker-0"), sys.executable, "-c",
         f"import socket\ns=socket.create_server(({server_addr!r}, 8000))\n"
         "while True:\n    c,_=s.accept(); c.close()\n"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not _reaches(net, "zk-1", server_addr):
            assert time.monotonic() < deadline, "the listener never answered"
            time.sleep(0.2)
        assert _reaches(net, CLIENTS, server_addr)

        cut = net.cut("broker-0", "zk-1")
        assert not _reaches(net, "zk-1", server_addr)
        assert _reaches(net, CLIENTS, server_addr)  # only that link
        net.heal(cut)
        assert _reaches(net, "zk-1", server_addr)

        net.cut_one_way("zk-1", "broker-0")
        assert not _reaches(net, "zk-1", server_addr)
        net.heal()

        net.cut(CLIENTS, "broker-0")
        assert not _reaches(net, CLIENTS, server_addr)
        assert _reaches(net, "zk-1", server_addr)
        net.heal()

        net.isolate("broker-0")
        assert not _reaches(net, "zk-1", server_addr)
        assert not _reaches(net, CLIENTS, server_addr)
        net.heal()
        assert _reaches(net, "zk-1", server_addr) and _reaches(net, CLIENTS, server_addr)
    finally:
        listener.kill()
        listener.wait()


def test_the_classic_partition_and_zookeeper_faults_keep_acks_all_writes(
        namespaces: None, tmp_path: Path) -> None:
    from odradek.chaos.scenarios.network import (
        NetChaosConfig,
        format_network_report,
        run_network_chaos,
    )

    schedule = ("leader-from-zk-and-followers", "zk-leader-kill", "zk-quorum-loss")
    config = NetChaosConfig(brokers=3, partitions=3, seed=15, schedule=schedule, rate=50,
                            gap_s=(0.2, 0.5))
    report = run_network_chaos(config, tmp_path)
    table = format_network_report(report)
    print(table)

    assert [c.kind for c in report.cycles] == list(schedule), table
    assert all(c.error is None for c in report.cycles), table
    classic = report.cycles[0]
    assert classic.failover_s is not None, table  # a follower was elected while it was cut
    assert classic.targets[0].startswith("broker-") and "clients" not in classic.targets, table
    acks_all = report.checks["chaos"]
    for key in ("lost", "truncated-reads", "duplicates", "replicas"):
        assert acks_all.row(key).observed == 0, table
    assert acks_all.row("lost").checked > 100, table
    assert report.acks1_lost is not None, table  # counted (expected), whatever it is
    assert report.classic and report.classic[0].startswith("cycle 1 "), table
    assert report.ok, table
    kinds = (tmp_path / "faults.log").read_text()
    for kind in ("partition", "zk-kill", "zk-quorum-loss"):
        assert f'"kind":"{kind}"' in kinds
