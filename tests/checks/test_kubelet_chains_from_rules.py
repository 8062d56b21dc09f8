"""KP121 kubelet-chains-missing from the rules alone: KUBE-MARK-DROP declared, jumped to, and empty.

Every dump here is real: a network namespace (tests/lab/netns.py) gets the commands kubelet and
kube-proxy run, with the iptables-legacy tools and with iptables-nft, and `iptables-save` /
`iptables -S` print what kpdoctor reads. Nothing sends traffic; the namespaces only hold rules.

What the two components run, from their sources:

* kubelet 1.20 (pkg/kubelet/kubelet_network_linux.go at v1.20.12, syncNetworkUtil): EnsureChain and
  EnsureRule (`-C`, then `-A`/`-I` when missing) for `-t nat -A KUBE-MARK-DROP -j MARK --or-mark
  0x008000`, `-t filter -A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping
  marked packets" -m mark --mark 0x008000/0x008000 -j DROP`, the IPv4 "block incoming localnet
  connections" rule, `-I OUTPUT/INPUT -j KUBE-FIREWALL`, KUBE-MARK-MASQ and KUBE-POSTROUTING; its
  iptables monitor makes KUBE-KUBELET-CANARY in mangle, nat and filter.
* kube-proxy before 1.25 (pkg/proxy/iptables/proxier.go of the KUBE-XLB era, syncProxyRules):
  the jump chains, then `iptablesEnsureChains`: `-N KUBE-MARK-DROP -t nat` with no rule ("ensure
  KUBE-MARK-DROP chain exist but do not change any rules", k/k#94591), then `iptables-restore
  --noflush --counters` of a payload that does not declare KUBE-MARK-DROP and, for a Local-policy
  Service without a local endpoint, writes `-A KUBE-XLB-... -m comment --comment "ns/svc:port has
  no local endpoints" -j KUBE-MARK-DROP`.
* kubelet 1.28 and later (syncIPTablesRules): KUBE-IPTABLES-HINT in mangle and, for IPv4, only
  the martian-packet rule in KUBE-FIREWALL; kube-proxy 1.25 and later drops by itself in the
  filter table (upstream's TestOverallIPTablesRules payload, tests/data/upstream).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import UPSTREAM, all_findings, none_of, one
from lab.iptables_capture import load as load_payload
from lab.netns import Netns, cleanup_stale, lab_available

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Confidence, Report, Severity

pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))

BACKENDS = ("legacy", "nft")
WAIT = ["-w", "5", "-W", "100000"]  # utiliptables' flags on iptables 1.6.2 and later
SVC = "default/web:http"
NODE = "node-a"


def _hash(text: str) -> str:
    """kube-proxy's chain suffix: base32 of the sha256, 16 characters."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:16]


def payload(family: int) -> str:
    """kube-proxy's restore payload for one NodePort Service, externalTrafficPolicy Local, whose
    only endpoint runs on another node (the KUBE-XLB layout, before 1.25)."""
    v6 = family == 6
    cluster_ip, pod_cidr, loopback = (
        ("fd00:10:96::a", "fd00:10:244::/56", "::1/128") if v6 else ("10.96.100.10", "10.244.0.0/16", "127.0.0.0/8")
    )
    ep_ip = "fd00:10:244:2::5" if v6 else "10.244.2.5"
    endpoint = f"[{ep_ip}]:8080" if v6 else f"{ep_ip}:8080"
    svc, xlb, sep = (
        f"KUBE-SVC-{_hash(SVC + 'tcp')}",
        f"KUBE-XLB-{_hash(SVC + 'tcp')}",
        f"KUBE-SEP-{_hash(SVC + 'tcp' + endpoint)}",
    )
    return f"""*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x004000/0x004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:{sep} - [0:0]
:{svc} - [0:0]
:{xlb} - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
-A {sep} -m comment --comment {SVC} -s {ep_ip} -j KUBE-MARK-MASQ
-A {sep} -m comment --comment {SVC} -m tcp -p tcp -j DNAT --to-destination {endpoint}
-A {svc} -m comment --comment "{SVC} cluster IP" -m tcp -p tcp -d {cluster_ip} --dport 80 ! -s {pod_cidr} -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment "{SVC} cluster IP" -m tcp -p tcp -d {cluster_ip} --dport 80 -j {svc}
-A KUBE-NODEPORTS -m comment --comment {SVC} -m tcp -p tcp --dport 30080 -s {loopback} -j KUBE-MARK-MASQ
-A KUBE-NODEPORTS -m comment --comment {SVC} -m tcp -p tcp --dport 30080 -j {xlb}
-A {svc} -m comment --comment {SVC} -j {sep}
-A {xlb} -m comment --comment "Redirect pods trying to reach external loadbalancer VIP to clusterIP" -s {pod_cidr} -j {svc}
-A {xlb} -m comment --comment "masquerade LOCAL traffic for {SVC} LB IP" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A {xlb} -m comment --comment "route LOCAL traffic for {SVC} LB IP to service chain" -m addrtype --src-type LOCAL -j {svc}
-A {xlb} -m comment --comment "{SVC} has no local endpoints" -j KUBE-MARK-DROP
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
"""


