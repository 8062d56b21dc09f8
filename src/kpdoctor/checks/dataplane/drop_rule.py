"""KP204, KP207: a rule or policy kube-proxy did not write drops or rejects Service traffic."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.dataplane.common import (
    CLUSTER,
    RULES,
    by_service,
    capped,
    classes,
    finding_for,
    kube_proxy_rule,
    verification_not_evaluated,
)
from kpdoctor.dataplane.results import Result
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.iptables import every_packet


def _applies(r: Result) -> bool:
    return r.kind in ("refused", "partly-refused") and any(not kube_proxy_rule(e) for e in r.refusals())


@check(
    "KP204",
    cause="iptables-drop-rule",
    title="A rule outside kube-proxy drops Service traffic",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    needs_all=CLUSTER,
    needs_all_or=[Kind.KUBECTL_DESCRIBE],
)
def iptables_drop_rule(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """A firewall rule or chain policy that kube-proxy did not write drops Service traffic.

    Symptom: a Service works from some nodes and not from this one, or only for some backends;
        kube-proxy's rules look right and its log is clean.
    Cause: another component's rule (a host firewall, firewalld or ufw through iptables, a CNI or
        security agent, a hand-written `-j DROP`) or a DROP policy on FORWARD (Docker sets one)
        matches the Service's packets before or after kube-proxy's DNAT.
    How it is detected: the Service's traffic is evaluated through every table of both iptables
        backends (in nftables mode, also every nftables table on the hook, by priority: a
        firewalld or Docker chain that runs before kube-proxy's); the packet ends in a
        DROP/REJECT rule (or a chain's DROP policy) outside the chains and tables that
        kube-proxy and kubelet own. The finding cites that rule and names its writer.
    Fix: allow the traffic in the component that owns the rule (for a FORWARD policy of DROP,
        accept traffic to and from the pod network), or remove the rule; then run
        `kpdoctor verify` again.
    References: seed 004; https://kubernetes.io/docs/reference/networking/ports-and-protocols/
    """
    ver = verified.verification
    if ver is None:
        return
    out: list[Finding] = []
    for label, rs in sorted(by_service(ver.problems(), _applies).items()):
        rules = [e.rule for r in rs for e in r.refusals() if not kube_proxy_rule(e) and e.rule is not None]
        share = max(sum(e.probability for e in r.refusals() if not kube_proxy_rule(e)) for r in rs)
        first = rules[0] if rules else None
        what = first.text if first is not None else "a rule outside kube-proxy"
        owners = [e.owner for r in rs for e in r.refusals() if not kube_proxy_rule(e) and e.owner]
        whose = f"{owners[0]}'s " if owners else ""
        where = f" (line {first.line} of {first.artifact})" if first is not None and first.line else ""
        part = "all" if share >= 0.999 else f"{share:.0%}"
        summary = f"{label}: {whose}`{what}`{where} drops {part} of the traffic from {classes(rs)}."
        f = finding_for(facts, "KP204", label, rs, summary, severity=Severity.CRITICAL)
        f.evidence = [c for c in dict.fromkeys(rules)][:3] + [c for c in f.evidence if c not in rules][:2]
        owner = owners[0] if owners else "the component that owns it"
        f.fix = [f"Allow this traffic in {owner} (the rule `{what}`), or remove that rule."]
        out.append(f)
    yield from capped(facts, "KP204", out, "dropped by rules outside kube-proxy")


@check(
    "KP207",
    cause="iptables-drop-rule",
    title="The FORWARD chain's DROP policy drops forwarded traffic",
    severity=Severity.WARNING,
    needs=[*RULES, Kind.IPTABLES_LIST],
    reads_verification=True,
)
def forward_policy_drop(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """The filter FORWARD chain's policy is DROP and, by its counter, it has dropped packets.

    Symptom: a Service (a NodePort, or a ClusterIP from a Pod) answers only when the Pod runs on
        the node that received the connection; from other nodes it times out.
    Cause: Docker (1.13 and later) sets the FORWARD policy to DROP; a firewall may too. Traffic
        kube-proxy DNATs to a Pod on another node is forwarded, and unless a rule accepts it
        (kube-proxy's KUBE-FORWARD accepts only marked or established traffic; the CNI should
        accept its Pod network), the policy drops it.
    How it is detected: the FORWARD policy and its packet counter in `iptables -L -v` (the
        "Chain FORWARD (policy DROP N packets" line) or `iptables-save -c` (`:FORWARD DROP
        [N:...]`), without the cluster's objects (with them, KP204 evaluates every Service's
        packets instead; in a mode kpdoctor does not evaluate, this check reads the policy). A
        counter above zero is packets dropped since the rules were loaded: a
        warning; a DROP policy that has dropped nothing (or without counters) is an info note.
    Fix: accept the pod network in FORWARD (`iptables -P FORWARD ACCEPT`, or `-A FORWARD -s
        POD_CIDR -j ACCEPT` and `-d POD_CIDR`), or make the CNI do so; with Docker, set it in
        DOCKER-USER or run containerd without Docker's rules.
    References: https://docs.docker.com/engine/network/packet-filtering-firewalls/;
        https://github.com/kubernetes/kubernetes/issues/39658
    """
    ver = verified.verification
    if ver is not None and ver.evaluated:
        return  # KP204 judges the evaluated packets themselves
    for rs in facts.rulesets:
        for table in rs.tables.values():
            if table.name not in ("filter", "unknown") or table.chains.get("FORWARD") != "DROP":
                continue
            packets = table.policy_packets.get("FORWARD")
            line = table.chain_lines.get("FORWARD")
            cite = Cite(rs.artifact, line, table.policy_lines.get("FORWARD", "FORWARD policy DROP"))
            if packets:
                summary = (
                    f"The FORWARD chain's policy is DROP and it has dropped {packets:,} packet(s) since the rules "
                    "were loaded: forwarded traffic no rule accepted (Service traffic DNATed to a Pod on another "
                    "node, for one). Run the listing again while reproducing: a growing counter is the drop."
                )
                f = start(facts, "KP207", [], confidence=Confidence.MEDIUM, summary=summary)
            else:
                summary = (
                    "The FORWARD chain's policy is DROP"
                    + (" (nothing dropped by it so far)" if packets == 0 else " (no counters given: -L -v shows them)")
                    + ": forwarded traffic that no rule accepts is dropped; if Services answer only from the node "
                    "running their Pod, this is why."
                )
                f = start(facts, "KP207", [], confidence=Confidence.LOW, summary=summary, severity=Severity.INFO)
            f.evidence = [cite]
            f.fix = [
                "Accept the pod network in FORWARD (`iptables -A FORWARD -s POD_CIDR -j ACCEPT` and "
                "`-d POD_CIDR`), or set the policy to ACCEPT; with Docker, use the DOCKER-USER chain.",
            ]
            yield f
            return


@check(
    "KP210",
    cause="iptables-drop-rule",
    title="A catch-all REJECT or DROP rule ends the FORWARD or INPUT chain",
    severity=Severity.WARNING,
    needs=[*RULES, Kind.IPTABLES_LIST],
    reads_verification=True,
)
def catch_all_reject(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """A rule that rejects or drops every packet sits in the filter FORWARD or INPUT chain.

    Symptom: Services answer only from the node that runs their Pod; Pods on other nodes, the
        overlay (VXLAN 8472/udp), NodePorts or the API server through the `kubernetes` Service
        time out or get "host prohibited"; kube-proxy's rules look right.
    Cause: a host firewall's final rule (`-A FORWARD -j REJECT --reject-with
        icmp-host-prohibited`, the default of CentOS/RHEL's iptables-services and of firewalld's
        older direct rules) rejects whatever the rules before it did not accept: forwarded
        Pod and Service traffic, and overlay or kubelet traffic to the node.
    How it is detected: a REJECT or DROP rule with no match in FORWARD or INPUT of the filter
        table (any dump form; a grep'd fragment counts as filter), without the cluster's
        objects (with them, KP204 evaluates every Service's packets through it instead).
    Fix: accept the cluster's traffic before it (the Pod and Service CIDRs in FORWARD; 8472/udp,
        10250/tcp, 6443/tcp and NodePorts 30000-32767 in INPUT), or remove the rule / disable
        the iptables-services firewall; persist the change where the firewall is configured.
    References: https://kubernetes.io/docs/reference/networking/ports-and-protocols/
    """
    ver = verified.verification
    if ver is not None and ver.evaluated:
        return  # KP204 judges the evaluated packets themselves
    found: list[tuple[str, str, Cite]] = []
    for rs in facts.rulesets:
        if rs.family != 4:
            continue
        for table in rs.tables.values():
            if table.name not in ("filter", "unknown"):
                continue
            for r in table.rules:
                if r.chain in ("FORWARD", "INPUT") and r.target in ("REJECT", "DROP") and every_packet(r, rs.form):
                    found.append((r.chain, r.target, Cite(rs.artifact, r.line, r.text.strip())))
    if not found:
        return
    chains = list(dict.fromkeys(c for c, _t, _c in found))
    forward = "FORWARD" in chains
    f = start(facts, "KP210", [], confidence=Confidence.MEDIUM if forward else Confidence.LOW)
    f.summary = (
        f"A rule that {found[0][1].lower()}s every packet ends {' and '.join(chains)}: "
        + (
            "forwarded traffic no rule before it accepts (Service traffic DNATed to a Pod on another node, Pod to "
            "Pod across nodes) is refused"
            if forward
            else "traffic to the node itself that no rule before it accepts (the overlay's 8472/udp, kubelet's "
            "10250, the API server) is refused"
        )
        + ". If Services answer only from the node running their Pod, this is why."
    )
    f.evidence = [c for _ch, _t, c in found[:3]]
    f.fix = [
        "Accept the cluster's traffic before it (Pod and Service CIDRs in FORWARD; 8472/udp, 10250/tcp, 6443/tcp "
        "and 30000-32767 in INPUT), or remove the rule (CentOS/RHEL: disable the iptables-services firewall); "
        "persist the change where the firewall is configured."
    ]
    yield f
