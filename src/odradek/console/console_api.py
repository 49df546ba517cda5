"""The console's JSON API (docs/console.md): pure builders from what the HTTP listener gathered.

The listener (console/http_listener.py) asks the cluster over the Kafka protocol, through
`odradek.client.AsyncAdmin` against its own broker (so ACLs apply to what a user sees), and hands
the answers here; these functions only shape them into the JSON documents of the API. The
request decisions (basic-auth parsing, the CSRF and Origin check of mutating routes) are pure
functions here too.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..client.types import (
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    PartitionDescription,
    TopicDescription,
)
from ..common import TopicPartition, state_change

CSRF_HEADER = "X-Odradek-CSRF"
#: Sent by the console's own fetches: a 401 then carries no WWW-Authenticate challenge, so the
#: browser shows the page's login form instead of its own credentials dialog.
CONSOLE_HEADER = "X-Odradek-Console"
TIMELINE_LIMIT = 1000  # the newest events answered by /api/timeline
#: The field of /brokers/ids/<id> naming the broker's HTTP listener (Kafka's and odradek's own
#: registration parsers ignore fields they do not know).
HTTP_ENDPOINT_FIELD = "http_endpoint"
FAULT_EVENTS_LIMIT = 500  # the newest fault events answered by /api/faults


@dataclass(frozen=True, slots=True)
class LocalReplica:
    """What this broker knows of a partition it hosts (no client can ask for it)."""

    log_end_offset: int
    size_bytes: int


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def under_replicated(p: PartitionDescription) -> bool:
    """Kafka's UnderReplicatedPartitions: fewer in-sync replicas than replicas."""
    return p.leader >= 0 and len(p.isr) < len(p.replicas)


def offline(p: PartitionDescription) -> bool:
    """Kafka's OfflinePartitionsCount: no leader."""
    return p.leader < 0


def cluster_view(broker_id: int, cluster: ClusterDescription,
                 topics: Mapping[str, TopicDescription], controller_epoch: int,
                 faults_enabled: bool, fault_actions: Sequence[str], csrf_token: str
                 ) -> dict[str, Any]:
    """GET /api/cluster. Live brokers come from the metadata; a replica's broker that is not
    in it is listed as not alive."""
    brokers = {b.node_id: {"id": b.node_id, "host": b.host, "port": b.port, "alive": True}
               for b in cluster.brokers}
    for t in topics.values():
        for p in t.partitions:
            for r in p.replicas:
                brokers.setdefault(r, {"id": r, "host": None, "port": None, "alive": False})
    parts = [(t.name, p) for t in topics.values() for p in t.partitions]
    return {
        "cluster_id": cluster.cluster_id,
        "broker_id": broker_id,
        "controller": {"id": cluster.controller_id, "epoch": controller_epoch},
        "brokers": [brokers[i] for i in sorted(brokers)],
        "under_replicated": sorted(partition_name(n, p.partition) for n, p in parts
                                   if under_replicated(p)),
        "offline": sorted(partition_name(n, p.partition) for n, p in parts if offline(p)),
        "faults_enabled": faults_enabled,
        "fault_actions": list(fault_actions) if faults_enabled else [],
        "csrf_token": csrf_token,
    }


def topics_view(topics: Mapping[str, TopicDescription]) -> list[dict[str, Any]]:
    """GET /api/topics."""
    return [{
        "name": t.name,
        "partitions": len(t.partitions),
        "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
        "internal": t.internal,
        "under_replicated": sum(1 for p in t.partitions if under_replicated(p)),
    } for t in sorted(topics.values(), key=lambda t: t.name)]


def topic_view(topic: TopicDescription, configs: Mapping[str, ConfigEntry],
               log_start: Mapping[int, int], high_watermark: Mapping[int, int],
               local: Mapping[int, LocalReplica]) -> dict[str, Any]:
    """GET /api/topics/{name}: offsets from ListOffsets (EARLIEST, LATEST); the log end offset
    and size only where this broker hosts a replica (null elsewhere)."""
    partitions = []
    for p in topic.partitions:
        mine = local.get(p.partition)
        partitions.append({
            "partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
            "isr": list(p.isr), "log_start_offset": log_start.get(p.partition),
            "high_watermark": high_watermark.get(p.partition),
            "log_end_offset": None if mine is None else mine.log_end_offset,
            "size_bytes": None if mine is None else mine.size_bytes,
            "under_replicated": under_replicated(p), "offline": offline(p)})
    return {"name": topic.name, "internal": topic.internal,
            "configs": {k: e.value for k, e in sorted(configs.items())},
            "partitions": partitions}


