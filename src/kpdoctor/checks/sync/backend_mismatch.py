"""KP101 and KP205: kube-proxy and the node use different iptables backends (legacy vs nf_tables):
the failures it causes in kube-proxy's log (KP101), and Service rules live in both backends (KP205)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import (
    PRINTED_SERVICES,
    RESTORE_SYMPTOMS,
    apply_remedy,
    kube_proxy_remedy,
    start,
    version_rows,
)
from kpdoctor.checks.dataplane.common import CLUSTER, RULES, classes, verification_not_evaluated
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts, Versioned
from kpdoctor.facts.iptables_variant import HostIptables, banner
from kpdoctor.facts.log import RESTORE_FAILED, RESTORE_VARIANT, SYNC_COMPLETE, captures
from kpdoctor.knowledge import check, messages, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import FixRow, IptablesVersion

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
# A legacy binary that finds no legacy table in the kernel: `iptables v1.6.0: can't initialize
# iptables table `nat': Table does not exist (do you need to insmod?)`, or its restore's
# `ip6tables-restore v1.8.5 (legacy): ip6tables-restore: unable to initialize table 'nat'`. On a
# host that drives netfilter through nf_tables the legacy table modules are not loaded (and a
# container cannot modprobe them).
TABLE_INIT_FAILED = signature(
    "iptables-table-does-not-exist",
    "initialize",
    r"(ip6?tables[a-z-]*) v([0-9.]+)( \((legacy|nf_tables)\))?: "
    r"(can't initialize ip6?tables table .(nat|filter|mangle|raw).: Table does not exist"
    r"|ip6?tables-restore: unable to initialize table .(nat|filter|mangle|raw).)",
    failure=True,
    variant=r"ip6tables|tables[a-z-]* v[0-9.]+ *(?:\((?:legacy|nf_tables)\))?",
)
# iptables-nft's batch error (its upper-case command names are nf_tables messages: a legacy restore
# says "Too many links"): deleting a chain the kernel still holds references to. kube-proxy's nft
# restore hits it on a legacy-only host (RHEL/CentOS 7), where the kernel's nf_tables is old.
CHAIN_BUSY = messages("nft-chain-delete-busy", "iptables/chain-user-del-busy", failure=True, variant=RESTORE_VARIANT)

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
# Chains kube-proxy declares in its own restore payload (`:KUBE-MARK-MASQ - [0:0]`: see the
# upstream expectations in tests/data/upstream), so its own sync never misses them: a restore that
# cannot find one is another writer's (a CNI portmap or the runtime's hostport code) that expects
# kube-proxy (or, before 1.27, kubelet) to have made it in its backend.
KUBE_PROXY_OWN_CHAINS = frozenset(
    {"KUBE-MARK-MASQ", "KUBE-POSTROUTING", "KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD"}
)


def _other(backend: str) -> str:
    return "nf_tables" if backend == "legacy" else "legacy"


def _name(backend: str) -> str:
    return "nf_tables" if backend == "nft" else backend


@check(
    "KP101",
    cause="iptables-backend-mismatch",
    title="kube-proxy and the node use different iptables backends",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_SAVE, Kind.IPTABLES_VERSION],
    explains=RESTORE_SYMPTOMS,
    versions=version_rows(FIXES, "seed 000; https://github.com/kubernetes/kubernetes/pull/82966"),
    reads_verification=True,
)
def backend_mismatch(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """kube-proxy writes rules through a different iptables backend than the node.

    Symptom: every sync fails with `iptables-restore v1.8.4 (legacy): Couldn't load target
        'KUBE-MARK-DROP':No such file or directory` (legacy kube-proxy on an nf_tables node) or
        `Chain 'KUBE-MARK-DROP' does not exist` (the reverse); a legacy-only image cannot even
        initialise a table (`iptables v1.6.0: can't initialize iptables table 'nat': Table does
        not exist (do you need to insmod?)`); an nf_tables kube-proxy on a legacy-only host
        (RHEL/CentOS 7) fails to delete its stale chains (`CHAIN_USER_DEL failed (Device or
        resource busy)`). Service rules never update. iptables-nft-save prints "# Warning:
        iptables-legacy tables present".
    Cause: iptables 1.8 has two kernel backends that cannot see each other's rules. kubelet
        (host iptables) created KUBE-MARK-DROP in one; kube-proxy's image writes to the other.
        Newer OSes (CentOS 8, Ubuntu 22.04+, TencentOS 3.x, tlinux 2.6 tk4) default to nf_tables,
        while kube-proxy images before 1.17 (iptables 1.4/1.6, legacy only) and older TKE builds
        only have legacy; images built on an nf_tables base can land on legacy-only hosts. Images
        with iptables-wrapper guess the backend from existing rules and can still guess wrong
        when another agent left rules in the other backend.
    How it is detected: kube-proxy's backend from the banner of any failed iptables call in its
        log (a binary older than 1.8 prints none and is legacy); the node's from the host's
        `iptables --version` (1.4/1.6: legacy), else inferred from its OS or kernel release
        (RHEL/CentOS 7 legacy-only, RHEL 8+ nf_tables-only, ...: said so, at lower confidence);
        the signatures above; KUBE-* rules present in both the legacy and the nft dumps; the
        legacy-tables warning; host versus kube-proxy (or another container's) `iptables
        --version`. A missing chain with no word on the node's backend is either a mismatch or a
        chain kubelet never created (only IPv6 failing points to the latter): reported as such,
        at lower confidence. A missing chain that kube-proxy declares in its own restore
        (KUBE-MARK-MASQ...) is another writer's failure (hostPort, CNI portmap): said so.
    Fix: run kube-proxy with the node's backend. TKE: upgrade kube-proxy to v1.24.4-tke.5,
        v1.22.5-tke.11, v1.20.6-tke.31, v1.18.4-tke.35, v1.16.3-tke.34, v1.14.3-tke.28,
        v1.12.4-tke.32 or v1.10.5-tke.20 (or later) for your cluster's line. Upstream: use an
        image with iptables-wrapper (1.17+); remove the stale backend's KUBE-* rules
        (`iptables-legacy-save`/`iptables-nft-save` to see them) and restart kube-proxy so it
        detects again; keep every iptables writer on the node on one backend. An nf_tables image
        on a legacy-only host: use an image whose iptables follows the host (iptables-wrapper) or
        switch the image's iptables to legacy.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/71305;
        https://github.com/kubernetes/kubernetes/pull/82966;
        https://github.com/kubernetes/kubernetes/issues/92250;
        https://github.com/kubernetes-sigs/iptables-wrappers;
        https://cloud.tencent.com/document/product/457/79797
    """
    strong = facts.log.hits(CANNOT_LOAD_TARGET.id, CHAIN_DOES_NOT_EXIST.id)
    table_init = [h for h in facts.log.hits(TABLE_INIT_FAILED.id) if _legacy(banner(h))]
    busy = [h for h in facts.log.hits(*CHAIN_BUSY.ids) if captures(h).get("chain", "").startswith("KUBE-")]
    failed = facts.log.hits(*RESTORE_FAILED.ids)
    host = facts.host_iptables
    image = facts.iptables_version("kube-proxy")
    split, split_cites = _split(facts)

    f: Finding | None = None
    kp_backend: str | None = None
    kp_binary: IptablesVersion | None = None
    for h in strong + table_init + busy + failed:
        b = banner(h)
        if b is not None and b.effective_variant:
            kp_backend, kp_binary = b.effective_variant, b
            break
    if kp_backend is None and busy:
        kp_backend = "nft"  # CHAIN_USER_DEL is an nf_tables message
    if kp_backend is None and image is not None:
        kp_backend = image.value.effective_variant

    if strong:
        f = _missing_chain(facts, strong, host)
    elif table_init:
        f = _table_missing(facts, table_init, host)
    elif busy:
        f = _busy_chain(facts, busy, host)
    if f is None and split:
        ver = verified.verification
        disagree = sorted({r.label for r in ver.problems() if r.kind == "split"}) if ver is not None else []
        f = start(
            facts,
            "KP101",
            [],
            confidence=Confidence.HIGH,
            severity=Severity.CRITICAL if ver is None or disagree else Severity.WARNING,
            summary="Kubernetes rules are split across both iptables backends; both are live in the kernel, "
            "so packets traverse both and the two sets can disagree.",
        )
    if f is None:
        f = _versions_differ(facts, host, image, failed)
    if f is None and kp_backend is None:
        f = _one_side_known(facts, host, image)
    if f is None:
        return

    # What every finding of this check carries: the rule split, the warning, the versions.
    f.evidence.extend(c for c in split_cites if c not in f.evidence)
    for rs in [rs for rs in facts.rulesets if rs.legacy_warning_line][:1]:
        f.evidence.append(
            Cite(
                rs.artifact,
                rs.legacy_warning_line,
                "# Warning: iptables-legacy tables present, use iptables-legacy-save to see them",
            )
        )
    notes: list[str] = []
    if split:
        notes.append("Rules found in both backends: " + "; ".join(split) + ".")
        ver = verified.verification
        disagree = sorted({r.label for r in ver.problems() if r.kind == "split"}) if ver is not None else []
        if disagree:
            notes.append(
                f"They disagree for {len(disagree)} Service port(s) ({', '.join(disagree[:5])}): see the "
                "verification finding folded here."
            )
        elif ver is not None and not strong:
            notes.append(
                "Evaluated Service by Service, they agree today; the backend kube-proxy does not use "
                "will go stale at the next change."
            )
    if host is not None:
        key = "iptables (node)" if not host.inferred else "iptables backend (node, inferred)"
        f.versions_found[key] = (
            host.text if not host.inferred else f"{'/'.join(_name(b) for b in sorted(host.variants))} ({host.source})"
        )
        f.evidence.extend(c for c in host.cites if c not in f.evidence)
        if host.inferred:
            notes.append(
                "Add the host's `iptables --version` to confirm."
                if host.describe() in f.summary
                else f"The node's backend is {host.describe()}; add the host's `iptables --version` to confirm."
            )
    if image:
        f.versions_found["iptables (kube-proxy)"] = str(image.value)
        if image.cite not in f.evidence:
            f.evidence.append(image.cite)
    elif kp_binary is not None:
        f.versions_found["iptables (kube-proxy)"] = str(kp_binary)
    elif kp_backend:
        f.versions_found["iptables (kube-proxy)"] = kp_backend
    if notes:
        f.summary += " " + " ".join(notes)
    if f.fix:
        yield f  # not kube-proxy's own failure: its own advice, not kube-proxy's upgrade path
        return
    if kp_backend != "nft":
        rem, found, where = kube_proxy_remedy(facts, FIXES)
        apply_remedy(f, rem, found, where)
    else:
        kpv = facts.kube_proxy_version
        if kpv is not None:
            f.versions_found["kube-proxy"] = str(kpv.value)
        f.fix.insert(
            0,
            "Run kube-proxy from an image whose iptables follows the host's backend (the kube-proxy image "
            "with iptables-wrapper), or switch the image's iptables to legacy "
            "(`update-alternatives --set iptables /usr/sbin/iptables-legacy`).",
        )
    f.fix += [
        "Make every iptables writer on the node use one backend: compare `iptables --version` on the "
        "host and inside the kube-proxy container.",
        "Remove the stale backend's KUBE-* rules (inspect with `iptables-legacy-save` and "
        "`iptables-nft-save`), then restart kube-proxy so its wrapper detects the backend again.",
    ]
    yield f


def _legacy(b: IptablesVersion | None) -> bool:
    return b is not None and b.effective_variant == "legacy"


def _split(facts: Facts) -> tuple[list[str], list[Cite]]:
    """Rules in both backends (same family): both are live in the kernel."""
    split: list[str] = []
    cites: list[Cite] = []
    for fam in (4, 6):
        by_backend = {rs.variant: rs for rs in facts.rulesets if rs.family == fam and rs.form == "save" and rs.variant}
        legacy, nft = by_backend.get("legacy"), by_backend.get("nft")
        if legacy and nft and legacy.kube_rule_count() and nft.kube_rule_count():
            split.append(
                f"IPv{fam}: {legacy.kube_rule_count()} KUBE-* rules in legacy, {nft.kube_rule_count()} in nf_tables"
            )
            for rs in (legacy, nft):
                # (a whole dump: each rule's line names its chain)
                first = next((r for r in rs.containing("-A KUBE-") if r.chain.startswith("KUBE-")), None)
                if first:
                    cites.append(Cite(rs.artifact, first.line, first.text.strip()))
    return split, cites


def _missing_chain(facts: Facts, hits: list[Hit], host: HostIptables | None) -> Finding | None:
    """kube-proxy's restore cannot find a KUBE-* chain: the node's chain is in the other backend,
    or it was never created (kubelet's job) in this family."""
    b = next((x for h in hits if (x := banner(h)) is not None and x.effective_variant), None)
    kp = (b.effective_variant if b else None) or (
        "legacy" if any(h.sig == CANNOT_LOAD_TARGET.id for h in hits) else "nft"
    )
    chain = next((h.groups[-1] for h in hits if h.groups and h.groups[-1]), "KUBE-MARK-DROP")
    binary = str(b) if b is not None else f"iptables-restore ({kp})"
    old = " (older than 1.8: legacy backend only)" if b is not None and not b.at_least(1, 8) else ""
    other = "nft" if kp == "legacy" else "legacy"
    says = host.says(other) if host is not None else None
    if host is not None and says is False and not host.inferred:
        return None  # both on one backend, the host's own version says so: the chain was never made
    ipv6_only = all("ip6tables" in h.record for h in hits)
    if chain in KUBE_PROXY_OWN_CHAINS:
        f = start(facts, "KP101", hits, confidence=Confidence.LOW, severity=Severity.WARNING)
        f.explained_by = ["kubelet-chains-missing"]
        f.summary = (
            f"{binary}{old} cannot find chain {chain}: not kube-proxy's sync (kube-proxy declares {chain} in its "
            "own restore) but another writer that jumps to it (hostPort or CNI portmap rules). Either kube-proxy "
            f"writes its chains in the {_name(other)} backend, or nothing creates {chain} on this node (no "
            "kube-proxy running, or one replaced by another proxy; kubelet stopped creating it in 1.27)."
        )
        f.fix = [
            f"Check that kube-proxy runs on this node and writes the backend this writer uses (compare their "
            f"`iptables --version`): kube-proxy creates {chain} in its own backend only.",
            f"If another proxy replaces kube-proxy, nothing creates {chain} since kubelet 1.27 "
            "(IPTablesOwnershipCleanup): the hostPort/portmap rules that jump to it need the replacement's own "
            "hostPort support, or the chain created by it.",
        ]
        return f
    f = start(facts, "KP101", hits, confidence=Confidence.HIGH, severity=Severity.CRITICAL)
    if host is not None and says is not False:
        f.confidence = host.confidence
        f.summary = (
            f"kube-proxy's {binary}{old} cannot see chain {chain}, which exists only in the {_name(other)} "
            f"backend the node uses ({host.describe()}); every sync that references it fails."
            if len(host.variants) == 1
            else f"kube-proxy's {binary}{old} cannot see chain {chain}; every sync that references it fails. "
            f"{host.describe()[0].upper() + host.describe()[1:]}: on a node whose iptables uses "
            f"{_name(other)}, kubelet's chain is invisible to kube-proxy."
        )
        return f
    f.explained_by = ["kubelet-chains-missing"]  # a check that sees the chain never created wins
    if ipv6_only:
        f.confidence = Confidence.LOW
        f.summary = (
            f"kube-proxy's {binary}{old} cannot find chain {chain}, and only for IPv6; every IPv6 sync that "
            "references it fails. A backend mismatch would break IPv4 too: more likely kubelet did not create "
            f"{chain} in ip6tables (it makes its chains for its own node-IP family), else the node's ip6tables "
            f"uses the {_name(other)} backend."
        )
        v4 = facts.chain_rule(chain, 4)
        if v4 is not None:
            f.evidence.append(v4)
            f.summary += f" The IPv4 rules given do have {chain}."
    else:
        f.confidence = Confidence.LOW if host is not None else Confidence.MEDIUM
        f.summary = (
            f"kube-proxy's {binary}{old} cannot find chain {chain}; every sync that references it fails. Either "
            f"the node's iptables uses the {_name(other)} backend (kubelet created the chain there), or kubelet "
            "did not create it at all"
            + (f" (the node looks {_name(kp)}: {host.describe()})" if host is not None else "")
            + ": add the host's `iptables --version` to tell which."
        )
    return f


def _table_missing(facts: Facts, hits: list[Hit], host: HostIptables | None) -> Finding | None:
    """A legacy binary finds no legacy table: the node runs nf_tables, or its kernel lacks the
    legacy table module."""
    b = banner(hits[0])
    binary = str(b) if b is not None else "iptables"
    table = next((g for h in hits for g in h.groups if g in ("nat", "filter", "mangle", "raw")), "nat")
    says = host.says("nft") if host is not None else None
    if says is False:
        return None  # a legacy node without the table: its kernel lacks the module, not this cause
    ipv6 = all("ip6tables" in h.record for h in hits)
    if host is None and ipv6:
        return None  # a node on nf_tables would fail IPv4 too: more likely no ip6table module
    mods = facts.modules
    own, sibling = (f"ip6table_{table}", f"iptable_{table}") if ipv6 else (f"iptable_{table}", f"ip6table_{table}")
    if host is None and mods is not None and sibling in mods and own not in mods:
        return None  # the other family's legacy table works: this family's module is missing
    f = start(facts, "KP101", hits, confidence=Confidence.HIGH, severity=Severity.CRITICAL)
    legacy_only = " (legacy only)" if b is not None and not b.at_least(1, 8) else ""
    if host is not None:
        f.confidence = host.confidence
        node = (
            f"the node drives netfilter through nf_tables ({host.describe()}), so"
            if len(host.variants) == 1
            else f"{host.describe()}; on a node that drives netfilter through nf_tables"
        )
        f.summary = (
            f"{binary}{legacy_only} in this log cannot initialise table {table} (Table does not exist): {node} "
            "the legacy tables it needs are not there and no chain can be created in them (kube-proxy's rules "
            "never load)."
        )
    else:
        f.confidence = Confidence.LOW
        f.summary = (
            f"{binary}{legacy_only} in this log cannot initialise table {table} (Table does not exist), so "
            "no chain can be created in it. Either the node uses the nf_tables backend (the legacy "
            f"tables are not loaded, and a container cannot load them), or its kernel lacks iptable_{table}: "
            "add the host's `iptables --version` and `uname -r` to tell which."
        )
        f.explained_by = ["kernel-netfilter-feature-missing"]
    return f


def _busy_chain(facts: Facts, hits: list[Hit], host: HostIptables | None) -> Finding | None:
    """kube-proxy's nf_tables restore cannot delete chains the kernel still holds: the mark of an
    nf_tables kube-proxy on a host whose iptables and kernel are legacy-only."""
    b = next((x for h in hits if (x := banner(h)) is not None), None)
    if b is None:
        b = next((x for h in facts.log.hits(*RESTORE_FAILED.ids) if (x := banner(h)) is not None), None)
    if b is not None and b.effective_variant == "legacy":
        return None  # not an nf_tables restore
    binary = str(b) if b is not None else "iptables-restore (nf_tables)"
    chain = next((c for h in hits if (c := captures(h).get("chain"))), "KUBE-SEP-...")
    says = host.says("legacy") if host is not None else None
    if says is False:
        return None  # an nf_tables node: busy chains are another problem
    f = start(facts, "KP101", hits, confidence=Confidence.HIGH, severity=Severity.CRITICAL)
    if host is not None:
        f.confidence = host.confidence
        f.summary = (
            f"kube-proxy's {binary} cannot delete chain {chain} (CHAIN_USER_DEL: Device or resource busy): it "
            f"writes through nf_tables on a node whose iptables is legacy ({host.describe()}); every sync fails."
        )
    else:
        f.confidence = Confidence.LOW
        f.summary = (
            f"kube-proxy's {binary} cannot delete chain {chain} (CHAIN_USER_DEL: Device or resource busy); every "
            "sync fails. That is what an nf_tables kube-proxy does on a host whose OS and kernel are "
            "legacy-only (RHEL/CentOS 7): add `uname -r`, /etc/os-release and the host's `iptables --version` "
            "to confirm."
        )
    return f


def _versions_differ(
    facts: Facts, host: HostIptables | None, image: Versioned[IptablesVersion] | None, failed: list[Hit]
) -> Finding | None:
    """No failure signature: the backends simply differ (host against kube-proxy's image, the
    binary of its failed restores, or another container's iptables)."""
    if host is None or len(host.variants) != 1:
        return None
    node = next(iter(host.variants))
    if image is not None and image.value.effective_variant and image.value.effective_variant != node:
        f = start(
            facts,
            "KP101",
            [],
            confidence=Confidence.MEDIUM if not host.inferred else Confidence.LOW,
            severity=Severity.WARNING,
            summary=f"The node's iptables uses {_name(node)} ({host.describe()}) and kube-proxy's "
            f"{image.value} uses {_name(str(image.value.effective_variant))}.",
        )
        return f
    wrong = [h for h in failed if (b := banner(h)) is not None and b.effective_variant not in (None, node)]
    if wrong:
        b = banner(wrong[0])
        assert b is not None
        f = start(
            facts,
            "KP101",
            wrong,
            confidence=Confidence.HIGH if not host.inferred else Confidence.MEDIUM,
            severity=Severity.CRITICAL if not host.inferred else Severity.WARNING,
        )
        f.summary = (
            f"kube-proxy's failing restores run {b} ({_name(str(b.effective_variant))}) while the node's iptables "
            f"uses {_name(node)} ({host.describe()}): its rules go where the node does not look."
        )
        return f
    if host.inferred:
        return None
    others = [
        (v, a)
        for v, a in facts.iptables_versions("other")
        if v.value.effective_variant and v.value.effective_variant != node
    ]
    if others:
        v, a = others[0]
        where = a.attrs.get("command") or a.attrs.get("scope") or a.name
        f = start(
            facts,
            "KP101",
            [],
            confidence=Confidence.MEDIUM,
            severity=Severity.WARNING,
            summary=f"The node's iptables uses {_name(node)} ({host.describe()}) but a container on it "
            f"(`{where}`) runs {v.value}: whatever it programs (kube-proxy, kubelet or an agent) lands in the "
            "backend the node does not use.",
        )
        f.evidence.append(v.cite)
        return f
    return None


def _one_side_known(
    facts: Facts, host: HostIptables | None, image: Versioned[IptablesVersion] | None
) -> Finding | None:
    """Only one side of the comparison is in the evidence, and no sync succeeded: what it
    suggests, at the confidence it deserves.

    - iptables-nft-save's "legacy tables present" warning: rules exist in both backends.
    - the node's iptables is nf_tables: kube-proxy images before 1.17 (and other agents with a
      legacy-only iptables) write to legacy; with kube-proxy's version that is decided, else a
      note naming what to compare.
    """
    if image is not None or facts.log.count(*SYNC_COMPLETE.ids):
        return None
    warn = next((rs for rs in facts.rulesets if rs.legacy_warning_line and not rs.legacy_warning_spliced), None)
    if warn is not None and warn.legacy_warning_line is not None:
        f = start(
            facts,
            "KP101",
            [],
            confidence=Confidence.LOW,
            severity=Severity.WARNING,
            summary="iptables-nft-save warns that the legacy backend holds tables too: something on this node "
            "writes with iptables-legacy while the dump shows only the nf_tables side. If kube-proxy and kubelet "
            "(or a CNI) are among them, their rules do not see each other. Compare `iptables-legacy-save` with "
            "`iptables-nft-save`: KUBE-* chains in both is the mismatch.",
        )
        return f
    if host is None or host.inferred or not host.says("nft"):
        return None
    if any(rs.kube_rule_count() for rs in facts.rulesets):
        return None  # where the rules are is in the evidence: the split check above decides
    kpv = facts.kube_proxy_version
    if kpv is not None and kpv.value.line >= (1, 17):
        return None  # its image follows the node (iptables-wrapper); nothing to say without more
    old = kpv is not None
    f = start(
        facts,
        "KP101",
        [],
        confidence=Confidence.MEDIUM if old else Confidence.LOW,
        severity=Severity.WARNING if old else Severity.INFO,
        summary=f"The node's iptables uses nf_tables ({host.describe()}). "
        + (
            f"kube-proxy {kpv.value} predates 1.17: its image has a legacy-only iptables, so its rules go to the "
            "backend the node does not use."
            if kpv is not None
            else "kube-proxy images before 1.17, and any agent with a legacy-only iptables, write to the legacy "
            "backend, which this node's tools do not show. Compare with kube-proxy's own "
            "`iptables --version` (`kubectl -n kube-system exec <kube-proxy pod> -- iptables --version`)."
        ),
    )
    f.evidence.extend(c for c in host.cites if c not in f.evidence)
    if kpv is not None:
        f.evidence.append(kpv.cite)
    return f


@check(
    "KP205",
    cause="iptables-backend-mismatch",
    title="Service rules exist in both iptables backends",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    needs_all=CLUSTER,
    needs_all_or=PRINTED_SERVICES,
)
def backend_split(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """kube-proxy's rules are in the legacy and the nf_tables backend at once.

    Symptom: `iptables-legacy-save` and `iptables-nft-save` both list KUBE-SERVICES; Services
        behave differently from what either listing suggests; `iptables-nft-save` warns
        "iptables-legacy tables present".
    Cause: the kernel runs both backends' tables. When kube-proxy (or an earlier kube-proxy
        image) wrote its rules with one backend and the current one writes with the other, the
        old set stays live and is never updated: packets can be DNATed by stale rules first.
    How it is detected: both backends' dumps hold DNAT rules; every Service port is evaluated
        through each backend separately and the outcomes are compared; this finding names the
        Service ports they disagree on (the split itself, and identical sets, are KP101's).
    Fix: find which backend the running kube-proxy uses (`kube-proxy` logs, or `iptables
        --version` inside its container), then remove the other backend's KUBE-* rules (for
        example `iptables-legacy-save | grep -v KUBE- | iptables-legacy-restore`, during a
        maintenance window) and make every component use the node's backend (iptables-wrappers).
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/71305;
        https://github.com/kubernetes-sigs/iptables-wrappers
    """
    ver = verified.verification
    if ver is None or not ver.split:
        return
    split = [r for r in ver.problems() if r.kind == "split"]
    for fam, artifacts in sorted(ver.split.items()):
        mine = [r for r in split if r.family == fam]
        if not mine:
            continue  # identical sets: KP101 reports the split itself
        labels = sorted({r.label for r in mine})
        summary = (
            f"IPv{fam} Service rules are in both iptables backends and they disagree for "
            f"{len(labels)} Service port(s): {', '.join(labels[:5])}. First: {mine[0].note.split(';')[0]} "
            f"({classes(mine[:1])})."
        )
        f = start(facts, "KP205", [], confidence=Confidence.HIGH, summary=summary, severity=Severity.CRITICAL)
        f.evidence = [Cite(a, None, "holds Service DNAT rules") for a in artifacts]
        for r in mine[:2]:
            f.evidence.extend(r.rules[:2])
        f.subject = {"service": mine[0].label, "workload": None}
        f.ongoing = True
        f.explained_by = ["iptables-backend-mismatch"]  # folds under KP101 (the split, its versions and fix)
        f.fix = [
            "Remove the KUBE-* rules of the backend the running kube-proxy does not use, and run every "
            "iptables user with the node's backend (iptables-wrappers)."
        ]
        yield f
