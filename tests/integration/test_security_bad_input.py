"""Bad input on secured listeners of in-process brokers.

* An expired and an untrusted client certificate on an SSL listener with
  `ssl.client.auth=required`: refused (the reason in the broker's log), the connection closed,
  no slot held, and the next good client served.
* A SASL handshake, then a SaslAuthenticate frame (or a bare KIP-152 token) declaring 2 GiB:
  closed as soon as the size prefix is read (`sasl.server.max.receive.size`), with
  `socket.request.max.bytes` raised so that only the SASL bound can refuse it.
* 200 connections on an SSL listener sending garbage or nothing, before or after the TLS
  handshake: the broker closes the bad ones of its own accord (the silent handshakes at
  `ssl_handshake_timeout`), a good client's Metadata requests are answered within a bound
  meanwhile, and the process's open file descriptors come back to where they were.
* Requests before authentication on a SASL listener (Produce, Metadata with auto-creation),
  first, after the handshake, and pipelined behind a failed authentication: closed, no handler
  called, no record stored and no topic created; the same Produce after authentication is stored
  (the control that shows the checks can see one).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from kio.schema.errors import ErrorCode

from odradek.protocol.codec import encode_request, make
from odradek.security.sasl_client import authenticate
from odradek.server.broker import Broker
from odradek.server.configs.config import KafkaConfig
from tests.integration.broker_harness import batch, list_offsets, metadata, produce, req_module, run
from tests.integration.sasl_support import sasl_broker
from tests.tls_certs import Certs, make_certs
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(240)

METADATA_BOUND_S = 2.0  # a good client's Metadata answer while 200 bad connections are open
STORM = 200


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("bad-input-certs"))


# -- helpers ------------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def ssl_broker(log_dir: Path, certs: Certs, handshake_timeout: float = 10.0
                     ) -> AsyncIterator[Broker]:
    """A broker with a PLAINTEXT and an SSL listener requiring client certificates."""
    broker = Broker(KafkaConfig.from_properties({
        "broker.id": "0", "log.dirs": str(log_dir),
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:0,SSL://localhost:0",
        "offsets.topic.replication.factor": "1",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/, DEFAULT",
        **certs.broker_ssl("listener.name.ssl.")}))
    await broker.start()
    assert broker.socket_server is not None
    broker.socket_server.ssl_handshake_timeout = handshake_timeout
    try:
        yield broker
    finally:
        await broker.stop()


def client_context(certs: Certs, cert_pem: Path | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca_pem))
    if cert_pem is not None:
        ctx.load_cert_chain(str(cert_pem))
    return ctx


async def ssl_client(broker: Broker, ctx: ssl.SSLContext) -> WireClient:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(
        "127.0.0.1", broker.listener_ports["SSL"], ssl=ctx, server_hostname="localhost"), 10)
    return WireClient(reader, writer)


def connections(broker: Broker, listener: str) -> list[Any]:
    assert broker.socket_server is not None
    return [c for c in broker.socket_server.connections if c.listener_name == listener]


def open_sockets() -> list[str]:
    """The process's socket descriptors (a leak of the storm's connections shows here; files
    that the broker or an earlier test's leftovers open or close meanwhile do not)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listdir and readlink
            continue
        if target.startswith("socket:"):
            found.append(target)
    return found


async def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def closed_by_peer(client: WireClient, timeout: float = 5.0) -> bool:
    """True when the broker closed the connection (EOF, reset or a TLS alert) without answering;
    False when the connection is still open after `timeout`. A response is a failure."""
    try:
        data = await asyncio.wait_for(client.reader.read(1 << 16), timeout)
    except TimeoutError:  # before OSError, of which it is a subclass
        return False
    except (ConnectionError, OSError):  # ssl.SSLError included
        return True
    assert data == b"", f"the broker answered: {data[:64]!r}"
    return True


def api_versions() -> Any:
    return make(req_module(18, 3).ApiVersionsRequest, client_software_name="bad-input",
                client_software_version="1")


# -- 1. expired and untrusted client certificates ----------------------------------------------
def _bad_certificate(kind: str, certs: Certs, directory: Path) -> Path:
    now = datetime.datetime.now(datetime.UTC)
    if kind == "expired":  # issued by the broker's own CA, expired yesterday
        leaf = certs.ca.issue_cert("mallory", common_name="mallory",
                                   not_before=now - datetime.timedelta(days=30),
                                   not_after=now - datetime.timedelta(days=1))
    else:  # a valid certificate from a CA the broker does not trust
        leaf = trustme.CA(organization_name="not the broker's CA").issue_cert(
            "mallory", common_name="mallory")
    path = directory / f"{kind}.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


