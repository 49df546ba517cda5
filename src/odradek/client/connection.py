"""One asyncio connection to one broker: framing, correlation ids, pipelining, ApiVersions
negotiation, request timeouts.

Requests are written as soon as they are made (pipelining); the broker answers in request order,
so responses are matched to the oldest outstanding correlation id. The version of each request
is min(the highest this client speaks, the highest the broker advertises); an API the broker does
not advertise, or whose ranges do not overlap ours, raises UnsupportedVersionError before
anything is sent. A request that times out closes the connection (its response could otherwise
arrive later and be mistaken for another's), failing everything in flight on it, as Kafka's
NetworkClient does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from .. import __version__
from ..protocol.codec import build, decode_response, encode_request, request_class, response_class
from ..security.connector import ClientSecurity, Connector, open_connection
from .errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, UnsupportedVersionError

log = logging.getLogger("odradek.client")

_SIZE = struct.Struct(">i")

# The versions of each API this client speaks: api key -> (min, max). Capped where the next
# version changes semantics the client does not implement (Fetch v13+ needs topic ids, Produce
# v11+ and Metadata v13 add leader discovery), and never below what magic-2 batches need.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 10),    # Produce
    1: (4, 12),    # Fetch
    2: (1, 7),     # ListOffsets
    3: (1, 12),    # Metadata
    8: (2, 9),     # OffsetCommit
    9: (1, 9),     # OffsetFetch
    10: (0, 4),    # FindCoordinator
    11: (0, 9),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 5),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 5),    # DescribeGroups
    16: (0, 4),    # ListGroups
    18: (0, 3),    # ApiVersions
    19: (2, 7),    # CreateTopics
    20: (1, 6),    # DeleteTopics
    22: (0, 4),    # InitProducerId
    24: (0, 3),    # AddPartitionsToTxn (v4+: the brokers' batched form)
    25: (0, 3),    # AddOffsetsToTxn
    26: (0, 3),    # EndTxn
    27: (1, 1),    # WriteTxnMarkers (Admin.abort_transaction; kio has no v0)
    28: (0, 3),    # TxnOffsetCommit
    29: (1, 2),    # DescribeAcls
    30: (1, 2),    # CreateAcls
    31: (1, 2),    # DeleteAcls
    32: (1, 4),    # DescribeConfigs
    33: (0, 2),    # AlterConfigs
    37: (0, 3),    # CreatePartitions
    42: (0, 2),    # DeleteGroups
    43: (0, 2),    # ElectLeaders
    44: (0, 1),    # IncrementalAlterConfigs
    45: (0, 0),    # AlterPartitionReassignments
    46: (0, 0),    # ListPartitionReassignments
    47: (0, 0),    # OffsetDelete
    48: (0, 1),    # DescribeClientQuotas
    49: (0, 1),    # AlterClientQuotas
    50: (0, 0),    # DescribeUserScramCredentials
    51: (0, 0),    # AlterUserScramCredentials
    61: (0, 0),    # DescribeProducers
    65: (0, 0),    # DescribeTransactions
    66: (0, 1),    # ListTransactions
}

API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
             9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
             13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
             18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId",
             29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
             32: "DescribeConfigs", 33: "AlterConfigs", 37: "CreatePartitions",
             42: "DeleteGroups", 43: "ElectLeaders", 44: "IncrementalAlterConfigs",
             45: "AlterPartitionReassignments", 46: "ListPartitionReassignments",
             47: "OffsetDelete", 48: "DescribeClientQuotas", 49: "AlterClientQuotas",
             50: "DescribeUserScramCredentials",
             51: "AlterUserScramCredentials", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn",
             26: "EndTxn", 27: "WriteTxnMarkers", 28: "TxnOffsetCommit",
             61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions"}


def request_for(api_key: int, version: int, **kwargs: Any) -> Any:
    """A request of any version from one set of keyword arguments (``codec.build``)."""
    return build(request_class(api_key, version), **kwargs)


# ---------------------------------------------------------------------------------------------


class BrokerConnection:
    """A connection to one broker. `await connect()` opens it and negotiates versions."""

    def __init__(self, host: str, port: int, *, node_id: int = -1, client_id: str = "odradek",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 security: ClientSecurity | None = None,
                 connector: Connector = open_connection) -> None:
        self.host = host
        # how the connection is opened (security.connector's seam; a simulated network's
        # connector in odradek.sim)
        self.connector = connector
        self.port = port
        self.security = security  # TLS / SASL (security.protocol and friends); None: PLAINTEXT
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._inflight: collections.OrderedDict[int, tuple[asyncio.Future[Any], type]] = \
            collections.OrderedDict()
        self._next_id = 0
        self._closed_exc: BaseException | None = None
        self.connected = False

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await self.connector(
                self.host, self.port, self.security, timeout=self.connect_timeout,
                client_id=self.client_id)
        except (TimeoutError, OSError) as exc:  # TLS handshake failures are OSErrors too
            self._closed_exc = exc
            raise KafkaConnectionError(
                f"cannot connect to node {self.node_id} at {self.host}:{self.port}: {exc!r}"
            ) from None
        except Exception as exc:  # SASL authentication refused: not retriable
            self._closed_exc = exc
            raise KafkaError(
                f"authentication with node {self.node_id} at {self.host}:{self.port} failed: "
                f"{exc}", ErrorCode.sasl_authentication_failed, retriable=False) from None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        self.connected = True
        try:
            await self._negotiate()
        except BaseException:
            self.close()
            raise

    async def _negotiate(self) -> None:
        version = CLIENT_VERSIONS[18][1]
        for _ in range(3):
            req = request_for(18, version, client_software_name="odradek",
                              client_software_version=__version__)
            resp = await self.request(req)
            if resp.error_code == ErrorCode.unsupported_version:
                # Answered with a v0 body listing what the broker speaks (KIP-511).
                theirs = {k.api_key: k.max_version for k in resp.api_keys}
                version = min(version - 1, theirs.get(18, 0)) if version else 0
                continue
            if resp.error_code != ErrorCode.none:
                raise KafkaConnectionError(f"ApiVersions failed: {resp.error_code!r}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version)
                                 for k in resp.api_keys}
            return
        raise UnsupportedVersionError("the broker answers no ApiVersions version")

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except UnsupportedVersionError:
            return False
        return True

    def version(self, api_key: int, max_version: int | None = None) -> int:
        """The version to use for `api_key`: min(ours, the broker's)."""
        lo, hi = CLIENT_VERSIONS[api_key]
        if max_version is not None:
            hi = min(hi, max_version)
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersionError(
                f"node {self.node_id} does not support {API_NAMES.get(api_key, api_key)} "
                f"(api key {api_key})")
        v = min(hi, theirs[1])
        if v < max(lo, theirs[0]):
            raise UnsupportedVersionError(
                f"node {self.node_id} speaks {API_NAMES.get(api_key, api_key)} "
                f"v{theirs[0]}-{theirs[1]}, this client v{lo}-{hi}")
        return v

    def build(self, api_key: int, max_version: int | None = None, **kwargs: Any) -> Any:
        return request_for(api_key, self.version(api_key, max_version), **kwargs)

    async def send(self, api_key: int, max_version: int | None = None, *,
                   request_timeout: float | None = None, **kwargs: Any) -> Any:
        """Build the request for the negotiated version and return the decoded response
        (`kwargs` are the request's fields; `request_timeout` in seconds)."""
        return await self.request(self.build(api_key, max_version, **kwargs),
                                  timeout=request_timeout)

    def send_nowait(self, request: Any, expect_response: bool = True) -> asyncio.Future[Any]:
        """Write a request now; the future resolves to its response (to None at once when no
        response is expected: Produce with acks=0)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._closed_exc is not None or self._writer is None:
            fut.set_exception(self._closed_error())
            return fut
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        cid = self._next_id
        try:
            data = encode_request(request, cid, self.client_id)
        except Exception as exc:
            fut.set_exception(exc)
            return fut
        if expect_response:
            self._inflight[cid] = (fut, response_class(type(request)))
        else:
            fut.set_result(None)
        self._writer.write(data)
        return fut

    async def request(self, request: Any, *, timeout: float | None = None,
                      expect_response: bool = True) -> Any:
        fut = self.send_nowait(request, expect_response)
        if self._writer is not None and self._closed_exc is None:
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self.close(KafkaConnectionError(f"write to {self} failed: {exc!r}"))
        if not expect_response:
            return await fut
        timeout = self.request_timeout if timeout is None else timeout
        try:
            # (asyncio.timeout rather than wait_for: one timer, no extra task per request)
            async with asyncio.timeout(timeout):
                return await asyncio.shield(fut)
        except TimeoutError:
            if not fut.done():
                name = API_NAMES.get(request.__api_key__, request.__api_key__)
                err = KafkaTimeoutError(
                    f"{name} request to node {self.node_id} timed out after {timeout:.1f}s")
                self.close(err)
                raise err from None
            return fut.result()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reader = self._reader
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                payload = await reader.readexactly(size)
                self._on_frame(payload)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self.close(KafkaConnectionError(f"connection to {self} lost: {exc!r}"))
        except Exception as exc:  # a response we cannot parse: the stream is unusable
            log.warning("Closing %s: %r", self, exc)
            self.close(KafkaConnectionError(f"bad response from {self}: {exc!r}"))

    def _on_frame(self, payload: bytes) -> None:
        if len(payload) < 4:
            raise KafkaConnectionError("response shorter than its header")
        (cid,) = _SIZE.unpack_from(payload, 0)
        entry = self._inflight.pop(cid, None)
        if entry is None:
            raise KafkaConnectionError(f"response for unknown correlation id {cid}")
        fut, resp_cls = entry
        try:
            _, body = decode_response(resp_cls, payload)
        except Exception as exc:
            if not fut.done():
                fut.set_exception(KafkaConnectionError(f"cannot decode response: {exc!r}"))
            return
        if not fut.done():
            fut.set_result(body)

    def _closed_error(self) -> BaseException:
        exc = self._closed_exc
        if isinstance(exc, Exception) and isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
            return type(exc)(str(exc))
        return KafkaConnectionError(f"connection to {self} is closed")

    def close(self, exc: BaseException | None = None) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc or KafkaConnectionError(f"connection to {self} closed")
        self.connected = False
        inflight, self._inflight = self._inflight, collections.OrderedDict()
        for fut, _ in inflight.values():
            if not fut.done():
                fut.set_exception(self._closed_error())
                fut.exception()  # mark retrieved: callers may have given up on it
        if self._writer is not None:
            self._writer.close()
        task = self._read_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    async def wait_closed(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