def payload_source_ranges() -> str:
    """kube-proxy's restore payload for a LoadBalancer Service (externalTrafficPolicy Cluster) with
    loadBalancerSourceRanges: its KUBE-FW chain sends what no range accepts to KUBE-MARK-DROP."""
    name, endpoint = "default/lb:http", "10.244.2.6:8080"
    svc, fw = f"KUBE-SVC-{_hash(name + 'tcp')}", f"KUBE-FW-{_hash(name + 'tcp')}"
    sep = f"KUBE-SEP-{_hash(name + 'tcp' + endpoint)}"
    lb = '"default/lb:http loadbalancer IP"'
    return f"""*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:{sep} - [0:0]
:{svc} - [0:0]
:{fw} - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
-A {sep} -m comment --comment {name} -s 10.244.2.6 -j KUBE-MARK-MASQ
-A {sep} -m comment --comment {name} -m tcp -p tcp -j DNAT --to-destination {endpoint}
-A KUBE-SERVICES -m comment --comment "{name} cluster IP" -m tcp -p tcp -d 10.96.100.20 --dport 80 -j {svc}
-A KUBE-SERVICES -m comment --comment {lb} -m tcp -p tcp -d 203.0.113.10 --dport 80 -j {fw}
-A {fw} -m comment --comment {lb} -j KUBE-MARK-MASQ
-A {fw} -m comment --comment {lb} -s 198.51.100.0/24 -j {svc}
-A {fw} -m comment --comment {lb} -j KUBE-MARK-DROP
-A {svc} -m comment --comment {name} -j {sep}
COMMIT
"""