@pytest.mark.parametrize("kind", ["expired", "untrusted"])
def test_bad_client_certificate_is_refused_and_the_next_client_served(
        tmp_path: Path, certs: Certs, kind: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="odradek.network")
    bad = _bad_certificate(kind, certs, tmp_path)

    async def body() -> None:
        async with ssl_broker(tmp_path / "b", certs) as broker:
            for _ in range(3):  # every attempt is refused; none leaves a connection behind
                # TLS 1.3 lets the client finish its side before the server has checked the
                # certificate: the refusal (EOF: the broker aborts without an alert; or an
                # alert) comes on the first read, and no answer ever does
                try:
                    client = await ssl_client(broker, client_context(certs, bad))
                except (ssl.SSLError, ConnectionError):
                    continue
                client.send(api_versions())
                assert await closed_by_peer(client), "still open after 5 s"
                await client.close()
            await eventually(lambda: not connections(broker, "SSL"), 5,
                             "the refused connections to go")
            good = await ssl_client(broker, client_context(certs, certs.client_pem))
            response = await good.request(metadata(None, auto_create=False))
            assert [b.node_id for b in response.brokers] == [0]
            assert [str(c.principal) for c in connections(broker, "SSL")] == ["User:alice"]
            await good.close()
    run(body, 120)
    refusals = [r.getMessage() for r in caplog.records if "SSL handshake failed" in r.getMessage()]
    assert len(refusals) == 3 and all("CERTIFICATE_VERIFY_FAILED" in m for m in refusals)


# -- 2. a SASL token declaring 2 GiB ------------------------------------------------------------
@pytest.mark.parametrize("handshake_version", [1, 0])
@pytest.mark.parametrize("declared", [2**31 - 1, 2**31])
def test_sasl_token_declaring_2_gib_closes_before_buffering(
        tmp_path: Path, handshake_version: int, declared: int,
        caplog: pytest.LogCaptureFixture) -> None:
    """v1: a SaslAuthenticate request frame; v0: a bare token (KIP-152). 2**31 is -2**31 once
    read as Kafka's signed size."""
    caplog.set_level(logging.WARNING, logger="odradek.network")

    async def body() -> None:
        # socket.request.max.bytes at its largest: only the SASL bound can refuse the frame
        async with sasl_broker(tmp_path, **{"socket.request.max.bytes": "2147483647"}) as broker:
            port = broker.bound_ports[0]
            c = await WireClient.connect("127.0.0.1", port)
            hs = await c.request(req_module(17, handshake_version).SaslHandshakeRequest(
                mechanism="PLAIN"))
            assert hs.error_code == ErrorCode.none
            host, local_port = c.writer.get_extra_info("sockname")[:2]
            local = f"{host}:{local_port}"
            [conn] = [x for x in connections(broker, "SASL_PLAINTEXT") if x.peer == local]
            if handshake_version == 1:  # the start of a real SaslAuthenticate request
                c.correlation_id += 1
                body = encode_request(req_module(36, 2).SaslAuthenticateRequest(
                    auth_bytes=b"\0alice\0alice-secret"), c.correlation_id, "bad-input")[4:]
            else:
                body = b"\0alice\0alice-secret"
            sent = 64 * 1024
            await c.raw(struct.pack(">I", declared) + body + b"\0" * (sent - len(body)))
            assert await closed_by_peer(c, 5), "the broker waits for the rest of 2 GiB"
            assert conn.decoder.buffered <= sent  # never more than what was sent
            await eventually(lambda: conn not in broker.socket_server.connections, 5,
                             "the connection to go")
            await c.close()
            # the broker serves the next client
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await authenticate(reader, writer, mechanism="PLAIN", username="alice",
                               password="alice-secret", client_id="good", timeout=10)
            good = WireClient(reader, writer)
            assert len((await good.request(metadata(None, auto_create=False))).brokers) == 1
            await good.close()
    run(body, 60)
    expected = ("larger than sasl.server.max.receive.size" if declared < 2**31
                else f"invalid frame size {declared - 2**32}")
    assert any(expected in r.getMessage() for r in caplog.records), caplog.text


