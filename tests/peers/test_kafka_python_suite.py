"""kafka-python's own integration tests against an odradek broker (docs/compatibility.md).

kafka-python ships its integration tests in its sdist. Given `KAFKA_URI` they use that broker
instead of spawning a Kafka of their own (test/integration/conftest.py, `kafka_broker_factory`),
and `KAFKA_VERSION` says which broker to expect. Here the pinned sdist is fetched from PyPI with
pip at test time (cached under pytest's cache), unpacked into the test's directory, and its
`test/integration` run in a subprocess against a one-broker odradek cluster configured as
kafka-python's test broker for Kafka 1.0 to 3.x is (its servers/resources/1.0/kafka.properties).
The verdict is read from the run's JUnit XML.

The sdist lacks two files of kafka-python's source tree that its fixtures import: `test/__init__.py`
(without it `test` is Python's own regression-test package) and `test/service.py`, whose
`ExternalService` is all a run against `KAFKA_URI` uses. Both are written into the unpacked tree
(`SDIST_SHIMS`); `SpawnedService`, which starts a JVM broker, refuses.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek import Cluster

pytestmark = [pytest.mark.peers, pytest.mark.timeout(900)]

SDIST = "kafka-python==3.0.12"
SDIST_FILE = "kafka_python-3.0.12.tar.gz"
SDIST_SHA256 = "4ccda3616b9aa5c353d74a97f2770d6cd1b950890d77ab0e8890e09a48eeed65"
#: The broker kafka-python's tests are told to expect (Kafka 2.8's last release).
KAFKA_VERSION = "2.8.2"
#: Passed in the run recorded in docs/compatibility.md; fewer is a regression.
EXPECTED_PASSED = 50

#: kafka-python's test broker (servers/resources/1.0/kafka.properties) for one broker, with the
#: partition and replica counts its `KafkaFixture` renders into it (4 and 1). The cluster sets
#: `broker.id`, `listeners` and `log.dirs`; it runs on its embedded coordination store, so the
#: template's `zookeeper.*` keys are left out (its 500 ms session would expire on a loaded
#: machine). `auto.create.topics.enable` is Kafka's default, written out.
BROKER_CONFIG: dict[str, str] = {
    "security.inter.broker.protocol": "PLAINTEXT",
    "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "num.partitions": "4",
    "default.replication.factor": "1",
    "replica.lag.time.max.ms": "1000",
    "replica.socket.timeout.ms": "1000",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168",
    "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
    "log.cleaner.enable": "false",
    "offsets.commit.timeout.ms": "500",
    "offsets.topic.num.partitions": "2",
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
}

#: Tests not run, each with the reason: they need a broker of their own, or (the last) odradek
#: differs from Kafka 2.8 on purpose.
DESELECTED: dict[str, str] = {
    **{f"test/integration/test_ssl_integration.py::TestSSLConnection::{name}": (
        "the ssl_kafka fixture spawns its own JVM broker with an SSL listener (keystores made "
        "by keytool); KAFKA_URI is not used. odradek's TLS is tested with kafka-python in "
        "tests/interop/test_tls.py") for name in (
        "test_ssl_handshake", "test_legacy_kafka_client_ssl")},
    **{f"test/integration/test_sasl_integration.py::{name}[{mechanism}]": (
        "the sasl_kafka fixture asks for a SASL_PLAINTEXT broker it spawns; against KAFKA_URI "
        "the module skips itself ('Testing on external Kafka Broker'). odradek's SASL is "
        "tested with kafka-python in tests/interop/test_sasl_interop.py")
       for name in ("test_admin", "test_produce_and_consume", "test_client")
       for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")},
    "test/integration/test_consumer_integration.py::test_kafka_version_infer": (
        "kafka-python infers the broker's version from ApiVersions; odradek advertises later "
        "versions than 2.8's on purpose (Fetch 16, Produce 10, Metadata 12; docs/design.md "
        "S-8.1), so it infers 3.7"),
}

#: Tests whose failure is kafka-python's own race, not the broker's: run once more if they fail
#: (and only they), and counted as passed if they pass then.
FLAKY: dict[str, str] = {
    "test/integration/test_consumer_integration.py::test_kafka_consumer_max_bytes_simple": (
        "kafka-python 3.0.12's client: a subscription made while the consumer's bootstrap "
        "Metadata request (topics=[]) is in flight is not asked for until the next refresh, "
        "metadata.max.age.ms later; in the failing run no request reached the broker in the "
        "test's 9 s"),
}

#: Written into the unpacked sdist (see the module docstring).
SDIST_SHIMS: dict[str, str] = {
    "test/__init__.py": "",
    "test/service.py": '''"""What a run against KAFKA_URI uses of kafka-python's test/service.py."""


