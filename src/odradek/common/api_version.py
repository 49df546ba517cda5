"""The Kafka version odradek's brokers are: 2.8-IV1, Kafka 2.8's ``ApiVersion.latestVersion``.

It is the default of ``inter.broker.protocol.version`` and of ``log.message.format.version`` /
``message.format.version`` (Kafka's defaults are that same latest version), and what a 2.8 broker
reports for them in DescribeConfigs. docs/design.md (S-8.1, "Protocol versions") tells how the
versions ApiVersions advertises relate to it.
"""

from __future__ import annotations

LATEST_API_VERSION = "2.8-IV1"


def names_latest_api_version(text: str) -> bool:
    """Whether Kafka's ``ApiVersion(text)`` is 2.8-IV1: Kafka keeps the first two dot-separated
    parts ("2.8.1" -> "2.8") and maps a short version to its last IV ("2.8" -> 2.8-IV1)."""
    return ".".join(text.strip().split(".")[:2]) in ("2.8", LATEST_API_VERSION)
