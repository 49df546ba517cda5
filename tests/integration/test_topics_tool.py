"""`odradek topics` (S-6.3) against an in-process 3-broker cluster: create with each option,
Kafka's describe output with the real leaders, replicas and ISRs, the report options after a
broker dies, alter (partitions, configs), list, delete, and the error messages."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.client import Admin, ConfigResource
from odradek.cluster import Cluster
from tests.integration.cluster_fixtures import module_admin, module_cluster

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
PARTITION_LINE = re.compile(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)"
                            r"\tReplicas: ([\d,]*)\tIsr: ([\d,]*)(?:\tOffline: ([\d,]+))?")

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "topics-tool", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


@pytest.fixture
def run(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> Run:
    """`odradek topics --bootstrap-server <cluster> ARGS` -> (exit code, stdout, stderr)."""
    def call(*argv: str, bootstrap: str | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["topics", "--bootstrap-server", bootstrap or cluster.bootstrap_servers,
                     *argv])
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def partitions_of(out: str) -> dict[tuple[str, int], tuple[str, list[int], list[int], str]]:
    """Parsed partition lines: (topic, p) -> (leader, replicas, isr, offline)."""
    found = {}
    for line in out.splitlines():
        if line.startswith("\t"):
            m = PARTITION_LINE.fullmatch(line)
            assert m, f"not Kafka's partition line: {line!r}"
            t, p, leader, replicas, isr, offline = m.groups()
            found[(t, int(p))] = (leader, [int(x) for x in replicas.split(",") if x],
                                  [int(x) for x in isr.split(",") if x], offline or "")
    return found


def wait_describe(run: Run, predicate: Callable[[str], bool], *argv: str,
                  cluster: Cluster) -> str:
    """Poll `--describe ARGV` until its output satisfies the predicate."""
    last = ""

    def check() -> bool:
        nonlocal last
        code, last, _ = run("--describe", *argv)
        return code == 0 and predicate(last)
    try:
        cluster.wait_for(check, timeout=60, what=f"describe {argv}")
    except TimeoutError:
        pytest.fail(f"describe {argv} never matched; last output:\n{last}")
    return last


def propagated(cluster: Cluster, *topics: str, partitions: int | None = None) -> None:
    """Until every live broker's metadata cache has a leader for each partition of these
    topics (Kafka's waitUntilMetadataIsPropagated). CreateTopics and CreatePartitions answer
    once the controller's cache has them; the tool's next request may go to another broker."""
    def everywhere() -> bool:
        for b in cluster.live_brokers():
            for topic in topics:
                t = cluster.brokers[b].metadata_cache.topic(topic)
                if t is None or (partitions is not None and len(t.partitions) != partitions) \
                        or any(p.leader < 0 for p in t.partitions.values()):
                    return False
        return True
    cluster.wait_for(everywhere, timeout=30, what=f"{topics} in every metadata cache")


def test_create_with_partitions_replication_factor_and_configs(run: Run, admin: Admin,
                                                               cluster: Cluster) -> None:
    t = name("create")
    code, out, err = run("--create", "--topic", t, "--partitions", "3",
                         "--replication-factor", "2", "--config", "retention.ms=1000",
                         "--config", "min.insync.replicas=2")
    assert (code, out, err) == (0, f"Created topic {t}.\n", "")
    propagated(cluster, t)
    code, out, _ = run("--describe", "--topic", t)
    assert code == 0
    lines = out.splitlines()
    topic_id = admin.describe_topics([t])[t].topic_id
    assert re.fullmatch(rf"Topic: {t}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 3\t"
                        r"ReplicationFactor: 2\tConfigs: (\S+)", lines[0]), lines[0]
    assert topic_id is not None
    configs = dict(kv.split("=") for kv in lines[0].split("Configs: ")[1].split(","))
    assert configs == {"retention.ms": "1000", "min.insync.replicas": "2"}
    # The partition lines are what the cluster's metadata says, partition by partition.
    shown = partitions_of(out)
    desc = admin.describe_topics([t])[t]
    assert len(shown) == 3 == len(desc.partitions)
    for p in desc.partitions:
        leader, replicas, isr, offline = shown[(t, p.partition)]
        assert (int(leader), replicas, isr, offline) == (p.leader, p.replicas, p.isr, "")
        assert len(replicas) == 2 and p.leader in replicas and sorted(isr) == sorted(replicas)
    # Replicas are spread over the brokers (each of the 3 leads one partition).
    assert sorted(int(v[0]) for v in shown.values()) == [0, 1, 2]


def test_create_with_replica_assignment_and_cluster_defaults(run: Run, cluster: Cluster) -> None:
    t = name("assigned")
    assert run("--create", "--topic", t, "--replica-assignment", "2:0,0:1,1:2")[0] == 0
    propagated(cluster, t)
    shown = partitions_of(run("--describe", "--topic", t)[1])
    assert {k: v[:2] for k, v in shown.items()} == {
        (t, 0): ("2", [2, 0]), (t, 1): ("0", [0, 1]), (t, 2): ("1", [1, 2])}
    d = name("defaults")  # num.partitions 1, default.replication.factor 3 (this cluster's)
    assert run("--create", "--topic", d)[0] == 0
    propagated(cluster, d)
    code, out, _ = run("--describe", "--topic", d)
    assert code == 0
    assert "\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: \n" in out
    assert len(partitions_of(out)[(d, 0)][1]) == 3


def test_create_errors_as_kafka_prints_them(run: Run) -> None:
    t = name("dup")
    assert run("--create", "--topic", t, "--partitions", "1")[0] == 0
    code, out, err = run("--create", "--topic", t, "--partitions", "1")
    assert code == 1
    assert out == f"Error while executing topic command : Topic '{t}' already exists.\n"
    assert "Traceback" not in out + err
    assert run("--create", "--topic", t, "--if-not-exists") == (0, "", "")
    code, out, _ = run("--create", "--topic", name("rf"), "--replication-factor", "4")
    assert code == 1 and out.startswith("Error while executing topic command : ")
    assert "replication factor" in out.lower()
    # Kafka checks no broker of a given assignment at creation (TopicCommand's rule, kept by
    # ZkAdminManager.createTopics): broker 7 never comes, broker 0 leads
    unchecked = name("unchecked")
    code, out, _ = run("--create", "--topic", unchecked, "--replica-assignment", "0:7")
    assert (code, out) == (0, f"Created topic {unchecked}.\n")
    code, out, _ = run("--create", "--topic", name("cfg"), "--config", "retention.ms=soon")
    assert code == 1 and out.startswith("Error while executing topic command : ")
    code, out, _ = run("--create", "--topic", "under_score.dot")
    assert code == 0 and out.startswith("WARNING: Due to limitations in metric names")


def test_list_with_regex_and_internal_topics(run: Run, admin: Admin) -> None:
    prefix = name("listed")
    for suffix in ("a", "b"):
        assert run("--create", "--topic", f"{prefix}.{suffix}", "--partitions", "1")[0] == 0
    admin.find_coordinator("some-group")  # makes the cluster create __consumer_offsets
    admin.wait_for_topics(["__consumer_offsets"])
    code, out, _ = run("--list")
    assert code == 0
    names = out.split()
    assert {f"{prefix}.a", f"{prefix}.b", "__consumer_offsets"} <= set(names)
    assert names == sorted(names)
    assert "__consumer_offsets" not in run("--list", "--exclude-internal")[1].split()
    assert run("--list", "--topic", f"{prefix}.*")[1] == f"{prefix}.a\n{prefix}.b\n"
    assert run("--list", "--topic", f"{prefix}.a")[1] == f"{prefix}.a\n"
    code, out, _ = run("--describe", "--exclude-internal")
    assert code == 0 and "__consumer_offsets" not in out and f"Topic: {prefix}.a\t" in out
    code, out, _ = run("--describe", "--topic", "__consumer_offsets")
    assert out.startswith("Topic: __consumer_offsets\t") and len(partitions_of(out)) == 3


def test_alter_partitions_with_and_without_assignment(run: Run, cluster: Cluster) -> None:
    t = name("grow")
    assert run("--create", "--topic", t, "--partitions", "1", "--replication-factor", "2")[0] == 0
    code, out, _ = run("--alter", "--topic", t, "--partitions", "3")
    assert (code, out) == (0, "Adding partitions succeeded!\n")
    propagated(cluster, t, partitions=3)
    assert len(partitions_of(run("--describe", "--topic", t)[1])) == 3
    # The assignment lists every partition; the existing ones are skipped, as in Kafka.
    code, _, _ = run("--alter", "--topic", t, "--partitions", "5", "--replica-assignment",
                     "0:1,0:1,0:1,2:1,1:2")
    assert code == 0
    propagated(cluster, t, partitions=5)
    shown = partitions_of(run("--describe", "--topic", t)[1])
    assert shown[(t, 3)][:2] == ("2", [2, 1]) and shown[(t, 4)][:2] == ("1", [1, 2])
    code, out, _ = run("--alter", "--topic", t, "--partitions", "2")
    assert code == 1 and out.startswith("Error while executing topic command : ")
    assert "5" in out  # the broker says how many partitions the topic has
    code, _, err = run("--alter", "--topic", name("missing"), "--partitions", "2")
    assert code == 1 and "does not exist as expected" in err
    assert run("--alter", "--topic", name("missing"), "--partitions", "2", "--if-exists")[0] == 0


def test_alter_and_delete_topic_configs(run: Run, admin: Admin, cluster: Cluster) -> None:
    t = name("configs")
    assert run("--create", "--topic", t, "--partitions", "1", "--config",
               "cleanup.policy=compact")[0] == 0
    propagated(cluster, t)
    code, out, _ = run("--alter", "--topic", t, "--config", "retention.ms=12345",
                       "--config", "max.message.bytes=2048")
    assert (code, out) == (0, f"Updated config for topic {t}.\n")
    entries = admin.describe_configs([ConfigResource("topic", t)])[ConfigResource("topic", t)]
    assert (entries["retention.ms"].value, entries["max.message.bytes"].value) == \
        ("12345", "2048")
    assert entries["cleanup.policy"].value == "compact"  # incremental: others kept
    code, out, _ = run("--alter", "--topic", t, "--delete-config", "cleanup.policy")
    assert code == 0
    line = run("--describe", "--topic", t)[1].splitlines()[0]
    configs = dict(kv.split("=") for kv in line.split("Configs: ")[1].split(","))
    assert configs == {"retention.ms": "12345", "max.message.bytes": "2048"}
    topics_with_overrides = run("--describe", "--topics-with-overrides")[1]
    assert f"Topic: {t}\t" in topics_with_overrides
    assert "\tPartition: " not in topics_with_overrides


def test_delete_by_name_and_regex(run: Run, cluster: Cluster) -> None:
    prefix = name("doomed")
    for suffix in ("1", "2", "3"):
        assert run("--create", "--topic", f"{prefix}-{suffix}", "--partitions", "2")[0] == 0
    assert run("--delete", "--topic", f"{prefix}-1") == (0, "", "")
    assert run("--delete", "--topic", f"{prefix}-[23]") == (0, "", "")
    cluster.wait_for(lambda: not run("--list", "--topic", f"{prefix}.*")[1],
                     timeout=60, what="topics deleted")
    code, _, err = run("--delete", "--topic", f"{prefix}-1")
    assert (code, err) == (1, f"Topic '{prefix}-1' does not exist as expected\n")
    assert run("--delete", "--topic", f"{prefix}-1", "--if-exists")[0] == 0
    code, _, err = run("--describe", "--topic", f"{prefix}-1")
    assert (code, err) == (1, f"Topic '{prefix}-1' does not exist as expected\n")


def test_command_config_and_unreachable_cluster(run: Run, tmp_path: Path) -> None:
    props = tmp_path / "admin.properties"
    props.write_text("client.id=topics-tool-test\nrequest.timeout.ms=5000\n")
    assert run("--list", "--command-config", str(props))[0] == 0
    code, _, err = run("--list", "--command-config", str(tmp_path / "nope.properties"))
    assert code == 1 and "Cannot read --command-config" in err
    code, out, err = run("--list", bootstrap="127.0.0.1:1")
    assert code == 1 and out.startswith("Error while executing topic command : ")
    assert "Traceback" not in out + err


def test_reports_after_a_broker_dies(run: Run, cluster: Cluster, admin: Admin) -> None:
    """Last in this module: it kills broker 2 (and restarts it at the end)."""
    spread = name("spread")
    solo = name("solo")
    assert run("--create", "--topic", spread, "--replica-assignment", "0:1,1:2,2:0",
               "--config", "min.insync.replicas=2")[0] == 0
    assert run("--create", "--topic", solo, "--replica-assignment", "2")[0] == 0
    propagated(cluster, spread, solo)
    for report in ("--under-replicated-partitions", "--unavailable-partitions",
                   "--under-min-isr-partitions"):
        assert partitions_of(run("--describe", "--topic", f"{spread}|{solo}", report)[1]) == {}
    at_min = partitions_of(run("--describe", "--topic", spread, "--at-min-isr-partitions")[1])
    assert sorted(at_min) == [(spread, 0), (spread, 1), (spread, 2)]  # RF 2 = min ISR 2
    cluster.kill_broker(2)
    try:
        both = f"{spread}|{solo}"
        out = wait_describe(run, lambda o: set(partitions_of(o)) == {(spread, 1), (spread, 2)},
                            "--topic", both, "--under-replicated-partitions", cluster=cluster)
        shown = partitions_of(out)
        assert shown[(spread, 1)] == ("1", [1, 2], [1], "2")
        assert shown[(spread, 2)] == ("0", [2, 0], [0], "2")
        assert not out.startswith("Topic:")  # report options print partitions only
        out = wait_describe(run, lambda o: (solo, 0) in partitions_of(o), "--topic", both,
                            "--unavailable-partitions", cluster=cluster)
        assert partitions_of(out) == {(solo, 0): ("none", [2], [2], "2")}
        out = run("--describe", "--topic", both, "--under-min-isr-partitions")[1]
        assert set(partitions_of(out)) == {(spread, 1), (spread, 2), (solo, 0)}
        out = run("--describe", "--topic", spread, "--at-min-isr-partitions")[1]
        assert set(partitions_of(out)) == {(spread, 0)}
        full = run("--describe", "--topic", solo)[1]
        assert full.splitlines()[1] == (f"\tTopic: {solo}\tPartition: 0\tLeader: none\t"
                                        "Replicas: 2\tIsr: 2\tOffline: 2")
    finally:
        cluster.start_broker(2)
    wait_describe(run, lambda o: partitions_of(o) == {}, "--topic", f"{spread}|{solo}",
                  "--under-replicated-partitions", cluster=cluster)


def run_into_closed_pipe(*argv: str) -> tuple[int, str]:
    """`odradek ARGV` in a process whose stdout reader has already gone (as `| head` leaves it)
    -> (exit code, stderr)."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "odradek.cli", *argv], stdout=w,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("argv", [["topics", "--describe"], ["topics", "--list"],
                                  ["configs", "--broker", "0", "--describe", "--all"],
                                  ["consumer-groups", "--list"],
                                  ["reassign-partitions", "--list"],
                                  ["leader-election", "--election-type", "preferred",
                                   "--all-topic-partitions"],
                                  ["replica-verification", "--once"]], ids=" ".join)
def test_output_into_a_closed_pipe_is_not_a_traceback(cluster: Cluster, run: Run,
                                                      argv: list[str]) -> None:
    """`odradek topics --describe | head -1` printed two BrokenPipeError tracebacks (operator
    review); now it stops quietly, as Kafka's tools do."""
    code, _, err = run("--create", "--topic", name("pipe"), "--partitions", "2",
                       "--replication-factor", "2")  # something to print in every tool
    assert code == 0, err
    code, err = run_into_closed_pipe(argv[0], "--bootstrap-server", cluster.bootstrap_servers,
                                     *argv[1:])
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    # (replica-verification's status also says whether the brand-new replicas could be read)
    assert code == 0 or (argv[0] == "replica-verification" and code == 2), err
