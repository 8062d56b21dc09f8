"""kube-proxy's nftables mode, verified against the cluster like iptables mode.

Inputs: upstream kube-proxy's own nftables expectations as real nft 1.0.6 lists them back
(tests/data/upstream/nftables, text and JSON), mutated the way broken nodes are: a Service's map
element gone, a stale element, a backend too many or missing, a random choice whose map does not
cover every number, a drop in another table or in iptables-legacy. Each mutation is caught with the
cause and the Service it concerns, and the healthy listing verifies clean.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from conftest import UPSTREAM, write

from kpdoctor.bundle.loader import load
from kpdoctor.dataplane.backend import Packet
from kpdoctor.dataplane.nftables.compile import compile_listing
from kpdoctor.dataplane.nftables.evaluate import Evaluator
from kpdoctor.diagnose import pipeline
from kpdoctor.facts import Facts
from kpdoctor.model import Report, Severity

NFT = UPSTREAM / "nftables" / "TestOverallNFTablesRules"
TEXT = NFT.with_suffix(".ruleset.txt").read_text()
CLUSTER = NFT.with_suffix(".cluster.json")
CONFIG = NFT.with_suffix(".kube-proxy.yaml")
SVC1_ELEMENT = "172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80,"
SVC4_VMAP = (
    "numgen random mod 2 vmap { 0 : goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80, "
    "1 : goto endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 }"
)


def run(paths: list[Path]) -> tuple[Facts, Report]:
    done = pipeline(load(paths), min_severity=Severity.INFO, command="verify", free=False)
    report, facts = done.report, done.facts
    assert isinstance(facts, Facts)
    return facts, report


def mutated(tmp_path: Path, old: str, new: str, extra: str = "") -> tuple[Facts, Report]:
    assert old in TEXT
    listing = write(tmp_path, "ruleset.txt", TEXT.replace(old, new, 1) + extra)
    return run([listing, CLUSTER, CONFIG])


def codes(report: Report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(f.summary)
    return out


@pytest.mark.parametrize("suffix", [".ruleset.txt", ".ruleset.json"])
@pytest.mark.parametrize("name", ["TestOverallNFTablesRules", "TestSyncProxyRulesRepeated_svc3TwoEndpoints"])
def test_upstream_listings_verify_clean(name: str, suffix: str) -> None:
    base = UPSTREAM / "nftables" / name
    _facts, report = run(
        [base.with_suffix(suffix), base.with_suffix(".cluster.json"), base.with_suffix(".kube-proxy.yaml")]
    )
    ver = report.verification
    assert ver is not None and ver.evaluated and ver.mode == "nftables"
    assert ver.clean, [(r.label, r.traffic, r.kind, r.note) for r in ver.results if r.status != "ok"]
    assert not ver.stale and [f.code for f in report.findings if f.severity >= Severity.WARNING] == []


def test_text_and_json_listings_give_the_same_outcomes() -> None:
    """The same ruleset read from `nft list ruleset` and from `nft -j list ruleset`."""
    local = [ipaddress.ip_address("192.168.0.2")]
    views = []
    for suffix in (".ruleset.txt", ".ruleset.json"):
        ev = Evaluator(4, compile_listing("x", NFT.with_suffix(suffix).read_text()), local=local)
        got = []
        for dst, port in (("172.30.0.44", 80), ("172.30.0.41", 81), ("192.168.0.2", 3001), ("5.6.7.8", 80)):
            outs = ev.run(Packet(ipaddress.ip_address("203.0.113.200"), ipaddress.ip_address(dst), "tcp", port))
            got.append(sorted((o.verdict, o.endpoint, round(o.probability, 6), o.state.masquerade) for o in outs))
        views.append(got)
    assert views[0] == views[1]
    assert views[0][0] == [("ACCEPT", "10.180.0.4:80", 0.5, True), ("ACCEPT", "10.180.0.5:80", 0.5, True)]
    assert views[0][1] == [("REJECT", None, 1.0, False)]  # an undeclared port of an active ClusterIP
    assert views[0][2] == [("DROP", None, 1.0, False)]  # NodePort of a Local Service without local endpoints
    assert views[0][3] == [("DROP", None, 1.0, False)]  # outside loadBalancerSourceRanges


def test_a_missing_service_element_is_caught(tmp_path: Path) -> None:
    _facts, report = mutated(tmp_path, SVC1_ELEMENT, "")
    ver = report.verification
    assert ver is not None and not ver.clean
    bad = {r.label for r in ver.results if r.status != "ok"}
    assert bad == {"ns1/svc1:p80"}
    found = codes(report)
    assert any("ns1/svc1:p80" in s for c in ("KP200", "KP204") for s in found.get(c, [])), found


def test_a_stale_service_element_is_caught(tmp_path: Path) -> None:
    stale = "172.30.0.99 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80,"
    _facts, report = mutated(tmp_path, SVC1_ELEMENT, SVC1_ELEMENT + "\n\t\t\t     " + stale)
    ver = report.verification
    assert ver is not None and [s.destination for s in ver.stale] == ["172.30.0.99:80"]
    assert ver.stale[0].label == "ns1/svc1:p80" and ver.stale[0].backends == ["10.180.0.1:80"]
    assert any("172.30.0.99:80" in s and "ns1/svc1:p80" in s for s in codes(report)["KP201"])


def test_a_stale_backend_is_caught(tmp_path: Path) -> None:
    old = "numgen random mod 1 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 }"
    new = (
        "numgen random mod 2 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80, "
        "1 : goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 }"
    )
    _facts, report = mutated(tmp_path, old, new)
    assert any("ns1/svc1:p80" in s for s in codes(report)["KP202"])


def test_a_missing_backend_is_caught(tmp_path: Path) -> None:
    new = "numgen random mod 1 vmap { 0 : goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 }"
    _facts, report = mutated(tmp_path, SVC4_VMAP, new)
    assert any("ns4/svc4:p80" in s for s in codes(report)["KP202"])


def test_a_random_choice_whose_map_has_a_gap_is_caught_and_explained(tmp_path: Path) -> None:
    _facts, report = mutated(tmp_path, SVC4_VMAP, SVC4_VMAP.replace("mod 2", "mod 3"))
    ver = report.verification
    assert ver is not None
    bad = [r for r in ver.results if r.label == "ns4/svc4:p80" and r.status != "ok"]
    assert bad
    pod = next(r for r in bad if r.traffic == "pod-to-clusterip")
    assert sorted(round(e.probability, 3) for e in pod.actual) == [0.333, 0.333, 0.333]
    assert "no element for 2 (of numgen mod 3)" in pod.note, pod.note


def test_an_empty_service_chain_reached_from_a_live_element_is_a_fault(tmp_path: Path) -> None:
    old = (
        "\t\tip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade\n"
        "\t\tnumgen random mod 1 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 }\n"
    )
    _facts, report = mutated(tmp_path, old, "")
    ver = report.verification
    assert ver is not None
    pod = next(r for r in ver.results if r.label == "ns1/svc1:p80" and r.traffic == "pod-to-clusterip")
    assert pod.status != "ok" and "which has no rules" in pod.note, pod.note


def test_an_empty_chain_no_element_reaches_is_kube_proxys_own_cleanup(tmp_path: Path) -> None:
    extra = "table ip kube-proxy {\n\tchain service-ZZZZZZZZ-ns9/gone/tcp/p80 {\n\t}\n}\n"
    _facts, report = mutated(tmp_path, "\tchain cluster-ips-check {", "\tchain cluster-ips-check {", extra)
    ver = report.verification
    assert ver is not None and ver.clean and not ver.stale


def test_a_drop_in_another_table_at_an_earlier_priority_is_caught(tmp_path: Path) -> None:
    extra = (
        "table inet firewalld {\n\tchain filter_PREROUTING {\n"
        "\t\ttype filter hook prerouting priority dstnat - 50; policy accept;\n"
        "\t\tip daddr 172.30.0.44 tcp dport 80 drop\n\t}\n}\n"
    )
    _facts, report = mutated(tmp_path, SVC1_ELEMENT, SVC1_ELEMENT, extra)
    found = codes(report)
    assert any("ns4/svc4:p80" in s for s in found["KP204"]), found
    f = next(f for f in report.findings if f.code == "KP204")
    assert any("tcp dport 80 drop" in c.text for c in f.evidence), f.evidence
    assert "firewalld" in f.summary + " ".join(c.text for c in f.evidence)


def test_a_drop_in_an_iptables_legacy_table_is_caught(tmp_path: Path) -> None:
    legacy = write(
        tmp_path,
        "iptables-legacy-save.txt",
        "# Generated by iptables-save v1.8.9 on Thu Nov 26 10:00:00 2026\n*filter\n:INPUT ACCEPT [0:0]\n"
        ":FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -d 10.180.0.4/32 -p tcp -m tcp --dport 80 -j DROP\n"
        "COMMIT\n# Completed on Thu Nov 26 10:00:00 2026\n",
    )
    facts, report = run([NFT.with_suffix(".ruleset.json"), legacy, CLUSTER, CONFIG])
    assert facts.running_mode.mode == "nftables"
    ver = report.verification
    assert ver is not None
    pod = next(r for r in ver.results if r.label == "ns4/svc4:p80" and r.traffic == "pod-to-clusterip")
    assert sorted((e.verdict, round(e.probability, 2)) for e in pod.actual) == [("ACCEPT", 0.5), ("DROP", 0.5)]
    assert any("ns4/svc4:p80" in s for s in codes(report)["KP204"])


def test_two_nat_chains_of_equal_priority_that_both_translate_are_uncertain(tmp_path: Path) -> None:
    """iptables-nft's nat PREROUTING and kube-proxy's nat-prerouting both hook at -100: which runs
    first is not in any listing, and here it decides where the connection goes."""
    nat = write(
        tmp_path,
        "iptables-nft-save.txt",
        "# Generated by iptables-nft-save v1.8.9 (nf_tables) on Thu Nov 26 10:00:00 2026\n*nat\n"
        ":PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n"
        "-A PREROUTING -d 172.30.0.41/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.99.0.1:80\nCOMMIT\n",
    )
    _facts, report = run([NFT.with_suffix(".ruleset.json"), nat, CLUSTER, CONFIG])
    ver = report.verification
    assert ver is not None
    pod = next(r for r in ver.results if r.label == "ns1/svc1:p80" and r.traffic == "pod-to-clusterip")
    assert pod.status == "uncertain", (pod.status, pod.actual)
    assert "same priority (-100)" in pod.note, pod.note
    other = next(r for r in ver.results if r.label == "ns4/svc4:p80" and r.traffic == "pod-to-clusterip")
    assert other.status == "ok"  # only one of them translates this one: the order does not matter


LAYOUTS = Path(__file__).parent / "data" / "nftables" / "layouts"  # sourced from upstream: SOURCES.md there


@pytest.mark.parametrize("suffix", ["ruleset.txt", "ruleset.json"])
@pytest.mark.parametrize("layout", ["pre-1.34-base-chains", "gen-b-dnat-map", "ipv6-pre-1.34-nodeport"])
def test_every_sourced_layout_verifies_clean(layout: str, suffix: str) -> None:
    """Older base-chain names, the DNAT-map layout (endpoint chains squashed, hairpin set, inline
    mark), an IPv6 table: the layout is read from the rules, never from a version."""
    d = LAYOUTS / layout
    _facts, report = run([d / suffix, d / "cluster.json", d / "kube-proxy.yaml"])
    ver = report.verification
    assert ver is not None and ver.evaluated and ver.mode == "nftables"
    assert ver.clean, [(r.label, r.traffic, r.kind, r.note) for r in ver.results if r.status != "ok"]
    assert ver.results and not ver.stale
    assert {r.family for r in ver.results} == ({6} if "ipv6" in layout else {4})
    assert [f.code for f in report.findings if f.severity >= Severity.WARNING] == []


GEN_B = LAYOUTS / "gen-b-dnat-map"
GEN_B_MAP = "meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.180.0.4 . 80, 1 : 10.180.0.5 . 80 }"


@pytest.mark.parametrize(
    ("new", "expect"),
    [
        (GEN_B_MAP.replace("10.180.0.5 . 80", "10.180.0.9 . 80"), "stale"),
        (GEN_B_MAP.replace("mod 2", "mod 3"), "gap"),
    ],
)
def test_dnat_map_layout_mutations_are_caught(tmp_path: Path, new: str, expect: str) -> None:
    text = (GEN_B / "ruleset.txt").read_text()
    assert GEN_B_MAP in text
    listing = write(tmp_path, "ruleset.txt", text.replace(GEN_B_MAP, new))
    _facts, report = run([listing, GEN_B / "cluster.json", GEN_B / "kube-proxy.yaml"])
    ver = report.verification
    assert ver is not None
    pod = next(r for r in ver.results if r.label == "ns4/svc4:p80" and r.traffic == "pod-to-clusterip")
    assert pod.status == "mismatch"
    if expect == "stale":
        assert pod.stale_backends == ["10.180.0.9:80"] and pod.missing_backends == ["10.180.0.5:80"]
    else:
        assert "no element for 2 (of numgen mod 3)" in pod.note, pod.note


def test_local_endpoints_the_rules_do_not_know_are_caught(tmp_path: Path) -> None:
    """Seed 002 in nftables mode: the cluster says svc2's endpoint runs on this node, the node's
    rules still drop its externalTrafficPolicy=Local traffic as having no local endpoint."""
    doc = json.loads(CLUSTER.read_text())
    for it in doc["items"]:
        if it["kind"] == "EndpointSlice" and it["metadata"]["name"] == "svc2-1":
            it["endpoints"][0]["nodeName"] = "test-node"
    cluster = write(tmp_path, "cluster.json", json.dumps(doc))
    _facts, report = run([NFT.with_suffix(".ruleset.json"), cluster, CONFIG])
    found = codes(report)
    assert any("ns2/svc2:p80" in s for s in found["KP203"]), found


NATIVE_FILTER = (
    "table ip filter {\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n"
    "\t\tip daddr 10.180.0.4 drop\n\t}\n}\n"
)
# what iptables-nft-save prints for such a table: never its rules
INCOMPATIBLE = (
    "# Generated by iptables-nft-save v1.8.9 (nf_tables) on Thu Nov 26 10:00:00 2026\n*filter\n"
    "# Table `filter' contains incompatible base-chains, use 'nft' tool to list them.\n"
    ":INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
)


def test_a_hand_written_table_named_like_iptables_is_evaluated_from_the_listing(tmp_path: Path) -> None:
    listing = write(tmp_path, "ruleset.txt", TEXT + NATIVE_FILTER)
    save = write(tmp_path, "iptables-nft-save.txt", INCOMPATIBLE)
    _facts, report = run([listing, save, CLUSTER, CONFIG])
    found = codes(report)
    assert any("ns4/svc4:p80" in s for s in found["KP204"]), found


def test_an_ingress_chain_on_an_unknown_device_makes_what_it_decides_uncertain(tmp_path: Path) -> None:
    """nft -j does not print the device a netdev chain is bound to: whether a packet meets it is
    not in the evidence, so a drop there is uncertain, never ignored."""
    ingress = (
        'table netdev guard {\n\tchain ingress_eth0 {\n\t\ttype filter hook ingress device "eth0" priority -500; '
        "policy accept;\n\t\tip daddr 172.30.0.44 drop\n\t}\n}\n"
    )
    _facts, report = run([write(tmp_path, "ruleset.txt", TEXT + ingress), CLUSTER, CONFIG])
    ver = report.verification
    assert ver is not None
    pod = next(r for r in ver.results if r.label == "ns4/svc4:p80" and r.traffic == "pod-to-clusterip")
    assert pod.status == "uncertain" and "ingress chain netdev guard ingress_eth0" in pod.note, pod.note
    other = next(r for r in ver.results if r.label == "ns1/svc1:p80" and r.traffic == "pod-to-clusterip")
    assert other.status == "ok"


def test_trace_names_the_map_element_each_branch_took() -> None:
    """Element by element: the service-ips element that chose the Service chain, and the numgen
    element that chose each backend (the DNAT-map layout)."""
    from click.testing import CliRunner

    from kpdoctor.cli import app

    res = CliRunner().invoke(app, ["trace", "--to", "172.30.0.44:80", str(GEN_B / "ruleset.txt")])
    assert res.exit_code == 0, res.output
    assert "[element 172.30.0.44 . tcp . 80 : goto service-LAUZTJTB-ns4/svc4/tcp/p80]" in res.stdout
    assert "[element 0 : 10.180.0.4 . 80]" in res.stdout and "[element 1 : 10.180.0.5 . 80]" in res.stdout
    assert res.stdout.count("50.0% DNAT to") == 2
