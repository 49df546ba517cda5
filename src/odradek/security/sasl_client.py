"""The client's side of SASL over an open connection (Kafka's SaslClientAuthenticator): a
SaslHandshake v1 request, then SaslAuthenticate requests carrying the tokens of PLAIN or
SCRAM-SHA-256/512 (scramp's ScramClient does RFC 5802). Used by the one connector every
outgoing connection goes through (security/connector.py)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import scramp
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from ..common import entropy
from ..protocol.codec import decode_response, encode_request, response_class
from .errors import SaslAuthenticationError
from .scram import SCRAM_MECHANISMS

CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
_SIZE = struct.Struct(">i")
_MAX_RESPONSE = 1 << 20


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: Any,
                    correlation_id: int, client_id: str) -> Any:
    writer.write(encode_request(request, correlation_id, client_id))
    await writer.drain()
    try:
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 0 < size <= _MAX_RESPONSE:
            raise SaslAuthenticationError(f"invalid SASL response size {size} from the broker")
        payload = await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise SaslAuthenticationError(
            f"connection closed by the broker during SASL authentication: {exc}") from None
    corr, body = decode_response(response_class(type(request)), payload)
    if corr != correlation_id:
        raise SaslAuthenticationError(
            f"correlation id {corr} does not match the request's {correlation_id}")
    return body


async def _authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        mechanism: str, username: str, password: str, client_id: str) -> None:
    hs = await _exchange(reader, writer, SaslHandshakeRequest(mechanism=mechanism), 1, client_id)
    if hs.error_code != 0:
        raise SaslAuthenticationError(
            f"the broker refused SASL mechanism {mechanism} (error {int(hs.error_code)}); "
            f"enabled mechanisms: {', '.join(hs.mechanisms) or 'none'}")
    correlation = 2

    async def step(token: bytes) -> bytes:
        nonlocal correlation
        resp = await _exchange(reader, writer, SaslAuthenticateRequest(auth_bytes=token),
                               correlation, client_id)
        correlation += 1
        if resp.error_code != 0:
            raise SaslAuthenticationError(
                resp.error_message or f"SASL authentication failed (error {int(resp.error_code)})")
        return bytes(resp.auth_bytes)

    if mechanism == "PLAIN":
        await step(b"\0" + username.encode() + b"\0" + password.encode())
        return
    client = scramp.ScramClient([mechanism], username, password,
                                c_nonce=entropy.token_hex())
    server_first = await step(client.get_client_first().encode())
    try:
        client.set_server_first(server_first.decode())
        server_final = await step(client.get_client_final().encode())
        client.set_server_final(server_final.decode())
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise SaslAuthenticationError(f"SCRAM exchange with the broker failed: {exc}") from None


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                       mechanism: str, username: str, password: str, client_id: str,
                       timeout: float) -> None:
    """Authenticate an open connection; raises SaslAuthenticationError with the broker's
    message (or on a timeout, an unsupported mechanism, or a server that fails SCRAM)."""
    mechanism = mechanism.upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise SaslAuthenticationError(f"SASL mechanism {mechanism} is not supported by odradek "
                                      f"(supported: {', '.join(CLIENT_MECHANISMS)})")
    try:
        await asyncio.wait_for(
            _authenticate(reader, writer, mechanism, username, password, client_id), timeout)
    except TimeoutError:
        raise SaslAuthenticationError(
            f"SASL authentication with {mechanism} timed out after {timeout}s") from None
