"""Kafka's topic name rules (Topic.validate): [a-zA-Z0-9._-], at most 249 chars, not . or .."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str) -> None:
    if not name:
        raise ValueError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise ValueError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} "
                         f"characters, topic name: {name}")
    if not _LEGAL.match(name):
        raise ValueError(f"Topic name \"{name}\" is illegal, it contains a character other "
                         "than ASCII alphanumerics, '.', '_' and '-'")
