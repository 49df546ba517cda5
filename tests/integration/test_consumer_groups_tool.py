"""`odradek consumer-groups` (S-6.3, S-7.3 - S-7.5) against an in-process 3-broker cluster with
real groups of odradek's Consumer: exact lag numbers (produce N, commit M -> lag N - M), members
and state views, every reset scenario in dry-run and execute mode checked by what the group's
next consumer reads, the inactive-group rule, offset deletion and group deletion."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.client import Admin, Consumer, Producer, TopicPartition
from odradek.cluster import Cluster
from tests.integration.cluster_fixtures import module_admin, module_cluster

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
HOUR_MS = 3_600_000

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "groups-tool", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


@pytest.fixture
def run(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> Run:
    """`odradek consumer-groups --bootstrap-server <cluster> ARGS` -> (code, stdout, stderr)."""
    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers,
                     "--timeout", "30000", *argv])
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_topic(admin: Admin, counts: dict[int, int], cluster: Cluster,
               timestamps: Callable[[int, int], int | None] = lambda p, i: None) -> str:
    """A topic with len(counts) partitions and counts[p] records in partition p."""
    topic = uniq("t")
    admin.create_topic(topic, len(counts), 2)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
        for part, n in counts.items():
            for i in range(n):
                p.send(topic, f"{part}-{i}".encode(), partition=part,
                       timestamp_ms=timestamps(part, i))
        assert p.flush(30) == 0
    return topic


def consumer(cluster: Cluster, group: str, client_id: str = "tool-test") -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                     "client.id": client_id, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})


def consume_all(c: Consumer, topic: str, total: int) -> list[tuple[int, int]]:
    c.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while len(got) < total and time.monotonic() < deadline:
        got += [(r.partition, r.offset) for r in c.poll(0.5)]
    assert len(got) == total, f"consumed {len(got)} of {total}"
    return got


def first_read(cluster: Cluster, group: str, topic: str, expect: int) -> dict[int, int]:
    """What the group's next consumer reads first in each partition (it commits nothing);
    waits until `expect` partitions have delivered a record."""
    c = consumer(cluster, group, "next-reader")
    first: dict[int, int] = {}
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(first) < expect and time.monotonic() < deadline:
            for r in c.poll(0.5):
                first.setdefault(r.partition, r.offset)
    finally:
        c.close(autocommit=False)
    return first


def committed(admin: Admin, group: str) -> dict[int, int]:
    return {tp.partition: om.offset
            for tp, om in admin.list_consumer_group_offsets(group).items()}


def wait_state(admin: Admin, cluster: Cluster, group: str, state: str) -> None:
    cluster.wait_for(lambda: admin.describe_groups([group])[group].state == state,
                     timeout=60, what=f"group {group} {state}")


def table(out: str) -> list[list[str]]:
    """The whitespace-split rows of a tool's table output (blank lines dropped)."""
    return [line.split() for line in out.splitlines() if line.strip()]


def test_describe_shows_exact_lag_members_and_state(run: Run, admin: Admin,
                                                     cluster: Cluster) -> None:
    topic = make_topic(admin, {0: 7, 1: 5, 2: 0}, cluster)
    group = uniq("lag")
    c = consumer(cluster, group, "lag-client")
    try:
        consume_all(c, topic, 12)
        c.commit({TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 5})
        member = admin.describe_groups([group])[group].members[0]
        code, out, err = run("--describe", "--group", group)
        assert (code, err) == (0, "")
        rows = table(out)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                           "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        who = [member.member_id, member.client_host, "lag-client"]
        assert rows[1:] == [[group, topic, "0", "3", "7", "4", *who],
                            [group, topic, "1", "5", "5", "0", *who],
                            [group, topic, "2", "-", "0", "-", *who]]
        assert member.client_host.endswith("127.0.0.1")
        # --offsets is the default view; --verbose adds the committed leader epoch.
        assert run("--describe", "--group", group, "--offsets")[1] == out
        verbose = table(run("--describe", "--group", group, "--verbose")[1])
        assert verbose[0][3] == "LEADER-EPOCH" and verbose[1][4:7] == ["3", "7", "4"]

        code, out, _ = run("--describe", "--group", group, "--members")
        assert code == 0
        assert table(out) == [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                              [group, *who, "3"]]
        rows = table(run("--describe", "--group", group, "--members", "--verbose")[1])
        assert rows[1][-4:] == ["-", f"{topic}:0,1,2", "-", "-"]

        coordinator = admin.find_coordinator(group)
        rows = table(run("--describe", "--group", group, "--state")[1])
        assert rows[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                           "#MEMBERS"]
        assert rows[1] == [group, f"{coordinator.host}:{coordinator.port}",
                           f"({coordinator.node_id})", "range", "Stable", "1"]

        assert group in run("--list")[1].split()
        rows = table(run("--list", "--state")[1])
        assert rows[0] == ["GROUP", "STATE"] and [group, "Stable"] in rows
        assert [group, "Stable"] in table(run("--list", "--state", "stable,empty")[1])
        assert group not in run("--list", "--state", "Empty")[1]

        # An active group: no reset, no deletion.
        code, out, _ = run("--reset-offsets", "--group", group, "--all-topics",
                           "--to-earliest", "--execute")
        assert code == 1
        assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, "
                "but the current state is Stable.") in out
        assert committed(admin, group) == {0: 3, 1: 5}
        code, out, _ = run("--delete", "--group", group)
        assert code == 1 and "Error: Deletion of some consumer groups failed:" in out
        assert (f"* Group '{group}' could not be deleted due to: org.apache.kafka.common."
                "errors.GroupNotEmptyException: The group is not empty.") in out
        code, out, _ = run("--delete-offsets", "--group", group, "--topic", topic)
        assert code == 1
        assert "Error: Encountered some partition-level error, see the follow-up details." in out
        assert [topic, "0", "Error:"] == table(out)[2][:3]
        assert committed(admin, group) == {0: 3, 1: 5}
    finally:
        c.close(autocommit=False)
    wait_state(admin, cluster, group, "Empty")
    code, out, err = run("--describe", "--group", group)
    assert code == 0
    assert f"Consumer group '{group}' has no active members." in err
    assert table(out)[1:] == [[group, topic, "0", "3", "7", "4", "-", "-", "-"],
                              [group, topic, "1", "5", "5", "0", "-", "-", "-"]]
    code, out, err = run("--describe", "--group", group, "--members")
    assert f"Consumer group '{group}' has no active members." in err and out.strip() == ""
    assert table(run("--describe", "--group", group, "--state")[1])[1][-2:] == ["Empty", "0"]


