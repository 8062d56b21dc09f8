"""kpdoctor against what real iptables prints: rules loaded with iptables-restore into a network
namespace the test creates and deletes, then read back with every listing command."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import UPSTREAM
from lab.netns import Netns, cleanup_stale, lab_available

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Report

FIXTURE = UPSTREAM / "iptables" / "v1.26_TestLoadBalancer.rules"
pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))

HOOKS = [
    [
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-m",
        "comment",
        "--comment",
        "kubernetes service portals",
        "-j",
        "KUBE-SERVICES",
    ],
    ["-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"],
    [
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-m",
        "comment",
        "--comment",
        "kubernetes postrouting rules",
        "-j",
        "KUBE-POSTROUTING",
    ],
    [
        "-t",
        "filter",
        "-A",
        "FORWARD",
        "-m",
        "comment",
        "--comment",
        "kubernetes forwarding rules",
        "-j",
        "KUBE-FORWARD",
    ],
]


@pytest.fixture(scope="module")
def outputs() -> Iterator[dict[str, str]]:
    """Real listings of a kube-proxy rule set, from both backends."""
    cleanup_stale()
    payload = FIXTURE.read_text()
    out: dict[str, str] = {}
    for be in ("legacy", "nft"):
        with Netns() as ns:
            ns.check([f"iptables-{be}-restore", "--noflush"], input=payload)
            for hook in HOOKS:
                ns.check([f"iptables-{be}", *hook])
            out[f"{be}-save"] = ns.check([f"iptables-{be}-save"])
            out[f"{be}-save-c"] = ns.check([f"iptables-{be}-save", "-c"])
            out[f"{be}-S-nat"] = ns.check([f"iptables-{be}", "-t", "nat", "-S"])
            out[f"{be}-S-filter"] = ns.check([f"iptables-{be}", "-S"])
            out[f"{be}-L"] = ns.check([f"iptables-{be}", "-t", "nat", "-L", "-n", "-v"])
            out[f"{be}-version"] = ns.check([f"iptables-{be}", "--version"])
    with Netns() as ns:  # both backends at once: iptables-nft-save warns on stderr
        ns.check(["iptables-nft-restore", "--noflush"], input=payload)
        ns.check(["iptables-legacy-restore", "--noflush"], input=payload)
        res = ns.run(["iptables-nft-save"])
        out["split-nft-save"] = res.stdout
        out["split-nft-stderr"] = res.stderr
        out["split-legacy-save"] = ns.check(["iptables-legacy-save"])
    with Netns() as ns:  # the backend mismatch, for real: the chain exists only in the other backend
        ns.check(["iptables-nft-restore", "--noflush"], input="*nat\n:KUBE-MARK-DROP - [0:0]\nCOMMIT\n")
        bad = "*nat\n:KUBE-SVC-X - [0:0]\n-A KUBE-SVC-X -j KUBE-MARK-DROP\nCOMMIT\n"
        out["legacy-restore-err"] = ns.run(["iptables-legacy-restore", "--noflush"], input=bad).stderr
    with Netns() as ns:
        ns.check(["iptables-legacy-restore", "--noflush"], input="*nat\n:KUBE-MARK-DROP - [0:0]\nCOMMIT\n")
        out["nft-restore-err"] = ns.run(["iptables-nft-restore", "--noflush"], input=bad).stderr
    assert cleanup_stale() == []
    yield out


def _facts(tmp: Path, files: dict[str, str]) -> Facts:
    paths = []
    for name, text in files.items():
        p = tmp / name
        p.write_text(text)
        paths.append(p)
    return Facts(load(paths))


@pytest.mark.parametrize("be", ["legacy", "nft"])
def test_every_listing_is_typed_and_parsed(outputs: dict[str, str], be: str, tmp_path: Path) -> None:
    facts = _facts(tmp_path, {k: v for k, v in outputs.items() if k.startswith(be + "-") and "err" not in k})
    kinds = sorted(a.kind.value for a in facts.evidence.artifacts)
    assert kinds == sorted(
        [Kind.IPTABLES_SAVE.value] * 2
        + [Kind.IPTABLES_RULES_S.value] * 2
        + [Kind.IPTABLES_LIST.value, Kind.IPTABLES_VERSION.value]
    )
    saves = [rs for rs in facts.rulesets if rs.form == "save"]
    assert {rs.variant for rs in saves} == {be}
    n = outputs[f"{be}-save"].count("\n-A ")
    assert all(len(rs.all_rules()) == n and not rs.diagnostics for rs in saves)
    counted = next(rs for rs in saves if rs.artifact.endswith("save-c"))
    assert all(r.packets == 0 for r in counted.all_rules())
    s_nat = next(rs for rs in facts.rulesets if rs.artifact.endswith("S-nat"))
    assert "nat" in s_nat.tables and "KUBE-SVC-XPGD46QRK7WJZT7O" in s_nat.chains("nat")
    listing = next(rs for rs in facts.rulesets if rs.form == "L")
    assert "KUBE-SERVICES" in listing.chains()
    v = facts.iptables_version("host")
    assert v is not None and v.value.short_variant == be


def test_rules_in_both_backends_are_reported(outputs: dict[str, str], diagnose: Callable[..., Report]) -> None:
    assert "# Warning: iptables-legacy tables present" in outputs["split-nft-stderr"]
    merged = outputs["split-nft-stderr"] + outputs["split-nft-save"]  # what a terminal shows with 2>&1
    r = diagnose({"nft.txt": merged, "legacy.txt": outputs["split-legacy-save"]})
    f = r.visible()[0]
    assert f.cause == "iptables-backend-mismatch" and "both" in f.summary
    assert any("Warning: iptables-legacy tables present" in c.text for c in f.evidence)


@pytest.mark.parametrize("which,expect", [("legacy-restore-err", "(legacy)"), ("nft-restore-err", "(nf_tables)")])
def test_real_restore_errors_as_kube_proxy_logs_them(
    outputs: dict[str, str], which: str, expect: str, diagnose: Callable[..., Report]
) -> None:
    err = outputs[which].strip()
    glog = (
        f"E1008 21:01:55.367127  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 2 ({err}\n)\n"
    )
    structured = (
        'E1012 13:47:04.628717       1 proxier.go:1447] "Failed to execute iptables-restore" err=<\n'
        + "".join(f"\t{line}\n" for line in f"exit status 2: {err}".splitlines())
        + " >\n"
    )
    for log in (glog, structured):
        f = diagnose({"kp.log": log}).visible()[0]
        assert f.cause == "iptables-backend-mismatch" and expect in f.summary, f.summary


def test_a_refusal_in_the_other_backend_is_cited_in_its_own_dump(tmp_path: Path) -> None:
    """kube-proxy's rules in one backend, a firewall's DROP in the other (both run at the same
    hooks, each from its own dump): the verification's refusal cites the rule in the dump it was
    read from, with that dump's line number, never the first dump's name with the second's line."""
    fix = UPSTREAM / "iptables"
    with Netns() as ns:
        ns.check(["iptables-legacy", "-A", "FORWARD", "-d", "10.180.0.5", "-j", "DROP"])
        legacy = ns.check(["iptables-legacy-save"])
    assert "-A FORWARD -d 10.180.0.5/32 -j DROP" in legacy
    nft = tmp_path / "nft.save"
    nft.write_text((fix / "TestOverallIPTablesRules.nft.save").read_text())
    other = tmp_path / "legacy.save"
    other.write_text(legacy)
    cluster = tmp_path / "cluster.json"
    cluster.write_text((fix / "TestOverallIPTablesRules.cluster.json").read_text())
    config = tmp_path / "kube-proxy.yaml"
    config.write_text((fix / "TestOverallIPTablesRules.kube-proxy.yaml").read_text())
    for core in ("native", "python"):
        os.environ["KPDOCTOR_CORE"] = core
        try:
            report, _ = diagnose_paths([nft, other, cluster, config], command="verify")
        finally:
            os.environ.pop("KPDOCTOR_CORE", None)
        ver = report.verification
        assert ver is not None
        drops = [
            e.rule
            for r in ver.results
            for e in r.actual
            if e.verdict == "DROP" and e.endpoint == "10.180.0.5:80" and e.rule is not None
        ]
        assert drops, core
        line = legacy.splitlines().index("-A FORWARD -d 10.180.0.5/32 -j DROP") + 1
        assert {(c.artifact, c.line) for c in drops} == {(str(other), line)}, (core, drops)


