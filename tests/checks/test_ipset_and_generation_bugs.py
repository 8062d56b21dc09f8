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


# The IPVS proxier of k/k#62638 (1.11.0-alpha.1/alpha.2), `iptables -L -n` as the issue posts it:
# KUBE-SERVICES sends the whole KUBE-LOAD-BALANCER set into KUBE-FIRE-WALL, which ends with an
# unconditional KUBE-MARK-DROP.
FIRE_WALL_LISTED = """Chain KUBE-FIRE-WALL (1 references)
target     prot opt source               destination
ACCEPT     all  --  0.0.0.0/0            0.0.0.0/0            match-set KUBE-LB-INGRESS-LOCAL dst,dst
KUBE-MARK-MASQ  all  --  0.0.0.0/0            0.0.0.0/0            /* mark MASQ for external traffic policy not local */
ACCEPT     all  --  0.0.0.0/0            0.0.0.0/0            match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src
KUBE-MARK-DROP  all  --  0.0.0.0/0            0.0.0.0/0

Chain KUBE-SERVICES (2 references)
target     prot opt source               destination
KUBE-MARK-MASQ  all  -- !10.64.0.0/14         0.0.0.0/0            match-set KUBE-CLUSTER-IP dst,dst
KUBE-FIRE-WALL  all  --  0.0.0.0/0            0.0.0.0/0            match-set KUBE-LOAD-BALANCER dst,dst
KUBE-NODE-PORT  tcp  --  0.0.0.0/0            0.0.0.0/0            tcp match-set KUBE-NODE-PORT-TCP dst
"""
# The same rules as iptables-save prints what that proxier wrote (its rule-writing code:
# the jump on the KUBE-LOAD-BALANCER set, the ACCEPTs on the source sets, the final mark).
FIRE_WALL_SAVED = """*nat
:KUBE-FIRE-WALL - [0:0]
:KUBE-MARK-DROP - [0:0]
:KUBE-SERVICES - [0:0]
-A KUBE-FIRE-WALL -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j ACCEPT
-A KUBE-FIRE-WALL -m set --match-set KUBE-LOAD-BALANCER-SOURCE-IP dst,dst,src -j ACCEPT
-A KUBE-FIRE-WALL -j KUBE-MARK-DROP
-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-FIRE-WALL
COMMIT
"""
# 1.11.0's layout (k/k#62712): only KUBE-LOAD-BALANCER-FW enters the firewall chain
FIREWALL_FIXED = """*nat
:KUBE-FIREWALL - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-DROP - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SERVICES - [0:0]
-A KUBE-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port + source cidr for packet filter purpose" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN
-A KUBE-FIREWALL -j KUBE-MARK-DROP
-A KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port for load balancer with sourceRange" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-FIREWALL
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
-A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER
COMMIT
"""


# The same two chains as `iptables -t nat -L -n -v` prints them (counters, in and out columns)
FIRE_WALL_LISTED_V = """Chain KUBE-FIRE-WALL (1 references)
 pkts bytes target     prot opt in     out     source               destination
    3   180 ACCEPT     all  --  *      *       0.0.0.0/0            0.0.0.0/0            match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src
   12   720 KUBE-MARK-DROP  all  --  *      *       0.0.0.0/0            0.0.0.0/0

Chain KUBE-SERVICES (2 references)
 pkts bytes target     prot opt in     out     source               destination
   15   900 KUBE-FIRE-WALL  all  --  *      *       0.0.0.0/0            0.0.0.0/0            match-set KUBE-LOAD-BALANCER dst,dst
"""


def test_every_load_balancer_through_the_ipvs_firewall_chain(diagnose: Diagnose) -> None:
    """k/k#62638: once one Service has loadBalancerSourceRanges, every other load balancer's
    clients are marked for drop. Read from -L (as posted) and from a dump; 1.11.0's chains are fine."""
    for text in (FIRE_WALL_LISTED, FIRE_WALL_LISTED_V, FIRE_WALL_SAVED):
        f = one(diagnose({"rules.txt": text}), "KP123")
        assert f.severity == Severity.CRITICAL
        assert "KUBE-FIRE-WALL" in f.summary and "loadBalancerSourceRanges" in f.summary
        assert f.fixed_in == ["v1.11.0"]
        cited = [c.text for c in f.evidence]
        assert any("KUBE-LOAD-BALANCER dst,dst" in t for t in cited) and any("KUBE-MARK-DROP" in t for t in cited)
    g = one(diagnose({"rules.txt": FIRE_WALL_SAVED, "version.txt": "Kubernetes v1.11.0\n"}), "KP123")
    assert g.confidence == Confidence.LOW and "already has the fix" in g.summary
    none_of(diagnose({"rules.txt": FIREWALL_FIXED}), "KP123")
    # grep'd out of the listing: the jump's row without its chain's header
    grepped = "".join(ln for ln in FIRE_WALL_LISTED.splitlines(keepends=True) if "KUBE-SERVICES" not in ln)
    assert "KUBE-FIRE-WALL" in one(diagnose({"rules.txt": grepped}), "KP123").summary
    # a firewall chain whose drop is conditional is not this bug
    conditional = FIRE_WALL_SAVED.replace(
        "-A KUBE-FIRE-WALL -j KUBE-MARK-DROP", "-A KUBE-FIRE-WALL -p tcp -j KUBE-MARK-DROP"
    )
    none_of(diagnose({"rules.txt": conditional}), "KP123")


