"""`odradek chaos --disk`: log dir failures (KIP-112) under an acks=all workload, on broker
processes.

Broker 0 gets a second log dir on a small tmpfs; with ``disk-fail`` (and ext4 available),
broker 1 gets one on an ext4 loop filesystem. A topic with RF 3, min.insync.replicas 2, every
partition led by broker 0 at first, takes a steady stream of acks=all writes (an idempotent
confluent-kafka producer) while:

* ``disk-full``: the tmpfs is filled up. Writes into it fail (ENOSPC), the dir goes offline on
  broker 0: the leaders of its partitions move to other brokers (broker 0 out of their ISR),
  broker 0 keeps leading the partitions of its other dir, the log dir event notification is
  handled. Then the space is freed and broker 0 restarted: it recovers the dir (log recovery
  cuts any torn batch) and rejoins every ISR.
* ``disk-fail``: the ext4 filesystem of broker 1 fails (the kernel turns it read-only: EROFS),
  with the same expectations for broker 1; then it is unmounted, repaired (e2fsck), mounted
  again and broker 1 restarted.

At the end every acknowledged value must be read back at its offset. Faults go to
``<workdir>/faults.log`` (common/fault_log: kinds disk-full, disk-fail, restart). Root only
(mount): otherwise the run stops at once with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...common.fault_log import FaultLog
from ...tools.command import ToolError
from ..environment import disk_faults
from ..environment.processes import ProcessCluster, wait_until
from ..support import Progress, run_on_zookeeper
from ..workload import consume_all

DISK_FAULT_KINDS = ("disk-full", "disk-fail")
EVENT_NODE = "/log_dir_event_notification"


@dataclass
class DiskChaosConfig:
    brokers: int = 3
    partitions: int = 6
    seed: int = 0
    faults: tuple[str, ...] = DISK_FAULT_KINDS
    tmpfs_bytes: int = 8 << 20
    ext4_bytes: int = 32 << 20
    rate: float = 200.0  # values per second
    phase_s: float = 4.0  # writes before, during and after each fault
    topic: str = "disk-chaos"


@dataclass
class DiskChaosReport:
    seed: int
    acknowledged: int = 0
    failed_sends: int = 0
    lost: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.lost and all(ok for _, ok, _ in self.checks)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, ok, detail))
        return ok


def format_disk_report(report: DiskChaosReport) -> str:
    lines = [f"odradek chaos --disk (seed {report.seed}): "
             f"{'OK' if report.ok else 'FAILED'}",
             f"  acknowledged writes: {report.acknowledged} (failed sends: "
             f"{report.failed_sends})",
             f"  acknowledged writes lost: {len(report.lost)}"]
    lines += [f"    {lost}" for lost in report.lost[:20]]
    for name, ok, detail in report.checks:
        lines.append(f"  [{'ok' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
    lines += [f"  skipped: {s}" for s in report.skipped]
    return "\n".join(lines)


class _Writer(threading.Thread):
    """acks=all, idempotent writes of unique values to every partition at `rate`/s."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        super().__init__(daemon=True, name="disk-chaos-writer")
        self.bootstrap, self.topic, self.partitions, self.rate = \
            bootstrap, topic, partitions, rate
        self.acked: dict[str, tuple[int, int]] = {}
        self.failed = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120000})

        def delivered(err: Any, msg: Any) -> None:
            with self._lock:
                if err is None and msg.offset() is not None and msg.offset() >= 0:
                    self.acked[msg.value().decode()] = (msg.partition(), msg.offset())
                elif err is not None:
                    self.failed += 1
        n = 0
        interval = 1.0 / self.rate
        while not self.stopping.is_set():
            value = f"v-{n:08d}"
            try:
                producer.produce(self.topic, value=value.encode(), partition=n % self.partitions,
                                 on_delivery=delivered)
                n += 1
            except BufferError:
                pass
            producer.poll(0)
            time.sleep(interval)
        producer.flush(150)


def _assign(brokers: int, partitions: int) -> list[list[int]]:
    """Broker 0 first (the leader) in every partition, RF 3."""
    others = list(range(1, brokers))
    return [[0, *(others[(p + i) % len(others)] for i in range(2))] for p in range(partitions)]


