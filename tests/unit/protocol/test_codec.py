"""The kio-based request/response codec (odradek.protocol.codec): decoding kio-encoded requests,
skipping unknown tagged fields anywhere, rejecting truncated and garbage input with
MalformedRequest only (never a crash: kio's native reader preallocates arrays by their declared
count), response round trips and `make`."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import struct
import sys
import uuid
from collections.abc import Callable
from typing import Any

import kio.index
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio.static.constants import EntityType
from kio.static.primitive import Records

from odradek.protocol.codec import (
    MalformedRequest,
    UnsupportedVersion,
    _py_entity_reader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    make,
    read_entity,
    request_class,
    response_class,
)
from odradek.protocol.records import build_batch

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def req_mod(key: int, version: int) -> Any:
    return sys.modules[kio.index.load_request_schema(key, version).__module__]


def resp_mod(key: int, version: int) -> Any:
    return sys.modules[kio.index.load_response_schema(key, version).__module__]


MS = datetime.timedelta(milliseconds=1)
BATCH = Records(build_batch([(b"k", b"v"), (None, b"w")], timestamp_ms=1_700_000_000_000))


def produce(version: int, txn: str | None) -> Any:
    m = req_mod(0, version)
    return m.ProduceRequest(
        transactional_id=txn, acks=-1, timeout=1500 * MS, topic_data=(
            m.TopicProduceData(name="orders", partition_data=(
                m.PartitionProduceData(index=0, records=BATCH),
                m.PartitionProduceData(index=7, records=None))),
            m.TopicProduceData(name="t2", partition_data=()),
        ))


def fetch_v4() -> Any:
    m = req_mod(1, 4)
    return m.FetchRequest(
        replica_id=-1, max_wait=500 * MS, min_bytes=1, max_bytes=52428800, isolation_level=1,
        topics=(m.FetchTopic(topic="orders", partitions=(
            m.FetchPartition(partition=0, fetch_offset=42, partition_max_bytes=1048576),
            m.FetchPartition(partition=3, fetch_offset=0, partition_max_bytes=1))),))


def fetch_v12(cluster_id: str | None = None) -> Any:
    m = req_mod(1, 12)
    return m.FetchRequest(
        cluster_id=cluster_id, replica_id=2, max_wait=500 * MS, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=9, session_epoch=3,
        topics=(m.FetchTopic(topic="orders", partitions=(
            m.FetchPartition(partition=0, current_leader_epoch=5, fetch_offset=42,
                             last_fetched_epoch=4, log_start_offset=0,
                             partition_max_bytes=1048576),)),),
        forgotten_topics_data=(m.ForgottenTopic(topic="old", partitions=(1, 2, 3)),),
        rack_id="rack-a")


def metadata(version: int) -> Any:
    m = req_mod(3, version)
    if version == 0:
        return m.MetadataRequest(topics=(m.MetadataRequestTopic(name="a"),
                                         m.MetadataRequestTopic(name="b")))
    if version == 4:
        return m.MetadataRequest(topics=None, allow_auto_topic_creation=False)
    return m.MetadataRequest(
        topics=(m.MetadataRequestTopic(topic_id=None, name="a"),
                m.MetadataRequestTopic(topic_id=uuid.UUID(int=12345), name=None)),
        allow_auto_topic_creation=True, include_topic_authorized_operations=True)


def api_versions(version: int) -> Any:
    m = req_mod(18, version)
    if version == 0:
        return m.ApiVersionsRequest()
    return m.ApiVersionsRequest(client_software_name="odradek-test",
                                client_software_version="1.0")


SAMPLES: dict[str, Any] = {
    "produce-v3": produce(3, None),
    "produce-v9": produce(9, "txn-1"),
    "produce-v10": produce(10, None),
    "fetch-v4": fetch_v4(),
    "fetch-v12": fetch_v12(),
    "fetch-v12-cluster-id": fetch_v12("cluster-x"),
    "metadata-v0": metadata(0),
    "metadata-v4": metadata(4),
    "metadata-v12": metadata(12),
    "metadata-v12-all-topics": req_mod(3, 12).MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    "api-versions-v0": api_versions(0),
    "api-versions-v3": api_versions(3),
}
FLEXIBLE = [name for name, req in SAMPLES.items() if type(req).__flexible__]
CLIENT_IDS = ["client-1", None, ""]


def payload_of(req: Any, corr: int = 77, client_id: str | None = "client-1") -> bytes:
    framed = encode_request(req, corr, client_id)
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    return framed[4:]


# --- an encoder that can add unknown tagged fields ----------------------------------------------

Inject = Callable[[type], list[tuple[int, bytes]]]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Buf(bytearray):
    def write(self, data: bytes) -> int:
        self.extend(data)
        return len(data)


def encode_entity(entity: Any, inject: Inject) -> bytes:
    """kio's wire format (as kio.serial.entity_writer), plus the unknown tagged fields `inject`
    returns for each flexible entity (top level, header or nested) written."""
    cls = type(entity)
    flexible = cls.__flexible__
    out = _Buf()
    tags: list[tuple[int, bytes]] = []
    for f in dataclasses.fields(cls):
        value = getattr(entity, f.name)
        tag = get_field_tag(f)
        if tag is not None:
            default = (f.default if f.default is not dataclasses.MISSING
                       else get_tagged_field_default(f))
            if value != default:
                buf = _Buf()
                get_field_writer(f, True, False, True)(buf, value)
                tags.append((int(tag), bytes(buf)))
            continue
        fc = classify_field(f)
        if isinstance(fc, EntityField):
            if is_optional(f):
                out += b"\xff" if value is None else b"\x01"
            if value is not None:
                out += encode_entity(value, inject)
        elif isinstance(fc, EntityTupleField):
            if value is None:
                out += b"\x00" if flexible else struct.pack(">i", -1)
            else:
                out += _uvarint(len(value) + 1) if flexible else struct.pack(">i", len(value))
                for item in value:
                    out += encode_entity(item, inject)
        else:
            get_field_writer(f, flexible, cls.__name__ == "RequestHeader", False)(out, value)
    if flexible:
        tags += inject(cls)
        tags.sort()
        out += _uvarint(len(tags))
        for tag, data in tags:
            out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


def request_header(req: Any, corr: int, client_id: str | None) -> Any:
    return req.__header_schema__(request_api_key=req.__api_key__,
                                 request_api_version=req.__version__, correlation_id=corr,
                                 client_id=client_id)


def encode_with(req: Any, inject: Inject, corr: int = 77, client_id: str | None = "c") -> bytes:
    return (encode_entity(request_header(req, corr, client_id), inject)
            + encode_entity(req, inject))


NO_TAGS: Inject = lambda _cls: []  # noqa: E731
SOME_TAGS = [(40, b""), (1000, b"\x01\x02\x03"), (70000, bytes(range(200)))]


def tags_where(pred: Callable[[type], bool]) -> Inject:
    return lambda cls: list(SOME_TAGS) if pred(cls) else []


WHERE: dict[str, Inject] = {
    "top-level": tags_where(lambda c: c.__type__ == EntityType.request),
    "header": tags_where(lambda c: c.__type__ == EntityType.header),
    "nested": tags_where(lambda c: c.__type__ == EntityType.nested),
    "everywhere": tags_where(lambda c: True),
}


@pytest.mark.parametrize("name", FLEXIBLE)
def test_test_encoder_matches_kio(name: str) -> None:
    for client_id in CLIENT_IDS:
        assert encode_with(SAMPLES[name], NO_TAGS, 5, client_id) == payload_of(
            SAMPLES[name], 5, client_id)


@pytest.mark.parametrize("name", SAMPLES)
def test_request_header_is_written_as_kio_writes_it(name: str) -> None:
    # encode_request writes headers v1 and v2 itself: the bytes must be kio's, whatever the
    # client id (null, empty, not ASCII)
    req = SAMPLES[name]
    for client_id in [*CLIENT_IDS, "cl\u00efent-\u00e9"]:
        header = request_header(req, -3, client_id)
        expected = _Sink()
        entity_writer(type(header))(expected, header)
        entity_writer(type(req))(expected, req)
        assert payload_of(req, -3, client_id) == bytes(expected)


class _Sink(bytearray):
    def write(self, data: bytes) -> int:
        self.extend(data)
        return len(data)


# --- decoding requests --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("client_id", CLIENT_IDS)
def test_decode_request_of_kio_encoded(name: str, client_id: str | None) -> None:
    req = SAMPLES[name]
    payload = payload_of(req, corr=-12345, client_id=client_id)
    header, body = decode_request(payload)
    assert body == req
    assert type(body) is request_class(req.__api_key__, req.__version__)
    assert (header.request_api_key, header.request_api_version, header.correlation_id,
            header.client_id) == (req.__api_key__, req.__version__, -12345, client_id)
    assert decode_request(memoryview(payload)) == (header, body)


def test_decoded_records_are_the_produced_bytes() -> None:
    _, body = decode_request(payload_of(SAMPLES["produce-v9"]))
    assert bytes(body.topic_data[0].partition_data[0].records) == BATCH
    assert body.topic_data[0].partition_data[1].records is None


def _has_nested(req: Any) -> bool:
    return len(encode_with(req, WHERE["nested"])) > len(encode_with(req, NO_TAGS))


@pytest.mark.parametrize(("name", "where"), [
    (name, where) for name in FLEXIBLE for where in WHERE
    if where != "nested" or _has_nested(SAMPLES[name])])
def test_unknown_tagged_fields_are_skipped(name: str, where: str) -> None:
    req = SAMPLES[name]
    plain = encode_with(req, NO_TAGS)
    tagged = encode_with(req, WHERE[where])
    assert len(tagged) > len(plain)  # the tags were really written
    assert decode_request(tagged) == decode_request(plain)


def test_known_tag_read_next_to_unknown_ones() -> None:
    req = SAMPLES["fetch-v12-cluster-id"]
    _, body = decode_request(encode_with(req, WHERE["everywhere"]))
    assert body.cluster_id == "cluster-x"
    assert body == req


def test_fallback_reader_handles_null_arrays() -> None:
    """Metadata v12 with topics=null (all topics) and an unknown tag takes the Python reader."""
    req = SAMPLES["metadata-v12-all-topics"]
    _, body = decode_request(encode_with(req, WHERE["top-level"]))
    assert body.topics is None
    assert body == req


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FLEXIBLE), data=st.data())
def test_random_unknown_tags_are_skipped(name: str, data: st.DataObject) -> None:
    req = SAMPLES[name]

    def inject(cls: type) -> list[tuple[int, bytes]]:
        tags = data.draw(st.dictionaries(st.integers(30, 2**28), st.binary(max_size=150),
                                         max_size=3), label=f"tags of {cls.__name__}")
        return list(tags.items())

    header, body = decode_request(encode_with(req, inject, corr=3, client_id="x"))
    assert body == req
    assert (header.correlation_id, header.client_id) == (3, "x")


def test_python_reader_agrees_with_kio_on_samples() -> None:
    for req in SAMPLES.values():
        payload = payload_of(req)
        _, off = read_entity(req.__header_schema__, payload, 0)
        assert _py_entity_reader(type(req))(payload, off) == (req, len(payload) - off)


# --- round trip of every kio schema -------------------------------------------------------------

_VALUES: dict[str, Any] = {
    "int8": -3, "int16": -300, "int32": 70000, "int64": -(2**40), "uint8": 200,
    "uint16": 60000, "uint32": 2**31 + 5, "uint64": 2**63 + 1, "float64": 1.5, "bool": True,
    "error_code": ErrorCode(3), "timedelta_i32": 1234 * MS, "timedelta_i64": 2**40 * MS,
    "datetime_i64": datetime.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=datetime.UTC),
    "uuid": uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF), "string": "s\u00e9",
    "bytes": b"\x00\x01", "records": Records(b"rec"),
}


def sample_entity(cls: type, nulls: bool) -> Any:
    """Every field set (nested arrays of two, tags non-default), or every nullable one null."""
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        fc = classify_field(f)
        if nulls and get_field_tag(f) is None and is_optional(f):
            kw[f.name] = None
        elif isinstance(fc, EntityField):
            kw[f.name] = sample_entity(fc.type_, nulls)
        elif isinstance(fc, EntityTupleField):
            kw[f.name] = () if nulls else (sample_entity(fc.type_, False),
                                           sample_entity(fc.type_, True))
        else:
            value = _VALUES[f.metadata["kafka_type"]]
            is_array = isinstance(fc, PrimitiveTupleField)
            kw[f.name] = ((() if nulls else (value, value)) if is_array else value)
    return cls(**kw)


ALL_SCHEMAS = [
    (key, version, kind)
    for key, name in sorted(api_key_map.items())
    for version in sorted(schema_name_map[name])
    for kind in ("request", "response")
]


def test_every_kio_schema_round_trips_through_read_entity() -> None:
    """The bounds check run before kio's reader accepts every valid message of every schema,
    rejects every strict prefix, and the Python fallback reader agrees with kio."""
    for key, version, kind in ALL_SCHEMAS:
        cls = (kio.index.load_request_schema if kind == "request"
               else kio.index.load_response_schema)(key, version)
        for nulls in (False, True):
            obj = sample_entity(cls, nulls)
            buf = _Buf()
            entity_writer(cls)(buf, obj)
            data = bytes(buf) + b"\xee"  # trailing bytes are not read
            where = f"{cls.__module__} nulls={nulls}"
            assert read_entity(cls, data, 0) == (obj, len(buf)), where
            assert _py_entity_reader(cls)(data, 0) == (obj, len(buf)), where
            for cut in range(len(buf)):
                try:
                    read_entity(cls, data[:cut], 0)
                except Exception:  # MalformedRequest from the check, or kio's own errors
                    continue
                pytest.fail(f"{where}: prefix of {cut} bytes accepted")


# --- malformed input ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_every_truncation_is_malformed(name: str) -> None:
    req = SAMPLES[name]
    payloads = [payload_of(req)]
    if name in FLEXIBLE:
        payloads.append(encode_with(req, WHERE["everywhere"]))
    for payload in payloads:
        for cut in range(len(payload)):
            with pytest.raises(MalformedRequest):
                decode_request(payload[:cut])


def test_unknown_tag_running_past_the_end_is_malformed() -> None:
    payload = payload_of(SAMPLES["api-versions-v3"])
    assert payload.endswith(b"\x00")  # the body's empty tagged-field section
    good = payload[:-1] + b"\x01" + b"\x28" + b"\x02" + b"ab"
    assert decode_request(good)[1] == SAMPLES["api-versions-v3"]
    with pytest.raises(MalformedRequest):
        decode_request(payload[:-1] + b"\x01" + b"\x28" + b"\x10" + b"ab")


def _header(key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", key, version, 1, -1) + (b"\x00" if flexible else b"")


@pytest.mark.parametrize(
    "payload",
    [
        # Metadata v12: topics, a compact array declaring 2**32 - 2 elements.
        pytest.param(_header(3, 12, True) + b"\xff\xff\xff\xff\x0f", id="compact-2**32"),
        pytest.param(_header(3, 12, True) + b"\x80\x94\xeb\xdc\x03", id="compact-10**9"),
        # Metadata v0: a legacy int32 count.
        pytest.param(_header(3, 0, False) + struct.pack(">i", 2**31 - 1), id="legacy-2**31"),
        pytest.param(_header(3, 0, False) + struct.pack(">i", 10**9) + b"\x00\x01a",
                     id="legacy-10**9-after-data"),
        # Produce v9: a nested partition array, then a primitive array of Fetch v12.
        pytest.param(_header(0, 9, True) + b"\x00" + b"\xff\xff" + b"\x00\x00\x01\x00"
                     + b"\x02" + b"\x02t" + b"\xff\xff\xff\xff\x0f", id="nested-compact"),
        pytest.param(
            _header(1, 12, True) + struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x01"
            + b"\x02" + b"\x02t" + b"\xfe\xff\xff\xff\x0f", id="forgotten-partitions"),
        pytest.param(_header(18, 3, True) + b"\xff\xff\xff\xff\x0f", id="string-2**32"),
        pytest.param(_header(18, 3, True) + b"\x01\x01" + b"\xff\xff\xff\xff\x0f",
                     id="tag-count-2**32"),
        pytest.param(_header(18, 3, True) + b"\x01\x01\x01\x00" + b"\xff\xff\xff\xff\x0f",
                     id="tag-size-2**32"),
    ],
)
def test_huge_declared_counts_are_malformed_not_fatal(payload: bytes) -> None:
    with pytest.raises(MalformedRequest):
        decode_request(payload)


@FUZZ
@given(st.binary(max_size=120))
def test_random_bytes_raise_only_codec_errors(data: bytes) -> None:
    with contextlib.suppress(MalformedRequest, UnsupportedVersion):
        decode_request(data)


@FUZZ
@given(name=st.sampled_from(list(SAMPLES)), tail=st.binary(max_size=150))
def test_garbage_body_after_a_valid_header(name: str, tail: bytes) -> None:
    req = SAMPLES[name]
    plain = payload_of(req)
    header_len = len(plain) - len(encode_entity(req, NO_TAGS))
    with contextlib.suppress(MalformedRequest):
        decode_request(plain[:header_len] + tail)


@FUZZ
@given(name=st.sampled_from(list(SAMPLES)), data=st.data())
def test_mutated_requests_raise_only_malformed(name: str, data: st.DataObject) -> None:
    payload = bytearray(payload_of(SAMPLES[name]))
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        pos = data.draw(st.integers(8, len(payload)), label="pos")  # keep key and version
        action = data.draw(st.sampled_from(["set", "insert", "delete"]), label="action")
        value = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF])
                          | st.integers(0, 255), label="byte")
        if action == "set" and pos < len(payload):
            payload[pos] = value
        elif action == "insert":
            payload[pos:pos] = bytes([value]) * data.draw(st.integers(1, 5))
        elif pos < len(payload):
            del payload[pos]
    with contextlib.suppress(MalformedRequest):
        decode_request(bytes(payload))


@pytest.mark.parametrize(("key", "version"),
                         [(9999, 0), (-1, 0), (18, 99), (18, -1), (3, 10000), (4, 0)])
def test_unknown_api_key_or_version(key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        decode_request(struct.pack(">hhih", key, version, 1, -1) + b"\x00" * 8)


def test_short_header_is_malformed() -> None:
    for n in range(8):
        with pytest.raises(MalformedRequest):
            decode_request(b"\x00\x12\x00\x03\x00\x00\x00\x01"[:n])


# --- responses ----------------------------------------------------------------------------------


def api_versions_response(version: int) -> Any:
    m = resp_mod(18, version)
    keys = (m.ApiVersion(api_key=0, min_version=3, max_version=9),
            m.ApiVersion(api_key=18, min_version=0, max_version=3))
    if version == 0:
        return m.ApiVersionsResponse(error_code=ErrorCode.none, api_keys=keys)
    return m.ApiVersionsResponse(
        error_code=ErrorCode.none, api_keys=keys, throttle_time=0 * MS,
        supported_features=(m.SupportedFeatureKey(name="f", min_version=1, max_version=2),),
        finalized_features_epoch=5, finalized_features=(), zk_migration_ready=False)


def metadata_response_v12() -> Any:
    m = resp_mod(3, 12)
    return m.MetadataResponse(
        throttle_time=7 * MS,
        brokers=(m.MetadataResponseBroker(node_id=1, host="h1", port=9092, rack=None),
                 m.MetadataResponseBroker(node_id=2, host="h2", port=9093, rack="r")),
        cluster_id="cid", controller_id=1,
        topics=(m.MetadataResponseTopic(
            error_code=ErrorCode.none, name="orders", topic_id=uuid.UUID(int=7),
            is_internal=False, partitions=(m.MetadataResponsePartition(
                error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=3,
                replica_nodes=(1, 2), isr_nodes=(1,), offline_replicas=()),),
            topic_authorized_operations=-2147483648),))


def produce_response_v9() -> Any:
    m = resp_mod(0, 9)
    return m.ProduceResponse(responses=(m.TopicProduceResponse(name="orders", partition_responses=(
        m.PartitionProduceResponse(
            index=0, error_code=ErrorCode.corrupt_message, base_offset=-1, log_append_time=None,
            log_start_offset=-1, record_errors=(m.BatchIndexAndErrorMessage(
                batch_index=0, batch_index_error_message="bad crc"),),
            error_message="bad"),)),), throttle_time=0 * MS)


RESPONSES = {
    "api-versions-v0": (SAMPLES["api-versions-v0"], api_versions_response(0)),
    "api-versions-v3": (SAMPLES["api-versions-v3"], api_versions_response(3)),
    "metadata-v12": (SAMPLES["metadata-v12"], metadata_response_v12()),
    "produce-v9": (SAMPLES["produce-v9"], produce_response_v9()),
}


@pytest.mark.parametrize("name", RESPONSES)
def test_response_round_trip(name: str) -> None:
    req, resp = RESPONSES[name]
    rcls = response_class(type(req))
    assert type(resp) is rcls
    framed = encode_response(type(req), 4242, resp)
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    assert framed[4:8] == struct.pack(">i", 4242)
    assert decode_response(rcls, framed[4:]) == (4242, resp)


def test_api_versions_v3_response_header_has_no_tagged_fields() -> None:
    """ApiVersionsResponse keeps header v0 even when flexible (clients parse it before they know
    the broker's versions): error code right after the correlation id."""
    framed = encode_response(type(SAMPLES["api-versions-v3"]), 1, api_versions_response(3))
    assert framed[8:10] == b"\x00\x00"
    framed = encode_response(type(SAMPLES["metadata-v12"]), 1, metadata_response_v12())
    assert framed[8:9] == b"\x00" and framed[9:13] == struct.pack(">i", 7)  # tags, throttle


def test_response_with_unknown_tags_is_decoded() -> None:
    resp = metadata_response_v12()
    inject = tags_where(lambda c: c.__type__ != EntityType.header)
    payload = struct.pack(">i", 9) + b"\x00" + encode_entity(resp, inject)
    assert decode_response(type(resp), payload) == (9, resp)


# --- make ---------------------------------------------------------------------------------------


def test_make_drops_fields_the_version_lacks() -> None:
    v0, v12 = resp_mod(3, 0).MetadataResponse, resp_mod(3, 12).MetadataResponse
    common: dict[str, Any] = dict(throttle_time=25, brokers=(), topics=(), cluster_id="c",
                                  controller_id=3, not_a_field="x")
    assert make(v0, **common) == v0(brokers=(), topics=())
    made = make(v12, **common)
    assert made == v12(throttle_time=25 * MS, brokers=(), topics=(), cluster_id="c",
                       controller_id=3)
    assert made.throttle_time == datetime.timedelta(milliseconds=25)


def test_make_converts_only_int_milliseconds() -> None:
    m = resp_mod(1, 12)
    made = make(m.FetchResponse, throttle_time=datetime.timedelta(seconds=2),
                error_code=ErrorCode.none, session_id=0, responses=())
    assert made.throttle_time == datetime.timedelta(seconds=2)
    v4 = resp_mod(1, 4).FetchResponse
    assert make(v4, throttle_time=0, error_code=ErrorCode.none, session_id=5,
                responses=()) == v4(throttle_time=datetime.timedelta(0), responses=())
    # Non-timedelta ints stay ints.
    p = resp_mod(0, 9).PartitionProduceResponse
    made_p = make(p, index=1, error_code=ErrorCode.none, base_offset=10, log_start_offset=0,
                  record_errors=(), current_leader=None)
    assert made_p.base_offset == 10 and made_p.index == 1


def test_negative_timestamp_in_a_response_reads_as_minus_one_ms() -> None:
    """Kafka answers DescribeTransactions with transaction_start_time -1 for an Empty or unknown
    transactional id; kio's native reader refuses negative timestamps, the fallback reads it."""
    import datetime

    from kio.schema.describe_transactions.v0 import response as mod
    from kio.schema.errors import ErrorCode

    from odradek.protocol.codec import decode_response, encode_response, make
    from odradek.protocol.codec import request_class as rc

    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    state = make(mod.TransactionState, error_code=ErrorCode.transactional_id_not_found,
                 transactional_id="t", transaction_state="", transaction_timeout=0,
                 transaction_start_time=epoch + datetime.timedelta(milliseconds=-1),
                 producer_id=-1, producer_epoch=-1, topics=())
    frame = encode_response(rc(65, 0), 7, make(mod.DescribeTransactionsResponse, throttle_time=0,
                                                transaction_states=(state,)))
    corr, body = decode_response(mod.DescribeTransactionsResponse, frame[4:])
    assert corr == 7
    start = body.transaction_states[0].transaction_start_time
    assert round((start - epoch).total_seconds() * 1000) == -1