EXTERNAL_LOCAL_SERVICE = """apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  externalIPs: [203.0.113.10]
  clusterIP: 10.96.0.20
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080, nodePort: 30080}
  selector: {app: web}
"""


def test_the_ipvs_filter_that_rejects_external_ips_of_local_services(diagnose: Diagnose) -> None:
    """k/k#121909: 1.26-1.29 return early for KUBE-EXTERNAL-IP but not KUBE-EXTERNAL-IP-LOCAL, so
    a Local Service's externalIPs (bound on kube-ipvs0) are rejected. The blog's chain without
    that one line is 1.28.0's."""
    without = "".join(ln for ln in IPVS_FILTER_FIXED.splitlines(keepends=True) if "EXTERNAL-IP-LOCAL" not in ln)
    f = one(diagnose({"rules.txt": without, "svc.yaml": EXTERNAL_LOCAL_SERVICE}), "KP123")
    assert "KUBE-EXTERNAL-IP-LOCAL" in f.summary and "shop/web" in f.summary
    assert f.fixed_in == ["v1.30.0"] and f.severity == Severity.CRITICAL
    assert any(c.text.startswith("Service shop/web") for c in f.evidence)
    # no Services given: what would decide is said, at low confidence
    g = one(diagnose({"rules.txt": without}), "KP123")
    assert g.confidence == Confidence.LOW and "`kubectl get services -A -o yaml` tells" in g.summary
    assert g.suspected and g.severity == Severity.WARNING and g.decided_by == ["kubectl get services -A -o yaml"]
    assert not f.suspected
    # Services given, none with an external IP under the Local policy: nothing to say
    cluster_only = EXTERNAL_LOCAL_SERVICE.replace("  externalIPs: [203.0.113.10]\n", "")
    none_of(diagnose({"rules.txt": without, "svc.yaml": cluster_only}), "KP123")
    none_of(diagnose({"rules.txt": IPVS_FILTER_FIXED, "svc.yaml": EXTERNAL_LOCAL_SERVICE}), "KP123")
    # without the health-check exception too: the earlier bug (1.26.0-1.26.4) is the one named
    older = "".join(ln for ln in without.splitlines(keepends=True) if "HEALTH-CHECK" not in ln)
    assert "healthCheckNodePort" in one(diagnose({"rules.txt": older}), "KP123").summary


def test_a_service_port_name_longer_than_an_nft_comment(diagnose: Diagnose) -> None:
    """k/k#139515: the nftables proxier comments map elements with `namespace/name:port`; over 128
    bytes, nft rejects the whole transaction. The issue's Service name is 131 characters long."""
    config = (DATA / "upstream" / "nftables" / "TestOverallNFTablesRules.kube-proxy.yaml").read_text()
    ns = "loft-acme-platform-services-team-dev-v-shared-workloads-ns-001"
    name = "my-api-svc-x-my-api-namespace-x-acme-shared-vcluster--a1b2c3d4e"
    svc = EXTERNAL_LOCAL_SERVICE.replace("name: web", f"name: {name}").replace("namespace: shop", f"namespace: {ns}")
    assert len(f"{ns}/{name}:http") == 131
    f = one(diagnose({"kube-proxy.yaml": config, "svc.yaml": svc}), "KP123")
    assert "131 bytes" in f.summary and f.fixed_in == ["v1.37.0"]
    none_of(diagnose({"kube-proxy.yaml": config, "svc.yaml": EXTERNAL_LOCAL_SERVICE}), "KP123")
    iptables_mode = config.replace("mode: nftables", "mode: iptables")
    none_of(diagnose({"kube-proxy.yaml": iptables_mode, "svc.yaml": svc}), "KP123")
