"""The broker's HTTP listener (config `http.listener`): /metrics, the console's JSON API and its
static files (docs/console.md).

An aiohttp application on the broker's own event loop, stopped with the broker. Everything it
shows about the cluster comes over the Kafka protocol: an `odradek.client.AsyncAdmin` against
this broker's own listener (the first SASL listener if there is one, else the first), opened
with the HTTP user's basic-auth credentials on a SASL listener, so a wrong password is a 401 and
ACLs filter what the user sees; anonymous otherwise. Admin clients are kept per user (a few).

Bounded: a small request body limit, header line/field/count limits, a keep-alive timeout and
a cap on open connections (beyond it a connection is closed at once), a deadline on each
request's header block (slow clients are dropped); unknown paths are 404,
wrong methods 405; nothing here shares state with the Kafka listeners.

Mutating routes (the fault actions, given by `odradek.Cluster(console_faults=True)`) need the
per-listener token of /api/cluster in `X-Odradek-CSRF` and a same-origin (or absent) Origin.

The timeline is cluster-wide: each broker registers its listener's address in /brokers/ids/<id>
(field `http_endpoint`), and /api/timeline merges this broker's state-change.log events with
each live peer's `/api/timeline?local=1`, asked server-side with the caller's credentials (short
timeout, bounded answer; a peer that does not answer is reported, not an error).

/metrics reads the numbers on the event loop and formats the text in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.resources
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web
from kio.schema.errors import ErrorCode

from ..client.admin import AsyncAdmin
from ..client.errors import KafkaError
from ..client.types import ConfigResource, TopicDescription
from ..common import TopicPartition
from ..common.properties import ConfigError
from ..coordination import paths
from ..coordination.store import CoordinationError, CoordinationStore
from ..security import jaas
from ..security.connector import ClientSecurity, open_connection
from ..security.errors import SaslError
from ..security.sasl_server import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE
from . import console_api

log = logging.getLogger("odradek.http")

MAX_BODY = 16 * 1024
MAX_CONNECTIONS = 64
KEEPALIVE_S = 15.0
HEADER_TIMEOUT_S = 10.0  # a request's header block must arrive within this (slow clients)
STATE_CHANGE_TAIL = 1 << 20  # the last MiB of state-change.log feeds /api/timeline
MAX_ADMINS = 8  # admin clients kept open (per user)
REVERIFY_S = 30.0  # a user's credentials are checked with the broker again after this long
REALM = 'Basic realm="odradek", charset="UTF-8"'
PEER_TIMEOUT_S = 2.0  # a peer's /api/timeline?local=1 must answer within this
PEER_MAX_BYTES = 2 << 20  # ... in at most this many bytes
TOPICS_TTL_S = 1.0  # the answer of describe_topics() is shared this long (per user)
PEERS_TTL_S = 2.0  # the registered peers (/brokers/ids) are read again after this long
PUBLIC_PATHS = ("/", "/static/")  # the page itself (no cluster data): served without auth
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class FaultActions(Protocol):
    """What `odradek.Cluster(console_faults=True)` gives every broker's listener (its
    `ClusterFaults`). An `events()` method returning common.fault_log.FaultEvent items, when
    present, feeds GET /api/faults."""

    actions: Sequence[str]

    def run(self, action: str, broker_id: int) -> asyncio.Future[None]:
        """Start `action` on broker `broker_id`; the future (owned by the cluster, so it
        outlives this listener when a broker kills itself) completes when it is done."""
        ...


@dataclass(frozen=True)
class AdminAccess:
    """How the listener's admin clients reach their broker: the bootstrap of one listener,
    its security protocol and SASL mechanism, and its TLS trust (client properties)."""

    bootstrap: str
    security_protocol: str
    sasl_mechanism: str | None = None
    tls: Mapping[str, str] = field(default_factory=dict)

    @property
    def requires_auth(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def client_config(self, user: tuple[str, str] | None) -> dict[str, str]:
        cfg = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol,
               "client.id": "odradek-console", **self.tls}
        if self.requires_auth and user is not None and self.sasl_mechanism is not None:
            module = PLAIN_LOGIN_MODULE if self.sasl_mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
            cfg["sasl.mechanism"] = self.sasl_mechanism
            cfg["sasl.jaas.config"] = (f"{module} required username={jaas.quote(user[0])} "
                                       f"password={jaas.quote(user[1])};")
        return cfg


async def registered_http_endpoints(store: CoordinationStore) -> dict[int, str | None]:
    """Every registered broker's HTTP listener, from the `http_endpoint` field of its
    /brokers/ids/<id> (None: it registered none)."""
    out: dict[int, str | None] = {}
    for child in await store.get_children(paths.BROKER_IDS):
        try:
            data, _ = await store.get(paths.broker_path(int(child)))
        except (ValueError, CoordinationError):  # not a broker id, or gone meanwhile
            continue
        out[int(child)] = console_api.http_endpoint_of(data)
    return out


def console_static_dir() -> Path | None:
    """The console's files (package odradek.console, directory static/), if installed."""
    try:
        root = importlib.resources.files("odradek.console") / "static"
    except ModuleNotFoundError:
        return None
    path = Path(str(root))
    return path if path.is_dir() else None


