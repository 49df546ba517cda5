"""Pipelines that ship with odradek (S-9.2): small, runnable examples over odradek topics.

- `odradek.examples.clickstream`: the seeds' behaviour-tracking use case (seed 004, 行为跟踪):
  page-view events into a topic, windowed page counts with Structured Streaming on Spark.
"""
