"""Test support for the security tests: certificates (trustme), JAAS text, secured clusters.

Import what a test module needs (fixtures included: ``from tests.security_support import
secure_cluster``).

* :class:`Certificates`: a CA, a server certificate for 127.0.0.1/localhost and client
  certificates (CN=<name>), as PEM files in a directory, in the forms the clients take (Java's
  ``ssl.truststore.location``/``ssl.keystore.location`` with type PEM, librdkafka's
  ``ssl.ca.location``/``ssl.certificate.location``/``ssl.key.location``, Python's ``ssl``);
* JAAS builders: ``scram_jaas``, ``plain_jaas``, ``plain_server_jaas``, ``zookeeper_client_jaas``;
* ``secure_cluster``: a factory fixture starting `odradek.Cluster` with a `ClusterSecurity`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trustme

from odradek.cluster import Cluster, ClusterSecurity
from odradek.security.jaas import quote

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"



def scram_jaas(username: str, password: str) -> str:
    """A client's (or broker's) ``sasl.jaas.config`` for SCRAM-SHA-256/512."""
    return f"{SCRAM_MODULE} required username={quote(username)} password={quote(password)};"


def plain_jaas(username: str, password: str) -> str:
    return f"{PLAIN_MODULE} required username={quote(username)} password={quote(password)};"


def plain_server_jaas(username: str, password: str, users: Mapping[str, str]) -> str:
    """A broker listener's PLAIN login with its ``user_<name>`` entries."""
    entries = " ".join(f"user_{u}={quote(p)}" for u, p in users.items())
    return (f"{PLAIN_MODULE} required username={quote(username)} "
            f"password={quote(password)} {entries};")


def zookeeper_client_jaas(username: str, password: str) -> str:
    """A JAAS file with the ``Client`` section of ZooKeeper's digest login."""
    return (f"Client {{\n    {DIGEST_MODULE} required\n    username={quote(username)}\n"
            f"    password={quote(password)};\n}};\n")


class Certificates:
    """A test CA with a server certificate and client certificates, written as PEM files."""

    def __init__(self, directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                 server_cn: str = "broker") -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name="odradek tests")
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.server = self.ca.issue_cert(*hosts, common_name=server_cn)
        self.server_file = directory / "server.pem"  # key + chain (Kafka's PEM keystore)
        self.server.private_key_and_cert_chain_pem.write_to_path(str(self.server_file))

    def client(self, name: str) -> dict[str, Path]:
        """A client certificate with CN=<name>: files ``pem`` (key + chain), ``cert``, ``key``."""
        leaf = self.ca.issue_cert(f"{name}.client.odradek.test", common_name=name)
        files = {"pem": self.dir / f"client-{name}.pem", "cert": self.dir / f"client-{name}.crt",
                 "key": self.dir / f"client-{name}.key"}
        leaf.private_key_and_cert_chain_pem.write_to_path(str(files["pem"]))
        files["cert"].write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(files["key"]))
        return files

    def server_props(self, client_auth: str = "none") -> dict[str, str]:
        """A broker's ``ssl.*`` configs for these files."""
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.server_file),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
                "ssl.client.auth": client_auth}

    def client_props(self, name: str | None = None) -> dict[str, str]:
        """A Java-named client's ``ssl.*`` configs (with a client certificate for ``name``)."""
        props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file)}
        if name is not None:
            props.update({"ssl.keystore.type": "PEM",
                          "ssl.keystore.location": str(self.client(name)["pem"])})
        return props


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path / "certs")


@pytest.fixture
def secure_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``secure_cluster(brokers=3, security=ClusterSecurity(...), **kwargs)`` -> a started
    Cluster; all stopped at teardown."""
    started: list[Cluster] = []

    def make(brokers: int = 3, security: ClusterSecurity | None = None, **kwargs: Any
             ) -> Cluster:
        kwargs.setdefault("data_dir", tmp_path / f"secure-cluster-{len(started)}")
        cluster = Cluster(brokers, security=security or ClusterSecurity(), **kwargs)
        started.append(cluster)
        return cluster.start()

    yield make
    for cluster in reversed(started):
        cluster.stop()
