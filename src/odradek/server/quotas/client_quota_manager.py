"""Client quotas (Kafka's ClientQuotaManager, ClientRequestQuotaManager and DefaultQuotaCallback).

Three managers, one per quota type: PRODUCE (`producer_byte_rate`, bytes of Produce requests),
FETCH (`consumer_byte_rate`, bytes of consumers' Fetch responses; followers are never throttled
by it) and REQUEST (`request_percentage`, the time the broker spends handling a client's
requests, as a percentage of one thread: here the event loop).

Quotas are set per entity: a (sanitized) user, a client id, both, or the `<default>` of either,
as `/config/users/<u>`, `/config/clients/<c>` and `/config/users/<u>/clients/<c>` hold them.
A client's quota is the first that exists of Kafka's precedence:

  1. /config/users/<user>/clients/<client-id>     5. /config/users/<default>/clients/<default>
  2. /config/users/<user>/clients/<default>       6. /config/users/<default>
  3. /config/users/<user>                         7. /config/clients/<client-id>
  4. /config/users/<default>/clients/<client-id>  8. /config/clients/<default>

(then the deprecated static `quota.producer.default` / `quota.consumer.default`). Clients that
share the entity whose quota applies share one rate sensor, keyed by Kafka's metric tags
(user, client-id): e.g. all the client ids of a user with a user quota share that user's rate.

Sensors of clients idle for an hour are dropped (Kafka's InactiveSensorExpirationTimeSeconds), and
at most `max_sensors` exist (the least recently used goes first), so client ids chosen by
clients cannot grow the broker's memory without bound.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...common import clock
from .quota_sensor import (
    DEFAULT_NUM_SAMPLES,
    DEFAULT_WINDOW_SECONDS,
    QuotaRate,
    max_value_in_quota_window,
    record_and_throttle,
)

log = logging.getLogger("odradek.quotas")

DEFAULT = "<default>"  # Kafka's ConfigEntityName.Default
LONG_MAX = 2**63 - 1

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Kafka's QuotaConfigs.isClientOrUserQuotaConfig names, with their config types.
QUOTA_CONFIG_TYPES: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE"}

PRODUCE, FETCH, REQUEST = "Produce", "Fetch", "Request"
QUOTA_KEY = {PRODUCE: PRODUCER_BYTE_RATE, FETCH: CONSUMER_BYTE_RATE, REQUEST: REQUEST_PERCENTAGE}

# QuotaTypes: which entity levels have ever had a quota (chooses the metric tags)
NO_QUOTAS, CLIENT_ID_QUOTA, USER_QUOTA, USER_CLIENT_ID_QUOTA = 0, 1, 2, 4

INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
_SWEEP_INTERVAL_MS = 30 * 1000
MAX_SENSORS = 100_000


@dataclass(frozen=True)
class QuotaEntity:
    """A quota's entity: `user` is the sanitized user name or DEFAULT, `client_id` the client
    id (as sent) or DEFAULT; None where the entity has no such part."""

    user: str | None = None
    client_id: str | None = None


Tags = tuple[str, str]  # Kafka's quota metric tags: (sanitized user or "", client id or "")


def quota_metric_tags(quotas: Mapping[QuotaEntity, float], types_enabled: int,
                      sanitized_user: str, client_id: str) -> Tags:
    """DefaultQuotaCallback.quotaMetricTags: the (user, client-id) tags of the sensor a client
    records into. With a single level of quotas in use the tags follow that level; otherwise
    the first entity of the precedence that has a quota decides."""
    if types_enabled in (NO_QUOTAS, CLIENT_ID_QUOTA):
        return "", client_id
    if types_enabled == USER_QUOTA:
        return sanitized_user, ""
    if types_enabled == USER_CLIENT_ID_QUOTA:
        return sanitized_user, client_id
    u, c = sanitized_user, client_id
    for entity, tags in (
            (QuotaEntity(u, c), (u, c)),
            (QuotaEntity(u, DEFAULT), (u, c)),
            (QuotaEntity(u, None), (u, "")),
            (QuotaEntity(DEFAULT, c), (u, c)),
            (QuotaEntity(DEFAULT, DEFAULT), (u, c)),
            (QuotaEntity(DEFAULT, None), (u, ""))):
        if entity in quotas:
            return tags
    return "", c


def quota_limit(quotas: Mapping[QuotaEntity, float], tags: Tags,
                static_client_default: float = LONG_MAX) -> float | None:
    """DefaultQuotaCallback.quotaLimit: the bound of the sensor with these tags, None when no
    quota applies."""
    user, client_id = tags
    if user and client_id:
        order = [QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT),
                 QuotaEntity(DEFAULT, client_id), QuotaEntity(DEFAULT, DEFAULT)]
    elif user:
        order = [QuotaEntity(user, None), QuotaEntity(DEFAULT, None)]
    elif client_id:
        order = [QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT)]
    else:
        return None
    for entity in order:
        found = quotas.get(entity)
        if found is not None:
            return found
    if user:
        return None
    return float(static_client_default)  # 9. the static client-id default


class _Sensor:
    __slots__ = ("bound", "rate", "version")

    def __init__(self, rate: QuotaRate) -> None:
        self.rate = rate
        self.bound: float | None = None
        self.version = -1


def _wall_ms() -> int:
    return int(clock.monotonic() * 1000)


class ClientQuotaManager:
    """One quota type's quotas and sensors. `static_default` is Kafka's deprecated static
    client-id default (LONG_MAX: none); `max_throttle_ms` caps throttle times (request quotas:
    one window)."""

    def __init__(self, quota_type: str, num_samples: int = DEFAULT_NUM_SAMPLES,
                 window_seconds: int = DEFAULT_WINDOW_SECONDS,
                 static_default: float = LONG_MAX, max_throttle_ms: int | None = None,
                 clock: Callable[[], int] = _wall_ms, max_sensors: int = MAX_SENSORS) -> None:
        self.quota_type = quota_type
        self.num_samples = num_samples
        self.window_seconds = window_seconds
        self.static_default = static_default
        self.max_throttle_ms = max_throttle_ms
        self.clock = clock
        self.max_sensors = max_sensors
        self.quotas: dict[QuotaEntity, float] = {}
        # once any quota was set, recording stays on until a restart (as Kafka's)
        self.types_enabled = NO_QUOTAS if static_default >= LONG_MAX else CLIENT_ID_QUOTA
        self._sensors: OrderedDict[Tags, _Sensor] = OrderedDict()
        self._version = 0
        self._last_sweep = 0

    @property
    def quotas_enabled(self) -> bool:
        return self.types_enabled != NO_QUOTAS

    def update_quota(self, entity: QuotaEntity, value: float | None) -> None:
        """Set (a float) or remove (None) the quota of an entity."""
        if entity.user is not None:
            self.types_enabled |= (USER_CLIENT_ID_QUOTA if entity.client_id is not None
                                   else USER_QUOTA)
        elif entity.client_id is not None:
            self.types_enabled |= CLIENT_ID_QUOTA
        if value is None:
            if self.quotas.pop(entity, None) is not None:
                log.info("Removing %s quota for %s", self.quota_type, _describe(entity))
        else:
            log.info("Changing %s quota for %s to %s", self.quota_type, _describe(entity), value)
            self.quotas[entity] = value
        self._version += 1

    def _callback_types(self) -> int:
        t = self.types_enabled
        return t if t in (NO_QUOTAS, CLIENT_ID_QUOTA, USER_QUOTA, USER_CLIENT_ID_QUOTA) else 8

    def metric_tags(self, sanitized_user: str, client_id: str) -> Tags:
        return quota_metric_tags(self.quotas, self._callback_types(), sanitized_user, client_id)

    def quota(self, sanitized_user: str, client_id: str) -> float | None:
        """The bound this client is held to (None: unlimited)."""
        return quota_limit(self.quotas, self.metric_tags(sanitized_user, client_id),
                           self.static_default)

    def _sensor(self, sanitized_user: str, client_id: str, now_ms: int) -> _Sensor:
        tags = self.metric_tags(sanitized_user, client_id)
        sensor = self._sensors.get(tags)
        if sensor is None:
            if now_ms - self._last_sweep >= _SWEEP_INTERVAL_MS:
                self._sweep(now_ms)
            while len(self._sensors) >= self.max_sensors:
                self._sensors.popitem(last=False)
            sensor = self._sensors[tags] = _Sensor(
                QuotaRate(self.num_samples, self.window_seconds * 1000))
        else:
            self._sensors.move_to_end(tags)
        if sensor.version != self._version:
            sensor.bound = quota_limit(self.quotas, tags, self.static_default)
            if sensor.bound is not None and sensor.bound >= LONG_MAX:
                sensor.bound = None
            sensor.version = self._version
        return sensor

    def _sweep(self, now_ms: int) -> None:
        self._last_sweep = now_ms
        expired = [t for t, s in self._sensors.items()
                   if now_ms - s.rate.last_active_ms() >= INACTIVE_SENSOR_EXPIRATION_MS]
        for t in expired:
            del self._sensors[t]

    def record_and_get_throttle_ms(self, sanitized_user: str, client_id: str, value: float,
                                   now_ms: int | None = None) -> int:
        """maybeRecordAndGetThrottleTimeMs: 0 while no quota was ever set."""
        if not self.quotas_enabled:
            return 0
        now = self.clock() if now_ms is None else now_ms
        sensor = self._sensor(sanitized_user, client_id, now)
        return record_and_throttle(sensor.rate, value, now, sensor.bound, self.max_throttle_ms)

    def unrecord(self, sanitized_user: str, client_id: str, value: float,
                 now_ms: int | None = None) -> None:
        """unrecordQuotaSensor: a throttled fetch returns nothing, so its bytes do not count."""
        if not self.quotas_enabled:
            return
        now = self.clock() if now_ms is None else now_ms
        self._sensor(sanitized_user, client_id, now).rate.record(-value, now)

    def max_value_in_quota_window(self, sanitized_user: str, client_id: str) -> float:
        if not self.quotas_enabled:
            return float("inf")
        bound = self.quota(sanitized_user, client_id)
        if bound is not None and bound >= LONG_MAX:
            bound = None
        return max_value_in_quota_window(bound, self.num_samples, self.window_seconds)

    def sensor_count(self) -> int:
        return len(self._sensors)


def _describe(entity: QuotaEntity) -> str:
    parts = []
    if entity.user is not None:
        parts.append("default user" if entity.user == DEFAULT else f"user {entity.user}")
    if entity.client_id is not None:
        parts.append("default client-id" if entity.client_id == DEFAULT
                     else f"client-id {entity.client_id}")
    return " ".join(parts)


class QuotaManagers:
    """Kafka's QuotaManagers for clients: produce, fetch and request."""

    def __init__(self, num_samples: int = DEFAULT_NUM_SAMPLES,
                 window_seconds: int = DEFAULT_WINDOW_SECONDS,
                 producer_default: float = LONG_MAX, consumer_default: float = LONG_MAX,
                 clock: Callable[[], int] = _wall_ms) -> None:
        self.produce = ClientQuotaManager(PRODUCE, num_samples, window_seconds,
                                          producer_default, clock=clock)
        self.fetch = ClientQuotaManager(FETCH, num_samples, window_seconds, consumer_default,
                                        clock=clock)
        self.request = ClientQuotaManager(REQUEST, num_samples, window_seconds,
                                          max_throttle_ms=window_seconds * 1000, clock=clock)
        self.by_key = {PRODUCER_BYTE_RATE: self.produce, CONSUMER_BYTE_RATE: self.fetch,
                       REQUEST_PERCENTAGE: self.request}

    @property
    def enabled(self) -> bool:
        return (self.produce.quotas_enabled or self.fetch.quotas_enabled
                or self.request.quotas_enabled)

    def apply_entity(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        """An entity's configs as read from ZooKeeper (Kafka's QuotaConfigHandler): each quota
        set or removed; values that are not numbers are ignored with a warning."""
        for key, manager in self.by_key.items():
            text = config.get(key)
            value: float | None = None
            if text is not None:
                try:
                    value = float(text)
                except ValueError:
                    log.warning("Ignoring %s=%r of %s: not a number", key, text,
                                _describe(entity))
            if value is None and entity not in manager.quotas:
                continue
            manager.update_quota(entity, value)
