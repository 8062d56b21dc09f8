"""KP308-KP310: kernel settings Service forwarding depends on (ip_forward, br_netfilter, route_localnet)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.facts import Facts
from kpdoctor.facts.node import pod_facing
from kpdoctor.knowledge import check, messages, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import tcpdump, xtrace
from kpdoctor.parse.iptables import Rule, Ruleset, option
from kpdoctor.parse.tcpdump import CapturedPacket

BRIDGE_SYSCTLS = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables")
LOCALNET_RULE = "block incoming localnet connections"  # kube-proxy's guard when it enables route_localnet


def _families_in_use(facts: Facts) -> set[int]:
    """IP families the cluster's Services (or kube-proxy's rules) use; IPv4 when nothing says."""
    fams: set[int] = set()
    for svc in facts.cluster.services:
        fams.update(6 if ":" in ip else 4 for ip in svc.cluster_ips)
    fams |= {rs.family for rs in facts.rulesets if rs.kube_rule_count()}
    return fams or {4}


def _chains_from(table_rules: Iterable[Rule], start: str) -> set[str]:
    """The chains a packet entering built-in chain ``start`` can reach through jumps and gotos."""
    jumps: dict[str, set[str]] = {}
    for r in table_rules:
        if (t := r.target) is not None:
            jumps.setdefault(r.chain, set()).add(t)
    seen, todo = {start}, [start]
    while todo:
        for t in jumps.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def loopback_dnats(rs: Ruleset) -> list[tuple[Rule, bool]]:
    """nat rules that DNAT to a 127.0.0.0/8 address, each with whether a packet arriving from
    another interface (PREROUTING: Pods, containers, other hosts) reaches it. The kernel drops
    such a packet after the rewrite unless route_localnet is 1."""
    nat = rs.tables.get("nat")
    if nat is None or rs.family != 4:
        return []
    hits = [
        r
        for r in nat.containing("127.")  # (the text first: tokens only for the few rules that name the range)
        if r.target == "DNAT" and (option(r.args, "--to-destination") or "").startswith("127.")
    ]
    if not hits:
        return []
    arriving = _chains_from(nat.rules, "PREROUTING")
    return [(r, r.chain in arriving) for r in hits]


def _kubernetes_evidence(facts: Facts) -> bool:
    """Does anything besides the sysctls show a Kubernetes node (so forwarding must be on)?"""
    if any(
        facts.has(k) for k in (Kind.KUBE_PROXY_LOG, Kind.KUBE_PROXY_CONFIG, Kind.KUBE_PROXY_CMDLINE, Kind.K8S_OBJECTS)
    ):
        return True
    if any(rs.kube_rule_count() for rs in facts.rulesets):
        return True
    cni = ("cali", "flannel", "cni", "cilium", "weave", "kube-", "vxlan.calico", "tunl0", "lxc")
    return any(ln.name.startswith(cni) for _, ln in facts.node_state.links)


@check(
    "KP308",
    cause="ip-forward-disabled",
    title="IP forwarding is off: Service traffic to Pods is not forwarded",
    severity=Severity.CRITICAL,
    needs=[Kind.SYSCTL],
)
def ip_forward(facts: Facts) -> Iterator[Finding]:
    """The node does not forward packets, so DNAT'ed Service traffic never reaches Pods behind other interfaces.

    Symptom: every Service and Pod-to-Pod connection through this node times out, while
        Pods answer when reached from inside their own network namespace; often after a reboot
        or an OS update that reset sysctls (or a security baseline that disables forwarding).
    Cause: net.ipv4.ip_forward (or, for IPv6 Services, net.ipv6.conf.all.forwarding) is 0:
        kube-proxy rewrites the destination to a Pod, and the kernel then refuses to route the
        packet out of another interface.
    How it is detected: the sysctl values; IPv6 forwarding only matters when the cluster's
        Services or the node's KUBE-* rules use IPv6. Critical when the evidence shows a
        Kubernetes node (kube-proxy artifacts, cluster objects, KUBE-* rules, CNI interfaces);
        a warning with medium confidence from the sysctls alone.
    Fix: `sysctl -w net.ipv4.ip_forward=1` (and `net.ipv6.conf.all.forwarding=1` for
        dual-stack), persisted in /etc/sysctl.d/; find what turned it off (a hardening profile,
        a network manager, a sysctl file that loads after the CNI's).
    References: https://kubernetes.io/docs/setup/production-environment/container-runtimes/#prerequisite-ipv4-forwarding-optional
    """
    node = facts.node_state
    off: list[tuple[str, Cite]] = []
    fams = _families_in_use(facts)
    v4 = node.setting("net.ipv4.ip_forward")
    if 4 in fams and v4 is not None and v4.int() == 0:
        off.append(("net.ipv4.ip_forward", v4.cite))
    v6 = node.setting("net.ipv6.conf.all.forwarding")
    if 6 in fams and v6 is not None and v6.int() == 0:
        off.append(("net.ipv6.conf.all.forwarding", v6.cite))
    if not off:
        return
    kube = _kubernetes_evidence(facts)
    f = start(
        facts,
        "KP308",
        [],
        confidence=Confidence.HIGH if kube else Confidence.MEDIUM,
        severity=Severity.CRITICAL if kube else Severity.WARNING,
        summary=" and ".join(n for n, _ in off)
        + " = 0: the node does not forward Service traffic to Pods."
        + ("" if kube else " (Nothing else in the evidence shows this machine is a Kubernetes node.)"),
    )
    f.evidence = [c for _, c in off]
    f.ongoing = True
    f.fix = [
        "sysctl -w " + " ".join(f"{n}=1" for n, _ in off) + "; persist in /etc/sysctl.d/99-kubernetes.conf "
        "and find what reset it (hardening profile, network manager, a later sysctl file)."
    ]
    yield f


# The forwarding settings of a network namespace, by the family they forward
FORWARDING = {"net.ipv4.ip_forward": 4, "net.ipv4.conf.all.forwarding": 4, "net.ipv6.conf.all.forwarding": 6}
# k3s' ServiceLB names its DaemonSets (and so their Pods) so: svclb-<Service>[-<hash>]
SERVICELB_POD = "svclb-"


@check(
    "KP320",
    cause="ip-forward-disabled",
    title="Forwarding is off in a Pod's network namespace: its entry script stops (k3s ServiceLB's svclb Pods)",
    severity=Severity.CRITICAL,
    needs=[Kind.SHELL_TRACE],
)
def namespace_forwarding(facts: Facts) -> Iterator[Finding]:
    """A Pod that forwards a Service's traffic itself read forwarding as 0 in its own network namespace.

    Symptom: a LoadBalancer Service of a k3s cluster does not answer on the node's address (or
        only on IPv4 of a dual-stack one); the node's svclb-* Pods restart (CrashLoopBackOff),
        their log is a shell trace ending in `exit 1`.
    Cause: k3s' ServiceLB runs klipper-lb in a Pod per node and Service, an `sh -ex` script that
        DNATs the node's port to the Service; klipper-lb v0.3.1 to v0.4.8 exit 1 when the
        namespace's forwarding setting of a Service address's family is not 1 (v0.4.9, July
        2024, skips that family instead, and its port is then not forwarded either). A new network
        namespace copies the host's IPv4 settings but starts IPv6 ones at the kernel's defaults
        (forwarding 0) unless net.core.devconf_inherit_init_net (kernel 5.1+) says otherwise, so
        IPv6 forwarding is 0 in the Pod even where the host forwards; IPv4 at 0 means the host's
        is 0.
    How it is detected: the script's trace (its Pod's log): the shell prints the command that
        reads the setting (`cat /proc/sys/net/ipv6/conf/all/forwarding`) and then the test it
        fed, with the value in place (`[ 0 != 1 ]`), then `exit 1` when the script stopped on it.
        High confidence when the script exited right after; medium when it went on.
    Fix: IPv6: k3s v1.22.4+k3s1 and v1.21.7+k3s1 allow `net.ipv6.conf.all.forwarding` in kubelet
        and set it to 1 in the svclb Pods of dual-stack clusters (k3s PR #4437); elsewhere allow
        the sysctl in kubelet (`--allowed-unsafe-sysctls=net.ipv6.conf.all.forwarding`) and set it
        in the Pod's securityContext, or on kernels 5.1+ set net.core.devconf_inherit_init_net=1
        so that new namespaces inherit the host's value. IPv4: enable net.ipv4.ip_forward on the
        node, then delete the Pods so that they start again.
    References: https://github.com/k3s-io/k3s/pull/4437
        https://github.com/k3s-io/klipper-lb/commit/525ecd2
        https://docs.kernel.org/networking/ip-sysctl.html
    """
    found: dict[tuple[str, str], Finding] = {}  # by setting and Pod: its containers share the namespace
    for a in facts.of(Kind.SHELL_TRACE):
        for s in xtrace.settings_read(xtrace.parse_trace(a.read_text(), a.first_line)):
            family = FORWARDING.get(s.name)
            if family is None or s.value != "0":
                continue
            pod = _pod_of(a.attrs.get("command", ""), a.attrs.get("log_of", ""))
            cites = [Cite(a.name, s.read.line, s.read.text), Cite(a.name, s.test.line, s.test.text)]
            stopped = s.exit_status not in (None, 0)
            if stopped and s.exit is not None:
                cites.append(Cite(a.name, s.exit.line, s.exit.text))
            if (s.name, pod) in found:
                found[(s.name, pod)].evidence.extend(cites)
                continue
            found[(s.name, pod)] = _namespace_finding(facts, s, family, pod, stopped, cites)
    yield from found.values()


def _pod_of(command: str, log_of: str) -> str:
    """The Pod whose log a command printed: k3s ServiceLB's by its name, else whose log it is."""
    return next((w for w in command.split() if w.startswith(SERVICELB_POD)), log_of)


def _namespace_finding(
    facts: Facts, s: xtrace.TracedSetting, family: int, pod: str, stopped: bool, cites: list[Cite]
) -> Finding:
    servicelb = pod.startswith(SERVICELB_POD)
    f = start(
        facts,
        "KP320",
        [],
        confidence=Confidence.HIGH if stopped else Confidence.MEDIUM,
        severity=Severity.CRITICAL if stopped else Severity.WARNING,
    )
    who = f"Pod {pod}" if pod else "the Pod whose log this is"
    what = "k3s ServiceLB's klipper-lb script" if servicelb else "its entry script"
    then = (
        f"and exited ({s.exit_status}) before writing the DNAT of the Service's IPv{family} address"
        if stopped
        else f"and went on: the Service's IPv{family} traffic it forwards is not forwarded"
    )
    why = (
        " A new network namespace starts IPv6 settings at the kernel's defaults (forwarding 0), not the host's."
        if family == 6
        else " A new network namespace copies the host's IPv4 settings: the node's own is 0."
    )
    f.summary = f"{s.name} = 0 in the network namespace of {who}: {what} read it {then}.{why}"
    f.evidence = cites
    f.ongoing = True
    if family == 6:
        f.fixed_in = ["k3s v1.22.4+k3s1", "k3s v1.21.7+k3s1"] if servicelb else []
        f.fix = [
            "k3s v1.22.4+k3s1 / v1.21.7+k3s1 and later set net.ipv6.conf.all.forwarding=1 in the svclb Pods of "
            "dual-stack clusters (k3s PR #4437): upgrade."
            if servicelb
            else "Set net.ipv6.conf.all.forwarding=1 in the Pod's securityContext.sysctls.",
            "Otherwise allow the sysctl in kubelet (--allowed-unsafe-sysctls=net.ipv6.conf.all.forwarding) and "
            "set it in the Pod's securityContext, or on kernel 5.1+ set net.core.devconf_inherit_init_net=1 "
            "on the node so that new namespaces inherit its forwarding; then delete the Pods.",
        ]
    else:
        f.fix = [
            "sysctl -w net.ipv4.ip_forward=1 on the node (persist it in /etc/sysctl.d/), then delete the Pods so "
            "that their namespaces copy it."
        ]
    return f


# A resolver that got its answer from another address than the one it asked (dig/nslookup/host):
# for a query to a Service IP, the reply from the Pod was not un-DNATed on its way back. Groups:
# the address the reply came from, its port, the address asked, its port.
UNEXPECTED_SOURCE = signature(
    "dns-reply-unexpected-source",
    "reply from unexpected source",
    r"reply from unexpected source: ([0-9A-Fa-f.:]+)#([0-9]+), expected ([0-9A-Fa-f.:]+)#([0-9]+)",
)
# The sysctl's file exists only while br_netfilter is loaded: any program that found it missing
# says the module is not loaded: Go's stat error (flannel's "Failed to check br_netfilter: stat
# ..."), procps' sysctl ("cannot stat ...: No such file or directory"), kubeadm's preflight
# ("... does not exist").
BRIDGE_SYSCTL_MISSING = signature(
    "bridge-sysctl-missing",
    "bridge-nf-call-ip",
    r"/proc/sys/net/bridge/bridge-nf-call-ip6?tables(: *[Nn]o such file or directory| does not exist)",
)
# kube-proxy's own note at start when it cannot read the sysctl (br_netfilter not loaded) or it is 0
BR_NETFILTER_NOTE = messages(
    "br-netfilter-missing", "kube-proxy/iptables-missing-br-netfilter", "kube-proxy/iptables-missing-br-netfilter-old"
)


_FOUND_MISSING = "a program found no /proc/sys/net/bridge/bridge-nf-call-iptables"


def _one_subnet(p: CapturedPacket) -> bool:
    """Are a packet's two addresses in one /24 (IPv4) or /64 (IPv6): a node's Pod range?"""
    try:
        a, b = ipaddress.ip_address(p.src), ipaddress.ip_address(p.dst)
    except ValueError:
        return False
    host_bits = 8 if a.version == 4 else 64
    return a.version == b.version and int(a) >> host_bits == int(b) >> host_bits


def untranslated_replies(packets: list[tuple[CapturedPacket, Cite]]) -> list[tuple[str, list[Cite]]]:
    """Replies a capture shows arriving from another address than the one their client sent to,
    with no translated reply beside them: what a client gets when its request was DNATed on the
    way in and the reply skipped the reverse translation on the way back. Each: what it shows,
    and the lines that show it.

    TCP: the client's first SYN went to V (the DNATed copy a capture on every interface also
    shows comes after it); a SYN-ACK acknowledging that SYN came from X, not V; the client reset
    it (RST to X with the sequence number the SYN-ACK acknowledged: its stack had no connection to
    X); and no SYN-ACK from V reached it. DNS: a query went to V, its answer (the same id) came
    from X and none from V. Only where client and X share a subnet (/24, /64), as two Pods of one
    node's bridge do: across subnets the same capture says the reply was not masqueraded (it
    went back past the node that translated it), another cause."""
    first: dict[tuple[str, int | None, str], tuple[CapturedPacket, Cite]] = {}  # (client, port, proto)
    answered: set[tuple[str, int | None, str, int | None, str | None, int | None]] = set()
    resets: dict[tuple[str, int | None, str, int | None], list[tuple[CapturedPacket, Cite]]] = {}  # by 4-tuple
    for p, c in packets:
        key = (p.src, p.sport, p.proto)
        if (p.proto == "tcp" and p.flags == "S") or (p.proto == "udp" and p.dns_id is not None and p.dport == 53):
            first.setdefault(key, (p, c))
        if (p.proto == "tcp" and p.flags == "S.") or (p.proto == "udp" and p.dns_id is not None and p.sport == 53):
            answered.add((p.dst, p.dport, p.proto, p.dns_id if p.proto == "udp" else None, p.src, p.sport))
        if p.proto == "tcp" and (p.flags or "").startswith("R"):
            resets.setdefault((p.src, p.sport, p.dst, p.dport), []).append((p, c))
    out: list[tuple[str, list[Cite]]] = []
    for p, c in packets:
        tcp = p.proto == "tcp" and p.flags == "S."
        dns = p.proto == "udp" and p.dns_id is not None and p.sport == 53
        if not (tcp or dns) or (p.dst, p.dport, p.proto) not in first:
            continue
        req, req_cite = first[(p.dst, p.dport, p.proto)]
        if (req.dst, req.dport) == (p.src, p.sport) or (dns and req.dns_id != p.dns_id) or not _one_subnet(p):
            continue
        if tcp and req.seq is not None and p.ack is not None and p.ack != req.seq + 1:
            continue  # not the reply to that SYN
        translated = (p.dst, p.dport, p.proto, p.dns_id if dns else None, req.dst, req.dport)
        if translated in answered:
            continue  # the translated reply is there too: a capture on both sides of the NAT
        if tcp:
            reset = next(
                (
                    (r, rc)
                    for r, rc in resets.get((p.dst, p.dport, p.src, p.sport), [])
                    if p.ack is None or r.seq is None or r.seq == p.ack
                ),
                None,
            )
            if reset is None:
                continue
            said = (
                f"a connection to {req.destination} was answered from {p.source} (its SYN-ACK) and the client "
                f"reset it: the reply skipped the Service NAT on its way back"
            )
            out.append((said, [req_cite, c, reset[1]]))
        else:
            said = (
                f"a DNS query to {req.destination} was answered from {p.source} (the same id, {p.dns_id}), and no "
                f"answer came from {req.destination}: the reply skipped the Service NAT on its way back"
            )
            out.append((said, [req_cite, c]))
    return out


def _bridge(facts: Facts) -> tuple[bool | None, list[Cite], str]:
    """Are Pods attached to a Linux bridge: True with the lines that show it, False when the
    links are given and no Pod interface has a bridge master, None when no links are given."""
    links = facts.node_state.links
    if not links:
        return None, [], ""
    names = {ln.name for _, ln in links}
    bridged = [(a, ln) for a, ln in links if ln.master and ln.master in names and pod_facing(ln)]
    if not bridged:
        return False, [], ""
    bridge = bridged[0][1].master
    cites = [Cite(a.name, ln.line, ln.text) for a, ln in bridged[:1]]
    cites += [Cite(a.name, ln.line, ln.text) for a, ln in links if ln.name == bridge][:1]
    return True, cites, f"{len(bridged)} Pod interface(s) are attached to bridge {bridge}, and "


@check(
    "KP309",
    cause="bridge-netfilter-disabled",
    title="Bridged Pod traffic bypasses iptables (br_netfilter off)",
    severity=Severity.CRITICAL,
    needs=[Kind.SYSCTL, Kind.IP_LINK, Kind.KUBE_PROXY_LOG, Kind.PACKET_CAPTURE],
)
def bridge_netfilter(facts: Facts) -> Iterator[Finding]:
    """Pods attached to a Linux bridge reach Services without passing kube-proxy's rules.

    Symptom: on a bridged CNI (bridge plugin, flannel's cni0, kubenet's cbr0, docker0), Pods
        cannot reach ClusterIPs of Pods on the same node, or replies come from the wrong
        address and are dropped: DNS clients print `;; reply from unexpected source:
        POD-IP#53, expected SERVICE-IP#53`, and a capture shows the SYN-ACK of a connection to
        the Service coming from the Pod's own address, which the client resets, while other
        nodes work.
    Cause: traffic between two ports of one bridge is switched, not routed; iptables sees it
        only when br_netfilter is loaded and net.bridge.bridge-nf-call-iptables=1. Without it
        the DNAT (and the return path's un-DNAT) is skipped.
    How it is detected: net.bridge.bridge-nf-call-iptables = 0 in sysctl output, or written
        by a command in a transcript (`echo 0 > /proc/sys/net/bridge/bridge-nf-call-iptables`,
        `sysctl -w`); a bridge device with Pod veths attached (`ip -d link`: master); the DNS
        symptom above, or a tcpdump capture of it (a reply from another address than the
        request went to, refused by the client, with no translated reply beside it:
        :func:`untranslated_replies`); kube-proxy's "missing br-netfilter module or unset sysctl" note; any
        program's error that the sysctl's file does not exist (flannel's "Failed to check
        br_netfilter: stat ...", sysctl's "cannot stat", kubeadm's preflight: the file exists
        only while br_netfilter is loaded); no
        net.bridge.* key in a complete listing (`sysctl -a`: br_netfilter neither loaded nor
        built in). A key missing from a few keys asked by name or a grep is unknown, never off.
        The value 0 is critical with a bridge or the symptom, a warning with medium confidence
        when whether Pods sit on a bridge is unknown (routed CNIs such as Calico are
        unaffected); the symptom alone is a warning with medium confidence; no net.bridge.*
        key in a complete listing, or the file found missing, on a bridged node is a warning;
        the file found missing with the links not given is a suspected cause (info, low). Nothing
        when the links show no bridge, or the value is 1.
    Fix: `modprobe br_netfilter` (persist in /etc/modules-load.d/k8s.conf) and
        `sysctl -w net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1`.
    References: https://kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/network-plugins/#network-plugin-requirements;
        https://kubernetes.io/docs/setup/production-environment/container-runtimes/#forwarding-ipv4-and-letting-iptables-see-bridged-traffic;
        https://github.com/kubernetes/kubernetes/issues/33798
    """
    node = facts.node_state
    bridged, bridge_cites, lead = _bridge(facts)
    if bridged is False:
        return  # Pods are routed, not bridged: bridge-nf-call-iptables does not matter
    setting = node.setting(BRIDGE_SYSCTLS[0])
    if setting is not None and setting.int() != 0:
        return
    symptom = [
        h
        for h in facts.log.hits(UNEXPECTED_SOURCE.id)
        if len(h.groups) > 2 and h.groups[0] and h.groups[2] and h.groups[0] != h.groups[2]
    ]
    captured = untranslated_replies(facts.records(tcpdump.SHAPE))
    note = facts.log.hits(*BR_NETFILTER_NOTE.ids)
    missing = facts.log.hits(BRIDGE_SYSCTL_MISSING.id)  # br_netfilter not loaded, as a program found
    note = missing + [h for h in note if h not in missing]
    off = setting is not None  # the value is 0 here
    # no net.bridge.* key proves br_netfilter inactive only in a complete listing (sysctl -a): a
    # few keys asked by name, or a grep, say nothing about the keys they leave out
    absent = node.absent("net.bridge.") if setting is None and "br_netfilter" not in facts.modules_seen else None
    unloaded = absent is not None and bridged is True
    if not (off or symptom or captured or unloaded or note):
        return
    h0 = symptom[0] if symptom else None
    saw = (
        f"a DNS reply came from {h0.groups[0]} while the query went to {h0.groups[2]} (the reply skipped "
        "the Service NAT on its way back)"
        if h0 is not None
        else captured[0][0]
        if captured
        else ""
    )
    seen = bool(symptom or captured)  # the symptom, in a client's output or a capture
    bypass = ": bridged Pod-to-Service traffic bypasses kube-proxy's rules."
    if off and (bridged or seen):
        severity, confidence = Severity.CRITICAL, Confidence.HIGH
        summary = lead + f"{BRIDGE_SYSCTLS[0]} = 0" + (" and " + saw if saw else "") + bypass
    elif off:
        severity, confidence = Severity.WARNING, Confidence.MEDIUM
        summary = (
            f"{BRIDGE_SYSCTLS[0]} = 0 (br_netfilter is loaded, but bridged traffic skips iptables): if this "
            "node's Pods sit on a Linux bridge (bridge plugin, flannel cni0, kubenet cbr0), their Service "
            "traffic bypasses kube-proxy's rules. Whether they do is not in the evidence: give `ip -d link` "
            "(routed CNIs such as Calico are unaffected)."
        )
    elif seen:
        severity, confidence = Severity.WARNING, Confidence.MEDIUM
        summary = (
            saw[0].upper() + saw[1:] + ". The usual cause is a bridged CNI without br_netfilter, or with "
            "bridge-nf-call-iptables = 0: confirm with `sysctl net.bridge.bridge-nf-call-iptables` and "
            "`lsmod | grep br_netfilter`."
        )
    elif unloaded:
        severity, confidence = Severity.WARNING, Confidence.MEDIUM
        summary = lead + "a complete sysctl listing has no net.bridge.* setting (br_netfilter not loaded)" + bypass
    elif bridged and missing:
        severity, confidence = Severity.WARNING, Confidence.MEDIUM
        summary = lead + f"{_FOUND_MISSING} (br_netfilter not loaded)" + bypass
    elif bridged:
        severity, confidence = Severity.WARNING, Confidence.MEDIUM
        summary = lead + "kube-proxy says br_netfilter is missing or bridge-nf-call-iptables unset" + bypass
    elif missing:
        severity, confidence = Severity.INFO, Confidence.LOW
        summary = (
            f"{_FOUND_MISSING[0].upper() + _FOUND_MISSING[1:]}: br_netfilter is not loaded, so traffic between "
            "two Pods on one Linux bridge (flannel's cni0, the bridge plugin, kubenet's cbr0) is switched past "
            "iptables and their Service traffic bypasses kube-proxy's rules (routed CNIs such as Calico are "
            "unaffected): give `ip -d link`."
        )
    else:
        severity, confidence = Severity.INFO, Confidence.LOW
        summary = (
            "kube-proxy says br_netfilter is missing or bridge-nf-call-iptables unset. That matters only when "
            "Pods sit on a Linux bridge (then their Service traffic bypasses kube-proxy's rules): give "
            "`ip -d link` and `sysctl net.bridge.bridge-nf-call-iptables`."
        )
    f = start(
        facts,
        "KP309",
        symptom[:1] + (note[:1] if not symptom else []),
        confidence=confidence,
        severity=severity,
        summary=summary,
    )
    f.evidence = ([setting.cite] if setting else [absent] if unloaded and absent else []) + bridge_cites + f.evidence
    if captured and not symptom:
        f.evidence += captured[0][1]
    f.ongoing = True if off or seen else None
    if missing and not (off or seen or bridged):
        suspect(
            f,
            "br_netfilter is not loaded; whether this node's Pods sit on a Linux bridge was not given",
            ["ip -d link", "lsmod | grep br_netfilter"],
            confidence=f.confidence,
        )
    if seen and not off:
        suspect(
            f,
            "the symptom of a bridge that skips iptables; the bridge settings were not given",
            ["sysctl net.bridge.bridge-nf-call-iptables", "lsmod | grep br_netfilter", "ip -d link"],
            confidence=f.confidence,
        )
    f.fix = [
        "modprobe br_netfilter (persist in /etc/modules-load.d/k8s.conf) and sysctl -w "
        "net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 (persist in /etc/sysctl.d/)."
    ]
    yield f


@check(
    "KP310",
    cause="route-localnet-disabled",
    title="Traffic DNATed to a loopback address is dropped: route_localnet is 0",
    severity=Severity.WARNING,
    needs=[Kind.SYSCTL],
)
def route_localnet(facts: Facts) -> Iterator[Finding]:
    """`curl localhost:<NodePort>` fails on the node although kube-proxy serves NodePorts on localhost.

    Symptom: NodePorts answer on the node's address but not on 127.0.0.1; tools and agents
        on the node that use localhost:NodePort time out.
    Cause: kube-proxy in iptables mode (with iptables.localhostNodePorts, the default, and
        nodePortAddresses unset or including 127.0.0.0/8) DNATs localhost NodePort traffic to
        Pods, which the kernel only routes when net.ipv4.conf.all.route_localnet=1. kube-proxy
        sets it at start; something reset it afterwards.
        The same holds for any DNAT to a loopback address: Docker's embedded DNS on a
        user-defined network (127.0.0.11, the DNS of kind nodes) is reached that way, and
        packets from Pods are dropped after the rewrite when route_localnet is 0 (kube-proxy's
        iptables mode sets it, its IPVS mode does not).
    How it is detected: route_localnet = 0 in the sysctl output while kube-proxy's guard rule
        ("block incoming localnet connections") is in the iptables-save output, or kube-proxy
        runs in iptables mode with localhost NodePorts enabled and NodePort Services exist, or
        a nat rule DNATs to a 127.0.0.0/8 address: a warning when packets arriving from
        another interface reach it (PREROUTING), low confidence when only the host's own
        traffic does (OUTPUT: the same rules copied into a node's or Pod's namespace break
        there).
    Fix: `sysctl -w net.ipv4.conf.all.route_localnet=1` (kube-proxy sets it again on restart),
        and find what resets it; or, if localhost NodePorts are not wanted, set
        `iptables.localhostNodePorts: false` (1.26+) / nodePortAddresses without 127.0.0.1.
    References: https://github.com/kubernetes/kubernetes/pull/109942;
        https://kubernetes.io/docs/reference/config-api/kube-proxy-config.v1alpha1/;
        https://github.com/kubernetes-sigs/kind/issues/2326
    """
    node = facts.node_state
    s = node.setting("net.ipv4.conf.all.route_localnet")
    if s is None or s.int() != 0:
        return
    guard = [
        Cite(rs.artifact, r.line, r.text.strip())
        for rs in facts.rulesets
        for r in (rs.tables["filter"].rules if "filter" in rs.tables else [])
        if LOCALNET_RULE in r.text
    ]
    why = ""
    if guard:
        why = "kube-proxy's guard rule for localhost NodePorts is installed"
    else:
        mode = facts.running_mode.claimed
        lhnp = facts.kp_config.setting("iptables.localhostNodePorts")
        npa = facts.kp_config.setting("nodePortAddresses")
        addrs = str(npa.value or "").strip("[] ")
        npa_ok = not addrs or "127." in addrs or "0.0.0.0/0" in addrs
        nodeports = any(svc.node_ports for svc in facts.cluster.services)
        if mode is not None and mode[0] == "iptables" and str(lhnp.value).lower() != "false" and npa_ok and nodeports:
            why = "kube-proxy runs in iptables mode with localhost NodePorts enabled and NodePort Services exist"
    if why:
        f = start(
            facts,
            "KP310",
            [],
            confidence=Confidence.HIGH if guard else Confidence.MEDIUM,
            summary=f"net.ipv4.conf.all.route_localnet = 0 although {why}: localhost:NodePort connections fail.",
        )
        f.confidence_reason = "route_localnet = 0 with " + (
            "kube-proxy's guard rule in the rules" if guard else "kube-proxy's mode and settings that need it"
        )
        f.evidence = [s.cite, *guard[:1]]
        f.fix = [
            "sysctl -w net.ipv4.conf.all.route_localnet=1 (kube-proxy sets it at start) and find what resets it; "
            "or disable localhost NodePorts (iptables.localhostNodePorts: false, 1.26+)."
        ]
        yield f
        return
    dnats = [(rs, r, arriving) for rs in facts.rulesets for r, arriving in loopback_dnats(rs)]
    if not dnats:
        return
    arriving = [d for d in dnats if d[2]]
    rs, rule, from_outside = (arriving or dnats)[0]
    to = option(rule.args, "--to-destination")
    f = start(
        facts,
        "KP310",
        [],
        confidence=Confidence.MEDIUM if from_outside else Confidence.LOW,
        severity=None if from_outside else Severity.INFO,
    )
    if from_outside:
        f.summary = (
            f"net.ipv4.conf.all.route_localnet = 0 and a nat rule DNATs packets arriving from other interfaces to "
            f"the loopback address {to}: the kernel drops them after the rewrite, so Pods and containers "
            "get no answer from it."
        )
        f.confidence_reason = "route_localnet = 0 with a DNAT to a loopback address reached from PREROUTING"
    else:
        f.summary = (
            f"net.ipv4.conf.all.route_localnet = 0 and a nat rule DNATs to the loopback address {to} (here only "
            "for the host's own traffic): wherever these rules send traffic from Pods or containers to it (a "
            "kind node's copy of Docker's DNS rules), the kernel drops it after the rewrite."
        )
        f.confidence_reason = "route_localnet = 0 with a DNAT to a loopback address reached only from OUTPUT"
    f.evidence = [s.cite, Cite(rs.artifact, rule.line, rule.text.strip())]
    f.fix = [
        "sysctl -w net.ipv4.conf.all.route_localnet=1 where the rewritten packets arrive (kube-proxy's iptables "
        "mode sets it; in IPVS or nftables mode set it yourself, persisted in /etc/sysctl.d/).",
    ]
    yield f
