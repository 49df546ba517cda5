"""Shared pieces of the broker benchmarks: machine facts, a broker subprocess, RSS/CPU sampling,
timed child processes, topic creation, progress on stderr and markdown helpers.

Everything here is bounded: every wait has a timeout, every process started is stopped (SIGTERM,
then SIGKILL) and every temporary directory is removed, also on errors and Ctrl-C.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
_T0 = time.monotonic()


# -- progress ---------------------------------------------------------------------------------
def progress(msg: str) -> None:
    """One line on stderr, stamped with the seconds since the benchmark started."""
    print(f"[{time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# -- machine facts ----------------------------------------------------------------------------
def _first(pattern: str, text: str, default: str = "?") -> str:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1).strip() if m else default


def _run_text(cmd: Sequence[str], timeout: float = 10) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_facts() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    meminfo = Path("/proc/meminfo").read_text()
    mem_kb = int(_first(r"^MemTotal:\s+(\d+)", meminfo, "0"))
    mhz = _first(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, "")
    facts = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": f"{os.cpu_count()} (nproc {_run_text(['nproc']) or '?'})",
        "cpu model": _first(r"^model name\s*:\s*(.*)$", cpuinfo)
        + (f" ({float(mhz):.0f} MHz reported)" if mhz else ""),
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "os": _first(r'^PRETTY_NAME="?([^"\n]*)', _read("/etc/os-release")),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load average at start": " ".join(_read("/proc/loadavg").split()[:3])
        + " (1/5/15 min; other work on the machine perturbs the figures)",
    }
    try:
        import confluent_kafka

        facts["confluent-kafka"] = (f"{confluent_kafka.version()} "
                                    f"(librdkafka {confluent_kafka.libversion()[0]})")
    except ImportError:
        facts["confluent-kafka"] = "not installed"
    kcat_v = _run_text(["kcat", "-V"])
    kcat_ver = _first(r"^Version ([\d.]+)", kcat_v)
    kcat_lib = _first(r"librdkafka ([\d.]+)", kcat_v)
    facts["kcat"] = f"{kcat_ver} (librdkafka {kcat_lib})" if kcat_v else "not installed"
    exported = os.environ.get("ODRADEK_BENCH_REV")
    if exported:
        facts["odradek"] = f"git {exported} (src/ of that commit, via BENCH_REV)"
        return facts
    rev = _run_text(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = _run_text(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no",
                       "--", "src"])
    facts["odradek"] = (f"git {rev}" + (" + uncommitted changes in src/" if dirty else "")
                        if rev else "?")
    return facts


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


# -- /proc sampling ---------------------------------------------------------------------------
def rss_kb(pid: int) -> int:
    """Resident set size (VmRSS) of `pid` in KiB, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (all its threads), in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class RssSampler:
    """Samples VmRSS of a process every `interval` seconds in a thread; keeps the peak."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(rss_kb(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(rss_kb(self.pid))

    @property
    def peak_kb(self) -> int:
        return max(self.samples, default=0)


# -- child processes --------------------------------------------------------------------------
@dataclass
class Timed:
    """A finished child process: wall time, its own CPU time (from wait4), exit code, output."""

    wall: float
    cpu: float
    returncode: int
    stdout: str = ""
    stderr: str = ""


def run_timed(cmd: Sequence[str], *, timeout: float, stdin_path: str | None = None,
              stdout_devnull: bool = False, env: dict[str, str] | None = None) -> Timed:
    """Run `cmd` to completion, killing it after `timeout` s. CPU time comes from wait4()."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            (open(stdin_path, "rb") if stdin_path else open(os.devnull, "rb")) as inp:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=inp,
                                stdout=subprocess.DEVNULL if stdout_devnull else out,
                                stderr=err, env=env, start_new_session=True)
        killer = threading.Timer(timeout, _kill_group, args=(proc.pid,))
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        timed = Timed(wall, usage.ru_utime + usage.ru_stime, proc.returncode,
                      out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    if killer.finished.is_set() and proc.returncode < 0:
        raise TimeoutError(f"{cmd[0]} did not finish within {timeout:.0f} s")
    return timed


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def python_worker(script: Path, *args: str) -> list[str]:
    return [sys.executable, str(script), *args]


# -- the broker under test --------------------------------------------------------------------
READY = re.compile(r"odradek broker (\d+) ready; bootstrap.servers=(\S+)")


@dataclass
class BrokerProcess:
    """`odradek broker` in a subprocess with its own temporary log dir."""

    overrides: dict[str, str] = field(default_factory=dict)
    start_timeout: float = 30.0
    proc: subprocess.Popen[bytes] | None = None
    tmpdir: Path | None = None
    bootstrap: str = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_dir(self) -> Path:
        assert self.tmpdir is not None
        return self.tmpdir / "data"

    def start(self) -> BrokerProcess:
        self.tmpdir = Path(tempfile.mkdtemp(prefix="odradek-bench-"))
        props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
                 "log.dirs": str(self.log_dir), **self.overrides}
        exe = shutil.which("odradek")
        cmd = [exe] if exe else [sys.executable, "-m", "odradek.cli"]
        cmd.append("broker")
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        self._stderr = open(self.tmpdir / "broker.stderr", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     start_new_session=True)
        found: list[str] = []

        def read_stdout() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:  # keep draining so the pipe never fills
                m = READY.search(raw.decode(errors="replace"))
                if m and not found:
                    found.append(m.group(2))

        threading.Thread(target=read_stdout, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not found:
            if self.proc.poll() is not None:
                tail = self.stderr_tail()
                self.stop()
                raise RuntimeError(f"broker exited with {self.proc.returncode} before ready; "
                                   f"its stderr ends with:\n{tail}")
            if time.monotonic() > deadline:
                tail = self.stderr_tail()
                self.stop()
                raise TimeoutError(f"broker not ready within {self.start_timeout:.0f} s; its "
                                   f"stderr ends with:\n{tail}")
            time.sleep(0.02)
        self.bootstrap = found[0]
        return self

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            text = (self.tmpdir / "broker.stderr").read_text(errors="replace")  # type: ignore[operator]
        except (OSError, TypeError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def errors_logged(self) -> list[str]:
        try:
            text = (self.tmpdir / "broker.stderr").read_text(errors="replace")  # type: ignore[operator]
        except (OSError, TypeError):
            return []
        return [ln for ln in text.splitlines() if " ERROR " in ln]

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; remove the log dir. Returns the exit code."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    code = self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    progress(f"broker {self.proc.pid} ignored SIGTERM for {timeout:.0f} s; "
                             "killing it")
                    _kill_group(self.proc.pid)
                    code = self.proc.wait(5)
            else:
                code = self.proc.returncode
        if getattr(self, "_stderr", None) is not None:
            self._stderr.close()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        return code

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def produce_records(producer: Any, topic: str, value: bytes, records: int) -> None:
    """`records` copies of `value` through a confluent-kafka Producer as fast as it takes them
    (waiting on poll while its queue is full); the caller flushes and times."""
    produce, poll = producer.produce, producer.poll
    for _ in range(records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.001)


def ensure_topic(bootstrap: str, name: str, partitions: int, timeout: float = 15.0) -> str:
    """Create `name` with `partitions` partitions (RF 1). Tries CreateTopics through
    confluent-kafka's AdminClient; if that fails, falls back to auto-creation by a Metadata
    request (the broker must then run with num.partitions=`partitions`). Returns how."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    how = "CreateTopics"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.create_topics([NewTopic(name, partitions, 1)],
                            operation_timeout=timeout)[name].result(timeout)
    except KafkaException as exc:
        how = f"auto-created by Metadata (CreateTopics failed: {exc.args[0].str()})"
    except Exception as exc:  # e.g. a timeout: fall back too, and say so
        how = f"auto-created by Metadata (CreateTopics failed: {exc!r})"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=timeout)  # auto-creates if enabled
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return how
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} with {partitions} partitions did not appear")


def topic_record_count(bootstrap: str, name: str, timeout: float = 10.0) -> int:
    """Sum of the high watermarks of the topic's partitions (log start offsets are 0 here)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-bench-watermarks",
                  "enable.auto.commit": False, "log_level": 0})
    try:
        md = c.list_topics(topic=name, timeout=timeout)
        total = 0
        for p in md.topics[name].partitions:
            low, high = c.get_watermark_offsets(TopicPartition(name, p), timeout=timeout)
            total += high - low
        return total
    finally:
        c.close()


