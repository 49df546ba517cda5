"""Topic ids (KIP-516) in Kafka's text form: the URL-safe base64 of the 16 bytes, unpadded, as
`Uuid.toString` writes them into `/brokers/topics/<t>` and tools print them."""

from __future__ import annotations

import base64
import uuid

ZERO_TOPIC_ID = uuid.UUID(int=0)


def topic_id_to_text(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_text(text: str | None) -> uuid.UUID:
    """The topic id of a znode's `topic_id` field; the zero id when it has none."""
    if not text:
        return ZERO_TOPIC_ID
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
