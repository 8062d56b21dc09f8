"""KP317: IPVS mode without strict ARP: every node answers ARP for the Service addresses it binds."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.dataplane.modes import IPVS_INTERFACE
from kpdoctor.facts import Facts
from kpdoctor.facts.node import NodeState, Setting
from kpdoctor.knowledge import VersionRow, check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import arping
from kpdoctor.parse.arping import ArpReply, claimants

CAUSE = "ipvs-strict-arp-disabled"
# what kube-proxy's strictARP sets (pkg/proxy/ipvs/proxier.go: sysctlArpIgnore, sysctlArpAnnounce)
ARP_IGNORE, ARP_ANNOUNCE = "arp_ignore", "arp_announce"
STRICT = {ARP_IGNORE: 1, ARP_ANNOUNCE: 2}
# kube-proxy 1.13.0-1.14.1 set both whatever the configuration said (k/k#70530); the option
# (default false) came in 1.13.6, 1.14.2 and 1.15.0 (k/k#75295)
ALWAYS_STRICT = (((1, 13, 0), (1, 13, 6)), ((1, 14, 0), (1, 14, 2)))
CONFIRM_SYSCTL = "sysctl net.ipv4.conf.all.arp_ignore net.ipv4.conf.all.arp_announce"
CONFIRM_ARP = "arping -I <interface> <LoadBalancer IP> from another host on the segment (more than one MAC answers)"


def _arp(node: NodeState, name: str) -> tuple[int, list[Setting]] | None:
    """The least value of an ARP setting over the node's interfaces, as the settings shown say
    it (the kernel uses the larger of conf/all and the interface's own: ip-sysctl.rst), with the
    settings that give it; None when conf/all is not shown."""
    every = node.setting(f"net.ipv4.conf.all.{name}")
    if every is None or every.int() is None:
        return None
    floor = every.int() or 0
    own = [
        s
        for key, s in node.sysctls.items()
        if key.startswith("net.ipv4.conf.")
        and key.endswith(f".{name}")
        and key.split(".")[3] not in ("all", "default", "lo")
    ]
    if not own:
        return floor, [every]
    least = min(max(floor, s.int() or 0) for s in own)
    return least, [every, *(s for s in own if max(floor, s.int() or 0) == least)][:3]


def _exposed(facts: Facts) -> list[tuple[str, Cite]]:
    """Addresses that other hosts reach by ARP and that IPVS mode binds on kube-ipvs0: Services'
    load-balancer ingress IPs and external IPs (kube-proxy binds them unless a node interface
    holds them already)."""
    out: dict[str, Cite] = {}
    for svc in facts.cluster.services:
        for ip in (*svc.lb_ingress_ips, *svc.external_ips):
            out.setdefault(ip, facts.object_cite(svc.obj, f"Service {svc.key}: {ip}"))
    return list(out.items())


def _announcer(facts: Facts) -> Cite | None:
    """Something that announces Service addresses by ARP in the evidence: MetalLB (its objects,
    metallb.io, or its namespace) or kube-vip (its Pods or DaemonSet, kube-vip*)."""
    for obj in facts.objects.items:
        if "metallb.io" in obj.api_version or obj.namespace == "metallb-system" or obj.name.startswith("kube-vip"):
            return facts.object_cite(obj, f"{obj.kind} {obj.ref}")
    return None


@check(
    "KP317",
    cause=CAUSE,
    title="IPVS mode without strict ARP: every node answers ARP for LoadBalancer and external IPs",
    severity=Severity.WARNING,
    needs=[Kind.SYSCTL, Kind.KUBE_PROXY_CONFIG, Kind.ARP_REPLIES],
    versions=(
        VersionRow(
            "kube-proxy",
            "1.13.0-1.13.5, 1.14.0-1.14.1 (always set arp_ignore=1 and arp_announce=2, breaking some CNIs)",
            "1.13.6, 1.14.2, 1.15.0 (ipvs.strictARP / --ipvs-strict-arp, default false)",
            "https://github.com/kubernetes/kubernetes/pull/75295",
        ),
    ),
)
def strict_arp(facts: Facts) -> Iterator[Finding]:
    """IPVS mode binds each Service address on kube-ipvs0 of every node; without strict ARP all answer ARP for it.

    Symptom: a LoadBalancer IP announced on layer 2 (MetalLB's L2 mode, kube-vip's ARP mode)
        works, then stops, or works from some clients only; connections drop when the router
        learns another node's MAC; `arping` to the address gets answers from several MACs.
    Cause: kube-proxy in IPVS mode binds every ClusterIP, external IP and load-balancer IP to
        its dummy interface kube-ipvs0 on every node. With net.ipv4.conf.all.arp_ignore = 0
        (the kernel's default) a node answers ARP for any local address on any interface, so
        every node claims the load-balancer IP, not only the one the announcer chose. kube-proxy's
        `ipvs.strictARP: true` (`--ipvs-strict-arp`) sets arp_ignore=1 and arp_announce=2 on
        conf/all at start; it is false by default since 1.13.6/1.14.2/1.15.0 (1.13.0-1.14.1 always
        set them). MetalLB's documentation requires it with IPVS.
    How it is detected: `arping` answered by several MACs for one address proves ARP is not
        strict where kube-proxy runs in IPVS mode, and makes it the suspected cause when nothing
        says which mode runs (`/proxyMode` decides). Otherwise: kube-proxy runs in IPVS mode (its
        log, /proxyMode, configuration, kube-ipvs0 or ipvsadm); conf/all's arp_ignore below 1
        or arp_announce below 2 in a sysctl listing (the larger of conf/all and an interface's
        own is used), or `strictARP` false in its configuration when no listing says; and
        addresses reached by ARP: Services' load-balancer or external IPs, or an announcer's
        objects (MetalLB's, kube-vip's). Without such addresses a listing that proves ARP is not
        strict is a suspected cause at info.
    Fix: set `ipvs.strictARP: true` in kube-proxy's configuration (kube-system/kube-proxy
        ConfigMap, `kubectl -n kube-system edit cm kube-proxy`) and restart kube-proxy, or
        `sysctl -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2` persisted in
        /etc/sysctl.d/; kube-router's service proxy sets them itself.
    References: https://metallb.universe.tf/installation/#preparation;
        https://github.com/kubernetes/kubernetes/pull/75295;
        https://github.com/metallb/metallb/issues/153;
        https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html
    """
    running = facts.running_mode
    answered = claimants([r for r, _ in facts.records(arping.SHAPE)])
    if running.mode is None and answered:
        yield _several_answer(facts, answered)
        return
    if running.mode != "ipvs":
        return
    node = facts.node_state
    ignore, announce = _arp(node, ARP_IGNORE), _arp(node, ARP_ANNOUNCE)
    loose = [(n, got) for n, got in ((ARP_IGNORE, ignore), (ARP_ANNOUNCE, announce)) if got and got[0] < STRICT[n]]
    shown_strict = ignore is not None and not any(n == ARP_IGNORE for n, _ in loose)
    if shown_strict:
        return  # arp_ignore is 1 or more: the node answers only for addresses on the asking interface
    exposed = _exposed(facts)
    announcer = _announcer(facts)
    mode_cite = [running.cite] if running.cite is not None else []
    if answered:  # several hosts answered for an address: what loose ARP does, seen
        shown_why = bool(loose or exposed or announcer)
        f = start(facts, "KP317", [], confidence=Confidence.HIGH if shown_why else Confidence.MEDIUM)
        f.summary = (
            f"kube-proxy runs in IPVS mode and {_answers(answered)}: ARP is not strict, so every node answers "
            f"for the addresses it binds on {IPVS_INTERFACE} and the segment's hosts send their traffic to any "
            "of them, not the one announcing it."
        )
        f.evidence = _answer_cites(facts, answered) + list(dict.fromkeys(s.cite for _, v in loose for s in v[1]))
        f.evidence += mode_cite
        f.fix = _fix()
        yield f
        return
    if loose:
        said = ", ".join(f"{n} = {v[0]} (wanted {STRICT[n]})" for n, v in loose)
        cites = list(dict.fromkeys(s.cite for _, v in loose for s in v[1]))
        if not exposed and announcer is None:
            f = start(facts, "KP317", [], confidence=Confidence.LOW, severity=Severity.INFO)
            suspect(
                f,
                "ARP is not strict in IPVS mode; no load-balancer or external IP was shown",
                ["kubectl get svc -A -o wide | grep -e LoadBalancer -e EXTERNAL", CONFIRM_ARP],
            )
            f.summary = (
                f"kube-proxy runs in IPVS mode and ARP is not strict ({said}): every node answers ARP for every "
                f"address on {IPVS_INTERFACE}. That breaks LoadBalancer or external IPs announced on layer 2 "
                "(MetalLB L2, kube-vip ARP), if this cluster has any."
            )
            f.evidence = cites + mode_cite
            f.fix = _fix()
            yield f
            return
        f = start(facts, "KP317", [], confidence=Confidence.HIGH if announcer is not None else Confidence.MEDIUM)
        f.summary = (
            f"kube-proxy runs in IPVS mode and ARP is not strict ({said}): every node answers ARP for "
            + _addresses(exposed, announcer)
            + ", so the router may send their traffic to any node, not the one announcing them."
        )
        f.evidence = cites + [c for _, c in exposed[:2]] + ([announcer] if announcer else []) + mode_cite
        f.fix = _fix()
        yield f
        return
    if ignore is not None or not (exposed or announcer):
        return
    cfg = facts.kp_config.setting("ipvs.strictARP")
    if cfg.origin == "unknown" or str(cfg.value).lower() == "true":
        return
    kpv = facts.kube_proxy_version
    if kpv is not None and any(lo <= kpv.value.upstream[:3] < hi for lo, hi in ALWAYS_STRICT):
        return  # these releases set strict ARP whatever the configuration says
    f = start(facts, "KP317", [], confidence=Confidence.LOW)
    suspect(
        f, "strictARP is off in kube-proxy's configuration; the node's ARP settings were not shown", [CONFIRM_SYSCTL]
    )
    f.summary = (
        "kube-proxy runs in IPVS mode with strictARP off ("
        + ("its default" if cfg.origin == "default" else f"set to {str(cfg.value).lower()}")
        + "): unless something else set net.ipv4.conf.all.arp_ignore=1, every node answers ARP for "
        + _addresses(exposed, announcer)
        + "."
    )
    src = cfg.source
    f.evidence = ([Cite(src.artifact, src.line, src.text)] if src else []) + [c for _, c in exposed[:2]]
    f.evidence += ([announcer] if announcer else []) + mode_cite
    f.fix = _fix()
    yield f


def _addresses(exposed: list[tuple[str, Cite]], announcer: Cite | None) -> str:
    if exposed:
        shown = ", ".join(ip for ip, _ in exposed[:3]) + (f" and {len(exposed) - 3} more" if len(exposed) > 3 else "")
        return f"the load-balancer and external IPs it binds on {IPVS_INTERFACE} ({shown})"
    return f"the addresses MetalLB or kube-vip announce (bound on {IPVS_INTERFACE} of every node)"


def _fix() -> list[str]:
    return [
        "Set `ipvs.strictARP: true` in kube-proxy's configuration (`kubectl -n kube-system edit configmap "
        "kube-proxy`) and restart kube-proxy's Pods: it then sets net.ipv4.conf.all.arp_ignore=1 and "
        "arp_announce=2 at start.",
        "Or set them yourself: sysctl -w net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2, "
        "persisted in /etc/sysctl.d/.",
    ]


def _answers(answered: dict[str, list[ArpReply]]) -> str:
    ip, replies = next(iter(answered.items()))
    more = f" (and for {len(answered) - 1} more address(es))" if len(answered) > 1 else ""
    return f"{len(replies)} hosts answer ARP for {ip} ({', '.join(r.mac for r in replies[:4])}){more}"


def _answer_cites(facts: Facts, answered: dict[str, list[ArpReply]]) -> list[Cite]:
    cites = {(r.line, r.text): c for r, c in facts.records(arping.SHAPE)}
    return [cites[(r.line, r.text)] for replies in list(answered.values())[:2] for r in replies[:3]]


def _loose_interfaces(node: NodeState) -> list[Setting]:
    """Interfaces' own arp_ignore settings at 0 (a listing grep'd for one interface shows no conf/all)."""
    return [
        s for key, s in node.sysctls.items() if key.startswith("net.ipv4.conf.") and key.endswith(f".{ARP_IGNORE}")
        and s.int() == 0
    ][:2]  # fmt: skip


def _several_answer(facts: Facts, answered: dict[str, list[ArpReply]]) -> Finding:
    """Several MACs answer ARP for one address and nothing says which proxy mode runs: IPVS
    without strict ARP does exactly that to every Service address it binds; the mode decides."""
    f = start(facts, "KP317", [], confidence=Confidence.LOW)
    suspect(
        f,
        "several hosts answer ARP for one address, which IPVS mode without strict ARP causes; the proxy mode "
        "is not in the evidence",
        ["curl -s localhost:10249/proxyMode (on a node that answered)", CONFIRM_SYSCTL],
    )
    said = _answers(answered)
    f.summary = (
        f"{said[0].upper()}{said[1:]}. If kube-proxy runs in IPVS mode without strict "
        f"ARP, every node answers for the addresses it binds on {IPVS_INTERFACE} (LoadBalancer and external IPs), "
        "and the segment's hosts send their traffic to any node instead of the one announcing it."
    )
    f.evidence = _answer_cites(facts, answered) + [s.cite for s in _loose_interfaces(facts.node_state)]
    f.fix = _fix()
    return f
