"""KP122: the iptables binary in use has a known bug that breaks kube-proxy's (or kubelet's) rules."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.iptables import Rule
from kpdoctor.versions import IptablesVersion

FIREWALL_COMMENT = "kubernetes firewall for dropping marked packets"
DUPLICATES = 3  # copies of one rule in one chain that no writer makes on purpose
CHECK_BROKEN = ((1, 8, 0), (1, 8, 2))  # iptables-nft whose -C never finds the rule it added
# Later releases whose `-C` fails for rules that exist ("Bad rule (does a matching rule exist in
# that chain?)"), so writers that check before appending (kubelet, kube-router) duplicate rules:
# (release, fixed in, reference). Read when the dump's or binary's version is one of them.
LATER_CHECK_BUGS = {
    "1.8.7": ("1.8.8", "https://github.com/flatcar/Flatcar/issues/954", "at times"),
    "1.8.9": ("1.8.10", "https://github.com/bottlerocket-os/bottlerocket/pull/3001", "ip6tables"),
    "1.8.10": ("1.8.11", "https://github.com/cloudnativelabs/kube-router/issues/1789", "Alpine 3.19-3.21"),
}
# Distributions whose default iptables is one of them, in nf_tables mode (kb-facts; k/k#82361).
OS_WITH_BROKEN_CHECK = {("debian", "10"): "Debian 10 (buster) ships iptables 1.8.2 in nf_tables mode"}


def _duplicated(facts: Facts) -> list[tuple[Rule, int, str]]:
    """(rule, copies, artifact) for a Kubernetes rule a writer appended twice or more in its chain;
    kube-proxy's userspace-era jumps are its own bug (KP123), not the binary's."""
    return [(d.rule, d.copies, d.artifact) for d in facts.duplicated_rules if not d.userspace_jump]


# Rules that kubelet and kube-proxy write once per node, found by their comment; a user counting
# one of them (`iptables -L -n | grep "..." | wc -l`) and finding thousands has the duplicates.
SINGLE_RULE_COMMENTS = (FIREWALL_COMMENT, "block incoming localnet connections")
_IPTABLES_PROGRAMS = ("iptables", "ip6tables")


def _counted(facts: Facts) -> list[tuple[int, Cite, str, list[int]]]:
    """(copies, cite, comment, earlier counts) for a pasted count of a once-only Kubernetes rule
    (the command's grep names its comment) at DUPLICATES or more; several counts of one command
    show the growth."""
    by_command: dict[str, list[int]] = {}
    out = []
    for c, a in facts.line_counts:
        if c.source and not c.program.startswith(_IPTABLES_PROGRAMS):
            continue
        named = next(
            (
                comment
                for p in c.patterns
                for comment in SINGLE_RULE_COMMENTS
                if len(p.strip("'\"^$ ")) >= 12 and p.strip("'\"^$ ").lower() in comment
            ),
            None,
        )
        earlier = by_command.setdefault(c.command, [])
        if named is not None and c.count >= DUPLICATES:
            out.append((c.count, Cite(a.name, c.line, f"{c.command}  ->  {c.text}"), named, list(earlier)))
        earlier.append(c.count)
    return out


def _unconditional_firewall(facts: Facts) -> list[tuple[Rule, str]]:
    """kubelet's/kube-proxy's KUBE-FIREWALL drop rule without its mark match: it drops everything."""
    out = []
    for rs in facts.rulesets:
        for r in rs.in_chains({"KUBE-FIREWALL"}):  # a large node has a quarter of a million other rules
            if FIREWALL_COMMENT not in r.text:
                continue  # before tokenising
            marked = "mark" in r.args or "--mark" in r.args or "mark match" in r.text
            if "DROP" in r.args and not marked:
                out.append((r, rs.artifact))
    return out


def _versions(facts: Facts) -> list[tuple[IptablesVersion, Cite]]:
    """Every iptables version the evidence shows: `--version` of any scope, dump banners."""
    out = [(v.value, v.cite) for v, _a in facts.iptables_versions("host", "kube-proxy", "other")]
    for rs in facts.rulesets:
        if rs.generator:
            v = IptablesVersion.parse(rs.generator)
            if v is not None:
                out.append((v, Cite(rs.artifact, None, rs.generator)))
    return out


def _check_broken(v: IptablesVersion, copies_seen: bool = False) -> bool:
    """Does this release fail `-C`? The later releases fail it for some rules only: named when
    copies are there, never a finding by their version alone (Debian 12 ships 1.8.9)."""
    return (v.effective_variant == "nft" and CHECK_BROKEN[0] <= v.parts[:3] <= CHECK_BROKEN[1]) or (
        copies_seen and _release(v) in LATER_CHECK_BUGS
    )


def _release(v: IptablesVersion) -> str:
    return ".".join(map(str, v.parts[:3]))


def _fixed_for(v: IptablesVersion) -> str:
    later = LATER_CHECK_BUGS.get(_release(v))
    return later[0] if later else "1.8.3"


@check(
    "KP122",
    cause="iptables-known-bug",
    title="the iptables binary in use has a known bug",
    severity=Severity.CRITICAL,
    needs=[
        Kind.IPTABLES_SAVE,
        Kind.IPTABLES_RULES_S,
        Kind.IPTABLES_LIST,
        Kind.LINE_COUNT,
        Kind.IPTABLES_VERSION,
        Kind.OS_RELEASE,
    ],
    explains=("iptables-drop-rule", "iptables-backend-mismatch", *RESTORE_SYMPTOMS),
    versions=(
        VersionRow(
            "iptables",
            "1.8.0-1.8.2 (nf_tables): -C fails, rules duplicated",
            "1.8.3",
            "https://github.com/kubernetes/kubernetes/issues/82361",
        ),
        *(
            VersionRow("iptables", f"{v} ({note}): -C fails, rules duplicated", fixed, ref)
            for v, (fixed, ref, note) in LATER_CHECK_BUGS.items()
        ),
        VersionRow(
            "iptables",
            "image 1.8.7 with host 1.8.8 (nf_tables): mark match lost",
            "same version on both sides",
            "https://github.com/kubernetes/kubernetes/issues/112477",
        ),
    ),
)
def iptables_known_bug(facts: Facts) -> Iterator[Finding]:
    """An iptables release with a known bug rewrites or duplicates Kubernetes' rules.

    Symptom: KUBE-FIREWALL holds thousands of copies of `-m comment --comment "kubernetes
        firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP`; or that
        rule has lost its mark match (`... --comment "kubernetes firewall for dropping marked
        packets" -j DROP`) and the node drops all traffic.
    Cause: iptables 1.8.0-1.8.2 in nf_tables mode (Debian 10's 1.8.2-4) cannot `-C` check the
        rule it has just added, so kubelet and kube-proxy append it again on every sync (fixed
        in 1.8.3); 1.8.7 (at times), 1.8.9 (ip6tables) and 1.8.10 (Alpine 3.19-3.21, in
        kube-router's image) answer "Bad rule" for rules that exist, fixed in 1.8.8, by a
        patch, and in 1.8.11. An older iptables-nft (1.8.7, in kube-proxy/kube-router images of that era)
        saving and restoring rules that a newer host iptables-nft (1.8.8) wrote loses their
        mark match, turning the drop rule unconditional.
    How it is detected: a rule repeated in one chain of a dump (a jump with its comment in an
        `iptables -L` listing), or a
        pasted count (`iptables -L -n | grep "<its comment>" | wc -l`) of a rule written once
        per node at three or more; the KUBE-FIREWALL drop rule without a mark match; iptables
        versions from `--version`, dump banners, the OS release (Debian 10). A version alone
        says only that the bug is there.
    Fix: duplicates: iptables 1.8.3 or later (Debian 10: buster-backports), or switch the node
        to iptables-legacy. Lost mark: align the image's iptables with the host's (kube-proxy
        1.29+ images carry Debian 12's), then restore the rule (restart kubelet/kube-proxy).
    References: https://github.com/kubernetes/kubernetes/issues/82361;
        https://github.com/kubernetes/kubernetes/issues/112477; https://github.com/cloudnativelabs/kube-router/issues/1370
    """
    dups = _duplicated(facts)
    counted = _counted(facts)
    open_drop = _unconditional_firewall(facts)
    versions = _versions(facts)
    broken = [(v, c) for v, c in versions if _check_broken(v, bool(dups or counted))]
    osr = facts.os_release
    os_broken = None
    if osr is not None:
        d, c = osr
        note = OS_WITH_BROKEN_CHECK.get((d.get("ID", "").lower(), d.get("VERSION_ID", "").strip('"')))
        if note and not any(v.effective_variant == "legacy" or v.at_least(1, 8, 3) for v, _c in versions):
            os_broken = (note, c)
    if not (dups or counted or open_drop or broken or os_broken):
        return
    if open_drop:
        r, art = open_drop[0]
        f = start(facts, "KP122", [], confidence=Confidence.MEDIUM)
        f.evidence.append(Cite(art, r.line, r.text.strip()))
        f.summary = (
            "KUBE-FIREWALL's drop rule has lost its mark match: it drops every packet, not only kube-proxy's marked "
            "ones. An older iptables-nft (a container image's 1.8.7) saved and restored rules a newer host "
            "iptables-nft (1.8.8) wrote."
        )
        nft = sorted({str(v) for v, _c in versions})
        if len(nft) > 1:
            f.confidence = Confidence.HIGH
            f.summary += f" Versions seen: {', '.join(nft)}."
        f.fix = [
            "Give every container that saves and restores iptables rules (kube-proxy, kube-router, CNI agents) the "
            "host's iptables version (kube-proxy 1.29+ images carry Debian 12's), then restart kubelet and "
            "kube-proxy to restore the rule with its `-m mark --mark 0x8000/0x8000`."
        ]
    elif dups or counted or broken:
        copies = dups or counted
        f = start(
            facts, "KP122", [], confidence=Confidence.HIGH if copies and (broken or os_broken) else Confidence.MEDIUM
        )
        if dups:
            r, n, art = dups[0]
            f.evidence.append(Cite(art, r.line, r.text.strip()))
            f.summary = f"{n} copies of one rule in {r.chain}: a writer's `iptables -C` never finds the rule it added."
            f.severity = Severity.WARNING
        elif counted:
            n, cite, comment, earlier = max(counted, key=lambda c: c[0])
            f.evidence.append(cite)
            grew = f" (it was {', then '.join(map(str, earlier))} before)" if earlier and earlier[-1] < n else ""
            f.summary = (
                f'{n} rules carry the comment "{comment}"{grew}, which kubelet and kube-proxy write once: a '
                "writer's `iptables -C` never finds the rule it added, so every sync appends another copy."
            )
            f.severity = Severity.WARNING
            f.confidence_reason = "a count of the rule, pasted with the command that counted it" + (
                ", and an iptables that has the bug" if broken or os_broken else ""
            )
            if any(c.legacy_warning for c, _a in facts.line_counts):
                f.summary += " The listing printed iptables-nft's legacy-tables warning: this iptables uses nf_tables."
        else:
            f.summary = "This iptables cannot `-C` check rules in nf_tables mode."
            f.severity = Severity.WARNING
        for v, c in broken[:1]:
            f.evidence.append(c)
            f.summary += f" {v} is a release whose -C fails and duplicates rules (fixed in {_fixed_for(v)})."
        if os_broken and not broken:
            f.evidence.append(os_broken[1])
            f.summary += f" {os_broken[0]}, which fails -C and duplicates rules (fixed in 1.8.3)."
        if broken:
            fixed = _fixed_for(broken[0][0])
            f.fix = [
                f"Use iptables {fixed} or later in whatever runs iptables -C (the host, or the "
                "writer's image), or switch the node to iptables-legacy; then remove the copies."
            ]
            f.fixed_in = [f"iptables {fixed}"]
        elif os_broken:
            f.fix = [
                "Use iptables 1.8.3 or later (Debian 10: buster-backports), or switch the node to iptables-legacy "
                "(`update-alternatives --set iptables /usr/sbin/iptables-legacy`) and reboot; then remove the copies."
            ]
            f.fixed_in = ["iptables 1.8.3"]
        else:
            f.summary += (
                " iptables releases known to do this: iptables-nft 1.8.0-1.8.2 (fixed in 1.8.3), 1.8.7 (1.8.8), "
                "1.8.9 for ip6tables and 1.8.10 (1.8.11); give the writer's `iptables --version` (host and image)."
            )
            f.fix = [
                "Find the writer (the chain names it) and its iptables version; move it to a release without the "
                "bug (1.8.3+, avoiding 1.8.7, 1.8.9 and 1.8.10; 1.8.11 is fixed), then remove the copies."
            ]
            f.fixed_in = ["iptables 1.8.3", "iptables 1.8.11"]
    else:
        assert os_broken is not None
        f = start(facts, "KP122", [], confidence=Confidence.LOW, severity=Severity.WARNING)
        f.evidence.append(os_broken[1])
        f.summary = (
            f"{os_broken[0]}: its `iptables -C` fails for rules it just added, so kubelet and kube-proxy append "
            "KUBE-FIREWALL's drop rule again on every sync (thousands of copies). Count them: "
            f"`iptables -S KUBE-FIREWALL | grep -c '{FIREWALL_COMMENT}'`."
        )
        f.fix = [
            "Use iptables 1.8.3 or later (buster-backports) or switch to iptables-legacy "
            "(`update-alternatives --set iptables /usr/sbin/iptables-legacy`)."
        ]
        f.fixed_in = ["iptables 1.8.3"]
    yield f
