"""Client errors: one exception type carrying a Kafka error code, plus the client-side failures
that have no code (timeouts, lost connections, unsupported versions, missing offsets)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


def is_retriable(code: int) -> bool:
    """Whether Kafka classes error `code` as retriable (kio carries it per code; an unknown
    code is not)."""
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class KafkaError(Exception):
    """An error from a broker (with its code) or from the client (code -1 unless given).

    `retriable` follows Kafka's classification (kio carries it per error code)."""

    def __init__(self, message: str = "", code: int = -1, retriable: bool | None = None) -> None:
        super().__init__(message or _name(code))
        self.code = int(code)
        self.retriable = is_retriable(self.code) if retriable is None else retriable

    @property
    def name(self) -> str:
        return _name(self.code)

    @classmethod
    def for_code(cls, code: int, message: str | None = None, context: str = "") -> KafkaError:
        """The exception for a response's error code (the subclass where one exists)."""
        text = _name(code).upper()
        if message:
            text += f": {message}"
        if context:
            text = f"{context}: {text}"
        sub = _BY_CODE.get(int(code), cls)
        return sub(text, code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r}, code={self.code})"


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class KafkaTimeoutError(KafkaError):
    """A client-side deadline passed (request.timeout.ms, max.block.ms, delivery.timeout.ms)."""

    def __init__(self, message: str = "timed out", code: int = ErrorCode.request_timed_out) -> None:
        super().__init__(message, code, retriable=True)


class KafkaConnectionError(KafkaError):
    """A connection to a broker failed or was lost (Kafka's NetworkException)."""

    def __init__(self, message: str = "connection failed",
                 code: int = ErrorCode.network_exception) -> None:
        super().__init__(message, code, retriable=True)


class UnsupportedVersionError(KafkaError):
    """The broker does not implement an API (or any version of it this client speaks)."""

    def __init__(self, message: str = "unsupported version",
                 code: int = ErrorCode.unsupported_version) -> None:
        super().__init__(message, code, retriable=False)


class RecordTooLargeError(KafkaError):
    def __init__(self, message: str = "record too large",
                 code: int = ErrorCode.message_too_large) -> None:
        super().__init__(message, code, retriable=False)


class NoOffsetForPartitionError(KafkaError):
    """auto.offset.reset=none and a partition has no committed offset."""

    def __init__(self, message: str = "no offset for partition", code: int = -1) -> None:
        super().__init__(message, code, retriable=False)


class OffsetOutOfRangeError(KafkaError):
    """A fetch position fell outside the log and auto.offset.reset=none."""

    def __init__(self, message: str = "offset out of range",
                 code: int = ErrorCode.offset_out_of_range) -> None:
        super().__init__(message, code, retriable=False)


class CommitFailedError(KafkaError):
    """An offset commit was refused because the group rebalanced (generation moved on)."""

    def __init__(self, message: str = "commit failed", code: int = -1) -> None:
        super().__init__(message, code, retriable=False)


class IllegalStateError(KafkaError):
    def __init__(self, message: str = "illegal state", code: int = -1) -> None:
        super().__init__(message, code, retriable=False)


class ConfigException(KafkaError, ValueError):
    """A client configuration that cannot be used (Kafka's ConfigException), e.g. an invalid
    url in bootstrap.servers; both a KafkaError and a ValueError, so callers catching either
    report it."""

    def __init__(self, message: str = "invalid configuration", code: int = -1) -> None:
        super().__init__(message, code, retriable=False)


class ProducerFencedError(KafkaError):
    """A newer producer with the same transactional.id exists (PRODUCER_FENCED, or
    INVALID_PRODUCER_EPOCH from a transaction coordinator): fatal, the producer must be closed."""

    def __init__(self, message: str = "producer fenced",
                 code: int = ErrorCode.producer_fenced) -> None:
        super().__init__(message, code, retriable=False)


class TransactionAbortedError(KafkaError):
    """A record of a transaction the application aborted before the record was sent (Kafka's
    TransactionAbortedException)."""

    def __init__(self, message: str = "Failing batch since transaction was aborted",
                 code: int = -1) -> None:
        super().__init__(message, code, retriable=False)


class TopicAlreadyExistsError(KafkaError):
    pass


class UnknownTopicOrPartitionError(KafkaError):
    pass


_BY_CODE: dict[int, type[KafkaError]] = {
    int(ErrorCode.topic_already_exists): TopicAlreadyExistsError,
    int(ErrorCode.unknown_topic_or_partition): UnknownTopicOrPartitionError,
    int(ErrorCode.offset_out_of_range): OffsetOutOfRangeError,
    int(ErrorCode.message_too_large): RecordTooLargeError,
    int(ErrorCode.unsupported_version): UnsupportedVersionError,
    int(ErrorCode.producer_fenced): ProducerFencedError,
}
