"""SASL on an in-process broker's SASL_PLAINTEXT listener: PLAIN and SCRAM-SHA-256/512 through
security/sasl_client.py and raw KIP-152 tokens; failed authentication (Kafka's error and message,
then a closed connection, without memory growing over 200 attempts); the pre-authentication
gate; SCRAM credentials altered at run time (AlterUserScramCredentials) in force at once; each
listener answered with its own endpoints (Metadata, FindCoordinator)."""

from __future__ import annotations

import asyncio
import gc
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import scramp
from kio.schema.errors import ErrorCode

from odradek.client.admin import AsyncAdmin
from odradek.client.errors import KafkaError
from odradek.protocol.codec import make
from odradek.security.errors import SaslAuthenticationError
from odradek.security.sasl_client import authenticate
from odradek.server.broker import Broker
from tests.integration.broker_harness import req_module, run
from tests.integration.sasl_support import sasl_broker
from tests.wire import WireClient

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


async def open_sasl(broker: Broker, mechanism: str, username: str,
                    password: str) -> WireClient:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.bound_ports[0])
    try:
        await authenticate(reader, writer, mechanism=mechanism, username=username,
                           password=password, client_id="sasl-test", timeout=10)
    except BaseException:
        writer.close()
        raise
    client = WireClient(reader, writer)
    client.correlation_id = 10
    return client


async def metadata(client: WireClient) -> Any:
    return await client.request(make(req_module(3, 9).MetadataRequest, topics=None,
                                     allow_auto_topic_creation=False,
                                     include_cluster_authorized_operations=False,
                                     include_topic_authorized_operations=False))


async def closed(client: WireClient, timeout: float = 5.0) -> bool:
    try:
        data = await asyncio.wait_for(client.reader.read(1 << 16), timeout)
    except (ConnectionError, OSError):
        return True
    return data == b"" or client.reader.at_eof()


async def admin_for(broker: Broker) -> AsyncAdmin:
    # the PLAINTEXT listener (second): the tests' way in without credentials
    return await AsyncAdmin(bootstrap_servers=f"127.0.0.1:{broker.bound_ports[1]}").start()


async def add_scram_user(broker: Broker, user: str, password: str) -> None:
    admin = await admin_for(broker)
    try:
        await admin.alter_user_scram_credentials(
            [(user, m, password, 4096) for m in SCRAM])
    finally:
        await admin.close()


def test_plain_and_scram_authenticate(tmp_path: Path) -> None:
    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            await add_scram_user(broker, "bob", "bob-secret")
            for mechanism, user, password in [("PLAIN", "alice", "alice-secret"),
                                              *[(m, "bob", "bob-secret") for m in SCRAM]]:
                client = await open_sasl(broker, mechanism, user, password)
                assert len((await metadata(client)).brokers) == 1
                conns = [c for c in broker.socket_server.connections if c.authenticated
                         and c.listener_name == "SASL_PLAINTEXT"]
                assert [str(c.principal) for c in conns] == [f"User:{user}"]
                await client.close()
                await asyncio.sleep(0.05)
    run(body)


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_wrong_password_fails_and_closes(tmp_path: Path, mechanism: str) -> None:
    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            await add_scram_user(broker, "bob", "bob-secret")
            user = "alice" if mechanism == "PLAIN" else "bob"
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(SaslAuthenticationError) as info:
                await open_sasl(broker, mechanism, user, "wrong")
            assert loop.time() - start >= 0.09  # connection.failed.authentication.delay.ms
            expected = ("Authentication failed: Invalid username or password"
                        if mechanism == "PLAIN" else
                        "Authentication failed during authentication due to invalid credentials "
                        f"with SASL mechanism {mechanism}")
            assert str(info.value) == expected
            with pytest.raises(SaslAuthenticationError):
                await open_sasl(broker, mechanism, "nobody", "wrong")
    run(body)


