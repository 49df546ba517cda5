"""Spark users configure security as for Spark's Kafka source: `kafka.`-prefixed Java client
properties reach odradek.client's consumer (driver and tasks) and the sink's producer unchanged."""

from __future__ import annotations

from pyspark.sql.types import BinaryType, StructField, StructType

from odradek.spark.offsets import kafka_params, lower_keys
from odradek.spark.reader import RangeReader
from odradek.spark.sink import OdradekBatchWriter
from odradek.spark.source import OdradekDataSource

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="Alice-Secret";')
SECURITY = {
    "kafka.bootstrap.servers": "127.0.0.1:9093",
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-256",
    "kafka.sasl.jaas.config": JAAS,
    "kafka.ssl.truststore.location": "/etc/odradek/ca.pem",
    "kafka.ssl.truststore.type": "PEM",
    "kafka.ssl.endpoint.identification.algorithm": "",
}
CLIENT = {k[len("kafka."):]: v for k, v in SECURITY.items()}


def test_source_passes_security_options_to_the_client() -> None:
    # Spark option names are case-insensitive; values (a JAAS line, paths) are kept as given.
    options = lower_keys({"Kafka.Security.Protocol": "SASL_SSL", **SECURITY,
                          "subscribe": "t"})
    assert kafka_params(options) == CLIENT
    source = OdradekDataSource({"subscribe": "t", **SECURITY})
    reader = source.reader(StructType([]))
    assert {k: reader.opts.kafka[k] for k in CLIENT} == CLIENT  # type: ignore[attr-defined]
    tasks = RangeReader(kafka_params(options), fail_on_data_loss=True, include_headers=False)
    assert {k: tasks.config[k] for k in CLIENT} == CLIENT


def test_sink_passes_security_options_to_the_producer() -> None:
    schema = StructType([StructField("value", BinaryType())])
    writer = OdradekBatchWriter(lower_keys({"topic": "t", **SECURITY}), schema)
    assert writer.producer_config == CLIENT
