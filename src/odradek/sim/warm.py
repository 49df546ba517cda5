"""Imported by the explorer's forkserver (sim/explore.py, ``set_forkserver_preload``): the
protocol classes built before the children fork, so that no run builds them again.

kio makes a request's or a response's class (a dataclass per API version, with its nested
entities) the first time it is asked for one (`protocol.codec.request_class`, cached per
process). A forked child of the explorer is a fresh process for that cache: each seed built the
thirty or so classes its clients and brokers use, about a quarter of a CPU second of a run's
seven. Here every version the brokers advertise is built once in the forkserver (about two
CPU seconds a batch); the children inherit them. Nothing else is warmed: a class is the same
whoever asks first, so a run stays what it is as a single `odradek sim --seed S`.
"""

from __future__ import annotations

from ..protocol.codec import UnsupportedVersion, request_class, response_class
from ..server.apis import advertised_versions

__all__ = ["load_protocol_classes"]


def load_protocol_classes() -> int:
    """Build the request and response class of every advertised API version (the
    inter-broker APIs, which kio does not have, are skipped): how many were built."""
    built = 0
    for key, low, high in advertised_versions():
        for version in range(low, high + 1):
            try:
                response_class(request_class(key, version))
            except UnsupportedVersion:
                continue
            built += 1
    return built


LOADED = load_protocol_classes()