def groups_view(listings: Iterable[GroupListing],
                descriptions: Mapping[str, GroupDescription]) -> list[dict[str, Any]]:
    """GET /api/groups."""
    out = []
    for g in sorted(listings, key=lambda g: g.group_id):
        d = descriptions.get(g.group_id)
        out.append({"group_id": g.group_id,
                    "state": d.state if d is not None else g.state,
                    "protocol_type": g.protocol_type,
                    "members": len(d.members) if d is not None else 0})
    return out


def group_view(group: GroupDescription, committed: Mapping[TopicPartition, int],
               log_end: Mapping[TopicPartition, int]) -> dict[str, Any]:
    """GET /api/groups/{id}: members with their assignments, and the lag of each committed
    offset behind the partition's high watermark (what kafka-consumer-groups calls LOG-END)."""
    offsets = []
    for tp in sorted(committed):
        end = log_end.get(tp)
        offsets.append({"topic": tp.topic, "partition": tp.partition,
                        "committed": committed[tp], "log_end_offset": end,
                        "lag": None if end is None else max(0, end - committed[tp])})
    return {"group_id": group.group_id, "state": group.state,
            "protocol_type": group.protocol_type,
            "members": [{"member_id": m.member_id, "client_id": m.client_id,
                         "host": m.client_host,
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment]}
                        for m in group.members],
            "offsets": offsets}


# -- the timeline: state-change.log lines ---------------------------------------------------------
_LEADERSHIP = re.compile(r"leader=(?P<leader>-?\d+) leader_epoch=(?P<epoch>-?\d+) "
                         r"isr=\[(?P<isr>[-\d,]*)\]")
_STATE_CHANGE = re.compile(r"state from (?P<before>\w+) to (?P<after>\w+)")


def _time_ms(text: str) -> int:
    """The log line's local time (logging's asctime) as epoch milliseconds."""
    seconds, _, millis = text.partition(",")
    return int(time.mktime(time.strptime(seconds, "%Y-%m-%d %H:%M:%S")) * 1000 + int(millis))


def timeline(lines: Iterable[str], since_ms: int = 0,
             limit: int = TIMELINE_LIMIT, broker_id: int | None = None) -> list[dict[str, Any]]:
    """GET /api/timeline?local=1: the partition events of state-change.log lines, oldest first,
    the newest `limit` at or after `since_ms`, each naming `broker_id` (whose log it is). Each
    event says what changed compared with the previous line about that partition: "leader
    change", "isr change", or the state change itself ("NewPartition -> OnlinePartition");
    replica state changes are "replica state"."""
    last: dict[str, tuple[int, tuple[int, ...]]] = {}
    events: list[dict[str, Any]] = []
    for raw in lines:
        line = raw.rstrip("\n")
        m = state_change.LINE_RE.match(line)
        if m is None:
            continue
        message = m["message"]
        pm = state_change.PARTITION_RE.search(message)
        if pm is None:
            continue
        name = partition_name(pm["topic"], int(pm["partition"]))
        lm = _LEADERSHIP.search(message)
        leader = epoch = None
        isr: list[int] | None = None
        if message.startswith("Changed state of replica"):
            what = "replica state"
        elif lm is not None:
            leader, epoch = int(lm["leader"]), int(lm["epoch"])
            isr = [int(x) for x in lm["isr"].split(",") if x]
            before = last.get(name)
            last[name] = (leader, tuple(isr))
            if before is not None and before[0] != leader:
                what = "leader change"
            elif before is not None and before[1] != tuple(isr):
                what = "isr change"
            else:
                sm = _STATE_CHANGE.search(message)
                what = f"{sm['before']} -> {sm['after']}" if sm else "state change"
        else:
            sm = _STATE_CHANGE.search(message)
            what = f"{sm['before']} -> {sm['after']}" if sm else "state change"
        t = _time_ms(m["time"])
        if t < since_ms:
            continue
        events.append({"time_ms": t, "broker": broker_id, "partition": name,
                       "topic": pm["topic"], "what": what,
                       "leader": leader,
                       "isr": isr, "leader_epoch": epoch,
                       "actor": f"{m['actor']} {m['id']}", "line": line})
    return events[-limit:] if limit > 0 else []


@dataclass(frozen=True, slots=True)
class PeerTimeline:
    """What a peer's listener answered for /api/timeline?local=1: its events, or why not."""

    broker_id: int
    url: str | None  # None: the broker registered no HTTP listener
    events: Sequence[Mapping[str, Any]] | None = None
    error: str | None = None


