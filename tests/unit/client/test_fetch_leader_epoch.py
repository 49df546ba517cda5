"""The consumer's Fetch names the leader epoch it knows (KIP-320, Kafka's
FetchPosition.currentLeader): a broker that no longer leads the partition in that epoch answers
FENCED_LEADER_EPOCH and the consumer looks the leader up again. Sent as -1 (no check), a broker
that had been the leader, restarted after a machine crash as a follower with a shorter log,
served the fetch from that log (a KIP-392 read, Fetch v11) and answered OFFSET_OUT_OF_RANGE:
the consumer reset to the earliest offset and committed it (`odradek sim --seed 1239
--duration 60 --rate 0.1 --ops all --op-rate 0.25`, offsets-monotonic FAIL, 125 to 0).

The broker is played by the client's `send`, which records each Fetch's partitions."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.cluster_metadata import ClusterMetadata, PartitionMetadata, TopicMetadata
from odradek.client.fetcher import FetchConfig, Fetcher
from odradek.client.types import TopicPartition

TP = TopicPartition("events", 1)


class Client:
    """The fetcher's view of the cluster: `tp`'s leader and epoch; each Fetch answered with
    `error` for every partition and recorded."""

    def __init__(self, leader: int, epoch: int, error: int = ErrorCode.none) -> None:
        self.metadata = ClusterMetadata()
        self.set_leader(leader, epoch)
        self.error = error
        self.sent: list[tuple[int, list[dict[str, Any]]]] = []
        self.updates = 0

    def set_leader(self, leader: int, epoch: int) -> None:
        self.metadata.brokers = {b: SimpleNamespace(node_id=b) for b in (0, 1, 2)}
        self.metadata.topics = {"events": TopicMetadata("events", None, 0, False, {
            1: PartitionMetadata(1, leader, epoch, (0, 1, 2), (0, 1, 2))})}

    async def send(self, node: int, api_key: int, **kw: Any) -> Any:
        assert api_key == 1
        parts = [p for t in kw["topics"] for p in t["partitions"]]
        self.sent.append((node, parts))
        return SimpleNamespace(error_code=0, session_id=0, throttle_time=None, responses=[
            SimpleNamespace(topic="events", partitions=[SimpleNamespace(
                partition_index=p["partition"], error_code=self.error, high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                records=None) for p in parts])])

    def request_update(self) -> None:
        self.updates += 1

    def node_failed(self, node: int) -> None:
        pass


def fetcher(client: Client) -> Fetcher:
    config = FetchConfig(min_bytes=1, max_bytes=1 << 20, max_wait_ms=100,
                         max_partition_bytes=1 << 20, isolation_level=0, check_crcs=True,
                         retry_backoff=0.1, request_timeout=1.0, reset_policy=-2,
                         reset_policy_name="earliest", key_deserializer=None,
                         value_deserializer=None)
    f = Fetcher(client, config)  # type: ignore[arg-type]
    f.loop = asyncio.new_event_loop()
    f.data = asyncio.Event()
    f.assign([TP])
    f.states[TP].position = 137
    return f


def test_a_fetch_names_the_leader_epoch_of_the_metadata() -> None:
    client = Client(leader=2, epoch=9)
    f = fetcher(client)
    assert f.loop is not None
    try:
        f.loop.run_until_complete(f._fetch(2, [TP]))
        assert client.sent[-1][1][0]["current_leader_epoch"] == 9
        # the metadata moves on (a new leader epoch, same leader): the partition is sent
        # again in the incremental session, with the new epoch
        client.set_leader(2, 10)
        f.loop.run_until_complete(f._fetch(2, [TP]))
        assert [p["current_leader_epoch"] for p in client.sent[-1][1]] == [10]
        # a fetch to a broker the metadata does not name as the leader checks no epoch
        f.loop.run_until_complete(f._fetch(0, [TP]))
        assert client.sent[-1][1][0]["current_leader_epoch"] == -1
    finally:
        f.loop.close()


def test_a_fenced_epoch_looks_the_leader_up_again_and_keeps_the_position() -> None:
    client = Client(leader=2, epoch=9, error=ErrorCode.fenced_leader_epoch)
    f = fetcher(client)
    assert f.loop is not None
    try:
        f.loop.run_until_complete(f._fetch(2, [TP]))
    finally:
        f.loop.close()
    state = f.states[TP]
    assert client.updates == 1
    assert state.position == 137 and state.reset is None