async def _create_topic(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    """RF 3 with broker 0 leading every partition, min.insync.replicas 2 (odradek's admin
    client: confluent-kafka's refuses an explicit assignment in this version)."""
    from ...client import AsyncAdmin
    from ...client.types import NewTopic

    admin = AsyncAdmin({"bootstrap.servers": bootstrap})
    await admin.start()
    try:
        await admin.create_topics([NewTopic(
            topic, replica_assignment=dict(enumerate(assignment)),
            config={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})])
    finally:
        await admin.close()


def _partitions_in(log_dir: Path, topic: str) -> list[int]:
    out = []
    for d in log_dir.glob(f"{topic}-*"):
        suffix = d.name[len(topic) + 1:]
        if suffix.isdigit():
            out.append(int(suffix))
    return sorted(out)


def _check_moved(cluster: ProcessCluster, report: DiskChaosReport, broker: int,
                 moved: list[int], kept: list[int], topic: str, what: str) -> None:
    try:
        wait_until(lambda: all(cluster.leader(topic, p) != broker
                               and broker not in cluster.state(topic, p)["isr"]
                               for p in moved), timeout=60, what="leaders moved")
        report.check(f"{what}: leaders of {len(moved)} partitions left broker {broker}", True)
    except AssertionError as exc:
        report.check(f"{what}: leaders left broker {broker}", False, str(exc).splitlines()[0])
    report.check(f"{what}: broker {broker} still serves its other dir",
                 all(broker in cluster.state(topic, p)["isr"] for p in kept)
                 and cluster.brokers[broker].running(),
                 f"partitions {kept}")
    try:
        wait_until(lambda: cluster.zk.exists(EVENT_NODE) is not None
                   and not cluster.zk.get_children(EVENT_NODE), timeout=30,
                   what="log dir events handled")
        report.check(f"{what}: log dir event notification handled", True)
    except AssertionError as exc:
        report.check(f"{what}: log dir event notification handled", False, str(exc))


def _rejoined(cluster: ProcessCluster, report: DiskChaosReport, broker: int, topic: str,
              what: str) -> None:
    try:
        wait_until(lambda: cluster.fully_replicated(topic), timeout=90,
                   what=f"broker {broker} back in every ISR")
        report.check(f"{what}: broker {broker} restarted and back in every ISR", True)
    except AssertionError as exc:
        report.check(f"{what}: broker {broker} back in every ISR", False,
                     str(exc).splitlines()[0])


def run_disk_chaos(config: DiskChaosConfig, workdir: Path, zookeeper_connect: str,
                   progress: Progress | None = None) -> DiskChaosReport:
    """The run (see the module doc) in `workdir` on `zookeeper_connect` (with a chroot)."""
    say = progress or (lambda _m: None)
    reason = disk_faults.unavailable_reason()
    if reason is not None:
        raise ToolError(f"chaos --disk: {reason}", exit_code=2)
    report = DiskChaosReport(config.seed)
    workdir.mkdir(parents=True, exist_ok=True)
    faults = FaultLog(workdir.parent / "faults.log")
    disks = workdir.parent / "disks"
    mounts: list[Path] = []
    cluster: ProcessCluster | None = None
    writer: _Writer | None = None
    topic = config.topic
    try:
        full_fs = disk_faults.mount_tmpfs(disks / "broker-0-tmpfs", config.tmpfs_bytes)
        mounts.append(full_fs)
        fail_fs = None
        if "disk-fail" in config.faults and config.brokers >= 3:
            if shutil.which("mkfs.ext4") is None:
                report.skipped.append("disk-fail: mkfs.ext4 is not installed")
            else:
                fail_fs = disk_faults.mount_ext4(disks / "broker-1-ext4", config.ext4_bytes,
                                                 disks / "broker-1-ext4.img")
                mounts.append(fail_fs)
        cluster = ProcessCluster(workdir, zookeeper_connect, config.brokers, overrides={
            "replica.fetch.backoff.ms": "200", "log.flush.offset.checkpoint.interval.ms": "1000",
            "replica.high.watermark.checkpoint.interval.ms": "1000"})
        special: dict[int, Path] = {}
        if "disk-full" in config.faults:
            special[0] = full_fs / "logs"
        if fail_fs is not None:
            special[1] = fail_fs / "logs"
        for b, extra in special.items():
            proc = cluster.brokers[b]
            proc.overrides["log.dirs"] = f"{proc.log_dir},{extra}"
        cluster.start()
        say(f"{config.brokers} brokers up; broker 0 log dirs "
            f"{cluster.brokers[0].overrides.get('log.dirs', cluster.brokers[0].log_dir)}")
        asyncio.run(_create_topic(cluster.bootstrap, topic, _assign(config.brokers,
                                                                     config.partitions)))
        wait_until(lambda: cluster.fully_replicated(topic), timeout=30, what="topic ready")
        writer = _Writer(cluster.bootstrap, topic, config.partitions, config.rate)
        writer.start()
        time.sleep(config.phase_s)

        if "disk-full" in config.faults:
            moved = _partitions_in(special[0], topic)
            kept = sorted(set(range(config.partitions)) - set(moved))
            say(f"disk-full: filling {full_fs} (broker 0, partitions {moved})")
            fid = faults.start("disk-full", [str(special[0]), "broker-0"],
                               f"tmpfs of {config.tmpfs_bytes} bytes filled")
            written = disk_faults.fill(full_fs)
            say(f"disk-full: {written} bytes of filler")
            _check_moved(cluster, report, 0, moved, kept, topic, "disk-full")
            time.sleep(config.phase_s)
            disk_faults.free(full_fs)
            faults.end(fid, "disk-full", [str(special[0]), "broker-0"], "space freed")
            say("disk-full: space freed; restarting broker 0")
            cluster.brokers[0].stop()
            cluster.brokers[0].start()
            faults.instant("restart", ["broker-0"], "after disk-full")
            _rejoined(cluster, report, 0, topic, "disk-full")
            time.sleep(config.phase_s / 2)

        if fail_fs is not None:
            moved = _partitions_in(special[1], topic)
            kept = sorted(set(range(config.partitions)) - set(moved))
            say(f"disk-fail: failing {fail_fs} (broker 1, partitions {moved})")
            fid = faults.start("disk-fail", [str(special[1]), "broker-1"], "ext4 error")
            how = disk_faults.fail(fail_fs)
            say(f"disk-fail: {how}")
            # the failure shows on the next write into the dir (or its next flush/checkpoint)
            _check_moved(cluster, report, 1, moved, kept, topic, "disk-fail")
            time.sleep(config.phase_s)
            cluster.brokers[1].stop()
            disk_faults.unmount(fail_fs)
            # the failed filesystem may live on (another mount namespace can hold it, and
            # mount would reuse its loop device): repair a copy of the image and mount that
            image = disks / "broker-1-ext4.img"
            copy = disks / "broker-1-ext4-repaired.img"
            shutil.copyfile(image, copy)
            repaired = subprocess.run(["e2fsck", "-fy", str(copy)], capture_output=True,
                                      check=False)
            say(f"disk-fail: e2fsck exit status {repaired.returncode}")
            subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(copy), str(fail_fs)],
                           check=True)
            image.unlink(missing_ok=True)
            faults.end(fid, "disk-fail", [str(special[1]), "broker-1"], "repaired")
            cluster.brokers[1].start()
            faults.instant("restart", ["broker-1"], "after disk-fail")
            _rejoined(cluster, report, 1, topic, "disk-fail")
            time.sleep(config.phase_s / 2)

        writer.stopping.set()
        writer.join(200)
        report.acknowledged, report.failed_sends = len(writer.acked), writer.failed
        say(f"{report.acknowledged} values acknowledged; reading back")
        read = consume_all(cluster.bootstrap, topic, config.partitions)
        at = {(p, o): v for p, records in read.items() for o, v in records}
        for value, (p, o) in sorted(writer.acked.items()):
            if at.get((p, o)) != value:
                report.lost.append(f"{value} at {topic}-{p}@{o}: found {at.get((p, o))!r}")
        report.check("every acknowledged value read back at its offset", not report.lost,
                     f"{len(report.lost)} lost")
        report.check("no broker crashed", all(b.running() for b in cluster.brokers.values()))
        return report
    finally:
        if writer is not None:
            writer.stopping.set()
        if cluster is not None:
            cluster.close()
        for m in reversed(mounts):
            disk_faults.unmount(m)


