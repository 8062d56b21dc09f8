"""A Go program's log that is kube-proxy's by where it came from (its file's name, or the command
that printed it) is read as kube-proxy's log although no line in it is one only kube-proxy prints:
client-go's request log at -v=6 is such a log, and its GET of kube-proxy's own Node answered 404
is the failed Node lookup (KP111). A name that says another program keeps the log unread.

The client-go lines are real: kube-proxy 1.20.2 run here with `--hostname-override=$(NODE_NAME)
--v=6` against the lab's apiserver (tests/lab/test_real_kube_proxy.py runs it), and the
structured form as kubectl 1.3x prints it (posted in kubeadm and EKS write-ups: `round_trippers.go:632]
"Response" verb="GET" url="..." status="200 OK" milliseconds=3`), with a Node's URL and a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.bundle.sniff import sniff_named
from kpdoctor.model import Report

Diag = Callable[..., Report]

GET_404 = (
    "I1129 14:59:55.542853   21942 round_trippers.go:445] GET "
    "https://192.168.250.2:6443/api/v1/nodes/$%28node_name%29 404 Not Found in 9 milliseconds\n"
)
HEADERS = "I1129 14:59:55.542900   21942 round_trippers.go:449] Response Headers:\n"
STRUCTURED_404 = (
    'I0318 15:38:16.750759   42277 round_trippers.go:632] "Response" verb="GET" '
    'url="https://10.0.0.1:6443/api/v1/nodes/ip-10-0-1-23" status="404 Not Found" milliseconds=3\n'
)


@pytest.mark.parametrize(
    "name,kube_proxys",
    [
        ("kube-proxy.log", True),
        ("/var/log/pods/kube-system_kube-proxy-x7k2p_1f0/kube-proxy/0.log", True),
        ("kubectl -n kube-system logs kube-proxy-x7k2p", True),
        ("sudo journalctl -u kube-proxy --no-pager", True),
        ("crictl logs --tail 50 kube-proxy-5cb4c", True),
        ("tail -n 100 /var/log/kube-proxy.log", True),
        ("/tmp/kube-proxy-debug/calico.log", False),  # the folder's name is not the file's
        ("kubectl -n kube-system logs calico-node-x | grep kube-proxy", False),
        ("kubectl -n kube-system get pods | grep kube-proxy", False),
        ("apiserver.log", False),
    ],
)
def test_a_log_is_kube_proxys_by_its_name_or_command(name: str, kube_proxys: bool) -> None:
    typed = sniff_named(name, GET_404 + HEADERS)
    assert (typed is not None and typed.kind == Kind.KUBE_PROXY_LOG) is kube_proxys


def test_only_a_go_log_is_typed_by_its_name() -> None:
    assert sniff_named("kube-proxy.log", "some notes about kube-proxy\nnothing else\n") is None


def test_the_node_lookup_answered_404_names_the_cause(diagnose: Diag) -> None:
    r = diagnose({"kube-proxy.log": GET_404 + HEADERS})
    (f,) = [f for f in r.findings if f.code == "KP111"]
    assert '"$(node_name)"' in f.summary and "nothing expanded" in f.summary
    assert [c.line for c in f.evidence] == [1]


def test_the_structured_request_log_is_read_too(diagnose: Diag) -> None:
    r = diagnose({"kube-proxy.log": STRUCTURED_404})
    (f,) = [f for f in r.findings if f.code == "KP111"]
    assert '"ip-10-0-1-23"' in f.summary and "nothing expanded" not in f.summary


def test_a_log_not_named_kube_proxys_is_not_read_as_its(tmp_path: Path) -> None:
    path = tmp_path / "apiserver-client.log"
    path.write_text(GET_404)
    ev = load([path])
    assert not ev.artifacts and "no kube-proxy lines" in ev.problems[0].message


@pytest.mark.parametrize("status", ["200 OK", "401 Unauthorized", ""])
def test_a_node_read_or_refused_is_not_a_missing_node(diagnose: Diag, status: str) -> None:
    line = GET_404.replace("404 Not Found", status) if status else GET_404.replace("404 Not Found ", "")
    r = diagnose({"kube-proxy.log": line})
    assert [f for f in r.findings if f.code == "KP111"] == []


def test_a_journal_of_kube_proxy_is_its_log_whatever_its_lines_say(tmp_path: Path) -> None:
    """`journalctl -u kube-proxy` lines carry its identifier: they are kube-proxy's log even when
    no line is one only kube-proxy prints (client-go's request lines here)."""
    journal = tmp_path / "journal.txt"
    journal.write_text(
        "Nov 29 14:59:55 node-3 kube-proxy[21942]: " + GET_404
        + "Nov 29 14:59:55 node-3 kube-proxy[21942]: " + HEADERS
    )  # fmt: skip
    ev = load([journal])
    assert [a.kind for a in ev.artifacts] == [Kind.KUBE_PROXY_LOG]


def test_a_go_program_s_listen_error_alone_names_no_cause(diagnose: Diag) -> None:
    """Go's "bind: address already in use" is any Go program's: in an ingress controller's own
    line it is no sign of a second kube-proxy (inside kube-proxy's "starting metrics server
    failed" it is: tests/lab/test_real_kube_proxy.py)."""
    line = "F0404 21:37:31.884835       6 main.go:286] listen tcp :10254: bind: address already in use\n"
    r = diagnose({"kube-proxy.log": GET_404 + line})  # a log that mixes another program's lines in
    assert "multiple-kube-proxy" not in [f.cause for f in r.findings]
    assert r.findings[0].cause == "node-ip-unresolved"
