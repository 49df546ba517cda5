"""The synchronous clients' loop thread (`odradek.common.loop_thread`, shared with
`odradek.Cluster`)."""

from __future__ import annotations

from odradek.common.loop_thread import LoopThread

__all__ = ["LoopThread"]
