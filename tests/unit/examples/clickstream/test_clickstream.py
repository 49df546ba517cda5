"""The clickstream example's pure parts (S-9.2): the generator, the wire form of an event, the
reference semantics of a windowed count with a watermark, and the report's ranking."""

from __future__ import annotations

import itertools
import json

import pytest

from odradek.examples.clickstream.events import (
    DEFAULT_START_MS as T0,
)
from odradek.examples.clickstream.events import (
    HEARTBEAT,
    GeneratorConfig,
    PageView,
    expected_output,
    generate,
    heartbeat,
    iso_ms,
    parse_duration_ms,
    window_counts,
    window_start,
)
from odradek.examples.clickstream.report import (
    WindowCount,
    as_counts,
    compare,
    format_top,
    top_pages,
)

M = 60_000


def pv(page: str, ms: int, user: str = "u1") -> PageView:
    return PageView(user, f"{user}-s1", page, None, T0 + ms)


def test_generator_is_deterministic_and_in_event_time_order() -> None:
    a = list(generate(2000, GeneratorConfig(seed=7)))
    b = list(generate(2000, GeneratorConfig(seed=7)))
    c = list(generate(2000, GeneratorConfig(seed=8)))
    assert a == b
    assert a != c
    assert all(x.ts <= y.ts for x, y in itertools.pairwise(a))
    assert a[0].ts >= T0


def test_generator_clock_sets_the_event_time_span() -> None:
    # 20 events/s of event time: 6000 events span about 300 s.
    evs = list(generate(6000, GeneratorConfig(events_per_second=20.0, start_ms=0)))
    span_s = (evs[-1].ts - evs[0].ts) / 1000
    assert 250 < span_s < 350
    fast = list(generate(6000, GeneratorConfig(events_per_second=200.0, start_ms=0)))
    assert (fast[-1].ts - fast[0].ts) / 1000 < 50


def test_generator_sessions_and_referrers() -> None:
    evs = list(generate(5000, GeneratorConfig(users=50, session_gap_ms=20_000)))
    last: dict[str, PageView] = {}
    new_sessions = 0
    for e in evs:
        prev = last.get(e.user_id)
        if prev is not None and e.session_id == prev.session_id:
            assert e.ts - prev.ts <= 20_000
            assert e.referrer == prev.page  # navigation inside a session
        else:
            new_sessions += 1
            assert e.referrer is None or e.referrer.startswith("https://")
            if prev is not None:
                assert e.ts - prev.ts > 20_000
        last[e.user_id] = e
    assert 50 <= new_sessions < len(evs)


def test_generator_popularity_is_skewed() -> None:
    counts = window_counts(generate(20_000), 10**12)
    by_page = {page: n for (_w, page), n in counts.items()}
    assert by_page["/"] > by_page["/search"] > by_page["/blog/controller-failover"]


