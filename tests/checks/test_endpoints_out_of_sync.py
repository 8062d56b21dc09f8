"""KP202 endpoints-out-of-sync without the cluster's objects: the Services rejected as "has no
endpoints", and rules a listing shows that send a Service elsewhere than a listing of all its
ready endpoints says."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import Diag
from conftest import none_of, one

from kpdoctor.model import Confidence, Severity

# k8s-93682 (kubernetes#93682): iptables -L rows, as posted (no Chain or column header).
REJECT_93682 = (
    "REJECT     udp  --  anywhere             172.17.17.78         /* kube-system/kube-dns:dns has no endpoints */ "
    "udp dpt:domain reject-with icmp-port-unreachable\n"
    "REJECT     tcp  --  anywhere             172.17.17.4          /* core/kube-registry:registry has no endpoints */ "
    "tcp dpt:commplex-main reject-with icmp-port-unreachable\n"
)


def test_rejected_services_without_objects_are_a_note_with_dns_first(diagnose: Diag) -> None:
    r = diagnose({"iptables-L.txt": REJECT_93682})
    f = one(r, "KP202")
    assert f.severity == Severity.INFO and f.confidence == Confidence.LOW
    assert "kube-system/kube-dns:dns among them: every DNS lookup" in f.summary
    assert [c.line for c in f.evidence] == [1, 2]
    assert "endpointslices" in f.summary
    # The check still says it could not verify: skipped, with what it needs.
    assert any(s.code == "KP202" and "Kubernetes objects" in s.reason for s in r.skipped)
    # The same rule in iptables-save form.
    save = (
        '-A KUBE-SERVICES -d 172.17.17.78/32 -p udp -m comment --comment "kube-system/kube-dns:dns has no '
        'endpoints" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable\n'
    )
    assert "kube-system/kube-dns:dns" in one(diagnose({"filter.txt": save}), "KP202").summary
    # Rules without such comments: nothing.
    none_of(diagnose({"iptables-version.txt": "iptables v1.8.7 (legacy)\n"}), "KP202")


# -- rules a listing shows, against a listing of every ready endpoint -------------------------------

UPSTREAM = (
    Path(__file__).resolve().parents[1] / "data" / "upstream" / "iptables" / "TestOverallIPTablesRules.legacy.save"
)
TABLE = Path(__file__).resolve().parents[1] / "data" / "kubectl" / "get-endpoints-kubectl-1.20.txt"


def _grep(text: str, word: str) -> str:
    return "".join(ln + "\n" for ln in text.splitlines() if word in ln)


def test_grep_d_rules_that_send_a_service_elsewhere_than_its_endpoints_row_are_named(diagnose: Diag) -> None:
    """upstream's ns1/svc1 rules (10.180.0.1:80 and 10.180.2.1:80), grep'd, beside a `kubectl
    get endpoints` row that lists only one of them: the other is a backend the Service lost."""
    rules = _grep(UPSTREAM.read_text(), "ns1/svc1")
    row = "NAMESPACE   NAME   ENDPOINTS       AGE\nns1         svc1   10.180.2.1:80   5m\n"
    f = one(diagnose({"rules.txt": rules, "ep.txt": row}), "KP202")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.MEDIUM
    assert f.subject == {"service": "ns1/svc1", "workload": None}
    assert "10.180.0.1:80" in f.summary and "10.180.2.1:80" in f.summary.split("listing given has")[1]
    assert f.evidence[-1].text.startswith("ns1") and "10.180.0.1:80" in f.evidence[0].text
    # every backend listed: nothing; a row with " + N more..." does not list them all: nothing
    both = row.replace("10.180.2.1:80  ", "10.180.0.1:80,10.180.2.1:80")
    none_of(diagnose({"rules.txt": rules, "ep.txt": both}), "KP202")
    more = row.replace("10.180.2.1:80  ", "10.180.2.1:80,10.180.2.2:80,10.180.2.3:80 + 1 more...")
    none_of(diagnose({"rules.txt": rules, "ep.txt": more}), "KP202")
    # a row without its namespace (`kubectl get ep svc1` in the current namespace) names it too
    bare = "NAME   ENDPOINTS       AGE\nsvc1   10.180.2.1:80   5m\n"
    assert "10.180.0.1:80" in one(diagnose({"rules.txt": rules, "ep.txt": bare}), "KP202").summary


def test_the_real_table_s_rows_are_whole_only_without_more(diagnose: Diag) -> None:
    """kubectl 1.20's table (tests/data/kubectl): "two" lists both its ready endpoints, "many"
    three of four. Rules for default/two sending to a third address are named; for default/many,
    whose row is cut, nothing."""
    table = TABLE.read_text()
    rules = (
        '-A KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m comment --comment "default/two:p8443" -m tcp -j DNAT '
        "--to-destination 10.244.9.9:8443\n"
        '-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m comment --comment "default/many:p8080" -m tcp -j DNAT '
        "--to-destination 10.244.9.9:8080\n"
    )
    f = one(diagnose({"rules.txt": rules, "ep.txt": table}), "KP202")
    assert f.subject["service"] == "default/two" and "10.244.9.9:8443" in f.summary


def test_rules_beside_the_real_endpointslice_table(diagnose: Diag) -> None:
    """kubectl 1.20's EndpointSlice table (tests/data/kubectl): web's slice lists 10.244.1.5 and
    10.244.2.7 (the second not ready, shown all the same). A KUBE-SVC rule that picks a third
    address is named; one that picks the not-ready endpoint is not (the table cannot tell)."""
    table = (TABLE.parent / "get-endpointslices-kubectl-1.20.txt").read_text()
    rules = (
        '-A KUBE-SVC-ABCDEFGHIJKLMNOP -m comment --comment "default/web:p8080 -> 10.244.2.7:8080" '
        "-m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-AAAAAAAAAAAAAAAA\n"
        '-A KUBE-SVC-ABCDEFGHIJKLMNOP -m comment --comment "default/web:p8080 -> 10.244.9.9:8080" '
        "-j KUBE-SEP-BBBBBBBBBBBBBBBB\n"
    )
    f = one(diagnose({"rules.txt": rules, "slices.txt": table}), "KP202")
    assert "10.244.9.9:8080" in f.summary and "endpoints, ready or not" in f.summary
    assert "10.244.2.7:8080" not in f.summary.split("listing given")[0]


def test_a_row_without_its_namespace_is_not_matched_to_a_name_two_namespaces_use(diagnose: Diag) -> None:
    rules = (
        '-A KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m comment --comment "team-a/web:http" -m tcp -j DNAT '
        "--to-destination 10.244.1.5:8080\n"
        '-A KUBE-SEP-BBBBBBBBBBBBBBBB -p tcp -m comment --comment "team-b/web:http" -m tcp -j DNAT '
        "--to-destination 10.244.7.7:8080\n"
    )
    bare = "NAME   ENDPOINTS         AGE\nweb    10.244.1.5:8080   5m\n"
    none_of(diagnose({"rules.txt": rules, "ep.txt": bare}), "KP202")
    named = "NAMESPACE   NAME   ENDPOINTS         AGE\nteam-b      web    10.244.1.5:8080   5m\n"
    assert one(diagnose({"rules.txt": rules, "ep.txt": named}), "KP202").subject["service"] == "team-b/web"
