"""Range and round-robin assignors on the examples of Kafka's RangeAssignorTest and
RoundRobinAssignorTest (apache/kafka clients/src/test/java/org/apache/kafka/clients/consumer/),
and Kafka's ConsumerProtocol subscription/assignment bytes: round trips for every version, a
golden encoding written out by hand from the schema, and agreement with kio's generated writers
and aiokafka's v0 encoder."""

from __future__ import annotations

import importlib
import struct

import pytest

from odradek.client.assignors import (
    Assignment,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    assignors_from_config,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.client.types import TopicPartition


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


def subs(**members: list[str]) -> dict[str, Subscription]:
    return {m: Subscription(topics) for m, topics in members.items()}


def static(instance: str, topics: list[str]) -> Subscription:
    return Subscription(topics, group_instance_id=instance)


T1, T2 = "topic1", "topic2"


# -- range -------------------------------------------------------------------------------------
def test_range_one_consumer_no_topic() -> None:
    assert RangeAssignor().assign({}, subs(consumer1=[])) == {"consumer1": []}


def test_range_one_consumer_nonexistent_topic() -> None:
    assert RangeAssignor().assign({}, subs(consumer1=[T1])) == {"consumer1": []}


def test_range_only_assigns_partitions_from_subscribed_topics() -> None:
    out = RangeAssignor().assign({T1: 3, "other": 3}, subs(consumer1=[T1]))
    assert out == {"consumer1": [tp(T1, 0), tp(T1, 1), tp(T1, 2)]}


def test_range_one_consumer_multiple_topics() -> None:
    out = RangeAssignor().assign({T1: 1, T2: 2}, subs(consumer1=[T1, T2]))
    assert out == {"consumer1": [tp(T1, 0), tp(T2, 0), tp(T2, 1)]}


def test_range_two_consumers_one_topic_one_partition() -> None:
    out = RangeAssignor().assign({T1: 1}, subs(consumer1=[T1], consumer2=[T1]))
    assert out == {"consumer1": [tp(T1, 0)], "consumer2": []}


def test_range_two_consumers_one_topic_two_partitions() -> None:
    out = RangeAssignor().assign({T1: 2}, subs(consumer1=[T1], consumer2=[T1]))
    assert out == {"consumer1": [tp(T1, 0)], "consumer2": [tp(T1, 1)]}


def test_range_multiple_consumers_mixed_topics() -> None:
    out = RangeAssignor().assign({T1: 3, T2: 2},
                                 subs(consumer1=[T1], consumer2=[T1, T2], consumer3=[T1]))
    assert out == {"consumer1": [tp(T1, 0)],
                   "consumer2": [tp(T1, 1), tp(T2, 0), tp(T2, 1)],
                   "consumer3": [tp(T1, 2)]}


def test_range_two_consumers_two_topics_six_partitions() -> None:
    out = RangeAssignor().assign({T1: 3, T2: 3}, subs(consumer1=[T1, T2], consumer2=[T1, T2]))
    assert out == {"consumer1": [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)],
                   "consumer2": [tp(T1, 2), tp(T2, 2)]}


def test_range_static_members_order_by_instance_id() -> None:
    # testTwoStaticConsumersTwoTopicsSixPartitions: member ids sort the other way round.
    members = {"consumer-b": static("instance1", [T1, T2]),
               "consumer-a": static("instance2", [T1, T2])}
    out = RangeAssignor().assign({T1: 3, T2: 3}, members)
    assert out == {"consumer-b": [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)],
                   "consumer-a": [tp(T1, 2), tp(T2, 2)]}


def test_range_static_member_before_dynamic() -> None:
    members = {"consumer-b": static("instance1", [T1, T2]),
               "consumer-a": Subscription([T1, T2])}
    out = RangeAssignor().assign({T1: 3, T2: 3}, members)
    assert out["consumer-b"] == [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)]
    assert out["consumer-a"] == [tp(T1, 2), tp(T2, 2)]


