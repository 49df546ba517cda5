"""A log directory's name, <topic>-<partition> (Kafka's Log.parseTopicPartitionName)."""

from __future__ import annotations

import re

_MARKED_DIR = re.compile(r"^(.+)\.[0-9a-f]{32}-(?:future|delete)$")


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` -> (topic, partition). Topics may contain '-'. A future or
    deleted log's ``<topic>-<partition>.<uuid>-future`` / ``-delete`` names its partition too
    (Kafka's parseTopicPartitionName)."""
    marked = _MARKED_DIR.match(dir_name)
    if marked is not None:
        dir_name = marked.group(1)
    topic, sep, partition = dir_name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> log directory name")
    return topic, int(partition)
