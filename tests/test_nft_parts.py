"""A part of an nftables listing (a block cut out of its table) is read for what it shows, and
kube-proxy's `no-endpoint-services` drops are judged against the release that wrote them (KP123).

From real `nft` output (tests/data/nftables/parts, and the upstream-sourced layouts of
tests/data/nftables/layouts: a pre-1.34 table and a 1.36-era one).
"""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import none_of, one, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Severity

DATA = Path(__file__).parent / "data" / "nftables"
PART = DATA / "parts" / "no-endpoint-services-map.txt"
LAYOUTS = DATA / "layouts"


def test_a_map_block_without_its_table_is_a_part_of_kube_proxys_table() -> None:
    facts = Facts(load([PART]))
    (a,) = facts.evidence.artifacts
    assert a.kind is Kind.NFT_RULESET_TEXT and a.attrs.get("fragment") == "true"
    ((table, _),) = facts.nft_tables
    assert table.partial and table.name == "kube-proxy" and table.family == "" and table.sets == 1
    assert facts.running_mode.mode == "nftables"
    elements = [(e.key, e.comment, e.value, e.line) for e, _ in facts.nft_map_elements()]
    assert elements == [
        (("192.168.99.22", "tcp", "80"), "web/ingress:http", "drop", 4),
        (("172.30.0.46", "tcp", "80"), "ns6/svc6:p80", "goto reject-chain", 5),
    ]
    assert facts.nft_rules == []  # a part is never evaluated: what the rest of the table holds is unknown


def test_verify_says_a_part_is_not_enough(tmp_path: Path) -> None:
    report = run([PART, LAYOUTS / "gen-b-dnat-map" / "cluster.json"])
    ver = report.verification
    assert ver is not None and not ver.evaluated
    assert "only a part of a table (a block cut out of it) was given" in (ver.reason or ""), ver.reason


def test_a_whole_listing_s_elements_are_read_from_text_and_json_alike() -> None:
    d = LAYOUTS / "pre-1.34-base-chains"
    text = Facts(load([d / "ruleset.txt"])).nft_map_elements()
    data = Facts(load([d / "ruleset.json"])).nft_map_elements()
    assert text and [(e.map, e.key, e.comment, e.value) for e, _ in text] == [
        (e.map, e.key, e.comment, e.value) for e, _ in data
    ]
    assert ("no-endpoint-services", ("1.2.3.4", "tcp", "80"), "ns2/svc2:p80", "drop") in [
        (e.map, e.key, e.comment, e.value) for e, _ in data
    ]


def test_a_local_services_drop_in_a_part_is_suspected_until_the_release_says(tmp_path: Path) -> None:
    f = one(run([PART]), "KP123")
    assert f.severity == Severity.WARNING and f.suspected and f.confidence == Confidence.LOW
    assert "no-endpoint-services drops 192.168.99.22 . tcp . 80 (web/ingress:http)" in f.summary
    assert "kube-proxy --version" in f.decided_by and f.evidence[0].line == 4
    older = one(run([PART, write(tmp_path, "v.txt", "Kubernetes v1.32.4\n")]), "KP123")
    assert older.confidence == Confidence.MEDIUM and not older.suspected
    for fixed in ("v1.33.6", "v1.34.0", "v1.35.1"):
        got = one(run([PART, write(tmp_path, f"{fixed}.txt", f"Kubernetes {fixed}\n")]), "KP123")
        assert got.confidence == Confidence.LOW and "already has the fix" in got.summary, fixed


def test_the_table_s_own_chains_prove_the_release(tmp_path: Path) -> None:
    for suffix in ("ruleset.txt", "ruleset.json"):
        f = one(run([LAYOUTS / "pre-1.34-base-chains" / suffix]), "KP123")
        assert f.severity == Severity.CRITICAL and f.confidence == Confidence.MEDIUM and not f.suspected
        assert "no filter-output-pre-dnat chain: a release before the fix" in f.summary
    none_of(run([LAYOUTS / "gen-b-dnat-map" / "ruleset.txt"]), "KP123")  # the fix's pre-DNAT chains


def test_a_clusterip_drop_is_the_internal_policy_s_design(tmp_path: Path) -> None:
    """`drop` for a ClusterIP: internalTrafficPolicy: Local without a local endpoint drops the
    node's own traffic by design, in every release."""
    svc = """apiVersion: v1
kind: Service
metadata: {name: ingress, namespace: web}
spec:
  clusterIP: 192.168.99.22
  internalTrafficPolicy: Local
  ports: [{name: http, port: 80, protocol: TCP}]
"""
    none_of(run([PART, write(tmp_path, "svc.yaml", svc)]), "KP123")
