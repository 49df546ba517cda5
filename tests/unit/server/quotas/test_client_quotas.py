"""Client quotas: Kafka's rate sensor, throttle time, precedence, entity rules, response
patching and connection limits (all pure)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.protocol.codec import decode_response, encode_response, make, request_class
from odradek.protocol.codec import response_class as response_cls_of
from odradek.protocol.produce_response import encode_produce_response
from odradek.server.quotas.client_quota_manager import (
    DEFAULT,
    LONG_MAX,
    ClientQuotaManager,
    QuotaEntity,
    QuotaManagers,
    quota_limit,
    quota_metric_tags,
)
from odradek.server.quotas.connection_quotas import (
    ConnectionQuotas,
    TooManyConnections,
    parse_overrides,
)
from odradek.server.quotas.quota_config import (
    EntityName,
    FilterComponent,
    InvalidQuotaRequest,
    UnsupportedQuotaEntity,
    apply_quota_ops,
    check_filter,
    describe_matches,
    entity_of_notification,
    entity_path,
    notification_entity,
    parse_entity,
)
from odradek.server.quotas.quota_sensor import QuotaRate, record_and_throttle, throttle_time_ms
from odradek.server.quotas.request_throttler import (
    response_size,
    throttle_offset,
    with_throttle_time,
)

# -- the rate sensor ------------------------------------------------------------------------


def test_fresh_rate_counts_at_least_num_minus_one_windows() -> None:
    rate = QuotaRate(11, 1000)
    rate.record(1000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    assert rate.window_size_ms(500) == 10_500


def test_samples_are_recycled_and_expire() -> None:
    rate = QuotaRate(3, 1000)
    for t in range(0, 5000, 1000):
        rate.record(10, t)
    assert len(rate.samples) == 3  # the oldest sample is reused
    assert rate.measure(4000) == pytest.approx(30 * 1000 / 2000)
    # after num * window without records every sample is reset
    assert rate.measure(4000 + 3000) == 0.0


def test_unrecord_brings_the_sum_back() -> None:
    rate = QuotaRate()
    rate.record(500, 0)
    rate.record(300, 10)
    rate.record(-300, 10)
    assert rate.measure(10) == pytest.approx(500 * 1000 / 10_010)


def test_throttle_time_is_kafkas_formula() -> None:
    # O = 150, T = 100 over W = 10 s: X = (150 - 100) / 100 * 10000 = 5000 ms
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5000
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    assert throttle_time_ms(1.0, 0.0, 10_000) == 2**31 - 1


@given(observed=st.floats(1.0, 1e9), bound=st.floats(1.0, 1e9), window=st.integers(1, 100_000))
def test_throttle_brings_the_rate_back_to_the_quota(observed: float, bound: float,
                                                     window: int) -> None:
    delay = throttle_time_ms(observed, bound, window)
    if observed <= bound:
        assert delay == 0
        return
    if delay >= 2**31 - 1:
        return
    # O * W / (W + X) = T, up to the millisecond rounding
    low = observed * window / (window + delay + 0.5)
    high = observed * window / (window + max(delay - 0.5, 0))
    assert low <= bound * (1 + 1e-9) and high >= bound * (1 - 1e-9)


def test_record_and_throttle_over_a_quota() -> None:
    rate = QuotaRate(11, 1000)
    assert record_and_throttle(rate, 500_000, 0, 100_000.0) == 0  # 50 KB/s over 10 s
    delay = record_and_throttle(rate, 1_000_000, 0, 100_000.0)  # now 150 KB/s
    assert delay == 5000
    assert record_and_throttle(QuotaRate(), 10**9, 0, 1.0, max_throttle_ms=1000) == 1000


# -- precedence (DefaultQuotaCallback) ----------------------------------------------------------

LEVELS = [QuotaEntity("u", "c"), QuotaEntity("u", DEFAULT), QuotaEntity("u", None),
          QuotaEntity(DEFAULT, "c"), QuotaEntity(DEFAULT, DEFAULT), QuotaEntity(DEFAULT, None),
          QuotaEntity(None, "c"), QuotaEntity(None, DEFAULT)]


@settings(max_examples=100)
@given(st.lists(st.sampled_from(range(8)), unique=True, min_size=1))
def test_the_first_level_of_kafkas_precedence_wins(present: list[int]) -> None:
    m = ClientQuotaManager("Produce")
    for i in present:
        m.update_quota(LEVELS[i], float(1000 + i))
    assert m.quota("u", "c") == 1000 + min(present)


def test_each_level_alone() -> None:
    for i, entity in enumerate(LEVELS):
        m = ClientQuotaManager("Produce")
        m.update_quota(entity, float(i + 1))
        assert m.quota("u", "c") == i + 1, entity
        # other users and clients: only the defaults apply to them
        other = m.quota("v", "d")
        is_default = (entity.user in (DEFAULT, None) and entity.client_id in (DEFAULT, None))
        assert (other == i + 1) == is_default, entity


def test_static_default_is_the_last_level() -> None:
    m = ClientQuotaManager("Produce", static_default=5000)
    assert m.quotas_enabled
    assert m.quota("u", "c") == 5000
    m.update_quota(QuotaEntity(None, DEFAULT), 7000)
    assert m.quota("u", "c") == 7000


def test_metric_tags_share_the_sensor_of_the_entity_whose_quota_applies() -> None:
    quotas = {QuotaEntity("u", None): 10.0, QuotaEntity(None, "c"): 20.0}
    # several levels in use: the first present entity decides
    assert quota_metric_tags(quotas, 8, "u", "c1") == ("u", "")
    assert quota_metric_tags(quotas, 8, "v", "c") == ("", "c")
    assert quota_limit(quotas, ("u", "")) == 10.0
    assert quota_limit(quotas, ("", "c")) == 20.0
    assert quota_limit(quotas, ("", "other")) == float(LONG_MAX)
    assert quota_limit(quotas, ("v", "")) is None


def test_clients_of_one_user_share_the_user_quota() -> None:
    m = ClientQuotaManager("Produce", clock=lambda: 0)
    m.update_quota(QuotaEntity("u", None), 100.0)
    assert m.record_and_get_throttle_ms("u", "a", 1000, 0) == 0  # 100 B/s over 10 s
    assert m.record_and_get_throttle_ms("u", "b", 1000, 0) > 0  # shared: now 200 B/s
    assert m.record_and_get_throttle_ms("v", "a", 1000, 0) == 0


def test_no_quota_no_recording_and_removal() -> None:
    m = ClientQuotaManager("Produce")
    assert not m.quotas_enabled
    assert m.record_and_get_throttle_ms("u", "c", 10**12, 0) == 0
    assert m.sensor_count() == 0
    m.update_quota(QuotaEntity(None, "c"), 1.0)
    m.update_quota(QuotaEntity(None, "c"), None)
    assert m.quotas_enabled  # as Kafka: stays on until a restart
    assert m.record_and_get_throttle_ms("u", "c", 10**12, 0) == 0


def test_sensors_are_bounded_and_expire() -> None:
    m = ClientQuotaManager("Produce", max_sensors=10)
    m.update_quota(QuotaEntity(None, DEFAULT), 10**9)
    for i in range(50):
        m.record_and_get_throttle_ms("u", f"client-{i}", 1, 0)
    assert m.sensor_count() == 10
    m.record_and_get_throttle_ms("u", "late", 1, 3600 * 1000 + 31_000)
    assert m.sensor_count() == 1


def test_quota_change_applies_to_existing_sensors() -> None:
    m = ClientQuotaManager("Produce")
    m.update_quota(QuotaEntity(None, "c"), 10**9)
    assert m.record_and_get_throttle_ms("u", "c", 10_000, 0) == 0
    m.update_quota(QuotaEntity(None, "c"), 10.0)
    assert m.record_and_get_throttle_ms("u", "c", 1, 0) > 0


def test_request_quota_is_capped_at_one_window_and_fetch_window_max() -> None:
    q = QuotaManagers(clock=lambda: 0)
    q.apply_entity(QuotaEntity(None, "c"), {"request_percentage": "1",
                                             "consumer_byte_rate": "1000",
                                             "producer_byte_rate": "garbage"})
    assert q.request.record_and_get_throttle_ms("u", "c", 10**6, 0) == 1000
    assert q.fetch.max_value_in_quota_window("u", "c") == 1000 * 10
    assert not q.produce.quotas_enabled  # a value that is not a number is ignored
    q.apply_entity(QuotaEntity(None, "c"), {})
    assert q.fetch.quota("u", "c") == float(LONG_MAX)


# -- entities, ops and filters (ZkAdminManager) -------------------------------------------------

def test_parse_entity() -> None:
    assert parse_entity([("user", "alice"), ("client-id", None)]) == EntityName("alice", DEFAULT)
    with pytest.raises(InvalidQuotaRequest, match="Invalid empty client quota entity"):
        parse_entity([])
    with pytest.raises(InvalidQuotaRequest, match="Unhandled client quota entity type: x"):
        parse_entity([("x", "a")])
    with pytest.raises(InvalidQuotaRequest, match="Empty user not supported"):
        parse_entity([("user", "")])
    with pytest.raises(InvalidQuotaRequest, match="IP entity should not be used"):
        parse_entity([("user", "a"), ("ip", "1.2.3.4")])


def test_apply_quota_ops() -> None:
    props = {"SCRAM-SHA-256": "salt=..", "consumer_byte_rate": "5"}
    out = apply_quota_ops(props, [("producer_byte_rate", 1024.0), ("request_percentage", 50.0),
                                  ("consumer_byte_rate", None)])
    assert out == {"SCRAM-SHA-256": "salt=..", "producer_byte_rate": "1024",
                   "request_percentage": "50.0"}
    with pytest.raises(InvalidQuotaRequest, match="Invalid configuration key bogus"):
        apply_quota_ops({}, [("bogus", 1.0)])
    with pytest.raises(InvalidQuotaRequest, match="producer_byte_rate must be a LONG value"):
        apply_quota_ops({}, [("producer_byte_rate", 10.5)])
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InvalidQuotaRequest):
            apply_quota_ops({}, [("consumer_byte_rate", bad)])


def test_paths_and_notifications() -> None:
    e = EntityName("CN=a b", "app/1").quota_entity
    assert entity_path(e) == "/config/users/CN%3Da%20b/clients/app%2F1"
    assert notification_entity(e) == "users/CN%3Da%20b/clients/app%2F1"
    assert entity_of_notification("users", "CN%3Da%20b/clients/app%2F1") == e
    d = EntityName(DEFAULT, DEFAULT).quota_entity
    assert entity_path(d) == "/config/users/<default>/clients/<default>"
    assert entity_of_notification("clients", "<default>") == QuotaEntity(None, DEFAULT)
    assert entity_of_notification("users", "a/b") is None
    assert entity_of_notification("topics", "t") is None


def test_describe_filters() -> None:
    with pytest.raises(InvalidQuotaRequest, match="Duplicate user filter"):
        check_filter([FilterComponent("user", 2, None), FilterComponent("user", 2, None)])
    with pytest.raises(UnsupportedQuotaEntity, match="Custom entity type 'x' not supported"):
        check_filter([FilterComponent("x", 2, None)])
    with pytest.raises(InvalidQuotaRequest, match="empty filter component"):
        check_filter([FilterComponent("", 2, None)])
    comps = check_filter([FilterComponent("user", 0, "alice")])
    assert describe_matches(comps, False, EntityName("alice", "c"))
    assert not describe_matches(comps, True, EntityName("alice", "c"))
    assert describe_matches(comps, True, EntityName("alice", None))
    default = check_filter([FilterComponent("client-id", 1, None)])
    assert describe_matches(default, True, EntityName(None, DEFAULT))
    assert not describe_matches(default, True, EntityName(None, "c"))


# -- throttle_time_ms in encoded responses -------------------------------------------------------

def _encode(api_key: int, version: int, **fields: object) -> tuple[type, bytes]:
    req = request_class(api_key, version)
    resp = response_cls_of(req)
    mod = __import__(resp.__module__, fromlist=["x"])
    return req, encode_response(req, 7, make(getattr(mod, resp.__name__), **fields))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_throttle_patched(version: int) -> None:
    req = request_class(18, version)
    resp = response_cls_of(req)
    mod = __import__(resp.__module__, fromlist=["x"])
    keys = tuple(make(mod.ApiVersion, api_key=k, min_version=0, max_version=3)
                 for k in range(5))
    kwargs: dict[str, object] = {"error_code": ErrorCode.none, "api_keys": keys}
    if version >= 1:
        kwargs["throttle_time"] = 0
    frame = encode_response(req, 7, make(resp, **kwargs))
    patched = with_throttle_time(18, version, frame, 1234)
    assert isinstance(patched, bytes)
    _, decoded = decode_response(resp, patched[4:])
    if version >= 1:
        assert decoded.throttle_time.total_seconds() * 1000 == 1234
    else:
        assert patched == frame


@pytest.mark.parametrize(("key", "version", "fields"), [
    (3, 12, {"brokers": (), "cluster_id": None, "controller_id": 1, "topics": ()}),
    (3, 5, {"brokers": (), "cluster_id": None, "controller_id": 1, "topics": ()}),
    (47, 0, {"error_code": ErrorCode.none, "topics": ()}),
    (12, 4, {"error_code": ErrorCode.none}),
    (60, 0, {"error_code": ErrorCode.none, "error_message": None, "cluster_id": "x",
             "controller_id": 1, "brokers": ()}),
])
def test_first_field_throttle_patched(key: int, version: int, fields: dict[str, object]
                                      ) -> None:
    resp = response_cls_of(request_class(key, version))
    names = {f.name for f in dataclasses.fields(resp)}
    fields = {k: v for k, v in fields.items() if k in names}
    if "cluster_authorized_operations" in names:
        fields["cluster_authorized_operations"] = -2147483648
    if "endpoint_type" in names:
        fields["endpoint_type"] = 1
    _, frame = _encode(key, version, throttle_time=0, **fields)
    patched = with_throttle_time(key, version, frame, 777)
    _, decoded = decode_response(resp, patched[4:])  # type: ignore[index]
    assert decoded.throttle_time.total_seconds() * 1000 == 777
    assert response_size(frame) == len(frame) - 4


@pytest.mark.parametrize("version", [3, 8, 9, 10])
def test_produce_throttle_is_the_last_field(version: int) -> None:
    frame = encode_produce_response(version, 5, [("t", [(0, 0, 10, -1, 0, None, [])])])
    patched = with_throttle_time(0, version, frame, 42)
    assert patched == encode_produce_response(version, 5, [("t", [(0, 0, 10, -1, 0, None, [])])],
                                              throttle_time_ms=42)
    assert throttle_offset(0, version, frame) is not None


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_fetch_throttle_time_is_read_and_patched_in_place(version: int) -> None:
    # the request quota patches a Fetch answer after the fact; a bandwidth-throttled answer
    # (already carrying its time, from the Fetch API's session step) is left alone
    from odradek.protocol.fetch_response import encode_fetch_response
    from odradek.server.quotas.request_throttler import _throttle_time

    original = encode_fetch_response(version, 9, [], error_code=0, session_id=55)
    assert _throttle_time(version, original) == 0
    patched = with_throttle_time(1, version, original, 300)
    assert _throttle_time(version, patched) == 300
    assert b"".join(patched) == b"".join(encode_fetch_response(
        version, 9, [], throttle_time_ms=300, error_code=0, session_id=55))


# -- connection limits (ConnectionQuotas) ----------------------------------------------------

def test_parse_overrides() -> None:
    assert parse_overrides("127.0.0.1:5, [::1]:2 ,") == {"127.0.0.1": 5, "::1": 2}
    for bad in ("host", "host:x", ":3", "h:-1"):
        with pytest.raises(ValueError):
            parse_overrides(bad)


def test_per_ip_limit_and_overrides() -> None:
    q = ConnectionQuotas(max_per_ip=2, per_ip_overrides={"10.0.0.1": 0})
    q.add_listener("PLAINTEXT")
    q.inc("PLAINTEXT", "1.1.1.1")
    q.inc("PLAINTEXT", "1.1.1.1")
    with pytest.raises(TooManyConnections):
        q.inc("PLAINTEXT", "1.1.1.1")
    q.dec("PLAINTEXT", "1.1.1.1")
    with pytest.raises(TooManyConnections):
        q.inc("PLAINTEXT", "10.0.0.1")
    q.dec("PLAINTEXT", "10.0.0.1")
    assert q.get("1.1.1.1") == 2 and q.total == 2


def test_broker_and_listener_limits_protect_the_inter_broker_listener() -> None:
    q = ConnectionQuotas(max_connections=2, listener_limits={"EXTERNAL": 1},
                         inter_broker_listener="INTERNAL")
    q.add_listener("INTERNAL")
    q.add_listener("EXTERNAL")
    assert q.slot_available("EXTERNAL")
    q.inc("EXTERNAL", "a")
    assert not q.slot_available("EXTERNAL")  # its own limit
    q.inc("INTERNAL", "b")
    assert q.slot_available("INTERNAL")  # protected: only its listener limit
    q.inc("INTERNAL", "b")
    assert q.max_connections_exceeded("EXTERNAL") and not q.max_connections_exceeded("INTERNAL")


@given(st.lists(st.tuples(st.sampled_from(["A", "B"]), st.sampled_from(["x", "y", "z"]),
                          st.booleans()), max_size=60))
def test_counts_stay_consistent(events: list[tuple[str, str, bool]]) -> None:
    q = ConnectionQuotas(max_per_ip=3)
    q.add_listener("A")
    q.add_listener("B")
    open_: list[tuple[str, str]] = []
    for listener, ip, opening in events:
        if opening:
            try:
                q.inc(listener, ip)
                open_.append((listener, ip))
            except TooManyConnections:
                q.dec(listener, ip)
        elif (listener, ip) in open_:
            open_.remove((listener, ip))
            q.dec(listener, ip)
    assert q.total == len(open_)
    for ip in "xyz":
        assert q.get(ip) == sum(1 for _, i in open_ if i == ip) <= 3
    for name in "AB":
        assert q.listener_counts[name] == sum(1 for n, _ in open_ if n == name)
    assert list(itertools.chain(q.counts.values())) == [v for v in q.counts.values() if v > 0]


def test_every_served_api_with_a_throttle_field_can_carry_it() -> None:
    """Kafka throttles every client API; odradek must find the field in each response."""
    from odradek.server.apis import APIS
    from odradek.server.quotas.request_throttler import throttle_field

    missing = []
    for key, (name, lo, hi) in APIS.items():
        for version in range(lo, hi + 1):
            try:
                cls = response_cls_of(request_class(key, version))
            except Exception:  # versions kio has no schema for
                continue
            has = any(f.name == "throttle_time" for f in dataclasses.fields(cls))
            if has and throttle_field(key, version) is None:
                missing.append(f"{name} v{version}")
    assert not missing


class _DenyAll:
    enabled = True

    def __init__(self) -> None:
        self.asked: list[tuple[object, ...]] = []

    def authorize(self, principal: object, host: str, operation: object, resource_type: object,
                  name: str, **_: object) -> bool:
        self.asked.append((operation, resource_type, name))
        return False

    def authorize_any(self, *args: object, **kwargs: object) -> bool:
        return False


def test_quota_apis_need_cluster_describe_and_alter_configs() -> None:
    import asyncio
    from types import SimpleNamespace

    from odradek.protocol.codec import decode_response
    from odradek.security.acl import AclOperation, ResourceType
    from odradek.security.principal import ANONYMOUS
    from odradek.server.apis.client_quotas import ClientQuotaApis

    authorizer = _DenyAll()
    apis = ClientQuotaApis(store=None, authorizer=authorizer)  # type: ignore[arg-type]
    conn = SimpleNamespace(principal=ANONYMOUS, peer="10.0.0.1:5000")
    header = SimpleNamespace(correlation_id=3, request_api_version=1)
    describe_cls = request_class(48, 1)
    dmod = __import__(describe_cls.__module__, fromlist=["x"])
    describe = make(describe_cls, components=(make(dmod.ComponentData, entity_type="user",
                                                   match_type=2, match=None),), strict=False)
    frame = asyncio.run(apis.handle_describe(header, describe, conn))  # type: ignore[arg-type]
    _, resp = decode_response(response_cls_of(describe_cls), frame[4:])
    assert resp.error_code == ErrorCode.cluster_authorization_failed
    alter_cls = request_class(49, 1)
    amod = __import__(alter_cls.__module__, fromlist=["x"])
    alter = make(alter_cls, validate_only=False, entries=(make(
        amod.EntryData, entity=(make(amod.EntityData, entity_type="user", entity_name="u"),),
        ops=(make(amod.OpData, key="producer_byte_rate", value=1.0, remove=False),)),))
    frame = asyncio.run(apis.handle_alter(header, alter, conn))  # type: ignore[arg-type]
    _, resp = decode_response(response_cls_of(alter_cls), frame[4:])
    assert [e.error_code for e in resp.entries] == [ErrorCode.cluster_authorization_failed]
    assert authorizer.asked == [
        (AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"),
        (AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, "kafka-cluster")]
