"""Shared test helpers: write evidence files and diagnose them like a user would."""

from __future__ import annotations

import random
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import kpdoctor.checks  # noqa: F401 - declares every check and log signature, as the entry points do
from kpdoctor.dataplane.results import Verification
from kpdoctor.dataplane.session import verify
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Finding, Report, Severity

# Seed 000's restore failure as glog-era kube-proxy logs it.
MISMATCH = (
    "E1008 21:01:55.367127  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 2 "
    "(iptables-restore v1.8.4 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
)
# Seed 003's structured-era block, verbatim.
SEED3_BLOCK = """\
I1113 16:15:07.928773       1 proxier.go:1464] "Reloading service iptables data" numServices=0 numEndpoints=0 numFilterChains=4 numFilterRules=3 numNATChains=4 numNATRules=5
E1113 16:15:07.931291       1 proxier.go:1481] "Failed to execute iptables-restore" err=<
\texit status 2: ip6tables-restore v1.8.4 (legacy): unknown option "--xor-mark"
\tError occurred at line: 16
\tTry `ip6tables-restore -h' or 'ip6tables-restore --help' for more information.
 >
I1113 16:15:07.931308       1 proxier.go:858] "Sync failed" retryingTime="30s"
I1113 16:15:07.931317       1 proxier.go:820] "SyncProxyRules complete" elapsed="22.67239ms"
"""
DATA = Path(__file__).resolve().parent / "data"
# kube-proxy's own rule sets and test inputs, vendored from upstream (data/upstream/SOURCES.md).
UPSTREAM = DATA / "upstream"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return p


def causes(report: Report) -> list[str]:
    return [f.cause for f in report.visible()]


def all_findings(report: Report) -> list[Finding]:
    out: list[Finding] = []
    for f in report.findings:
        out.append(f)
        out.extend(f.folded)
    return out


def one(report: Report, code: str) -> Finding:
    """The one finding (shown or folded) of a check."""
    found = [f for f in all_findings(report) if f.code == code]
    assert len(found) == 1, [f"{f.code} {f.summary}" for f in all_findings(report)]
    return found[0]


def none_of(report: Report, code: str) -> None:
    assert [f.code for f in all_findings(report) if f.code == code] == []


@pytest.fixture
def diagnose(tmp_path: Path) -> Callable[..., Report]:
    """diagnose({"name": "text", ...}) -> Report, files written under a temp dir."""

    def run(files: dict[str, str], node: str | None = None, min_severity: Severity = Severity.INFO) -> Report:
        paths = [write(tmp_path, name, text) for name, text in files.items()]
        report, _ = diagnose_paths(paths, node=node, min_severity=min_severity)
        return report

    return run


def obfuscate(text: str, seed: int) -> str:
    """iptables-save text with every comment stripped and every KUBE-* chain renamed at random:
    what kpdoctor concludes must not depend on kube-proxy's names or comments."""
    rnd = random.Random(seed)
    chains = sorted(set(re.findall(r"KUBE-[A-Z0-9-]+", text)), key=len, reverse=True)
    names = {c: "C" + "".join(rnd.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(12)) for c in chains}
    text = re.sub(r' -m comment --comment ("[^"]*"|\S+)', "", text)
    return re.sub(r"KUBE-[A-Z0-9-]+", lambda m: names[m.group(0)], text)


def verification_of(facts: Facts) -> Verification | None:
    """The dataplane's verification of these facts, as the pipeline's stage works it out."""
    return verify(facts.dataplane_inputs())
