"""A tiny stand-in for the broker's HTTP listener, for the console's layout tests only: it serves
the real static files and canned JSON in the shape of the console API, records the POSTs, and can
go away and come back on the same port (a broker that is briefly unreachable)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlparse

CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript",
                 ".css": "text/css", ".png": "image/png"}


def static_file(name: str) -> bytes:
    return resources.files("odradek.console").joinpath("static", name).read_bytes()


class FakeApi:
    def __init__(self) -> None:
        self.cluster: dict[str, Any] = {
            "cluster_id": "fake", "broker_id": 1, "controller": {"id": 2, "epoch": 7},
            "brokers": [{"id": i, "host": "127.0.0.1", "port": 9090 + i, "alive": True}
                        for i in (1, 2, 3)],
            "under_replicated": [], "offline": [], "faults_enabled": False,
            "fault_actions": ["kill", "restart"], "csrf_token": "token-123"}
        self.topics: list[dict[str, Any]] = []
        self.topic_details: dict[str, dict[str, Any]] = {}
        self.groups: list[dict[str, Any]] = []
        self.group_details: dict[str, dict[str, Any]] = {}
        self.timeline: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] | None = None  # None: no /api/faults (404)
        self.history: dict[str, list[list[float]]] = {}
        self.posts: list[tuple[str, dict[str, str], Any]] = []
        self.lock = threading.Lock()
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/":
                    self.send(200, static_file("index.html"), CONTENT_TYPES[".html"])
                    return
                if url.path.startswith("/static/"):
                    name = url.path.removeprefix("/static/")
                    try:
                        body = static_file(name)
                    except (FileNotFoundError, IsADirectoryError):
                        self.send(404, b"not found", "text/plain")
                        return
                    self.send(200, body, CONTENT_TYPES.get("." + name.rsplit(".", 1)[-1],
                                                           "application/octet-stream"))
                    return
                with api.lock:
                    answer = api.answer(url.path, parse_qs(url.query))
                if answer is None:
                    self.send(404, b'{"error": "not found"}', "application/json")
                else:
                    self.send(200, json.dumps(answer).encode(), "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with api.lock:
                    api.posts.append((self.path, dict(self.headers.items()), body))
                self.send(200, b'{"ok": true}', "application/json")

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def answer(self, path: str, query: dict[str, list[str]]) -> Any:
        if path == "/api/cluster":
            return self.cluster
        if path == "/api/topics":
            return self.topics
        if path.startswith("/api/topics/"):
            return self.topic_details.get(path.removeprefix("/api/topics/"))
        if path == "/api/groups":
            return self.groups
        if path.startswith("/api/groups/"):
            return self.group_details.get(path.removeprefix("/api/groups/"))
        if path == "/api/timeline":
            since = int(query.get("since_ms", ["0"])[0])
            return [e for e in self.timeline if e["time_ms"] > since]
        if path == "/api/faults":
            return self.faults
        if path == "/api/metrics/history":
            names = query.get("names", [""])[0].split(",")
            return {n: self.history[n] for n in names if n in self.history}
        return None