def test_reset_offsets_each_way_dry_run_then_execute(run: Run, admin: Admin,
                                                     cluster: Cluster, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    base = now - 2 * HOUR_MS
    # Partition 0: ten records a second apart, two hours ago. Partition 1: four of them two
    # hours ago, then four just now.
    stamps = {0: lambda i: base + i * 1000, 1: lambda i: base + i * 1000 if i < 4 else now}
    topic = make_topic(admin, {0: 10, 1: 8}, cluster, lambda p, i: stamps[p](i))
    group = uniq("reset")
    c = consumer(cluster, group)
    try:
        consume_all(c, topic, 18)
        c.commit({TopicPartition(topic, 0): 6, TopicPartition(topic, 1): 5})
    finally:
        c.close(autocommit=False)
    wait_state(admin, cluster, group, "Empty")

    def reset(*scenario: str, execute: bool = True, scope: tuple[str, ...] = ("--all-topics",)
              ) -> dict[int, int]:
        """Run a reset; return the printed plan {partition: new offset}."""
        mode = ("--execute",) if execute else ("--dry-run",)
        code, out, err = run("--reset-offsets", "--group", group, *scope, *scenario, *mode)
        assert code == 0, out + err
        rows = table(out)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], out
        return {int(r[2]): int(r[3]) for r in rows[1:] if r[0] == group and r[1] == topic}

    # Dry run (also the default, with Kafka's warning): the plan is printed, nothing changes.
    assert reset("--to-earliest", execute=False) == {0: 0, 1: 0}
    code, out, err = run("--reset-offsets", "--group", group, "--all-topics", "--to-latest")
    assert code == 0 and "WARN: No action will be performed as the --execute option is " \
        "missing." in err
    assert {int(r[2]): int(r[3]) for r in table(out)[1:]} == {0: 10, 1: 8}
    assert committed(admin, group) == {0: 6, 1: 5}
    assert first_read(cluster, group, topic, 2) == {0: 6, 1: 5}

    assert reset("--to-earliest") == {0: 0, 1: 0}
    assert committed(admin, group) == {0: 0, 1: 0}
    assert first_read(cluster, group, topic, 2) == {0: 0, 1: 0}

    assert reset("--to-offset", "7") == {0: 7, 1: 7}
    assert first_read(cluster, group, topic, 2) == {0: 7, 1: 7}
    assert reset("--to-offset", "9", scope=("--topic", f"{topic}:1")) == {1: 8}  # clamped
    assert committed(admin, group) == {0: 7, 1: 8}

    assert reset("--shift-by", "-2") == {0: 5, 1: 6}
    assert first_read(cluster, group, topic, 2) == {0: 5, 1: 6}
    assert reset("--shift-by", "-100", execute=False) == {0: 0, 1: 0}  # clamped to the start

    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((base + 3000) // 1000))
    assert reset("--to-datetime", f"{iso}.000Z") == {0: 3, 1: 3}
    assert first_read(cluster, group, topic, 2) == {0: 3, 1: 3}
    # An hour ago: partition 0 has no record that late (-> its high watermark), partition 1's
    # first recent record is offset 4.
    code, out, _ = run("--reset-offsets", "--group", group, "--all-topics", "--by-duration",
                       "PT1H", "--execute")
    assert code == 0
    assert f"Warn: Partition 0 from topic {topic} is empty. Falling back to latest known " \
        "offset." in out
    assert committed(admin, group) == {0: 10, 1: 4}
    assert first_read(cluster, group, topic, 1) == {1: 4}

    assert reset("--to-latest", scope=("--topic", topic)) == {0: 10, 1: 8}
    assert reset("--to-current") == {0: 10, 1: 8}

    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,2\n{topic},1,99\n")
    assert reset("--from-file", str(plan), scope=()) == {0: 2, 1: 8}
    assert committed(admin, group) == {0: 2, 1: 8}
    code, out, _ = run("--reset-offsets", "--group", group, "--all-topics", "--to-offset", "4",
                       "--dry-run", "--export")
    assert (code, out) == (0, f"{topic},0,4\n{topic},1,4\n")

    code, out, _ = run("--reset-offsets", "--group", group, "--topic", f"{topic}:5",
                       "--to-earliest", "--execute")
    assert code == 1 and f'The partitions "{topic}-5" do not exist' in out
    assert committed(admin, group) == {0: 2, 1: 8}


def test_delete_offsets_and_delete_group(run: Run, admin: Admin, cluster: Cluster) -> None:
    topic = make_topic(admin, {0: 3, 1: 3}, cluster)
    group = uniq("gone")
    c = consumer(cluster, group)
    try:
        consume_all(c, topic, 6)
        c.commit()
    finally:
        c.close(autocommit=False)
    wait_state(admin, cluster, group, "Empty")
    assert committed(admin, group) == {0: 3, 1: 3}
    code, out, _ = run("--delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert code == 0
    assert f"Request succeeded for deleting offsets from group {group}." in out
    assert table(out)[1:] == [["TOPIC", "PARTITION", "STATUS"], [topic, "1", "Successful"]]
    assert committed(admin, group) == {0: 3}

    code, out, _ = run("--delete", "--group", group)
    assert (code, out) == (0, f"Deletion of requested consumer groups ('{group}') was "
                              "successful.\n")
    assert group not in run("--list")[1].split()
    code, out, _ = run("--describe", "--group", group)
    assert code == 1 and f"Error: Consumer group '{group}' does not exist." in out
    code, out, _ = run("--delete", "--group", group)
    assert code == 1 and f"* Group '{group}' could not be deleted due to: " in out
    assert "GroupIdNotFoundException" in out


def test_all_groups(run: Run, admin: Admin, cluster: Cluster) -> None:
    topic = make_topic(admin, {0: 2}, cluster)
    groups = [uniq("all"), uniq("all")]
    for g in groups:
        c = consumer(cluster, g)
        try:
            consume_all(c, topic, 2)
            c.commit({TopicPartition(topic, 0): 1})
        finally:
            c.close(autocommit=False)
        wait_state(admin, cluster, g, "Empty")
    code, out, _ = run("--describe", "--all-groups")
    assert code == 0
    rows = table(out)
    for g in groups:
        assert [g, topic, "0", "1", "2", "1", "-", "-", "-"] in rows
    code, out, _ = run("--reset-offsets", "--all-groups", "--topic", topic, "--to-earliest",
                       "--execute")
    assert code == 0
    for g in groups:
        assert [g, topic, "0", "0"] in table(out)
        assert committed(admin, g) == {0: 0}


def test_reset_positions_a_group_that_does_not_exist_yet(run: Run, admin: Admin,
                                                         cluster: Cluster) -> None:
    """As in Kafka, a reset on an unknown (Dead) group commits its first offsets, so that its
    first consumer starts there."""
    topic = make_topic(admin, {0: 6, 1: 4}, cluster)
    group = uniq("fresh")
    code, out, _ = run("--describe", "--group", group)
    assert code == 1 and f"Error: Consumer group '{group}' does not exist." in out
    code, out, _ = run("--reset-offsets", "--group", group, "--topic", topic, "--to-offset",
                       "3", "--execute")
    assert code == 0, out
    assert table(out)[1:] == [[group, topic, "0", "3"], [group, topic, "1", "3"]]
    assert committed(admin, group) == {0: 3, 1: 3}
    assert first_read(cluster, group, topic, 2) == {0: 3, 1: 3}


def test_reset_from_a_file_that_cannot_be_read_is_a_message(run: Run, tmp_path: Path) -> None:
    """Was "failed due to [Errno 2] No such file or directory: '...'" (operator review)."""
    missing = tmp_path / "plan.csv"
    code, out, err = run("--reset-offsets", "--group", uniq("nofile"), "--from-file",
                         str(missing), "--dry-run")
    assert code == 1
    assert f"Cannot read --from-file {missing}: No such file or directory" in out + err
    assert "Errno" not in out + err