class ExternalService:
    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run has no Kafka installation to spawn a broker from")
''',
}


def _cache_dir(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("peers-sdists"))
    return tmp_path_factory.mktemp("peers-sdists")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def kafka_python_sdist(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned sdist, fetched from PyPI by pip once and kept in pytest's cache."""
    directory = _cache_dir(request.config, tmp_path_factory)
    archive = directory / SDIST_FILE
    if not archive.exists() or _sha256(archive) != SDIST_SHA256:
        archive.unlink(missing_ok=True)
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--disable-pip-version-check", "-q", "-d", str(directory), SDIST],
            capture_output=True, text=True, timeout=300)
        assert fetched.returncode == 0, f"pip download {SDIST} failed:\n{fetched.stderr}"
    assert _sha256(archive) == SDIST_SHA256, f"{archive} is not the pinned {SDIST}"
    return archive


def _unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Python before 3.11.4; the archive's hash is pinned above
            tar.extractall(into)
    root = into / SDIST_FILE.removesuffix(".tar.gz")
    for relative, text in SDIST_SHIMS.items():
        shim = root / relative
        assert not shim.exists(), f"the sdist now ships {relative}: drop its shim"
        shim.write_text(text)
    return root


def _junit_counts(report: Path) -> dict[str, int]:
    suite = ET.parse(report).getroot()
    if suite.tag == "testsuites":
        suite = suite[0]
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def _junit_failed(report: Path) -> list[str]:
    """The node ids (test/...py::name) of the report's failed or erroring test cases."""
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        module, _, rest = case.get("classname", "").partition(".integration.")
        parts = rest.split(".")
        out.append(f"{module}/integration/{parts[0]}.py::"
                   + "::".join([*parts[1:], case.get("name", "")]))
    return out


def test_kafka_python_integration_suite(kafka_python_sdist: Path, tmp_path: Path,
                                        odradek_cluster_factory: Callable[..., Cluster]) -> None:
    root = _unpack(kafka_python_sdist, tmp_path / "sdist")
    # kafka-python's Fixture checks for a Kafka installation even when the broker is external.
    kafka_root = tmp_path / "no-kafka-installation"
    kafka_root.mkdir()
    cluster = odradek_cluster_factory(brokers=1, overrides=BROKER_CONFIG, http=False)
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)

    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    env.update(KAFKA_URI=f"PLAINTEXT://{host}:{port}", KAFKA_VERSION=KAFKA_VERSION,
               KAFKA_ROOT=str(kafka_root))
    report = tmp_path / "kafka-python.xml"
    output = tmp_path / "kafka-python.log"
    deselect = [arg for node in DESELECTED for arg in ("--deselect", node)]
    started = time.monotonic()
    with output.open("w") as log:
        # The sdist's own `kafka` package is first on sys.path (the working directory).
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "test/integration", "-q", "-p", "no:cacheprovider",
             "-p", "no:odradek", f"--junitxml={report}", *deselect],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=780)
    text = output.read_text(errors="replace")
    tail = "\n".join(text.splitlines()[-60:])
    assert report.exists(), f"kafka-python's run wrote no report (exit {run.returncode}):\n{tail}"
    counts = _junit_counts(report)
    failed = _junit_failed(report)
    if failed and set(failed) <= set(FLAKY):  # kafka-python's own races: once more
        again = tmp_path / "kafka-python-again.xml"
        with output.open("a") as log:
            rerun = subprocess.run(
                [sys.executable, "-m", "pytest", *failed, "-q", "-p", "no:cacheprovider",
                 "-p", "no:odradek", f"--junitxml={again}"],
                cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=300)
        text = output.read_text(errors="replace")
        tail = "\n".join(text.splitlines()[-60:])
        second = _junit_counts(again) if again.exists() else {"passed": 0}
        print(f"kafka-python: {failed} failed, run again: {second}")
        if rerun.returncode == 0 and second["passed"] == len(failed):
            counts["passed"] += len(failed)
            counts["failures"] = counts["errors"] = 0
            run = rerun
    print(f"kafka-python {SDIST.split('==')[1]} against odradek in "
          f"{time.monotonic() - started:.0f}s: {counts}, {len(DESELECTED)} deselected")
    assert counts["failures"] == 0 and counts["errors"] == 0, f"{counts}\n{tail}"
    assert counts["passed"] >= EXPECTED_PASSED, f"{counts}\n{tail}"
    assert run.returncode == 0, f"exit {run.returncode}\n{tail}"
    # Every entry of DESELECTED still names a test of the sdist.
    deselected = re.findall(r"(\d+) deselected", text)
    assert deselected and int(deselected[-1]) == len(DESELECTED), tail
