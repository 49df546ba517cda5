"""Client quota arithmetic (Kafka's quota Sensor over a sampled Rate, and QuotaUtils), pure.

A quota sensor keeps `quota.window.num` samples of `quota.window.size.seconds` each (Kafka's
SampledStat with a WindowedSum): a value is added to the current sample, a new sample starts
once the current one is a window old (the oldest is reused when all are in use), and samples
older than `num * window` are reset when measured. The rate is the samples' sum divided by the
elapsed time since the oldest sample began, counted as at least `num - 1` whole windows (Kafka's
Rate.windowSize), so a fresh client is not judged on a fraction of a second.

After each recording the rate is checked against the quota (an upper bound): over it, the
throttle time is the delay that brings the rate back to the quota if nothing more is recorded,
X = (O - T) / T * W for observed rate O, target T and window W (QuotaUtils.throttleTime),
rounded to milliseconds. Request quotas cap it at one window (ClientRequestQuotaManager).

No clock is read here: callers pass the time in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Kafka's defaults (ClientQuotaManagerConfig): 10 whole windows and the current one, of 1 s.
DEFAULT_NUM_SAMPLES = 11
DEFAULT_WINDOW_SECONDS = 1


@dataclass
class Sample:
    start_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0.0


@dataclass
class QuotaRate:
    """Kafka's Rate over a WindowedSum, sample for sample (negative values "unrecord")."""

    num_samples: int = DEFAULT_NUM_SAMPLES
    window_ms: int = DEFAULT_WINDOW_SECONDS * 1000
    samples: list[Sample] = field(default_factory=list)
    current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self.samples:
            self.samples.append(Sample(now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.window_ms:
            self.current = (self.current + 1) % self.num_samples
            if self.current >= len(self.samples):
                sample = Sample(now_ms)
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample.reset(now_ms)
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire_age = self.num_samples * self.window_ms
        for s in self.samples:
            if now_ms - s.start_ms >= expire_age:
                s.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The elapsed time the rate divides by (Kafka's Rate.windowSize)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self.samples), default=now_ms)
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        min_full_windows = self.num_samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self.samples)
        window = self.window_size_ms(now_ms)
        return total * 1000.0 / window if window > 0 else 0.0

    def last_active_ms(self) -> int:
        return max((s.start_ms for s in self.samples), default=0)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay bringing `observed` back to `bound` over a window of
    `window_ms`; 0 when within the quota. A zero quota throttles for the whole window per unit
    over it (bounded by the int32 of the wire)."""
    difference = observed - bound
    if difference <= 0:
        return 0
    if bound <= 0:
        return INT32_MAX
    delay = difference / bound * window_ms
    if not math.isfinite(delay):
        return INT32_MAX
    return min(INT32_MAX, math.floor(delay + 0.5))  # Java's Math.round


INT32_MAX = 2**31 - 1


def record_and_throttle(rate: QuotaRate, value: float, now_ms: int, bound: float | None,
                        max_throttle_ms: int | None = None) -> int:
    """Kafka's quota sensor record(value, now, checkQuotas=true) and the throttle time of a
    violation (QuotaUtils.throttleTime, or boundedThrottleTime with `max_throttle_ms`)."""
    rate.record(value, now_ms)
    if bound is None:
        return 0
    observed = rate.measure(now_ms)
    if observed <= bound:
        return 0
    delay = throttle_time_ms(observed, bound, rate.window_size_ms(now_ms))
    return delay if max_throttle_ms is None else min(delay, max_throttle_ms)


def max_value_in_quota_window(bound: float | None, num_samples: int, window_seconds: int
                              ) -> float:
    """ClientQuotaManager.getMaxValueInQuotaWindow: the most one request may take (a consumer's
    fetch size) without being throttled for sure."""
    if bound is None:
        return float("inf")
    return bound * (num_samples - 1) * window_seconds
