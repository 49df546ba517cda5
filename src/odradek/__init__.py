"""odradek: Kafka's ZooKeeper-era high-availability design in Python."""
__version__ = "0.1.0"
