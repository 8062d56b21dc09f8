"""CoreDNS's log and other Pods' client-go lines: read for where the Service path failed, never
taken for kube-proxy's own (messages/coredns.yaml, messages/client-go.yaml; whose log a command
printed, bundle/transcript.log_source). Every log line here is real posted output; the thread is
named beside it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import all_findings, none_of, one

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.transcript import hint_from_command, log_source
from kpdoctor.model import Report, Severity
from kpdoctor.parse.logwrap import unwrap, writer_of

Diag = Callable[..., Report]

# kubernetes/kubernetes#85794 (CoreDNS 1.6.x): the Pod's list of Services through the
# `kubernetes` Service's ClusterIP times out
REFLECTOR_TIMEOUT = (
    "E1202 09:08:34.949013       1 reflector.go:126] pkg/mod/k8s.io/client-go@v11.0.0+incompatible/tools/cache/"
    "reflector.go:94: Failed to list *v1.Service: Get https://10.9.0.1:443/api/v1/services?limit=500&resourceVersion=0: "
    "dial tcp 10.9.0.1:443: i/o timeout"
)
# coredns/coredns#4340 (CoreDNS 1.8.0, client-go v0.19): the watch form
REFLECTOR_WATCH = (
    "E1216 05:54:40.324876 1 reflector.go:127] pkg/mod/k8s.io/client-go@v0.19.2/tools/cache/reflector.go:156: "
    'Failed to watch *v1.Service: failed to list *v1.Service: Get "https://10.100.0.1:443/api/v1/services?limit=500'
    '&resourceVersion=0": dial tcp 10.100.0.1:443: connect: no route to host'
)
# kubernetes/minikube#5636 (CoreDNS 1.6.2: a timestamp before the level)
READY_WAITING = '2019-10-16T16:14:48.448Z [INFO] plugin/ready: Still waiting on: "kubernetes"'
# kubernetes/kubernetes#91518: the upstream resolver does not answer
UPSTREAM_TIMEOUT = (
    "[ERROR] plugin/errors: 2 accountant-server-http-provider-6b8756994f-zzf49. A: read udp "
    "172.30.57.16:53039->119.29.29.29:53: i/o timeout"
)
# kubernetes/kubeadm#1688: the node's resolv.conf points CoreDNS at itself
LOOP = (
    '2019-07-26T05:12:51.129Z [FATAL] plugin/loop: Loop (127.0.0.1:37926 -> :53) detected for zone ".", see '
    'https://coredns.io/plugins/loop#troubleshooting. Query: "HINFO 6687652606367193539.3502358703036269394."'
)
# kubernetes/minikube#9858 and labring/sealos#4251: routine lines
ROUTINE = [
    "[INFO] plugin/reload: Running configuration SHA512 = 591cf328cccc12bc490481273e738df59329c62c0b729d94e8b61db99"
    "61c2fa5f046dd37f1cf888b953814040d180f52594972691cd6ff41be96639138a43908",
    "CoreDNS-1.10.1",
    "linux/amd64, go1.20, 055b2c3",
    "[INFO] SIGTERM: Shutting down servers then terminating",
    "[INFO] plugin/health: Going into lameduck mode for 5s",
]


def _coredns_logs(*lines: str) -> str:
    return "$ kubectl -n kube-system logs coredns-565d847f94-7xq2d\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "argv,named",
    [
        (["kubectl", "-n", "kube-system", "logs", "coredns-565d847f94-7xq2d"], "coredns-565d847f94-7xq2d"),
        (["kubectl", "logs", "-n", "kube-system", "deploy/coredns", "--tail", "50"], "coredns"),
        (["kubectl", "logs", "-n", "kube-system", "-l", "k8s-app=kube-dns"], "kube-dns"),
        (["kubectl", "logs", "calico-node-x2v9k", "-c", "calico-node", "-n", "kube-system"], "calico-node"),
        (["kubectl", "logs", "--namespace=kube-system", "kube-proxy-7xq2d", "--previous"], "kube-proxy-7xq2d"),
        (["crictl", "logs", "--tail=20", "a1b2c3d4e5"], "a1b2c3d4e5"),
        (["journalctl", "-u", "kubelet", "--no-pager"], "kubelet"),
        (["journalctl", "--unit=k3s", "-f"], "k3s"),
        (["kubectl", "get", "pods", "-A"], None),
    ],
)
def test_a_command_says_whose_log_it_printed(argv: list[str], named: str | None) -> None:
    assert log_source(argv) == named
    assert hint_from_command(argv).get("log_of") == named


@pytest.mark.parametrize(
    "name,writer",
    [("coredns-565d847f94-7xq2d", "coredns"), ("kube-dns", "kube-dns"), ("kube-proxy-7xq2d", "kube-proxy")],
)
def test_the_name_a_command_gives_is_the_writer_of_its_lines(name: str, writer: str) -> None:
    assert writer_of(name, "E1202 09:08:34.949013       1 reflector.go:126] x") == writer


def test_client_go_built_as_a_module_is_never_kube_proxy() -> None:
    """`pkg/mod/k8s.io/client-go@...` is a Go module build's path: kube-proxy is built in the
    Kubernetes tree (vendored), so such a line is another program's whatever log holds it."""
    assert writer_of(None, REFLECTOR_TIMEOUT) == "a client-go program"
    assert writer_of(None, REFLECTOR_WATCH) == "a client-go program"


