"""Security: listeners' protocols, principals, SSL, SASL and ACLs (Kafka's common.security)."""