def test_range_static_member_assignment_persistent() -> None:
    # testStaticMemberRangeAssignmentPersistent: 5 and 4 partitions, 3 static + 1 dynamic.
    members = {f"consumer{i}": static(f"instance{i}", [T1, T2]) for i in (1, 2, 3)}
    members["consumer4"] = Subscription([T1, T2])
    expected = {"consumer1": [tp(T1, 0), tp(T1, 1), tp(T2, 0)],
                "consumer2": [tp(T1, 2), tp(T2, 1)],
                "consumer3": [tp(T1, 3), tp(T2, 2)],
                "consumer4": [tp(T1, 4), tp(T2, 3)]}
    assert RangeAssignor().assign({T1: 5, T2: 4}, members) == expected
    del members["consumer4"]
    members["consumer5"] = Subscription([T1, T2])
    expected["consumer5"] = expected.pop("consumer4")
    assert RangeAssignor().assign({T1: 5, T2: 4}, members) == expected


# -- round robin -------------------------------------------------------------------------------
def test_roundrobin_one_consumer_cases() -> None:
    rr = RoundRobinAssignor()
    assert rr.assign({}, subs(consumer=[])) == {"consumer": []}
    assert rr.assign({}, subs(consumer=["topic"])) == {"consumer": []}
    assert rr.assign({"topic": 3}, subs(consumer=["topic"])) == {
        "consumer": [tp("topic", 0), tp("topic", 1), tp("topic", 2)]}
    assert rr.assign({"topic": 3, "other": 3}, subs(consumer=["topic"])) == {
        "consumer": [tp("topic", 0), tp("topic", 1), tp("topic", 2)]}
    assert rr.assign({T1: 1, T2: 2}, subs(consumer=[T1, T2])) == {
        "consumer": [tp(T1, 0), tp(T2, 0), tp(T2, 1)]}


def test_roundrobin_two_consumers_one_topic() -> None:
    rr = RoundRobinAssignor()
    assert rr.assign({"topic": 1}, subs(consumer1=["topic"], consumer2=["topic"])) == {
        "consumer1": [tp("topic", 0)], "consumer2": []}
    assert rr.assign({"topic": 2}, subs(consumer1=["topic"], consumer2=["topic"])) == {
        "consumer1": [tp("topic", 0)], "consumer2": [tp("topic", 1)]}


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    out = RoundRobinAssignor().assign(
        {T1: 3, T2: 2}, subs(consumer1=[T1], consumer2=[T1, T2], consumer3=[T1]))
    assert out == {"consumer1": [tp(T1, 0)],
                   "consumer2": [tp(T1, 1), tp(T2, 0), tp(T2, 1)],
                   "consumer3": [tp(T1, 2)]}


def test_roundrobin_two_consumers_two_topics_six_partitions() -> None:
    out = RoundRobinAssignor().assign({T1: 3, T2: 3},
                                      subs(consumer1=[T1, T2], consumer2=[T1, T2]))
    assert out == {"consumer1": [tp(T1, 0), tp(T1, 2), tp(T2, 1)],
                   "consumer2": [tp(T1, 1), tp(T2, 0), tp(T2, 2)]}


def test_roundrobin_static_consumers_by_instance_id() -> None:
    members = {"consumer-b": static("instance1", [T1, T2]),
               "consumer-a": static("instance2", [T1, T2])}
    out = RoundRobinAssignor().assign({T1: 3, T2: 3}, members)
    assert out == {"consumer-b": [tp(T1, 0), tp(T1, 2), tp(T2, 1)],
                   "consumer-a": [tp(T1, 1), tp(T2, 0), tp(T2, 2)]}
    members["consumer-a"] = Subscription([T1, T2])  # dynamic: after the static one
    assert RoundRobinAssignor().assign({T1: 3, T2: 3}, members) == out


