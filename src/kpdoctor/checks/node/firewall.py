"""KP311: a host firewall (ufw) drops Service and Pod traffic before kube-proxy's rules see it."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.firewall import UfwRule, UfwStatus, parse_ufw_status
from kpdoctor.parse.iptables import option

# What a Kubernetes node must accept from other nodes and from its own Pods (kubernetes.io
# ports-and-protocols, k3s requirements): (first, last, protocol, what).
NEEDED = (
    (6443, 6443, "tcp", "the API server (6443/tcp, which Pods reach through the kubernetes Service)"),
    (10250, 10250, "tcp", "the kubelet (10250/tcp)"),
    (30000, 32767, "tcp", "NodePorts (30000-32767/tcp)"),
)
CNI_INTERFACES = ("cni", "cbr", "flannel", "cali", "vxlan", "tunl", "weave", "cilium", "lxc", "kube-", "docker")


def _allows(rule: UfwRule, lo: int, hi: int, proto: str) -> bool:
    if rule.action not in ("ALLOW", "LIMIT") or rule.direction != "IN" or rule.v6:
        return False
    if rule.any_port and rule.source.startswith("Anywhere") and rule.interface is None:
        return True
    return any(a <= lo and hi <= b and p in (None, proto) for a, b, p in rule.ports) and rule.source.startswith(
        "Anywhere"
    )


def _pod_allowance(st: UfwStatus) -> list[UfwRule]:
    """Rules that let Pod traffic in whatever its port: from a private CIDR, or on a CNI interface."""
    out = []
    for r in st.rules:
        if r.action != "ALLOW" or r.v6 or not r.any_port:
            continue
        iface = r.interface or ""
        if iface.startswith(CNI_INTERFACES) or (not r.source.startswith("Anywhere") and "/" in r.source):
            out.append(r)
    return out


def _from_rules(facts: Facts) -> Iterator[Finding]:
    """ufw seen in iptables-save: its chains, INPUT policy DROP, and what ufw-user-input accepts."""
    if facts.has(Kind.HOST_FIREWALL):
        return  # `ufw status` says more (and in its own words)
    for rs in facts.rulesets:
        t = rs.tables.get("filter")
        if rs.family != 4 or t is None or "ufw-user-input" not in t.chains or t.chains.get("INPUT") != "DROP":
            continue
        accepts = [r for r in t.rules if r.chain == "ufw-user-input" and r.target == "ACCEPT"]
        ports: list[tuple[int, int, str | None]] = []
        pods = []
        for r in accepts:
            spec = option(r.args, "--dport", "--dports")
            proto = option(r.args, "-p")
            for part in (spec or "").split(","):
                lo, _, hi = part.partition(":")
                if lo.isdigit():
                    ports.append((int(lo), int(hi) if hi.isdigit() else int(lo), proto))
            if spec is None and option(r.args, "-s") is not None:
                pods.append(r)
        missing = [
            what
            for lo, hi, proto, what in NEEDED
            if not any(a <= lo and hi <= b and p in (None, proto) for a, b, p in ports)
        ]
        if not missing and pods:
            continue
        allowed = sorted({f"{a}" + (f":{b}" if b != a else "") + (f"/{p}" if p else "") for a, b, p in ports})
        f = start(
            facts,
            "KP311",
            [],
            confidence=Confidence.LOW,
            severity=Severity.WARNING,
            summary=(
                "ufw's chains are in the filter table and the INPUT policy is DROP (ufw is active and denies "
                "incoming traffic by default); ufw-user-input accepts only "
                + (", ".join(allowed[:8]) or "nothing")
                + ". "
                + ("No rule accepts " + _either(missing) + ". " if missing else "")
                + (
                    "No rule accepts the Pod or Service CIDRs: traffic kube-proxy DNATs to this node and "
                    "Pod-to-node traffic is dropped. `ufw status verbose` shows the whole policy."
                    if not pods
                    else ""
                )
            ),
        )
        pol = t.chain_lines.get("INPUT")
        f.evidence = ([Cite(rs.artifact, pol, f"{t.policy_lines.get('INPUT', ':INPUT DROP')}")] if pol else []) + [
            Cite(rs.artifact, r.line, r.text.strip()) for r in accepts[:3]
        ]
        f.ongoing = True
        f.fix = [
            "Let the cluster's traffic through ufw: `ufw allow 6443/tcp`, `ufw allow from POD-CIDR to any`, "
            "`ufw allow from SERVICE-CIDR to any`, `ufw allow 10250/tcp`, `ufw allow 30000:32767/tcp` and the "
            "CNI's overlay port; or run `ufw disable` on Kubernetes nodes.",
        ]
        yield f
        return


def _either(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


@check(
    "KP311",
    cause="iptables-drop-rule",
    title="A host firewall (ufw) drops Service and Pod traffic",
    severity=Severity.CRITICAL,
    needs=[Kind.HOST_FIREWALL, Kind.IPTABLES_SAVE],
)
def host_firewall(facts: Facts) -> Iterator[Finding]:
    """ufw is active and lets in only the ports it lists, so Pods, NodePorts and other nodes are cut off.

    Symptom: Pods cannot reach the API server through the `kubernetes` Service (installs hang,
        CoreDNS and controllers time out), NodePorts time out, Pods on other nodes are
        unreachable; kube-proxy's rules look right.
    Cause: ufw's chains (ufw-before-input, ufw-user-input...) are evaluated before the traffic
        reaches the Service's backend, and its default policy denies incoming (and routed)
        traffic that no rule allows. A Service whose endpoint is on the node itself (the API
        server at NODE-IP:6443, hostNetwork Pods) is DNATed to the node and then dropped in
        INPUT; NodePorts and the overlay's packets (VXLAN 8472/udp) likewise.
    How it is detected: ufw's own chains in iptables-save (`ufw-user-input` in the filter
        table with the INPUT policy DROP: ufw is active and denies incoming by default; its
        ACCEPT rules are the ports it allows), or `ufw status [verbose|numbered]` output: Status: active, the rules, and
        (verbose) the default policies. The finding lists which of the API server (6443/tcp),
        the kubelet (10250/tcp) and the NodePort range (30000-32767/tcp) no rule allows, and
        whether any rule lets in the Pod and Service CIDRs or the CNI's interfaces. Critical
        with medium confidence when verbose shows `deny (incoming)` or `reject (incoming)` and
        nothing lets Pod traffic in; a warning with low confidence when the default policy is
        not shown (plain `ufw status`; ufw's own default is deny incoming). Nothing when ufw
        is inactive, or its incoming policy is allow.
    Fix: allow the cluster's traffic before kube-proxy's rules: `ufw allow 6443/tcp`,
        `ufw allow from POD-CIDR to any`, `ufw allow from SERVICE-CIDR to any` (k3s defaults
        10.42.0.0/16 and 10.43.0.0/16), `ufw allow 10250/tcp`, `ufw allow 30000:32767/tcp`
        (and the CNI's overlay port, e.g. 8472/udp for flannel VXLAN); or disable ufw on
        Kubernetes nodes (`ufw disable`), as k3s recommends.
    References: https://docs.k3s.io/installation/requirements#operating-systems;
        https://kubernetes.io/docs/reference/networking/ports-and-protocols/;
        https://github.com/k3s-io/k3s/issues/1280
    """
    yield from _from_rules(facts)
    for a in facts.of(Kind.HOST_FIREWALL):
        st = parse_ufw_status(a.text, a.first_line)
        if st is None or not st.active:
            continue
        incoming = st.defaults.get("incoming")
        if incoming == "allow":
            continue
        missing = [what for lo, hi, proto, what in NEEDED if not any(_allows(r, lo, hi, proto) for r in st.rules)]
        pods = _pod_allowance(st)
        if not missing and pods:
            continue
        allowed = list(
            dict.fromkeys(
                r.to + ("" if r.source.startswith("Anywhere") else f" from {r.source}")
                for r in st.rules
                if r.action in ("ALLOW", "LIMIT") and not r.v6
            )
        )
        shown = incoming is not None
        severity = Severity.CRITICAL if shown and not pods else Severity.WARNING
        confidence = Confidence.MEDIUM if shown else Confidence.LOW
        policy = (
            f"its default incoming policy is {incoming}"
            + (f", routed {st.defaults['routed']}" if "routed" in st.defaults else "")
            if shown
            else "its default policy is not shown (`ufw status verbose` shows it; ufw's default is deny incoming)"
        )
        summary = (
            f"ufw is active and {policy}; its rules allow only "
            + (", ".join(allowed[:8]) + (f" and {len(allowed) - 8} more" if len(allowed) > 8 else "") or "nothing")
            + ". "
            + ("No rule allows " + _either(missing) + ". " if missing else "")
            + (
                "No rule lets in traffic from the Pod and Service CIDRs or the CNI's interfaces: traffic that "
                "kube-proxy DNATs to this node (a Service whose endpoint is the node, hostNetwork Pods) and "
                "Pod-to-node traffic is dropped before it reaches them."
                if not pods
                else "Pod traffic is allowed (" + "; ".join(" ".join(r.text.split()) for r in pods[:2]) + ")."
            )
        )
        f = start(facts, "KP311", [], confidence=confidence, severity=severity, summary=summary)
        f.evidence = [Cite(a.name, st.line, st.text)]
        if st.default_line is not None:
            f.evidence.append(Cite(a.name, st.default_line[0], st.default_line[1]))
        f.evidence += [Cite(a.name, r.line, r.text) for r in st.rules if not r.v6][:4]
        f.ongoing = True
        f.fix = [
            "Let the cluster's traffic through ufw: `ufw allow 6443/tcp`, `ufw allow from POD-CIDR to any`, "
            "`ufw allow from SERVICE-CIDR to any` (k3s defaults 10.42.0.0/16 and 10.43.0.0/16), "
            "`ufw allow 10250/tcp`, `ufw allow 30000:32767/tcp` and the CNI's overlay port (8472/udp for "
            "flannel VXLAN); or run `ufw disable` on Kubernetes nodes.",
        ]
        yield f
        return
