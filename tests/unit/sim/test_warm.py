"""sim/warm.py: what the explorer's forkserver builds before it forks its children."""

from __future__ import annotations

from odradek.protocol.codec import request_class
from odradek.server.apis import advertised_versions
from odradek.sim import warm


def test_every_advertised_version_kio_has_is_built_once() -> None:
    assert warm.LOADED == warm.load_protocol_classes() > 150
    built = request_class.cache_info().currsize
    for key, low, high in advertised_versions():
        for version in range(low, high + 1):
            try:
                request_class(key, version)
            except ValueError:  # an inter-broker API: hand-written, not kio's
                continue
    assert request_class.cache_info().currsize == built  # all built already


def test_the_forkserver_imports_it() -> None:
    from odradek.sim.explore import _PRELOAD
    assert "odradek.sim.warm" in _PRELOAD