class Node:
    """One namespace's iptables of one backend and family, driven like utiliptables does."""

    def __init__(self, ns: Netns, backend: str, family: int = 4) -> None:
        self.ns, self.ipt = ns, f"{'ip6tables' if family == 6 else 'iptables'}-{backend}"
        self.family = family

    def ensure_chain(self, table: str, chain: str) -> None:
        res = self.ns.run([self.ipt, *WAIT, "-N", chain, "-t", table])
        if res.returncode != 0 and "exists" not in res.stderr:
            raise RuntimeError(res.stderr)

    def ensure_rule(self, position: str, table: str, chain: str, *args: str) -> None:
        if self.ns.run([self.ipt, *WAIT, "-C", chain, "-t", table, *args]).returncode != 0:
            self.ns.check([self.ipt, *WAIT, position, chain, "-t", table, *args])

    def kubelet_1_20(self) -> None:
        """syncNetworkUtil, v1.20.12 (drop bit 15, masquerade bit 14), and its monitor's canaries."""
        drop, masq = "0x008000", "0x004000"
        self.ensure_chain("nat", "KUBE-MARK-DROP")
        self.ensure_rule("-A", "nat", "KUBE-MARK-DROP", "-j", "MARK", "--or-mark", drop)
        self.ensure_chain("filter", "KUBE-FIREWALL")
        self.ensure_rule(
            "-A", "filter", "KUBE-FIREWALL", "-m", "comment", "--comment", "kubernetes firewall for dropping marked packets",
            "-m", "mark", "--mark", f"{drop}/{drop}", "-j", "DROP",
        )  # fmt: skip
        if self.family == 4:
            self.ensure_rule(
                "-A", "filter", "KUBE-FIREWALL", "-m", "comment", "--comment", "block incoming localnet connections",
                "--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate",
                "RELATED,ESTABLISHED,DNAT", "-j", "DROP",
            )  # fmt: skip
        self.ensure_rule("-I", "filter", "OUTPUT", "-j", "KUBE-FIREWALL")
        self.ensure_rule("-I", "filter", "INPUT", "-j", "KUBE-FIREWALL")
        self.ensure_chain("nat", "KUBE-MARK-MASQ")
        self.ensure_chain("nat", "KUBE-POSTROUTING")
        self.ensure_rule("-A", "nat", "KUBE-MARK-MASQ", "-j", "MARK", "--or-mark", masq)
        self.ensure_rule(
            "-I",
            "nat",
            "POSTROUTING",
            "-m",
            "comment",
            "--comment",
            "kubernetes postrouting rules",
            "-j",
            "KUBE-POSTROUTING",
        )
        self.ensure_rule("-A", "nat", "KUBE-POSTROUTING", "-m", "mark", "!", "--mark", f"{masq}/{masq}", "-j", "RETURN")
        self.ensure_rule("-A", "nat", "KUBE-POSTROUTING", "-j", "MARK", "--xor-mark", masq)
        self.ensure_rule(
            "-A", "nat", "KUBE-POSTROUTING", "-m", "comment", "--comment", "kubernetes service traffic requiring SNAT",
            "-j", "MASQUERADE",
        )  # fmt: skip
        for table in ("mangle", "nat", "filter"):
            self.ensure_chain(table, "KUBE-KUBELET-CANARY")

    def kubelet_current(self) -> None:
        """syncIPTablesRules, 1.28 and later: the hint chain and (IPv4) the martian-packet rule."""
        self.ensure_chain("mangle", "KUBE-IPTABLES-HINT")
        self.ensure_chain("filter", "KUBE-FIREWALL")
        self.ensure_rule("-I", "filter", "OUTPUT", "-j", "KUBE-FIREWALL")
        self.ensure_rule("-I", "filter", "INPUT", "-j", "KUBE-FIREWALL")
        self.ensure_rule(
            "-A", "filter", "KUBE-FIREWALL", "-m", "comment", "--comment", "block incoming localnet connections",
            "--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate",
            "RELATED,ESTABLISHED,DNAT", "-j", "DROP",
        )  # fmt: skip
        for table in ("mangle", "nat", "filter"):
            self.ensure_chain(table, "KUBE-KUBELET-CANARY")

    def kube_proxy_xlb_era(self, rules: str | None = None) -> None:
        """syncProxyRules before 1.25: jump chains, the empty KUBE-MARK-DROP, then the restore."""
        for table in ("mangle", "nat", "filter"):
            self.ensure_chain(table, "KUBE-PROXY-CANARY")
        new = ["-m", "conntrack", "--ctstate", "NEW"]
        jumps = [
            ("filter", "KUBE-EXTERNAL-SERVICES", "INPUT", "kubernetes externally-visible service portals", new),
            ("filter", "KUBE-EXTERNAL-SERVICES", "FORWARD", "kubernetes externally-visible service portals", new),
            ("filter", "KUBE-NODEPORTS", "INPUT", "kubernetes health check service ports", []),
            ("filter", "KUBE-SERVICES", "FORWARD", "kubernetes service portals", new),
            ("filter", "KUBE-SERVICES", "OUTPUT", "kubernetes service portals", new),
            ("filter", "KUBE-FORWARD", "FORWARD", "kubernetes forwarding rules", []),
            ("nat", "KUBE-SERVICES", "OUTPUT", "kubernetes service portals", []),
            ("nat", "KUBE-SERVICES", "PREROUTING", "kubernetes service portals", []),
            ("nat", "KUBE-POSTROUTING", "POSTROUTING", "kubernetes postrouting rules", []),
        ]
        for table, dst, src, comment, extra in jumps:
            self.ensure_chain(table, dst)
            self.ensure_rule("-I", table, src, *extra, "-m", "comment", "--comment", comment, "-j", dst)
        self.ensure_chain("nat", "KUBE-MARK-DROP")  # iptablesEnsureChains: the chain, no rule
        rules = payload(self.family) if rules is None else rules
        self.ns.check([f"{self.ipt}-restore", *WAIT, "--noflush", "--counters"], input=rules)

    def listings(self) -> dict[str, str]:
        return {
            "save": self.ns.check([f"{self.ipt}-save"]),
            "nat-S": self.ns.check([self.ipt, "-t", "nat", "-S"]),
            "filter-S": self.ns.check([self.ipt, "-S"]),
        }


