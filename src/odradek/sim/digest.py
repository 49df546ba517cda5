"""A digest of everything observable in a run: TigerBeetle's VOPR and FoundationDB's simulator
check determinism by running a seed twice and comparing such a fingerprint.

Every event the simulated network reports — a connection attempt, each delivery with its bytes,
an end-of-stream, a reset — is folded, with its virtual time, into one BLAKE2b hash as it
happens, so memory stays bounded however long the run. The last `tail` events are also kept as
readable lines, to show where two runs with different digests parted. `observers` see every
event as it is folded in (`odradek sim --trace` writes them out).
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from collections.abc import Callable

__all__ = ["Digest"]

_HEAD = struct.Struct(">dQI")  # virtual time, event number, payload length


class Digest:
    """An incremental hash of (virtual time, kind, fields, payload) events."""

    def __init__(self, tail: int = 64) -> None:
        self._hash = hashlib.blake2b(digest_size=32)
        self.events = 0
        self.bytes = 0
        # the last events unformatted: formatting each as it happens cost more than its hash
        self._tail: deque[tuple[float, str, str, int]] = deque(maxlen=tail)
        #: called with (time, kind, fields, payload) of each event (a trace file)
        self.observers: list[Callable[[float, str, str, bytes], None]] = []
        self._places: tuple[tuple[bytes, bytes], ...] = ()

    def place(self, path: str, name: str) -> None:
        """Fold `path` in as `name` wherever a payload holds it: the brokers' data directory
        is a fresh temporary one per run, and Kafka's error messages name it (a produce to a
        failed log dir answers "Error while appending to events-2 in dir <path>/broker-2"),
        so without this a run's digest would depend on a random directory name."""
        self._places += ((path.encode(), name.encode()),)

    def record(self, time: float, kind: str, fields: str, payload: bytes = b"") -> None:
        """Fold one event in. `fields` names who and where (e.g. `a:40001>b:9092 #3`)."""
        for path, name in self._places:
            if path in payload:
                payload = bytes(payload).replace(path, name)
        self.events = events = self.events + 1
        size = len(payload)
        self.bytes += size
        head = f"{kind} {fields}".encode()
        # the same bytes in two updates rather than four (BLAKE2b is a stream: the digest is
        # unchanged); the payload is not copied
        self._hash.update(b"".join((_HEAD.pack(time, events, len(head)), head,
                                    size.to_bytes(8, "big"))))
        self._hash.update(payload)
        self._tail.append((time, kind, fields, size))
        if self.observers:
            for observe in self.observers:
                observe(time, kind, fields, payload)

    @property
    def tail(self) -> list[str]:
        """The last events as readable lines (time, kind, fields, payload size)."""
        return [f"{time:.9f} {kind} {fields} {size}B" for time, kind, fields, size in self._tail]

    def hexdigest(self) -> str:
        """The digest of every event so far."""
        return self._hash.copy().hexdigest()

    def summary(self) -> str:
        """One line: the digest, the number of events and payload bytes."""
        return f"digest {self.hexdigest()} events {self.events} bytes {self.bytes}"
