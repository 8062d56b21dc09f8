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

from pathlib import Path

from conftest import write

from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_evidence
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
    keep: list[object] = []
    report = diagnose_evidence(load([tmp_path]), min_severity=Severity.INFO, command="verify", keep=keep)
    facts = keep[0]
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
    assert sorted((e.backend, round(e.probability, 2)) for e in web.actual) == [
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