def _node(
    backend: str, kubelet: str | None, family: int = 4, flush_firewall: bool = False, rules: str | None = None
) -> dict[str, str]:
    with Netns() as ns:
        node = Node(ns, backend, family)
        if kubelet == "1.20":
            node.kubelet_1_20()
        node.kube_proxy_xlb_era(rules)
        if flush_firewall:  # kubelet's drop-by-mark rule gone, its KUBE-MARK-DROP rule kept
            ns.check([node.ipt, *WAIT, "-F", "KUBE-FIREWALL", "-t", "filter"])
        return node.listings()


def _split_backends() -> dict[str, str]:
    """One node, two backends: kubelet on iptables-legacy, kube-proxy on iptables-nft."""
    with Netns() as ns:
        Node(ns, "legacy").kubelet_1_20()
        Node(ns, "nft").kube_proxy_xlb_era()
        return {"legacy-save": ns.check(["iptables-legacy-save"]), "nft-save": ns.check(["iptables-nft-save"])}


def _current(backend: str) -> dict[str, str]:
    with Netns() as ns:
        node = Node(ns, backend)
        node.kubelet_current()
        load_payload(ns, (UPSTREAM / "iptables" / "TestOverallIPTablesRules.rules").read_text(), backend)
        return node.listings()


@pytest.fixture(scope="module")
def dumps() -> Iterator[dict[tuple[str, str], dict[str, str]]]:
    cleanup_stale()
    out: dict[tuple[str, str], dict[str, str]] = {}
    for be in BACKENDS:
        out[("kubelet-1.20", be)] = _node(be, "1.20")
        out[("no-kubelet", be)] = _node(be, None)
        out[("firewall-flushed", be)] = _node(be, "1.20", flush_firewall=True)
        out[("no-kubelet-v6", be)] = _node(be, None, family=6)
        out[("source-ranges", be)] = _node(be, None, rules=payload_source_ranges())
        out[("current", be)] = _current(be)
    out[("split", "both")] = _split_backends()
    yield out


def _cluster(tmp: Path) -> Path:
    """The Service, its EndpointSlice (the endpoint on node-b) and both Nodes."""
    items = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]},
        }
        for name, ip in ((NODE, "192.168.0.2"), ("node-b", "192.168.0.3"))
    ]
    items.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "type": "NodePort",
                "clusterIP": "10.96.100.10",
                "clusterIPs": ["10.96.100.10"],
                "externalTrafficPolicy": "Local",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}],
            },
        }
    )
    items.append(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "web-x7k2p", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.2.5"], "conditions": {"ready": True, "serving": True}, "nodeName": "node-b"}
            ],
        }
    )
    p = tmp / "cluster.json"
    p.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return p


