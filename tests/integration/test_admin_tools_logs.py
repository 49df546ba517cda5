"""The log tools against a running 3-broker cluster: replica-verification (S-6.4),
state-change-log merging (S-6.5, local and on Spark) and dump-log on segments the broker wrote
(S-6.6)."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.client import Admin, Producer
from odradek.cluster import Cluster
from odradek.common.state_change import LINE_RE
from odradek.tools.state_change_log import line_time

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {"replica.fetch.backoff.ms": "100", "offsets.topic.num.partitions": "3"}
SEG = "00000000000000000000.log"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(3, data_dir=tmp_path_factory.mktemp("tools-logs"), overrides=OVERRIDES)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def create_and_fill(cluster: Cluster, topic: str, partitions: int, per_partition: int,
                    configs: dict[str, str] | None = None) -> None:
    """`per_partition` records with unique values value-<p>-<i> to each partition, then wait
    until every replica has them all below its own high watermark."""
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topic(topic, partitions, 3, configs or {})
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5,
                   "batch.size": 2000}) as p:
        for i in range(per_partition):
            for part in range(partitions):
                p.send(topic, f"value-{part}-{i:05d}".encode(), key=f"k{i}".encode(),
                       partition=part)
        assert p.flush(60) == 0

    def replicated() -> bool:
        for b in cluster.live_brokers():
            for part in range(partitions):
                rp = cluster.brokers[b].replica_manager.partitions.get((topic, part))
                if rp is None or rp.high_watermark != per_partition:
                    return False
        return True
    wait_until(replicated, f"{topic} replicated to every broker's high watermark")


def leader_of(cluster: Cluster, topic: str, part: int) -> int:
    for b in cluster.live_brokers():
        rp = cluster.brokers[b].replica_manager.partitions.get((topic, part))
        if rp is not None and rp.is_leader:
            return b
    raise AssertionError(f"no leader for {topic}-{part}")


def verify(cluster: Cluster, capsys: pytest.CaptureFixture[str], topic: str
           ) -> tuple[int, str]:
    rc = main(["replica-verification", "--bootstrap-server", cluster.bootstrap_servers,
               "--topic-white-list", topic, "--once", "--fetch-size", "3000"])
    return rc, capsys.readouterr().out


# -- dump-log -----------------------------------------------------------------------------------


def test_dump_log_on_segments_the_broker_wrote(cluster: Cluster,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    create_and_fill(cluster, "dumped", 1, 150, {"index.interval.bytes": "200"})
    for b in cluster.live_brokers():
        d = cluster.data_dir / f"broker-{b}" / "dumped-0"
        files = [d / SEG, d / SEG.replace(".log", ".index"),
                 d / SEG.replace(".log", ".timeindex")]
        assert main(["dump-log", "--files", ",".join(map(str, files)), "--print-data-log"]
                    ) == 0
        out = capsys.readouterr().out.splitlines()
        records = [x for x in out if x.startswith("| offset:")]
        assert [int(r.split()[2]) for r in records] == list(range(150))
        assert [r.rsplit("payload: ", 1)[1] for r in records] == [
            f"value-0-{i:05d}" for i in range(150)]
        batches = [x for x in out if x.startswith("baseOffset:")]
        assert batches and all(x.endswith("isvalid: true") for x in batches)
        assert sum(int(x.split(" count: ")[1].split()[0]) for x in batches) == 150
        assert any(x.startswith("offset: ") for x in out)  # index entries, all verified


# -- replica-verification -------------------------------------------------------------------------


def test_replica_verification_agrees_then_finds_a_corrupted_follower(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    create_and_fill(cluster, "verify", 2, 120)
    rc, out = verify(cluster, capsys, "verify")
    assert rc == 0, out
    assert "all replicas of 2 partitions agree up to the high watermark" in out
    assert re.search(r"max lag is 0 for partition verify-\d at offset 120 among 2 partitions",
                     out), out

    # Change bytes inside one record's value on a follower's disk (same length, below the HW).
    leader = leader_of(cluster, "verify", 0)
    follower = next(b for b in cluster.live_brokers() if b != leader)
    seg = cluster.data_dir / f"broker-{follower}" / "verify-0" / SEG
    original = seg.read_bytes()
    assert original.count(b"value-0-00057") == 1
    at = original.index(b"value-0-00057")
    with seg.open("r+b") as f:  # in place, as a disk error would
        f.seek(at)
        f.write(b"VALUE")
    try:
        rc, out = verify(cluster, capsys, "verify")
        assert rc == 1, out
        m = re.search(r"partition verify-0: replicas (\d),(\d) differ at offset (\d+) \(", out)
        assert m, out
        assert (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (leader, follower, 57)
        assert "partition verify-1" not in out.split("max lag")[0]
        assert "1 of 2 partitions have replicas that differ" in out
        # the dump tool sees the follower's batch fail its CRC
        assert main(["dump-log", "--files", str(seg)]) == 1
        assert "isvalid: false" in capsys.readouterr().out
    finally:
        with seg.open("r+b") as f:
            f.seek(at)
            f.write(b"value")
    assert seg.read_bytes() == original
    rc, out = verify(cluster, capsys, "verify")
    assert rc == 0, out


def test_replica_verification_bad_input(cluster: Cluster,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replica-verification", "--bootstrap-server", cluster.bootstrap_servers,
                 "--topic-white-list", "no-such-topic-.*", "--once"]) == 2
    assert "No topics found" in capsys.readouterr().err
    assert main(["replica-verification", "--bootstrap-server", cluster.bootstrap_servers,
                 "--topic-white-list", "(", "--once"]) == 2
    assert "is an invalid regex" in capsys.readouterr().err
    assert main(["replica-verification", "--once"]) == 2


# -- state-change-log -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def state_logs(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The brokers' state-change.log files after a broker kill and restart, copied (so that
    both engines read the same content while the cluster keeps running)."""
    create_and_fill(cluster, "kill", 2, 20)
    controller = cluster.controller_id()
    victim = next(b for b in cluster.live_brokers() if b != controller)
    cluster.kill_broker(victim)
    wait_until(lambda: all(
        cluster.brokers[b].replica_manager.partitions[("kill", p)].leader_id != victim
        for b in cluster.live_brokers() for p in range(2)), "leaders moved off the victim")
    cluster.start_broker(victim)
    wait_until(lambda: all(
        len(cluster.brokers[leader_of(cluster, "kill", p)].replica_manager.partitions[
            ("kill", p)].isr) == 3 for p in range(2)), "the victim back in the ISR")
    snap = tmp_path_factory.mktemp("state-change-copy")
    for b in range(3):
        (snap / f"broker-{b}").mkdir()
        shutil.copy(cluster.data_dir / f"broker-{b}" / "state-change.log",
                    snap / f"broker-{b}" / "state-change.log")
    snap.joinpath("victim").write_text(str(victim))
    return snap


