"""replica-verification's decisions (S-6.4), without sockets: lockstep batch comparison up to
each replica's high watermark, the first differing record offset, Kafka's max-lag line."""

from __future__ import annotations

from odradek.protocol.records import build_batch
from odradek.tools.replica_verification import (
    BatchInfo,
    batch_infos,
    compare_replicas,
    first_differing_offset,
    max_lag_line,
)

TP = ("t", 0)


def log(values: list[list[bytes]], base: int = 0) -> bytes:
    """Consecutive batches holding `values` (one inner list per batch), from offset `base`."""
    out = b""
    for vs in values:
        out += build_batch([(None, v) for v in vs], base_offset=base, timestamp_ms=1000,
                           partition_leader_epoch=0)
        base += len(vs)
    return out


BATCHES = [[b"a", b"b"], [b"c"], [b"d", b"e", b"f"], [b"g"]]


def test_identical_replicas_verify_up_to_the_lowest_high_watermark() -> None:
    data = batch_infos(log(BATCHES))
    assert [(b.base_offset, b.last_offset) for b in data] == [(0, 1), (2, 2), (3, 5), (6, 6)]
    replicas = {0: data, 1: data, 2: data}
    assert compare_replicas(TP, 0, 0, replicas, {0: 7, 1: 7, 2: 7}) == (7, None)
    # a batch at or above a replica's own HW is not compared yet
    assert compare_replicas(TP, 0, 0, replicas, {0: 7, 1: 5, 2: 7}) == (3, None)
    # a replica that returned less (fetch size) stops the round there
    assert compare_replicas(TP, 0, 0, {0: data, 1: data[:2], 2: data}, {0: 7, 1: 7, 2: 7}
                            ) == (3, None)
    assert compare_replicas(TP, 0, 0, {0: [], 1: data}, {0: 7, 1: 7}) == (0, None)


def test_a_changed_value_is_reported_at_its_record_offset() -> None:
    good = batch_infos(log(BATCHES))
    bad_raw = bytearray(log(BATCHES))
    i = bad_raw.index(b"e")  # offset 4, in the batch 3-5
    bad_raw[i:i + 1] = b"E"
    bad = batch_infos(bytes(bad_raw))
    offset, mismatch = compare_replicas(TP, 0, 1, {1: good, 2: good, 0: bad},
                                        {0: 7, 1: 7, 2: 7})
    assert offset == 3 and mismatch is not None
    assert (mismatch.reference, mismatch.differing, mismatch.offset) == (1, (0,), 4)
    assert mismatch.line().startswith("partition t-0: replicas 1,0 differ at offset 4 "
                                      "(replica 1's checksum ")
    assert "the batch of replica 0 fails its own CRC check" in mismatch.line()
    assert not bad[2].intact and all(b.intact for b in good)


def test_different_offsets_and_records() -> None:
    a = batch_infos(log([[b"a", b"b"], [b"c"]]))
    b = batch_infos(log([[b"a"], [b"b", b"c"]]))
    offset, mismatch = compare_replicas(TP, 0, 0, {0: a, 1: b}, {0: 3, 1: 3})
    assert offset == 0 and mismatch is not None
    assert "replica 0's offset 1; replica 1's offset 0" in mismatch.line()
    assert mismatch.offset == 1
    # a valid batch with other content (a diverged log): first differing record
    x = batch_infos(log([[b"a", b"b", b"c"]]))[0]
    y = batch_infos(log([[b"a", b"B", b"c"]]))[0]
    assert first_differing_offset(x, y) == 1
    z = batch_infos(log([[b"a", b"b"]], base=5))[0]
    assert first_differing_offset(x, z) == 0
    garbage = BatchInfo(0, 2, 1, 2, b"\x00" * 70)
    assert first_differing_offset(x, garbage) == 0


def test_partial_batch_at_the_end_of_a_fetch_is_left_out() -> None:
    raw = log(BATCHES)
    assert len(batch_infos(raw[:-3])) == 3
    assert batch_infos(b"") == [] and batch_infos(None) == []


def test_max_lag_line() -> None:
    assert max_lag_line({("t", 0): (120, 120), ("t", 1): (120, 100), ("u", 0): (5, 5)}) == \
        "max lag is 20 for partition t-1 at offset 100 among 3 partitions"
    assert max_lag_line({}) == "max lag is -1 for partition null at offset -1 among 0 partitions"
