"""TLS contexts from Kafka's `ssl.*` configs (Kafka's SslFactory / DefaultSslEngineFactory).

Key material: PEM files, inline PEM (KIP-651: `ssl.keystore.type=PEM` with
`ssl.keystore.certificate.chain` and `ssl.keystore.key`, `ssl.truststore.certificates`) and
PKCS12 (read with `cryptography`). JKS (and JCEKS) stores are refused with a message saying how
to convert them. Private keys reach OpenSSL through a private temporary file holding the key
encrypted under a one-time password, removed before the call returns: nothing unencrypted is
written to disk.

`props` maps Kafka's names to strings; listener-prefixed overrides (`listener.name.<l>.ssl.*`)
are resolved by the caller (the broker's config), so these functions see plain `ssl.*` names.
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
SSL_PROTOCOLS = {"TLS", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", "SSL", "SSLv3"}
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
STORE_TYPES = ("JKS", "PKCS12", "PEM")
DEFAULT_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"

_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")


class SslConfigError(ValueError):
    """An ssl.* value that cannot be used; the message names the key."""


def _get(props: Mapping[str, Any], key: str) -> str | None:
    value = props.get(key)
    if value is None:
        return None
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    text = str(value)
    return text if text.strip() else None


def _password(props: Mapping[str, Any], key: str) -> bytes | None:
    value = _get(props, key)
    return value.encode() if value is not None else None


def _list(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


def jks_refusal(key: str) -> str:
    return (f"{key}: JKS key stores are not supported by odradek; convert it to PKCS12 "
            "(keytool -importkeystore -srckeystore FILE.jks -destkeystore FILE.p12 "
            "-deststoretype PKCS12) or to PEM, and set the type to PKCS12 or PEM")


def validate(props: Mapping[str, Any]) -> None:
    """Check the values of the ssl.* names without loading any file (config validation)."""
    for store in ("ssl.keystore.type", "ssl.truststore.type"):
        t = _get(props, store)
        if t is None:
            continue
        if t.upper() in ("JKS", "JCEKS"):
            raise SslConfigError(jks_refusal(store))
        if t.upper() not in STORE_TYPES:
            raise SslConfigError(f"{store}: unknown store type {t!r} (PKCS12 or PEM)")
    auth = _get(props, "ssl.client.auth")
    if auth is not None and auth.strip().lower() not in CLIENT_AUTH:
        raise SslConfigError(f"ssl.client.auth: {auth!r} is not one of none, requested, required")
    protocols = _get(props, "ssl.enabled.protocols")
    if protocols is None and "ssl.enabled.protocols" in props:
        raise SslConfigError("ssl.enabled.protocols: no protocol enabled")
    if protocols is not None:
        for p in _list(protocols):
            if p not in TLS_VERSIONS:
                raise SslConfigError(f"ssl.enabled.protocols: unknown protocol {p!r} "
                                     f"(TLSv1.2, TLSv1.3)")
        if not _list(protocols):
            raise SslConfigError("ssl.enabled.protocols: no protocol enabled")
    proto = _get(props, "ssl.protocol")
    if proto is not None and proto not in SSL_PROTOCOLS:
        raise SslConfigError(f"ssl.protocol: unknown protocol {proto!r}")
    algorithm = _get(props, "ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.strip().lower() != "https":
        raise SslConfigError(f"ssl.endpoint.identification.algorithm: {algorithm!r} is not "
                             "supported (https, or empty to disable)")
    if (_get(props, "ssl.keystore.certificate.chain") is None) != (
            _get(props, "ssl.keystore.key") is None):
        raise SslConfigError("ssl.keystore.certificate.chain and ssl.keystore.key must be set "
                             "together")
    for inline in ("ssl.keystore.key", "ssl.keystore.certificate.chain",
                   "ssl.truststore.certificates"):
        value = _get(props, inline)
        if value is not None and "-----BEGIN" not in value:
            raise SslConfigError(f"{inline}: expected PEM text (-----BEGIN ...)")


def server_ssl_context(props: Mapping[str, Any]) -> ssl.SSLContext:
    """The context of a broker's TLS listener: its key store (required), its trust store for
    client certificates, `ssl.client.auth`, protocols and cipher suites."""
    validate(props)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols_and_ciphers(ctx, props)
    if not _load_key_store(ctx, props):
        raise SslConfigError("ssl.keystore.location: a TLS listener needs a key store "
                             "(ssl.keystore.location, or ssl.keystore.certificate.chain and "
                             "ssl.keystore.key)")
    auth = (_get(props, "ssl.client.auth") or "none").strip().lower()
    ctx.verify_mode = CLIENT_AUTH[auth]
    if ctx.verify_mode != ssl.CERT_NONE:
        _load_trust_store(ctx, props, server=True)
    return ctx


def client_ssl_context(props: Mapping[str, Any]) -> ssl.SSLContext:
    """The context of a client (or a broker connecting to another broker): the server's
    certificate is always verified against the trust store (the system's without one); its
    host name per `ssl.endpoint.identification.algorithm` (https by default, empty disables);
    a key store, if any, is offered as the client certificate."""
    validate(props)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols_and_ciphers(ctx, props)
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https")
    ctx.check_hostname = bool(algorithm and str(algorithm).strip())
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_trust_store(ctx, props, server=False)
    _load_key_store(ctx, props)
    return ctx


# -- protocols and cipher suites ------------------------------------------------------------
def _protocols_and_ciphers(ctx: ssl.SSLContext, props: Mapping[str, Any]) -> None:
    enabled = _list(_get(props, "ssl.enabled.protocols") or DEFAULT_ENABLED_PROTOCOLS)
    versions = sorted(TLS_VERSIONS[p] for p in enabled)
    try:
        ctx.minimum_version = versions[0]
        ctx.maximum_version = versions[-1]
    except ValueError as exc:
        raise SslConfigError(f"ssl.enabled.protocols: {exc}") from None
    suites = _list(_get(props, "ssl.cipher.suites"))
    tls12 = [openssl_cipher_name(s) for s in suites if not _is_tls13_suite(s)]
    if suites and not tls12 and versions[0] < ssl.TLSVersion.TLSv1_3:
        # only TLS 1.3 suites named: TLS 1.2 can negotiate none of them
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise SslConfigError(
                f"ssl.cipher.suites: none of {', '.join(suites)} is available") from None


def _is_tls13_suite(name: str) -> bool:
    return name in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                    "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                    "TLS_AES_128_CCM_8_SHA256")


_IANA = re.compile(r"^TLS_(ECDHE|DHE)_(RSA|ECDSA)_WITH_(AES_(128|256)_(GCM|CBC)|"
                   r"CHACHA20_POLY1305)_(SHA256|SHA384|SHA)$")


def openssl_cipher_name(name: str) -> str:
    """A Java (IANA) TLS 1.2 suite name in OpenSSL's spelling, e.g.
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256; other names as given
    (OpenSSL's own spelling is accepted too)."""
    m = _IANA.match(name.strip())
    if not m:
        return name.strip()
    kx, auth, cipher, bits, mode, digest = m.groups()
    prefix = f"{kx}-{auth}" if (kx, auth) != ("DHE", "RSA") else "DHE-RSA"
    if kx == "ECDHE" and auth == "ECDSA":
        prefix = "ECDHE-ECDSA"
    if cipher == "CHACHA20_POLY1305":
        return f"{prefix}-CHACHA20-POLY1305"
    if mode == "GCM":
        return f"{prefix}-AES{bits}-GCM-{digest}"
    return f"{prefix}-AES{bits}-{digest if digest != 'SHA' else 'SHA'}"


# -- stores ------------------------------------------------------------------------------------
def _store_type(props: Mapping[str, Any], type_key: str, location_key: str, data: bytes) -> str:
    declared = _get(props, type_key)
    if data[:4] in _JKS_MAGIC:
        raise SslConfigError(jks_refusal(location_key))
    if declared is not None:
        t = declared.upper()
        if t in ("JKS", "JCEKS"):
            raise SslConfigError(jks_refusal(type_key))
        return t
    # Kafka's default type is JKS; the file says what it really is
    return "PEM" if b"-----BEGIN" in data else "PKCS12"


def _read(props: Mapping[str, Any], key: str) -> bytes:
    location = _get(props, key)
    assert location is not None
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise SslConfigError(f"{key}: cannot read {location}: {exc.strerror or exc}") from None


def _load_key_store(ctx: ssl.SSLContext, props: Mapping[str, Any]) -> bool:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key_password = _password(props, "ssl.key.password")
    store_password = _password(props, "ssl.keystore.password")
    chain_text = _get(props, "ssl.keystore.certificate.chain")
    if chain_text is not None:
        key_text = _get(props, "ssl.keystore.key") or ""
        key = _load_pem_key(key_text.encode(), key_password, "ssl.keystore.key")
        certs = _pem_certificates(chain_text.encode(), "ssl.keystore.certificate.chain")
        _load_chain(ctx, key, certs)
        return True
    if _get(props, "ssl.keystore.location") is None:
        return False
    data = _read(props, "ssl.keystore.location")
    kind = _store_type(props, "ssl.keystore.type", "ssl.keystore.location", data)
    if kind == "PEM":
        key = _load_pem_key(data, key_password or store_password, "ssl.keystore.location")
        certs = _pem_certificates(data, "ssl.keystore.location")
        _load_chain(ctx, key, certs)
        return True
    try:
        loaded = pkcs12.load_pkcs12(data, store_password)
    except ValueError as exc:
        raise SslConfigError(f"ssl.keystore.location: cannot read the PKCS12 key store "
                             f"(wrong ssl.keystore.password?): {exc}") from None
    if loaded.key is None or loaded.cert is None:
        raise SslConfigError("ssl.keystore.location: the PKCS12 key store holds no private "
                             "key with its certificate")
    chain = [loaded.cert.certificate, *(c.certificate for c in loaded.additional_certs)]
    _load_chain(ctx, loaded.key, [c.public_bytes(serialization.Encoding.PEM) for c in chain])
    return True


def _load_pem_key(data: bytes, password: bytes | None, key: str) -> Any:
    from cryptography.hazmat.primitives import serialization

    match = re.search(rb"-----BEGIN ([A-Z ]*PRIVATE KEY)-----.*?-----END \1-----", data, re.S)
    if match is None:
        raise SslConfigError(f"{key}: no private key (-----BEGIN PRIVATE KEY-----) found")
    pem = match.group(0)
    encrypted = b"ENCRYPTED" in pem
    try:
        return serialization.load_pem_private_key(pem, password if encrypted else None)
    except (ValueError, TypeError) as exc:
        hint = " (wrong or missing ssl.key.password?)" if encrypted else ""
        raise SslConfigError(f"{key}: cannot read the private key{hint}: {exc}") from None


def _pem_certificates(data: bytes, key: str) -> list[bytes]:
    certs = re.findall(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", data, re.S)
    if not certs:
        raise SslConfigError(f"{key}: no certificate (-----BEGIN CERTIFICATE-----) found")
    return [c + b"\n" for c in certs]


def _load_chain(ctx: ssl.SSLContext, private_key: Any, certs: list[bytes]) -> None:
    """Give OpenSSL the key and its chain through a 0600 temporary file holding the key
    encrypted under a one-time password; the file is gone when this returns."""
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_urlsafe(32).encode()
    encrypted = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time))
    fd, path = tempfile.mkstemp(prefix="odradek-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(certs) + encrypted)
        ctx.load_cert_chain(path, password=one_time)
    except ssl.SSLError as exc:
        raise SslConfigError(f"ssl.keystore: the key does not match its certificate: "
                             f"{exc}") from None
    finally:
        os.unlink(path)


def _load_trust_store(ctx: ssl.SSLContext, props: Mapping[str, Any], *, server: bool) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    inline = _get(props, "ssl.truststore.certificates")
    if inline is not None:
        pem = b"".join(_pem_certificates(inline.encode(), "ssl.truststore.certificates"))
        ctx.load_verify_locations(cadata=pem.decode())
        return
    if _get(props, "ssl.truststore.location") is None:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH)
        return
    data = _read(props, "ssl.truststore.location")
    kind = _store_type(props, "ssl.truststore.type", "ssl.truststore.location", data)
    if kind == "PEM":
        pem = b"".join(_pem_certificates(data, "ssl.truststore.location"))
    else:
        try:
            loaded = pkcs12.load_pkcs12(data, _password(props, "ssl.truststore.password"))
        except ValueError as exc:
            raise SslConfigError(f"ssl.truststore.location: cannot read the PKCS12 trust "
                                 f"store (wrong ssl.truststore.password?): {exc}") from None
        certs = [c.certificate for c in loaded.additional_certs]
        if loaded.cert is not None:
            certs.append(loaded.cert.certificate)
        if not certs:
            raise SslConfigError("ssl.truststore.location: the PKCS12 trust store holds no "
                                 "certificate")
        pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    try:
        ctx.load_verify_locations(cadata=pem.decode())
    except ssl.SSLError as exc:
        raise SslConfigError(f"ssl.truststore: cannot load the certificates: {exc}") from None