# -- 3. 200 bad TLS connections ------------------------------------------------------------------
def _closed(s: socket.socket) -> bool:
    """Whether a non-blocking socket's peer has closed it (EOF, a reset, a TLS error)."""
    try:
        while True:
            if not s.recv(4096):
                return True
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return False
    except OSError:  # ssl.SSLError included
        return True


def _storm(port: int, ctx: ssl.SSLContext, opened: threading.Event,
           release: threading.Event, report: dict[str, Any]) -> None:
    """Open STORM connections, a quarter of each kind; report which ones the broker closed;
    close them all once `release` is set."""
    kinds = ("garbage instead of a ClientHello", "nothing at all", "garbage after TLS",
             "nothing after TLS")
    socks: list[tuple[str, socket.socket]] = []
    try:
        for i in range(STORM):
            kind = kinds[i % 4]
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if kind == kinds[0]:
                s.sendall(b"GET / HTTP/1.1\r\n" + os.urandom(500))
            elif kind in kinds[2:]:
                s = ctx.wrap_socket(s, server_hostname="localhost")  # the handshake, blocking
                if kind == kinds[2]:
                    s.sendall(b"\xff\xff\xff\xf0" + os.urandom(500))  # a negative frame size
            socks.append((kind, s))
        opened.set()
        for _, s in socks:
            s.setblocking(False)
        # the broker closes the bad ones itself (the silent handshakes at its timeout)
        pending = {s for k, s in socks if k != kinds[3]}
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            readable, _, _ = select.select(list(pending), [], [], 0.2)
            pending -= {s for s in readable if _closed(s)}
        report["not closed by the broker"] = sorted({k for k, s in socks if s in pending})
        # the idle authenticated ones stay open (readable only for TLS 1.3 session tickets)
        report["idle closed"] = sum(_closed(s) for k, s in socks if k == kinds[3])
        report["done"] = True
        release.wait(60)
    finally:
        for _, s in socks:
            with contextlib.suppress(OSError):
                s.close()
        opened.set()


def _probe(port: int, ctx: ssl.SSLContext, stop: threading.Event,
           latencies: list[float]) -> None:
    """A good client in its own thread (blocking socket): Metadata every 50 ms until `stop`,
    each answer's latency recorded, a stall of the broker's loop included whenever it falls."""
    request = metadata(None, auto_create=False)
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                         server_hostname="localhost") as s:
        correlation_id = 0
        while not stop.is_set():
            correlation_id += 1
            start = time.monotonic()
            s.sendall(encode_request(request, correlation_id, "probe"))
            header = _recv_exactly(s, 4)
            payload = _recv_exactly(s, struct.unpack(">i", header)[0])
            latencies.append(time.monotonic() - start)
            assert struct.unpack_from(">i", payload)[0] == correlation_id
            time.sleep(0.05)


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the probe's connection")
        out += chunk
    return out


def test_200_bad_tls_connections_neither_stall_the_loop_nor_leak(
        tmp_path: Path, certs: Certs) -> None:
    latencies: list[float] = []

    async def body() -> None:
        async with ssl_broker(tmp_path / "b", certs, handshake_timeout=2.0) as broker:
            port = broker.listener_ports["SSL"]
            baseline_sockets = len(open_sockets())
            baseline_conns = len(broker.socket_server.connections)
            release, stop = threading.Event(), threading.Event()
            report: dict[str, Any] = {}
            probe = asyncio.ensure_future(asyncio.to_thread(
                _probe, port, client_context(certs, certs.client_pem), stop, latencies))
            await eventually(lambda: bool(latencies) or probe.done(), 10, "the probe to start")
            storm = asyncio.ensure_future(asyncio.to_thread(
                _storm, port, client_context(certs, certs.client_pem), threading.Event(),
                release, report))
            try:
                await eventually(lambda: report.get("done") or storm.done(), 60,
                                 "the storm's connections to be opened and judged")
                if storm.done():
                    storm.result()  # the storm's own failure
                assert not probe.done(), probe.exception()
                assert report["not closed by the broker"] == []
                assert report["idle closed"] == 0
                # the broker serves the probe and the STORM/4 idle TLS connections only
                # (a TLS connection the broker closed stays in the set until the peer answers
                # its close_notify or asyncio's ssl_shutdown_timeout, 30 s, passes)
                live = [c for c in broker.socket_server.connections
                        if not c.transport.is_closing()]
                assert len(live) == baseline_conns + 1 + STORM // 4
                # a fresh good client is served too
                fresh = await ssl_client(broker, client_context(certs, certs.client_pem))
                await fresh.request(metadata(None, auto_create=False))
                await fresh.close()
            finally:
                release.set()
                stop.set()
                await storm
                await probe
            await eventually(lambda: len(broker.socket_server.connections) == baseline_conns,
                             10, "the broker's connections to go back to the baseline")
            # not above the baseline: an earlier test's leftovers may close meanwhile
            await eventually(lambda: len(open_sockets()) <= baseline_sockets, 10,
                             f"open sockets back to at most {baseline_sockets}")
    run(body, 180)
    assert len(latencies) >= 10, latencies
    assert max(latencies) < METADATA_BOUND_S, (
        f"Metadata took {max(latencies):.3f} s during the storm")
    print(f"Metadata during the storm: {len(latencies)} requests, max "
          f"{max(latencies) * 1000:.1f} ms, median "
          f"{sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")


