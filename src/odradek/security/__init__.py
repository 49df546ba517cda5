"""Security: listeners' security protocols, TLS contexts, principals, SASL and ACLs (Kafka's
org.apache.kafka.common.security and kafka.security). Layer 3: imports odradek.common and
odradek.protocol only; the server, the controller, the client and the tools build on it."""
