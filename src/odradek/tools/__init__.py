"""odradek's tools, one module per Kafka tool; each exposes ``add_parser(subparsers)``."""

from __future__ import annotations

import contextlib
import os
import sys


def reader_gone() -> int:
    """stdout's reader went away (`odradek ... | head`): stop quietly, without a traceback at
    exit (stdout now goes to /dev/null), exit status 0."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