@pytest.mark.parametrize("be", ["legacy", "nft"])
def test_the_chain_policies_a_grep_keeps_are_read(be: str, diagnose: Callable[..., Report]) -> None:
    """`iptables -L | grep policy` (and -L -v's counted form) on a node whose FORWARD policy is
    DROP (ufw's default, Docker's): only the chains' header lines, read as a fragment of -L."""
    cleanup_stale()
    with Netns() as ns:
        ns.check([f"iptables-{be}", "-P", "FORWARD", "DROP"])
        ns.check([f"iptables-{be}", "-P", "INPUT", "DROP"])
        plain = ns.check([f"iptables-{be}", "-L"])
        counted = ns.check([f"iptables-{be}", "-L", "-v"])
    grepped = "".join(ln + "\n" for ln in plain.splitlines() if "policy" in ln)
    assert grepped.splitlines()[:2] == ["Chain INPUT (policy DROP)", "Chain FORWARD (policy DROP)"]
    chains = "".join(ln + "\n" for ln in counted.splitlines() if ln.startswith("Chain"))
    for text in (grepped, chains):
        r = diagnose({"policies.txt": text})
        assert [i.kind for i in r.inputs] == [Kind.IPTABLES_LIST.value] and "fragment" in r.inputs[0].details
        (f,) = [f for f in r.findings if f.code == "KP207"]
        assert f.cause == "iptables-drop-rule" and f.evidence[0].text.startswith("Chain FORWARD (policy DROP")


