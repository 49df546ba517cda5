"""Security: Kafka's principals, SSL, SASL, ACLs and the authorizer seam (layer 3: imports
odradek.common and odradek.protocol only)."""
