"""KP126 cluster-cidr-misconfigured, KP127 ipvs-kernel-incompatible, KP128 endpoints-churn,
KP312 stale-udp-conntrack: posted lines (k/k#36652, k/k#89520, k/k#23812, k/k#48370)."""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

from kpdoctor.model import Confidence, Report, Severity

Diagnose = Callable[..., Report]


def test_empty_source_in_the_echoed_payload(diagnose: Diagnose) -> None:
    log = (
        'Nov 14 11:06:11 HOSTNAME kube-proxy[12085]: -A KUBE-XLB-574IYFDEANSYIEBF -m comment --comment "Redirect '
        'pods trying to reach external loadbalancer VIP to clusterIP" -s  -j KUBE-SVC-574IYFDEANSYIEBF\n'
        "Nov 14 11:06:11 HOSTNAME kube-proxy[12085]: E1114 11:06:11.955523   12085 proxier.go:1282] Failed to "
        "execute iptables-restore: exit status 2 (Bad argument `KUBE-SVC-574IYFDEANSYIEBF'\n"
    )
    f = one(diagnose({"journal.log": log}), "KP126")
    assert f.severity == Severity.CRITICAL and "clusterCIDR" in " ".join(f.fix)


def test_parseip_error_on_old_kernels(diagnose: Diagnose) -> None:
    log = (
        "E0716 07:07:25.145682       1 proxier.go:1950] Failed to list IPVS destinations, error: parseIP Error "
        "ip=[35 198 93 90 0 0 0 0 0 0 0 0 0 0 0 0]\n"
    )
    f = one(diagnose({"kube-proxy.log": log, "uname.txt": "3.10.0-1062.el7.x86_64\n"}), "KP127")
    assert "v1.18.3" in f.fixed_in and "3.10.0" in f.summary


ENDPOINTS = (
    '{"type":"MODIFIED","object":{"kind":"Endpoints","apiVersion":"v1","metadata":{"name":"kube-scheduler",'
    '"namespace":"kube-system","resourceVersion":"1141419","annotations":{"control-plane.alpha.kubernetes.io/leader":'
    '"{\\"holderIdentity\\":\\"kubetest2\\",\\"leaseDurationSeconds\\":15}"}},"subsets":[]}}\n'
    '{"type":"MODIFIED","object":{"kind":"Endpoints","apiVersion":"v1","metadata":{"name":"kube-scheduler",'
    '"namespace":"kube-system","resourceVersion":"1141425","annotations":{"control-plane.alpha.kubernetes.io/leader":'
    '"{\\"holderIdentity\\":\\"kubetest2\\",\\"leaseDurationSeconds\\":15}"}},"subsets":[]}}\n'
)


def test_leader_election_endpoints_in_a_watch_stream(diagnose: Diagnose) -> None:
    f = one(diagnose({"endpoints-watch.json": ENDPOINTS}), "KP128")
    assert "kube-system/kube-scheduler" in f.summary
    none_of(diagnose({"endpoints-watch.json": ENDPOINTS, "v.txt": "Kubernetes v1.24.3\n"}), "KP128")


BEFORE = (
    "udp      17 29 src=10.12.0.14 dst=10.15.240.10 sport=43145 dport=53 [UNREPLIED] src=10.12.0.11 "
    "dst=10.12.0.14 sport=53 dport=43145 mark=0 use=1\n"
)
NEVER = (
    "udp      17 29 src=10.12.0.14 dst=10.15.240.10 sport=43145 dport=53 [UNREPLIED] src=10.15.240.10 "
    "dst=10.12.0.14 sport=53 dport=43145 mark=0 use=1\n"
)


def test_flow_never_translated_to_a_proven_service_address(diagnose: Diagnose) -> None:
    f = one(diagnose({"conntrack-before.txt": BEFORE, "conntrack-now.txt": NEVER}), "KP312")
    assert f.severity == Severity.WARNING and "10.15.240.10:53" in f.summary  # one listing proves no persistence
    assert f.confidence == Confidence.MEDIUM


def test_untranslated_flow_to_an_address_not_known_virtual_is_only_suspected(diagnose: Diagnose) -> None:
    """Nothing proves 10.15.240.10 a Service's address (a dead server elsewhere looks the same):
    a suspected cause at info, the Services deciding (issue 39), never a warning."""
    f = one(diagnose({"conntrack-now.txt": NEVER}), "KP312")
    assert f.suspected and (f.severity, f.confidence) == (Severity.INFO, Confidence.LOW)
    assert any("kubectl get svc" in d and "10.15.240.10" in d for d in f.decided_by)


QUOTED = (  # k/k#125467 as posted: the query and the entry quoted inside the reporter's sentences
    "Query : “conntrack -p udp -L --src 10.103.83.53”\n\n"
    "Response : “udp  17 27 src=10.103.83.53 dst=<clusterIp> sport=21667 dport=53 [UNREPLIED] src=10.103.78.37 "
    "dst=10.103.83.53 sport=53 dport=21667 mark=0 use=1 contrack v1.4.4 (conntrack-tools): 1 flow entries have "
    "been shown”\n"
)


def test_a_translated_flow_never_answered_without_endpoints_is_a_low_warning(diagnose: Diagnose) -> None:
    f = one(diagnose({"conntrack.txt": QUOTED}), "KP312")
    assert f.confidence == Confidence.LOW and f.severity == Severity.WARNING
    assert "10.103.78.37" in f.summary and "EndpointSlices" in f.summary
    assert f.evidence[0].line == 3 and f.evidence[0].text.endswith("mark=0 use=1")


def test_an_answered_translated_flow_is_nothing(diagnose: Diagnose) -> None:
    answered = QUOTED.replace("[UNREPLIED] ", "").replace("use=1 ", "[ASSURED] use=1 ")
    none_of(diagnose({"conntrack.txt": answered}), "KP312")
