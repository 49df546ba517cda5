"""The decisions of the network faults
(odradek.chaos.environment.netns, chaos.scenarios.network): which
filter rules, blackhole routes and shaping each fault needs in which namespace, as pure
functions; no namespace is created here."""

from __future__ import annotations

import random

import pytest

from odradek.chaos.environment.netns import (
    CLIENTS,
    NFT_TABLE,
    LinkFault,
    blackhole_routes,
    nft_rules,
    nft_script,
    pick_subnet,
    shaping,
)
from odradek.chaos.scenarios.network import (
    NETWORK_FAULT_KINDS,
    NetChaosConfig,
    classic_cut,
    fault_schedule,
    quorum_loss_victims,
)

ADDR = {CLIENTS: "10.77.5.1", "broker-0": "10.77.5.10", "broker-1": "10.77.5.11",
        "zk-1": "10.77.5.12"}
NS = ["broker-0", "broker-1", "zk-1"]


def test_no_fault_means_an_empty_rule_list_for_every_namespace() -> None:
    assert nft_rules(ADDR, NS, []) == {"broker-0": [], "broker-1": [], "zk-1": []}


def test_cut_drops_both_ways_on_both_sides() -> None:
    rules = nft_rules(ADDR, NS, [LinkFault("cut", "broker-0", "zk-1")])
    assert rules["broker-0"] == ["input ip saddr 10.77.5.12 drop",
                                 "output ip daddr 10.77.5.12 drop"]
    assert rules["zk-1"] == ["input ip saddr 10.77.5.10 drop", "output ip daddr 10.77.5.10 drop"]
    assert rules["broker-1"] == []


def test_cut_from_the_clients_goes_on_the_namespaced_side_only() -> None:
    rules = nft_rules(ADDR, NS, [LinkFault("cut", CLIENTS, "broker-1")])
    assert rules["broker-1"] == ["input ip saddr 10.77.5.1 drop", "output ip daddr 10.77.5.1 drop"]
    assert rules["broker-0"] == [] and rules["zk-1"] == []


def test_one_way_drops_at_the_destination_input_only() -> None:
    rules = nft_rules(ADDR, NS, [LinkFault("one-way", "broker-1", "broker-0")])
    assert rules["broker-0"] == ["input ip saddr 10.77.5.11 drop"]
    assert rules["broker-1"] == []
    # towards the clients (no namespace): on the sender's output
    rules = nft_rules(ADDR, NS, [LinkFault("one-way", "broker-1", CLIENTS)])
    assert rules["broker-1"] == ["output ip daddr 10.77.5.1 drop"]


def test_isolate_drops_everything_on_the_interface() -> None:
    rules = nft_rules(ADDR, NS, [LinkFault("isolate", "zk-1")])
    assert rules["zk-1"] == ['input iifname "eth0" drop', 'output oifname "eth0" drop']
    assert rules["broker-0"] == []
    clients = nft_rules(ADDR, NS, [LinkFault("isolate", CLIENTS)])
    assert all(r == ["input ip saddr 10.77.5.1 drop", "output ip daddr 10.77.5.1 drop"]
               for r in clients.values())


def test_slow_link_drops_a_share_at_random_both_ways_and_rules_are_not_repeated() -> None:
    slow = LinkFault("slow", "broker-0", "broker-1", latency_ms=100, loss=0.3)
    rules = nft_rules(ADDR, NS, [slow, slow])
    assert rules["broker-1"] == ["input ip saddr 10.77.5.10 numgen random mod 100 < 30 drop"]
    assert rules["broker-0"] == ["input ip saddr 10.77.5.11 numgen random mod 100 < 30 drop"]
    assert nft_rules(ADDR, NS, [LinkFault("slow", "broker-0", "broker-1", 100, 0.0)]) == \
        {n: [] for n in NS}


def test_the_classic_case_cuts_zookeeper_and_followers_but_not_the_clients() -> None:
    links = classic_cut(1, [0, 1, 2], [1, 2, 3])
    assert links == [("broker-1", "zk-1"), ("broker-1", "zk-2"), ("broker-1", "zk-3"),
                     ("broker-1", "broker-0"), ("broker-1", "broker-2")]
    addr = {CLIENTS: "10.77.9.1", **{f"broker-{b}": f"10.77.9.{10 + b}" for b in range(3)},
            **{f"zk-{n}": f"10.77.9.{20 + n}" for n in (1, 2, 3)}}
    rules = nft_rules(addr, [n for n in addr if n != CLIENTS],
                      [LinkFault("cut", a, b) for a, b in links])
    leader = rules["broker-1"]
    assert len(leader) == 10
    assert not any("10.77.9.1 " in r for r in leader)  # the clients still reach it
    assert rules["broker-0"] == ["input ip saddr 10.77.9.11 drop",
                                 "output ip daddr 10.77.9.11 drop"]


def test_nft_script_replaces_the_table_in_one_transaction() -> None:
    script = nft_script(["input ip saddr 10.77.5.12 drop"])
    lines = script.splitlines()
    assert lines[:3] == [f"add table inet {NFT_TABLE}", f"delete table inet {NFT_TABLE}",
                         f"add table inet {NFT_TABLE}"]
    assert any("hook input" in x for x in lines) and any("hook output" in x for x in lines)
    assert lines[-1] == f"add rule inet {NFT_TABLE} input ip saddr 10.77.5.12 drop"