@pytest.mark.parametrize("be", ["legacy", "nft"])
def test_a_listing_grepd_for_its_chains_keeps_their_lines_and_is_read(be: str, tmp_path: Path) -> None:
    """`iptables -t nat -L -n | grep KUBE-` keeps the chain lines (they name what was grep'd for)
    and the rows, and drops the column header iptables prints under every chain line: read as a
    part of -L, each row in the chain its kept line names."""
    cleanup_stale()
    with Netns() as ns:
        for chain in ("KUBE-SERVICES", "KUBE-SVC-WEB", "KUBE-MARK-DROP"):
            ns.check([f"iptables-{be}", "-t", "nat", "-N", chain])
        ns.check([f"iptables-{be}", "-t", "nat", "-A", "OUTPUT", "-j", "KUBE-SERVICES"])
        ns.check([f"iptables-{be}", "-t", "nat", "-A", "KUBE-SERVICES", "-d", "10.96.0.10/32", "-p", "tcp",
                  "--dport", "80", "-j", "KUBE-SVC-WEB"])  # fmt: skip
        ns.check([f"iptables-{be}", "-t", "nat", "-A", "KUBE-SVC-WEB", "-j", "KUBE-MARK-DROP"])
        listing = ns.check([f"iptables-{be}", "-t", "nat", "-L", "-n"])
    grepped = "".join(ln + "\n" for ln in listing.splitlines() if "KUBE-" in ln)
    assert "target" not in grepped and grepped.count("Chain ") >= 3  # the column headers are gone
    path = tmp_path / "grep.txt"
    path.write_text(grepped)
    ev = load([path])
    try:
        assert [(a.kind, a.attrs.get("fragment")) for a in ev.artifacts] == [(Kind.IPTABLES_LIST, "true")]
        (rs,) = Facts(ev).rulesets
        placed = {(r.chain, r.target) for r in rs.all_rules()}
        assert {("KUBE-SERVICES", "KUBE-SVC-WEB"), ("KUBE-SVC-WEB", "KUBE-MARK-DROP")} <= placed
    finally:
        ev.close()