# -- formatting -------------------------------------------------------------------------------
def fmt_int(n: float) -> str:
    return f"{n:,.0f}"


def fmt_mb(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e6:,.1f}"


def fmt_mib(kb: int) -> str:
    return f"{kb / 1024:,.1f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table; `align` is one char per column: l (default) or r."""
    align = align.ljust(len(header), "l")
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")


def collapsed_stacks(raw: Path) -> Iterator[tuple[list[str], int]]:
    """(frames, sample count) per line of py-spy's raw (collapsed) output, each frame as
    `function (file)` with the line number dropped."""
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for f in stack.split(";"):
            m = _FRAME.match(f)
            frames.append(f"{m.group(1)} ({m.group(2)})" if m else f)
        yield frames, int(count)


def splice_section(section: str, doc: Path, begin: str, end: str) -> None:
    """Replace the part of `doc` between the markers `begin` and `end` (inclusive) by
    `section`, or append `section` when the markers are missing; nothing else changes."""
    text = doc.read_text() if doc.exists() else ""
    m = re.search(re.escape(begin) + r".*?" + re.escape(end), text, re.S)
    if m:
        text = text[:m.start()] + section.strip() + text[m.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + section.strip() + "\n"
    doc.write_text(text)


def add_section_options(ap: Any, markers: str) -> None:
    """The options of a section benchmark (bench_spark.py, bench_client.py, bench_cleaner.py)
    that say where its markdown goes; `markers` names them in the help."""
    ap.add_argument("--output", type=Path, help="write the markdown section to this file")
    ap.add_argument("--update-doc", type=Path, metavar="DOC",
                    help=f"replace the section between the {markers} markers in DOC")
    ap.add_argument("--splice", type=Path, metavar="MD",
                    help="with --update-doc: splice this already generated section, no run")


def run_section(a: Any, section: str, run: Callable[[Any], Any], render: Callable[[Any, Any], str],
                begin: str, end: str) -> None:
    """The end of a section benchmark's main: with `--splice MD` only splice a generated
    section into `--update-doc`; otherwise run, render, and write the markdown to `--output`,
    into `--update-doc` (between `begin` and `end`), or to stdout. `run(a)` returns a result
    with a `started` (time.monotonic()) attribute."""
    if a.splice:
        splice_section(a.splice.read_text(), a.update_doc, begin, end)
        progress(f"spliced {a.splice} into {a.update_doc}")
        return
    res = run(a)
    text = render(res, a)
    if a.output:
        a.output.write_text(text + "\n")
    if a.update_doc:
        splice_section(text, a.update_doc, begin, end)
        progress(f"updated the {section} section of {a.update_doc}")
    if not a.output and not a.update_doc:
        print(text)
    progress(f"done in {time.monotonic() - res.started:.0f} s")
