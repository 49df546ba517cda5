"""Topic config overrides on every broker (Kafka's TopicConfigHandler).

Overrides live in `/config/topics/<t>` (`{"version":1,"config":{...}}`). A broker loads a topic's
overrides before it first hosts one of its partitions, and reloads them when a change
notification `/config/changes/config_change_<seq>` (`{"version":2,"entity_path":"topics/<t>"}`)
names the topic: the broker's DynamicConfigManager (server/configs/dynamic_config_manager.py)
watches
the notifications and calls :meth:`TopicConfigManager.reload` (whether or not this broker
hosts the topic, as Kafka's TopicConfigHandler).

The KIP-73 lists `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`
of each loaded topic mark its throttled partitions in the replica manager's quotas.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ...coordination import paths
from ...coordination.store import CoordinationStore
from ..quotas.replication_quota import throttled_partitions
from ..replication.replica_manager import ReplicaManager
from .topic_configs import TopicConfigs

log = logging.getLogger("odradek.config")


@dataclass(eq=False, repr=False)
class TopicConfigManager:
    """`on_unclean_leader_election_enabled(topic)` is called when a topic's
    unclean.leader.election.enable is loaded as true (the broker hands it to the controller)."""

    broker_id: int
    store: CoordinationStore
    topic_configs: TopicConfigs
    replica_manager: ReplicaManager
    on_unclean_leader_election_enabled: Callable[[str], None]
    loaded: set[str] = field(init=False, default_factory=set)

    async def ensure_loaded(self, topics: Iterable[str]) -> None:
        for topic in topics:
            if topic not in self.loaded:
                await self.reload(topic)

    async def reload(self, topic: str) -> None:
        found = await self.store.get_or_none(paths.topic_config_path(topic))
        overrides = paths.decode_entity_config(found[0]) if found else {}
        self.topic_configs.set_overrides(topic, overrides)
        self.loaded.add(topic)
        self._update_throttles(topic)
        if overrides.get("unclean.leader.election.enable", "").strip().lower() == "true":
            self._enable_unclean_leader_election(topic)

    def _enable_unclean_leader_election(self, topic: str) -> None:
        """Kafka's TopicConfigHandler: when a topic's unclean.leader.election.enable becomes
        true, the active controller elects leaders for its offline partitions at once
        (TopicUncleanLeaderElectionEnable), instead of waiting for the next broker change."""
        self.on_unclean_leader_election_enabled(topic)

    def forget(self, topic: str) -> None:
        self.loaded.discard(topic)
        self.topic_configs.set_overrides(topic, None)
        self.replica_manager.update_throttled_replicas(topic, frozenset(), frozenset())

    def _update_throttles(self, topic: str) -> None:
        rm = self.replica_manager
        cfg = self.topic_configs.config(topic)
        broker_id = self.broker_id
        try:
            leader = throttled_partitions(cfg.leader_replication_throttled_replicas, broker_id)
            follower = throttled_partitions(cfg.follower_replication_throttled_replicas,
                                            broker_id)
        except ValueError as exc:
            log.warning("Ignoring the throttled replicas of topic %s: %s", topic, exc)
            return
        rm.update_throttled_replicas(topic, leader, follower)
