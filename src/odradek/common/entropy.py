"""Randomness, drawn in one place: the random choices odradek itself makes (topic ids, the
cluster id, group member ids, replica placement, fetch session ids, segment roll jitter, the
client's sticky partitioner and its order of trying brokers, SCRAM salts and nonces).

The deterministic simulation (odradek.sim) installs its seeded stream with `use(rng)` for a
run, so these choices are a function of the seed, as every process's randomness is in
FoundationDB's simulator (`deterministicRandom()`) and TigerBeetle's VOPR. Without a stream
installed each function does what the code did before: `uuid4()` reads `os.urandom`
(`uuid.uuid4`), `shared()` is a process-wide `random.Random` seeded by the OS, `new_random()`
a fresh one, `token_bytes` and `token_hex` read `os.urandom` (as `secrets` does).
"""

from __future__ import annotations

import contextlib
import os
import random
import uuid
from collections.abc import Iterator

__all__ = ["new_random", "shared", "token_bytes", "token_hex", "use", "uuid4"]

#: the installed stream, None: the operating system's randomness
_source: random.Random | None = None
#: the process-wide stream without a simulation (what the `random` module's functions use)
_SHARED = random.Random()


def uuid4() -> uuid.UUID:
    """A random (version 4) UUID: `uuid.uuid4()`, or 128 bits of the installed stream."""
    if _source is None:
        return uuid.uuid4()
    return uuid.UUID(int=_source.getrandbits(128), version=4)


def token_bytes(nbytes: int = 32) -> bytes:
    """`nbytes` random bytes (a SCRAM salt): `os.urandom`, or the installed stream's."""
    if _source is None:
        return os.urandom(nbytes)
    return _source.randbytes(nbytes)


def token_hex(nbytes: int = 32) -> str:
    """`nbytes` random bytes as hex (a SCRAM nonce, what `secrets.token_hex` gives)."""
    return token_bytes(nbytes).hex()


def shared() -> random.Random:
    """The stream for one-off draws (`random.randrange`, `random.shuffle`)."""
    return _SHARED if _source is None else _source


def new_random() -> random.Random:
    """A new stream for a component that keeps its own (`random.Random()`): seeded by the OS,
    or from the installed stream, so it is a function of the seed too."""
    if _source is None:
        return random.Random()
    return random.Random(_source.getrandbits(64))


@contextlib.contextmanager
def use(rng: random.Random) -> Iterator[None]:
    """Draw from `rng` for the block; the previous stream is restored after it."""
    global _source
    previous, _source = _source, rng
    try:
        yield
    finally:
        _source = previous
