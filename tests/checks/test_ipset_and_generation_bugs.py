"""KP120 ipset-incompatible and KP123 kube-proxy-rule-generation-bug, from posted lines
(k/k#65461, k/k#79400, k/k#77265, k/k#134024, k/k#135266)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from conftest import DATA, all_findings, none_of, one

from kpdoctor.model import Confidence, Report, Severity

Diagnose = Callable[..., Report]

ENSURE = (
    "E0625 20:50:00.312569    3828 ipset.go:156] Failed to make sure ip set: &{{KUBE-LOOP-BACK hash:ip,port,ip inet "
    "1024 65536 0-65535 Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose} map[] "
    "0xc42073e1d0} exist, error: error creating ipset KUBE-LOOP-BACK, error: exit status 2\n"
)


def test_comment_extension_missing(diagnose: Diagnose) -> None:
    ipset = "[root@vm ~]# ipset create foo hash:ip comment\nipset v6.29: Unknown argument: `comment'\n"
    f = one(diagnose({"kube-proxy.log": ENSURE, "ipset.txt": ipset}), "KP120")
    assert "comment" in f.summary and f.confidence == Confidence.HIGH and "KUBE-LOOP-BACK" in f.summary


def test_protocol_names_without_etc_protocols(diagnose: Diagnose) -> None:
    out = "ipset v6.34: Syntax error: 'tcp' is invalid as number\nSyntax error: cannot parse 'tcp' as a protocol\n"
    f = one(diagnose({"ipset.txt": out}), "KP120")
    assert "/etc/protocols" in f.summary


def test_reason_unknown_is_medium(diagnose: Diagnose) -> None:
    f = one(diagnose({"kube-proxy.log": ENSURE}), "KP120")
    assert f.confidence == Confidence.MEDIUM and "ipset create" in " ".join(f.fix)


def test_sctp_set_left_with_the_old_type_is_the_release_bug(diagnose: Diagnose) -> None:
    log = (
        "E0430 10:05:53.783443       1 ipset.go:162] Failed to make sure ip set: &{{KUBE-NODE-PORT-LOCAL-SCTP "
        "hash:ip,port inet 1024 65536 0-65535 Kubernetes nodeport SCTP port with externalTrafficPolicy=local} map[] "
        "0xc00032e830} exist, error: error creating ipset KUBE-NODE-PORT-LOCAL-SCTP, error: exit status 1\n"
    )
    report = diagnose({"kube-proxy.log": log})
    assert report.findings[0].code == "KP123"
    assert "KP120" in [f.code for f in report.findings[0].folded]


def test_nft_iif_for_an_interface_prefix(diagnose: Diagnose) -> None:
    log = (
        'E0911 16:35:49.547707       1 proxier.go:1851] "nftables sync failed" err=<\n'
        "\t/dev/stdin:72:109-112: Error: Interface does not exist\n"
        "\tadd rule ip kube-proxy service-2QRHZV4L-default/kubernetes/tcp/https ip daddr 10.0.0.1 tcp dport 443 "
        "iif != azv* jump mark-for-masquerade\n"
        "\t                                                                                                         "
        "   ^^^^\n"
        " >\n"
    )
    f = one(diagnose({"kube-proxy.log": log}), "KP123")
    assert "iifname" in f.summary and "v1.34.2" in f.fixed_in
    none_of(diagnose({"kube-proxy.log": log}), "KP116")


def test_reused_pod_ip_in_an_endpointslice(diagnose: Diagnose) -> None:
    pasted = (
        "**[root@xxx:/k8s]$ kubectl get endpointslices svc-x-v6hns -o yaml \n"
        "addressType: IPv4\n"
        "apiVersion: discovery.k8s.io/v1\n"
        "endpoints:\n"
        "- addresses:\n"
        "  - 172.30.4.119\n"
        "  conditions:\n"
        "    ready: false\n"
        "    serving: false\n"
        "    terminating: true\n"
        "- addresses:\n"
        "  - 172.30.4.119\n"
        "  conditions:\n"
        "    ready: true\n"
        "    serving: true\n"
        "    terminating: false\n"
    )
    f = one(diagnose({"endpointslice.yaml": pasted}), "KP123")
    assert "172.30.4.119" in f.summary and "v1.36.0" in f.fixed_in
    # with a fixed kube-proxy it is not this bug
    fixed = diagnose({"endpointslice.yaml": pasted, "version.txt": "Kubernetes v1.36.1\n"})
    assert not [x for x in all_findings(fixed) if x.code == "KP123"]


def test_a_rule_iptables_refuses_for_its_content_is_an_unlisted_generation_bug(diagnose: Diagnose) -> None:
    """k/k#88316's shape: an IPv6 load-balancer address in IPv4 rules; no table row names it."""
    log = (
        "E0301 10:00:00.000000       1 proxier.go:1600] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.4.21: invalid mask `128' specified\n"
        "Error occurred at line: 56\n"
    )
    report = diagnose({"kube-proxy.log": log})
    f = one(report, "KP123")
    assert f.confidence == Confidence.MEDIUM and "invalid mask `128' specified" in f.summary
    assert report.findings[0].code == "KP123"  # the generic sync failure folds under it