@pytest.mark.parametrize("kw", [{"users": 0}, {"pages": ()}, {"events_per_second": 0}])
def test_generator_rejects_bad_config(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GeneratorConfig(**kw)  # type: ignore[arg-type]


def test_event_wire_form_round_trips() -> None:
    e = PageView("user-00042", "user-00042-s3", "/cart", "/search", T0 + 1234)
    assert e.key() == b"user-00042"
    d = json.loads(e.value())
    assert d == {"event": "page_view", "user_id": "user-00042", "session_id": "user-00042-s3",
                 "page": "/cart", "referrer": "/search", "ts": T0 + 1234}
    assert PageView.from_value(e.value()) == e
    assert PageView.from_value(heartbeat(5).value()).event == HEARTBEAT


def test_windows() -> None:
    assert window_start(T0 + 59_999, M) == T0
    assert window_start(T0 + M, M) == T0 + M
    counts = window_counts([pv("/", 0), pv("/", 59_999), pv("/", M), heartbeat(T0 + 5)], M)
    assert counts == {(T0, "/"): 2, (T0 + M, "/"): 1}
    assert iso_ms(T0 + M + 5) == "2026-01-01T00:01:00.005Z"


def test_expected_output_drops_only_rows_of_finalized_windows() -> None:
    b1 = [pv("/", 1000), pv("/", 2000), pv("/search", 30_000), pv("/", M + 5)]
    b2 = [heartbeat(T0 + 10 * M + 30_000)]  # watermark -> 5:30: windows up to 0:04 final
    b3 = [pv("/", 30_000, "late"),  # its window ended before the watermark: dropped
          pv("/help", 5 * M + 10_000, "slow"),  # older than the watermark, window open: counts
          heartbeat(T0 + 20 * M)]
    r = expected_output([b1, b2, b3], M, 5 * M)
    assert r.emitted == {(T0, "/"): 2, (T0, "/search"): 1, (T0 + M, "/"): 1,
                         (T0 + 5 * M, "/help"): 1}
    assert [e.user_id for e in r.dropped] == ["late"]
    assert r.watermark_ms == T0 + 15 * M
    assert r.open_windows == {}


def test_expected_output_keeps_windows_open_until_the_watermark_passes_their_end() -> None:
    # Measured on Spark 4.3 with a file source: a window is evicted once watermark >= its end.
    r = expected_output([[pv("/", 0), pv("/", 3 * M - 1)]], M, 2 * M)
    assert r.emitted == {}  # watermark 0:59.999 < end 1:00
    assert r.open_windows == {(T0, "/"): 1, (T0 + 2 * M, "/"): 1}
    r = expected_output([[pv("/", 0), pv("/", 3 * M)]], M, 2 * M)
    assert r.emitted == {(T0, "/"): 1}  # watermark 1:00 == end 1:00
    assert r.open_windows == {(T0 + 3 * M, "/"): 1}


def test_parse_duration() -> None:
    assert parse_duration_ms("1 minute") == M
    assert parse_duration_ms("30 seconds") == 30_000
    assert parse_duration_ms("2 hours") == 7_200_000
    assert parse_duration_ms("10s") == 10_000
    for bad in ("", "minute", "1 fortnight", "0 seconds", "1.5 minutes", "-1 minute"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)


def test_report_ranking_and_table() -> None:
    counts = {(T0, "/"): 5, (T0, "/a"): 7, (T0, "/b"): 7, (T0, "/c"): 1, (T0 + M, "/"): 2}
    assert top_pages(counts, 2) == {T0: [("/a", 7), ("/b", 7)], T0 + M: [("/", 2)]}
    table = format_top(counts, M, 2)
    lines = table.splitlines()
    assert lines[2].startswith("2026-01-01T00:00Z - 00:01Z")
    assert " 20  /a 7, /b 7" in lines[2]
    assert lines[3].endswith("2  / 2")
    many = {(T0 + i * M, "/"): i + 1 for i in range(30)}
    short = format_top(many, M, 1, max_windows=4).splitlines()
    assert len(short) == 2 + 5
    assert short[4] == "... 26 more windows ..."


def test_report_reads_sink_values_and_catches_duplicates() -> None:
    v = b'{"window_start":"2026-01-01T00:01:00.000Z","window_end":"2026-01-01T00:02:00.000Z",' \
        b'"page":"/cart","count":4}'
    wc = WindowCount.from_value(v)
    assert wc == WindowCount(T0 + M, T0 + 2 * M, "/cart", 4)
    assert as_counts([wc]) == {(T0 + M, "/cart"): 4}
    with pytest.raises(ValueError, match="written twice"):
        as_counts([wc, wc])
    assert compare({(T0, "/"): 1}, {(T0, "/"): 1}) == []
    assert compare({(T0, "/"): 1}, {(T0, "/"): 2, (T0, "/x"): 1}) == [
        "window 2026-01-01T00:00:00.000Z page /: expected 1, got 2",
        "window 2026-01-01T00:00:00.000Z page /x: expected None, got 1"]
