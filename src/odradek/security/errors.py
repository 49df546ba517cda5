"""SASL errors (Kafka's SaslAuthenticationException, IllegalSaslStateException,
UnsupportedSaslMechanismException), each carrying the Kafka error code it is answered with."""

from __future__ import annotations

# Kafka's error codes (clients/src/main/java/org/apache/kafka/common/protocol/Errors.java)
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


class SaslError(Exception):
    """A SASL failure with the Kafka error code it is reported with."""

    error_code = SASL_AUTHENTICATION_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SaslAuthenticationError(SaslError):
    """Authentication failed (bad credentials, unknown user, malformed token); on the client
    side also raised with the broker's error message."""


class IllegalSaslStateError(SaslError):
    """A request that is not valid in the authenticator's current state."""

    error_code = ILLEGAL_SASL_STATE


class UnsupportedSaslMechanismError(SaslError):
    """A mechanism the listener does not enable (or odradek does not implement)."""

    error_code = UNSUPPORTED_SASL_MECHANISM