def _diagnose(tmp: Path, files: dict[str, str], cluster: bool = True, node: str | None = NODE) -> Report:
    paths: list[Path] = []
    for name, text in files.items():
        p = tmp / name
        p.write_text(text)
        paths.append(p)
    if cluster:
        paths.append(_cluster(tmp))
    report, _ = diagnose_paths(paths, node=node, min_severity=Severity.INFO, command="diagnose")
    return report


@pytest.mark.parametrize("backend", BACKENDS)
def test_kubelets_chains_there_no_finding(
    dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str
) -> None:
    save = dumps[("kubelet-1.20", backend)]["save"]
    assert "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000" in save  # what --or-mark 0x008000 prints
    assert "-m mark --mark 0x8000/0x8000 -j DROP" in save
    report = _diagnose(tmp_path, {f"iptables-{backend}-save.txt": save})
    none_of(report, "KP121")


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_mark_drop_behind_a_no_local_endpoints_rule_is_critical(
    dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str
) -> None:
    save = dumps[("no-kubelet", backend)]["save"]
    assert ":KUBE-MARK-DROP - [0:0]" in save and "-A KUBE-MARK-DROP " not in save
    report = _diagnose(tmp_path, {f"iptables-{backend}-save.txt": save})
    f = one(report, "KP121")
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.HIGH)
    assert report.findings[0] is f  # the root cause, not a symptom of one
    assert "IPv4" in f.summary and SVC in f.summary and "holds no rule" in f.summary
    assert "KUBE-FIREWALL" in f.summary and "KUBE-KUBELET-CANARY" in f.summary  # absent too
    decl, jump = f.evidence[:2]
    assert decl.text == ":KUBE-MARK-DROP - [0:0]" and save.splitlines()[decl.line - 1] == decl.text
    assert "has no local endpoints" in jump.text and jump.text.endswith("-j KUBE-MARK-DROP")
    assert any("--make-iptables-util-chains=true" in x for x in f.fix)
    assert any("kube-proxy to 1.25" in x for x in f.fix)
    # the Service the verifier sees leaking through is this cause's consequence, folded under it
    assert all(g.code == "KP121" or g in f.folded for g in report.findings + f.folded if g.severity >= Severity.WARNING)


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_iptables_S_of_both_tables(
    dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str
) -> None:
    """`iptables -t nat -S` and `iptables -S` given apart: the filter table is read with the nat table."""
    got = dumps[("no-kubelet", backend)]
    f = one(_diagnose(tmp_path, {"nat-S.txt": got["nat-S"], "filter-S.txt": got["filter-S"]}, cluster=False), "KP121")
    assert f.severity == Severity.CRITICAL and f.evidence[0].text == "-N KUBE-MARK-DROP"
    assert "the filter table drops nothing by mark" in f.summary
    fine = dumps[("kubelet-1.20", backend)]
    none_of(_diagnose(tmp_path, {"nat-S.txt": fine["nat-S"], "filter-S.txt": fine["filter-S"]}, cluster=False), "KP121")


@pytest.mark.parametrize("backend", BACKENDS)
def test_marked_but_never_dropped(dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str) -> None:
    """kubelet's MARK rule is there, its KUBE-FIREWALL drop is not: the mark is set for nothing."""
    save = dumps[("firewall-flushed", backend)]["save"]
    assert "-A KUBE-MARK-DROP -j MARK" in save and "--mark 0x8000/0x8000 -j DROP" not in save
    f = one(_diagnose(tmp_path, {f"iptables-{backend}-save.txt": save}), "KP121")
    assert f.severity == Severity.CRITICAL and "no rule dropping marked packets" in f.summary
    assert f.evidence[-1].text == "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000"


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_a_source_range_firewall_jumps_is_a_warning(
    dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str
) -> None:
    """No Service needs dropping for lack of local endpoints; what the LoadBalancer's ranges refuse
    is not dropped either, which proves less about any one Service: a warning at medium confidence."""
    save = dumps[("source-ranges", backend)]["save"]
    assert "-j KUBE-MARK-DROP" in save and "has no local endpoints" not in save
    f = one(_diagnose(tmp_path, {f"iptables-{backend}-save.txt": save}, cluster=False, node=None), "KP121")
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert "source ranges" in f.summary and f.evidence[1].text.startswith("-A KUBE-FW-")