def merge_timelines(own_id: int, own: Sequence[Mapping[str, Any]],
                    peers: Iterable[PeerTimeline], limit: int = TIMELINE_LIMIT
                    ) -> dict[str, Any]:
    """GET /api/timeline: this broker's events and its peers', ordered by time (a stable sort:
    each broker's own order is kept within a millisecond), the newest `limit`; `brokers` says
    for each broker whether its events are in (`ok`) or why not (`error`: down, refused, no
    HTTP listener), and its newest event's time (the next poll's cursor)."""
    merged: list[Mapping[str, Any]] = list(own)
    status = [{"id": own_id, "ok": True, "error": None,
               "newest_ms": max((e["time_ms"] for e in own), default=None)}]
    for peer in sorted(peers, key=lambda p: p.broker_id):
        if peer.broker_id == own_id:
            continue
        events = [e for e in (peer.events or ()) if _valid_event(e)]
        for e in events:
            if e.get("broker") is None:
                e = {**e, "broker": peer.broker_id}
            merged.append(e)
        status.append({"id": peer.broker_id, "ok": peer.error is None, "error": peer.error,
                       "newest_ms": max((e["time_ms"] for e in events), default=None)})
    merged.sort(key=lambda e: e["time_ms"])
    return {"events": merged[-limit:] if limit > 0 else [], "brokers": status}


def _valid_event(e: object) -> bool:
    return isinstance(e, Mapping) and isinstance(e.get("time_ms"), int) \
        and isinstance(e.get("partition"), str)


def http_endpoint_of(registration: bytes) -> str | None:
    """The HTTP listener a broker registered in /brokers/ids/<id> (None: none, or unreadable)."""
    try:
        obj = json.loads(registration)
    except (ValueError, UnicodeDecodeError):
        return None
    url = obj.get(HTTP_ENDPOINT_FIELD) if isinstance(obj, dict) else None
    if not isinstance(url, str) or not url.startswith("http://"):
        return None
    return url


def with_http_endpoint(registration: bytes, url: str | None) -> bytes:
    """/brokers/ids/<id>'s JSON with the broker's HTTP listener added (unchanged without one)."""
    if not url:
        return registration
    obj = json.loads(registration)
    obj[HTTP_ENDPOINT_FIELD] = url
    return json.dumps(obj, separators=(",", ":")).encode()


def fault_events_view(events: Iterable[Any], limit: int = FAULT_EVENTS_LIMIT
                      ) -> list[dict[str, Any]]:
    """GET /api/faults: the injected faults (common.fault_log.FaultEvent), oldest first, the
    newest `limit`, with the time in epoch milliseconds as the timeline's."""
    out = [{"time_ms": int(e.time * 1000), "kind": e.kind, "phase": e.phase,
            "targets": list(e.targets), "detail": e.detail, "fault_id": e.fault_id}
           for e in events]
    out.sort(key=lambda e: e["time_ms"])
    return out[-limit:] if limit > 0 else []


def parse_since_by_broker(text: str | None) -> dict[int, int]:
    """?since=0:1700000000000,2:1700000001000 of /api/timeline: a cursor per broker (bad
    items are ignored)."""
    out: dict[int, int] = {}
    for item in (text or "").split(",")[:256]:
        broker, sep, ms = item.partition(":")
        try:
            if sep:
                out[int(broker)] = max(0, int(ms))
        except ValueError:
            continue
    return out


# -- request decisions ----------------------------------------------------------------------------
def parse_basic_auth(header: str | None) -> tuple[str, str] | None:
    """The user and password of an ``Authorization: Basic ...`` header; None if absent or
    malformed."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    if not sep or not user:
        return None
    return user, password


def same_origin(origin: str | None, host: str | None) -> bool:
    """An absent Origin (a non-browser client) or one naming the Host the request went to."""
    if origin is None:
        return True
    if not host or origin == "null":
        return False
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def mutation_refusal(token_header: str | None, csrf_token: str, origin: str | None,
                     host: str | None) -> str | None:
    """Why a mutating request (a fault action) is refused, or None when it may proceed: it
    must carry the listener's CSRF token in X-Odradek-CSRF and come from the same origin."""
    if not token_header or not hmac.compare_digest(token_header.encode(), csrf_token.encode()):
        return f"missing or wrong {CSRF_HEADER} header"
    if not same_origin(origin, host):
        return f"cross-origin request (Origin {origin})"
    return None


def parse_names(text: str | None, limit: int = 32) -> list[str]:
    """?names=a,b of /api/metrics/history: at most `limit` non-empty names."""
    return [n.strip() for n in (text or "").split(",") if n.strip()][:limit]


def parse_since_ms(text: str | None) -> int:
    """?since_ms=N (a bad or absent value: everything)."""
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0
