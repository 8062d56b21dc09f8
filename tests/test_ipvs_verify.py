"""kube-proxy's IPVS mode, verified against the cluster: the node's iptables rules (which match
IPVS mode's ipsets), kube-ipvs0 and the virtual servers.

Inputs: the healthy IPVS node of tests/data/modes/ipvs-healthy (real `iptables-legacy-save`,
`ipset list` and `ip addr` of a namespace built the way kube-proxy builds it; `ipvsadm -Ln` in
ipvsadm's printed format, this kernel has no IPVS; SOURCES.md there), mutated the way broken
nodes are: a virtual server gone, one for an address no Service owns, a real server missing,
stale or on the wrong port, a ClusterIP missing from kube-ipvs0 or from KUBE-CLUSTER-IP. A
draining real server (weight 0) is not flagged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import write

from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_evidence, pipeline
from kpdoctor.facts import Facts
from kpdoctor.model import Report, Severity

NODE = Path(__file__).parent / "data" / "modes" / "ipvs-healthy"
FILES = {
    p.name: p.read_text()
    for p in sorted(NODE.iterdir())
    if p.is_file() and p.suffix in (".txt", ".json", ".log", ".yaml")
}
WEB_VS = (
    "TCP  10.96.100.20:80 rr\n"
    "  -> 10.244.0.9:8080              Masq    1      0          0         \n"
    "  -> 10.244.1.12:8080             Masq    1      0          0         \n"
)


def run(tmp_path: Path, **changed: str) -> tuple[Facts, Report]:
    for name, text in FILES.items():
        write(tmp_path, name, changed.get(name, text))
    done = pipeline(load([tmp_path]), min_severity=Severity.INFO, command="verify", free=False)
    report, facts = done.report, done.facts
    assert isinstance(facts, Facts)
    return facts, report


def ipvsadm(old: str, new: str) -> str:
    text = FILES["ipvsadm.txt"]
    assert old in text
    return text.replace(old, new, 1)


def codes(report: Report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(f.summary)
    return out


def bad(report: Report) -> set[str]:
    ver = report.verification
    assert ver is not None and ver.evaluated
    return {r.label for r in ver.results if r.status != "ok"}


def test_the_healthy_node_verifies_clean(tmp_path: Path) -> None:
    _facts, report = run(tmp_path)
    ver = report.verification
    assert ver is not None and ver.mode == "ipvs" and ver.clean and not ver.stale
    web = next(r for r in ver.results if r.label == "default/web:http" and r.traffic == "pod-to-clusterip")
    assert sorted((e.endpoint, round(e.probability, 2)) for e in web.actual) == [
        ("10.244.0.9:8080", 0.5),
        ("10.244.1.12:8080", 0.5),
    ]
    assert all(e.rule is not None and e.rule.artifact.endswith("ipvsadm.txt") for e in web.actual)


def test_a_missing_virtual_server_is_caught(tmp_path: Path) -> None:
    _facts, report = run(tmp_path, **{"ipvsadm.txt": ipvsadm(WEB_VS, "")})
    assert bad(report) == {"default/web:http"}
    assert any("default/web:http" in s for s in codes(report)["KP200"])


def test_a_virtual_server_no_service_owns_is_stale(tmp_path: Path) -> None:
    old = "TCP  10.96.200.9:80 rr\n  -> 10.244.3.3:8080              Masq    1      0          0         \n"
    _facts, report = run(tmp_path, **{"ipvsadm.txt": FILES["ipvsadm.txt"] + old})
    ver = report.verification
    assert ver is not None and [s.destination for s in ver.stale] == ["10.96.200.9:80"]
    assert ver.stale[0].leftover_of is None
    assert any("10.96.200.9:80" in s for s in codes(report)["KP201"])


def test_a_missing_real_server_is_caught(tmp_path: Path) -> None:
    text = ipvsadm(
        WEB_VS, WEB_VS.replace("  -> 10.244.1.12:8080             Masq    1      0          0         \n", "")
    )
    _facts, report = run(tmp_path, **{"ipvsadm.txt": text})
    assert bad(report) == {"default/web:http"}
    assert any("default/web:http" in s and "10.244.1.12:8080" in s for s in codes(report)["KP202"])


def test_a_stale_real_server_is_caught(tmp_path: Path) -> None:
    stale = WEB_VS + "  -> 10.244.2.99:8080             Masq    1      0          0         \n"
    _facts, report = run(tmp_path, **{"ipvsadm.txt": ipvsadm(WEB_VS, stale)})
    ver = report.verification
    assert ver is not None
    web = next(r for r in ver.results if r.label == "default/web:http" and r.traffic == "pod-to-clusterip")
    assert web.stale_backends == ["10.244.2.99:8080"]
    assert any("default/web:http" in s for s in codes(report)["KP202"])


def test_a_real_server_on_the_wrong_port_is_caught(tmp_path: Path) -> None:
    _facts, report = run(tmp_path, **{"ipvsadm.txt": ipvsadm(WEB_VS, WEB_VS.replace(":8080", ":8081"))})
    ver = report.verification
    assert ver is not None
    web = next(r for r in ver.results if r.label == "default/web:http" and r.traffic == "pod-to-clusterip")
    assert web.missing_backends == ["10.244.0.9:8080", "10.244.1.12:8080"]
    assert web.stale_backends == ["10.244.0.9:8081", "10.244.1.12:8081"]


def test_a_draining_real_server_is_not_flagged(tmp_path: Path) -> None:
    """A removed TCP endpoint stays at weight 0 until its connections end (graceful termination)."""
    draining = WEB_VS + "  -> 10.244.2.50:8080             Masq    0      3          1         \n"
    _facts, report = run(tmp_path, **{"ipvsadm.txt": ipvsadm(WEB_VS, draining)})
    ver = report.verification
    assert ver is not None and ver.clean and not ver.stale


def test_an_empty_virtual_server_refuses(tmp_path: Path) -> None:
    empty = "TCP  10.96.100.20:80 rr\n"
    _facts, report = run(tmp_path, **{"ipvsadm.txt": ipvsadm(WEB_VS, empty)})
    ver = report.verification
    assert ver is not None
    web = next(r for r in ver.results if r.label == "default/web:http" and r.traffic == "pod-to-clusterip")
    assert [e.verdict for e in web.actual] == ["REJECT"] and "has no real server" in web.note
    assert bad(report) == {"default/web:http"}
    found = codes(report)
    assert any("default/web:http" in s and "10.96.100.20:80" in s for s in found["KP208"]), found
    assert "KP202" not in found


def test_a_clusterip_missing_from_kube_ipvs0_is_caught(tmp_path: Path) -> None:
    """Not on kube-ipvs0, the ClusterIP is not the node's own: the packet is routed away, and
    IPVS, which takes only packets for the node, never sees it."""
    addr = FILES["ip-addr.txt"]
    line = "    inet 10.96.100.20/32 scope global kube-ipvs0\n       valid_lft forever preferred_lft forever\n"
    assert line in addr
    _facts, report = run(tmp_path, **{"ip-addr.txt": addr.replace(line, "")})
    assert bad(report) == {"default/web:http"}
    assert any("default/web:http" in s for s in codes(report)["KP200"])


def test_a_clusterip_missing_from_its_ipset_is_refused_as_having_no_rules(tmp_path: Path) -> None:
    """KUBE-IPVS-FILTER accepts kube-ipvs0 addresses that KUBE-CLUSTER-IP lists and rejects the
    others: a Service missing from the set is refused by kube-proxy's own catch-all."""
    sets = FILES["ipset-list.txt"]
    assert "10.96.100.20,tcp:80\n" in sets
    _facts, report = run(tmp_path, **{"ipset-list.txt": sets.replace("10.96.100.20,tcp:80\n", "", 1)})
    assert bad(report) == {"default/web:http"}
    found = codes(report)
    assert any("default/web:http" in s and "refuses them" in s for s in found["KP200"]), found


