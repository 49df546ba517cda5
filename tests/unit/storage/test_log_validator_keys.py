"""Compacted topics refuse records without a key (Kafka's LogValidator.validateKey, KIP-467):
the append fails whole, naming exactly the keyless records of the first batch that has any.
(Which appends are checked, client produces to compacted topics only, is
tests/integration/test_compacted_keys.py's.)"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.compression import Codec
from odradek.protocol.records import (
    CorruptRecordError,
    InvalidRecordError,
    build_batch,
    validate_batches,
)
from odradek.storage.log_validator import (
    RECORDS_REJECTED,
    RecordValidationError,
    keyless_record_indexes,
    validate_record_keys,
)

NOW = 1_700_000_000_000

record = st.tuples(st.one_of(st.none(), st.binary(max_size=12)),
                   st.one_of(st.none(), st.binary(max_size=300)))
codecs = st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(record, min_size=1, max_size=25), min_size=1, max_size=4),
       codec=codecs)
def test_the_error_names_exactly_the_keyless_records_of_the_first_bad_batch(
        batches: list[list[tuple[bytes | None, bytes | None]]], codec: int) -> None:
    buf = b"".join(build_batch(b, timestamp_ms=NOW, compression=codec) for b in batches)
    headers = validate_batches(buf)
    expected = [[i for i, (k, _) in enumerate(b) if k is None] for b in batches]
    for h, want in zip(headers, expected, strict=True):
        assert keyless_record_indexes(buf, h) == want
    bad = next((want for want in expected if want), None)
    if bad is None:
        validate_record_keys(buf, headers, "t-0")
        return
    with pytest.raises(RecordValidationError) as info:
        validate_record_keys(buf, headers, "t-0")
    assert str(info.value) == RECORDS_REJECTED
    assert [i for i, _ in info.value.record_errors] == bad
    assert all(m == "Compacted topic cannot accept message without key in topic partition t-0."
               for _, m in info.value.record_errors)
    assert isinstance(info.value, InvalidRecordError)  # INVALID_RECORD


def test_a_batch_whose_records_overrun_it_is_corrupt() -> None:
    buf = bytearray(build_batch([(b"k", b"v"), (b"k2", b"v2")], timestamp_ms=NOW))
    h = validate_batches(bytes(buf))[0]
    with pytest.raises(CorruptRecordError):  # claims a record it does not hold
        keyless_record_indexes(buf, dataclasses.replace(h, records_count=3))
    with pytest.raises(CorruptRecordError):  # leaves data after its last record
        keyless_record_indexes(buf, dataclasses.replace(h, records_count=1))