# -- 4. requests before authentication -----------------------------------------------------------
def test_requests_before_authentication_never_reach_a_handler(tmp_path: Path) -> None:
    topic, new_topic = "pre-auth", "pre-auth-created-by-metadata"
    calls: list[tuple[int, str]] = []

    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            sasl_port, plain_port = broker.bound_ports
            assert broker.apis is not None
            handlers = broker.apis.handlers
            for key in (0, 3):  # Produce, Metadata: count the calls from the SASL listener
                def counting(header: Any, request: Any, conn: Any, _key: int = key,
                             _inner: Any = handlers[key]) -> Any:
                    if conn.listener_name == "SASL_PLAINTEXT":
                        calls.append((_key, conn.listener_name))
                    return _inner(header, request, conn)
                handlers[key] = counting
            plain = await WireClient.connect("127.0.0.1", plain_port)
            m = req_module(19, 7)
            created = await plain.request(m.CreateTopicsRequest(topics=(m.CreatableTopic(
                name=topic, num_partitions=1, replication_factor=1, assignments=(),
                configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False))
            assert created.topics[0].error_code == ErrorCode.none
            record = produce(topic, 0, batch([b"must not be stored"]), acks=1)
            auto_create = metadata([new_topic], auto_create=True)

            async def end_offset() -> int:
                resp = await plain.request(list_offsets(topic, 0, -1))
                return resp.topics[0].partitions[0].offset

            async def refused(*steps: Any, pipelined: bytes = b"") -> None:
                c = await WireClient.connect("127.0.0.1", sasl_port)
                for request in steps:
                    c.send(request)
                if pipelined:
                    await c.raw(pipelined)
                await c.writer.drain()
                data = b""
                with contextlib.suppress(ConnectionError, OSError):
                    data = await asyncio.wait_for(c.reader.read(), 10)  # until EOF
                await c.close()
                # the answers allowed here are those of SaslHandshake/SaslAuthenticate only
                assert len(data) < 200, data

            handshake = req_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN")
            wrong = req_module(36, 2).SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong")
            await refused(record)                          # first thing on the connection
            await refused(auto_create)
            await refused(handshake, record)               # after the handshake
            await refused(handshake, auto_create)
            await refused(handshake, wrong, record)        # behind a failed authentication
            await refused(handshake, wrong, auto_create)
            # after a v0 handshake, a Produce frame is read as a (bad) bare PLAIN token
            await refused(req_module(17, 0).SaslHandshakeRequest(mechanism="PLAIN"), record)
            assert calls == []
            assert await end_offset() == 0
            names = {t.name for t in (await plain.request(
                metadata([new_topic], auto_create=False))).topics if t.error_code == 0}
            assert new_topic not in names
            assert broker.metadata_cache.topic(new_topic) is None
            # the control: the same Produce after authentication reaches the handler and is
            # stored, so the checks above could have seen one
            reader, writer = await asyncio.open_connection("127.0.0.1", sasl_port)
            await authenticate(reader, writer, mechanism="PLAIN", username="alice",
                               password="alice-secret", client_id="good", timeout=10)
            good = WireClient(reader, writer)
            good.correlation_id = 10
            resp = await good.request(record)
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert calls == [(0, "SASL_PLAINTEXT")]
            assert await end_offset() == 1
            await good.close()
            await plain.close()
    run(body, 90)