@pytest.mark.parametrize("backend", BACKENDS)
def test_ipv6_family_on_its_own(dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str) -> None:
    """kubelet made its chains for IPv4 only; kube-proxy's IPv6 proxier created KUBE-MARK-DROP empty."""
    v4 = dumps[("kubelet-1.20", backend)]["save"]
    v6 = dumps[("no-kubelet-v6", backend)]["save"]
    assert v6.startswith("# Generated by ip6tables-")
    report = _diagnose(tmp_path, {"iptables-save.txt": v4, "ip6tables-save.txt": v6}, cluster=False, node=None)
    f = one(report, "KP121")
    assert "IPv6" in f.summary and f.evidence[0].artifact.endswith("ip6tables-save.txt")
    assert any("ip6tables -t nat -A KUBE-MARK-DROP" in x for x in f.fix)


@pytest.mark.parametrize("backend", BACKENDS)
def test_current_layout_does_not_depend_on_kube_mark_drop(
    dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str
) -> None:
    """kubelet 1.28+ and kube-proxy 1.25+: no KUBE-MARK-DROP at all, drops in the filter table."""
    save = dumps[("current", backend)]["save"]
    assert "KUBE-MARK-DROP" not in save and "has no local endpoints" in save
    name = "TestOverallIPTablesRules"
    inputs = [UPSTREAM / "iptables" / f"{name}.cluster.json", UPSTREAM / "iptables" / f"{name}.kube-proxy.yaml"]
    p = tmp_path / f"iptables-{backend}-save.txt"
    p.write_text(save)
    report, _ = diagnose_paths([p, *inputs], min_severity=Severity.INFO, command="diagnose")
    none_of(report, "KP121")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_grepped_fragment_concludes_nothing(
    dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path, backend: str
) -> None:
    """`iptables-save | grep KUBE-MARK-DROP`: the chain's rule may be anywhere the grep did not keep."""
    save = dumps[("no-kubelet", backend)]["save"]
    grepped = "".join(line + "\n" for line in save.splitlines() if "KUBE-MARK-DROP" in line)
    assert grepped.startswith(":KUBE-MARK-DROP - [0:0]\n") and "has no local endpoints" in grepped
    report = _diagnose(tmp_path, {"grep.txt": grepped}, cluster=False, node=None)
    assert [f.code for f in all_findings(report) if f.code == "KP121"] == []
    nat_s = dumps[("no-kubelet", backend)]["nat-S"]
    transcript = "# iptables -t nat -S | grep KUBE-MARK-DROP\n" + "".join(
        line + "\n" for line in nat_s.splitlines() if "KUBE-MARK-DROP" in line
    )
    none_of(_diagnose(tmp_path, {"transcript.txt": transcript}, cluster=False, node=None), "KP121")


def test_kubelets_rules_in_the_other_backend(dumps: dict[tuple[str, str], dict[str, str]], tmp_path: Path) -> None:
    """kubelet wrote KUBE-MARK-DROP's rule into iptables-legacy, kube-proxy jumps to it in nf_tables:
    the finding names the other backend and the fix starts with one backend for both."""
    got = dumps[("split", "both")]
    assert "-A KUBE-MARK-DROP -j MARK" in got["legacy-save"] and "-A KUBE-MARK-DROP " not in got["nft-save"]
    files = {"iptables-legacy-save.txt": got["legacy-save"], "iptables-nft-save.txt": got["nft-save"]}
    f = one(_diagnose(tmp_path, files), "KP121")
    assert f.severity == Severity.CRITICAL and f.evidence[0].artifact.endswith("iptables-nft-save.txt")
    assert "legacy backend's IPv4 rules" in f.summary and "one iptables backend" in f.fix[0]