def test_a_missing_chain_is_not_a_generation_bug(diagnose: Diagnose) -> None:
    log = (
        "E0625 18:23:05.161594       1 proxier.go:1350] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.4.21: Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
    )
    none_of(diagnose({"kube-proxy.log": log}), "KP123")


# KUBE-IPVS-FILTER as a newer kube-proxy writes it, posted in a blog post on IPVS mode (its
# comments and blank lines kept); 1.26.0-1.26.4 and 1.27.0-1.27.1 lack the RETURN for
# KUBE-HEALTH-CHECK-NODE-PORT, the one rule the fix added (kubernetes#117723: its description
# lists the chain with it).
IPVS_FILTER_FIXED = """-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER

# 白名单
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN

# 黑名单
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
"""


def test_the_ipvs_filter_that_rejects_load_balancers_health_checks(diagnose: Diagnose) -> None:
    none_of(diagnose({"rules.txt": IPVS_FILTER_FIXED}), "KP123")
    old = "".join(ln for ln in IPVS_FILTER_FIXED.splitlines(keepends=True) if "HEALTH-CHECK" not in ln)
    f = one(diagnose({"rules.txt": old}), "KP123")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.LOW  # the release decides
    assert "healthCheckNodePort" in f.summary and "1.26.0-1.26.4" in f.summary
    assert f.evidence[0].text.startswith("-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW")
    assert set(f.fixed_in) == {"v1.26.5", "v1.27.2", "v1.28.0"}
    g = one(diagnose({"rules.txt": old, "version.txt": "Kubernetes v1.26.3\n"}), "KP123")
    assert g.confidence == Confidence.MEDIUM and g.versions_found["kube-proxy"] == "v1.26.3"
    h = one(diagnose({"rules.txt": old, "version.txt": "Kubernetes v1.26.5\n"}), "KP123")
    assert h.confidence == Confidence.LOW and "already has the fix" in h.summary


def test_an_ipvs_entry_of_the_other_family(diagnose: Diagnose) -> None:
    """An IPv6 endpoint written into an IPv4 virtual server reaches the kernel as the first four
    bytes of its address (an fd00::/8 address lands in 253.x.x.x, part of 240.0.0.0/4, which no
    host has). The healthy dual-stack-capable node's listing (tests/data/modes) says nothing."""
    healthy = (DATA / "modes" / "ipvs-healthy" / "ipvsadm.txt").read_text()
    none_of(diagnose({"ipvsadm.txt": healthy}), "KP123")
    endpoint = ipaddress.ip_address("fd00:10:244:1::c")
    cut = ipaddress.ip_address(endpoint.packed[:4])
    broken = healthy + (
        "TCP  [fd00:10:96::64]:80 rr\n"
        f"  -> [{endpoint}]:8080   Masq    1      0          0         \n"
        "TCP  192.168.0.2:30081 rr\n"
        f"  -> {cut}:8080              Masq    1      0          0         \n"
    )
    f = one(diagnose({"ipvsadm.txt": broken}), "KP123")
    assert f"IPVS holds {cut}" in f.summary and f"an IPv6 address of fd00:10::/32, such as {endpoint}" in f.summary
    assert f.evidence[0].text.startswith(f"-> {cut}:8080")
