"""The hand-encoded ProduceResponse is byte-identical to kio's for every advertised version."""

from __future__ import annotations

import datetime

import kio.index
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.constants import EntityType

from odradek.protocol.codec import _Buffer, make
from odradek.protocol.produce_response import encode_produce_response


def kio_bytes(version: int, correlation_id: int, topics: list) -> bytes:
    mod = kio.index.load_payload_module(0, version, EntityType.response)
    responses = tuple(make(mod.TopicProduceResponse, name=t, partition_responses=tuple(
        make(mod.PartitionProduceResponse, index=i, error_code=ErrorCode(err), base_offset=base,
             log_append_time=(None if ts < 0 else
                              datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC)),
             log_start_offset=start, record_errors=(), error_message=msg)
        for i, err, base, ts, start, msg in parts)) for t, parts in topics)
    body = make(mod.ProduceResponse, responses=responses, throttle_time=0)
    out = _Buffer()
    entity_writer(mod.ProduceResponse.__header_schema__)(
        out, mod.ProduceResponse.__header_schema__(correlation_id=correlation_id))
    entity_writer(mod.ProduceResponse)(out, body)
    return len(out).to_bytes(4, "big") + bytes(out)


partition = st.tuples(
    st.integers(0, 1000), st.sampled_from([0, 2, 3, 6, 10, 19, 45, 87]),
    st.integers(-1, 2**40), st.sampled_from([-1, 1_700_000_000_123]), st.integers(-1, 2**40),
    st.one_of(st.none(), st.text(max_size=30)))
topics = st.lists(st.tuples(st.text("abc.-_", min_size=1, max_size=20),
                            st.lists(partition, min_size=1, max_size=4)), max_size=3)


@pytest.mark.parametrize("version", range(3, 11))
@given(corr=st.integers(0, 2**31 - 1), topics=topics)
def test_byte_identical_to_kio(version: int, corr: int, topics: list) -> None:
    # kio writes the message only when there is an error (None when error is 0, as we do).
    topics = [(t, [(i, e, b, ts, s, m if e else None) for i, e, b, ts, s, m in ps])
              for t, ps in topics]
    assert encode_produce_response(version, corr, topics) == kio_bytes(version, corr, topics)


def test_unsupported_version() -> None:
    with pytest.raises(ValueError):
        encode_produce_response(11, 1, [])
