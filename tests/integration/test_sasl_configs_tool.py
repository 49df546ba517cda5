"""`odradek configs --entity-type users` on a ZooKeeper-backed SASL broker: credentials written
with --zookeeper before any broker runs (as Kafka's docs create the inter-broker user), then
created, described and deleted with --bootstrap-server and --zookeeper while it runs, each in
force on the broker without a restart."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.security.errors import SaslAuthenticationError
from tests.integration.broker_harness import run
from tests.integration.sasl_support import sasl_broker
from tests.integration.test_sasl import open_sasl
from tests.zookeeper_fixture import zookeeper_connect, zookeeper_server  # noqa: F401


def configs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["configs", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


async def eventually_authenticates(broker: object, mechanism: str, user: str, password: str,
                                   expect: bool, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            client = await open_sasl(broker, mechanism, user, password)  # type: ignore[arg-type]
            client.writer.close()
            ok = True
        except SaslAuthenticationError:
            ok = False
        if ok == expect:
            return
        assert loop.time() < deadline, f"{mechanism} {user}: authenticated={ok}"
        await asyncio.sleep(0.1)


def test_users_scram_credentials(tmp_path: Path, zookeeper_connect: str,  # noqa: F811
                                 capsys: pytest.CaptureFixture[str]) -> None:
    zk = zookeeper_connect
    users = ("--entity-type", "users")
    code, out, err = configs(capsys, "--zookeeper", zk, "--alter", *users, "--entity-name",
                             "admin", "--add-config", "SCRAM-SHA-256=[iterations=8192,"
                             "password=admin-secret],SCRAM-SHA-512=[password=admin-secret]")
    assert (code, out, err) == (0, "Completed updating config for entity: user-principal "
                                "'admin'.\n", "")
    code, out, _ = configs(capsys, "--zookeeper", zk, "--describe", *users)
    assert code == 0
    assert out.startswith("Configs for user-principal 'admin' are SCRAM-SHA-256=salt=")
    assert "iterations=8192,SCRAM-SHA-512=salt=" in out and out.endswith("iterations=4096\n")
    code, _, err = configs(capsys, "--zookeeper", zk, "--alter", *users, "--entity-name", "x",
                           "--add-config", "SCRAM-SHA-256=[iterations=1024,password=p]")
    assert code == 1 and "Iterations 1024 is less than the minimum 4096" in err
    code, _, err = configs(capsys, "--zookeeper", zk, "--describe", "--entity-type", "topics")
    assert code == 1 and "--zookeeper is only supported with --entity-type users" in err

    async def body() -> None:
        async with sasl_broker(tmp_path, **{"zookeeper.connect": zk}) as broker:
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                await eventually_authenticates(broker, mechanism, "admin", "admin-secret", True,
                                               timeout=0)
            bootstrap = f"127.0.0.1:{broker.bound_ports[1]}"
            tool = functools.partial(asyncio.to_thread, configs, capsys, "--bootstrap-server",
                                     bootstrap)
            code, out, err = await tool("--alter", *users, "--entity-name", "alice",
                                        "--add-config", "SCRAM-SHA-256=[iterations=8192,"
                                        "password=alice-secret],SCRAM-SHA-512=[password=a2]")
            assert (code, out, err) == (0, "Completed updating config for user alice.\n", "")
            await eventually_authenticates(broker, "SCRAM-SHA-256", "alice", "alice-secret",
                                           True, timeout=0)
            await eventually_authenticates(broker, "SCRAM-SHA-512", "alice", "a2", True,
                                           timeout=0)
            code, out, _ = await tool("--describe", *users, "--entity-name", "alice")
            assert out == ("SCRAM credential configs for user-principal 'alice' are "
                           "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n")
            code, out, _ = await tool("--describe", *users)
            assert out.splitlines() == [
                "SCRAM credential configs for user-principal 'admin' are "
                "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096",
                "SCRAM credential configs for user-principal 'alice' are "
                "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"]
            code, out, _ = await tool("--alter", *users, "--entity-name", "alice",
                                      "--delete-config", "SCRAM-SHA-512")
            assert code == 0
            await eventually_authenticates(broker, "SCRAM-SHA-512", "alice", "a2", False,
                                           timeout=0)
            code, _, err = await tool("--alter", *users, "--entity-name", "alice",
                                      "--delete-config", "SCRAM-SHA-512")
            assert code == 1 and "Attempt to delete a user credential that does not exist" in err
            # --zookeeper while the broker runs: the change notification reaches it
            code, out, _ = await asyncio.to_thread(
                configs, capsys, "--zookeeper", zk, "--alter", *users, "--entity-name", "alice",
                "--delete-config", "SCRAM-SHA-256")
            assert code == 0
            await eventually_authenticates(broker, "SCRAM-SHA-256", "alice", "alice-secret",
                                           False)
            code, out, _ = await tool("--describe", *users, "--entity-name", "alice")
            assert (code, out) == (0, "")
    run(body, timeout=120)
