"""`odradek cluster` with its HTTP listeners: the console addresses printed, --console-faults,
and --log-config routing Kafka's request log to a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_http_listener import get_json

SRC = Path(__file__).resolve().parents[2] / "src"


def test_odradek_cluster_prints_consoles_and_applies_log_config(tmp_path: Path) -> None:
    requests_log = tmp_path / "kafka-request.log"
    config = tmp_path / "log.json"
    config.write_text(json.dumps({
        "handlers": {"f": {"class": "logging.FileHandler", "filename": str(requests_log)}},
        "loggers": {"kafka.request.logger": {"level": "DEBUG", "handlers": ["f"],
                                             "propagate": False}}}))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.cli", "cluster", "--brokers", "2", "--base-port", "0",
         "--data-dir", str(tmp_path / "data"), "--console-faults", "--log-config",
         str(config), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        consoles = []
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        while len(consoles) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "no console lines"
            line = proc.stdout.readline()
            if line.startswith("console: "):
                consoles.append(line.split()[1])
        assert all(u.startswith("http://127.0.0.1:") and u.endswith("/") for u in consoles)
        info = get_json(consoles[1] + "api/cluster")
        assert info["broker_id"] == 1 and info["faults_enabled"] is True
        assert len(info["brokers"]) == 2
        deadline = time.monotonic() + 10
        while "Completed request:" not in (requests_log.read_text()
                                           if requests_log.exists() else ""):
            assert time.monotonic() < deadline, "no request log lines in the file"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_bad_log_config_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "log.json"
    bad.write_text("[1, 2]")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "odradek.cli", "cluster", "--brokers", "1", "--base-port", "0",
         "--data-dir", str(tmp_path / "data"), "--log-config", str(bad)],
        capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode != 0 and "log.json" in proc.stderr
