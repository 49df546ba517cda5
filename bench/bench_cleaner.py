#!/usr/bin/env python3
"""Log cleaner throughput (S-2.7): one cleaning pass of `odradek.storage.cleaner.clean_log` over
a compacted log built directly on disk (no broker, no network), judged as Kafka's cleaner is:
MB/s of log processed, records/s, size reduction (the figures of Kafka's per-pass summary).

Each run is a worker process (`bench_cleaner.py worker ...`) that builds a fresh log in a
temporary directory (`Log.open` with cleanup.policy=compact, `append_as_leader` of batches of 100
records from `records.build_batch`, 100-byte values, keys drawn at random with a fixed seed),
rolls so that every record is below the active segment, then times one `clean_log` pass (the
map phase and the whole pass from the cleaner's own `CleanerStats`, the call's wall time too)
and reports its peak RSS (`resource.getrusage`, so each run needs its own process). The parent
removes the directory afterwards, also after a failure or a timeout.

Scenarios (`--records` N, 1,000,000; each the best of `--repeat` (3) runs, a fresh log each):

1. N records, 10,000 distinct keys, uncompressed batches, segment.bytes 16 MiB;
2. the same with lz4 batches, and zstd batches (both through cramjam here);
3. N distinct keys (nothing to remove: the cost of the map and of copying), and 100 keys
   (almost everything removed);
4. scenario 1, then a second pass: (a) right after the first, with its checkpoint (nothing is
   dirty: `clean_log` returns None after planning), (b) after N/100 more records (same keys)
   were appended and rolled: the map covers only those, the clean section is read again.

`--quick` is 10x smaller (records and segment.bytes) and 1 run; `--profile` adds one cProfile
run of scenario 1 (top functions by cumulative and by own time). The markdown section goes
between `<!-- cleaner:begin -->` and `<!-- cleaner:end -->` (appended if missing)::

    python bench/bench_cleaner.py --quick                          # smoke test, stdout
    python bench/bench_cleaner.py --profile --update-doc docs/performance.md
    python bench/bench_cleaner.py --splice F.md --update-doc docs/performance.md  # no run
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from common import (
    add_section_options,
    fmt_int,
    machine_facts,
    progress,
    rss_kb,
    run_section,
    table,
)
from plots import bar_chart, img_dir, write_svg

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
MB = 2**20  # MiB, as Kafka's cleaner summary and the other sections
VALUE_SIZE = 100
BATCH_RECORDS = 100
SEGMENT_BYTES = 16 * MB
SEED = 20140
BEGIN, END = "<!-- cleaner:begin -->", "<!-- cleaner:end -->"
CHART = "cleaner"


@dataclass(frozen=True)
class Scenario:
    name: str
    label: str
    keys: str  # "10000", "100" or "unique"
    codec: str  # "none", "lz4", "zstd"
    second_pass: bool = False


SCENARIOS = (
    Scenario("none", "1. 10,000 keys, uncompressed", "10000", "none"),
    Scenario("lz4", "2. 10,000 keys, lz4", "10000", "lz4"),
    Scenario("zstd", "2. 10,000 keys, zstd", "10000", "zstd"),
    Scenario("unique", "3. all keys distinct, uncompressed", "unique", "none"),
    Scenario("keys100", "3. 100 keys, uncompressed", "100", "none"),
    Scenario("second", "4b. second pass, 10,000 keys, +N/100 new records", "10000", "none",
             second_pass=True),
    Scenario("second_unique", "4c. second pass, all keys distinct, +N/100 new records",
             "unique", "none", second_pass=True),
)
BY_NAME = {s.name: s for s in SCENARIOS}


# -- the worker: build one log, clean it once, print one JSON line -----------------------------
def codec_available(name: str) -> bool:
    """Whether odradek's compression module can compress and decompress with `name` here."""
    from odradek.protocol.compression import Codec, compress, decompress

    try:
        codec = Codec.from_name(name)
        return decompress(codec, compress(codec, b"odradek" * 20)) == b"odradek" * 20
    except Exception:
        return False


def key_count(keys: str, records: int) -> int:
    return records if keys == "unique" else min(int(keys), records)