def test_blackhole_routes_without_nftables() -> None:
    routes = blackhole_routes(ADDR, NS, [LinkFault("cut", "broker-0", "zk-1")])
    assert routes == {CLIENTS: set(), "broker-0": {"10.77.5.12"}, "broker-1": set(),
                      "zk-1": {"10.77.5.10"}}
    one_way = blackhole_routes(ADDR, NS, [LinkFault("one-way", "broker-1", "broker-0")])
    assert one_way["broker-1"] == {"10.77.5.10"} and one_way["broker-0"] == set()
    iso = blackhole_routes(ADDR, NS, [LinkFault("isolate", "broker-0")])
    assert iso["broker-0"] == {"10.77.5.1", "10.77.5.11", "10.77.5.12"}
    assert iso[CLIENTS] == {"10.77.5.10"} and iso["zk-1"] == {"10.77.5.10"}
    with pytest.raises(ValueError, match="nftables"):
        blackhole_routes(ADDR, NS, [LinkFault("slow", "broker-0", "broker-1", 0, 0.2)])


def test_shaping_takes_the_largest_delay_per_interface() -> None:
    faults = [LinkFault("slow", "broker-0", "broker-1", 50), LinkFault("slow", CLIENTS,
                                                                      "broker-1", 200)]
    assert shaping(NS, faults) == {"broker-0": 50, "broker-1": 200, "zk-1": 0}
    assert shaping(NS, [LinkFault("cut", "broker-0", "zk-1")]) == {n: 0 for n in NS}


def test_link_faults_are_validated() -> None:
    with pytest.raises(ValueError):
        LinkFault("partition", "a", "b")
    with pytest.raises(ValueError):
        LinkFault("isolate", "a", "b")
    with pytest.raises(ValueError):
        LinkFault("cut", "a")
    with pytest.raises(ValueError):
        LinkFault("cut", "a", "a")
    with pytest.raises(ValueError):
        LinkFault("slow", "a", "b", loss=1.5)
    with pytest.raises(KeyError, match="unknown node"):
        nft_rules(ADDR, NS, [LinkFault("cut", "broker-0", "broker-9")])


def test_pick_subnet_avoids_the_ones_in_use() -> None:
    used = [f"10.77.{i}.1" for i in range(1, 255) if i != 42] + ["192.168.1.5"]
    assert str(pick_subnet(used, random.Random(0))) == "10.77.42.0/24"


def test_quorum_loss_takes_a_majority_with_the_leader() -> None:
    rng = random.Random(3)
    for leader in (1, 2, 3, None):
        victims = quorum_loss_victims([1, 2, 3], leader, rng)
        assert len(victims) == 2 and len(set(victims)) == 2
        if leader is not None:
            assert leader in victims
    assert len(quorum_loss_victims([1, 2, 3, 4, 5], 4, rng)) == 3


def test_fault_schedule_covers_every_kind_in_each_round() -> None:
    config = NetChaosConfig(cycles=len(NETWORK_FAULT_KINDS) * 2 + 3, seed=7)
    schedule = fault_schedule(config, random.Random(config.seed))
    assert len(schedule) == config.cycles
    n = len(NETWORK_FAULT_KINDS)
    assert sorted(schedule[:n]) == sorted(NETWORK_FAULT_KINDS)
    assert sorted(schedule[n:2 * n]) == sorted(NETWORK_FAULT_KINDS)
    forced = NetChaosConfig(schedule=("zk-leader-kill", "kill"))
    assert fault_schedule(forced, random.Random(0)) == ["zk-leader-kill", "kill"]


def test_classic_summary_counts_what_the_cut_off_leader_acknowledged() -> None:
    from odradek.chaos.checker.history import History
    from odradek.chaos.scenarios.network import Cycle, classic_summary

    h = History()
    ops = {}
    for v, p in (("a", 0), ("b", 1), ("c", 0)):
        ops[v] = h.invoke(process="one-p0", f="send", value=v, partition=p)
    h.ok(ops["a"], offset=0)
    h.ok(ops["b"], offset=0)
    after = h.ops()[-1].wall
    h.ok(ops["c"], offset=1)
    end = h.ops()[-1].wall
    lost = [op for op in h.ops() if op.type == "ok" and op.value == "c"]
    cycle = Cycle(3, "leader-from-zk-and-followers", ("broker-1", "zk-1"), partition=0,
                  start_wall=after - 10, end_wall=end + 0.001)
    line = classic_summary(cycle, {"chaos-acks1": (h.ops(), lost)})
    assert line.startswith("cycle 3 (broker-1 cut ")
    assert line.endswith("s): chaos-acks1 p0: 2 acknowledged, 1 lost")
    cycle.led = {"chaos-acks1": [0, 1]}
    assert classic_summary(cycle, {"chaos-acks1": (h.ops(), lost)}).endswith(
        "s): chaos-acks1 p0,1: 3 acknowledged, 1 lost")
