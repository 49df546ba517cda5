"""`partition.metadata` (KIP-516, Kafka's PartitionMetadataFile): the topic id of the log's topic,
kept in each partition directory so that a replica recognises a log left over from a deleted
topic of the same name (the controller's LeaderAndIsr v5+ carries the id; a mismatch is
INCONSISTENT_TOPIC_ID). Two lines, as Kafka writes them: ``version: 0`` and ``topic_id: <id>``
(the id in its URL-safe base64 text form)."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from ..common import file_system
from ..common.topic_id import topic_id_from_text, topic_id_to_text
from .checkpoints import fsync_dir

FILENAME = "partition.metadata"
CURRENT_VERSION = 0
_SEP = re.compile(r":\s+")


class PartitionMetadataError(ValueError):
    """A malformed or unrecognised partition.metadata file."""


def format_partition_metadata(topic_id: uuid.UUID) -> str:
    return f"version: {CURRENT_VERSION}\ntopic_id: {topic_id_to_text(topic_id)}"


def parse_partition_metadata(text: str, location: str = FILENAME) -> uuid.UUID:
    lines = text.splitlines()
    if len(lines) < 2:
        raise PartitionMetadataError(f"Malformed partition metadata file ({location})")
    version = _SEP.split(lines[0].strip(), maxsplit=1)
    if len(version) != 2 or version[0] != "version" or version[1] != str(CURRENT_VERSION):
        raise PartitionMetadataError(
            f"Unrecognized version of partition metadata file ({location}): {lines[0]!r}")
    field = _SEP.split(lines[1].strip(), maxsplit=1)
    if len(field) != 2 or field[0] != "topic_id":
        raise PartitionMetadataError(f"Malformed line in partition metadata file ({location}): "
                                     f"{lines[1]!r}")
    try:
        topic_id = topic_id_from_text(field[1])
    except ValueError as exc:
        raise PartitionMetadataError(f"Invalid topic ID in partition metadata file "
                                     f"({location}): {field[1]!r}") from exc
    if not topic_id.int:
        raise PartitionMetadataError(f"Invalid topic ID in partition metadata file ({location})")
    return topic_id


def read_partition_metadata(log_dir: Path) -> uuid.UUID | None:
    """The topic id recorded in `log_dir`, None if it has no partition.metadata."""
    path = os.path.join(log_dir, FILENAME)
    try:  # os-level calls: read for every hosted partition when a broker starts
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PartitionMetadataError(f"Malformed partition metadata file ({path})") from exc
    return parse_partition_metadata(text, path)


def write_partition_metadata(log_dir: Path, topic_id: uuid.UUID) -> None:
    """Write (replace) the file as Kafka's PartitionMetadataFile.write does: a temporary file,
    fsynced, renamed over it, and the directory fsynced. Unsynced, a machine crash could tear
    the id's last character into another valid id, and the replica would refuse every
    LeaderAndIsr of its partition for good (INCONSISTENT_TOPIC_ID); once per partition."""
    path = os.path.join(log_dir, FILENAME)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        file_system.write(fd, format_partition_metadata(topic_id).encode())
        file_system.fsync(fd)
    finally:
        os.close(fd)
    file_system.replace(tmp, path)
    fsync_dir(Path(log_dir))