def run_disk_command(args: argparse.Namespace, seed: int) -> int:
    """`odradek chaos --disk`, on the given or a local ZooKeeper (`run_on_zookeeper`)."""
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if not set(faults) & set(DISK_FAULT_KINDS):
        faults = DISK_FAULT_KINDS
    unknown = [f for f in faults if f not in DISK_FAULT_KINDS]
    if unknown:
        raise ToolError(f"unknown disk faults {unknown}; choose from "
                        f"{','.join(DISK_FAULT_KINDS)}", exit_code=2)
    reason = disk_faults.unavailable_reason()
    if reason is not None:
        raise ToolError(f"--disk: {reason}", exit_code=2)
    random.seed(seed)
    config = DiskChaosConfig(brokers=max(3, args.brokers), partitions=args.partitions,
                             seed=seed, faults=faults,
                             phase_s=max(2.0, min(10.0, args.duration / 6)))
    report, workdir, own_dir = run_on_zookeeper(args, seed, " --disk", "odradek-chaos-disk-",
                                                config, run_disk_chaos)
    print(format_disk_report(report), flush=True)
    if report.ok and own_dir and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"broker logs, data and faults.log kept in {workdir}", flush=True)
    return 0 if report.ok else 1


__all__ = ["DISK_FAULT_KINDS", "DiskChaosConfig", "DiskChaosReport", "format_disk_report",
           "run_disk_chaos", "run_disk_command"]