def test_a_timestamp_before_coredns_level_is_not_a_syslog_host() -> None:
    """CoreDNS 1.6.0-1.6.2 put an ISO timestamp before `[LEVEL] plugin/NAME:`; "[INFO]" is no host
    name and "plugin/ready" no syslog identifier."""
    un = unwrap(READY_WAITING)
    assert un.inner.startswith("[INFO] plugin/ready: ") and un.ident is None
    assert un.timestamp == "2019-10-16T16:14:48.448Z"


def test_corednss_failed_list_of_the_kubernetes_service_points_at_the_service_path(diagnose: Diag) -> None:
    """The CoreDNS Pod cannot list Services through 10.9.0.1:443: kube-proxy's KP129 (kube-proxy
    itself dialling the VIP) must not claim the line; the suspected causes are the node's Service
    path's, at info (a client's line says where the path failed, not why)."""
    report = diagnose({"coredns.txt": _coredns_logs(READY_WAITING, REFLECTOR_TIMEOUT)})
    none_of(report, "KP129")
    f = one(report, "KP130")
    assert f.cause == "service-rules-missing" and f.suspected and f.severity == Severity.INFO
    assert "iptables-drop-rule" in f.summary and "ip-forward-disabled" in f.summary
    assert {c.writer for c in f.evidence} >= {"coredns"}
    (read,) = report.inputs
    assert read.kind == "log lines"


def test_a_bare_module_client_go_line_is_not_kube_proxys(diagnose: Diag) -> None:
    report = diagnose({"line.txt": REFLECTOR_WATCH + "\n"})
    none_of(report, "KP129")
    f = one(report, "KP130")
    assert f.cause == "service-rules-missing" and f.severity == Severity.INFO
    assert f.evidence[0].writer == "a client-go program"


def test_an_upstream_timeout_is_a_lead_on_the_pods_egress(diagnose: Diag) -> None:
    report = diagnose({"coredns.txt": _coredns_logs(*ROUTINE[:3], UPSTREAM_TIMEOUT)})
    f = one(report, "KP130")
    assert f.cause == "ip-forward-disabled" and f.suspected and f.severity == Severity.INFO
    assert "conntrack-insert-race" in f.summary and "iptables-drop-rule" in f.summary


def test_a_loop_is_reported_as_a_failure_no_node_cause_explains(diagnose: Diag) -> None:
    """The loop plugin's fatal line is the node's resolv.conf (systemd-resolved), not the Service
    path: reported, never attributed to a node cause."""
    report = diagnose({"coredns.txt": _coredns_logs(LOOP)})
    f = one(report, "KP130")
    assert f.cause == "logged-failure" and f.severity == Severity.INFO
    assert "plugin/loop" in f.summary


def test_corednss_routine_lines_are_no_finding(diagnose: Diag) -> None:
    report = diagnose({"coredns.txt": _coredns_logs(*ROUTINE), "uname.txt": "5.15.0-91-generic\n"})
    assert [f.code for f in all_findings(report) if f.severity >= Severity.INFO] == []


def test_a_kube_proxy_log_stays_kube_proxys(diagnose: Diag) -> None:
    """`kubectl logs kube-proxy-...`: its lines are kube-proxy's (a log typed whole, not lines of
    another program's)."""
    text = (
        "$ kubectl -n kube-system logs kube-proxy-7xq2d\n"
        "I1008 21:01:50.200000       1 server_others.go:143] Using iptables Proxier.\n"
        "E1008 21:01:51.100000       1 node.go:161] Failed to retrieve node info: Get "
        '"https://10.96.0.1:443/api/v1/nodes/node-1": dial tcp 10.96.0.1:443: i/o timeout\n'
    )
    report = diagnose({"kp.txt": text})
    (read,) = report.inputs
    assert read.kind == Kind.KUBE_PROXY_LOG.value
    one(report, "KP129")


def test_a_caption_naming_a_command_starts_its_output(diagnose: Diag) -> None:
    """An issue comment: a session quoted with `>`, then a line of prose naming the command whose
    output the indented block below it is. The block is CoreDNS's log (its lines cited as
    coredns's), not more of nslookup's output; a client's output is never kube-proxy's log; every
    message the lead names is cited."""
    text = (
        "Pods on node-2 cannot resolve anything:\n\n"
        "> $ kubectl exec -ti busybox -- nslookup kubernetes.default\n"
        "> Server:    10.96.0.10\n> Address 1: 10.96.0.10\n>\n"
        "> nslookup: can't resolve 'kubernetes.default'\n> command terminated with exit code 1\n\n"
        "coredns logs (`kubectl -n kube-system logs coredns-6955765f44-4csvp`):\n\n"
        "    .:53\n    CoreDNS-1.6.7\n    linux/amd64, go1.13.6, da7f65b\n"
        f"    {READY_WAITING.split(' ', 1)[1]}\n    {REFLECTOR_TIMEOUT}\n"
    )
    report = diagnose({"issue.md": text})
    kinds = {i.kind for i in report.inputs}
    assert kinds == {"log lines"}, [(i.kind, i.details) for i in report.inputs]
    f = one(report, "KP130")
    assert f.cause == "service-rules-missing"
    cited = {(c.line, c.writer) for c in f.evidence}
    assert (7, None) in cited  # nslookup's, in the quoted session
    assert {(15, "coredns"), (16, "coredns")} <= cited  # the ready line and the failed list
    none_of(report, "KP140")  # every line the lead names is cited: nothing left unexplained
