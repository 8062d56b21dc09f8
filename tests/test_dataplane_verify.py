"""Verification against upstream kube-proxy's own rule sets: clean as they are, and every kind of
breakage found (with the right cause and Service) when the cluster or the rules are mutated."""

from __future__ import annotations

import copy
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import UPSTREAM, obfuscate, verification_of

from kpdoctor.bundle.loader import load
from kpdoctor.dataplane.verify import Part
from kpdoctor.diagnose import diagnose_evidence
from kpdoctor.facts import Facts
from kpdoctor.model import Report

FIX = UPSTREAM / "iptables"
NAMES = sorted({p.name.rsplit(".", 2)[0] for p in FIX.glob("*.save")})
OVERALL = "TestOverallIPTablesRules"


def cluster(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIX / f"{name}.cluster.json").read_text())
    return doc


def stage(
    tmp: Path, name: str, backend: str = "nft", doc: dict[str, Any] | None = None, rules: str | None = None
) -> list[Path]:
    save = tmp / f"{backend}.save"
    save.write_text(rules if rules is not None else (FIX / f"{name}.{backend}.save").read_text())
    cl = tmp / "cluster.json"
    cl.write_text(json.dumps(doc if doc is not None else cluster(name)))
    cfg = tmp / "kube-proxy.yaml"
    cfg.write_text((FIX / f"{name}.kube-proxy.yaml").read_text())
    return [save, cl, cfg]


def run(paths: list[Path]) -> tuple[Facts, Report]:
    ev = load(paths)
    facts = Facts(ev)
    return facts, diagnose_evidence(ev)


def proxied_services(doc: dict[str, Any]) -> int:
    return sum(
        1
        for it in doc["items"]
        if it["kind"] == "Service"
        and it["spec"].get("type") != "ExternalName"
        and it["spec"].get("clusterIP") not in (None, "", "None")
    )


@pytest.mark.parametrize("backend", ["legacy", "nft"])
@pytest.mark.parametrize("name", NAMES)
def test_upstream_rules_verify_clean(tmp_path: Path, name: str, backend: str) -> None:
    facts, report = run(stage(tmp_path, name, backend))
    ver = verification_of(facts)
    assert ver is not None
    assert ver.services_checked == proxied_services(cluster(name))
    bad = [(r.label, r.traffic, r.status, r.note) for r in ver.results if r.status != "ok"]
    assert bad == []
    assert ver.results and not ver.stale and ver.clean
    assert [f.cause for f in report.findings] == []
    # every Service of the cluster is covered by at least one traffic class
    assert {r.service for r in ver.results} == {
        f"{it['metadata']['namespace']}/{it['metadata']['name']}"
        for it in cluster(name)["items"]
        if it["kind"] == "Service"
    }


# What upstream's TestOverallIPTablesRules programs, per Service port and traffic class.
OVERALL_EXPECTED = {
    ("ns1/svc1:p80", "pod-to-clusterip"): ["10.180.0.1:80"],
    ("ns1/svc1:p80", "node-to-clusterip"): ["10.180.0.1:80"],
    ("ns2/svc2:p80", "pod-to-clusterip"): ["10.180.0.2:80"],
    ("ns2/svc2:p80", "external-to-nodeport"): "DROP",  # eTP=Local, no local endpoint
    ("ns2/svc2:p80", "external-to-externalip"): "DROP",
    ("ns2/svc2:p80", "external-to-loadbalancer"): "DROP",
    ("ns3/svc3:p80", "external-to-nodeport"): ["10.180.0.3:80"],
    ("ns4/svc4:p80", "pod-to-clusterip"): ["10.180.0.4:80", "10.180.0.5:80"],
    ("ns4/svc4:p80", "external-to-externalip"): ["10.180.0.4:80", "10.180.0.5:80"],
    ("ns5/svc5:p80", "external-to-loadbalancer"): ["10.180.0.3:80"],
    ("ns5/svc5:p80", "external-to-loadbalancer-outside-source-ranges"): "DROP",
    ("ns6/svc6:p80", "pod-to-clusterip"): "REJECT",  # no endpoints
}


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_overall_backends_and_probabilities(tmp_path: Path, backend: str) -> None:
    facts, _ = run(stage(tmp_path, OVERALL, backend))
    ver = verification_of(facts)
    assert ver is not None
    got = {(r.label, r.traffic): r for r in ver.results}
    for key, want in OVERALL_EXPECTED.items():
        r = got[key]
        assert r.status == "ok", key
        if isinstance(want, str):
            assert [e.verdict for e in r.actual] == [want], key
        else:
            assert sorted(e.endpoint or "" for e in r.actual) == want, key
            assert all(abs(e.probability - 1 / len(want)) < 1e-6 for e in r.actual), key
            assert all(e.rule is not None and e.rule.line for e in r.actual), key
    js = ver.to_json()
    assert js["services_checked"] == 6 and js["mismatches"] == 0 and js["uncertain"] == 0
    assert js["ok"] == len(js["results"]) == 20


