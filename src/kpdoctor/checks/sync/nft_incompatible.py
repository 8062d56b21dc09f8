"""KP125: rules written with nft into iptables-nft's tables, which iptables-nft cannot read."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import is_other_writer
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity

# iptables-nft: `chain POSTROUTING in table nat is incompatible, use 'nft' tool.`; its -save:
# `# Table `nat' is incompatible, use 'nft' tool.`
INCOMPATIBLE = signature(
    "iptables-nft-incompatible",
    "is incompatible, use",
    r"(chain [`'\"]?([A-Za-z0-9_-]+)[`'\"]? in table [`'\"]?([a-z]+)[`'\"]?|[Tt]able [`'\"]([a-z]+)[`'\"])"
    r" is incompatible, use .nft. tool",
    failure=True,
)


@check(
    "KP125",
    cause="nft-rules-incompatible-with-iptables-nft",
    title="iptables-nft cannot read rules written with nft into its tables",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_SAVE],
    explains=("iptables-backend-mismatch", *RESTORE_SYMPTOMS),
)
def nft_rules_incompatible(facts: Facts) -> Iterator[Finding]:
    """Native nft rules in the tables iptables-nft owns break every iptables call on them.

    Symptom: `iptables v1.8.7 (nf_tables): chain POSTROUTING in table nat is incompatible, use
        'nft' tool.` from kube-proxy's, kubelet's or a CNI's iptables calls; iptables-nft-save
        prints `# Table `nat' is incompatible, use 'nft' tool.` instead of the table.
    Cause: a rule added with the `nft` binary (a node bootstrap script, firewall tooling) into
        `ip nat`/`ip filter`, the tables iptables-nft manages, uses expressions iptables-nft
        cannot translate back; it then refuses to list or change that chain.
    How it is detected: the message in any writer's log or in an iptables-nft-save dump.
    Fix: add those rules through iptables-nft instead, or put native nft rules in their own
        table (`table inet mytable`); find them with `nft list table ip nat`.
    References: https://github.com/ubicloud/ubicloud/pull/2966; https://github.com/k3s-io/k3s/issues/11415
    """
    hits = facts.log.hits(INCOMPATIBLE.id)
    saved = [(table, Cite(rs.artifact, ln, text)) for rs in facts.rulesets for ln, table, text in rs.incompatible]
    if not hits and not saved:
        return
    f = start(facts, "KP125", hits, confidence=Confidence.HIGH)
    where = [f"chain {h.groups[1]} in table {h.groups[2]}" if h.groups[1] else f"table {h.groups[3]}" for h in hits]
    where += [f"table {table}" for table, _c in saved]
    f.summary = (
        f"iptables-nft cannot read {', '.join(dict.fromkeys(where))}: rules written there with the nft tool use "
        "expressions it cannot translate, so every iptables call on it fails."
    )
    f.evidence.extend(c for _t, c in saved[:2] if c not in f.evidence)
    if hits and all(is_other_writer(h) for h in hits):
        f.summary += " The failing call cited is another component's; kube-proxy's calls on that chain fail alike."
    f.fix = [
        "Find the native rules (`nft list table ip nat`, `nft list table ip filter`) and add them through "
        "iptables-nft instead, or move them to a table of their own (`table inet mytable`).",
    ]
    yield f
