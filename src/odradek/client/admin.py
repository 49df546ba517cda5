"""The admin client: topics (create, delete, partitions, describe), configs (describe, alter),
the cluster, and consumer groups (list, describe, delete, committed offsets).

Topic changes go to the controller, as Kafka requires (NOT_CONTROLLER: metadata is refreshed
and the request sent again); broker configs to that broker; group requests to the group's
coordinator. Methods that act on several names return {name: None or the KafkaError}, and by
default raise the first error (`raise_errors=False` to inspect them all).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable, Mapping
from types import EllipsisType
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from ..common import entropy
from ..security.acl import (
    ANY_BINDING,
    AclBinding,
    AclBindingFilter,
    binding_from_wire,
    binding_to_wire,
    filter_to_wire,
)
from ..security.connector import ClientSecurity, open_connection
from ..security.errors import UnsupportedSaslMechanismError
from ..security.scram import ScramMechanism, salted_password
from .assignors import PROTOCOL_TYPE, decode_assignment, decode_subscription
from .cluster_metadata import KafkaClient, start_on_loop_thread
from .config import ADMIN, build_config, parse_servers
from .errors import (
    ConfigException,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)
from .group import parse_offset_fetch
from .transaction_admin import TransactionAdmin
from .types import (
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    GroupDescription,
    GroupListing,
    MemberDescription,
    NewTopic,
    Node,
    OffsetAndMetadata,
    PartitionDescription,
    PartitionReassignment,
    TopicDescription,
    TopicPartition,
)

log = logging.getLogger("odradek.client.admin")

# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class ScramCredentialInfo(NamedTuple):
    """A user's credential for one mechanism (Kafka's ScramCredentialInfo)."""

    mechanism: str
    iterations: int


def _scram_type(mechanism: str) -> int:
    try:
        return ScramMechanism.from_name(mechanism).value
    except UnsupportedSaslMechanismError:
        return ScramMechanism.UNKNOWN.value  # the broker answers UNSUPPORTED_SASL_MECHANISM


def _resource(r: ConfigResource | tuple[str, str]) -> ConfigResource:
    return r if isinstance(r, ConfigResource) else ConfigResource(str(r[0]).lower(), str(r[1]))


def _raise_first(results: Mapping[Any, KafkaError | None], raise_errors: bool) -> None:
    if raise_errors:
        for err in results.values():
            if err is not None:
                raise err


def _topic_errors(results: Iterable[Any]) -> dict[str, KafkaError | None]:
    """Per-topic results (CreateTopics, DeleteTopics, CreatePartitions): name -> None or the
    KafkaError of its error code and message."""
    return {r.name: None if r.error_code == ErrorCode.none else KafkaError.for_code(
        r.error_code, getattr(r, "error_message", None), context=f"topic {r.name}")
        for r in results}


def bootstrap_failure_message(reasons: list[str | None], fallback: str) -> str:
    """What a tool prints when no bootstrap server answered: the reason for each server, in the
    words of Kafka's clients ("Connection to node -1 (host:port) could not be established...");
    `fallback` (the client's own error) when every server accepted the connection."""
    found = [r for r in reasons if r]
    return "; ".join(found) if found else fallback


async def explain_bootstrap_failure(client: KafkaClient,
                                    exc: KafkaError) -> KafkaConnectionError:
    """The error to show when `client` could not bootstrap: why each bootstrap server failed
    (unresolvable name, refused or timed-out connection) instead of the bare "no broker
    answered Metadata"."""
    reasons = [await _probe_bootstrap(i, host, port, client.connect_timeout_ms / 1000,
                                      getattr(client, "security", None))
               for i, (host, port) in enumerate(client.bootstrap)]
    servers = ",".join(f"{host}:{port}" for host, port in client.bootstrap)
    detail = str(exc)
    prefix = "no broker answered Metadata ("
    if detail.startswith(prefix) and detail.endswith(")"):
        detail = detail[len(prefix):-1]
    fallback = f"No broker at {servers} answered a Metadata request" + (
        f" ({detail})" if detail and detail != "None" else "")
    return KafkaConnectionError(bootstrap_failure_message(reasons, fallback))


async def _probe_bootstrap(index: int, host: str, port: int, timeout: float,
                           security: ClientSecurity | None = None) -> str | None:
    """Why bootstrap server `index` cannot be reached (None when a TCP connection succeeds)."""
    loop = asyncio.get_running_loop()
    try:
        await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return (f"Couldn't resolve server {host}:{port} from bootstrap.servers as DNS "
                f"resolution failed for {host}")
    try:
        _, writer = await open_connection(host, port, security, timeout=timeout,
                                          client_id="odradek-probe")
    except (OSError, TimeoutError) as exc:
        why = ("connection refused" if isinstance(exc, ConnectionRefusedError)
               else "timed out" if isinstance(exc, TimeoutError)
               else getattr(exc, "strerror", None) or type(exc).__name__)
        return (f"Connection to node {-1 - index} ({host}:{port}) could not be established. "
                f"Broker may not be available. ({why})")
    except Exception as exc:  # SASL refused the credentials
        return f"Authentication with node {-1 - index} ({host}:{port}) failed: {exc}"
    writer.close()
    return None


class AsyncAdmin(TransactionAdmin):
    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        cfg = build_config(ADMIN, config, kwargs)
        if "allow.auto.create.topics" not in cfg["_explicit"]:
            cfg["allow.auto.create.topics"] = False
        self.config = cfg
        self.api_timeout = int(cfg["default.api.timeout.ms"]) / 1000
        self.retry_backoff = int(cfg["retry.backoff.ms"]) / 1000
        try:
            parse_servers(cfg["bootstrap.servers"])
        except ValueError as exc:  # Kafka's ClientUtils.parseAndValidateAddresses
            raise ConfigException(f"Invalid url in bootstrap.servers: "
                                  f"{cfg['bootstrap.servers']} ({exc})") from None
        self.client = KafkaClient(cfg)
        self.client.topics = None  # the admin sees every topic

    async def start(self) -> AsyncAdmin:
        try:
            await self.client.start()
        except KafkaConnectionError as exc:
            raise await explain_bootstrap_failure(self.client, exc) from None
        return self

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> AsyncAdmin:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing --------------------------------------------------------------------------------
    async def _controller_send(self, api_key: int, deadline: float, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        while True:
            md = self.client.metadata
            node = md.controller_id if md.controller_id in md.brokers else None
            try:
                if node is None:
                    await self.client.refresh_metadata()
                    md = self.client.metadata
                    node = md.controller_id if md.controller_id in md.brokers else None
                if node is None:
                    raise KafkaError("no controller in the cluster metadata",
                                     ErrorCode.not_controller, retriable=True)
                wait = max(self.client.request_timeout_ms / 1000, deadline - loop.time() + 5)
                return await self.client.send(node, api_key, **kwargs, request_timeout=wait)
            except KafkaError as exc:
                if not exc.retriable or loop.time() + self.retry_backoff > deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                await self._refresh_quietly()

    async def _refresh_quietly(self) -> None:
        try:
            await self.client.refresh_metadata()
        except KafkaError as exc:
            log.debug("Metadata refresh failed: %s", exc)

    async def _retry_not_controller(self, api_key: int, timeout: float, build: Any,
                                    results_of: Any) -> dict[str, KafkaError | None]:
        """Send to the controller; resend the names answered NOT_CONTROLLER."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            resp = await self._controller_send(api_key, deadline, **build())
            results = results_of(resp)
            if not any(e is not None and e.code == ErrorCode.not_controller
                       for e in results.values()) or loop.time() > deadline:
                return results
            await asyncio.sleep(self.retry_backoff)
            await self._refresh_quietly()

    # -- topics ----------------------------------------------------------------------------------
    async def create_topics(self, new_topics: Iterable[NewTopic | str], *,
                            timeout: float = 30.0, validate_only: bool = False,
                            raise_errors: bool = True) -> dict[str, KafkaError | None]:
        topics = [t if isinstance(t, NewTopic) else NewTopic(t) for t in new_topics]

        def build() -> dict[str, Any]:
            return {"timeout": int(timeout * 1000), "validate_only": validate_only, "topics": [{
                "name": t.name,
                "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                "assignments": [{"partition_index": p, "broker_ids": b}
                                for p, b in sorted((t.replica_assignment or {}).items())],
                "configs": [{"name": k, "value": str(v)} for k, v in t.config.items()],
            } for t in topics]}

        results = await self._retry_not_controller(19, timeout, build,
                                                   lambda resp: _topic_errors(resp.topics))
        _raise_first(results, raise_errors)
        return results

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1, config: Mapping[str, str] | None = None,
                           *, timeout: float = 30.0, wait: bool = True) -> None:
        """Create one topic and (with `wait`) wait until every partition has a leader."""
        await self.create_topics([NewTopic(name, num_partitions, replication_factor,
                                           dict(config or {}))], timeout=timeout)
        if wait:
            await self.wait_for_topics([name], timeout)

    async def wait_for_topics(self, names: Iterable[str], timeout: float = 30.0) -> None:
        """Until every partition of these topics has a live leader in the metadata."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        names = list(names)
        while True:
            await self._refresh_quietly()
            md = self.client.metadata
            if all((t := md.topics.get(n)) is not None and t.error == 0 and t.partitions
                   and len(md.available_partitions(n)) == len(t.partitions) for n in names):
                return
            if loop.time() > deadline:
                raise KafkaTimeoutError(f"topics {names} have no leaders after {timeout}s")
            await asyncio.sleep(0.05)

    async def delete_topics(self, names: Iterable[str], *, timeout: float = 30.0,
                            raise_errors: bool = True) -> dict[str, KafkaError | None]:
        names = list(names)

        def build() -> dict[str, Any]:
            return {"timeout": int(timeout * 1000), "topic_names": names,
                    "topics": [{"name": n, "topic_id": None} for n in names]}

        results = await self._retry_not_controller(20, timeout, build,
                                                   lambda resp: _topic_errors(resp.responses))
        _raise_first(results, raise_errors)
        return results

    async def create_partitions(self, new_counts: Mapping[str, int], *, timeout: float = 30.0,
                                validate_only: bool = False, raise_errors: bool = True,
                                assignments: Mapping[str, list[list[int]]] | None = None
                                ) -> dict[str, KafkaError | None]:
        """Raise the partition count of topics to the given totals; `assignments` optionally
        gives, per topic, the replica list of each new partition."""
        def build() -> dict[str, Any]:
            return {"timeout": int(timeout * 1000), "validate_only": validate_only,
                    "topics": [{"name": t, "count": n, "assignments": None
                                if not assignments or t not in assignments else
                                [{"broker_ids": list(b)} for b in assignments[t]]}
                               for t, n in new_counts.items()]}

        results = await self._retry_not_controller(37, timeout, build,
                                                   lambda resp: _topic_errors(resp.results))
        _raise_first(results, raise_errors)
        return results

    async def elect_leaders(self, election_type: str | int = "PREFERRED",
                            partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
                            *, timeout: float = 30.0, raise_errors: bool = True
                            ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders (S-6.1): `election_type` PREFERRED (0) or UNCLEAN (1); `partitions`
        None = every partition. Returns {partition: None or the KafkaError}; ELECTION_NOT_NEEDED
        (the right leader is already there) is reported but never raised."""
        kind = {"PREFERRED": 0, "UNCLEAN": 1}.get(str(election_type).upper(), election_type)
        if kind not in (0, 1):
            raise ValueError(f"election_type must be PREFERRED or UNCLEAN, not {election_type!r}")
        wanted = None if partitions is None else sorted({TopicPartition(t, p)
                                                         for t, p in partitions})

        def build() -> dict[str, Any]:
            by_topic: dict[str, list[int]] = {}
            for tp in wanted or ():
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            return {"election_type": kind, "timeout": int(timeout * 1000),
                    "topic_partitions": None if wanted is None else [
                        {"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

        def results_of(resp: Any) -> dict[Any, KafkaError | None]:
            top = getattr(resp, "error_code", ErrorCode.none)
            return {TopicPartition(r.topic, p.partition_id):
                    None if (code := p.error_code if top == ErrorCode.none else top)
                    == ErrorCode.none else KafkaError.for_code(
                        code, p.error_message, context=f"partition {r.topic}-{p.partition_id}")
                    for r in resp.replica_election_results for p in r.partition_result}

        results = await self._retry_not_controller(43, timeout, build, results_of)
        _raise_first({tp: e for tp, e in results.items()
                      if e is None or e.code != ErrorCode.election_not_needed}, raise_errors)
        return results

    async def alter_partition_reassignments(
            self, reassignments: Mapping[TopicPartition | tuple[str, int], Iterable[int] | None],
            *, timeout: float = 30.0, raise_errors: bool = True
    ) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments (S-6.2, KIP-455): {partition: target replicas} starts
        (or replaces) a reassignment, {partition: None} cancels one (back to the original
        replicas). Returns {partition: None or the KafkaError}."""
        wanted = {TopicPartition(*tp): None if r is None else [int(x) for x in r]
                  for tp, r in reassignments.items()}

        def build() -> dict[str, Any]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, r in sorted(wanted.items()):
                by_topic.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "replicas": r})
            return {"timeout": int(timeout * 1000), "topics": [
                {"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def results_of(resp: Any) -> dict[Any, KafkaError | None]:
            top = resp.error_code
            return {TopicPartition(t.name, p.partition_index):
                    None if (code := p.error_code if top == ErrorCode.none else top)
                    == ErrorCode.none else KafkaError.for_code(
                        code, p.error_message or resp.error_message,
                        context=f"partition {t.name}-{p.partition_index}")
                    for t in resp.responses for p in t.partitions}

        results = await self._retry_not_controller(45, timeout, build, results_of)
        _raise_first(results, raise_errors)
        return results

    async def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None, *,
            timeout: float = 30.0) -> dict[TopicPartition, PartitionReassignment]:
        """ListPartitionReassignments (S-6.2): the ongoing reassignments (of `partitions`, or
        all of them)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted({TopicPartition(*tp) for tp in partitions}):
                by_topic.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        deadline = asyncio.get_running_loop().time() + timeout
        resp = await self._controller_send(46, deadline, timeout=int(timeout * 1000),
                                           topics=topics)
        if resp.error_code != ErrorCode.none:
            raise KafkaError.for_code(resp.error_code, resp.error_message,
                                      context="ListPartitionReassignments")
        return {TopicPartition(t.name, p.partition_index): PartitionReassignment(
            list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        md = await self.client.refresh_metadata()
        return sorted(n for n, t in md.topics.items()
                      if t.error == ErrorCode.none and (include_internal or not t.internal))

    async def describe_topics(self, names: Iterable[str] | None = None
                              ) -> dict[str, TopicDescription]:
        md = await self.client.refresh_metadata()
        wanted = list(names) if names is not None else sorted(md.topics)
        out = {}
        for n in wanted:
            t = md.topics.get(n)
            if t is None or t.error != ErrorCode.none:
                code = t.error if t is not None else ErrorCode.unknown_topic_or_partition
                raise KafkaError.for_code(code, context=f"topic {n}")
            out[n] = TopicDescription(n, t.topic_id, t.internal, [
                PartitionDescription(p.partition, p.leader, p.leader_epoch, list(p.replicas),
                                     list(p.isr), list(p.offline_replicas), p.error)
                for p in sorted(t.partitions.values(), key=lambda p: p.partition)])
        return out

    async def describe_cluster(self) -> ClusterDescription:
        md = await self.client.refresh_metadata()
        return ClusterDescription(md.cluster_id, md.controller_id, [
            Node(b.node_id, b.host, b.port, b.rack)
            for b in sorted(md.brokers.values(), key=lambda b: b.node_id)])

    async def broker_api_versions(self) -> dict[Node, dict[int, tuple[int, int]] | KafkaError]:
        """Each alive broker's ApiVersions answer, {api key: (min, max)}, or the error met
        reaching it (what Kafka's kafka-broker-api-versions lists). Brokers come from a fresh
        Metadata, asked again (up to default.api.timeout.ms) while it lists none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.api_timeout
        md = await self.client.refresh_metadata()
        while not md.brokers and loop.time() < deadline:
            await asyncio.sleep(self.retry_backoff)
            md = await self.client.refresh_metadata()
        out: dict[Node, dict[int, tuple[int, int]] | KafkaError] = {}
        for b in sorted(md.brokers.values(), key=lambda b: b.node_id):
            node = Node(b.node_id, b.host, b.port, b.rack)
            try:
                out[node] = dict((await self.client.connection(b.node_id)).api_versions)
            except KafkaError as exc:
                out[node] = exc
        return out

    # -- configs ---------------------------------------------------------------------------------
    async def describe_configs(self, resources: Iterable[ConfigResource | tuple[str, str]],
                               include_synonyms: bool = False
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        res = [_resource(r) for r in resources]
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for node, group in self._by_target(res).items():
            resp = await self._send_to(node, 32, include_synonyms=include_synonyms,
                                       include_documentation=False,
                                       resources=[{"resource_type": r.code,
                                                   "resource_name": r.name,
                                                   "configuration_keys": None} for r in group])
            for r in resp.results:
                key = next(x for x in group if x.name == r.resource_name
                           and x.code == r.resource_type)
                if r.error_code != ErrorCode.none:
                    raise KafkaError.for_code(r.error_code, r.error_message,
                                              context=f"{key.type} {key.name}")
                out[key] = {c.name: ConfigEntry(
                    c.name, c.value, getattr(c, "config_source", -1), c.read_only,
                    getattr(c, "is_default", getattr(c, "config_source", -1) == 5),
                    c.is_sensitive,
                    [(s.name, s.value, s.source) for s in getattr(c, "synonyms", ()) or ()])
                    for c in r.configs}
        return out

    def _by_target(self, resources: list[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
        """Broker resources go to that broker; the others to any broker (None)."""
        out: dict[int | None, list[ConfigResource]] = {}
        for r in resources:
            node = int(r.name) if r.type in ("broker", "broker_logger") and r.name else None
            out.setdefault(node, []).append(r)
        return out

    async def _send_to(self, node: int | None, api_key: int, **kwargs: Any) -> Any:
        if node is None:
            return await self.client.send_any(api_key, **kwargs)
        return await self.client.send(node, api_key, **kwargs)

    async def alter_configs(self, configs: Mapping[ConfigResource | tuple[str, str],
                                                   Mapping[str, str]], *,
                            validate_only: bool = False, raise_errors: bool = True
                            ) -> dict[ConfigResource, KafkaError | None]:
        """Replace the dynamic configs of resources (AlterConfigs: unset names revert to their
        defaults), e.g. {("topic", "t"): {"retention.ms": "1000"}}."""
        items = {_resource(r): dict(c) for r, c in configs.items()}
        return await self._alter(33, {r: [{"name": k, "value": str(v)} for k, v in c.items()]
                                      for r, c in items.items()}, validate_only, raise_errors)

    async def incremental_alter_configs(
            self, changes: Mapping[ConfigResource | tuple[str, str],
                                   Mapping[str, tuple[int, str | None] | str | None]], *,
            validate_only: bool = False, raise_errors: bool = True
    ) -> dict[ConfigResource, KafkaError | None]:
        """Change single configs: {resource: {name: value}} sets (None deletes), or
        {resource: {name: (operation, value)}} with SET, DELETE, APPEND, SUBTRACT."""
        items: dict[ConfigResource, list[dict[str, Any]]] = {}
        for r, c in changes.items():
            entries = []
            for name, change in c.items():
                op, value = change if isinstance(change, tuple) else (
                    (DELETE, None) if change is None else (SET, change))
                entries.append({"name": name, "config_operation": op,
                                "value": None if value is None else str(value)})
            items[_resource(r)] = entries
        return await self._alter(44, items, validate_only, raise_errors)

    async def _alter(self, api_key: int, items: dict[ConfigResource, list[dict[str, Any]]],
                     validate_only: bool, raise_errors: bool
                     ) -> dict[ConfigResource, KafkaError | None]:
        results: dict[ConfigResource, KafkaError | None] = {}
        for node, group in self._by_target(list(items)).items():
            resp = await self._send_to(node, api_key, validate_only=validate_only, resources=[
                {"resource_type": r.code, "resource_name": r.name, "configs": items[r]}
                for r in group])
            for r in resp.responses:
                key = next(x for x in group if x.name == r.resource_name
                           and x.code == r.resource_type)
                results[key] = None if r.error_code == ErrorCode.none else KafkaError.for_code(
                    r.error_code, r.error_message, context=f"{key.type} {key.name}")
        _raise_first(results, raise_errors)
        return results

    # -- groups ----------------------------------------------------------------------------------
    async def _coordinator(self, group_id: str, key_type: int = 0) -> int:
        """The coordinator of a group (key type 0) or a transactional id (key type 1)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.api_timeout
        while True:
            resp = await self.client.send_any(10, key=group_id, key_type=key_type,
                                              coordinator_keys=[group_id])
            if hasattr(resp, "coordinators"):
                c = resp.coordinators[0]
                code, node, msg = c.error_code, c.node_id, c.error_message
            else:
                code, node, msg = resp.error_code, resp.node_id, getattr(
                    resp, "error_message", None)
            if code == ErrorCode.none:
                if node not in self.client.metadata.brokers:
                    await self._refresh_quietly()
                return node
            err = KafkaError.for_code(code, msg, context=f"FindCoordinator({group_id})")
            if not err.retriable or loop.time() > deadline:
                raise err
            await asyncio.sleep(self.retry_backoff)

    async def _group_send(self, gid: str, api_key: int, /, **kwargs: Any) -> Any:
        node = await self._coordinator(gid)
        return await self.client.send(node, api_key, **kwargs)

    async def list_groups(self) -> list[GroupListing]:
        md = await self.client.refresh_metadata()
        seen: dict[str, GroupListing] = {}
        for node in sorted(md.brokers):
            resp = await self.client.send(node, 16, states_filter=[], types_filter=[])
            if resp.error_code != ErrorCode.none:
                raise KafkaError.for_code(resp.error_code, context=f"ListGroups on {node}")
            for g in resp.groups:
                seen[g.group_id] = GroupListing(g.group_id, g.protocol_type,
                                                getattr(g, "group_state", None))
        return [seen[k] for k in sorted(seen)]

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        out = {}
        for gid in group_ids:
            resp = await self._group_send(gid, 15, groups=[gid],
                                          include_authorized_operations=False)
            for g in resp.groups:
                if g.error_code != ErrorCode.none:
                    raise KafkaError.for_code(g.error_code, context=f"group {g.group_id}")
                members = []
                for m in g.members:
                    topics: list[str] = []
                    parts: list[TopicPartition] = []
                    if g.protocol_type == PROTOCOL_TYPE:
                        try:
                            if m.member_metadata:
                                topics = decode_subscription(m.member_metadata).topics
                            if m.member_assignment:
                                parts = decode_assignment(m.member_assignment).partitions
                        except ValueError:
                            pass
                    members.append(MemberDescription(m.member_id, getattr(
                        m, "group_instance_id", None), m.client_id, m.client_host, parts, topics))
                out[g.group_id] = GroupDescription(g.group_id, g.group_state, g.protocol_type,
                                                   g.protocol_data, members)
        return out

    async def delete_groups(self, group_ids: Iterable[str], *, raise_errors: bool = True
                            ) -> dict[str, KafkaError | None]:
        results: dict[str, KafkaError | None] = {}
        for gid in group_ids:
            resp = await self._group_send(gid, 42, groups_names=[gid])
            for r in resp.results:
                results[r.group_id] = None if r.error_code == ErrorCode.none else \
                    KafkaError.for_code(r.error_code, context=f"group {r.group_id}")
        _raise_first(results, raise_errors)
        return results

    async def list_consumer_group_offsets(
            self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of a group (all of its partitions by default)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        resp = await self._group_send(group_id, 9, group_id=group_id, topics=topics,
                                      require_stable=True,
                                      groups=[{"group_id": group_id, "topics": topics}])
        found, code = parse_offset_fetch(resp, group_id)
        if code != ErrorCode.none:
            raise KafkaError.for_code(code, context=f"OffsetFetch({group_id})")
        return {tp: om for tp, om in found.items() if om is not None}

    async def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Set committed offsets of a group with no active members (OffsetCommit, generation
        -1: what Kafka's admin does)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, o in offsets.items():
            om = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
        resp = await self._group_send(
            group_id, 8, group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time=-1,
            topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    raise KafkaError.for_code(p.error_code, context=f"OffsetCommit({group_id}) "
                                              f"{t.name}-{p.partition_index}")

    async def find_coordinator(self, group_id: str) -> Node:
        """The broker coordinating a group (FindCoordinator)."""
        node = await self._coordinator(group_id)
        b = self.client.metadata.brokers.get(node)
        return Node(node, b.host if b else "", b.port if b else -1,
                                 b.rack if b else None)

    async def list_offsets(self, specs: Mapping[TopicPartition, int], *,
                           isolation_level: int = 0) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader: {tp: timestamp} with EARLIEST (-2), LATEST
        (-1, the high watermark under read_uncommitted) or a timestamp in ms; returns
        {tp: (offset, timestamp)}, offset -1 when no record has that timestamp or a later one.
        Retries (with metadata refreshes) while a leader is unknown or moving."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.api_timeout
        todo = {TopicPartition(*tp): int(ts) for tp, ts in specs.items()}
        out: dict[TopicPartition, tuple[int, int]] = {}
        await self.client.refresh_metadata()
        while True:
            md = self.client.metadata
            by_node: dict[int, dict[str, list[dict[str, int]]]] = {}
            for tp, ts in todo.items():
                t = md.topics.get(tp.topic)
                if t is None or (t.error == ErrorCode.none and tp.partition not in t.partitions):
                    raise KafkaError.for_code(ErrorCode.unknown_topic_or_partition,
                                              context=f"ListOffsets {tp}")
                leader = md.leader(tp)
                if leader is not None and leader >= 0:
                    by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "current_leader_epoch": -1,
                         "timestamp": ts})
            last: KafkaError | None = None
            for node, topics in by_node.items():
                try:
                    resp = await self.client.send(
                        node, 2, replica_id=-1, isolation_level=isolation_level,
                        topics=[{"name": t, "partitions": ps} for t, ps in topics.items()])
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == ErrorCode.none:
                            out[tp] = (p.offset, getattr(p, "timestamp", -1))
                            todo.pop(tp, None)
                            continue
                        err = KafkaError.for_code(p.error_code, context=f"ListOffsets {tp}")
                        if not err.retriable:
                            raise err
                        last = err
            if not todo:
                return out
            if loop.time() > deadline:
                raise last or KafkaTimeoutError(f"ListOffsets for {sorted(todo)}: no leader")
            await asyncio.sleep(self.retry_backoff)
            await self._refresh_quietly()

    async def delete_consumer_group_offsets(
            self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[KafkaError | None, dict[TopicPartition, KafkaError | None]]:
        """OffsetDelete: forget a group's committed offsets for these partitions. Returns the
        group-level error (e.g. NON_EMPTY_GROUP) and the error of each partition (e.g.
        GROUP_SUBSCRIBED_TO_TOPIC)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
        resp = await self._group_send(group_id, 47, group_id=group_id, topics=[
            {"name": t, "partitions": ps} for t, ps in by_topic.items()])
        top = None if resp.error_code == ErrorCode.none else KafkaError.for_code(
            resp.error_code, context=f"OffsetDelete({group_id})")
        results: dict[TopicPartition, KafkaError | None] = {}
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                results[tp] = None if p.error_code == ErrorCode.none else KafkaError.for_code(
                    p.error_code, context=f"OffsetDelete({group_id}) {tp}")
        return top, results

    # -- SCRAM credentials (KIP-554) --------------------------------------------------------
    async def describe_user_scram_credentials(
            self, users: Iterable[str] | None = None, *, raise_errors: bool = True
    ) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
        """{user: [(mechanism, iterations)]} (DescribeUserScramCredentials); all users with a
        credential when `users` is None. A user without one is RESOURCE_NOT_FOUND."""
        names = None if users is None else [{"name": u} for u in users]
        resp = await self._send_to(None, 50, users=names)
        if resp.error_code != ErrorCode.none:
            raise KafkaError.for_code(resp.error_code, resp.error_message,
                                      context="DescribeUserScramCredentials")
        out: dict[str, list[ScramCredentialInfo] | KafkaError] = {}
        for r in resp.results:
            if r.error_code != ErrorCode.none:
                err = KafkaError.for_code(r.error_code, r.error_message, context=f"user {r.user}")
                if raise_errors:
                    raise err
                out[r.user] = err
                continue
            out[r.user] = [ScramCredentialInfo(ScramMechanism.from_type(c.mechanism)
                                               .mechanism_name, c.iterations)
                           for c in r.credential_infos]
        return out

    async def alter_user_scram_credentials(
            self, upsertions: Iterable[tuple[str, str, str, int]] = (),
            deletions: Iterable[tuple[str, str]] = (), *, raise_errors: bool = True
    ) -> dict[str, KafkaError | None]:
        """Add or replace credentials, [(user, mechanism, password, iterations)], and delete
        them, [(user, mechanism)] (AlterUserScramCredentials). The password never leaves this
        process: a random salt and the salted password are sent, as Kafka's admin client does."""
        ups = []
        for user, mechanism, password, iterations in upsertions:
            salt, kind = entropy.token_bytes(32), _scram_type(mechanism)
            ups.append({"name": user, "mechanism": kind, "iterations": iterations, "salt": salt,
                        "salted_password": salted_password(mechanism, password, salt,
                                                           max(iterations, 1)) if kind else b""})
        dels = [{"name": u, "mechanism": _scram_type(m)} for u, m in deletions]
        resp = await self._send_to(None, 51, deletions=dels, upsertions=ups)
        results: dict[str, KafkaError | None] = {
            r.user: None if r.error_code == ErrorCode.none
            else KafkaError.for_code(r.error_code, r.error_message, context=f"user {r.user}")
            for r in resp.results}
        _raise_first(results, raise_errors)
        return results

    # -- client quotas (KIP-546) -------------------------------------------------------------
    async def describe_client_quotas(
            self, components: Iterable[tuple[str, str | EllipsisType | None]] = (), *,
            strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """[(entity, {key: value})] of the quotas matching a filter (DescribeClientQuotas):
        each component is (entity type, name): a name matches exactly, None the default
        entity, `...` any named entity ("user", "client-id"). An entity maps each of its types
        to a name, None for the default."""
        comps = []
        for entity_type, match in components:
            match_type = 2 if match is ... else (1 if match is None else 0)
            comps.append({"entity_type": entity_type, "match_type": match_type,
                          "match": match if match_type == 0 else None})
        resp = await self._send_to(None, 48, components=comps, strict=strict)
        if resp.error_code != ErrorCode.none:
            raise KafkaError.for_code(resp.error_code, resp.error_message,
                                      context="DescribeClientQuotas")
        return [({e.entity_type: e.entity_name for e in entry.entity},
                 {v.key: float(v.value) for v in entry.values})
                for entry in resp.entries or ()]

    async def alter_client_quotas(
            self, alterations: Iterable[tuple[Mapping[str, str | None],
                                              Mapping[str, float | None]]], *,
            validate_only: bool = False, raise_errors: bool = True
    ) -> list[tuple[dict[str, str | None], KafkaError | None]]:
        """Set (a number) or remove (None) quotas of entities (AlterClientQuotas), e.g.
        [({"user": "alice"}, {"producer_byte_rate": 1024.0})]; a None name is the default."""
        entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v),
                             "remove": v is None} for k, v in ops.items()]}
                   for entity, ops in alterations]
        resp = await self._send_to(None, 49, entries=entries, validate_only=validate_only)
        out: list[tuple[dict[str, str | None], KafkaError | None]] = []
        for entry in resp.entries:
            entity = {e.entity_type: e.entity_name for e in entry.entity}
            error = None if entry.error_code == ErrorCode.none else KafkaError.for_code(
                entry.error_code, entry.error_message, context=f"AlterClientQuotas {entity}")
            out.append((entity, error))
        _raise_first({i: e for i, (_, e) in enumerate(out)}, raise_errors)
        return out

    # -- ACLs (any broker answers; every broker learns of changes) ------------------------------
    async def create_acls(self, bindings: Iterable[AclBinding], *, raise_errors: bool = True
                          ) -> dict[AclBinding, KafkaError | None]:
        """CreateAcls: store each binding (Kafka's Admin.createAcls)."""
        items = list(bindings)
        resp = await self.client.send_any(30, creations=[binding_to_wire(b) for b in items])
        results: dict[AclBinding, KafkaError | None] = {
            b: None if r.error_code == ErrorCode.none else KafkaError.for_code(
                r.error_code, r.error_message, context=f"CreateAcls {b}")
            for b, r in zip(items, resp.results, strict=False)}
        _raise_first(results, raise_errors)
        return results

    async def describe_acls(self, filt: AclBindingFilter = ANY_BINDING) -> list[AclBinding]:
        """DescribeAcls: the bindings matching the filter (Kafka's Admin.describeAcls)."""
        resp = await self.client.send_any(29, **filter_to_wire(filt))
        if resp.error_code != ErrorCode.none:
            raise KafkaError.for_code(resp.error_code, resp.error_message,
                                      context="DescribeAcls")
        return [binding_from_wire(r.resource_type, r.resource_name, getattr(r, "pattern_type", 3),
                                  a.principal, a.host, a.operation, a.permission_type)
                for r in resp.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                          raise_errors: bool = True
                          ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """DeleteAcls: per filter, the bindings deleted (or the error)."""
        items = list(filters)
        resp = await self.client.send_any(31, filters=[filter_to_wire(f) for f in items])
        out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
        for f, r in zip(items, resp.filter_results, strict=False):
            if r.error_code != ErrorCode.none:
                out[f] = KafkaError.for_code(r.error_code, r.error_message,
                                             context="DeleteAcls")
                continue
            out[f] = [binding_from_wire(m.resource_type, m.resource_name, m.pattern_type,
                                        m.principal, m.host, m.operation, m.permission_type)
                      for m in r.matching_acls]
        if raise_errors:
            first = next((e for e in out.values() if isinstance(e, KafkaError)), None)
            if first is not None:
                raise first
        return out


# ---------------------------------------------------------------------------------------------
class Admin:
    """The synchronous admin client (an AsyncAdmin on a background loop thread); the same
    methods, blocking."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._runner, self._a = start_on_loop_thread(
            "odradek-admin", lambda: AsyncAdmin(config, **kwargs))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if asyncio.iscoroutinefunction(attr):
            def call(*args: Any, **kwargs: Any) -> Any:
                return self._runner.run(attr(*args, **kwargs))
            call.__name__ = name
            call.__doc__ = attr.__doc__
            return call
        return attr

    def close(self) -> None:
        try:
            self._runner.run(self._a.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