def test_roundrobin_static_member_assignment_persistent() -> None:
    members = {f"consumer{i}": static(f"instance{i}", [T1, T2]) for i in (1, 2, 3)}
    members["consumer4"] = Subscription([T1, T2])
    expected = {"consumer1": [tp(T1, 0), tp(T2, 1)], "consumer2": [tp(T1, 1), tp(T2, 2)],
                "consumer3": [tp(T1, 2)], "consumer4": [tp(T2, 0)]}
    assert RoundRobinAssignor().assign({T1: 3, T2: 3}, members) == expected
    del members["consumer4"]
    members["consumer5"] = Subscription([T1, T2])
    expected["consumer5"] = expected.pop("consumer4")
    assert RoundRobinAssignor().assign({T1: 3, T2: 3}, members) == expected


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_every_partition_assigned_exactly_once(assignor: object) -> None:
    counts = {f"t{i}": i + 1 for i in range(6)}
    members = {f"m{j}": Subscription(sorted(counts)[j % 3:]) for j in range(5)}
    out = assignor.assign(counts, members)  # type: ignore[attr-defined]
    got = [p for parts in out.values() for p in parts]
    subscribed = {t for s in members.values() for t in s.topics}
    assert sorted(got) == sorted(tp(t, p) for t in subscribed for p in range(counts[t]))
    for member, parts in out.items():
        assert all(p.topic in members[member].topics for p in parts)


def test_assignors_from_config_names() -> None:
    assert [a.name for a in assignors_from_config("range,roundrobin")] == ["range", "roundrobin"]
    assert [a.name for a in assignors_from_config(
        "org.apache.kafka.clients.consumer.RoundRobinAssignor")] == ["roundrobin"]
    with pytest.raises(ValueError, match="cooperative-sticky"):
        assignors_from_config("cooperative-sticky")


