"""The one owner of this broker's topic configuration: the broker-level defaults (static
server.properties with the dynamic `log.*` configs over them) and each topic's overrides from
`/config/topics/<t>`. It derives every topic's effective LogConfig and pushes it to the log
manager, so a log always runs with what this object says; everything else asks it.

Kafka keeps the same state in LogManager.currentDefaultConfig and the TopicConfigHandler's
per-topic overrides; here storage only receives the results.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...storage.log_config import LogConfig
from ...storage.log_manager import LogManager


class TopicConfigs:
    def __init__(self, defaults: LogConfig, log_manager: LogManager) -> None:
        self._defaults = defaults
        self._overrides: dict[str, dict[str, str]] = {}
        self._effective: dict[str, LogConfig] = {}
        self._log_manager = log_manager

    @property
    def defaults(self) -> LogConfig:
        """The broker-level topic defaults (what a topic without overrides runs with)."""
        return self._defaults

    def overrides(self, topic: str) -> dict[str, str]:
        return dict(self._overrides.get(topic, {}))

    def config(self, topic: str) -> LogConfig:
        """The effective config of `topic`: its overrides over the broker's defaults."""
        cfg = self._effective.get(topic)
        if cfg is None:
            overrides = self._overrides.get(topic)
            if not overrides:
                return self._defaults
            cfg = LogConfig.from_props(overrides, base=self._defaults, allow_unknown=True)
            self._effective[topic] = cfg
        return cfg

    def validate(self, props: Mapping[str, str]) -> LogConfig:
        """A topic's would-be config; raises InvalidConfigError (a ValueError) naming the key of
        an unknown or invalid config."""
        return LogConfig.from_props(props, base=self._defaults)

    def set_overrides(self, topic: str, overrides: Mapping[str, str] | None) -> None:
        """A topic's new overrides (None or empty: none); its logs follow at once."""
        self._effective.pop(topic, None)
        if overrides:
            self._overrides[topic] = dict(overrides)
        else:
            self._overrides.pop(topic, None)
        self._log_manager.update_topic_config(topic, self.config(topic) if overrides else None)

    def set_defaults(self, defaults: LogConfig) -> None:
        """New broker-level topic defaults (dynamic log.* configs): every log without its own
        override, and every override's base, follows at once."""
        self._defaults = defaults
        self._effective.clear()
        lm = self._log_manager
        lm.default_config = defaults
        for topic in self._overrides:
            lm.update_topic_config(topic, self.config(topic))
        for log_ in lm.all_logs():
            log_.config = lm.config_for(log_.topic)
