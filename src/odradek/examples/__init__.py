"""Pipelines that ship with odradek (S-9.2): small, runnable examples over odradek topics.

- `odradek.examples.clickstream`: Kafka's behaviour-tracking use case (docs/design.md S-9.2):
  page-view events into a topic, windowed page counts with Structured Streaming on Spark.
"""
