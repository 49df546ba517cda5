"""What every layer may import: Kafka's `org.apache.kafka.common` for odradek.

Plain values and pure helpers with no I/O and no imports of odradek's other packages, so the
protocol, storage, server, client and tools layers can all share one definition of each.
"""

from .topic_partition import TopicPartition

__all__ = ["TopicPartition"]
