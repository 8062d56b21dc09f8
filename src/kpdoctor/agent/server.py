"""The agent's HTTP endpoints.

``GET /metrics`` (Prometheus text format), ``GET /healthz`` (the cycle thread is alive and not
stuck: 200, else 503), ``GET /readyz`` (a cycle has produced a report: 200, else 503 with why),
``GET /report`` (the last cycle's JSON report, ``kpdoctor.report/v1``, findings as reported) and
``POST /run`` (a cycle now; ``?wait=SECONDS`` answers when it has finished). ``/run`` and
``/report`` are answered only to clients on the loopback: what a node's rules say is for the
node's operators, and a cycle on demand costs CPU.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kpdoctor.agent.loop import Agent
from kpdoctor.agent.metrics import AgentCollector


class AgentServer:
    """Serves one agent on ``host:port`` from a background thread."""

    def __init__(self, agent: Agent, host: str = "127.0.0.1", port: int = 9847) -> None:
        self.agent = agent
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(AgentCollector(agent))
        self.alive = threading.Event()  # set by the cycle thread's owner while it runs
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kpdoctor-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def health(self) -> tuple[bool, str]:
        """Alive: the cycle thread runs, and no cycle has run for more than three intervals."""
        if not self.alive.is_set():
            return False, "the cycle thread is not running"
        st = self.agent.status()
        if st.running and st.last_start is not None:
            limit = 3 * max(self.agent.opts.interval, self.agent.opts.timeout)
            if time.monotonic() - st.last_start > limit:
                return False, f"a cycle has been running for more than {limit:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        st = self.agent.status()
        if st.report is None:
            return False, st.last_error or "no cycle has finished yet"
        missing = [p for p, ok in st.sources.items() if not ok]
        note = f" (not current: {', '.join(missing)})" if missing else ""
        return True, f"ok: cycle {st.cycle}{note}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _local(self) -> bool:
                try:
                    return ipaddress.ip_address(self.client_address[0]).is_loopback
                except ValueError:
                    return False

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path == "/metrics":
                    self._send(200, generate_latest(server.registry), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok, why = server.health() if path == "/healthz" else server.ready()
                    self._send(200 if ok else 503, (why + "\n").encode())
                elif path == "/report":
                    if not self._local():
                        self._send(403, b"only from this node\n")
                        return
                    st = server.agent.status()
                    if st.report is None:
                        self._send(503, b"no cycle has finished yet\n")
                        return
                    doc = st.report.to_json()
                    keys = {(f.code, f.cause, str(f.subject.get("service") or "")) for f in st.findings}
                    doc["findings"] = [
                        f
                        for f in doc["findings"]
                        if (f["code"], f["cause"], str((f.get("subject") or {}).get("service") or "")) in keys
                    ]
                    self._send(200, json.dumps(doc).encode(), "application/json")
                else:
                    self._send(404, b"not found: /metrics /healthz /readyz /report, POST /run\n")

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/run":
                    self._send(404, b"not found\n")
                    return
                if not self._local():
                    self._send(403, b"only from this node\n")
                    return
                n = server.agent.request()
                wait = parse_qs(parts.query).get("wait", [""])[-1]
                if not wait:
                    self._send(202, json.dumps({"cycle": n}).encode(), "application/json")
                    return
                try:
                    seconds = min(float(wait), 3600.0)
                except ValueError:
                    self._send(400, b"wait: a number of seconds\n")
                    return
                done = server.agent.wait_for(n, seconds)
                st = server.agent.status()
                body = {
                    "cycle": n,
                    "finished": done,
                    "findings": [{"code": f.code, "cause": f.cause, "summary": f.summary} for f in st.findings],
                }
                self._send(200 if done else 504, json.dumps(body).encode(), "application/json")

        return Handler
