"""The exactly-once sink's options (spark/eos.py): names and defaults as Flink's Kafka sink,
clear errors, a transactional id prefix stable across restarts of a query."""

from __future__ import annotations

import pytest

from odradek.spark.eos import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    checkpoint_prefix,
    parse_delivery,
)
from odradek.spark.offsets import OptionError


def test_defaults_and_names() -> None:
    d = parse_delivery({}, "p")
    assert not d.exactly_once and d.guarantee == "at-least-once"
    d = parse_delivery({"deliveryguarantee": "EXACTLY_ONCE"}, "p")
    assert d.exactly_once and d.prefix == "p"
    assert d.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    d = parse_delivery({"deliveryguarantee": "exactly-once", "transactionalidprefix": "mine",
                        "kafka.transaction.timeout.ms": "60000"}, "p")
    assert (d.prefix, d.transaction_timeout_ms) == ("mine", 60000)


def test_bad_delivery_options_are_refused_with_a_message() -> None:
    with pytest.raises(OptionError, match="deliveryGuarantee must be"):
        parse_delivery({"deliveryguarantee": "twice"}, None)
    with pytest.raises(OptionError, match=r"transactional\.id' is not supported"):
        parse_delivery({"deliveryguarantee": "exactly-once",
                        "kafka.transactional.id": "x"}, None)
    with pytest.raises(OptionError, match="positive number of milliseconds"):
        parse_delivery({"deliveryguarantee": "exactly-once",
                        "kafka.transaction.timeout.ms": "0"}, None)


def test_checkpoint_prefix_is_stable() -> None:
    a = checkpoint_prefix({"checkpointlocation": "/data/ck/q1"})
    assert a == checkpoint_prefix({"checkpointlocation": "/data/ck/q1/"})
    assert a != checkpoint_prefix({"checkpointlocation": "/data/ck/q2"})
    assert a is not None and a.startswith("odradek-spark-")
    assert checkpoint_prefix({}) is None
