"""One story of versions (docs/design.md S-8.1, "Protocol versions: a 2.8-IV1 broker"): the
config defaults are 2.8-IV1, and what ApiVersions advertises is a Kafka 2.8 ZooKeeper broker's
ranges but for the rows of the table in docs/design.md, which must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from odradek.common.api_version import LATEST_API_VERSION
from odradek.server.apis import advertised_versions
from odradek.server.configs.config import KafkaConfig
from odradek.storage.log_config import LogConfig

DESIGN = (Path(__file__).resolve().parents[4] / "docs" / "design.md").read_text(encoding="utf-8")

# Kafka 2.8's validVersions of every request schema whose listeners include "zkBroker"
# (clients/src/main/resources/common/message/*Request.json at the 2.8 branch).
KAFKA_28_ZK_BROKER: dict[int, tuple[int, int]] = {
    0: (0, 9), 1: (0, 12), 2: (0, 6), 3: (0, 11), 4: (0, 5), 5: (0, 3), 6: (0, 7), 7: (0, 3),
    8: (0, 8), 9: (0, 7), 10: (0, 3), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5),
    15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2),
    22: (0, 4), 23: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 27: (0, 1), 28: (0, 3),
    29: (0, 2), 30: (0, 2), 31: (0, 2), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 2),
    36: (0, 2), 37: (0, 3), 38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2), 42: (0, 2),
    43: (0, 2), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1),
    50: (0, 0), 51: (0, 0), 56: (0, 0), 57: (0, 0), 60: (0, 0), 61: (0, 0),
}

NONE = "—"


def _range(text: str) -> tuple[int, int] | None:
    if text == NONE:
        return None
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def documented_differences() -> dict[int, tuple[tuple[int, int] | None, tuple[int, int] | None]]:
    """api key -> (Kafka 2.8's range, odradek's) from the table of the section."""
    section = DESIGN.split("#### Protocol versions", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| API", "| ---"))]
    assert rows, "no table in the Protocol versions section"
    out = {}
    for row in rows:
        api, kafka, ours = (cell.strip() for cell in row.strip("|").split("|")[:3])
        keys = [int(k) for k in re.findall(r"\((\d+)\)", api)]
        assert keys, row
        for key in keys:
            out[key] = (_range(kafka), _range(ours))
    return out


def test_what_api_versions_advertises_is_kafka_28_but_for_the_documented_rows() -> None:
    ours = {k: (lo, hi) for k, lo, hi in advertised_versions()}
    actual = {k: (KAFKA_28_ZK_BROKER.get(k), ours.get(k))
              for k in KAFKA_28_ZK_BROKER.keys() | ours.keys()
              if KAFKA_28_ZK_BROKER.get(k) != ours.get(k)}
    assert documented_differences() == actual


def test_the_version_configs_default_to_2_8_iv1() -> None:
    assert LATEST_API_VERSION == "2.8-IV1"
    cfg = KafkaConfig.from_properties("")
    assert cfg["inter.broker.protocol.version"] == "2.8-IV1"
    assert cfg["log.message.format.version"] == "2.8-IV1"
    assert cfg.topic_defaults()["message.format.version"] == "2.8-IV1"
    assert LogConfig().message_format_version == "2.8-IV1"
