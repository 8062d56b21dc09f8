"""KP316: a kernel checksum bug drops NATed VXLAN packets: Service traffic across nodes waits 1-63 s or fails."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect, version_rows
from kpdoctor.checks.logged import messages_naming, start_logged
from kpdoctor.checks.node.common import read_counters
from kpdoctor.facts import Facts
from kpdoctor.facts.log import captures
from kpdoctor.knowledge import VersionRow, check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import ethtool, tcpdump
from kpdoctor.parse.iptables import Rule, Ruleset, option
from kpdoctor.versions import FixRow, kernel_carries, remedy

CAUSE = "vxlan-checksum-offload-bug"
# VXLAN's UDP ports: Linux's default (flannel), IANA's (Calico, Cilium)
VXLAN_PORTS = frozenset({8472, 4789})
VXLAN_PORT_TEXTS = frozenset(map(str, VXLAN_PORTS))
# the VXLAN devices CNIs create; any device of kind vxlan (ip -d link) too
_VXLAN_DEVICE = lazy_re.compile(r"^(?:flannel\.\d+|vxlan[.\w-]*|cilium_vxlan)$")
OFFLOAD = "tx-checksum-ip-generic"
COUNTER = "UdpInCsumErrors"
MASQ_MARK = "0x4000"
# kube-proxy releases that MASQUERADE --random-fully without clearing its mark first: the outer
# VXLAN packet of a marked packet is masqueraded again (1.16.0 added --random-fully, k/k#78547;
# k/k#92035 added `-j MARK --xor-mark 0x4000` before the MASQUERADE)
MARK_CLEARED = "https://github.com/kubernetes/kubernetes/pull/92035"
FIXES = [
    FixRow((1, 16), status="unaffected", below=True, note="no --random-fully before 1.16"),
    FixRow((1, 16), "v1.16.13"),
    FixRow((1, 17), "v1.17.9"),
    FixRow((1, 18), "v1.18.6"),
    FixRow((1, 18), status="unaffected", above=True, note="the mark is cleared before the MASQUERADE"),
]
CONFIRM = [
    "ethtool -k flannel.1 | grep tx-checksum (the VXLAN device: flannel.1, vxlan.calico)",
    "tcpdump -nn -vv -i <node interface> udp port 8472 or udp port 4789 on the receiving node "
    "([bad udp cksum ...!] lines)",
]


@dataclass(frozen=True, slots=True)
class DoubleNat:
    """A masquerade that rewrites the source port of a packet kube-proxy marked, so the outer
    VXLAN packet of a marked packet is NATed again: the rule, and why it matches that packet."""

    rule: Rule
    artifact: str
    why: str


def double_nat(rs: Ruleset) -> DoubleNat | None:
    """In the nat table's POSTROUTING path: kube-proxy's MASQUERADE --random-fully of marked
    packets without the `-j MARK --xor-mark 0x4000` before it (kube-proxy before the fix), or
    another chain's MASQUERADE --random-fully reached before KUBE-POSTROUTING that does not
    return kube-proxy's marked packets first (flannel v0.20.0-v0.20.1)."""
    nat = rs.tables.get("nat")
    if nat is None:
        return None
    by_chain: dict[str, list[Rule]] = {c: [] for c in _before_kube(list(nat.in_chains({"POSTROUTING"})))}
    for r in nat.in_chains(by_chain):
        by_chain[r.chain].append(r)
    for chain, rules in by_chain.items():
        cleared = False
        for r in rules:
            args = r.args
            if _clears_mark(args) or (r.target == "RETURN" and _returns_marked(args)):
                cleared = True  # the mark is cleared, or marked packets leave this chain here
            if r.target == "MASQUERADE" and "--random-fully" in args and not cleared:
                if chain == "KUBE-POSTROUTING":
                    why = (
                        "kube-proxy masquerades its marked packets with --random-fully without clearing the mark first"
                    )
                else:
                    why = f"{chain} masquerades with --random-fully before kube-proxy clears its mark"
                return DoubleNat(r, rs.artifact, why)
    return None


def _clears_mark(args: tuple[str, ...]) -> bool:
    """`-j MARK --xor-mark 0x4000` as kube-proxy writes it; iptables-save prints it as
    `--set-xmark 0x4000/0x0` (XOR under an empty mask)."""
    return option(args, "--xor-mark") == MASQ_MARK or option(args, "--set-xmark") == f"{MASQ_MARK}/0x0"