class _Refused(asyncio.Protocol):
    """A connection beyond the cap: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _HeaderDeadline(asyncio.Protocol):
    """aiohttp's request handler with a deadline on header blocks: a connection that has sent
    part of a request's headers and not their end within `timeout` seconds is closed (aiohttp
    itself waits forever for a slow client's headers)."""

    def __init__(self, inner: asyncio.Protocol, timeout: float) -> None:
        self.inner = inner
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        self._tail = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        seen = self._tail + data
        if b"\r\n\r\n" in seen:  # a header block ended (what follows may begin the next)
            self._disarm()
            seen = seen[seen.rindex(b"\r\n\r\n") + 4:]
        if seen and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.timeout, self._expired)
        self._tail = seen[-3:]
        self.inner.data_received(data)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport is not None and not self.transport.is_closing():
            log.info("Closing a slow HTTP connection from %s (no complete request headers "
                     "within %.0f s)", self.transport.get_extra_info("peername"), self.timeout)
            self.transport.close()

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class HttpListener:
    def __init__(self, broker_id: int, host: str, port: int, access: AdminAccess, *,
                 controller_epoch: Callable[[], int],
                 local_replicas: Callable[[str], Mapping[int, console_api.LocalReplica]],
                 state_change_log: Path | None,
                 render_metrics: Callable[[], Callable[[], bytes]] | None = None,
                 peers: Callable[[], Awaitable[Mapping[int, str | None]]] | None = None,
                 history: Callable[[list[str]], dict[str, Any]] | None = None,
                 fault_actions: FaultActions | None = None,
                 static_dir: Path | None = None,
                 max_connections: int = MAX_CONNECTIONS,
                 header_timeout: float = HEADER_TIMEOUT_S) -> None:
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.access = access
        self.controller_epoch = controller_epoch
        self.local_replicas = local_replicas
        self.state_change_log = state_change_log
        self.render_metrics = render_metrics  # a snapshot now -> its formatting, anywhere
        self.peers = peers  # broker id -> its registered HTTP listener (None: none)
        self._peers_cache: tuple[float, Mapping[int, str | None]] | None = None
        self._peer_session: ClientSession | None = None
        # user -> (until when, the answer of describe_topics()): see _all_topics
        self._topics_cache: dict[tuple[str, str] | None,
                                 tuple[float, asyncio.Future[dict[str, TopicDescription]]]] = {}
        self.history = history
        self.fault_actions = fault_actions
        self.static_dir = static_dir
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.csrf_token = secrets.token_urlsafe(24)
        self.url = ""
        self._admins: OrderedDict[tuple[str, str] | None, AsyncAdmin] = OrderedDict()
        self._verified: dict[tuple[str, str], float] = {}  # user -> until when
        self._admin_lock = asyncio.Lock()
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._errors, self._auth])
        r = app.router
        r.add_get("/metrics", self.metrics)
        r.add_get("/api/cluster", self.api_cluster)
        r.add_get("/api/topics", self.api_topics)
        r.add_get("/api/topics/{name}", self.api_topic)
        r.add_get("/api/groups", self.api_groups)
        r.add_get("/api/groups/{group_id}", self.api_group)
        r.add_get("/api/timeline", self.api_timeline)
        r.add_get("/api/metrics/history", self.api_history)
        r.add_get("/api/faults", self.api_faults)
        r.add_post("/api/faults/{action}", self.api_fault)
        r.add_get("/", self.index)
        if self.static_dir is not None:
            r.add_static("/static/", self.static_dir, follow_symlinks=False)
        return app

    async def start(self) -> str:
        runner = self._runner = web.AppRunner(
            self.application(), handle_signals=False, access_log=None,
            keepalive_timeout=KEEPALIVE_S, max_line_size=4096, max_field_size=4096,
            max_headers=64, shutdown_timeout=2.0)
        await runner.setup()
        server = runner.server
        assert server is not None

        def protocol() -> asyncio.BaseProtocol:
            if len(server.connections) >= self.max_connections:
                return _Refused()
            return _HeaderDeadline(server(), self.header_timeout)

        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(protocol, self.host or None, self.port,
                                                    reuse_address=True, backlog=64)
        except OSError as exc:
            await runner.cleanup()
            self._runner = None
            raise ConfigError(f"http.listener: cannot listen on {self.host}:{self.port}: "
                              f"{exc.strerror or exc}") from None
        bound = self._server.sockets[0].getsockname()
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        self.port = bound[1]
        self.url = f"http://{host}:{self.port}"
        log.info("[KafkaServer id=%d] HTTP listener bound to %s", self.broker_id, self.url)
        return self.url

    def open_connections(self) -> int:
        """HTTP connections open now (kept-alive ones included)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    def advertised_url(self, fallback_host: str) -> str:
        """The address peers use: the bound one, with `fallback_host` (the broker's advertised
        host) for a wildcard bind."""
        if self.host in ("", "0.0.0.0", "::") and fallback_host:
            return f"http://{fallback_host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.shutdown()
            await self._runner.cleanup()
            self._runner = None
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
        if self._peer_session is not None:
            with contextlib.suppress(Exception):
                await self._peer_session.close()
            self._peer_session = None
        admins, self._admins = list(self._admins.values()), OrderedDict()
        for admin in admins:
            with contextlib.suppress(Exception):
                await admin.close()

    # -- middlewares -------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except KafkaError as exc:
            code = 403 if exc.code in (ErrorCode.topic_authorization_failed,
                                       ErrorCode.group_authorization_failed,
                                       ErrorCode.cluster_authorization_failed) else 503
            return _json({"error": str(exc)}, status=code)

    @web.middleware
    async def _auth(self, request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        """On a SASL listener every route but the page's own files needs basic auth, checked by
        opening the admin client with it (a wrong password: 401). The console's fetches (header
        X-Odradek-Console) get their 401 without a challenge: the page asks with its own form."""
        user = console_api.parse_basic_auth(request.headers.get("Authorization"))
        public = request.path == "/" or request.path.startswith("/static/")
        if self.access.requires_auth and user is None and not public:
            raise web.HTTPUnauthorized(headers=self._challenge(request),
                                       text="authentication required")
        request["user"] = user if self.access.requires_auth else None
        return await handler(request)

    @staticmethod
    def _challenge(request: web.Request) -> dict[str, str]:
        return {} if request.headers.get(console_api.CONSOLE_HEADER) else \
            {"WWW-Authenticate": REALM}

    async def admin(self, request: web.Request) -> AsyncAdmin:
        user: tuple[str, str] | None = request["user"]
        key = None if user is None else (user[0], hashlib.sha256(user[1].encode()).hexdigest())
        request["user_key"] = key
        async with self._admin_lock:
            config = self.access.client_config(user)
            now = asyncio.get_running_loop().time()
            if key is not None and self._verified.get(key, 0.0) < now:
                # again every REVERIFY_S: a changed password or removed user stops working
                self._verified.pop(key, None)
                await self._authenticate(config, request)
                self._verified[key] = now + REVERIFY_S
                if len(self._verified) > 4 * MAX_ADMINS:
                    self._verified = {k: t for k, t in self._verified.items() if t >= now}
            found = self._admins.get(key)
            if found is not None:
                self._admins.move_to_end(key)
                return found
            admin = AsyncAdmin(config)
            try:
                await admin.start()
            except KafkaError:
                with contextlib.suppress(Exception):
                    await admin.close()
                raise
            self._admins[key] = admin
            while len(self._admins) > MAX_ADMINS:
                _, old = self._admins.popitem(last=False)
                with contextlib.suppress(Exception):
                    await old.close()
            return admin

    async def _authenticate(self, config: Mapping[str, str], request: web.Request) -> None:
        """One SASL exchange with the broker with the user's credentials: refused -> 401."""
        host, _, port = self.access.bootstrap.rpartition(":")
        try:
            _, writer = await open_connection(
                host, int(port), ClientSecurity.from_client_props(config), timeout=10.0,
                client_id="odradek-console")
        except SaslError:
            raise web.HTTPUnauthorized(headers=self._challenge(request),
                                       text="authentication failed") from None
        except (OSError, TimeoutError) as exc:
            raise web.HTTPServiceUnavailable(text=f"broker not reachable: {exc}") from None
        writer.close()

    # -- routes ------------------------------------------------------------------------------
    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if self.render_metrics is None:
            raise web.HTTPNotFound(text="no metrics on this broker")
        # the numbers are read here, on the loop; the text is made in a worker thread (a
        # broker with 10,000 partitions: ~100 ms of formatting the loop does not wait for)
        body = await asyncio.to_thread(self.render_metrics())
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def api_cluster(self, request: web.Request) -> web.StreamResponse:
        admin = await self.admin(request)
        cluster = await admin.describe_cluster()
        topics = await self._all_topics(request, admin)
        faults = self.fault_actions
        return _json(console_api.cluster_view(
            self.broker_id, cluster, topics, self.controller_epoch(), faults is not None,
            faults.actions if faults is not None else (), self.csrf_token))

    async def api_topics(self, request: web.Request) -> web.StreamResponse:
        admin = await self.admin(request)
        return _json(console_api.topics_view(await self._all_topics(request, admin)))

    async def api_topic(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        admin = await self.admin(request)
        try:
            topic = (await admin.describe_topics([name]))[name]
        except KafkaError as exc:
            if exc.code == ErrorCode.unknown_topic_or_partition:
                raise web.HTTPNotFound(text=f"no topic {name}") from None
            raise
        configs = (await admin.describe_configs([ConfigResource("topic", name)])).get(
            ConfigResource("topic", name), {})
        led = [TopicPartition(name, p.partition) for p in topic.partitions if p.leader >= 0]
        start = await admin.list_offsets(dict.fromkeys(led, -2)) if led else {}
        end = await admin.list_offsets(dict.fromkeys(led, -1)) if led else {}
        return _json(console_api.topic_view(
            topic, configs, {tp.partition: o for tp, (o, _) in start.items()},
            {tp.partition: o for tp, (o, _) in end.items()}, self.local_replicas(name)))

    async def api_groups(self, request: web.Request) -> web.StreamResponse:
        admin = await self.admin(request)
        listings = await admin.list_groups()
        described = await admin.describe_groups([g.group_id for g in listings]) \
            if listings else {}
        return _json(console_api.groups_view(listings, described))

    async def api_group(self, request: web.Request) -> web.StreamResponse:
        group_id = request.match_info["group_id"]
        admin = await self.admin(request)
        group = (await admin.describe_groups([group_id])).get(group_id)
        if group is None:
            raise web.HTTPNotFound(text=f"no group {group_id}")
        committed = {tp: om.offset for tp, om in
                     (await admin.list_consumer_group_offsets(group_id)).items()}
        ends = await admin.list_offsets(dict.fromkeys(committed, -1)) if committed else {}
        return _json(console_api.group_view(group, committed,
                                            {tp: o for tp, (o, _) in ends.items()}))

    async def api_timeline(self, request: web.Request) -> web.StreamResponse:
        """This broker's events (?local=1, what peers ask each other) or the cluster's: its own
        and every registered peer's, asked in parallel with the caller's credentials."""
        admin = await self.admin(request)  # the credentials are checked as for every route
        since = console_api.parse_since_ms(request.query.get("since_ms"))
        cursors = console_api.parse_since_by_broker(request.query.get("since"))
        own = await self._local_timeline(request, admin, cursors.get(self.broker_id, since))
        if request.query.get("local") or self.peers is None:
            return _json(own)
        peers = {i: url for i, url in (await self._registered_peers()).items()
                 if i != self.broker_id}
        answers = await asyncio.gather(*(
            self._peer_timeline(i, url, cursors.get(i, since), request)
            for i, url in sorted(peers.items())))
        return _json(console_api.merge_timelines(self.broker_id, own, answers))

    async def _all_topics(self, request: web.Request, admin: AsyncAdmin
                          ) -> Mapping[str, TopicDescription]:
        """Every topic the request's user may describe. One Metadata request of every topic
        is the console's dearest (the broker encodes every partition on its event loop): the
        answer is shared for TOPICS_TTL_S by the requests of one user (a poll asks
        /api/cluster, a page and the timeline at once; several open pages poll alike), and
        requests arriving while it is asked wait for the same answer."""
        key = request["user_key"]
        now = asyncio.get_running_loop().time()
        hit = self._topics_cache.get(key)
        if hit is None or hit[0] < now:
            if len(self._topics_cache) >= 2 * MAX_ADMINS:
                self._topics_cache = {k: v for k, v in self._topics_cache.items()
                                      if v[0] >= now}
            hit = (now + TOPICS_TTL_S, asyncio.ensure_future(admin.describe_topics()))
            self._topics_cache[key] = hit
        try:
            return await asyncio.shield(hit[1])
        except Exception:
            if self._topics_cache.get(key) is hit:
                del self._topics_cache[key]
            raise

    async def _local_timeline(self, request: web.Request, admin: AsyncAdmin, since: int
                              ) -> list[dict[str, Any]]:
        # read and parsed in a worker thread (a MiB of log lines: not on the event loop)
        events = await asyncio.to_thread(self._read_timeline, since)
        if self.access.requires_auth and events:
            # only the topics this user may describe (the metadata answers only those)
            visible = set(await self._all_topics(request, admin))
            events = [e for e in events if e["topic"] in visible]
        return events

    def _read_timeline(self, since: int) -> list[dict[str, Any]]:
        lines = _tail_lines(self.state_change_log, STATE_CHANGE_TAIL)
        return console_api.timeline(lines, since, broker_id=self.broker_id)

    async def _registered_peers(self) -> Mapping[int, str | None]:
        assert self.peers is not None
        now = asyncio.get_running_loop().time()
        if self._peers_cache is None or self._peers_cache[0] < now:
            try:
                found = await asyncio.wait_for(self.peers(), PEER_TIMEOUT_S)
            except Exception as exc:  # the store unreachable: this broker's events only
                log.debug("registered brokers not readable: %s", exc)
                found = {}
            self._peers_cache = (now + PEERS_TTL_S, found)
        return self._peers_cache[1]

    async def _peer_timeline(self, broker_id: int, url: str | None, since: int,
                             request: web.Request) -> console_api.PeerTimeline:
        if url is None:
            return console_api.PeerTimeline(broker_id, None, error="no HTTP listener")
        if self._peer_session is None:
            self._peer_session = ClientSession(
                connector=TCPConnector(limit=16, limit_per_host=2, keepalive_timeout=KEEPALIVE_S),
                timeout=ClientTimeout(total=PEER_TIMEOUT_S), auto_decompress=False)
        headers = {"Accept": "application/json", console_api.CONSOLE_HEADER: "peer"}
        auth = request.headers.get("Authorization")
        if auth is not None:  # the peer checks the user and applies its own ACLs
            headers["Authorization"] = auth
        try:
            async with self._peer_session.get(f"{url}/api/timeline",
                                              params={"local": "1", "since_ms": str(since)},
                                              headers=headers) as resp:
                if resp.status != 200:
                    return console_api.PeerTimeline(broker_id, url,
                                                    error=f"HTTP {resp.status}")
                body = await _read_bounded(resp.content, PEER_MAX_BYTES)
                if body is None:
                    return console_api.PeerTimeline(broker_id, url, error="answer too big")
            events = json.loads(body)
            if not isinstance(events, list):
                return console_api.PeerTimeline(broker_id, url, error="not a timeline")
            return console_api.PeerTimeline(broker_id, url, events=events)
        except TimeoutError:
            return console_api.PeerTimeline(broker_id, url, error="no answer (timeout)")
        except (ClientError, OSError, ValueError) as exc:
            return console_api.PeerTimeline(broker_id, url,
                                            error=f"unreachable: {type(exc).__name__}")

    async def api_faults(self, request: web.Request) -> web.StreamResponse:
        """The injected faults, when the cluster's fault actions keep a record (events())."""
        await self.admin(request)
        events = getattr(self.fault_actions, "events", None)
        if not callable(events):
            return _json([])
        return _json(console_api.fault_events_view(events()))

    async def api_history(self, request: web.Request) -> web.StreamResponse:
        if self.history is None:
            raise web.HTTPNotFound(text="no metrics history on this broker")
        names = console_api.parse_names(request.query.get("names"))
        return _json({k: [list(s) for s in v] for k, v in self.history(names).items()})

    async def api_fault(self, request: web.Request) -> web.StreamResponse:
        refusal = console_api.mutation_refusal(
            request.headers.get(console_api.CSRF_HEADER), self.csrf_token,
            request.headers.get("Origin"), request.headers.get("Host"))
        if refusal is not None:
            raise web.HTTPForbidden(text=refusal)
        faults = self.fault_actions
        if faults is None:
            raise web.HTTPForbidden(text="fault actions are not enabled (--console-faults)")
        action = request.match_info["action"]
        if action not in faults.actions:
            raise web.HTTPNotFound(text=f"no fault action {action}")
        await self.admin(request)  # credentials checked before anything happens
        try:
            body = await request.json()
            broker = int(body["broker"])
        except (ValueError, KeyError, TypeError):
            raise web.HTTPBadRequest(text='expected {"broker": N}') from None
        log.warning("[KafkaServer id=%d] console fault action: %s broker %d", self.broker_id,
                    action, broker)
        try:
            done = faults.run(action, broker)
        except ValueError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        if broker == self.broker_id:  # this listener goes with its broker: answer first
            return _json({"ok": True, "scheduled": True})
        try:
            await asyncio.wait_for(asyncio.shield(done), 120)
        except Exception as exc:
            return _json({"ok": False, "error": str(exc)}, status=500)
        return _json({"ok": True})

    async def index(self, request: web.Request) -> web.StreamResponse:
        index = self.static_dir / "index.html" if self.static_dir is not None else None
        if index is None or not index.is_file():
            raise web.HTTPNotFound(text="the console's files are not installed")
        return web.FileResponse(index)


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(value, separators=(",", ":")), status=status,
                        content_type="application/json")


async def _read_bounded(stream: Any, limit: int) -> bytes | None:
    """A response body of at most `limit` bytes (None: more)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await stream.read(1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def _tail_lines(path: Path | None, size: int) -> list[str]:
    """The whole lines of the last `size` bytes of a file (none if it does not exist)."""
    if path is None:
        return []
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            end = f.tell()
            f.seek(max(0, end - size))
            data = f.read(size)
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if end > size else lines
