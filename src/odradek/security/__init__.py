"""Kafka's security model: listeners' protocols, TLS, SASL, principals, ACLs (layer 3)."""
