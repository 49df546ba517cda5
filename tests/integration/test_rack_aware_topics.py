"""`broker.rack` at topic creation (KIP-36): when every live broker has a rack, CreateTopics and
CreatePartitions place each partition's replicas in as many racks as the replication factor
allows (Kafka's rack-aware assignment); a cluster where only some brokers have a rack refuses
automatic assignment as Kafka does: UNKNOWN_SERVER_ERROR without a message (Kafka's
AdminOperationException is no API error), the reason in the broker's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.client import Admin, NewTopic
from odradek.client.errors import KafkaError
from odradek.cluster import Cluster

pytestmark = pytest.mark.timeout(120)


def test_replicas_span_the_racks(tmp_path: Path) -> None:
    racks = {0: "rack-a", 1: "rack-a", 2: "rack-b", 3: "rack-b"}
    overrides = {b: {"broker.rack": r} for b, r in racks.items()}
    with Cluster(brokers=4, broker_overrides=overrides, http=False) as cluster, \
            Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topic("spread", num_partitions=8, replication_factor=2)
        admin.create_partitions({"spread": 12})
        # every broker's cache (the tool below asks its bootstrap broker, which may hear of
        # the new partitions after the broker the admin client asked)
        cluster.wait_for(lambda: all(
            len(getattr(b.metadata_cache.topic("spread"), "partitions", ())) == 12
            for b in cluster.brokers.values()), what="12 partitions in every cache")
        parts = admin.describe_topics(["spread"])["spread"].partitions
        for p in parts:
            assert {racks[b] for b in p.replicas} == {"rack-a", "rack-b"}, (p.partition,
                                                                          p.replicas)
        leaders = [p.replicas[0] for p in parts]
        assert sorted(set(leaders)) == [0, 1, 2, 3]  # preferred leaders spread over all
        # kafka-reassign-partitions --generate places rack-aware too
        code, out = generate(cluster, tmp_path, "spread", "0,1,2,3")
        assert code == 0, out
        plan = json.loads(out.splitlines()[-1])
        assert len(plan["partitions"]) == 12
        assert all({racks[b] for b in p["replicas"]} == {"rack-a", "rack-b"}
                   for p in plan["partitions"])


def generate(cluster: Cluster, tmp_path: Path, topic: str, brokers: str,
             *extra: str) -> tuple[int, str]:
    import contextlib
    import io

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["reassign-partitions", "--bootstrap-server", cluster.bootstrap_servers,
                     "--generate", "--topics-to-move-json-file", str(topics),
                     "--broker-list", brokers, *extra])
    return code, out.getvalue().strip()


def test_some_brokers_without_a_rack_refuse_automatic_assignment(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Cluster(brokers=2, broker_overrides={0: {"broker.rack": "rack-a"}},
                 http=False) as cluster, \
            Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        with pytest.raises(KafkaError, match=r"^topic mixed: UNKNOWN_SERVER_ERROR$"):
            admin.create_topic("mixed", num_partitions=2, replication_factor=2)
        assert "Not all brokers have rack information" in caplog.text
        admin.create_topics([NewTopic("manual", -1, -1, replica_assignment={0: [0, 1]})])
        code, out = generate(cluster, tmp_path, "manual", "0,1")
        assert code != 0 and "Add --disable-rack-aware" in out, out
        code, out = generate(cluster, tmp_path, "manual", "0,1", "--disable-rack-aware")
        assert code == 0, out