def _returns_marked(args: tuple[str, ...]) -> bool:
    """Does the rule match kube-proxy's marked packets (`-m mark --mark 0x4000/0x4000`, not `!`)?"""
    for i, a in enumerate(args):
        if a == "--mark" and i + 1 < len(args) and args[i + 1].startswith(MASQ_MARK):
            return not (i > 0 and args[i - 1] == "!")
    return False


def _before_kube(postrouting: list[Rule]) -> list[str]:
    """POSTROUTING itself (its own MASQUERADE rules before the jump count too), then what it
    jumps to up to and including KUBE-POSTROUTING, in order (a target with no rules is a
    verdict or an empty chain: nothing in it masquerades)."""
    out = ["POSTROUTING"]
    for r in postrouting:
        t = r.target
        if t and t not in out:
            out.append(t)
        if t == "KUBE-POSTROUTING":
            break
    return out


def _vxlan_devices(facts: Facts) -> list[tuple[str, Cite]]:
    out: dict[str, Cite] = {}
    for a, ln in facts.node_state.links:
        if ln.kind == "vxlan" or _VXLAN_DEVICE.match(ln.name):
            out.setdefault(ln.name, Cite(a.name, ln.line, ln.text))
    for f, cite in facts.records(ethtool.FEATURES):
        if f.iface and _VXLAN_DEVICE.match(f.iface):
            out.setdefault(f.iface, cite)
    return list(out.items())


# ea64d8d6c675 ("netfilter: nat: never update the UDP checksum when it's 0"): in 5.7 and these
# stable releases; it fixes devices without outer UDP checksums only
FIXED_KERNEL = (5, 7)
FIXED_STABLE = {(5, 6): 13, (5, 4): 41, (4, 19): 123, (4, 14): 181}


def _kernel_fixed(facts: Facts) -> bool | None:
    """Does the node's kernel carry the NAT checksum fix (upstream or stable numbering)? None
    when its release is not shown; False for one without it (a distribution's own backport is
    not known here)."""
    kernel = facts.kernel
    return None if kernel is None else kernel_carries(kernel.value.base, FIXED_KERNEL, FIXED_STABLE)


def _without_outer_checksums(facts: Facts) -> list[Cite]:
    """The VXLAN devices shown, when every one is `noudpcsum` (the kernel fix covers them)."""
    shown = [(ln, a.name) for a, ln in facts.node_state.links if ln.kind == "vxlan" and ln.udp_csum is not None]
    if not shown or any(ln.udp_csum for ln, _ in shown):
        return []
    return [Cite(a, ln.line, ln.text) for ln, a in shown]


def _offload(facts: Facts) -> tuple[bool, Cite] | None:
    """tx-checksum-ip-generic of a VXLAN device (``ethtool -k``): on or off, and where."""
    for f, cite in facts.records(ethtool.FEATURES):
        if f.name == OFFLOAD and (f.iface is None or _VXLAN_DEVICE.match(f.iface)):
            return f.on, cite
    return None


def _bad_checksums(facts: Facts) -> list[Cite]:
    """Captured VXLAN packets whose outer UDP checksum tcpdump found wrong."""
    return [
        cite
        for p, cite in facts.records(tcpdump.SHAPE)
        if p.udp_checksum == "bad" and (p.dport in VXLAN_PORTS or p.sport in VXLAN_PORTS)
    ]


