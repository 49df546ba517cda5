"""The clickstream example (S-9.2; Kafka's behaviour-tracking use case): page views into a
topic, windowed page counts on Spark Structured Streaming, out to a topic and to Parquet.

- `events`: the page-view events, the deterministic generator and the reference counts (pure);
- `generator`: topic creation and producing with odradek's Producer;
- `job`: the Structured Streaming job over format("odradek") (needs the `spark` extra);
- `report`: reading the results back, top pages per window, comparison;
- `python -m odradek.examples.clickstream --events 20000 --data-dir DIR`: all of it at once,
  on an in-process cluster and local Spark.
"""

from .events import GeneratorConfig, PageView, expected_output, generate, heartbeat, window_counts

__all__ = ["GeneratorConfig", "PageView", "expected_output", "generate", "heartbeat",
           "window_counts"]
