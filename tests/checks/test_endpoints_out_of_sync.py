"""KP202 endpoints-out-of-sync without the cluster's objects: the Services rejected as "has no
endpoints"."""

from __future__ import annotations

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