@check(
    "KP316",
    cause=CAUSE,
    title="A kernel checksum bug drops NATed VXLAN packets (Service traffic across nodes waits or fails)",
    severity=Severity.CRITICAL,
    needs=[Kind.PACKET_CAPTURE, Kind.NIC_FEATURES, Kind.IPTABLES_SAVE, Kind.KERNEL_LOG],
    reads_messages=True,
    counters=[COUNTER],
    versions=(
        *version_rows(FIXES, MARK_CLEARED),
        VersionRow(
            "kernel",
            "before 5.7 (VXLAN devices without outer UDP checksums; with them, every release)",
            "5.7, 5.6.13, 5.4.41, 4.19.123, 4.14.181 (ea64d8d6c675)",
            "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/commit/?id=ea64d8d6c675",
        ),
        VersionRow(
            "flannel",
            "v0.20.0-v0.20.1 (its --random-fully MASQUERADE runs before kube-proxy clears its mark)",
            "v0.20.2",
            "https://github.com/flannel-io/flannel/pull/1681",
        ),
    ),
)
def vxlan_checksum(facts: Facts) -> Iterator[Finding]:
    """The sender's kernel writes a wrong outer UDP checksum on VXLAN packets it NATs twice; the receiver drops them.

    Symptom: on a VXLAN overlay (flannel, Calico VXLAN), connecting to a ClusterIP or NodePort
        from a node or a host-network Pod takes 63 s (SYN retries at 1, 3, 7, 15, 31 s) or 1-3 s,
        or times out, when the endpoint is on another node; Pod IPs and Pod-to-Service traffic
        work. On the receiving node tcpdump -vv shows `[bad udp cksum 0x... -> 0x...!]` on UDP
        8472 or 4789, and Udp InCsumErrors grows.
    Cause: kube-proxy marks Service traffic that needs SNAT (0x4000) and masquerades it in
        KUBE-POSTROUTING. When the packet is routed into a VXLAN device the kernel keeps the
        mark, so the outer VXLAN packet is masqueraded again; `--random-fully` rewrites its UDP
        source port, and with transmit checksum offload on the device (tx-checksum-ip-generic)
        the kernel's NAT writes a wrong outer checksum. kube-proxy 1.16.0-1.16.12,
        1.17.0-1.17.8 and 1.18.0-1.18.5 did not clear the mark first; flannel v0.20.0-v0.20.1
        masqueraded before kube-proxy cleared it. The kernel fix (5.7, "netfilter: nat: never
        update the UDP checksum when it's 0") covers only devices without outer checksums, so
        a kernel release does not rule it out.
    How it is detected: packets to a VXLAN port with a bad UDP checksum in a tcpdump -vv
        capture, or the kernel's `UDP: bad checksum. From ... to ...:8472` line, prove it; the
        nat table's POSTROUTING path masquerading marked packets with --random-fully before
        the mark is cleared, on a node with a VXLAN device, or Udp InCsumErrors growing there,
        make it a suspected cause decided by the device's offload (`ethtool -k`) and a capture;
        `tx-checksum-ip-generic: off` on the device rules it out, and so do VXLAN devices shown
        without outer checksums (`noudpcsum` in `ip -d link`) on a kernel with the fix (5.7,
        5.6.13, 5.4.41, 4.19.123, 4.14.181).
    Fix: upgrade kube-proxy (1.16.13, 1.17.9, 1.18.6, 1.19+) and flannel (v0.20.2+); until
        then turn the offload off on the VXLAN device of every node: `ethtool -K flannel.1
        tx-checksum-ip-generic off` (persist it with a udev rule or a unit; Calico:
        FelixConfiguration `featureDetectOverride: "ChecksumOffloadBroken=true"`).
    References: https://github.com/kubernetes/kubernetes/issues/88986;
        https://github.com/kubernetes/kubernetes/pull/92035;
        https://github.com/flannel-io/flannel/issues/1279;
        https://github.com/projectcalico/calico/issues/3145
    """
    offload = _offload(facts)
    if offload is not None and not offload[0]:
        return  # the offload that corrupts the checksum is off on the VXLAN device
    captured = _bad_checksums(facts)
    logged = [
        lm
        for lm in messages_naming(facts, CAUSE)
        if any(captures(h).get("dst_port") in VXLAN_PORT_TEXTS for h in lm.hits)
    ]
    nat = next((d for rs in facts.rulesets if (d := double_nat(rs)) is not None), None)
    devices = _vxlan_devices(facts)
    nat_cite = [Cite(nat.artifact, nat.rule.line, nat.rule.text.strip())] if nat else []
    extra = nat_cite + ([offload[1]] if offload else [])
    if captured or logged:
        f = start_logged(facts, "KP316", logged, confidence=Confidence.HIGH if (nat or offload) else Confidence.MEDIUM)
        seen = f"{len(captured)} captured VXLAN packet(s) with a bad UDP checksum" if captured else ""
        if logged:
            seen += ("; " if seen else "") + "the kernel dropping VXLAN datagrams for a bad checksum"
        f.summary = (
            f"VXLAN packets arrive with a wrong outer UDP checksum ({seen}): the receiving node drops them, so "
            "connections through the tunnel wait for retransmissions (1 s to 63 s) or fail."
            + (f" {nat.why}." if nat else "")
        )
        f.evidence = captured[:2] + f.evidence + extra
        f.fix = _fix()
        yield f
        return
    counted = read_counters(facts.node_state, [COUNTER])
    if _without_outer_checksums(facts) and _kernel_fixed(facts):
        return  # devices without outer checksums on a kernel with the fix: nothing to corrupt
    if nat is not None and (devices or offload):
        f = start(facts, "KP316", [], confidence=Confidence.MEDIUM, severity=Severity.WARNING)
        on = " with checksum offload on" if offload else ""
        where = ", ".join(d for d, _ in devices) or "the VXLAN device"
        suspect(
            f,
            f"the rules NAT VXLAN packets twice on a node with {where}{on}; no capture shows the bad checksums",
            CONFIRM[1:] if offload else CONFIRM,
            confidence=Confidence.MEDIUM if offload else Confidence.LOW,
        )
        f.summary = (
            f"{nat.why}: on this node with {where}{on}, the outer VXLAN packet of Service traffic that needs SNAT "
            "is masqueraded again, and the kernel gives it a wrong UDP checksum; the receiving node drops it "
            "(connections from nodes and host-network Pods to Services with endpoints elsewhere wait 1-63 s)."
        )
        if counted.growing or counted.totals:
            f.summary += f" {counted.describe()}."
        f.evidence = nat_cite + [c for _, c in devices[:1]] + ([offload[1]] if offload else []) + counted.cites
        f.fix = _fix()
        yield f
        return
    if (counted.growing or counted.significant) and devices:
        f = start(facts, "KP316", [], confidence=Confidence.LOW, severity=counted.severity(Severity.WARNING))
        suspect(
            f,
            "UDP checksum errors on a node with a VXLAN device; what carries them was not shown",
            [*CONFIRM, "iptables-save -t nat"],
        )
        f.summary = (
            f"The node drops UDP datagrams with bad checksums ({counted.describe()}) and carries VXLAN "
            f"({', '.join(d for d, _ in devices)}): NATed VXLAN packets from a sender with checksum offload on are "
            "the usual source."
        )
        f.evidence = counted.cites + [c for _, c in devices[:1]]
        f.fix = _fix()
        yield f
        return
    kpv = facts.kube_proxy_version
    if kpv is not None and devices and remedy(kpv.value, FIXES).affected:
        f = start(facts, "KP316", [], confidence=Confidence.LOW, severity=Severity.WARNING)
        suspect(
            f,
            f"kube-proxy {kpv.value} NATs VXLAN packets twice; the offload and the rules were not shown",
            [*CONFIRM, "iptables-save -t nat | grep -e KUBE-POSTROUTING -e MASQUERADE"],
        )
        f.summary = (
            f"kube-proxy {kpv.value} masquerades its marked packets with --random-fully without clearing the mark, "
            f"and the node carries VXLAN ({', '.join(d for d, _ in devices)}): with checksum offload on the device "
            "the outer packets get a wrong UDP checksum and are dropped on the receiving node."
        )
        f.evidence = [kpv.cite, devices[0][1]]
        f.versions_found["kube-proxy"] = str(kpv.value)
        f.fixed_in = [f"kube-proxy {r.fixed}" for r in FIXES if r.fixed]
        f.fix = _fix()
        yield f


def _fix() -> list[str]:
    return [
        "Upgrade kube-proxy to 1.16.13, 1.17.9, 1.18.6 or 1.19+ (it clears its mark before masquerading) and flannel "
        "to v0.20.2+.",
        "Until then, on every node: `ethtool -K flannel.1 tx-checksum-ip-generic off` (or the VXLAN device's name: "
        'vxlan.calico), persisted with a udev rule (ACTION=="add", ENV{INTERFACE}=="flannel.1", RUN+="..."); '
        'Calico: FelixConfiguration `featureDetectOverride: "ChecksumOffloadBroken=true"`.',
    ]
