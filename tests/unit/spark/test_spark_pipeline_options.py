"""The pipeline driver's options (`python -m odradek.spark.pipeline`): what --transform-cost-ms
and --cores-max set in the session, without a session."""

from __future__ import annotations

import argparse

from odradek.spark.pipeline import COST_BUFFER_BYTES, COST_ROWS_PER_BATCH, session_conf


def _args(cost: int = 0, cores: int | None = None) -> argparse.Namespace:
    return argparse.Namespace(transform_cost_ms=cost, cores_max=cores)


def test_a_plain_pipeline_keeps_spark_defaults() -> None:
    assert session_conf(_args()) == {}


def test_a_transform_cost_sends_rows_to_the_sink_in_small_batches() -> None:
    conf = session_conf(_args(cost=10, cores=2))
    assert conf == {"spark.cores.max": "2",
                    "spark.sql.execution.arrow.maxRecordsPerBatch": str(COST_ROWS_PER_BATCH),
                    "spark.buffer.size": str(COST_BUFFER_BYTES)}
    assert COST_BUFFER_BYTES < 65536  # Spark's default would hold a task's small rows
