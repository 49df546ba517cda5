"""Java `.properties` files, the subset Kafka's configs and tools' `--command-config` use."""

from __future__ import annotations

import re


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key (Kafka's ConfigException)."""


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties, the subset Kafka configs use: `key=value` or `key: value`, # and !
    comments, trailing-backslash continuation lines."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        _put(props, line)
    if pending:  # a continuation at the end of the file: Java keeps the line
        _put(props, pending)
    return props


def _put(props: dict[str, str], line: str) -> None:
    m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
    if not m:
        props[line] = ""
    else:
        props[m.group(1)] = m.group(2)