def test_failed_authentication_answer_then_close(tmp_path: Path) -> None:
    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            c = await WireClient.connect("127.0.0.1", broker.bound_ports[0])
            hs = await c.request(req_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN"))
            assert hs.error_code == ErrorCode.none
            assert hs.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
            resp = await c.request(req_module(36, 2).SaslAuthenticateRequest(
                auth_bytes=b"\0alice\0bad"))
            assert resp.error_code == ErrorCode.sasl_authentication_failed
            assert resp.error_message == "Authentication failed: Invalid username or password"
            assert await closed(c)
    run(body)


def test_gate_before_authentication(tmp_path: Path) -> None:
    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            port = broker.bound_ports[0]
            # ApiVersions is served; Metadata closes the connection
            c = await WireClient.connect("127.0.0.1", port)
            av = await c.request(make(req_module(18, 3).ApiVersionsRequest,
                                      client_software_name="t", client_software_version="1"))
            keys = {k.api_key for k in av.api_keys}
            assert {17, 36, 50, 51} <= keys
            c.send(make(req_module(3, 9).MetadataRequest, topics=None,
                        allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False))
            assert await closed(c)
            # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then closed
            c = await WireClient.connect("127.0.0.1", port)
            resp = await c.request(req_module(36, 1).SaslAuthenticateRequest(auth_bytes=b"x"))
            assert resp.error_code == ErrorCode.illegal_sasl_state
            assert await closed(c)
            # GSSAPI / OAUTHBEARER: UNSUPPORTED_SASL_MECHANISM with the enabled list
            for mechanism in ("GSSAPI", "OAUTHBEARER"):
                c = await WireClient.connect("127.0.0.1", port)
                hs = await c.request(req_module(17, 1).SaslHandshakeRequest(mechanism=mechanism))
                assert hs.error_code == ErrorCode.unsupported_sasl_mechanism
                assert hs.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
                assert await closed(c)
            # a frame over sasl.server.max.receive.size closes before it is buffered
            c = await WireClient.connect("127.0.0.1", port)
            await c.raw(struct.pack(">i", 524289) + b"\0" * 64)
            assert await closed(c)
            # after authentication: a second handshake is ILLEGAL_SASL_STATE (no re-auth)
            c = await open_sasl(broker, "PLAIN", "alice", "alice-secret")
            hs = await c.request(req_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN"))
            assert hs.error_code == ErrorCode.illegal_sasl_state
            assert len((await metadata(c)).brokers) == 1
            await c.close()
            # the PLAINTEXT listener: no SASL, handshake refused, requests served
            c = await WireClient.connect("127.0.0.1", broker.bound_ports[1])
            hs = await c.request(req_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN"))
            assert hs.error_code == ErrorCode.illegal_sasl_state
            assert len((await metadata(c)).brokers) == 1
            await c.close()
    run(body)


def test_each_listener_is_answered_with_its_own_endpoints(tmp_path: Path) -> None:
    """Metadata and FindCoordinator name the broker at the listener the request came in on, as
    Kafka answers per listener: a client that bootstrapped on SASL_PLAINTEXT is sent back to
    the SASL port, one on PLAINTEXT to the PLAINTEXT port."""
    async def coordinator(client: WireClient) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:  # the first asks create __consumer_offsets
            found = await client.request(req_module(10, 3).FindCoordinatorRequest(
                key="per-listener", key_type=0))
            if found.error_code == ErrorCode.none or loop.time() > deadline:
                return found
            await asyncio.sleep(0.1)

    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            sasl_port, plain_port = broker.bound_ports
            assert sasl_port != plain_port
            sasl = await open_sasl(broker, "PLAIN", "alice", "alice-secret")
            plain = await WireClient.connect("127.0.0.1", plain_port)
            try:
                for client, port in ((sasl, sasl_port), (plain, plain_port)):
                    brokers = (await metadata(client)).brokers
                    assert [(b.node_id, b.host, b.port) for b in brokers] == [
                        (0, "127.0.0.1", port)]
                    found = await coordinator(client)
                    assert found.error_code == ErrorCode.none
                    assert (found.node_id, found.host, found.port) == (0, "127.0.0.1", port)
            finally:
                await sasl.close()
                await plain.close()
    run(body)


def test_raw_tokens_after_v0_handshake(tmp_path: Path) -> None:
    """KIP-152: after SaslHandshake v0 the tokens travel as bare size-prefixed frames."""
    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            await add_scram_user(broker, "bob", "bob-secret")
            port = broker.bound_ports[0]
            c = await WireClient.connect("127.0.0.1", port)
            hs = await c.request(req_module(17, 0).SaslHandshakeRequest(mechanism="PLAIN"))
            assert hs.error_code == ErrorCode.none
            token = b"\0alice\0alice-secret"
            await c.raw(struct.pack(">i", len(token)) + token)
            assert await c.read_frame() == b""
            c.correlation_id = 5
            assert len((await metadata(c)).brokers) == 1
            await c.close()

            c = await WireClient.connect("127.0.0.1", port)
            await c.request(req_module(17, 0).SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
            client = scramp.ScramClient(["SCRAM-SHA-512"], "bob", "bob-secret")
            first = client.get_client_first().encode()
            await c.raw(struct.pack(">i", len(first)) + first)
            client.set_server_first((await c.read_frame()).decode())
            final = client.get_client_final().encode()
            await c.raw(struct.pack(">i", len(final)) + final)
            client.set_server_final((await c.read_frame()).decode())
            assert len((await metadata(c)).brokers) == 1
            await c.close()

            c = await WireClient.connect("127.0.0.1", port)  # a short bad token: closed
            await c.request(req_module(17, 0).SaslHandshakeRequest(mechanism="PLAIN"))
            await c.raw(struct.pack(">i", 4) + b"\0a\0b")
            assert await closed(c)
    run(body)


def test_failed_attempts_do_not_grow_memory(tmp_path: Path) -> None:
    async def attempt(broker: Broker) -> None:
        with pytest.raises(SaslAuthenticationError):
            await open_sasl(broker, "SCRAM-SHA-256", "bob", "wrong")

    async def batch(broker: Broker, n: int) -> None:
        for _ in range(n // 20):
            await asyncio.gather(*(attempt(broker) for _ in range(20)))

    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            await add_scram_user(broker, "bob", "bob-secret")
            await batch(broker, 40)  # warm caches
            await asyncio.sleep(0.2)
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.take_snapshot()
                await batch(broker, 200)
                await asyncio.sleep(0.3)
                gc.collect()
                after = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
            growth = sum(s.size_diff for s in after.compare_to(before, "filename"))
            assert growth < 256 * 1024, growth
            assert not [c for c in broker.socket_server.connections
                        if c.listener_name == "SASL_PLAINTEXT"]
            client = await open_sasl(broker, "SCRAM-SHA-256", "bob", "bob-secret")
            assert len((await metadata(client)).brokers) == 1
            await client.close()
    run(body, timeout=120)


def test_credentials_altered_at_run_time(tmp_path: Path) -> None:
    async def body() -> None:
        async with sasl_broker(tmp_path) as broker:
            admin = await admin_for(broker)
            try:
                with pytest.raises(SaslAuthenticationError):
                    await open_sasl(broker, "SCRAM-SHA-256", "carol", "carol-pw")
                await admin.alter_user_scram_credentials([("carol", "SCRAM-SHA-256",
                                                           "carol-pw", 8192)])
                (await open_sasl(broker, "SCRAM-SHA-256", "carol", "carol-pw")).writer.close()
                with pytest.raises(SaslAuthenticationError):
                    await open_sasl(broker, "SCRAM-SHA-512", "carol", "carol-pw")
                assert await admin.describe_user_scram_credentials(["carol"]) == {
                    "carol": [("SCRAM-SHA-256", 8192)]}
                assert await admin.describe_user_scram_credentials() == {
                    "carol": [("SCRAM-SHA-256", 8192)]}
                # errors as Kafka's ZkAdminManager gives them
                res = await admin.alter_user_scram_credentials(
                    [("dave", "SCRAM-SHA-256", "pw", 4095), ("erin", "SCRAM-SHA-1", "pw", 4096),
                     ("", "SCRAM-SHA-256", "pw", 4096), ("frank", "SCRAM-SHA-256", "pw", 4096)],
                    [("frank", "SCRAM-SHA-256"), ("gina", "SCRAM-SHA-512")],
                    raise_errors=False)
                assert {u: (e.code, str(e)) if e else None for u, e in res.items()} == {
                    "frank": (92, res["frank"] and str(res["frank"])),
                    "gina": (91, res["gina"] and str(res["gina"])),
                    "dave": (93, res["dave"] and str(res["dave"])),
                    "erin": (33, res["erin"] and str(res["erin"])),
                    "": (93, res[""] and str(res[""]))}
                assert "Too few iterations" in str(res["dave"])
                assert "Attempt to delete a user credential that does not exist" in str(
                    res["gina"])
                got = await admin.describe_user_scram_credentials(["carol", "nobody"],
                                                                  raise_errors=False)
                assert isinstance(got["nobody"], KafkaError) and got["nobody"].code == 91
                # delete: in force at once
                await admin.alter_user_scram_credentials(deletions=[("carol", "SCRAM-SHA-256")])
                with pytest.raises(SaslAuthenticationError):
                    await open_sasl(broker, "SCRAM-SHA-256", "carol", "carol-pw")
                assert await admin.describe_user_scram_credentials() == {}
            finally:
                await admin.close()
    run(body)
