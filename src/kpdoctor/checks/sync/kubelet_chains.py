"""KP121: a chain kubelet is expected to create is missing in one family or on this node."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.checks.sync.backend_mismatch import CANNOT_LOAD_TARGET, CHAIN_DOES_NOT_EXIST
from kpdoctor.facts import Facts
from kpdoctor.facts.iptables_variant import HostIptables, banner
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.iptables import Rule, Ruleset, Table
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import KubeVersion

# Chains kubelet created for everyone until 1.27 (KEP-3178, IPTablesOwnershipCleanup): kube-proxy
# and the runtime's hostport code (CNI portmap) jump to them.
KUBELET_CHAINS = frozenset({"KUBE-MARK-DROP", "KUBE-MARK-MASQ", "KUBE-FIREWALL", "KUBE-KUBELET-CANARY"})
KUBELET_STOPPED = KubeVersion(1, 27, 0)
MARK_DROP = "KUBE-MARK-DROP"
NO_LOCAL = "has no local endpoints"


def _one_backend(facts: Facts, hits: list[Hit], chain: str, failing: str | None, host: HostIptables | None) -> Finding:
    """The missing-chain error with nothing from the other family or the hostport code: the
    chain was never made, when the node's iptables uses kube-proxy's backend; otherwise the
    other reading of what KP101 reports as a backend mismatch."""
    same = host is not None and not host.inferred and failing is not None and host.says(failing) is True
    f = start(facts, "KP121", hits, confidence=Confidence.MEDIUM if same else Confidence.LOW)
    if same:
        assert host is not None
        f.evidence.extend(host.cites)
        f.confidence_reason = "the node's own iptables uses kube-proxy's backend"
        f.summary = (
            f"kube-proxy's restore cannot find {chain}, and the node's iptables uses the same backend "
            f"({host.describe()}): the chain is not hidden in the other backend, nothing created it. kubelet "
            f"created {chain} before 1.27 (for its own node-IP family only), and kube-proxy releases that relied on "
            "it fail until it exists."
        )
    else:
        f.severity = Severity.WARNING
        f.alternative_to = "iptables-backend-mismatch"
        f.confidence_reason = "the same error as a backend mismatch; nothing given tells them apart"
        f.summary = (
            f"If the node's iptables uses kube-proxy's backend{f' ({failing})' if failing else ''}, {chain} is not "
            "hidden in the other backend: nothing created it. kubelet created it before 1.27 (for its own node-IP "
            "family only), and kube-proxy releases that relied on it fail until it exists. The host's "
            "`iptables --version` tells this from a backend mismatch."
        )
    f.fix = [
        f"Compare the host's `iptables --version` with kube-proxy's: on one backend, have {chain} created where it "
        "is used (a kube-proxy that creates its own chains, 1.27+; or kubelet managing this family's node IP).",
    ]
    return f


def _ipv6(h: Hit) -> bool:
    return "ip6tables" in h.record or "ip6tables" in h.text


@check(
    "KP121",
    cause="kubelet-chains-missing",
    title="a chain kubelet should create is missing",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_SAVE, Kind.IPTABLES_RULES_S],
    explains=("iptables-backend-mismatch", *RESTORE_SYMPTOMS),
)
def kubelet_chains_missing(facts: Facts) -> Iterator[Finding]:
    """A chain kubelet made before 1.27 (KUBE-MARK-DROP, KUBE-MARK-MASQ, KUBE-FIREWALL) is missing
    or empty here, so what kube-proxy hands to it fails or is never dropped.

    Symptom: `ip6tables-restore v1.6.2: Couldn't load target `KUBE-MARK-DROP':No such file or
        directory` while `iptables -t nat -S` shows the chain; or a Pod with a hostPort cannot
        start: `failed to add hostport mapping ... Chain 'KUBE-MARK-MASQ' does not exist`; or,
        with no error anywhere, traffic to a Service with `externalTrafficPolicy: Local` is not
        dropped on a node without its endpoints (it hangs, or reaches whatever listens on the
        port), and a LoadBalancer's source ranges do not filter: `iptables-save` shows
        `:KUBE-MARK-DROP - [0:0]` and no `-A KUBE-MARK-DROP` rule.
    Cause: kubelet created KUBE-MARK-DROP/KUBE-MARK-MASQ only for its own node-IP family (an
        IPv6 node had them in iptables only), and from 1.27 (IPTablesOwnershipCleanup) not at
        all: kube-proxy makes its own, so the runtime's hostport rules on a node without
        kube-proxy (replaced by Cilium or another proxy) find nothing to jump to. Older
        kube-proxy releases relied on kubelet's chains and failed when they were not there yet.
        kube-proxy before 1.25 marks the packets it must drop (a Local-policy Service with no
        endpoint on this node, a LoadBalancer source outside its ranges) with a jump to
        KUBE-MARK-DROP and leaves the mark and the drop to kubelet (the MARK rule in that chain,
        the DROP by mark 0x8000 in the filter table's KUBE-FIREWALL). Releases that create the
        chain when it is missing create it empty, and so does the usual workaround
        (`ip6tables -t nat -N KUBE-MARK-DROP`): with kubelet's rules absent (kubelet run with
        --make-iptables-util-chains=false, on another backend or without that family, or its
        rules flushed), the restore succeeds and nothing is dropped.
    How it is detected: the restore's missing-chain error for a kubelet-era chain, all in one
        family while the other family's rules have it; or raised by the hostport code, not by
        kube-proxy. When the node's own iptables is known to use the other backend, the chain
        is there and invisible: that is a backend mismatch (KP101), not this; when nothing
        tells the two apart, KP101 reports the error first and this check the other reading
        (an alternative at low confidence); when the node's own `iptables --version` shows
        kube-proxy's backend, the chain was never made, and this check is the answer. From the
        rules alone, each IP family apart, and only from a whole dump (`iptables-save`, or
        `iptables -t nat -S`), never a grep'd part of one: the nat table declares KUBE-MARK-DROP,
        rules jump to it, and it has no rule (nothing sets the mark), or the filter table, when
        given, drops nothing by mark. A jump from a "has no local endpoints" rule is traffic
        that must be dropped and is not (critical); other jumps (source ranges) a warning.
    Fix: let something create the chain in that family and backend: the replacement proxy's
        own hostPort support (Cilium `hostPort.enabled`), kube-proxy running on the node, or a
        kube-proxy that creates its own chains; for one family, give kubelet the node IPs of
        both families or upgrade it. For an empty KUBE-MARK-DROP: kubelet's
        --make-iptables-util-chains=true (the default) on a kubelet before 1.27, for that
        family, or kube-proxy 1.25 or later, which drops such traffic with its own filter rules.
    References: https://github.com/kubernetes/kubernetes/issues/67398;
        https://github.com/kubernetes/kubernetes/issues/80462;
        https://github.com/kubernetes/kubernetes/issues/85572;
        https://github.com/kubernetes/enhancements/tree/master/keps/sig-network/3178-iptables-cleanup
    """
    if facts.has(Kind.KUBE_PROXY_LOG):
        yield from _from_log(facts)
    yield from _from_rules(facts)


def _from_log(facts: Facts) -> Iterator[Finding]:
    """The restore's (or the hostport code's) missing-chain error."""
    hits = [
        h
        for h in facts.log.hits(CANNOT_LOAD_TARGET.id, CHAIN_DOES_NOT_EXIST.id)
        if h.groups and h.groups[-1] in KUBELET_CHAINS
    ]
    if not hits:
        return
    chain = str(hits[0].groups[-1])
    host = facts.host_iptables
    failing = next((b.effective_variant for h in hits if (b := banner(h)) is not None and b.effective_variant), None)
    if host is not None and failing is not None and host.says(failing) is False:
        return  # the node's chains are in the other backend: a backend mismatch (KP101)
    hostport = [h for h in hits if "hostport" in h.record.lower()]
    v6 = all(_ipv6(h) for h in hits)
    v4 = not any(_ipv6(h) for h in hits)
    other_family = facts.chain_rule(chain, 4 if v6 else 6) if (v6 or v4) else None
    if other_family is None and not hostport:
        yield _one_backend(facts, hits, chain, failing, host)
        return
    f = start(facts, "KP121", hits, confidence=Confidence.HIGH)
    f.confidence_reason = (
        "the other family's rules have the chain" if other_family is not None else "the hostport code's own error"
    )
    if other_family is not None:
        f.evidence.append(other_family)
        fam, other = ("IPv6", "IPv4") if v6 else ("IPv4", "IPv6")
        f.summary = (
            f"{chain} exists in the {other} rules but not for {fam}, so every {fam} restore that jumps to it fails: "
            f"kubelet created it only for its own node-IP family."
        )
    else:
        f.summary = (
            f"The runtime's hostport rules jump to {chain}, which nothing on this node creates: kubelet stopped "
            "creating it in 1.27 and only kube-proxy makes it, so a node without kube-proxy (replaced by another "
            "proxy) cannot start Pods with a hostPort."
        )
        kubelet = facts.node_info("kubeletVersion")
        if kubelet is not None and (kv := KubeVersion.parse(kubelet[0])) is not None:
            f.versions_found["kubelet"] = str(kv)
            f.evidence.append(kubelet[1])
    f.fix = [
        "Have the chain created where it is used: run kube-proxy (1.27+ creates KUBE-MARK-MASQ/KUBE-MARK-DROP itself) "
        "or enable the replacement proxy's own hostPort support; for one missing family, give kubelet both "
        "families' node IPs or upgrade it.",
    ]
    yield f


# -- from the rules alone: KUBE-MARK-DROP declared, jumped to, and marking nothing -----------------


@dataclass(slots=True)
class _EmptyDrop:
    """One complete dump's view of the drop mark: who jumps to KUBE-MARK-DROP, whether anything
    in it sets the mark, and whether the filter table (when given) drops by mark."""

    rs: Ruleset
    nat: Table
    jumps: list[Rule]
    marks: bool  # KUBE-MARK-DROP has a rule
    filter_given: bool
    filter_drops: bool  # a filter rule DROPs by mark (kubelet's KUBE-FIREWALL rule)
    absent: list[str] = field(default_factory=list)  # kubelet's chains not in the dump

    @property
    def no_local(self) -> list[Rule]:
        return [r for r in self.jumps if NO_LOCAL in r.text]

    @property
    def broken(self) -> bool:
        return not self.marks or (self.filter_given and not self.filter_drops)


def _drops_by_mark(table: Table) -> bool:
    """Does a rule of this filter table DROP packets by their mark (kubelet's KUBE-FIREWALL rule,
    or a rule without its mark, which KP122 reports: it drops, too much)?"""
    for r in table.rules:
        if "DROP" not in r.text or r.target != "DROP":
            continue
        if "dropping marked packets" in r.text and "--mark" not in r.args:
            return True  # kubelet's rule with its mark lost by a broken iptables (KP122): it drops all
        args = r.args
        if "--mark" in args and args[args.index("--mark") - 1] != "!":
            return True
    return False


def _filters(facts: Facts, rs: Ruleset) -> list[Table]:
    """The filter tables that go with ``rs``'s nat table: its own, else those of the complete
    listings of the same family and backend (`iptables -t nat -S` and `iptables -S` given apart)."""
    if "filter" in rs.tables:
        return [rs.tables["filter"]]
    out = []
    for other in facts.rulesets:
        if other is rs or other.family != rs.family or other.form not in ("save", "S"):
            continue
        if rs.variant and other.variant and rs.variant != other.variant:
            continue
        if "filter" in other.tables:
            out.append(other.tables["filter"])
    return out


def _view(facts: Facts, rs: Ruleset) -> _EmptyDrop | None:
    nat = rs.tables["nat"]
    if MARK_DROP not in nat.chains:
        return None
    jumps, marks = [], False
    for r in nat.rules:
        if r.chain == MARK_DROP:
            marks = True
        elif MARK_DROP in r.text and r.target == MARK_DROP:
            jumps.append(r)
    if not jumps:
        return None  # nothing hands packets to it: nothing is lost
    filters = _filters(facts, rs)
    view = _EmptyDrop(rs, nat, jumps, marks, bool(filters), any(_drops_by_mark(t) for t in filters))
    present = set(nat.chains).union(*(t.chains for t in filters), rs.chains())
    wanted = ["KUBE-KUBELET-CANARY"] + (["KUBE-FIREWALL"] if filters else [])
    view.absent = [c for c in wanted if c not in present]
    return view


def _declaration(facts: Facts, rs: Ruleset, table: Table, chain: str) -> Cite:
    """The line declaring ``chain``, as the user's file has it."""
    line = table.chain_lines.get(chain)
    text = f"-N {chain}" if rs.form == "S" else f":{chain} - [0:0]"
    if line is not None:
        for a in facts.of(Kind.IPTABLES_SAVE) + facts.of(Kind.IPTABLES_RULES_S):
            if a.name != rs.artifact or line < a.first_line:
                continue
            lines = a.read_text().splitlines()
            if line - a.first_line < len(lines) and chain in lines[line - a.first_line]:
                text = lines[line - a.first_line].strip()
                break
    return Cite(rs.artifact, line, text)


def _from_rules(facts: Facts) -> Iterator[Finding]:
    """One finding per IP family whose complete rules jump to a KUBE-MARK-DROP that marks nothing
    (or whose filter table drops nothing by mark)."""
    complete = [rs for rs in facts.rulesets if rs.whole("nat")]
    views = [v for rs in complete if (v := _view(facts, rs)) is not None]
    for family in sorted({v.rs.family for v in views}):
        broken = sorted(
            (v for v in views if v.rs.family == family and v.broken), key=lambda v: (not v.no_local, not v.marks)
        )
        if not broken:
            continue
        mine = broken[0].rs
        # kubelet's MARK rule in the other backend's rules of this family: kubelet writes there
        elsewhere = next(
            (
                rs
                for rs in complete
                if rs.family == family
                and rs.variant
                and mine.variant
                and rs.variant != mine.variant
                and any(r.chain == MARK_DROP for r in rs.tables["nat"].rules)
            ),
            None,
        )
        yield _empty_drop_finding(facts, broken[0], elsewhere)


def _empty_drop_finding(facts: Facts, v: _EmptyDrop, elsewhere: Ruleset | None) -> Finding:
    fam = "IPv6" if v.rs.family == 6 else "IPv4"
    tool = "ip6tables" if v.rs.family == 6 else "iptables"
    where = f"the {fam} rules" + (f" ({v.rs.variant} backend)" if v.rs.variant else "")
    no_local = v.no_local
    lines = {r.line for r in no_local}
    services = sorted(
        {svc for svc, c in facts.services_commented(NO_LOCAL) if c.artifact == v.rs.artifact and c.line in lines}
    )
    critical = bool(no_local)
    f = start(
        facts,
        "KP121",
        [],
        confidence=Confidence.HIGH if critical else Confidence.MEDIUM,
        severity=Severity.CRITICAL if critical else Severity.WARNING,
    )
    first = (no_local or v.jumps)[0]
    f.evidence.append(_declaration(facts, v.rs, v.nat, MARK_DROP))
    # the jump that matters most, and one of the other kind (a source-range firewall) when there are both
    other_kind = next((r for r in v.jumps if r not in no_local), None) if no_local else None
    f.evidence.extend(Cite(v.rs.artifact, r.line, r.text.strip()) for r in (first, other_kind) if r is not None)
    if v.marks:
        mark = next(r for r in v.nat.rules if r.chain == MARK_DROP)
        f.evidence.append(Cite(v.rs.artifact, mark.line, mark.text.strip()))
    named = ", ".join(services[:3]) + (f" and {len(services) - 3} more" if len(services) > 3 else "")
    what = (
        f'{len(no_local)} of them the "has no local endpoints" rule of {named or "a Service"}'
        if no_local
        else "none of them for a Service without local endpoints (a LoadBalancer's source ranges, or ipvs mode's "
        "firewall)"
    )
    effect = (
        "Traffic kube-proxy means to drop is not dropped: it leaves its chain untranslated and goes on to whatever "
        "the node does with it (a local listener, forwarding, or a timeout)."
        if critical
        else "Traffic kube-proxy means to drop (from outside a LoadBalancer's source ranges) is not dropped."
    )
    if not v.marks:
        broken = "but the chain is declared and holds no rule: nothing sets the drop mark (0x8000)" + (
            ", and the filter table drops nothing by mark either" if v.filter_given and not v.filter_drops else ""
        )
        absent = (
            f" Of kubelet's other chains, {' and '.join(v.absent)} {'is' if len(v.absent) == 1 else 'are'} absent "
            "too: kubelet made none of its chains here."
            if v.absent
            else " kubelet's other chains are there: its rule in KUBE-MARK-DROP was removed since."
        )
        why = (
            " kube-proxy releases before 1.25 that create the chain when it is missing create it empty (so does the "
            "usual workaround, `-N KUBE-MARK-DROP` by hand): its rule and the drop were kubelet's, made before 1.27."
        )
        f.confidence_reason = "the complete nat table: the chain is declared, jumped to and empty"
    else:
        broken = (
            "and the chain sets its mark, but the filter table has no rule dropping marked packets (kubelet's "
            "KUBE-FIREWALL rule `-m mark --mark 0x8000/0x8000 -j DROP`)"
        )
        absent = " KUBE-FIREWALL is absent: kubelet's filter rules were removed." if "KUBE-FIREWALL" in v.absent else ""
        why = " The drop was kubelet's, made before 1.27."
        f.confidence_reason = "the complete nat and filter tables: marked, never dropped"
    other = (
        f" The {elsewhere.variant} backend's {fam} rules ({elsewhere.artifact}) have kubelet's KUBE-MARK-DROP rule: "
        "kubelet writes to the other backend than kube-proxy (a backend mismatch, KP101)."
        if elsewhere is not None
        else ""
    )
    f.summary = (
        f"In {where}, {len(v.jumps)} rule(s) jump to KUBE-MARK-DROP, {what}, {broken}. {effect}{absent}{other}{why}"
    )
    family_note = (
        " (kubelet makes IPv6 rules only with an IPv6 node IP or, from 1.20, with dual-stack enabled)"
        if v.rs.family == 6
        else ""
    )
    f.fix = [
        "Let kubelet make its chains again: --make-iptables-util-chains=true (the default; makeIPTablesUtilChains in "
        f"the KubeletConfiguration) on a kubelet before 1.27 that uses kube-proxy's iptables backend{family_note}; "
        "or upgrade kube-proxy to 1.25 or later, which drops this traffic with its own filter rules and does not "
        "jump to KUBE-MARK-DROP (a kubelet 1.27 or later needs such a kube-proxy).",
        f"Until then, add kubelet's rules by hand: `{tool} -t nat -A KUBE-MARK-DROP -j MARK --or-mark 0x8000`, "
        f"`{tool} -N KUBE-FIREWALL`, `{tool} -A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP`, and "
        f"`{tool} -I INPUT -j KUBE-FIREWALL` / `{tool} -I OUTPUT -j KUBE-FIREWALL` (those missing only).",
    ]
    if elsewhere is not None:
        f.fix.insert(
            0,
            "Make kubelet and kube-proxy use one iptables backend (the host's `iptables --version` against "
            "kube-proxy's image): then kube-proxy's jumps reach kubelet's rules.",
        )
    return f
