"""A DNS query lost on the way, with the real resolvers: how long the lookup took says so.

In a network namespace, a responder on the namespace's loopback (port 53) drops the first query it
gets and answers the rest (one A record; an empty answer for AAAA), as a path that loses one packet
does. The real tools, timed with bash's `time`: BIND's dig (it prints the try that timed out, then
the answer; 5 s), glibc's resolver through `getent hosts` (the A and AAAA pair, one of them lost;
5 s) and BusyBox's nslookup (2.5 s: its 5 s over two attempts). kpdoctor reads each session as a
user pastes it and suspects the conntrack insert race (KP300), asking for `conntrack -S`; the
same lookups with nothing dropped (a few milliseconds) give no such finding. Nothing leaves the
namespace: every packet goes to its own loopback.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .kpdoctor_run import diagnose_json
from .netns import Netns, require_lab

require_lab()
for _tool in ("dig", "getent", "busybox", "bash"):
    if shutil.which(_tool) is None:
        pytest.skip(f"{_tool} is not installed (scripts/test installs it as root)", allow_module_level=True)

NAME = "kubernetes.default.svc.cluster.local"
RESPONDER = r"""
import socket, struct, sys
drop = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
print("ready", flush=True)
seen = 0
while True:
    data, addr = s.recvfrom(4096)
    seen += 1
    if seen <= drop:
        continue
    qid = struct.unpack(">H", data[:2])[0]
    i = 12
    while data[i] != 0:
        i += data[i] + 1
    question, qtype = data[12 : i + 5], struct.unpack(">H", data[i + 1 : i + 3])[0]
    answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton("10.96.0.1") if qtype == 1 else b""
    s.sendto(struct.pack(">HHHHHH", qid, 0x8180, 1, 1 if answer else 0, 0, 0) + question + answer, addr)
"""
COMMANDS = {
    "dig": f"time dig @127.0.0.1 {NAME}",
    "getent": f"time getent hosts {NAME}",
    "busybox nslookup": f"time busybox nslookup {NAME} 127.0.0.1",
}


@pytest.fixture(scope="module")
def node() -> Iterator[Netns]:
    """The namespace, its loopback up, its resolv.conf (read by glibc inside it) naming the responder."""
    with Netns() as ns:
        ns.check(["ip", "link", "set", "lo", "up"])
        etc = Path("/etc/netns") / ns.name
        etc.mkdir(parents=True)
        try:
            (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions attempts:2\n")
            yield ns
        finally:
            shutil.rmtree(etc)


def _session(ns: Netns, tool: str, drop: int) -> str:
    """The timed lookup as a terminal shows it: the prompt and command, then what it printed."""
    import subprocess

    srv = subprocess.Popen(
        ns.exec_argv([sys.executable, "-c", RESPONDER, str(drop)]),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        res = ns.run(["bash", "-c", COMMANDS[tool] + " 2>&1"], timeout=60)
    finally:
        srv.kill()
        srv.wait(timeout=10)
    return f"root@node-1:~# {COMMANDS[tool]}\n{res.stdout}{res.stderr}"


def _kp300(report: dict[str, Any]) -> list[dict[str, Any]]:
    def walk(fs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for f in fs:
            yield f
            yield from walk(f.get("folded") or [])

    return [f for f in walk(report["findings"]) if f["code"] == "KP300"]


@pytest.mark.parametrize(("tool", "waited"), [("dig", 5.0), ("getent", 5.0), ("busybox nslookup", 2.5)])
def test_a_lookup_that_lost_its_first_query_is_read_as_the_resolvers_wait(
    node: Netns, tmp_path: Path, tool: str, waited: float
) -> None:
    session = _session(node, tool, drop=1)
    assert "real" in session, session
    path = tmp_path / "session.txt"
    path.write_text(session)
    (f,) = _kp300(diagnose_json(path))
    assert f["cause"] == "conntrack-insert-race" and f["suspected"] and f["severity"] == "info", f
    assert f"a {tool} of {NAME}" in f["summary"], f["summary"]
    assert any("conntrack -S" in d for d in f["decided_by"])
    assert ("2.5 s (musl, BusyBox)" if waited == 2.5 else "5 s (glibc") in f["summary"]
    if tool == "dig":  # it prints the lost try itself
        assert "communications error to 127.0.0.1#53: timed out" in f["evidence"][0]["text"]


@pytest.mark.parametrize("tool", ["dig", "getent"])
def test_the_same_lookups_answered_at_once_are_no_lead(node: Netns, tmp_path: Path, tool: str) -> None:
    session = _session(node, tool, drop=0)
    assert "real\t0m0." in session, session
    path = tmp_path / "session.txt"
    path.write_text(session)
    assert _kp300(diagnose_json(path)) == []
