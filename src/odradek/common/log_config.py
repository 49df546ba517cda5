"""Logging configured from a file (`odradek broker|cluster|standalone --log-config FILE`).

Kafka configures log4j from log4j.properties; odradek takes Python logging's own formats: an
INI file for `logging.config.fileConfig` (``.ini``, ``.conf``, ``.cfg``), or a
`logging.config.dictConfig` dictionary as JSON (``.json``) or YAML (``.yaml``, ``.yml``; needs
PyYAML). Existing loggers stay enabled.

Kafka's logger names work in those files: odradek logs under Kafka's own names where Kafka's
are well known to operators (``kafka.request.logger``, ``state.change.logger``,
``kafka.authorizer.logger``, ``kafka.log.LogCleaner``) and under ``odradek.*`` names elsewhere;
a level or handlers given to a Kafka name of `KAFKA_LOGGERS` are given to its odradek logger too
(docs/console.md has the table).
"""

from __future__ import annotations

import json
import logging
import logging.config
from pathlib import Path
from typing import Any

#: Kafka's log4j logger names -> the odradek loggers that log what they log.
KAFKA_LOGGERS: dict[str, tuple[str, ...]] = {
    "kafka": ("odradek",),
    "kafka.request.logger": ("kafka.request.logger",),
    "state.change.logger": ("state.change.logger",),
    "kafka.authorizer.logger": ("kafka.authorizer.logger",),
    "kafka.log.LogCleaner": ("kafka.log.LogCleaner",),
    "kafka.controller": ("odradek.controller",),
    "kafka.server.KafkaServer": ("odradek.broker",),
    "kafka.server.KafkaApis": ("odradek.apis",),
    "kafka.server.ReplicaManager": ("odradek.replica_manager",),
    "kafka.server.ReplicaFetcherThread": ("odradek.replica_fetcher",),
    "kafka.cluster.Partition": ("odradek.partition", "odradek.isr"),
    "kafka.log.LogManager": ("odradek.log_manager",),
    "kafka.network.SocketServer": ("odradek.network",),
    "kafka.network.Processor": ("odradek.network",),
    "kafka.coordinator.group": ("odradek.coordinator.group",),
    "kafka.coordinator.transaction": ("odradek.coordinator.transaction",),
    "kafka.zookeeper": ("odradek.coordination",),
}

_INI = (".ini", ".conf", ".cfg")
_YAML = (".yaml", ".yml")


class LogConfigError(ValueError):
    """A logging configuration file that cannot be used (the message names it)."""


def load_dict(path: Path) -> dict[str, Any]:
    """The dictConfig dictionary of a JSON or YAML file."""
    text = path.read_text()
    if path.suffix.lower() in _YAML:
        try:
            import yaml
        except ImportError:  # pragma: no cover - PyYAML is optional
            raise LogConfigError(f"{path}: a YAML logging config needs PyYAML") from None
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise LogConfigError(f"{path}: expected a logging.config.dictConfig mapping")
    data.setdefault("version", 1)
    data.setdefault("disable_existing_loggers", False)
    return data


def configure(path: str | Path) -> None:
    """Configure logging from `path` (INI, JSON or YAML by its suffix), then apply the levels
    and handlers given to Kafka's logger names to the matching odradek loggers."""
    path = Path(path)
    if not path.is_file():
        raise LogConfigError(f"{path}: no such logging config file")
    try:
        if path.suffix.lower() in _INI:
            logging.config.fileConfig(path, disable_existing_loggers=False)
        else:
            logging.config.dictConfig(load_dict(path))
    except LogConfigError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, ImportError, OSError) as exc:
        raise LogConfigError(f"{path}: {exc}") from None
    alias_kafka_loggers()


def alias_kafka_loggers(manager: logging.Manager | None = None) -> list[str]:
    """Give each odradek logger of `KAFKA_LOGGERS` the level, handlers and propagation of its
    Kafka-named logger when that one was configured (a level or handlers set); returns the
    odradek logger names changed."""
    manager = manager or logging.Logger.manager
    changed = []
    for kafka_name, names in KAFKA_LOGGERS.items():
        source = manager.loggerDict.get(kafka_name)
        if not isinstance(source, logging.Logger):
            continue
        if source.level == logging.NOTSET and not source.handlers:
            continue
        for name in names:
            if name == kafka_name:
                continue
            target = logging.getLogger(name)
            if source.level != logging.NOTSET:
                target.setLevel(source.level)
            for h in source.handlers:
                if h not in target.handlers:
                    target.addHandler(h)
            if source.handlers:
                target.propagate = source.propagate
            changed.append(name)
    return changed
