"""Page-view events of Kafka's behaviour-tracking use case (docs/design.md S-9.2: track the
pages users view, record them in real time into a topic, for a data platform to analyse).

Pure: the events, their wire form (JSON value, user id as key), a deterministic generator driven
by an event-time clock you choose, and the reference the Spark job is checked against
(`window_counts`, `expected_output`: Structured Streaming's append-mode semantics with a
watermark, S-9.2).
"""

from __future__ import annotations

import datetime
import json
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

PAGE_VIEW = "page_view"
HEARTBEAT = "heartbeat"
"""A tracker's heartbeat carries only event time: it moves the job's watermark on when no user
is active (so the last windows get finalized) and is not counted as a page view."""

PAGES: tuple[str, ...] = (
    "/", "/search", "/product/kafka-book", "/product/zookeeper-mug", "/cart", "/checkout",
    "/account", "/help", "/blog/isr-explained", "/blog/controller-failover",
)
EXTERNAL_REFERRERS: tuple[str, ...] = (
    "https://www.google.com/", "https://news.ycombinator.com/", "https://t.co/",
)
DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: a fixed clock, reproducible runs
SESSION_GAP_MS = 30 * 60 * 1000  # a new session after 30 minutes without a view


@dataclass(frozen=True, slots=True)
class PageView:
    """One tracked event. `ts` is its event time in ms since the epoch (also the record's
    CreateTime timestamp); `referrer` is the previous page of the session, or the external site
    the session came from, or None (typed-in address)."""

    user_id: str
    session_id: str
    page: str
    referrer: str | None
    ts: int
    event: str = PAGE_VIEW

    def key(self) -> bytes:
        """Keyed by user: one user's events stay in one partition, in order (S-1.3)."""
        return self.user_id.encode()

    def value(self) -> bytes:
        return json.dumps({"event": self.event, "user_id": self.user_id,
                           "session_id": self.session_id, "page": self.page,
                           "referrer": self.referrer, "ts": self.ts},
                          separators=(",", ":")).encode()

    @classmethod
    def from_value(cls, value: bytes | str) -> PageView:
        d: dict[str, Any] = json.loads(value)
        return cls(user_id=d["user_id"], session_id=d["session_id"], page=d["page"],
                   referrer=d.get("referrer"), ts=int(d["ts"]), event=d.get("event", PAGE_VIEW))


def heartbeat(ts: int) -> PageView:
    return PageView(user_id="tracker", session_id="", page="", referrer=None, ts=ts,
                    event=HEARTBEAT)


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """`seed` fixes every choice; `start_ms` and `events_per_second` are the event-time clock:
    events are spaced by exponential gaps of mean 1/events_per_second seconds of event time
    (not wall time: a run produces as fast as the broker takes them)."""

    seed: int = 42
    users: int = 500
    pages: tuple[str, ...] = PAGES
    start_ms: int = DEFAULT_START_MS
    events_per_second: float = 20.0
    session_gap_ms: int = SESSION_GAP_MS

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError("users must be at least 1")
        if not self.pages:
            raise ValueError("pages must not be empty")
        if self.events_per_second <= 0:
            raise ValueError("events_per_second must be positive")


@dataclass(slots=True)
class _Session:
    session_id: str
    last_ts: int
    last_page: str


def generate(n: int, config: GeneratorConfig | None = None) -> Iterator[PageView]:
    """`n` page views in event-time order. Pages follow a Zipf-like popularity (the first page
    of `config.pages` is the most viewed); a user's session ends after `session_gap_ms` of
    inactivity; the referrer is the session's previous page, or an external site for the
    session's first view."""
    cfg = config or GeneratorConfig()
    rng = random.Random(cfg.seed)
    weights = [1.0 / (i + 1) for i in range(len(cfg.pages))]
    sessions: dict[str, _Session] = {}
    counts: Counter[str] = Counter()
    ts = float(cfg.start_ms)
    for _ in range(n):
        ts += rng.expovariate(cfg.events_per_second) * 1000.0
        t = int(ts)
        user = f"user-{rng.randrange(cfg.users):05d}"
        page = rng.choices(cfg.pages, weights)[0]
        s = sessions.get(user)
        if s is None or t - s.last_ts > cfg.session_gap_ms:
            counts[user] += 1
            referrer: str | None = rng.choice((*EXTERNAL_REFERRERS, None))
            s = sessions[user] = _Session(f"{user}-s{counts[user]}", t, page)
        else:
            referrer = s.last_page
            s.last_ts, s.last_page = t, page
        yield PageView(user, s.session_id, page, referrer, t)


