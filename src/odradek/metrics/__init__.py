"""Kafka's broker metrics (the JMX beans' names and meanings) on prometheus-client registries,
one registry per broker."""
