#!/usr/bin/env python3
"""Security: what TLS, SASL and the authorizer cost one `odradek broker` process.

Four measurements, each against a broker subprocess (bench/common.py's BrokerProcess), the load
from client processes on the same 2 cores (the figures name each driver):

1. **Throughput by security protocol.** One broker with PLAINTEXT, SSL and SASL_SSL
   (SCRAM-SHA-256, 4096 iterations) listeners; per protocol and record size (100 B, 1 KiB), a
   confluent-kafka produce() loop (acks=1, linger.ms=5) and a Consumer reading the records
   back (assign() from the beginning). Records/s, MB/s and the broker's CPU time per record
   (/proc/<pid>/stat over the client's run: psutil is not installed here).
2. **SASL authentications per second.** On the same broker's SASL_PLAINTEXT listener (and once
   on SASL_SSL, TLS handshake included): one Python process running `--concurrency`
   coroutines, each looping connect, `odradek.security.sasl_client.authenticate`, close, for
   PLAIN and SCRAM-SHA-256/512 with credentials stored at 4096 and 8192 iterations; the
   broker's CPU per authentication.
3. **Authorizer cost.** Three brokers, PLAINTEXT load as User:ANONYMOUS: authorizer off, on
   with a few ACLs, on with 10,000 ACLs (5,000 literal and 5,000 prefixed topic ACLs of other
   users, written to the embedded store before start). Raw Metadata (v8, one topic) and
   Produce (v8, one 100-byte record, acks=1) requests: one at a time (latency) and 16 in
   flight (throughput), with the broker's CPU per request. Plus an in-process micro-benchmark
   of `AclAuthorizer.authorize` decisions per second (decision-cache hits and misses) and of
   `acl.authorize` (no cache).
4. **TLS fetch memory.** A broker per protocol (PLAINTEXT, SSL); `--big-records` records of
   1 MiB produced over PLAINTEXT, then read by a confluent-kafka Consumer with fetch.max.bytes
   and max.partition.fetch.bytes 50 MiB over the protocol under test, while the broker's VmRSS
   is sampled every 50 ms: the peak above the idle RSS shows whether a response is copied
   whole in memory (on TLS, file regions go out in 64 KiB pread chunks).

The markdown section goes between `<!-- security:begin -->` and `<!-- security:end -->`; the
hand-written reading between `<!-- security-notes:begin -->` and `<!-- security-notes:end -->`
is carried over from the current file::

    python bench/bench_security.py --quick                      # under a minute, stdout
    python bench/bench_security.py --update-doc docs/performance.md     # the full run (~4 min)
    python bench/bench_security.py --splice F.md --update-doc docs/performance.md  # no run

Internal: `python bench/bench_security.py worker KIND ...` is one client process printing one
JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BrokerProcess,
    RssSampler,
    add_section_options,
    cpu_seconds,
    ensure_topic,
    fmt_int,
    machine_facts,
    produce_records,
    progress,
    python_worker,
    rss_kb,
    run_section,
    run_timed,
    table,
    topic_record_count,
)
from plots import bar_chart, img_dir, write_svg

SCRIPT = Path(__file__).resolve()
BEGIN, END = "<!-- security:begin -->", "<!-- security:end -->"
NOTES_BEGIN, NOTES_END = "<!-- security-notes:begin -->", "<!-- security-notes:end -->"
MB = 2**20
BIG = 2**20  # the fetch-memory records: 1 MiB values
FETCH_MAX = 50 * MB
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORD = "bench-secret"
USER = {4096: "bench4096", 8192: "bench8192"}  # SCRAM credentials at these iteration counts
ANON = "User:ANONYMOUS"
AUTHZ_TOPIC = "authz-bench"
# librdkafka stops fetching while 100,000 records wait in its queue (bench_broker.py's note):
# the consumers of the throughput table get bench_broker.py's big prefetch queue
BIG_QUEUE = ("queued.min.messages=10000000", "queued.max.messages.kbytes=2097151")


# ==============================================================================================
# Workers, each in its own process: one JSON line on stdout
# ==============================================================================================
def _conf(pairs: list[str]) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in pairs)


def worker_produce(a: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_error(err: object, msg: object = None) -> None:
        errors.append(str(err))

    p = Producer({"bootstrap.servers": a.bootstrap, "acks": "1", "linger.ms": 5,
                  "queue.buffering.max.messages": 500_000, "enable.idempotence": False,
                  "delivery.report.only.error": True, "on_delivery": on_error,
                  "error_cb": on_error, "log_level": 0, **_conf(a.conf)})
    p.list_topics(a.topic, timeout=10)
    value = b"x" * a.size
    cpu0 = cpu_seconds(a.broker_pid)
    t0 = time.perf_counter()
    produce_records(p, a.topic, value, a.records)
    left = p.flush(a.timeout)
    seconds = time.perf_counter() - t0
    broker_cpu = cpu_seconds(a.broker_pid) - cpu0
    print(json.dumps({"records": a.records - left, "seconds": seconds, "broker_cpu": broker_cpu,
                      "bytes": (a.records - left) * a.size, "errors": errors[:5],
                      "error_count": len(errors)}), flush=True)


def worker_consume(a: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "odradek-bench-security",
                  "enable.auto.commit": False, "log_level": 0, **_conf(a.conf)})
    md = c.list_topics(a.topic, timeout=10)
    parts = sorted(md.topics[a.topic].partitions)
    cpu0 = cpu_seconds(a.broker_pid)
    t0 = time.perf_counter()
    c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in parts])
    n = nbytes = 0
    deadline = time.monotonic() + a.timeout
    while n < a.records and time.monotonic() < deadline:
        for m in c.consume(min(10_000, a.records - n), 1.0):
            if m.error() is None:
                n += 1
                nbytes += len(m.value())
    seconds = time.perf_counter() - t0
    broker_cpu = cpu_seconds(a.broker_pid) - cpu0
    c.close()
    print(json.dumps({"records": n, "bytes": nbytes, "seconds": seconds,
                      "broker_cpu": broker_cpu}), flush=True)


def worker_auth(a: argparse.Namespace) -> None:
    """`--concurrency` coroutines: connect, authenticate, close, until `--seconds` passed."""
    import ssl

    from odradek.security.sasl_client import authenticate

    ctx = None
    if a.cafile:
        ctx = ssl.create_default_context(cafile=a.cafile)

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", a.port, ssl=ctx)
        try:
            await authenticate(reader, writer, mechanism=a.mechanism, username=a.user,
                               password=a.password, client_id="bench-auth", timeout=30)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def run() -> dict[str, Any]:
        await one()  # warm: the broker's first exchange (imports, caches) not counted
        done = failed = 0
        errors: list[str] = []
        cpu0 = cpu_seconds(a.broker_pid)
        t0 = time.perf_counter()
        end = t0 + a.seconds

        async def loop() -> None:
            nonlocal done, failed
            while time.perf_counter() < end:
                try:
                    await one()
                    done += 1
                except Exception as exc:  # counted and reported, never silent
                    failed += 1
                    if len(errors) < 3:
                        errors.append(repr(exc))

        await asyncio.gather(*(loop() for _ in range(a.concurrency)))
        seconds = time.perf_counter() - t0
        return {"auths": done, "failed": failed, "errors": errors, "seconds": seconds,
                "broker_cpu": cpu_seconds(a.broker_pid) - cpu0}

    print(json.dumps(asyncio.run(run())), flush=True)


def _requests(topic: str, value_size: int) -> dict[str, bytes]:
    """Encoded Metadata v8 and Produce v8 requests (correlation id patched per send)."""
    import datetime
    import sys as _sys

    import kio.index
    from kio.static.primitive import Records

    from odradek.protocol.codec import encode_request
    from odradek.protocol.records import build_batch

    md = _sys.modules[kio.index.load_request_schema(3, 8).__module__]
    pr = _sys.modules[kio.index.load_request_schema(0, 8).__module__]
    metadata = md.MetadataRequest(topics=(md.MetadataRequestTopic(name=topic),),
                                  allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
    batch = Records(build_batch([(None, b"x" * value_size)]))
    produce = pr.ProduceRequest(transactional_id=None, acks=1,
                                timeout=datetime.timedelta(seconds=30), topic_data=(
                                    pr.TopicProduceData(name=topic, partition_data=(
                                        pr.PartitionProduceData(index=0, records=batch),)),))
    return {"metadata": encode_request(metadata, 0, "bench-authz"),
            "produce": encode_request(produce, 0, "bench-authz")}


def worker_requests(a: argparse.Namespace) -> None:
    """Metadata and Produce requests over one connection: one at a time (latency), then
    `--in-flight` at a time (throughput). Responses are checked for error code 0."""
    import struct

    import kio.index

    from odradek.protocol.codec import decode_response, response_class

    frames = _requests(a.topic, 100)
    classes = {"metadata": response_class(kio.index.load_request_schema(3, 8)),
               "produce": response_class(kio.index.load_request_schema(0, 8))}
    size = struct.Struct(">i")

    def check(kind: str, payload: bytes) -> None:
        _, resp = decode_response(classes[kind], payload)
        if kind == "metadata":
            codes = [int(t.error_code) for t in resp.topics]
        else:
            codes = [int(p.error_code) for t in resp.responses for p in t.partition_responses]
        if any(codes):
            raise SystemExit(f"{kind} answered error codes {codes}")

    async def run() -> dict[str, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", a.port)
        out: dict[str, Any] = {}
        corr = 1

        def frame(kind: str) -> bytes:
            nonlocal corr
            corr += 1
            raw = bytearray(frames[kind])
            struct.pack_into(">i", raw, 8, corr)  # size(4) api_key(2) version(2) corr(4)
            return bytes(raw)

        async def read() -> bytes:
            (n,) = size.unpack(await reader.readexactly(4))
            return await reader.readexactly(n)

        for kind in ("metadata", "produce"):
            # one at a time: latency
            lat: list[float] = []
            cpu0 = cpu_seconds(a.broker_pid)
            t0 = time.perf_counter()
            end = t0 + a.seconds
            while time.perf_counter() < end:
                s = time.perf_counter()
                writer.write(frame(kind))
                payload = await read()
                lat.append(time.perf_counter() - s)
                if len(lat) % 500 == 1:
                    check(kind, payload)
            seconds = time.perf_counter() - t0
            cpu = cpu_seconds(a.broker_pid) - cpu0
            lat.sort()
            out[f"{kind}_seq"] = {
                "requests": len(lat), "seconds": seconds, "broker_cpu": cpu,
                "p50_us": lat[len(lat) // 2] * 1e6,
                "p99_us": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e6,
                "mean_us": statistics.fmean(lat) * 1e6}
            # `in_flight` at a time: throughput
            n = 0
            cpu0 = cpu_seconds(a.broker_pid)
            t0 = time.perf_counter()
            end = t0 + a.seconds
            for _ in range(a.in_flight):
                writer.write(frame(kind))
            pending = a.in_flight
            while pending:
                payload = await read()
                n += 1
                pending -= 1
                if n % 500 == 1:
                    check(kind, payload)
                if time.perf_counter() < end:
                    writer.write(frame(kind))
                    pending += 1
            seconds = time.perf_counter() - t0
            out[f"{kind}_pipe"] = {"requests": n, "seconds": seconds,
                                   "broker_cpu": cpu_seconds(a.broker_pid) - cpu0}
        writer.close()
        return out

    print(json.dumps(asyncio.run(run())), flush=True)


WORKERS = {"produce": worker_produce, "consume": worker_consume, "auth": worker_auth,
           "requests": worker_requests}


def worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_security.py worker")
    ap.add_argument("kind", choices=sorted(WORKERS))
    ap.add_argument("--bootstrap", default="")
    ap.add_argument("--topic", default="")
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--conf", action="append", default=[], help="client config k=v")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cafile", default="")
    ap.add_argument("--mechanism", default="SCRAM-SHA-256")
    ap.add_argument("--user", default="")
    ap.add_argument("--password", default=PASSWORD)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--in-flight", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--broker-pid", type=int, default=0)
    a = ap.parse_args(argv)
    WORKERS[a.kind](a)


# ==============================================================================================
# Brokers: listeners, certificates, SCRAM users and ACLs written to the embedded store
# ==============================================================================================
def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SecureBroker:
    """A broker process with one listener per security protocol in `listeners`, its data dir
    (seeded with SCRAM users and ACLs) and certificates in `workdir`."""

    workdir: Path
    listeners: tuple[str, ...] = LISTENERS
    acls: list[Any] = field(default_factory=list)
    authorizer: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    proc: BrokerProcess | None = None
    start_seconds: float = 0.0

    @property
    def ca(self) -> Path:
        return self.workdir / "certs" / "ca.pem"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> SecureBroker:
        from odradek.cluster import ClusterSecurity, SecurityFiles, acl_znodes, broker_jaas

        files = SecurityFiles(self.workdir / "certs", ("127.0.0.1",), ())
        files.ensure()
        sec = ClusterSecurity(listeners=self.listeners, sasl_mechanisms=MECHANISMS,
                              users={u: PASSWORD for u in USER.values()},
                              authorizer=self.authorizer)
        self.ports = dict(zip(self.listeners, free_ports(len(self.listeners)), strict=True))
        data = self.workdir / "data"
        znodes = {**self.scram_znodes(), **acl_znodes(self.acls)}
        seed_store(data / "__embedded_zookeeper", znodes)
        props = {
            "listeners": ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items()),
            "listener.security.protocol.map": ",".join(f"{p}:{p}" for p in self.listeners),
            "inter.broker.listener.name": self.listeners[0],
            "log.dirs": str(data), "num.partitions": "1",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.server),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca),
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
        }
        for listener in self.listeners:
            if listener.startswith("SASL_"):
                for m in MECHANISMS:
                    props[f"listener.name.{listener.lower()}.{m.lower()}.sasl.jaas.config"] = \
                        broker_jaas(sec, m)
        if self.authorizer:
            props.update({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                          "super.users": "User:admin",
                          "allow.everyone.if.no.acl.found": "false"})
        props.update(self.extra)
        t0 = time.perf_counter()
        self.proc = BrokerProcess(overrides=props, start_timeout=120).start()
        self.start_seconds = time.perf_counter() - t0
        return self

    @staticmethod
    def scram_znodes() -> dict[str, bytes]:
        from odradek.common.sanitizer import sanitize_user
        from odradek.coordination import paths
        from odradek.security.scram import credential_from_password

        out = {}
        for iterations, user in USER.items():
            config = {m: credential_from_password(m, PASSWORD, iterations).to_text()
                      for m in MECHANISMS[1:]}
            out[paths.config_entity_path("users", sanitize_user(user))] = \
                paths.encode_entity_config(config)
        return out

    def bootstrap(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def client_conf(self, protocol: str, user: str = USER[4096],
                    mechanism: str = "SCRAM-SHA-256") -> list[str]:
        """librdkafka properties for a client of `protocol`."""
        conf = [f"security.protocol={protocol.lower()}"]
        if protocol.endswith("SSL"):
            conf.append(f"ssl.ca.location={self.ca}")
        if protocol.startswith("SASL_"):
            conf += [f"sasl.mechanisms={mechanism}", f"sasl.username={user}",
                     f"sasl.password={PASSWORD}"]
        return conf

    def stop(self) -> None:
        if self.proc is not None:
            errors = self.proc.errors_logged()
            if errors:
                progress(f"  the broker logged {len(errors)} ERROR line(s), e.g. {errors[0]}")
            self.proc.stop()
            self.proc = None

    def __enter__(self) -> SecureBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def seed_store(persist_dir: Path, znodes: dict[str, bytes]) -> None:
    """Write `znodes` into the embedded store the broker will open from `persist_dir`."""
    if not znodes:
        return
    from odradek.coordination.embedded import EmbeddedZooKeeper

    async def write() -> None:
        zk = EmbeddedZooKeeper(persist_dir=persist_dir)
        store = zk.client()
        await store.start()
        try:
            for path, data in znodes.items():
                await store.create(path, data, makepath=True)
        finally:
            await store.close()
            zk.close()

    persist_dir.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="odradek-bench-security-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_worker(kind: str, broker_pid: int, *args: str, timeout: float = 300) -> dict[str, Any]:
    """Run one worker; its JSON plus the broker's CPU and the worker's own (wait4) CPU."""
    cpu0 = cpu_seconds(broker_pid)
    timed = run_timed(python_worker(SCRIPT, "worker", kind, *args), timeout=timeout)
    broker_cpu = cpu_seconds(broker_pid) - cpu0
    if timed.returncode != 0:
        raise RuntimeError(f"worker {kind} failed ({timed.returncode}): {timed.stderr[-1200:]}")
    out = json.loads(timed.stdout.strip().splitlines()[-1])
    out.setdefault("broker_cpu", broker_cpu)
    out["client_cpu"] = timed.cpu
    return out


# ==============================================================================================
# The four measurements
# ==============================================================================================
@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    auth: list[dict[str, Any]] = field(default_factory=list)
    authz: list[dict[str, Any]] = field(default_factory=list)
    micro: list[dict[str, Any]] = field(default_factory=list)
    fetch: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


def bench_throughput(res: Results, a: argparse.Namespace, broker: SecureBroker) -> None:
    for size, n in ((100, a.records), (1024, a.records_1k)):
        for proto in PROTOCOLS:
            topic = f"tp-{proto.lower()}-{size}"
            ensure_topic(broker.bootstrap("PLAINTEXT"), topic, 1)
            common = ["--broker-pid", str(broker.pid),
                      "--bootstrap", broker.bootstrap(proto), "--topic", topic, "--records",
                      str(n), "--size", str(size),
                      *(x for kv in broker.client_conf(proto) for x in ("--conf", kv))]
            for kind in ("produce", "consume"):
                extra = [x for kv in BIG_QUEUE for x in ("--conf", kv)] if kind == "consume" else []
                out = run_worker(kind, broker.pid, *common, *extra)
                if out["records"] != n or out.get("error_count") or out["bytes"] != n * size:
                    raise RuntimeError(f"{kind} {proto} {size} B: {out}, expected {n:,}")
                if kind == "produce":
                    held = topic_record_count(broker.bootstrap("PLAINTEXT"), topic)
                    if held != n:
                        raise RuntimeError(f"{topic} holds {held:,} records, {n:,} produced")
                row = {"kind": kind, "protocol": proto, "size": size, **out}
                res.throughput.append(row)
                progress(f"  {kind} {proto} {size} B: {fmt_int(n / out['seconds'])} rec/s, "
                         f"broker {1e6 * out['broker_cpu'] / n:.1f} µs CPU/record")


AUTH_CASES = (("SASL_PLAINTEXT", "PLAIN", 4096), ("SASL_PLAINTEXT", "SCRAM-SHA-256", 4096),
              ("SASL_PLAINTEXT", "SCRAM-SHA-256", 8192), ("SASL_PLAINTEXT", "SCRAM-SHA-512", 4096),
              ("SASL_PLAINTEXT", "SCRAM-SHA-512", 8192), ("SASL_SSL", "SCRAM-SHA-256", 4096))


def bench_auth(res: Results, a: argparse.Namespace, broker: SecureBroker) -> None:
    for proto, mechanism, iterations in AUTH_CASES:
        args = ["--port", str(broker.ports[proto]), "--mechanism", mechanism,
                "--user", USER[iterations], "--concurrency", str(a.concurrency),
                "--seconds", str(a.auth_seconds), "--broker-pid", str(broker.pid)]
        if proto == "SASL_SSL":
            args += ["--cafile", str(broker.ca)]
        out = run_worker("auth", broker.pid, *args)
        if out["failed"] or not out["auths"]:
            raise RuntimeError(f"{mechanism} on {proto}: {out}")
        res.auth.append({"protocol": proto, "mechanism": mechanism,
                         "iterations": iterations if mechanism != "PLAIN" else None, **out})
        progress(f"  {proto} {mechanism} {iterations}: "
                 f"{fmt_int(out['auths'] / out['seconds'])} auth/s, broker "
                 f"{1e3 * out['broker_cpu'] / out['auths']:.2f} ms CPU each")


def acl_bindings(many: int) -> list[Any]:
    """ANONYMOUS may do anything with the benchmark's topic; `many` other ACLs (half literal,
    half prefixed) of other users on other topics."""
    from odradek.cluster import ClusterAcl

    acls = [ClusterAcl(ANON, "All", "Topic", AUTHZ_TOPIC)]
    for i in range(many // 2):
        acls.append(ClusterAcl(f"User:user-{i}", "Read", "Topic", f"topic-{i:05d}"))
        acls.append(ClusterAcl(f"User:user-{i}", "Write", "Topic", f"team-{i}-",
                               pattern="PREFIXED"))
    return acls


AUTHZ_CASES = (("off", 0), ("on, 1 ACL", 0), ("on, 10,001 ACLs", 10_000))


def bench_authz(res: Results, a: argparse.Namespace, tmp: Path) -> None:
    for label, many in AUTHZ_CASES:
        on = label != "off"
        # the brokers' own requests (LeaderAndIsr, UpdateMetadata to itself) come as the super
        # user admin over SASL_PLAINTEXT; the load is User:ANONYMOUS over PLAINTEXT
        with SecureBroker(tmp / f"authz-{many}-{on}", listeners=("SASL_PLAINTEXT", "PLAINTEXT"),
                          authorizer=on,
                          acls=acl_bindings(many) if on else []) as broker:
            ensure_topic(broker.bootstrap("PLAINTEXT"), AUTHZ_TOPIC, 1)
            out = run_worker("requests", broker.pid, "--port", str(broker.ports["PLAINTEXT"]),
                             "--topic", AUTHZ_TOPIC, "--seconds", str(a.request_seconds),
                             "--broker-pid", str(broker.pid))
            res.authz.append({"label": label, "start_seconds": broker.start_seconds,
                              "rss_kb": rss_kb(broker.pid), **out})
            progress(f"  authorizer {label}: metadata "
                     f"{out['metadata_seq']['p50_us']:.0f} µs p50, produce "
                     f"{out['produce_seq']['p50_us']:.0f} µs p50; started in "
                     f"{broker.start_seconds:.1f} s")


def bench_micro(res: Results, a: argparse.Namespace) -> None:
    """`AclAuthorizer.authorize` in-process: cache hits, cache misses, and `acl.authorize`."""
    from odradek.cluster import ClusterAcl
    from odradek.security.acl import (
        AccessControlEntry,
        AclIndex,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
        authorize,
    )
    from odradek.server.authorizer import AclAuthorizer

    for many in (0, 10_000):
        index = AclIndex()
        grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
        names = [f"m{i}" for i in range(a.micro_names)]  # allowed by the prefixed ACL "m"
        for acl in [*acl_bindings(many), ClusterAcl(ANON, "All", "Topic", "m", "PREFIXED")]:
            pattern = ResourcePattern(ResourceType.TOPIC, acl.name, PatternType[acl.pattern])
            grouped.setdefault(pattern, set()).add(AccessControlEntry(
                acl.principal, acl.host, AclOperation[acl.operation.upper()],
                AclPermissionType[acl.permission.upper()]))
        for pattern, entries in grouped.items():
            index.set(pattern, entries)
        authz = AclAuthorizer(None)  # type: ignore[arg-type] (no store: the index is set here)
        authz.index = index
        op, rt = AclOperation.WRITE, ResourceType.TOPIC
        row: dict[str, Any] = {"acls": sum(len(e) for e in grouped.values())}
        # hits: one key over and over
        authz.authorize(ANON, "127.0.0.1", op, rt, AUTHZ_TOPIC, request_name="Produce")
        n = a.micro_ops
        t0 = time.perf_counter()
        for _ in range(n):
            authz.authorize(ANON, "127.0.0.1", op, rt, AUTHZ_TOPIC, request_name="Produce")
        row["hit"] = n / (time.perf_counter() - t0)
        # misses: every name once per pass, the cache emptied before each pass
        passes, count = max(1, n // len(names)), 0
        t0 = time.perf_counter()
        for _ in range(passes):
            authz._decisions.clear()
            for name in names:
                if not authz.authorize(ANON, "127.0.0.1", op, rt, name, request_name="Produce"):
                    raise RuntimeError(f"denied {name}")
                count += 1
        row["miss"] = count / (time.perf_counter() - t0)
        # acl.authorize: the decision without the cache
        t0 = time.perf_counter()
        for _ in range(passes):
            for name in names:
                authorize(index, ANON, "127.0.0.1", op, rt, name, super_users=frozenset(),
                          allow_everyone_if_no_acl_found=False)
        row["uncached"] = count / (time.perf_counter() - t0)
        res.micro.append(row)
        progress(f"  {row['acls']:,} ACLs: {fmt_int(row['hit'])} hits/s, "
                 f"{fmt_int(row['miss'])} misses/s, {fmt_int(row['uncached'])} uncached/s")


def bench_fetch(res: Results, a: argparse.Namespace, tmp: Path) -> None:
    n = a.big_records
    consume_conf = [f"fetch.max.bytes={FETCH_MAX}", f"max.partition.fetch.bytes={FETCH_MAX}",
                    f"receive.message.max.bytes={2 * FETCH_MAX}"]
    for proto in ("PLAINTEXT", "SSL"):
        with SecureBroker(tmp / f"fetch-{proto}", listeners=("PLAINTEXT", "SSL"),
                          extra={"message.max.bytes": str(4 * MB)}) as broker:
            topic = "big"
            ensure_topic(broker.bootstrap("PLAINTEXT"), topic, 1)
            out = run_worker("produce", broker.pid, "--broker-pid", str(broker.pid),
                             "--bootstrap", broker.bootstrap("PLAINTEXT"),
                             "--topic", topic, "--records", str(n), "--size", str(BIG),
                             "--conf", f"message.max.bytes={4 * MB}", "--conf",
                             "batch.size=4000000")
            if out["records"] != n or out.get("error_count"):
                raise RuntimeError(f"producing the 1 MiB records: {out}")
            time.sleep(1.0)
            idle = rss_kb(broker.pid)
            with RssSampler(broker.pid, interval=0.05) as sampler:
                got = run_worker("consume", broker.pid, "--broker-pid", str(broker.pid),
                                 "--bootstrap", broker.bootstrap(proto),
                                 "--topic", topic, "--records", str(n),
                                 *(x for kv in [*broker.client_conf(proto), *consume_conf]
                                   for x in ("--conf", kv)))
            if got["records"] != n or got["bytes"] != n * BIG:
                raise RuntimeError(f"consuming the 1 MiB records over {proto}: {got}")
            res.fetch.append({"protocol": proto, "records": n, "idle_kb": idle,
                              "peak_kb": sampler.peak_kb, "samples": len(sampler.samples),
                              "seconds": got["seconds"], "broker_cpu": got["broker_cpu"],
                              "client_cpu": got["client_cpu"]})
            progress(f"  fetch over {proto}: RSS {idle / 1024:.0f} MiB idle, peak "
                     f"{sampler.peak_kb / 1024:.0f} MiB, "
                     f"{n * BIG / MB / got['seconds']:.0f} MiB/s")


def run_bench(a: argparse.Namespace) -> Results:
    res = Results(facts=machine_facts())
    with workdir() as tmp:
        progress("1/4 + 2/4: throughput by protocol and SASL authentications, one broker")
        with SecureBroker(tmp / "main") as broker:
            progress(f"broker {broker.pid}: {broker.ports}")
            bench_throughput(res, a, broker)
            bench_auth(res, a, broker)
        progress("3/4: authorizer")
        bench_authz(res, a, tmp)
        bench_micro(res, a)
        progress("4/4: fetch memory, 1 MiB records")
        bench_fetch(res, a, tmp)
    res.facts["load average at the end"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return res


# ==============================================================================================
# The section
# ==============================================================================================
def _tp(res: Results, kind: str, proto: str, size: int) -> dict[str, Any]:
    return next(r for r in res.throughput
                if r["kind"] == kind and r["protocol"] == proto and r["size"] == size)


def throughput_chart(res: Results) -> str:
    name = "security-throughput"
    groups = {f"{kind} {size} B": {proto: (r := _tp(res, kind, proto, size))["records"]
                                   / r["seconds"] for proto in PROTOCOLS}
              for size in (100, 1024) for kind in ("produce", "consume")}
    write_svg(img_dir() / f"{name}.svg",
              bar_chart(groups, title="Records/s by security protocol, one broker",
                        y_label="records/s", width=900))
    return (f"![Produce and consume records/s over PLAINTEXT, SSL and SASL_SSL, 100 B and "
            f"1 KiB records (bar chart)](img/{name}.svg)")


def current_notes(doc: Path | None) -> str:
    if doc is None or not doc.exists():
        return ""
    m = re.search(re.escape(NOTES_BEGIN) + r".*?" + re.escape(NOTES_END), doc.read_text(), re.S)
    return m.group(0) if m else ""


def render(res: Results, a: argparse.Namespace) -> str:
    lines: list[str] = []
    w = lines.append
    quick = " --quick" if a.quick else ""
    w(BEGIN)
    w("## Security (bench/bench_security.py)")
    w("")
    w(f"`python bench/bench_security.py{quick}`, {res.facts['date']}, on {res.facts['cpus']} "
      f"cores ({res.facts['cpu model']}), load average {res.facts['load average at start']}"
      f"; {res.facts['odradek']}, confluent-kafka {res.facts['confluent-kafka']}. Every "
      "broker is one `odradek broker` process; every load comes from a separate client "
      "process on the same two cores (the generator competes with the broker for them). "
      "Broker CPU is the broker process's utime+stime from /proc/<pid>/stat over the client's "
      "run (psutil is not installed); client CPU from wait4().")
    w("")
    w("### Throughput by security protocol")
    w("")
    w(f"One broker with PLAINTEXT, SSL (server certificate only, no client certificates) and "
      f"SASL_SSL (SCRAM-SHA-256, 4096 iterations) listeners; a topic of 1 partition per case. "
      f"Driver: confluent-kafka {res.facts['confluent-kafka']}: a `produce()` loop (acks=1, "
      f"linger.ms=5, librdkafka's other defaults) of {a.records:,} 100-byte / "
      f"{a.records_1k:,} 1 KiB records, then a Consumer (assign() from the beginning, "
      "queued.min.messages=10000000 and queued.max.messages.kbytes=2097151 so that "
      "librdkafka's prefetch pauses do not set the pace) reading them back; record and byte "
      "counts checked. MB/s in MiB of values.")
    w("")
    rows = []
    for size in (100, 1024):
        for kind in ("produce", "consume"):
            base = _tp(res, kind, "PLAINTEXT", size)
            for proto in PROTOCOLS:
                r = _tp(res, kind, proto, size)
                rate = r["records"] / r["seconds"]
                rows.append([kind, f"{size} B", proto, fmt_int(rate),
                             f"{r['bytes'] / r['seconds'] / MB:.1f}",
                             f"{1e6 * r['broker_cpu'] / r['records']:.2f}",
                             f"{100 * r['broker_cpu'] / r['seconds']:.0f}%",
                             f"{100 * r['client_cpu'] / r['seconds']:.0f}%",
                             f"{rate / (base['records'] / base['seconds']):.2f}"])
    w(table(["", "record", "protocol", "records/s", "MB/s", "broker µs CPU/record",
             "broker CPU", "client CPU", "÷ PLAINTEXT"], rows, "lllrrrrrr"))
    w("")
    w(throughput_chart(res))
    w("")
    w("### SASL authentications per second")
    w("")
    w(f"One Python process (asyncio) with {a.concurrency} coroutines, each looping: connect, "
      "`odradek.security.sasl_client.authenticate` (SaslHandshake v1, SaslAuthenticate v1), "
      f"close, for {a.auth_seconds:g} s per row, against the same broker. SCRAM's "
      "salted-password derivation (PBKDF2, `iterations` rounds) runs in the client; the broker "
      "holds the stored and server keys and does a few HMACs per exchange. The SASL_SSL row "
      "includes a full TLS handshake per connection.")
    w("")
    rows = []
    for r in res.auth:
        rows.append([r["protocol"], r["mechanism"], r["iterations"] or "-",
                     fmt_int(r["auths"] / r["seconds"]),
                     f"{1e3 * r['broker_cpu'] / r['auths']:.2f}",
                     f"{100 * r['broker_cpu'] / r['seconds']:.0f}%",
                     f"{1e3 * r['client_cpu'] / r['auths']:.2f}"])
    w(table(["listener", "mechanism", "iterations", "authentications/s",
             "broker ms CPU/auth", "broker CPU", "client ms CPU/auth"], rows, "lllrrrr"))
    w("")
    w("### Authorizer")
    w("")
    w(f"A broker per row, PLAINTEXT, the requests made as User:ANONYMOUS, who has "
      f"`Allow All` on the topic `{AUTHZ_TOPIC}`; the 10,001-ACL broker also holds 5,000 "
      "literal (`Read` on `topic-NNNNN`) and 5,000 prefixed (`Write` on `team-N-`) topic ACLs "
      "of other users, written to its store before start. One Python process sends raw "
      "requests over one connection: Metadata v8 for the one topic and Produce v8 of one "
      "100-byte record (acks=1), first one at a time (latency) then 16 in flight "
      f"(throughput), {a.request_seconds:g} s each; responses checked for error code 0. "
      "Broker start: process start to its ready line (ACLs loaded).")
    w("")
    rows = []
    for r in res.authz:
        ms, mp = r["metadata_seq"], r["metadata_pipe"]
        ps, pp = r["produce_seq"], r["produce_pipe"]
        rows.append([r["label"], f"{ms['p50_us']:.0f} / {ms['p99_us']:.0f}",
                     fmt_int(mp["requests"] / mp["seconds"]),
                     f"{1e6 * mp['broker_cpu'] / mp['requests']:.0f}",
                     f"{ps['p50_us']:.0f} / {ps['p99_us']:.0f}",
                     fmt_int(pp["requests"] / pp["seconds"]),
                     f"{1e6 * pp['broker_cpu'] / pp['requests']:.0f}",
                     f"{r['start_seconds']:.1f}", f"{r['rss_kb'] / 1024:.0f}"])
    w(table(["authorizer", "Metadata µs p50 / p99", "Metadata req/s (16 in flight)",
             "broker µs CPU/Metadata", "Produce µs p50 / p99", "Produce req/s (16 in flight)",
             "broker µs CPU/Produce", "broker start s", "broker RSS MiB"], rows,
            "lrrrrrrrr"))
    w("")
    w(f"`AclAuthorizer.authorize` in-process (one thread, {a.micro_ops:,} calls per "
      "figure), the index holding the ACLs of the brokers above plus `Allow All` for "
      "ANONYMOUS on the prefix `m`: a cache hit is one decision-cache lookup; a miss asks the "
      "ACL index for the entries of the literal name, `*` and every prefix length, then "
      f"decides ({a.micro_names:,} distinct topics `m0`, `m1`, ..., allowed through the "
      "prefixed ACL, the cache emptied before every pass); `acl.authorize` is the decision "
      "alone, without the cache.")
    w("")
    rows = [[fmt_int(r["acls"]), fmt_int(r["hit"]), fmt_int(r["miss"]), fmt_int(r["uncached"]),
             f"{1e6 / r['hit']:.2f}", f"{1e6 / r['miss']:.2f}"] for r in res.micro]
    w(table(["ACLs", "hits/s", "misses/s", "acl.authorize/s", "µs per hit", "µs per miss"],
            rows, "rrrrrr"))
    w("")
    w("### TLS fetch memory")
    w("")
    n = a.big_records
    w(f"A broker per row with PLAINTEXT and SSL listeners (message.max.bytes 4 MiB); {n} "
      f"records of 1 MiB produced over PLAINTEXT into one partition ({n} MiB of log), then a "
      "confluent-kafka Consumer reads them over the protocol of the row with "
      "fetch.max.bytes = max.partition.fetch.bytes = 50 MiB (each Fetch response carries up "
      "to 50 MiB). The broker's VmRSS sampled every 50 ms during the read.")
    w("")
    rows = []
    for r in res.fetch:
        rows.append([r["protocol"], f"{r['idle_kb'] / 1024:.0f}", f"{r['peak_kb'] / 1024:.0f}",
                     f"{(r['peak_kb'] - r['idle_kb']) / 1024:+.0f}",
                     f"{r['records'] * BIG / MB / r['seconds']:.0f}",
                     f"{100 * r['broker_cpu'] / r['seconds']:.0f}%", r["samples"]])
    w(table(["protocol", "RSS before MiB", "peak RSS MiB", "peak - before MiB",
             "MiB/s read", "broker CPU", "RSS samples"], rows, "lrrrrrr"))
    w("")
    notes = current_notes(a.update_doc)
    w(notes or f"{NOTES_BEGIN}\n_Reading: to be written after a run._\n{NOTES_END}")
    w("")
    w(f"Benchmark wall time: {time.monotonic() - res.started:.0f} s; load average at the end "
      f"{res.facts['load average at the end']}.")
    w(END)
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run under a minute")
    ap.add_argument("--records", type=int, help="100-byte records per throughput run")
    ap.add_argument("--records-1k", type=int, help="1 KiB records per throughput run")
    ap.add_argument("--auth-seconds", type=float, help="seconds per authentication row")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent authentications")
    ap.add_argument("--request-seconds", type=float, help="seconds per request measurement")
    ap.add_argument("--micro-ops", type=int, help="authorize() calls per micro figure")
    ap.add_argument("--micro-names", type=int, default=10_000, help="topics for cache misses")
    ap.add_argument("--big-records", type=int, help="1 MiB records for the fetch memory test")
    add_section_options(ap, "security:begin/end")
    a = ap.parse_args()
    defaults = ({"records": 150_000, "records_1k": 50_000, "auth_seconds": 1.5,
                 "request_seconds": 1.0, "micro_ops": 100_000, "big_records": 60} if a.quick else
                {"records": 1_000_000, "records_1k": 300_000, "auth_seconds": 4.0,
                 "request_seconds": 3.0, "micro_ops": 500_000, "big_records": 300})
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    run_section(a, "security", run_bench, render, BEGIN, END)


if __name__ == "__main__":
    main()
