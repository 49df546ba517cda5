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
        self.tail: deque[str] = deque(maxlen=tail)
        #: called with (time, kind, fields, payload) of each event (a trace file)
        self.observers: list[Callable[[float, str, str, bytes], None]] = []
        #: (bytes, stand-in): replaced in every payload before it is folded in; for the
        #: absolute path of the run's temporary data dir, which a few requests carry
        #: (DescribeLogDirs, AlterReplicaLogDirs) and which differs between processes
        self.redact: tuple[bytes, bytes] | None = None

    def record(self, time: float, kind: str, fields: str, payload: bytes = b"") -> None:
        """Fold one event in. `fields` names who and where (e.g. `a:40001>b:9092 #3`)."""
        if self.redact is not None and payload:
            payload = payload.replace(*self.redact)
        self.events += 1
        self.bytes += len(payload)
        head = f"{kind} {fields}".encode()
        self._hash.update(_HEAD.pack(time, self.events, len(head)))
        self._hash.update(head)
        self._hash.update(len(payload).to_bytes(8, "big"))
        self._hash.update(payload)
        self.tail.append(f"{time:.9f} {kind} {fields} {len(payload)}B")
        if self.observers:
            for observe in self.observers:
                observe(time, kind, fields, payload)

    def hexdigest(self) -> str:
        """The digest of every event so far."""
        return self._hash.copy().hexdigest()

    def summary(self) -> str:
        """One line: the digest, the number of events and payload bytes."""
        return f"digest {self.hexdigest()} events {self.events} bytes {self.bytes}"
