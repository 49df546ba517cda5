"""A simulated run's events as JSON lines (`odradek sim --trace FILE`): the network's events as
the digest folds them in (connections, deliveries with their sizes, cuts, heals, resets,
timeouts), the clients' operations as the history records them, and the injected faults, each
with its virtual time. A failing seed's trace is read around the failure; two traces of one
seed are equal line for line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from .digest import Digest

__all__ = ["Trace"]

_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


class Trace:
    """Writes events to `path` (None: nowhere, every call a no-op) until `close`."""

    def __init__(self, path: str | Path | None) -> None:
        self._file: IO[str] | None = None if path is None else open(  # noqa: SIM115
            path, "w", encoding="utf-8")

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def follow(self, digest: Digest) -> None:
        """Write every event `digest` records from now on."""
        if self._file is not None:
            digest.observers.append(self._network_event)

    def _network_event(self, time: float, kind: str, fields: str, payload: bytes) -> None:
        self.event(time, "net", kind=kind, where=fields, bytes=len(payload))

    def event(self, time: float, source: str, **fields: Any) -> None:
        """One line: {"t": time, "source": source, ...fields} (None fields left out)."""
        if self._file is not None:
            line = {k: v for k, v in fields.items() if v is not None}
            line["t"] = round(time, 9)
            line["source"] = source
            self._file.write(_ENCODER.encode(line) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
