"""KP101: kube-proxy and the node use different iptables backends (legacy vs nf_tables)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import apply_remedy, kube_proxy_remedy, start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.facts.log import RESTORE_VARIANT, restore_binary
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import signature
from kpdoctor.versions import FixRow

CANNOT_LOAD_TARGET = signature(
    "restore-cannot-load-kube-target",
    "-restore v",  # not "-restore": a failing node logs "iptables-restore" several times a record
    r"-restore v[0-9.]+( \((legacy|nf_tables)\))?: Couldn't load target .(KUBE-[A-Z0-9-]+).",
    failure=True,
    variant=RESTORE_VARIANT,  # one of each restore binary kept: the backend and its version
)
CHAIN_DOES_NOT_EXIST = signature(
    "restore-kube-chain-does-not-exist",
    "-restore v",
    r"-restore v[0-9.]+( \((legacy|nf_tables)\))?: Chain .(KUBE-[A-Z0-9-]+). does not exist",
    failure=True,
    variant=RESTORE_VARIANT,  # one of each restore binary kept: the backend and its version
)

# Seed 000 (TKE): the first kube-proxy build of each line whose image follows the node's backend.
FIXES = [
    FixRow((1, 24), "v1.24.4-tke.5", vendor="tke"),
    FixRow((1, 22), "v1.22.5-tke.11", vendor="tke"),
    FixRow((1, 20), "v1.20.6-tke.31", vendor="tke"),
    FixRow((1, 18), "v1.18.4-tke.35", vendor="tke"),
    FixRow((1, 16), "v1.16.3-tke.34", vendor="tke"),
    FixRow((1, 14), "v1.14.3-tke.28", vendor="tke"),
    FixRow((1, 12), "v1.12.4-tke.32", vendor="tke"),
    FixRow((1, 10), "v1.10.5-tke.20", vendor="tke"),
    # Upstream images ship iptables-wrapper (backend auto-detection) from 1.17 (k/k#82966).
    FixRow(
        (1, 17), status="no-fix", below=True, note="images before 1.17 are legacy-only; 1.17+ ship iptables-wrapper"
    ),
    FixRow(
        (1, 16),
        status="unaffected",
        above=True,
        note="the image detects the backend; a wrong pick comes from rules other components left in the other backend",
    ),
]
# OSes the seed names as defaulting to nf_tables, where old legacy-only images break.
NFT_DEFAULT_OS = re.compile(
    r"tlinux ?(2\.6|3\.[12])|tencentos|centos.*\b8|rhel.*\b([89]|1\d)|ubuntu.*\b(2[0-9])\.|debian.*\b(1[0-9])\b|fedora",
    re.I,
)


@check(
    "KP101",
    cause="iptables-backend-mismatch",
    title="kube-proxy and the node use different iptables backends",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_SAVE, Kind.IPTABLES_VERSION],
)
def backend_mismatch(facts: Facts) -> Iterator[Finding]:
    """kube-proxy writes rules through a different iptables backend than the node.

    Symptom: every sync fails with `iptables-restore v1.8.4 (legacy): Couldn't load target
        'KUBE-MARK-DROP':No such file or directory` (legacy kube-proxy on an nf_tables node) or
        `Chain 'KUBE-MARK-DROP' does not exist` (the reverse); Service rules never update.
        iptables-nft-save prints "# Warning: iptables-legacy tables present".
    Cause: iptables 1.8 has two kernel backends that cannot see each other's rules. kubelet
        (host iptables) created KUBE-MARK-DROP in one; kube-proxy's image writes to the other.
        Newer OSes (CentOS 8, Ubuntu 20.04+, TencentOS 3.x, tlinux 2.6 tk4) default to nf_tables,
        while kube-proxy images before 1.17 (and older TKE builds) only have legacy. Images
        with iptables-wrapper guess the backend from existing rules and can still guess wrong
        when another agent left rules in the other backend.
    How it is detected: the restore errors above in kube-proxy's log (the error names the
        backend kube-proxy used); KUBE-* rules present in both the legacy and the nft dumps;
        the legacy-tables warning in iptables-nft-save; host `iptables --version` backend
        versus kube-proxy's.
    Fix: run kube-proxy with the node's backend. TKE: upgrade kube-proxy to v1.24.4-tke.5,
        v1.22.5-tke.11, v1.20.6-tke.31, v1.18.4-tke.35, v1.16.3-tke.34, v1.14.3-tke.28,
        v1.12.4-tke.32 or v1.10.5-tke.20 (or later) for your cluster's line. Upstream: use an
        image with iptables-wrapper (1.17+); remove the stale backend's KUBE-* rules
        (`iptables-legacy-save`/`iptables-nft-save` to see them) and restart kube-proxy so it
        detects again; keep every iptables writer on the node on one backend.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/71305;
        https://github.com/kubernetes/kubernetes/pull/82966;
        https://github.com/kubernetes-sigs/iptables-wrappers;
        https://cloud.tencent.com/document/product/457/79797
    """
    hits = facts.log.hits(CANNOT_LOAD_TARGET.id, CHAIN_DOES_NOT_EXIST.id)
    evidence: list[Cite] = []
    notes: list[str] = []
    confidence = Confidence.HIGH
    kp_backend: str | None = None
    pre_18: str | None = None  # a restore binary older than 1.8 knows only the legacy backend
    for h in hits:
        binary = restore_binary(h)
        if binary is not None:
            kp_backend = binary.short_backend or "legacy"
            if binary.backend is None and not binary.at_least(1, 8):
                pre_18 = ".".join(map(str, binary.parts))
    if kp_backend is None and hits:
        kp_backend = "legacy" if any(h.sig == CANNOT_LOAD_TARGET.id for h in hits) else "nft"

    # Rules in both backends (same family): both are live in the kernel.
    split: list[str] = []
    for fam in (4, 6):
        by_backend = {rs.backend: rs for rs in facts.rulesets if rs.family == fam and rs.form == "save" and rs.backend}
        legacy, nft = by_backend.get("legacy"), by_backend.get("nft")
        if legacy and nft and legacy.kube_rule_count() and nft.kube_rule_count():
            split.append(
                f"IPv{fam}: {legacy.kube_rule_count()} KUBE-* rules in legacy, {nft.kube_rule_count()} in nf_tables"
            )
            for rs in (legacy, nft):
                first = next((r for r in rs.all_rules() if r.chain.startswith("KUBE-")), None)
                if first:
                    evidence.append(Cite(rs.artifact, first.line, first.text.strip()))
    warning_lines = [rs for rs in facts.rulesets if rs.legacy_warning_line]
    for rs in warning_lines[:1]:
        evidence.append(
            Cite(
                rs.artifact,
                rs.legacy_warning_line,
                "# Warning: iptables-legacy tables present, use iptables-legacy-save to see them",
            )
        )

    host = facts.iptables_version("host")
    image = facts.iptables_version("kube-proxy")
    versions_differ = False
    if host and image and host.value.short_backend and image.value.short_backend:
        versions_differ = host.value.short_backend != image.value.short_backend
    elif host and kp_backend and host.value.short_backend:
        versions_differ = host.value.short_backend != kp_backend

    if not hits and not split and not versions_differ:
        return
    # The verifier evaluated both sets: do they send any Service elsewhere?
    ver = facts.verification if split else None
    disagree = sorted({r.label for r in ver.results if r.kind == "split"}) if ver is not None else []

    if hits:
        f = start(facts, "KP101", hits, confidence=confidence, severity=Severity.CRITICAL)
        chain = next((h.groups[-1] for h in hits if h.groups and h.groups[-1]), "KUBE-MARK-DROP")
        other = "nf_tables" if kp_backend == "legacy" else "legacy"
        if pre_18 and not (host and host.value.short_backend == "nft"):
            f.confidence = Confidence.MEDIUM
            f.summary = (
                f"kube-proxy's iptables-restore v{pre_18} (older than 1.8: legacy backend only) cannot find chain "
                f"{chain}; every sync that references it fails. Either the node's iptables is 1.8+ with the "
                "nf_tables backend (kubelet created the chain there), or kubelet did not create it at all: "
                "add the host's `iptables --version` to tell which."
            )
        else:
            f.summary = (
                f"kube-proxy's iptables-restore ({kp_backend}) cannot see chain {chain}, which exists only "
                f"in the {other} backend the node uses; every sync that references it fails."
            )
    else:
        f = start(
            facts,
            "KP101",
            [],
            confidence=Confidence.HIGH if split else Confidence.MEDIUM,
            severity=Severity.CRITICAL if split and (ver is None or disagree) else Severity.WARNING,
        )
        f.summary = (
            "Kubernetes rules are split across both iptables backends; both are live in the kernel, "
            "so packets traverse both and the two sets can disagree."
            if split
            else "The node's iptables and kube-proxy's use different backends."
        )
    f.evidence.extend(e for e in evidence if e not in f.evidence)
    if split:
        notes.append("Rules found in both backends: " + "; ".join(split) + ".")
        if disagree:
            notes.append(
                f"They disagree for {len(disagree)} Service port(s) ({', '.join(disagree[:5])}): see the "
                "verification finding folded here."
            )
        elif ver is not None and not hits:
            notes.append(
                "Evaluated Service by Service, they agree today; the backend kube-proxy does not use "
                "will go stale at the next change."
            )
    if host:
        f.versions_found["iptables (node)"] = str(host.value)
        f.evidence.append(host.cite)
    if image:
        f.versions_found["iptables (kube-proxy)"] = str(image.value)
        f.evidence.append(image.cite)
    elif kp_backend:
        f.versions_found["iptables (kube-proxy)"] = kp_backend
    osr = facts.os_release
    if osr and NFT_DEFAULT_OS.search(
        osr[0].get("PRETTY_NAME", "") + " " + osr[0].get("ID", "") + " " + osr[0].get("VERSION_ID", "")
    ):
        notes.append(f"{osr[0].get('PRETTY_NAME', 'This OS')} defaults to the nf_tables backend.")
        f.evidence.append(osr[1])
    rem, found, where = kube_proxy_remedy(facts, FIXES)
    apply_remedy(f, rem, found, where)
    f.fix += [
        "Make every iptables writer on the node use one backend: compare `iptables --version` on the "
        "host and inside the kube-proxy container.",
        "Remove the stale backend's KUBE-* rules (inspect with `iptables-legacy-save` and "
        "`iptables-nft-save`), then restart kube-proxy so its wrapper detects the backend again.",
    ]
    if notes:
        f.summary += " " + " ".join(notes)
    yield f