def append_records(lg: Any, rng: random.Random, first: int, count: int, keys: str, n_keys: int,
                   codec: int, now_ms: int, label: str) -> None:
    """Append `count` records (offsets first..) in batches of BATCH_RECORDS."""
    from odradek.protocol.records import build_batch, validate_batches

    step = max(1, count // 4)
    done = 0
    for start in range(first, first + count, BATCH_RECORDS):
        end = min(start + BATCH_RECORDS, first + count)
        recs: list[tuple[bytes | None, bytes | None]] = []
        for i in range(start, end):
            k = i if keys == "unique" else rng.randrange(n_keys)
            recs.append((b"key-%08d" % k, rng.randbytes(VALUE_SIZE // 2).hex().encode()))
        buf = bytearray(build_batch(recs, timestamp_ms=now_ms, compression=codec))
        lg.append_as_leader(buf, validate_batches(buf), 0, now_ms)
        before, done = done, done + len(recs)
        if count >= 10_000 and done // step != before // step:
            progress(f"  {label}: built {done:,}/{count:,} records ({lg.size / MB:,.0f} MiB, "
                     f"{len(lg.segments)} segments)")


def stats_json(result: Any, wall: float) -> dict[str, Any]:
    s = result.stats
    return {"bytes_read": s.bytes_read, "bytes_written": s.bytes_written,
            "messages_read": s.messages_read, "messages_written": s.messages_written,
            "map_bytes_read": s.map_bytes_read, "map_messages_read": s.map_messages_read,
            "map_seconds": s.elapsed_index_secs, "total_seconds": s.elapsed_secs,
            "wall_seconds": wall, "groups": result.groups, "completed": result.completed,
            "buffer_utilization": s.buffer_utilization, "first_dirty": result.first_dirty_offset,
            "end_offset": result.end_offset}


def top_functions(prof: cProfile.Profile, key: str, n: int) -> list[dict[str, Any]]:
    st = pstats.Stats(prof)
    rows = []
    for func, (_cc, ncalls, tottime, cumtime, _callers) in st.stats.items():  # type: ignore[attr-defined]
        path, line, name = func
        where = name if path == "~" else f"{name} ({_short(path)}:{line})"
        rows.append({"function": where, "calls": ncalls, "tottime": tottime,
                     "cumtime": cumtime})
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:n]


IO_CALL = re.compile(r"posix\.(pread|read|write|pwrite|fsync|fdatasync|open|close|rename|"
                     r"unlink|utime|stat|ftruncate)\b|method '(write|read|flush|truncate)'")


def io_seconds(prof: cProfile.Profile) -> dict[str, float]:
    """Own time of the profiled pass in system calls on files, by call name."""
    out: dict[str, float] = {}
    for (path, _line, name), (_cc, _n, tottime, _cum, _callers) in \
            pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        m = IO_CALL.search(name) if path == "~" else None
        if m:
            call = m.group(1) or m.group(2)
            out[call] = out.get(call, 0.0) + tottime
    return out


def _short(path: str) -> str:
    p = path.replace(str(REPO / "src") + "/", "")
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in p:
            p = p.split(marker, 1)[1]
    return p


def worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_cleaner.py worker")
    ap.add_argument("scenario", choices=sorted(BY_NAME))
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--segment-bytes", type=int, required=True)
    ap.add_argument("--run", default="")
    ap.add_argument("--profile", type=int, default=0, help="top N functions under cProfile")
    a = ap.parse_args(argv)
    t0_wall = os.environ.get("ODRADEK_BENCH_T0")
    if t0_wall:  # progress stamps relative to the parent's start
        common._T0 = time.monotonic() - (time.time() - float(t0_wall))

    from odradek.protocol.compression import Codec
    from odradek.storage.cleaner import clean_log
    from odradek.storage.log import Log
    from odradek.storage.log_config import LogConfig

    sc = BY_NAME[a.scenario]
    label = f"{sc.name}{' ' + a.run if a.run else ''}"
    codec = Codec.from_name(sc.codec)
    n_keys = key_count(sc.keys, a.records)
    rng = random.Random(SEED)
    now_ms = int(time.time() * 1000)
    cfg = LogConfig(cleanup_policy=("compact",), segment_bytes=a.segment_bytes,
                    min_cleanable_dirty_ratio=0.0)
    lg = Log.open(a.dir / "bench-0", cfg)
    out: dict[str, Any] = {}
    try:
        t = time.perf_counter()
        append_records(lg, rng, 0, a.records, sc.keys, n_keys, codec, now_ms, label)
        lg.roll()
        out.update(build_seconds=time.perf_counter() - t, input_bytes=lg.size,
                   segments=len(lg.segments) - 1, keys=n_keys)
        progress(f"  {label}: log built in {out['build_seconds']:.1f} s: {lg.size / MB:,.1f} "
                 f"MiB in {len(lg.segments) - 1} segments + an empty active one; cleaning")
        prof = cProfile.Profile() if a.profile and not sc.second_pass else None
        out["rss_before_kb"] = rss_kb(os.getpid())
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        first = clean_log(lg, now_ms)
        if prof is not None:
            prof.disable()
        wall = time.perf_counter() - t
        if first is None:
            raise SystemExit("clean_log found nothing to clean")
        out["pass"] = stats_json(first, wall)
        progress(f"  {label}: pass in {wall:.2f} s (map {first.stats.elapsed_index_secs:.2f} "
                 f"s), {first.stats.bytes_read / MB:,.1f} -> "
                 f"{first.stats.bytes_written / MB:,.1f} MiB, {first.stats.messages_read:,} -> "
                 f"{first.stats.messages_written:,} records")
        if prof is not None:
            out["profile"] = {"cumulative": top_functions(prof, "cumtime", a.profile),
                              "own": top_functions(prof, "tottime", a.profile),
                              "io": io_seconds(prof), "wall": wall}
        if sc.second_pass:
            t = time.perf_counter()
            again = clean_log(lg, now_ms, last_clean_offset=first.end_offset)
            out["immediate"] = {"wall_seconds": time.perf_counter() - t,
                                "result": None if again is None else stats_json(again, 0.0)}
            progress(f"  {label}: immediate second pass: "
                     f"{'nothing to clean' if again is None else 'cleaned'} in "
                     f"{out['immediate']['wall_seconds'] * 1e3:.1f} ms")
            extra = max(1, a.records // 100)
            append_records(lg, rng, lg.log_end_offset, extra, sc.keys, n_keys, codec, now_ms,
                           label + " (new)")
            lg.roll()
            out["second_input_bytes"] = lg.size
            t = time.perf_counter()
            second = clean_log(lg, now_ms, last_clean_offset=first.end_offset)
            wall = time.perf_counter() - t
            if second is None:
                raise SystemExit("the second pass found nothing to clean")
            out["first_pass"], out["pass"] = out["pass"], stats_json(second, wall)
            progress(f"  {label}: second pass over {extra:,} new records in {wall:.2f} s (map "
                     f"{second.stats.elapsed_index_secs:.2f} s), read "
                     f"{second.stats.bytes_read / MB:,.1f} MiB, "
                     f"{second.stats.messages_read:,} records")
    finally:
        lg.close()
    out["rss_after_kb"] = rss_kb(os.getpid())
    out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(out), flush=True)


# -- the parent: one worker per run ------------------------------------------------------------
@dataclass
class Results:
    facts: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    profile_run: dict[str, Any] | None = None
    records: int = 0
    segment_bytes: int = 0
    started: float = field(default_factory=time.monotonic)

    def best(self, name: str) -> dict[str, Any]:
        return min(self.runs[name], key=lambda r: r["pass"]["total_seconds"])


def run_worker(a: argparse.Namespace, sc: Scenario, run: str, profile: int = 0
               ) -> dict[str, Any]:
    """One worker process in its own temporary directory (removed afterwards, whatever
    happens); killed with its process group after `--timeout` seconds."""
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-cleaner-"))
    cmd = [sys.executable, str(SCRIPT), "worker", sc.name, "--dir", str(tmp),
           "--records", str(a.records), "--segment-bytes", str(a.segment_bytes), "--run", run]
    if profile:
        cmd += ["--profile", str(profile)]
    env = {**os.environ, "ODRADEK_BENCH_T0": str(time.time() - (time.monotonic() - common._T0))}
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
            raise TimeoutError(f"{sc.name} {run} did not finish within {a.timeout:.0f} s"
                               ) from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {sc.name} {run} failed with {proc.returncode} (its stderr "
                           "is above)")
    out: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    p = out["pass"]
    if p["messages_written"] > p["messages_read"] or not p["completed"]:
        raise RuntimeError(f"{sc.name} {run}: implausible pass {p}")
    return out


def facts() -> dict[str, str]:
    """common.machine_facts() without the Kafka clients' versions (no client runs here), with
    the compression library's."""
    import cramjam

    f = machine_facts()
    for k in ("confluent-kafka", "kcat"):
        f.pop(k, None)
    f["cramjam"] = cramjam.__version__
    return f


def run_bench(a: argparse.Namespace) -> Results:
    res = Results(facts=facts(), records=a.records, segment_bytes=a.segment_bytes)
    for sc in SCENARIOS:
        if sc.codec != "none" and not codec_available(sc.codec):
            res.skipped[sc.name] = f"{sc.codec} is not available in this environment"
            progress(f"{sc.label}: skipped ({res.skipped[sc.name]})")
            continue
        progress(f"{sc.label}: {a.repeat} run(s) of {a.records:,} records")
        res.runs[sc.name] = [run_worker(a, sc, f"run {i + 1}/{a.repeat}")
                             for i in range(a.repeat)]
    if a.profile:
        progress("profile: scenario 1 once more under cProfile")
        res.profile_run = run_worker(a, BY_NAME["none"], "profile", profile=a.profile)
        res.profile = res.profile_run["profile"]
    res.facts["load average at the end"] = " ".join(
        Path("/proc/loadavg").read_text().split()[:3])
    return res


# -- the section -------------------------------------------------------------------------------
def rate(p: dict[str, Any]) -> float:
    """MiB of log processed per second of the pass (Kafka's summary: bytes read / total)."""
    return p["bytes_read"] / MB / p["total_seconds"]


def records_rate(p: dict[str, Any]) -> float:
    return float(p["messages_read"]) / p["total_seconds"]


def _reduction(p: dict[str, Any]) -> str:
    return f"{100 * (1 - p['bytes_written'] / max(p['bytes_read'], 1)):.1f}%"


def rows(res: Results) -> list[list[str]]:
    out = []
    for sc in SCENARIOS:
        if sc.name not in res.runs:
            continue
        b = res.best(sc.name)
        p = b["pass"]
        out.append([
            sc.label, f"{p['bytes_read'] / MB:,.1f}", fmt_int(p["messages_read"]),
            f"{p['map_seconds']:.2f}", f"{p['total_seconds']:.2f}", f"{rate(p):,.1f}",
            fmt_int(records_rate(p)),
            f"{p['bytes_written'] / MB:,.2f}", fmt_int(p["messages_written"]), _reduction(p),
            f"{b['peak_rss_kb'] / 1024:,.0f}",
            ", ".join(f"{r['pass']['total_seconds']:.2f}" for r in res.runs[sc.name])])
    return out


SHORT = {"none": "10,000 keys\nuncompressed", "lz4": "10,000 keys\nlz4",
         "zstd": "10,000 keys\nzstd", "unique": "all keys\ndistinct", "keys100": "100 keys",
         "second": "2nd pass\n10,000 keys, +1%", "second_unique": "2nd pass\ndistinct, +1%"}


def chart(res: Results) -> str:
    groups = {SHORT[sc.name]: {"MiB/s": rate(res.best(sc.name)["pass"])}
              for sc in SCENARIOS if sc.name in res.runs}
    write_svg(img_dir() / f"{CHART}.svg",
              bar_chart(groups, title="Log cleaner: MiB of log processed per second, one pass "
                                      "(best run)", y_label="MiB/s", width=960))
    return f"![Log cleaner: MiB/s of log processed per scenario (bar chart)](img/{CHART}.svg)"


def command_line(a: argparse.Namespace) -> str:
    parts = ["python bench/bench_cleaner.py"]
    if a.quick:
        parts.append("--quick")
    if a.records_given:
        parts.append(f"--records {a.records}")
    if a.repeat_given:
        parts.append(f"--repeat {a.repeat}")
    if a.profile:
        parts.append("--profile")
    if a.update_doc:
        parts.append(f"--update-doc {a.update_doc}")
    return " ".join(parts)


def _profile_table(entries: list[dict[str, Any]]) -> str:
    return table(["function", "calls", "own s", "cumulative s"],
                 [[f"`{e['function']}`", fmt_int(e["calls"]), f"{e['tottime']:.2f}",
                   f"{e['cumtime']:.2f}"] for e in entries], "lrrr")


def bound_sentence(res: Results) -> str:
    """What the measurements say bounds the cleaner (generated from the figures)."""
    p = res.best("none")["pass"]
    map_share = p["map_seconds"] / p["total_seconds"]
    per_rec_us = 1e6 * p["total_seconds"] / (p["map_messages_read"] + p["messages_read"])
    text = (f"In scenario 1 the map phase takes {100 * map_share:.0f}% of the pass, and the "
            f"pass spends {per_rec_us:.1f} µs per record visit (each record is parsed twice: "
            "once to map its key, once to filter it), which gives "
            f"{rate(p):,.1f} MiB/s from the page cache")
    if res.profile:
        own = [e for e in res.profile["own"] if "cProfile" not in e["function"]]
        tot = float(res.profile.get("wall", 0.0)) or 1e-9
        top = ", ".join(f"`{e['function'].split(' (')[0]}` {e['tottime']:.1f} s"
                        for e in own[:5])
        io = res.profile.get("io", {})
        io_s = sum(io.values())
        calls = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(io.items(), key=lambda kv: -kv[1])
                          if v >= 0.005)
        text += (f". Under cProfile (the pass took {tot:.1f} s there) the most own time goes "
                 f"to {top}; file system calls (reads, writes, fsync, renames) take "
                 f"{io_s:.2f} s of it ({100 * io_s / tot:.1f}%"
                 f"{': ' + calls if calls else ''})")
        if io_s / tot < 0.1:
            text += (", so the cleaner is bound by per-record Python work (record parsing, "
                     "key hashing), not by I/O")
    if "lz4" in res.runs:
        lz = res.best("lz4")["pass"]
        text += (f". lz4 batches give {rate(lz) / rate(p):.2f}x the uncompressed MiB/s and "
                 f"{records_rate(lz) / records_rate(p):.2f}x "
                 "its records/s: per record the work is the same, plus decompressing each "
                 "batch twice (map and filter) and recompressing the rebuilt ones")
    return text + "."


def memory_sentence(res: Results) -> str:
    """The offset map's memory, from the peak RSS of the 10,000-key and all-distinct runs."""
    from odradek.storage.cleaner import CleanerConfig, OffsetMap

    few, many = res.best("none"), res.best("unique")
    cfg = CleanerConfig()
    slots = OffsetMap(cfg.map_memory).slots
    cap = OffsetMap(cfg.map_memory).max_entries(cfg.dedupe_buffer_load_factor)
    mapped = round(many["pass"]["buffer_utilization"] * slots)
    grew = (many["peak_rss_kb"] - few["peak_rss_kb"]) * 1024
    per = grew / max(mapped - few["keys"], 1)
    return (f"Memory: the map is sized at {OffsetMap.BYTES_PER_ENTRY} bytes an entry (what a "
            "dict entry with its 16-byte MD5 digest and offset takes, where Kafka's "
            "SkimpyOffsetMap takes 24), so the default dedupe buffer "
            f"({cfg.dedupe_buffer_size / MB:,.0f} MiB) caps a pass at {cap:,} keys. With "
            f"{many['keys']:,} distinct keys the pass mapped {mapped:,} of them"
            + (" (the rest wait for the next pass)" if mapped < many["keys"] else "")
            + f" and the peak RSS rose by {grew / MB:,.0f} MiB over the "
            f"{few['keys']:,}-key run, about {per:,.0f} bytes per extra entry: the buffer size "
            "bounds the map's memory.")


def render(res: Results, a: argparse.Namespace) -> str:
    lines: list[str] = []
    w = lines.append
    w(BEGIN)
    w("## Log cleaner (bench/bench_cleaner.py)")
    w("")
    w(f"`{command_line(a)}`: one pass of `clean_log` (storage/cleaner.py, in the calling "
      "thread) over a compacted log built directly on disk, no broker and no network: "
      f"{res.records:,} records of {VALUE_SIZE}-byte values (hex text, about 2:1 compressible) "
      "and 12-byte keys drawn at random (fixed seed) from the scenario's key set, appended with "
      f"`Log.append_as_leader` in batches of {BATCH_RECORDS}, segment.bytes "
      f"{res.segment_bytes / MB:g} MiB, then rolled so every record is below the active "
      "segment. Each scenario is the best of its runs (all runs in the last column), each run "
      "a fresh log in a new worker process and temporary directory. Input and output are the "
      "cleaner's own `CleanerStats` (bytes and records read and written by the cleaning "
      "phase); map s is the offset map phase, total s the whole pass from the stats "
      "(map, filtering, writing and fsyncing the cleaned segments, the swaps; planning is not "
      "in it); MiB/s and records/s are input over total, as Kafka's cleaner summary reports "
      "them. The log was just written, so the reads come from the page cache. Peak RSS is the "
      "worker's `ru_maxrss` (building the log included; the default "
      "128 MiB dedupe buffer bounds the map's entry count, not the dict's memory).")
    w("")
    header = ["scenario", "input MiB", "input records", "map s", "total s", "MiB/s",
              "records/s", "output MiB", "output records", "size reduction", "peak RSS MiB",
              "runs, total s"]
    w(table(header, rows(res), "lrrrrrrrrrrr"))
    w("")
    for name, why in res.skipped.items():
        w(f"Scenario {name} skipped: {why}.")
        w("")
    if "second" in res.runs:
        b = res.best("second")
        imm = b["immediate"]
        w(f"4a. A second `clean_log` right after the first, with its checkpoint "
          f"({b['first_pass']['end_offset']:,}): "
          + ("nothing is dirty, so it returns None after planning, in "
             f"{imm['wall_seconds'] * 1e3:.1f} ms."
             if imm["result"] is None else "it cleaned again (unexpected)."))
        w("")
    second = [sc for sc in SCENARIOS if sc.second_pass and sc.name in res.runs]
    if second:
        parts = []
        for sc in second:
            b = res.best(sc.name)
            first, p = b["first_pass"], b["pass"]
            parts.append(
                f"{sc.label.split('.')[0]}: the map covered only the "
                f"{p['map_messages_read']:,} new records ({p['map_seconds']:.2f} s), but the "
                f"cleaning phase read {p['bytes_read'] / MB:,.1f} MiB, {p['messages_read']:,} "
                f"records ({first['messages_written']:,} of them the first pass's output), in "
                f"{p['total_seconds']:.2f} s against {first['total_seconds']:.2f} s for the "
                "first pass")
        w("Second passes (the first pass's own figures are not in the table): "
          + "; ".join(parts) + ". The clean section is not skipped: like Kafka's cleaner "
          "(`groupSegmentsBySize(log.logSegments(0, endOffset), ...)`), every pass re-reads, "
          "re-filters and rewrites the segments from the log start to the end of the mapped "
          "section, so a second pass costs the whole clean section plus the new records: "
          "cheap when the first pass removed almost everything (4b), close to the first "
          "pass's cleaning phase when it removed nothing (4c).")
        w("")
    if "unique" in res.runs and "none" in res.runs:
        w(memory_sentence(res))
        w("")
    w(chart(res))
    w("")
    w("**What bounds it.** " + bound_sentence(res))
    w("")
    if res.profile:
        w("Top 5 functions of one pass of scenario 1 under cProfile, by cumulative time and "
          "by own time (cProfile slows the pass down; the shares matter, not the seconds):")
        w("")
        w(_profile_table(res.profile["cumulative"]))
        w("")
        w(_profile_table(res.profile["own"]))
        w("")
    w(table(["machine", ""], [[k, v] for k, v in res.facts.items()]))
    w(END)
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, help="records per log (1,000,000; --quick 100,000)")
    ap.add_argument("--repeat", type=int, help="runs per scenario, the best is kept (3; "
                                               "--quick 1)")
    ap.add_argument("--quick", action="store_true",
                    help="10x smaller (records and segment.bytes), one run: a smoke test")
    ap.add_argument("--profile", action="store_true",
                    help="one more run of scenario 1 under cProfile, reported in the section")
    ap.add_argument("--timeout", type=float, default=900.0, help="per run, seconds (900)")
    add_section_options(ap, "cleaner")
    a = ap.parse_args()
    if a.splice and not a.update_doc:
        ap.error("--splice needs --update-doc")
    a.records_given, a.repeat_given = a.records is not None, a.repeat is not None
    scale = 10 if a.quick else 1
    a.records = a.records if a.records is not None else 1_000_000 // scale
    a.repeat = a.repeat if a.repeat is not None else (1 if a.quick else 3)
    a.segment_bytes = SEGMENT_BYTES // scale
    a.profile = 5 if a.profile else 0
    if a.records < 1 or a.repeat < 1:
        ap.error("--records and --repeat must be at least 1")
    run_section(a, "Log cleaner", run_bench, render, BEGIN, END)


if __name__ == "__main__":
    main()
