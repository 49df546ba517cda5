"""Test certificates (trustme): a CA, a broker certificate for localhost/127.0.0.1 and client
certificates, written as the files Kafka's ssl.* configs name (PEM and PKCS12)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

PASSWORD = "changeit"


@dataclass
class Certs:
    dir: Path
    ca: trustme.CA
    ca_pem: Path           # the trust store (PEM)
    broker_pem: Path       # key + chain (PEM key store)
    broker_p12: Path       # key + chain (PKCS12, password PASSWORD)
    trust_p12: Path        # the CA (PKCS12 trust store, password PASSWORD)
    client_cert: Path      # CN=alice,OU=eng,O=acme
    client_key: Path
    client_pem: Path       # key + chain

    def broker_ssl(self, prefix: str = "") -> dict[str, str]:
        """Broker ssl.* configs (PEM files), optionally listener-prefixed."""
        return {f"{prefix}ssl.keystore.type": "PEM",
                f"{prefix}ssl.keystore.location": str(self.broker_pem),
                f"{prefix}ssl.truststore.type": "PEM",
                f"{prefix}ssl.truststore.location": str(self.ca_pem)}

    def client_ssl(self, with_cert: bool = True) -> dict[str, Any]:
        """Java-client properties for odradek.client over SSL."""
        out: dict[str, Any] = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                               "ssl.truststore.location": str(self.ca_pem)}
        if with_cert:
            out.update({"ssl.keystore.type": "PEM",
                        "ssl.keystore.location": str(self.client_pem)})
        return out


def _p12(name: str, key: Any, cert: Any, cas: list[Any]) -> bytes:
    return pkcs12.serialize_key_and_certificates(
        name.encode(), key, cert, cas or None,
        serialization.BestAvailableEncryption(PASSWORD.encode()))


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="odradek test CA")
    broker = ca.issue_cert("localhost", "127.0.0.1", common_name="broker")
    client = ca.issue_cert("alice", common_name="alice", organization_name="acme",
                           organization_unit_name="eng")
    ca_pem = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    broker_pem = directory / "broker.pem"
    broker.private_key_and_cert_chain_pem.write_to_path(str(broker_pem))
    key = serialization.load_pem_private_key(broker.private_key_pem.bytes(), None)
    leaf = x509.load_pem_x509_certificate(broker.cert_chain_pems[0].bytes())
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    broker_p12 = directory / "broker.p12"
    broker_p12.write_bytes(_p12("broker", key, leaf, [ca_cert]))
    trust_p12 = directory / "truststore.p12"
    trust_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca_cert], serialization.BestAvailableEncryption(PASSWORD.encode())))
    client_cert = directory / "client.crt"
    client_key = directory / "client.key"
    client_pem = directory / "client.pem"
    client_cert.write_bytes(b"".join(b.bytes() for b in client.cert_chain_pems))
    client.private_key_pem.write_to_path(str(client_key))
    client.private_key_and_cert_chain_pem.write_to_path(str(client_pem))
    return Certs(directory, ca, ca_pem, broker_pem, broker_p12, trust_p12, client_cert,
                 client_key, client_pem)


def handshake(server: ssl.SSLContext, client: ssl.SSLContext,
              server_hostname: str = "localhost") -> bytes | None:
    """Run a TLS handshake in memory; the client certificate (DER) the server saw."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    if not all(done.values()):
        raise ssl.SSLError("handshake did not complete")
    return s.getpeercert(binary_form=True)
