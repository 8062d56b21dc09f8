"""KP319: a Pod cannot reach its own Service through a Linux bridge whose ports have hairpin off."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.links import Link

CAUSE = "bridge-hairpin-disabled"
BRIDGE_NF = "net.bridge.bridge-nf-call-iptables"
SHOWN_PORTS = 3
# bridges that are not Pods' (Docker's own containers, libvirt's and LXC's guests)
NOT_PODS = ("docker0", "virbr", "lxcbr", "lxdbr")


def _ports(facts: Facts) -> tuple[dict[str, list[tuple[Link, str]]], dict[str, tuple[Link, str]]]:
    """Bridge ports whose hairpin flag is shown, by bridge, and the bridges themselves as listed."""
    ports: dict[str, list[tuple[Link, str]]] = {}
    devices: dict[str, tuple[Link, str]] = {}
    seen: set[tuple[str, str]] = set()  # a port listed twice (two listings) counts once
    for a, ln in facts.node_state.links:
        devices.setdefault(ln.name, (ln, a.name))
        if ln.hairpin is not None and ln.master and (ln.master, ln.name) not in seen:
            seen.add((ln.master, ln.name))
            ports.setdefault(ln.master, []).append((ln, a.name))
    return ports, devices


def _cite(ln: Link, artifact: str) -> Cite:
    line, text = ln.hairpin_line or (ln.line, ln.text)
    return Cite(artifact, line, text)


@check(
    "KP319",
    cause=CAUSE,
    title="A Pod cannot reach its own Service: the bridge's ports have hairpin off",
    severity=Severity.WARNING,
    needs=[Kind.IP_LINK, Kind.CNI_CONFIG],
)
def bridge_hairpin(facts: Facts) -> Iterator[Finding]:
    """On a bridge CNI, kube-proxy sends a Pod's connection to its own Service back to the Pod, and the bridge drops it.

    Symptom: a Pod's connections to a Service it backs itself time out: always for a
        single-replica Service, now and then (when balanced to itself) for larger ones; other
        Pods reach the Service, and the Pod reaches itself by its own address.
    Cause: on a Linux bridge CNI (the bridge plugin's cni0, flannel's, kubenet's cbr0,
        kube-router's kube-bridge) the Pod's packet to the Service comes in on its bridge port;
        with br_netfilter kube-proxy's DNAT runs on the bridge path and sends it back to the
        same port, which the bridge only does for a port with its hairpin flag on
        (net/bridge/br_forward.c should_deliver), or when the bridge itself is promiscuous.
        kubelet's --hairpin-mode only ever acted for its Docker runtime (not for CNI plugins
        under CRI, k/k#45790; gone with dockershim in 1.24): the CNI's own configuration decides.
        The bridge plugin's `hairpinMode` defaults to false and it writes the flag on every Pod
        it adds; flannel's manifest sets it since v0.10.0, older or hand-written configurations
        do not.
    How it is detected: bridge ports listed with their hairpin flag (`ip -d link`'s
        bridge_slave line or `ip -j -d link`, `bridge -d link show`, the ports'
        `hairpin_mode` files as grep or a loop prints them): ports off on a bridge not shown
        promiscuous; or, with no port shown, a CNI configuration whose bridge plugin (or
        flannel's delegate) sets neither `hairpinMode` nor `promiscMode`: unless
        `bridge-nf-call-iptables = 0` is shown (then the DNAT is not on the bridge path, and
        KP309 says what that breaks).
    Fix: set `"hairpinMode": true` in the CNI configuration (the bridge plugin's, or flannel's
        `delegate` in its cni-conf.json) and recreate the Pods (the plugin sets the flag when it
        adds one); meanwhile `bridge link set dev <port> hairpin on` for a running Pod's port.
    References: https://github.com/kubernetes/kubernetes/issues/45790;
        https://github.com/kubernetes/kubernetes/issues/43966;
        https://www.cni.dev/plugins/current/main/bridge/;
        https://github.com/flannel-io/flannel/pull/849
    """
    nf = facts.node_state.setting(BRIDGE_NF)
    if nf is not None and nf.int() == 0:
        return
    ports, devices = _ports(facts)
    for bridge, listed in sorted(ports.items()):
        if bridge.startswith(NOT_PODS):
            continue
        off = [(p, a) for p, a in listed if p.hairpin is False]
        if not off:
            continue
        device = devices.get(bridge)
        if device is not None and device[0].promisc:
            continue  # a promiscuous bridge passes the Pod's own traffic up to the host
        sure = nf is not None and nf.int() == 1 and device is not None
        f = start(facts, "KP319", [], confidence=Confidence.HIGH if sure else Confidence.MEDIUM)
        names = ", ".join(p.name for p, _ in off[:SHOWN_PORTS]) + (
            f" and {len(off) - SHOWN_PORTS} more" if len(off) > SHOWN_PORTS else ""
        )
        of = (
            f"{len(off)} of the {len(listed)} ports shown"
            if len(off) < len(listed)
            else f"its {len(off)} port(s) shown"
        )
        f.summary = (
            f"Bridge {bridge} has hairpin off on {of} ({names}): a Pod behind such a port cannot reach a Service "
            "when kube-proxy balances the connection to that same Pod (the bridge will not send the packet back "
            "out of the port it came in on): always for a single-replica Service, now and then for others."
        )
        if len(off) < len(listed):
            f.summary += " The ports with hairpin on were added after the setting changed (or by another plugin)."
        f.evidence = [_cite(p, a) for p, a in off[:SHOWN_PORTS]]
        if nf is not None:
            f.evidence.append(nf.cite)
        f.fix = [
            'Set `"hairpinMode": true` in the CNI configuration (the bridge plugin\'s, or the `delegate` of '
            "flannel's cni-conf.json) and recreate the Pods: the plugin sets the flag on each Pod it adds.",
            f"For a running Pod now: `bridge link set dev {off[0][0].name} hairpin on` (lost when the Pod is "
            "recreated with the old configuration).",
        ]
        yield f
        return
    if ports:
        return  # the ports say; a configuration only says what the next Pods get
    for conf, artifact in facts.cni_configs:
        b = conf.bridge
        if b is None or b.hairpin or b.promisc or b.bridge.startswith(NOT_PODS):
            continue
        f = start(facts, "KP319", [], confidence=Confidence.MEDIUM)
        via = "flannel's delegate to the bridge plugin" if b.via == "flannel" else "its bridge plugin"
        f.summary = (
            f"The CNI configuration {conf.name or artifact} sets no hairpinMode (nor promiscMode) in {via}: the "
            f"plugin turns hairpin off on the {b.bridge} port of every Pod it adds, so a Pod cannot reach a Service "
            "when kube-proxy balances the connection to that same Pod: always for a single-replica Service, now "
            "and then for others."
        )
        f.evidence = [Cite(artifact, b.line, b.text)] + ([nf.cite] if nf is not None else [])
        f.fix = [
            'Add `"hairpinMode": true` to '
            + ("the `delegate` object" if b.via == "flannel" else "the bridge plugin's object")
            + " of this configuration on every node (kube-flannel.yml has it since flannel v0.10.0), then recreate "
            "the Pods.",
        ]
        yield f
        return