# -- the reference for the job's output ---------------------------------------------------------
WindowKey = tuple[int, str]  # (window start in ms, page)


def window_start(ts: int, window_ms: int) -> int:
    """Start of the tumbling window holding `ts` (Spark's window() with no offset)."""
    return ts - ts % window_ms


def window_counts(events: Iterable[PageView], window_ms: int) -> dict[WindowKey, int]:
    """Page views per (window start, page), heartbeats excluded."""
    c: Counter[WindowKey] = Counter(
        (window_start(e.ts, window_ms), e.page) for e in events if e.event == PAGE_VIEW)
    return dict(c)


@dataclass(slots=True)
class StreamingResult:
    """What an append-mode windowed count with a watermark emits, per `expected_output`."""

    emitted: dict[WindowKey, int] = field(default_factory=dict)
    open_windows: dict[WindowKey, int] = field(default_factory=dict)
    dropped: list[PageView] = field(default_factory=list)
    watermark_ms: int = 0


def expected_output(batches: Sequence[Sequence[PageView]], window_ms: int,
                    delay_ms: int) -> StreamingResult:
    """Structured Streaming's append mode with `withWatermark(event_time, delay)` and
    tumbling windows, fed `batches` as micro-batches, each followed by the no-data batch that
    evicts what the new watermark finalizes:

    - a row whose window has already ended at the current watermark (end <= watermark) is
      late and dropped; a row older than the watermark whose window is still open counts;
    - after a batch, watermark = max(watermark, max event time seen - delay) (heartbeats
      included: they carry event time);
    - a window is emitted, once, when watermark >= its end.
    """
    r = StreamingResult()
    state: Counter[WindowKey] = Counter()
    max_ts: int | None = None
    for batch in batches:
        for e in batch:
            max_ts = e.ts if max_ts is None else max(max_ts, e.ts)
            if e.event != PAGE_VIEW:
                continue
            start = window_start(e.ts, window_ms)
            if start + window_ms <= r.watermark_ms:
                r.dropped.append(e)
            else:
                state[(start, e.page)] += 1
        if max_ts is not None:
            r.watermark_ms = max(r.watermark_ms, max_ts - delay_ms)
        for key in [k for k in state if k[0] + window_ms <= r.watermark_ms]:
            r.emitted[key] = state.pop(key)
    r.open_windows = dict(state)
    return r


def iso_ms(ms: int) -> str:
    """`2026-01-01T00:01:00.000Z` for ms since the epoch, UTC."""
    dt = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_duration_ms(text: str) -> int:
    """`'1 minute'`, `'30 seconds'`, `'2 minutes'`, `'1 hour'`, `'500 ms'` -> milliseconds
    (the interval strings Spark's window() and withWatermark() take)."""
    units = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000,
             "second": 1000, "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000,
             "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000}
    parts = text.strip().lower().split()
    if len(parts) == 1:  # "30s", "1m"
        head = parts[0].rstrip("abcdefghijklmnopqrstuvwxyz")
        parts = [head, parts[0][len(head):]]
    if len(parts) != 2 or parts[1] not in units:
        raise ValueError(f"not a duration: {text!r} (use e.g. '1 minute', '30 seconds')")
    try:
        amount = int(parts[0])
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (the amount must be a whole number)"
                         ) from None
    if amount <= 0:
        raise ValueError(f"not a duration: {text!r} (must be positive)")
    return amount * units[parts[1]]
