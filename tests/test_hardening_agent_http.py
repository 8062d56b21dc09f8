"""The agent's HTTP port cannot be exhausted by idle clients (issue 36, item 3).

Clients on loopback open connections to a real :class:`AgentServer` and send nothing, or their
request a byte at a time: the server drops them after its read deadline (however the bytes
trickle), keeps at most its cap of connections open (dropping the oldest that has not sent its
request), never spends a thread per connection, listens with a real backlog, and answers
``/healthz`` all the while.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from kpdoctor.agent import server as server_mod
from kpdoctor.agent.loop import Agent, AgentOptions
from kpdoctor.agent.server import AgentServer


def _agent() -> Agent:
    return Agent(AgentOptions(node="test-node", nice=0), collect=lambda: ([], []))


@pytest.fixture
def served() -> Iterator[AgentServer]:
    server = AgentServer(_agent(), "127.0.0.1", 0)
    server.alive.set()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _connect(server: AgentServer) -> socket.socket:
    return socket.create_connection(server.address, timeout=5)


def _get(server: AgentServer | tuple[str, int], path: str, method: str = "GET", timeout: float = 2.0
         ) -> tuple[int, bytes]:
    address = server.address if isinstance(server, AgentServer) else server
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _dropped(s: socket.socket, within: float) -> bool:
    """Whether the server closed ``s`` within ``within`` seconds (it sends nothing first)."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _trickle(s: socket.socket, stop: threading.Event, every: float) -> None:
    """A request head a byte every ``every`` seconds, never finished in time."""
    line = b"GET /healthz HTTP/1.1\r\nHost: " + b"x" * 1000
    for i in range(len(line)):
        if stop.wait(every):
            return
        try:
            s.send(line[i : i + 1])
        except OSError:
            return


@pytest.mark.parametrize("read_seconds", [0.5, 1.5])
@pytest.mark.parametrize("kind", ["silent", "trickle"])
def test_idle_and_trickling_clients_are_dropped_after_the_read_deadline(
    kind: str, read_seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_mod, "READ_SECONDS", read_seconds, raising=False)
    server = AgentServer(_agent(), "127.0.0.1", 0)
    server.alive.set()
    server.start()
    stop = threading.Event()
    socks = [_connect(server) for _ in range(5)]
    try:
        if kind == "trickle":  # a byte every 0.2 s: each comes long before any per-read timeout
            for s in socks:
                threading.Thread(target=_trickle, args=(s, stop, 0.2), daemon=True).start()
        t0 = time.monotonic()
        assert all(_dropped(s, read_seconds + 1.5) for s in socks), "a client that sent no whole request is still connected"
        assert time.monotonic() - t0 < read_seconds + 1.5
        assert _get(server, "/healthz") == (200, b"ok\n")
    finally:
        stop.set()
        for s in socks:
            s.close()
        server.stop()


@pytest.mark.parametrize("clients", [50, 300])
def test_health_answers_while_idle_clients_hold_connections_and_no_thread_is_spent_on_them(
    served: AgentServer, clients: int
) -> None:
    before = threading.active_count()
    socks: list[socket.socket] = []
    try:
        for _ in range(clients):
            socks.append(_connect(served))
        time.sleep(0.3)  # the server has accepted them
        assert threading.active_count() - before <= 3, f"{threading.active_count() - before} threads for {clients} clients"
        for _ in range(5):
            t0 = time.monotonic()
            assert _get(served, "/healthz") == (200, b"ok\n")
            assert time.monotonic() - t0 < 1.0
        code, body = _get(served, "/metrics")
        assert code == 200 and b"kpdoctor_build_info" in body
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("extra", [10, 40])
def test_connections_beyond_the_cap_drop_the_oldest_waiting_one(
    extra: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a read deadline far away, what closes the first connections is the cap: each new
    connection past it drops the oldest one that has not sent its request."""
    monkeypatch.setattr(server_mod, "READ_SECONDS", 60.0, raising=False)
    cap = int(getattr(server_mod, "MAX_CONNECTIONS", 64))
    server = AgentServer(_agent(), "127.0.0.1", 0)
    server.alive.set()
    server.start()
    socks: list[socket.socket] = []
    try:
        for _ in range(cap + extra):
            socks.append(_connect(server))
            time.sleep(0.002)  # accepted in this order
        time.sleep(0.3)
        oldest, newest = socks[:extra], socks[-(cap - extra) :]
        assert all(_dropped(s, 1.0) for s in oldest), "connections past the cap were all kept"
        assert not any(_dropped(s, 0.05) for s in newest)
        assert _get(server, "/healthz") == (200, b"ok\n")  # the probe gets in: it drops the next oldest
    finally:
        for s in socks:
            s.close()
        server.stop()


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")
def test_the_listen_backlog_is_not_5(served: AgentServer) -> None:
    port = served.address[1]
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10).stdout
    fields = out.split()
    assert fields, out
    assert int(fields[2]) >= 128  # a listening socket's Send-Q is its backlog


def test_the_endpoints_still_answer(served: AgentServer) -> None:
    assert _get(served, "/readyz") == (503, b"no cycle has finished yet\n")
    assert _get(served, "/report")[0] == 503  # loopback: answered (no cycle yet)
    assert _get(served, "/nothing")[0] == 404
    assert _get(served, "/healthz", method="DELETE")[0] in (405, 501)
    code, body = _get(served, "/run", method="POST")
    assert code == 202 and b'"cycle": 1' in body
    with socket.create_connection(served.address, timeout=5) as s:  # a head larger than any request
        s.sendall(b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(100).split()[1] in (b"431", b"400")


def test_run_and_wait_answers_when_the_cycle_is_done() -> None:
    agent = _agent()
    server = AgentServer(agent, "127.0.0.1", 0, also=[("127.0.0.2", 0)])
    server.alive.set()
    server.start()
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    try:
        code, body = _get(server, "/run?wait=30", method="POST", timeout=35)
        assert code == 200 and b'"finished": true' in body
        assert _get(server, "/readyz")[0] == 200
        assert server.addresses[1][0] == "127.0.0.2"
        assert _get(server.addresses[1], "/healthz") == (200, b"ok\n")  # the other address answers as well
    finally:
        stop.set()
        agent.request()
        loop.join(timeout=10)
        server.stop()
