"""What the chaos kit needs beyond odradek's own dependencies: confluent-kafka (librdkafka), the
client its workloads, pipelines and read-backs run on, installed by the ``chaos`` extra
(`CHAOS_EXTRA`: ``pip install 'odradek[chaos]'``).

The kit imports confluent-kafka only where it makes a client, so that `odradek --help` and
`odradek chaos --help` work on a plain install; `missing_client()` tells a run, before it
starts any process, that it cannot go on and what to install."""

from __future__ import annotations

import importlib

CHAOS_EXTRA = "pip install 'odradek[chaos]'"


def missing_client() -> str | None:
    """None when confluent-kafka imports; else why not, and what to install."""
    try:
        importlib.import_module("confluent_kafka")
    except ImportError as exc:  # not installed, or librdkafka's extension does not load
        return (f"the chaos kit's workload runs on confluent-kafka, which cannot be imported "
                f"({exc}): {CHAOS_EXTRA}")
    return None
