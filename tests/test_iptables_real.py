"""kpdoctor against what real iptables prints: rules loaded with iptables-restore into a network
namespace the test creates and deletes, then read back with every listing command."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import UPSTREAM
from lab.netns import Netns, cleanup_stale, lab_available

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
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