def test_persistence_the_service_does_not_ask_for_is_caught(tmp_path: Path) -> None:
    """sessionAffinity None, but the virtual server keeps clients for 3 hours (kube-proxy never
    applied the change, or the server was edited by hand)."""
    sticky = WEB_VS.replace("TCP  10.96.100.20:80 rr\n", "TCP  10.96.100.20:80 rr persistent 10800\n")
    _facts, report = run(tmp_path, **{"ipvsadm.txt": ipvsadm(WEB_VS, sticky)})
    ver = report.verification
    assert ver is not None
    web = next(r for r in ver.results if r.label == "default/web:http" and r.traffic == "pod-to-clusterip")
    assert web.status == "mismatch" and web.kind == "affinity" and web.affinity == (10800, 0)
    assert web.to_json()["affinity_seconds"] == {"rules": 10800, "service": 0}
    assert bad(report) == {"default/web:http"}  # the NodePort's own virtual server is not persistent
    assert any("default/web:http" in s and "10800 s" in s for s in codes(report)["KP202"])


def test_affinity_the_virtual_server_lacks_is_caught_and_a_matching_one_is_not(tmp_path: Path) -> None:
    cluster = FILES["cluster.json"]
    old = '"name": "web",'
    assert cluster.count(old) >= 1
    doc = json.loads(cluster)
    for item in doc["items"]:
        if item["kind"] == "Service" and item["metadata"]["name"] == "web":
            item["spec"]["sessionAffinity"] = "ClientIP"
            item["spec"]["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 600}}
    sticky = json.dumps(doc)
    _facts, report = run(tmp_path / "a", **{"cluster.json": sticky})
    assert bad(report) == {"default/web:http"}
    assert any("asks for ClientIP (600 s)" in s for s in codes(report)["KP202"])
    both = (
        FILES["ipvsadm.txt"]
        .replace("TCP  10.96.100.20:80 rr\n", "TCP  10.96.100.20:80 rr persistent 600\n")
        .replace("TCP  192.168.0.2:30080 rr\n", "TCP  192.168.0.2:30080 rr persistent 600\n")
    )
    _facts, report = run(tmp_path / "b", **{"cluster.json": sticky, "ipvsadm.txt": both})
    ver = report.verification
    assert ver is not None and ver.clean


def _ipvsadm_save(listing: str) -> str:
    """``ipvsadm -Sn`` of the state an ``ipvsadm -Ln`` listing shows, printed as ipvsadm.c's
    print_service_entry does with FMT_RULE (``-A %s -s %s[ -p %u]``, ``-a %s -r %s %s -w %d``)."""
    out, service = [], ""
    for line in listing.splitlines():
        vs = re.match(r"^(TCP|UDP)\s+(\S+)\s+(\w+)(?:\s+persistent (\d+))?", line)
        rs = re.match(r"^\s+->\s+(\d\S+)\s+Masq\s+(\d+)", line)
        if vs:
            service = ("-t " if vs.group(1) == "TCP" else "-u ") + vs.group(2)
            out.append(f"-A {service} -s {vs.group(3)}" + (f" -p {vs.group(4)}" if vs.group(4) else ""))
        elif rs and service:
            out.append(f"-a {service} -r {rs.group(1)} -m -w {rs.group(2)}")
    return "\n".join(out) + "\n"


def test_the_healthy_node_in_save_form_verifies_clean(tmp_path: Path) -> None:
    saved = _ipvsadm_save(FILES["ipvsadm.txt"])
    assert saved.startswith("-A -t 192.168.0.2:30080 -s rr\n-a -t 192.168.0.2:30080 -r 10.244.0.9:8080 -m -w 1\n")
    _facts, report = run(tmp_path, **{"ipvsadm.txt": saved})
    ver = report.verification
    assert ver is not None and ver.mode == "ipvs" and ver.clean and not ver.stale
    # and a real server missing from it is still caught
    broken = saved.replace("-a -t 10.96.100.20:80 -r 10.244.1.12:8080 -m -w 1\n", "")
    _facts, report = run(tmp_path / "b", **{"ipvsadm.txt": broken})
    assert bad(report) == {"default/web:http"}


def test_a_stats_listing_verifies_the_real_servers_it_shows(tmp_path: Path) -> None:
    """`ipvsadm -Ln --stats` has no weights and no scheduler: the real servers are compared, the
    persistence is not (it is not shown)."""
    stats = ["IP Virtual Server version 1.2.1 (size=4096)"]
    for line in FILES["ipvsadm.txt"].splitlines()[3:]:
        vs = re.match(r"^(TCP|UDP)\s+(\S+)\s+\w+", line)
        rs = re.match(r"^\s+->\s+(\S+)", line)
        if vs:
            stats.append(f"{vs.group(1)}  {vs.group(2):<28}" + "        0" * 5)
        elif rs:
            stats.append(f"  -> {rs.group(1):<28}" + "        0" * 5)
    _facts, report = run(tmp_path, **{"ipvsadm.txt": "\n".join(stats) + "\n"})
    ver = report.verification
    assert ver is not None and ver.clean


def test_local_policy_external_virtual_server_empty_by_design_is_not_flagged(tmp_path: Path) -> None:
    """externalTrafficPolicy Local, no endpoint on this node: kube-proxy leaves the NodePort's
    virtual server empty (and RETURNs it from KUBE-NODE-PORT unmasqueraded); its ClusterIP
    virtual server still holds every endpoint."""
    doc = json.loads(FILES["cluster.json"])
    for item in doc["items"]:
        if item["kind"] == "Service" and item["metadata"]["name"] == "web":
            item["spec"]["externalTrafficPolicy"] = "Local"
        if item["kind"] == "EndpointSlice" and item["metadata"]["name"].startswith("web-"):
            for ep in item["endpoints"]:
                ep["nodeName"] = "node-2"
    nodeport_vs = (
        "TCP  192.168.0.2:30080 rr\n"
        "  -> 10.244.0.9:8080              Masq    1      0          0         \n"
        "  -> 10.244.1.12:8080             Masq    1      0          0         \n"
    )
    listing = ipvsadm(nodeport_vs, "TCP  192.168.0.2:30080 rr\n")
    masq = (
        '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" '
        "-m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ\n"
    )
    local = (
        '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port with externalTrafficPolicy=local"'
        " -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN\n"
    )
    rules = FILES["iptables-save.txt"]
    assert masq in rules
    sets = FILES["ipset-list.txt"]
    head = "Name: KUBE-NODE-PORT-LOCAL-TCP\n"
    start = sets.index(head)
    members = sets.index("Members:\n", start) + len("Members:\n")
    sets = sets[:members] + "30080\n" + sets[members:]
    _facts, report = run(
        tmp_path,
        **{
            "cluster.json": json.dumps(doc),
            "ipvsadm.txt": listing,
            "iptables-save.txt": rules.replace(masq, local + masq),
            "ipset-list.txt": sets,
        },
    )
    ver = report.verification
    assert ver is not None and ver.clean, [(r.label, r.traffic, r.note) for r in ver.results if r.status != "ok"]
    ext = [r for r in ver.results if r.label == "default/web:http" and r.traffic.startswith("external")]
    assert ext and all(e.verdict == "REJECT" for r in ext for e in r.actual)
    found = codes(report)
    assert "KP208" not in found and "KP202" not in found and "KP200" not in found


def _with_external_ip(ip: str) -> str:
    doc = json.loads(FILES["cluster.json"])
    for item in doc["items"]:
        if item["kind"] == "Service" and item["metadata"]["name"] == "web":
            item["spec"]["externalIPs"] = [ip]
    return json.dumps(doc)


KUBE_IPVS0_WEB = "    inet 10.96.100.20/32 scope global kube-ipvs0\n       valid_lft forever preferred_lft forever\n"


def test_an_external_ip_that_is_the_node_address_is_named(tmp_path: Path) -> None:
    """externalIPs set to the node's own address (kubernetes#104679): IPVS mode binds it on
    kube-ipvs0 of every node, and the node becomes unreachable."""
    addr = FILES["ip-addr.txt"]
    assert KUBE_IPVS0_WEB in addr
    bound = addr.replace(
        KUBE_IPVS0_WEB,
        KUBE_IPVS0_WEB + "    inet 192.168.0.2/32 scope global kube-ipvs0\n       valid_lft forever preferred_lft forever\n",
    )
    # what kube-proxy also writes for the externalIP: its virtual server and KUBE-EXTERNAL-IP entry
    listing = FILES["ipvsadm.txt"] + WEB_VS.replace("10.96.100.20:80", "192.168.0.2:80")
    sets = FILES["ipset-list.txt"]
    head = "Name: KUBE-EXTERNAL-IP\n"
    members = sets.index("Members:\n", sets.index(head)) + len("Members:\n")
    sets = sets[:members] + "192.168.0.2,tcp:80\n" + sets[members:]
    _facts, report = run(
        tmp_path,
        **{
            "cluster.json": _with_external_ip("192.168.0.2"),
            "ip-addr.txt": bound,
            "ipvsadm.txt": listing,
            "ipset-list.txt": sets,
        },
    )
    (f,) = [f for f in report.findings if f.code == "KP209"]
    assert f.cause == "service-vip-is-node-address" and f.severity == Severity.CRITICAL
    assert "default/web's externalIPs 192.168.0.2 is the address of node ipvs-node" in f.summary
    assert "kube-ipvs0" in f.summary
    texts = [c.text for c in f.evidence]
    assert any("externalIPs 192.168.0.2" in t for t in texts)
    assert any("InternalIP 192.168.0.2" in t for t in texts)
    assert any("kube-ipvs0" in t for t in texts)
    assert report.findings[0].code == "KP209"


def test_an_external_ip_no_node_has_is_not_flagged(tmp_path: Path) -> None:
    _facts, report = run(tmp_path, **{"cluster.json": _with_external_ip("192.168.0.200")})
    assert "KP209" not in codes(report)


def test_the_node_address_on_kube_ipvs0_is_named_without_the_services(tmp_path: Path) -> None:
    addr = FILES["ip-addr.txt"].replace(
        KUBE_IPVS0_WEB,
        KUBE_IPVS0_WEB + "    inet 192.168.0.2/32 scope global kube-ipvs0\n       valid_lft forever preferred_lft forever\n",
    )
    write(tmp_path, "ip-addr.txt", addr)
    report = diagnose_evidence(load([tmp_path]), min_severity=Severity.INFO)
    (f,) = [f for f in report.findings if f.code == "KP209"]
    assert "192.168.0.2 is an address of this node" in f.summary
    assert [c.line for c in f.evidence] == [
        addr.splitlines().index(next(ln for ln in addr.splitlines() if "inet 192.168.0.2/24" in ln)) + 1,
        addr.splitlines().index("    inet 192.168.0.2/32 scope global kube-ipvs0") + 1,
    ]


def test_a_node_address_given_to_a_service_outside_ipvs_mode_is_a_warning(tmp_path: Path) -> None:
    """Only the cluster's objects: the mode is not known, so the capture is the Service's ports
    (iptables/nftables), not the whole address."""
    write(tmp_path, "cluster.json", _with_external_ip("192.168.0.2"))
    report = diagnose_evidence(load([tmp_path]), min_severity=Severity.INFO)
    (f,) = [f for f in report.findings if f.code == "KP209"]
    assert f.severity == Severity.WARNING and "forwards the Service's ports on that address" in f.summary


def test_virtual_servers_listed_by_name_are_said_to_be_unread(tmp_path: Path) -> None:
    named = FILES["ipvsadm.txt"] + "TCP  ip-10-0-62-121.ec2.internal: rr\n  -> 100.96.5.4:9090   Masq    1      0     0\n"
    _facts, report = run(tmp_path, **{"ipvsadm.txt": named})
    ver = report.verification
    assert ver is not None and any("listed by name" in n and "ipvsadm -Ln" in n for n in ver.not_evaluated)
