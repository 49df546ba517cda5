"""The hand-encoded ProduceResponse is byte-identical to kio's for every advertised version,
record_errors (KIP-467, v8+) included, and decodes back to what was encoded."""

from __future__ import annotations

import datetime

import kio.index
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.constants import EntityType

from odradek.protocol.codec import _Buffer, decode_response, make
from odradek.protocol.produce_response import encode_produce_response


def kio_bytes(version: int, correlation_id: int, topics: list) -> bytes:
    mod = kio.index.load_payload_module(0, version, EntityType.response)
    responses = tuple(make(mod.TopicProduceResponse, name=t, partition_responses=tuple(
        make(mod.PartitionProduceResponse, index=i, error_code=ErrorCode(err), base_offset=base,
             log_append_time=(None if ts < 0 else
                              datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC)),
             log_start_offset=start, error_message=msg,
             record_errors=tuple(make(mod.BatchIndexAndErrorMessage, batch_index=bi,
                                      batch_index_error_message=bm) for bi, bm in rerrs))
        for i, err, base, ts, start, msg, rerrs in parts)) for t, parts in topics)
    body = make(mod.ProduceResponse, responses=responses, throttle_time=0)
    out = _Buffer()
    entity_writer(mod.ProduceResponse.__header_schema__)(
        out, mod.ProduceResponse.__header_schema__(correlation_id=correlation_id))
    entity_writer(mod.ProduceResponse)(out, body)
    return len(out).to_bytes(4, "big") + bytes(out)


partition = st.tuples(
    st.integers(0, 1000), st.sampled_from([0, 2, 3, 6, 10, 19, 45, 87]),
    st.integers(-1, 2**40), st.sampled_from([-1, 1_700_000_000_123]), st.integers(-1, 2**40),
    st.one_of(st.none(), st.text(max_size=30)),
    st.lists(st.tuples(st.integers(0, 2**31 - 1), st.one_of(st.none(), st.text(max_size=20))),
             max_size=3))
topics = st.lists(st.tuples(st.text("abc.-_", min_size=1, max_size=20),
                            st.lists(partition, min_size=1, max_size=4)), max_size=3)


@pytest.mark.parametrize("version", range(3, 11))
@given(corr=st.integers(0, 2**31 - 1), topics=topics)
def test_byte_identical_to_kio(version: int, corr: int, topics: list) -> None:
    # kio writes the message only when there is an error (None when error is 0, as we do).
    topics = [(t, [(i, e, b, ts, s, m if e else None, r if e else [])
                   for i, e, b, ts, s, m, r in ps])
              for t, ps in topics]
    if version < 8:  # older versions have no record errors: kio writes none either
        topics = [(t, [(*p[:6], []) for p in ps]) for t, ps in topics]
    assert encode_produce_response(version, corr, topics) == kio_bytes(version, corr, topics)


@pytest.mark.parametrize("version", [8, 9, 10])
@settings(deadline=None)
@given(errors=st.lists(st.tuples(st.integers(0, 2**31 - 1),
                                 st.one_of(st.none(), st.text(max_size=40))),
                       min_size=1, max_size=6),
       message=st.one_of(st.none(), st.text(max_size=40)))
def test_record_errors_decode_back(version: int, errors: list, message: str | None) -> None:
    frame = encode_produce_response(version, 7, [("t", [(0, 87, -1, -1, 5, message, errors)])])
    mod = kio.index.load_payload_module(0, version, EntityType.response)
    corr, response = decode_response(mod.ProduceResponse, frame[4:])
    assert corr == 7
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_record
    assert part.error_message == message
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == errors


def test_unsupported_version() -> None:
    with pytest.raises(ValueError):
        encode_produce_response(11, 1, [])
