"""The agent's HTTP endpoints.

``GET /metrics`` (Prometheus text format), ``GET /healthz`` (the cycle thread is alive and not
stuck: 200, else 503), ``GET /readyz`` (a cycle has produced a report: 200, else 503 with why),
``GET /report`` (the last cycle's JSON report, ``kpdoctor.report/v1``, findings as reported) and
``POST /run`` (a cycle now; ``?wait=SECONDS`` answers when it has finished). ``/run`` and
``/report`` are answered only to clients on the loopback: what a node's rules say is for the
node's operators, and a cycle on demand costs CPU.

The port faces the node's network, and no client may take it from the kubelet's probes or from
Prometheus. One thread serves every connection through a selector, so an idle client costs a
socket, never a thread: a request's head must arrive whole within :data:`READ_SECONDS` (a
deadline, not a timeout between bytes: a byte a second does not keep it open) and within
:data:`MAX_HEAD` bytes, its answer be taken within :data:`WRITE_SECONDS`, or the connection is
dropped. At most :data:`MAX_CONNECTIONS` are open: a new one past that drops the oldest one
still sending its request (an honest client sends it at once). ``/healthz``, ``/readyz`` and
``/metrics`` are answered by that thread, so they are answered while clients hold connections;
``/report`` and ``POST /run?wait`` (loopback only: a large answer, a wait for a cycle) get a
thread of their own, :data:`MAX_WORKERS` at a time. Every answer closes its connection.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kpdoctor.agent.loop import Agent
from kpdoctor.agent.metrics import AgentCollector

READ_SECONDS = 5.0  # a request's head, whole
WRITE_SECONDS = 10.0  # an answer, taken whole
MAX_HEAD = 8192  # bytes of request line and headers
MAX_CONNECTIONS = 64  # open at once (those handed to a worker aside)
MAX_WORKERS = 4  # /report and /run?wait answered at once
BACKLOG = 128
TEXT = "text/plain; charset=utf-8"

Answer = tuple[int, bytes, str]  # status, body, content type


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    opened: float
    due: float  # dropped at this instant unless done (monotonic)
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the answer, while it is sent


def _listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, addr = socket.getaddrinfo(
        host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _response(code: int, body: bytes, ctype: str, head_only: bool = False) -> bytes:
    try:
        phrase = HTTPStatus(code).phrase
    except ValueError:
        phrase = ""
    head = (
        f"HTTP/1.1 {code} {phrase}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\nCache-Control: no-store\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)


class AgentServer:
    """Serves one agent on ``host:port`` (and on each of ``also``) from a background thread."""

    def __init__(
        self, agent: Agent, host: str = "127.0.0.1", port: int = 9847, *, also: Sequence[tuple[str, int]] = ()
    ) -> None:
        self.agent = agent
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(AgentCollector(agent))
        self.alive = threading.Event()  # set by the cycle thread's owner while it runs
        self._listeners: list[socket.socket] = []
        try:
            for h, p in [(host, port), *also]:
                self._listeners.append(_listen(h, p))
        except OSError:
            self._close_listeners()
            raise
        self._sel = selectors.DefaultSelector()
        self._conns: dict[socket.socket, _Conn] = {}
        self._workers = threading.BoundedSemaphore(MAX_WORKERS)
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread = threading.Thread(target=self._serve, name="kpdoctor-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self.addresses[0]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self._listeners]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._close_listeners()
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _close_listeners(self) -> None:
        for s in self._listeners:
            s.close()

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

    # -- the connections -------------------------------------------------------------------
    def _serve(self) -> None:
        for ls in self._listeners:
            self._sel.register(ls, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        while not self._stop.is_set():
            now = time.monotonic()
            due = min((c.due for c in self._conns.values()), default=now + 1.0)
            for key, events in self._sel.select(max(0.0, min(due - now, 1.0))):
                if key.data is None:
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                elif isinstance(key.data, _Conn) and key.data.sock in self._conns:
                    if events & selectors.EVENT_WRITE:
                        self._send(key.data)
                    elif events & selectors.EVENT_READ:
                        self._read(key.data)
            now = time.monotonic()
            for conn in [c for c in self._conns.values() if c.due <= now]:
                self._drop(conn)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, a connection reset while queued: the next one
                return
            sock.setblocking(False)
            if len(self._conns) >= MAX_CONNECTIONS:
                waiting = [c for c in self._conns.values() if c.out is None]
                if not waiting:  # all of them being answered: this one waits for no one
                    sock.close()
                    continue
                self._drop(min(waiting, key=lambda c: c.opened))
            now = time.monotonic()
            conn = _Conn(sock, str(addr[0]), now, now + READ_SECONDS)
            self._conns[sock] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(conn.sock)
        conn.sock.close()

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)
            return
        conn.head += data
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.head) > MAX_HEAD:
                self._answer(conn, (431, b"request header fields too large\n", TEXT))
            return
        if end > MAX_HEAD:
            self._answer(conn, (431, b"request header fields too large\n", TEXT))
            return
        self._dispatch(conn, bytes(conn.head[:end]))

    def _answer(self, conn: _Conn, answer: Answer, head_only: bool = False) -> None:
        """Send ``answer`` from the selector's thread (as far as the socket takes it now)."""
        code, body, ctype = answer
        conn.out = memoryview(_response(code, body, ctype, head_only))
        conn.due = time.monotonic() + WRITE_SECONDS
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        if conn.out is None:
            return
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        conn.out = conn.out[sent:]
        if not len(conn.out):
            self._drop(conn)

    def _hand_off(self, conn: _Conn, job: Callable[[], Answer]) -> None:
        """Answer with ``job()`` from a thread of its own (at most :data:`MAX_WORKERS` at once)."""
        if not self._workers.acquire(blocking=False):
            self._answer(conn, (503, b"busy: too many /report or /run?wait requests at once\n", TEXT))
            return
        self._conns.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(conn.sock)
        threading.Thread(target=self._work, args=(conn, job), name="kpdoctor-http-worker", daemon=True).start()

    def _work(self, conn: _Conn, job: Callable[[], Answer]) -> None:
        try:
            code, body, ctype = job()
            data = memoryview(_response(code, body, ctype))
            end = time.monotonic() + WRITE_SECONDS
            conn.sock.setblocking(True)
            while len(data):
                left = end - time.monotonic()
                if left <= 0:
                    break
                conn.sock.settimeout(left)
                data = data[conn.sock.send(data) :]
        except OSError:
            pass
        finally:
            conn.sock.close()
            self._workers.release()

    # -- the requests ----------------------------------------------------------------------
    def _dispatch(self, conn: _Conn, head: bytes) -> None:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._answer(conn, (400, b"bad request\n", TEXT))
            return
        method, target = parts[0], urlsplit(parts[1])
        path, query = target.path, parse_qs(target.query)
        try:
            local = ipaddress.ip_address(conn.peer.split("%")[0]).is_loopback
        except ValueError:
            local = False
        head_only = method == "HEAD"
        if method in ("GET", "HEAD"):
            if path == "/metrics":
                self._answer(conn, (200, generate_latest(self.registry), CONTENT_TYPE_LATEST), head_only)
            elif path in ("/healthz", "/readyz"):
                ok, why = self.health() if path == "/healthz" else self.ready()
                self._answer(conn, (200 if ok else 503, (why + "\n").encode(), TEXT), head_only)
            elif path == "/report":
                if not local:
                    self._answer(conn, (403, b"only from this node\n", TEXT), head_only)
                else:
                    self._hand_off(conn, self._report)
            else:
                self._answer(conn, (404, b"not found: /metrics /healthz /readyz /report, POST /run\n", TEXT), head_only)
        elif method == "POST":
            if path != "/run":
                self._answer(conn, (404, b"not found\n", TEXT))
            elif not local:
                self._answer(conn, (403, b"only from this node\n", TEXT))
            else:
                self._run(conn, query.get("wait", [""])[-1])
        else:
            self._answer(conn, (405, b"method not allowed: GET, or POST /run\n", TEXT))

    def _report(self) -> Answer:
        st = self.agent.status()
        if st.report is None:
            return 503, b"no cycle has finished yet\n", TEXT
        doc = st.report.to_json()
        keys = {(f.code, f.cause, str(f.subject.get("service") or "")) for f in st.findings}
        doc["findings"] = [
            f
            for f in doc["findings"]
            if (f["code"], f["cause"], str((f.get("subject") or {}).get("service") or "")) in keys
        ]
        return 200, json.dumps(doc).encode(), "application/json"

    def _run(self, conn: _Conn, wait: str) -> None:
        n = self.agent.request()
        if not wait:
            self._answer(conn, (202, json.dumps({"cycle": n}).encode(), "application/json"))
            return
        try:
            seconds = min(float(wait), 3600.0)
        except ValueError:
            seconds = float("nan")
        if not seconds >= 0:
            self._answer(conn, (400, b"wait: a number of seconds\n", TEXT))
            return

        def waited() -> Answer:
            done = self.agent.wait_for(n, seconds)
            st = self.agent.status()
            body = {
                "cycle": n,
                "finished": done,
                "findings": [{"code": f.code, "cause": f.cause, "summary": f.summary} for f in st.findings],
            }
            return 200 if done else 504, json.dumps(body).encode(), "application/json"

        self._hand_off(conn, waited)
