"""A port a service must bind, held as the source port of an outgoing connection (KP302), read
from real `netstat -tanp` and `ss -tanp` output taken in a network namespace made for the test
(deleted after it): a loopback listener, and a client whose socket is bound to the port first.
The rows are also read as users paste them: grep'd, without their header."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import none_of, one, write
from lab.netns import Netns, lab_available

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Confidence, Severity
from kpdoctor.parse.sockets import parse_connections

pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))

HELD = 40005  # inside the kernel's default ephemeral range (32768-60999)
# a listener on 8443 and a connection to it from source port HELD, kept open while listed
_PROGRAM = f"""
import socket, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 8443)); srv.listen()
cli = socket.socket(); cli.bind(("127.0.0.1", {HELD})); cli.connect(("127.0.0.1", 8443))
conn, _ = srv.accept()
print("ready", flush=True)
time.sleep(30)
"""
# ingress-nginx's TCP services, in the form its documentation gives (the key: the port it listens on)
TCP_SERVICES = f"""apiVersion: v1
kind: ConfigMap
metadata:
  name: tcp-services
  namespace: ingress-nginx
data:
  "{HELD}": "default/example-go:8080"
  "40006": "default/other:9000"
"""


@pytest.fixture(scope="module")
def listings() -> Iterator[dict[str, str]]:
    with Netns() as ns:
        ns.check(["ip", "link", "set", "lo", "up"])
        proc = subprocess.Popen(ns.exec_argv([sys.executable, "-c", _PROGRAM]), stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            yield {"netstat": ns.check(["netstat", "-tanp"]), "ss": ns.check(["ss", "-tanp"])}
        finally:
            proc.kill()
            proc.wait()


def test_connections_of_netstat_and_ss(listings: dict[str, str]) -> None:
    for name, text in listings.items():
        held = [c for c in parse_connections(text) if c.local_port == HELD]
        assert len(held) == 1, (name, text)
        c = held[0]
        assert (c.local, c.remote, c.remote_port, c.proto) == ("127.0.0.1", "127.0.0.1", 8443, "tcp"), name
        assert c.state in ("ESTABLISHED", "ESTAB") and c.process and c.process.startswith("python"), (name, c)
        # the listener's accepted side is a connection too, on the listening port: never HELD's
        assert all(x.local_port in (HELD, 8443) for x in parse_connections(text)), name


def test_the_rows_a_grep_kept_are_read_without_their_header(listings: dict[str, str], tmp_path: Path) -> None:
    rows = "".join(ln + "\n" for ln in listings["netstat"].splitlines() if "python" in ln)
    path = write(tmp_path, "netstat.txt", rows)
    (art,) = load([path]).artifacts
    assert art.kind == Kind.LISTENERS and art.attrs.get("fragment") == "true"


def test_a_declared_port_held_by_an_outgoing_connection(listings: dict[str, str], tmp_path: Path) -> None:
    for name, text in listings.items():
        paths = [write(tmp_path, f"{name}.txt", text), write(tmp_path, "tcp-services.yaml", TCP_SERVICES)]
        report, _ = diagnose_paths(paths, min_severity=Severity.INFO)
        f = one(report, "KP302")
        assert f.severity == Severity.WARNING and f.confidence == Confidence.HIGH and not f.suspected, name
        assert f"port {HELD} ingress-nginx listens on for default/example-go:8080" in f.summary
        assert "is the source port of an outgoing connection" in f.summary and "40006" in f.summary
        assert any(f":{HELD}" in c.text for c in f.evidence if c.artifact.endswith(f"{name}.txt"))
    # the ConfigMap alone: the ports lie in the default range (suspected: the node's range decides)
    report, _ = diagnose_paths([write(tmp_path, "only.yaml", TCP_SERVICES)], min_severity=Severity.INFO)
    g = one(report, "KP302")
    assert g.suspected and "is the source port" not in g.summary
    # a ConfigMap of other data is not ingress-nginx's
    other = TCP_SERVICES.replace('"default/example-go:8080"', "some text")
    report, _ = diagnose_paths([write(tmp_path, "other.yaml", other)], min_severity=Severity.INFO)
    none_of(report, "KP302")