def merged(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["state-change-log", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_state_change_log_merge_after_a_broker_kill(state_logs: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    victim = int((state_logs / "victim").read_text())
    out = merged(capsys, "--logs", str(state_logs))
    inputs = [f"broker-{b}/state-change.log: {x}" for b in range(3)
              for x in (state_logs / f"broker-{b}" / "state-change.log").read_text().splitlines()
              if LINE_RE.match(x)]
    assert sorted(out) == sorted(inputs) and len(out) > 20
    times = [line_time(x.split(": ", 1)[1]) for x in out]
    assert times == sorted(times)  # type: ignore[type-var]
    assert {x.split(":", 1)[0] for x in out} == {f"broker-{b}/state-change.log" for b in range(3)}
    # the kill is in there: the controller took the victim's replicas offline
    assert any(f"Changed state of replica {victim} for partition kill-" in x
               and "to OfflineReplica" in x for x in out), out[-20:]

    only = merged(capsys, "--logs", str(state_logs), "--topic", "kill", "--partitions", "1")
    assert only and all(re.search(r"partition kill-1\b", x) for x in only)
    assert only == [x for x in out if re.search(r"partition kill-1\b", x)]
    start, end = times[len(times) // 3], times[2 * len(times) // 3]
    window = merged(capsys, "--logs", str(state_logs), "--start-time", start or "",
                    "--end-time", end or "")
    assert window == [x for x, t in zip(out, times, strict=True)
                      if start <= t <= end]  # type: ignore[operator]


def test_state_change_log_on_spark_matches_local(state_logs: Path, spark: object,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    local = merged(capsys, "--logs", str(state_logs), "--topic", "kill")
    on_spark = merged(capsys, "--logs", str(state_logs), "--topic", "kill", "--engine", "spark")
    assert local and on_spark == local


def test_replica_verification_with_a_replica_down_cannot_verify(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last: it kills a broker (and brings it back)."""
    create_and_fill(cluster, "down", 1, 10)
    victim = next(b for b in cluster.live_brokers() if b != cluster.controller_id())
    cluster.kill_broker(victim)
    try:
        rc = main(["replica-verification", "--bootstrap-server", cluster.bootstrap_servers,
                   "--topic-white-list", "down", "--once", "--max-wait-ms", "200"])
        captured = capsys.readouterr()
        assert rc == 2, captured.out
        assert "partition down-0 could not be verified" in captured.err
        assert "agree" not in captured.out
    finally:
        cluster.start_broker(victim)