def _svc(doc: dict[str, Any], ns: str, name: str) -> dict[str, Any]:
    return next(
        it
        for it in doc["items"]
        if it["kind"] == "Service" and it["metadata"]["name"] == name and it["metadata"]["namespace"] == ns
    )


def _slice(doc: dict[str, Any], svc: str) -> dict[str, Any]:
    return next(
        it
        for it in doc["items"]
        if it["kind"] == "EndpointSlice" and it["metadata"]["labels"]["kubernetes.io/service-name"] == svc
    )


def _finding(report: Report, cause: str, service: str | None = None) -> Any:
    def walk(fs: list[Any]) -> list[Any]:
        return [x for f in fs for x in [f, *walk(f.folded)]]

    hits = [
        f
        for f in walk(report.findings)
        if f.cause == cause and (service is None or (f.subject.get("service") or "").startswith(service))
    ]
    assert hits, f"no {cause} for {service}: {[(f.cause, f.subject, f.summary) for f in walk(report.findings)]}"
    return hits[0]


def test_removed_endpoint_is_a_stale_backend(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    _slice(doc, "svc4")["endpoints"] = [{"addresses": ["10.180.0.4"]}]
    facts, report = run(stage(tmp_path, OVERALL, doc=doc))
    f = _finding(report, "endpoints-out-of-sync", "ns4/svc4:p80")
    assert "10.180.0.5:80" in f.summary and f.severity.label == "critical"
    bad = [r for r in verification_of(facts).results if r.status != "ok"]  # type: ignore[union-attr]
    assert {r.label for r in bad} == {"ns4/svc4:p80"}
    assert all(r.stale_backends == ["10.180.0.5:80"] for r in bad)


def test_added_endpoint_is_a_missing_backend(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    _slice(doc, "svc1")["endpoints"].append({"addresses": ["10.180.0.9"]})
    _, report = run(stage(tmp_path, OVERALL, doc=doc))
    f = _finding(report, "endpoints-out-of-sync", "ns1/svc1:p80")
    assert "10.180.0.9:80" in f.summary


def test_endpoint_gone_entirely_still_forwarded(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    _slice(doc, "svc1")["endpoints"] = []
    _, report = run(stage(tmp_path, OVERALL, doc=doc))
    f = _finding(report, "endpoints-out-of-sync", "ns1/svc1:p80")
    assert "10.180.0.1:80" in f.summary


def test_deleted_service_leaves_stale_rules(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    doc["items"] = [it for it in doc["items"] if it["metadata"]["name"] not in ("svc1", "svc1-1")]
    facts, report = run(stage(tmp_path, OVERALL, doc=doc))
    f = _finding(report, "stale-service-rules")
    assert "172.30.0.41:80" in f.summary and "ns1/svc1:p80" in f.summary
    assert verification_of(facts) is not None and verification_of(facts).services_checked == 5
    assert f.evidence and f.evidence[0].line


def test_changed_cluster_ip_is_missing_and_stale(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    spec = _svc(doc, "ns3", "svc3")["spec"]
    spec["clusterIP"], spec["clusterIPs"] = "172.30.0.99", ["172.30.0.99"]
    _, report = run(stage(tmp_path, OVERALL, doc=doc))
    missing = _finding(report, "service-rules-missing", "ns3/svc3:p80")
    assert "172.30.0.99:80" in missing.summary and "nodeport" not in missing.summary.lower()
    stale = _finding(report, "stale-service-rules")
    assert "172.30.0.43:80" in stale.summary


def test_new_service_without_rules(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    new = copy.deepcopy(_svc(doc, "ns1", "svc1"))
    new["metadata"]["name"] = "fresh"
    new["spec"]["clusterIP"], new["spec"]["clusterIPs"] = "172.30.0.77", ["172.30.0.77"]
    sl = copy.deepcopy(_slice(doc, "svc1"))
    sl["metadata"]["name"], sl["metadata"]["labels"]["kubernetes.io/service-name"] = "fresh-1", "fresh"
    doc["items"] += [new, sl]
    _, report = run(stage(tmp_path, OVERALL, doc=doc))
    f = _finding(report, "service-rules-missing", "ns1/fresh:p80")
    assert f.severity.label == "critical"


def test_local_endpoint_dropped_as_not_local(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    _slice(doc, "svc2")["endpoints"][0]["nodeName"] = "test-node"
    _, report = run(stage(tmp_path, OVERALL, doc=doc))
    f = _finding(report, "local-endpoints-not-recognised", "ns2/svc2:p80")
    assert "10.180.0.2:80" in f.summary and 'node "test-node"' in f.summary
    assert any("has no local endpoints" in c.text for c in f.evidence)


def test_foreign_drop_in_forward(tmp_path: Path) -> None:
    text = (FIX / f"{OVERALL}.nft.save").read_text()
    text = text.replace("*filter\n", "*filter\n", 1)
    text = re.sub(r"(:KUBE-SERVICES - \[0:0\]\n)(?=-A INPUT)", r"\1-A FORWARD -d 10.180.0.3/32 -p tcp -j DROP\n", text)
    assert "-A FORWARD -d 10.180.0.3/32" in text
    _, report = run(stage(tmp_path, OVERALL, rules=text))
    f3 = _finding(report, "iptables-drop-rule", "ns3/svc3:p80")
    _finding(report, "iptables-drop-rule", "ns5/svc5:p80")
    assert "-A FORWARD -d 10.180.0.3/32 -p tcp -j DROP" in f3.summary
    assert f3.evidence[0].text.startswith("-A FORWARD -d 10.180.0.3/32")
    # Services whose backends are elsewhere are untouched
    assert not [f for f in report.findings if (f.subject.get("service") or "").startswith("ns1/")]


def test_forward_policy_drop(tmp_path: Path) -> None:
    text = (FIX / f"{OVERALL}.legacy.save").read_text().replace(":FORWARD ACCEPT [0:0]", ":FORWARD DROP [0:0]")
    _, report = run(stage(tmp_path, OVERALL, "legacy", rules=text))
    f = _finding(report, "iptables-drop-rule", "ns1/svc1:p80")
    assert "policy DROP" in f.summary


def test_rules_split_across_backends(tmp_path: Path) -> None:
    legacy = (FIX / f"{OVERALL}.legacy.save").read_text()
    nft = (
        (FIX / f"{OVERALL}.nft.save")
        .read_text()
        .replace("--to-destination 10.180.0.1:80", "--to-destination 10.180.0.8:80")
    )
    paths = stage(tmp_path, OVERALL, "nft", rules=nft)
    (tmp_path / "legacy.save").write_text(legacy)
    _, report = run([*paths, tmp_path / "legacy.save"])
    top = report.findings[0]
    assert top.cause == "iptables-backend-mismatch" and top.severity.label == "critical"
    assert "disagree for 1 Service port(s) (ns1/svc1:p80)" in top.summary
    [f] = [x for x in top.folded if x.code == "KP205"]
    assert "ns1/svc1:p80" in f.summary and "10.180.0.8:80" in f.summary and "10.180.0.1:80" in f.summary


def test_identical_rules_in_both_backends_is_a_warning(tmp_path: Path) -> None:
    paths = stage(tmp_path, OVERALL, "nft")
    (tmp_path / "legacy.save").write_text((FIX / f"{OVERALL}.legacy.save").read_text())
    facts, report = run([*paths, tmp_path / "legacy.save"])
    [f] = report.findings
    assert f.cause == "iptables-backend-mismatch" and f.severity.label == "warning" and "they agree today" in f.summary
    assert verification_of(facts) is not None and all(r.status == "ok" for r in verification_of(facts).results)


def test_v1_endpoints_instead_of_slices(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    items = []
    for it in doc["items"]:
        if it["kind"] != "EndpointSlice":
            items.append(it)
            continue
        svc = it["metadata"]["labels"]["kubernetes.io/service-name"]
        addrs = [
            {"ip": e["addresses"][0], **({"nodeName": e["nodeName"]} if e.get("nodeName") else {})}
            for e in it["endpoints"]
        ]
        ports = [{"name": p["name"], "port": p["port"], "protocol": p["protocol"]} for p in it["ports"]]
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"namespace": it["metadata"]["namespace"], "name": svc},
                "subsets": [{"addresses": addrs, "ports": ports}],
            }
        )
    doc["items"] = items
    facts, report = run(stage(tmp_path, OVERALL, doc=doc))
    assert verification_of(facts) is not None and verification_of(facts).clean
    assert report.findings == []


def _verdicts(facts: Facts) -> list[tuple[str, str, str, list[tuple[str | None, str, float]]]]:
    ver = verification_of(facts)
    assert ver is not None
    return [
        (r.label, r.traffic, r.status, sorted((e.endpoint, e.verdict, round(e.probability, 9)) for e in r.actual))
        for r in ver.results
    ]


@pytest.mark.parametrize("name", NAMES)
def test_verdicts_survive_stripped_comments_and_renamed_chains(tmp_path: Path, name: str) -> None:
    for backend in ("legacy", "nft"):
        text = (FIX / f"{name}.{backend}.save").read_text()
        base = _verdicts(run(stage(tmp_path, name, backend))[0])
        for seed in (1, 2, 3):
            obf = obfuscate(text, seed)
            assert "comment" not in obf and "KUBE-" not in obf
            assert _verdicts(run(stage(tmp_path, name, backend, rules=obf))[0]) == base


def test_mutation_verdicts_survive_obfuscation(tmp_path: Path) -> None:
    """A broken node stays broken (same statuses) when comments and chain names are gone."""
    doc = cluster(OVERALL)
    _slice(doc, "svc4")["endpoints"] = [{"addresses": ["10.180.0.4"]}]
    text = (FIX / f"{OVERALL}.nft.save").read_text()
    base = _verdicts(run(stage(tmp_path, OVERALL, doc=doc))[0])
    assert any(v[2] == "mismatch" for v in base)
    assert _verdicts(run(stage(tmp_path, OVERALL, doc=doc, rules=obfuscate(text, 7)))[0]) == base


def test_unknown_version_accepts_any_release_and_says_so(tmp_path: Path) -> None:
    name = "v1.26_TestEndpointSliceWithTerminatingEndpointsTrafficPolicyLocal_onlyTerminating"
    facts, _ = run(stage(tmp_path, name))
    ver = verification_of(facts)
    assert ver is not None
    lb = next(r for r in ver.results if r.traffic == "external-to-loadbalancer")
    assert lb.status == "ok" and len(lb.expected) == 2
    assert "version unknown" in lb.note and "terminating" in lb.note


def test_known_old_version_rejects_terminating_fallback(tmp_path: Path) -> None:
    """kube-proxy 1.24 (no fallback by default) would have dropped this traffic: with that
    version found, the 1.26 rules no longer match what the node should do."""
    name = "v1.26_TestEndpointSliceWithTerminatingEndpointsTrafficPolicyLocal_onlyTerminating"
    paths = stage(tmp_path, name)
    (tmp_path / "version.txt").write_text("Kubernetes v1.24.17\n")
    facts, _ = run([*paths, tmp_path / "version.txt"])
    ver = verification_of(facts)
    assert ver is not None
    lb = next(r for r in ver.results if r.traffic == "external-to-loadbalancer")
    assert lb.status == "mismatch" and len(lb.expected) == 1 and lb.expected[0].refused
    (tmp_path / "version.txt").write_text("Kubernetes v1.27.3\n")
    facts, _ = run([*paths, tmp_path / "version.txt"])
    lb = next(r for r in verification_of(facts).results if r.traffic == "external-to-loadbalancer")  # type: ignore[union-attr]
    assert lb.status == "ok" and "version unknown" not in lb.note


def test_missing_node_identity_makes_local_cases_uncertain(tmp_path: Path) -> None:
    doc = cluster(OVERALL)
    doc["items"] = [it for it in doc["items"] if it["kind"] != "Node"]
    facts, _ = run(stage(tmp_path, OVERALL, doc=doc))
    ver = verification_of(facts)
    assert ver is not None
    unc = {(r.label, r.traffic) for r in ver.results if r.status == "uncertain"}
    assert ("ns2/svc2:p80", "external-to-externalip") in unc  # eTP=Local needs the node's name
    assert ("ns1/svc1:p80", "pod-to-clusterip") not in unc
    assert all("node" in r.note for r in ver.results if r.status == "uncertain")


def _fields(cr: Any) -> tuple[Any, ...]:
    return (
        cr.src,
        cr.src_neg,
        cr.dst,
        cr.dst_neg,
        cr.proto,
        cr.proto_neg,
        cr.dport,
        cr.dport_neg,
        cr.prob,
        cr.conds,
        cr.target,
    )


def test_fast_compile_path_equals_the_general_one() -> None:
    """The regular-expression path for canonical kube-proxy rules compiles exactly what the
    token-by-token compiler does (on every upstream rule, both backends, and generated ones)."""
    import sys

    from kpdoctor.dataplane.iptables.compile import _compile_fast, compile_general
    from kpdoctor.parse.iptables import parse_save

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from gen_cluster import generate  # type: ignore[import-not-found]

    texts = [p.read_text() for p in sorted(FIX.glob("*.save"))] + [generate(40, 3)[0]]
    fast = 0
    for text in texts:
        for rule in parse_save(text, "x", None, 4).all_rules():
            f = _compile_fast(rule)
            if f is not None:
                fast += 1
                assert _fields(f) == _fields(compile_general(rule)), rule.text
    assert fast > 500


def test_parallel_evaluation_equals_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Split over processes (each reads the evidence itself and evaluates its part; the parts are
    merged), the verification is exactly the one-process one: results in order, stale rules."""
    import kpdoctor.dataplane.session as S

    doc = cluster(OVERALL)
    _slice(doc, "svc4")["endpoints"] = [{"addresses": ["10.180.0.4"]}]
    doc["items"] = [it for it in doc["items"] if it["metadata"]["name"] not in ("svc1", "svc1-1")]
    paths = stage(tmp_path, OVERALL, doc=doc)
    serial = verification_of(run(paths)[0])
    assert serial is not None
    monkeypatch.setattr(S, "PARALLEL_MIN_BYTES", 0)
    for workers in ("2", "3"):
        monkeypatch.setenv("KPDOCTOR_WORKERS", workers)
        par = verification_of(Facts(load(paths)))
        assert par is not None
        assert json.dumps(par.to_json(), sort_keys=True) == json.dumps(serial.to_json(), sort_keys=True)
        assert par.stale and any(r.status == "mismatch" for r in par.results)

    # a worker that dies after taking pieces of the work: they are done again, here
    parent = os.getpid()
    real_packed, real = S.verify_part_packed, S.verify_part

    def dies(inputs: S.DataplaneInputs, part: Part) -> object:
        if os.getpid() != parent:
            assert part.tickets is not None and part.tickets.take() == 0
            os._exit(1)
        return real_packed(inputs, part)

    def late(inputs: S.DataplaneInputs, part: Part) -> object:
        if part.tickets is not None and os.getpid() == parent:
            time.sleep(1)  # the worker takes the first piece
        return real(inputs, part)

    monkeypatch.setattr(S, "verify_part_packed", dies)
    monkeypatch.setattr(S, "verify_part", late)
    monkeypatch.setenv("KPDOCTOR_WORKERS", "2")
    par = verification_of(Facts(load(paths)))
    assert par is not None
    assert json.dumps(par.to_json(), sort_keys=True) == json.dumps(serial.to_json(), sort_keys=True)


def test_stale_backends_and_sync_failure_are_one_story(tmp_path: Path) -> None:
    """The node still sends ns4/svc4 to a removed Pod *because* kube-proxy cannot sync: the
    verification finding folds under the root cause from the log, not beside it."""
    from conftest import MISMATCH

    doc = cluster(OVERALL)
    _slice(doc, "svc4")["endpoints"] = [{"addresses": ["10.180.0.4"]}]
    log = tmp_path / "kube-proxy.log"
    log.write_text(MISMATCH * 3)
    _, report = run([*stage(tmp_path, OVERALL, doc=doc), log])
    top = report.findings[0]
    assert top.cause == "iptables-backend-mismatch"

    def walk(f: Any) -> list[Any]:
        return [x for sub in f.folded for x in [sub, *walk(sub)]]

    folded = {x.cause for x in walk(top)}
    assert {"rule-sync-stale", "endpoints-out-of-sync"} <= folded
    assert not [f for f in report.findings if f.cause == "endpoints-out-of-sync"]


def test_other_nftables_tables_are_reported_not_evaluated(tmp_path: Path) -> None:
    """An nftables ruleset beside the iptables rules: tables that are not iptables-nft's own
    (here kube-proxy's nftables-mode table; firewalld's alike) are named as not evaluated."""
    ruleset = FIX.parent / "nftables" / "TestOverallNFTablesRules.ruleset.json"
    paths = [*stage(tmp_path, OVERALL), ruleset]
    facts, _ = run(paths)
    ver = verification_of(facts)
    assert ver is not None and ver.clean
    [note] = ver.not_evaluated
    assert note.startswith("nftables table ip kube-proxy (") and "filter-input: filter input" in note
    assert ver.to_json()["not_evaluated"] == [note]


def test_rules_without_cluster_objects_say_what_is_missing(tmp_path: Path) -> None:
    save = tmp_path / "nft.save"
    save.write_text((FIX / f"{OVERALL}.nft.save").read_text())
    _, report = run([save])
    reasons = {s.code: s.reason for s in report.skipped}
    assert reasons["KP202"] == "no Kubernetes objects (needed together with the iptables-save output given)"


def test_a_service_of_5000_endpoints_verifies_ok(tmp_path: Path) -> None:
    """Every endpoint at 1/5,000, without recursion as deep as the Service is wide (a Service of
    about 1,000 endpoints once ended the run with "internal error: RecursionError")."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import gen_cluster  # type: ignore[import-not-found]

    save, objects = gen_cluster.write(tmp_path, 1, 5000)
    _, report = run([save, objects])
    ver = report.verification
    assert ver is not None and not report.errors
    assert ver.clean and ver.count("ok") == len(ver.results) >= 2
    for r in ver.results:
        assert len({e.endpoint for e in r.actual}) == 5000
        assert all(abs(e.probability - 1 / 5000) < 1e-7 for e in r.actual)


def test_a_worker_sends_back_every_field_of_its_results(tmp_path: Path) -> None:
    """A share of a parallel verification travels packed: every field of every Entry arrives
    (``no_service_rule``, an nftables refusal of an unknown port, was once lost on the way)."""
    import dataclasses

    from kpdoctor.dataplane.results import Entry
    from kpdoctor.dataplane.verify import _pack, _unpack

    ver = verification_of(run(stage(tmp_path, OVERALL))[0])
    assert ver is not None and ver.results
    r = ver.results[0]
    flags = [f.name for f in dataclasses.fields(Entry) if f.type in ("bool", bool)]
    assert {"no_service_rule", "no_real_servers"} <= set(flags)
    for name in flags:  # each flag set on its own: the others stay as they were
        entries = [dataclasses.replace(e, **{name: True}) for e in r.actual]
        r.actual = entries
        back = _unpack(ver.cases[0], _pack(r, {}), {})
        assert back.actual == entries
        r.actual = [dataclasses.replace(e, **{name: False}) for e in entries]
