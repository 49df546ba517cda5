"""`odradek broker` / `odradek cluster` log state changes to state-change.log only, as Kafka's
log4j.properties does (``log4j.additivity.state.change.logger=false``): a 10,000-partition
failover wrote every line to stderr as well."""

from __future__ import annotations

import logging

from odradek.cli import _setup_logging
from odradek.common.state_change import LOGGER_NAME


def test_state_change_lines_do_not_reach_the_root_handlers() -> None:
    logger = logging.getLogger(LOGGER_NAME)
    before = logger.propagate
    try:
        logger.propagate = True
        _setup_logging("INFO")
        assert logger.propagate is False
    finally:
        logger.propagate = before