# -- ConsumerProtocol bytes --------------------------------------------------------------------
def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_subscription_golden_v1() -> None:
    sub = Subscription(["foo", "bar"], None, [tp("foo", 1)], version=1)
    expected = (b"\x00\x01"                                  # version 1
                + b"\x00\x00\x00\x02" + _s("foo") + _s("bar")  # topics
                + b"\xff\xff\xff\xff"                          # user_data: null
                + b"\x00\x00\x00\x01" + _s("foo")              # owned_partitions
                + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01")
    assert encode_subscription(sub) == expected
    back = decode_subscription(expected)
    assert (back.topics, back.user_data, back.owned_partitions, back.version) == (
        ["foo", "bar"], None, [tp("foo", 1)], 1)


def test_assignment_golden_v0() -> None:
    a = Assignment([tp("foo", 1), tp("bar", 2), tp("foo", 3)], b"", version=0)
    expected = (b"\x00\x00" + b"\x00\x00\x00\x02"
                + _s("foo") + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x03"
                + _s("bar") + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02"
                + b"\x00\x00\x00\x00")  # user_data: empty
    assert encode_assignment(a) == expected
    back = decode_assignment(expected)
    assert sorted(back.partitions) == sorted(a.partitions) and back.user_data == b""


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_and_kio_agree(version: int) -> None:
    import kio.schema.consumer_protocol_subscription as mod
    from kio.serial import entity_writer

    sub = Subscription(["a", "bb"], b"\x00ud", [tp("a", 0), tp("a", 5), tp("bb", 2)],
                       generation_id=7, rack_id="rack-1", version=version)
    data = encode_subscription(sub)
    back = decode_subscription(data, group_instance_id="i1")
    assert back.topics == ["a", "bb"] and back.user_data == b"\x00ud"
    assert back.group_instance_id == "i1" and back.version == version
    assert back.owned_partitions == (sub.owned_partitions if version >= 1 else [])
    assert back.generation_id == (7 if version >= 2 else -1)
    assert back.rack_id == ("rack-1" if version >= 3 else None)

    v = importlib.import_module(f"{mod.__name__}.v{version}.data")
    cls, tpcls = v.ConsumerProtocolSubscription, getattr(v, "TopicPartition", None)
    kwargs: dict[str, object] = {"topics": ("a", "bb"), "user_data": b"\x00ud"}
    if version >= 1:
        kwargs["owned_partitions"] = (tpcls(topic="a", partitions=(0, 5)),
                                      tpcls(topic="bb", partitions=(2,)))
    if version >= 2:
        kwargs["generation_id"] = 7
    if version >= 3:
        kwargs["rack_id"] = "rack-1"

    class Sink(bytearray):
        def write(self, b: bytes) -> int:
            self.extend(b)
            return len(b)
    out = Sink(struct.pack(">h", version))
    entity_writer(cls)(out, cls(**kwargs))
    assert bytes(out) == data


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_round_trip_and_kio_agree(version: int) -> None:
    import kio.schema.consumer_protocol_assignment as mod
    from kio.serial import entity_writer

    a = Assignment([tp("x", 0), tp("x", 1), tp("y", 9)], None, version=version)
    data = encode_assignment(a)
    back = decode_assignment(data)
    assert back.partitions == a.partitions and back.user_data is None
    v = importlib.import_module(f"{mod.__name__}.v{version}.data")
    cls, tpcls = v.ConsumerProtocolAssignment, v.TopicPartition

    class Sink(bytearray):
        def write(self, b: bytes) -> int:
            self.extend(b)
            return len(b)
    out = Sink(struct.pack(">h", version))
    entity_writer(cls)(out, cls(assigned_partitions=(tpcls(topic="x", partitions=(0, 1)),
                                                     tpcls(topic="y", partitions=(9,))),
                                user_data=None))
    assert bytes(out) == data


def test_aiokafka_v0_encoder_agrees() -> None:
    from aiokafka.coordinator.protocol import (
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )

    theirs = ConsumerProtocolMemberMetadata(0, ["t1", "t2"], b"").encode()
    assert encode_subscription(Subscription(["t1", "t2"], b""), version=0) == theirs
    assert decode_subscription(theirs).topics == ["t1", "t2"]
    theirs = ConsumerProtocolMemberAssignment(0, [("t1", [0, 2]), ("t2", [1])], b"").encode()
    ours = Assignment([tp("t1", 0), tp("t1", 2), tp("t2", 1)], b"", version=0)
    assert encode_assignment(ours) == theirs
    assert decode_assignment(theirs).partitions == ours.partitions


def test_future_versions_are_read_ignoring_new_fields() -> None:
    # Kafka's deserializeFutureSubscriptionVersion / deserializeFutureAssignmentVersion: v100
    # (read as the newest known version, as Java's checkSubscriptionVersion does) with an
    # extra trailing field still parses.
    sub = encode_subscription(Subscription(["topic"], b"", [tp("bar", 2)], version=3))
    future = b"\x00\x64" + sub[2:] + _s("foo")
    back = decode_subscription(future)
    assert back.topics == ["topic"] and back.owned_partitions == [tp("bar", 2)]
    asg = encode_assignment(Assignment([tp("foo", 1)], b""), version=1)
    back_a = decode_assignment(b"\x00\x64" + asg[2:] + b"\x00\x1b" + _s("bar"))
    assert back_a.partitions == [tp("foo", 1)]


def test_old_reader_on_new_bytes_and_truncation() -> None:
    # A v1 subscription read as if it were v0 stops after user_data (what old clients do).
    data = encode_subscription(Subscription(["foo", "bar"], None, [tp("bar", 2)], version=1))
    v0 = decode_subscription(b"\x00\x00" + data[2:])
    assert v0.topics == ["foo", "bar"] and v0.owned_partitions == []
    with pytest.raises(ValueError, match=r"truncated|elements"):
        decode_subscription(data[:-3])
    with pytest.raises(ValueError):
        decode_subscription(b"\x00\x00\x7f\xff\xff\xff")  # 2**31-1 topics in 0 bytes
    assert decode_assignment(b"").partitions == []  # a follower's empty SyncGroup entry
