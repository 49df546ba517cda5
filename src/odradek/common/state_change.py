"""state-change.log (S-6.5): every state change a controller makes or a broker receives.

One line each, in one parseable shape shared by controllers and brokers:

    [2026-11-21 23:38:44,309] INFO [Controller id=0 epoch=1] Changed partition t-0 state from
        NewPartition to OnlinePartition with leader=0 leader_epoch=0 isr=[0,1,2]
        (state.change.logger)
    [2026-11-21 23:38:44,325] INFO [Broker id=2 epoch=1] Changed partition t-0 state from
        Follower to Leader with leader=2 leader_epoch=1 isr=[2,0] (LeaderAndIsr correlationId 6
        from controller 0) (state.change.logger)

(each on one line). `epoch` is the controller epoch. Several brokers may share a process (the
embedded cluster): records carry the broker id, and each broker's file handler keeps only its
own, so every broker still writes its own `state-change.log` in its first log dir.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from .batched_log import BatchedFileHandler

LOGGER_NAME = "state.change.logger"
LINE_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
_logger = logging.getLogger(LOGGER_NAME)

# What the merge tool parses: time, actor, id, controller epoch, partition, from, to.
LINE_RE = re.compile(
    r"^\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] (?P<level>[A-Z]+) "
    r"\[(?P<actor>Controller|Broker) id=(?P<id>-?\d+) epoch=(?P<epoch>-?\d+)\] "
    r"(?P<message>.*?)(?: \(state\.change\.logger\))?$")
PARTITION_RE = re.compile(r"partition (?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)\b")


def _isr(isr: Sequence[int]) -> str:
    return "[" + ",".join(str(i) for i in isr) + "]"


def leadership_text(leader: int, leader_epoch: int, isr: Sequence[int]) -> str:
    return f"leader={leader} leader_epoch={leader_epoch} isr={_isr(isr)}"


class StateChangeLogger:
    """Writes one broker's state changes, as that broker or as the controller it hosts."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id

    def _log(self, level: int, actor: str, epoch: int, message: str) -> None:
        _logger.log(level, "[%s id=%d epoch=%d] %s", actor, self.broker_id, epoch, message,
                    extra={"broker_id": self.broker_id})

    def controller(self, epoch: int, message: str, level: int = logging.INFO) -> None:
        self._log(level, "Controller", epoch, message)

    def broker(self, epoch: int, message: str, level: int = logging.INFO) -> None:
        self._log(level, "Broker", epoch, message)

    def partition_change(self, epoch: int, tp: object, before: object, after: object,
                         detail: str = "", actor: str = "Controller") -> None:
        suffix = f" with {detail}" if detail else ""
        self._log(logging.INFO, actor, epoch,
                  f"Changed partition {tp} state from {before} to {after}{suffix}")

    def replica_change(self, epoch: int, replica: int, tp: object, before: object,
                       after: object) -> None:
        self._log(logging.INFO, "Controller", epoch,
                  f"Changed state of replica {replica} for partition {tp} from {before} to "
                  f"{after}")


class _OnlyBroker(logging.Filter):
    def __init__(self, broker_id: int) -> None:
        super().__init__()
        self.broker_id = broker_id

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "broker_id", None) == self.broker_id


def attach_file(broker_id: int, log_dir: Path) -> logging.Handler:
    """Send this broker's state changes to `<log_dir>/state-change.log`; returns the handler
    (pass it to `detach`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    # one write per loop iteration (common/batched_log.py): thousands of lines per failover
    handler = BatchedFileHandler(log_dir / "state-change.log")
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    handler.addFilter(_OnlyBroker(broker_id))
    _logger.addHandler(handler)
    if _logger.level == logging.NOTSET or _logger.level > logging.INFO:
        _logger.setLevel(logging.INFO)
    return handler


def detach(handler: logging.Handler) -> None:
    _logger.removeHandler(handler)
    handler.close()
