"""KP315: reverse-path filtering drops Service and Pod packets that take an asymmetric path."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.checks.logged import messages_naming, start_logged
from kpdoctor.checks.node.common import read_counters
from kpdoctor.facts import Facts
from kpdoctor.facts.log import LoggedMessage, captures
from kpdoctor.facts.node import NodeState, Setting
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity

CAUSE = "rp-filter-drops"
# LINUX_MIB_IPRPFILTER: counted in ip_rcv_finish_core() when the input route lookup fails the
# reverse-path check (-EXDEV); per network namespace, IPv4 only
COUNTER = "TcpExtIPReversePathFilter"
_KEY = lazy_re.compile(r"^net\.ipv4\.conf\.(?P<dev>[^.]+)\.rp_filter$")
STRICT, LOOSE = 1, 2
MODES = {0: "off", STRICT: "strict", LOOSE: "loose"}
COUNT_THEM = "nstat -az TcpExtIPReversePathFilter"
CONFIRM = f"{COUNT_THEM} (twice, a minute apart, on the node: the counter is per network namespace)"
LOG_THEM = "sysctl -w net.ipv4.conf.all.log_martians=1, reproduce, then dmesg | grep 'martian source'"


@dataclass(frozen=True, slots=True)
class Filtering:
    """The reverse-path filtering an interface gets: the larger of conf/all and its own value
    (ip-sysctl.rst: "The max value from conf/{all,interface}/rp_filter is used"; conf/default
    only seeds interfaces created later)."""

    dev: str
    mode: int
    settings: tuple[Setting, ...]

    @property
    def name(self) -> str:
        return self.dev.replace("/", ".")


def described(modes: dict[str, Filtering], at_least: int) -> str:
    """The filtering shown, said once: conf/all (what every interface gets at least), then the
    interfaces above it (those at ``at_least`` or more)."""
    every = modes.get("all")
    floor = every.mode if every is not None else 0
    parts = []
    if every is not None and every.mode >= at_least:
        parts.append(f"conf/all = {every.mode}: every interface {MODES.get(every.mode, every.mode)} at least")
    above = [x for x in modes.values() if x.dev != "all" and x.mode > floor and x.mode >= at_least]
    parts += [f"{x.name} {MODES.get(x.mode, x.mode)} ({x.mode})" for x in above]
    return "; ".join(parts)


def cites(modes: list[Filtering]) -> list[Cite]:
    return list(dict.fromkeys(s.cite for x in modes for s in x.settings))


def filtering(node: NodeState) -> dict[str, Filtering]:
    """Each interface's effective rp_filter as the settings shown say it (``all`` alone when no
    interface's own value is shown: what every interface gets at least)."""
    own: dict[str, Setting] = {}
    for name, s in node.sysctls.items():
        m = _KEY.match(name)
        if m and s.int() is not None:
            own[m.group("dev")] = s
    every = own.pop("all", None)
    own.pop("default", None)
    floor = (every.int() or 0) if every is not None else 0
    out: dict[str, Filtering] = {}
    for dev, s in own.items():
        mode = max(floor, s.int() or 0)
        out[dev] = Filtering(dev, mode, tuple(x for x in (every, s) if x is not None and (x.int() or 0) == mode))
    if every is not None:
        out["all"] = Filtering("all", floor, (every,))
    return out


def _martians(logged: list[LoggedMessage]) -> list[tuple[LoggedMessage, str, str, str]]:
    """The martian-source lines whose source the kernel refuses only by the reverse-path check:
    (message, destination, source, interface), as the catalogue's message reads them (route.c
    prints the packet's destination first). A loopback, multicast, broadcast or zero source is
    refused on any interface whatever rp_filter says (ip_route_input_slow), so it is not this."""
    out = []
    for lm in logged:
        for h in lm.hits:
            got = captures(h)
            try:
                src = ipaddress.IPv4Address(got.get("address2", ""))
            except ValueError:
                continue
            if (
                src.is_loopback
                or src.is_multicast
                or src.is_unspecified
                or src == ipaddress.IPv4Address("255.255.255.255")
            ):
                continue
            out.append((lm, got.get("address", "?"), str(src), got.get("interface", "?")))
            break
    return out


@check(
    "KP315",
    cause=CAUSE,
    title="Reverse-path filtering (rp_filter) drops packets that arrive on an unexpected interface",
    severity=Severity.WARNING,
    needs=[Kind.SYSCTL, Kind.NSTAT, Kind.NETSTAT, Kind.KERNEL_LOG],
    reads_messages=True,
    counters=[COUNTER],
)
def rp_filter(facts: Facts) -> Iterator[Finding]:
    """The kernel drops packets whose source would not be routed back out of the interface they came in on.

    Symptom: some paths to Services or Pods fail while others work: NodePorts on a secondary
        interface, Pods on a secondary ENI reached through a NodePort, replies across a tunnel,
        a host-network process reaching a Pod; SYNs arrive (tcpdump sees them) and nothing
        answers. With log_martians on, dmesg says `IPv4: martian source <dst> from <src>, on
        dev <interface>` (the packet's destination first, then its source).
    Cause: with net.ipv4.conf.*.rp_filter = 1 (strict, RFC 3704) the kernel checks each
        incoming packet's source against the routing table (ip rules included: source-based
        routing of secondary ENIs counts) and drops it when the best route back leaves by
        another interface; with 2 (loose) only when no route back exists at all. The value
        used on an interface is the larger of conf/all and the interface's own, so with all=1
        an interface set to 0 is still strict. Distributions and systemd set it (RHEL 8's
        systemd: all=1; systemd 240+: 2, and from 245 `net.ipv4.conf.*.rp_filter = 2` applied
        to every new interface, which undoes a CNI's 0 on its Pod interfaces).
    How it is detected: the kernel's own counter of these drops, TcpExtIPReversePathFilter
        (`nstat`, or `IPReversePathFilter: N` under `TcpExt:` in `netstat -s`): growing between
        two snapshots or a large share of the packets received, a warning; the kernel's
        martian-source lines (the messages catalogue) whose source is an ordinary address,
        with the interfaces' rp_filter when shown; strict filtering shown with neither is a
        suspected cause at info, naming the counter that decides it.
    Fix: loose mode where paths are asymmetric: `sysctl -w net.ipv4.conf.all.rp_filter=2` and
        `net.ipv4.conf.<interface>.rp_filter=2` (or 0 where the CNI expects it: Cilium's lxc*
        interfaces, Calico's cali* when it does its own check), persisted in a file that sorts
        after systemd's 50-default.conf (/etc/sysctl.d/99-...); for secondary ENIs, eth0 at 2
        (the AWS VPC CNI sets it).
    References: https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html;
        https://github.com/aws/amazon-vpc-cni-k8s/issues/75;
        https://github.com/cilium/cilium/pull/20072;
        https://github.com/cloudnativelabs/kube-router/issues/511
    """
    node = facts.node_state
    modes = filtering(node)
    on = [f for f in modes.values() if f.mode in (STRICT, LOOSE)]
    strict = [f for f in on if f.mode == STRICT]
    counted = read_counters(node, [COUNTER])
    martians = _martians(messages_naming(facts, CAUSE))
    shown = described(modes, STRICT)
    where = f" (rp_filter: {shown})" if shown else ""
    if counted.growing or counted.totals:
        f = start(facts, "KP315", [], confidence=Confidence.HIGH, severity=counted.severity(Severity.WARNING))
        f.summary = (
            "The kernel dropped packets that failed the reverse-path check (rp_filter): "
            f"{counted.describe()}{where}.{counted.confirm(COUNT_THEM)}"
        )
        f.evidence = counted.cites + cites(on)[:4]
        if martians:
            f.evidence += [Cite(h.artifact, h.line, h.text) for lm, *_ in martians[:2] for h in lm.hits[:1]]
        f.fix = _fix(martians[0][3] if martians else None)
        yield f
        return
    if martians:
        _, dst, src, dev = martians[0]
        at = modes.get(dev.replace(".", "/"))
        at_all = modes.get("all")
        mode = at.mode if at is not None else at_all.mode if at_all is not None else None
        if mode == 0 and at is not None:
            return  # filtering is off there: the kernel refused the source for another reason
        f = start_logged(
            facts, "KP315", [x[0] for x in martians], confidence=Confidence.MEDIUM if mode else Confidence.LOW
        )
        f.summary = (
            f"The kernel logged packets from {src} to {dst} arriving on {dev} as martian sources: the route back "
            f"to {src} does not leave by {dev}, so reverse-path filtering drops them{where}."
        )
        if not mode:
            suspect(
                f,
                "martian-source lines; the interfaces' rp_filter was not shown",
                ["sysctl -a | grep '\\.rp_filter'", CONFIRM],
                confidence=Confidence.LOW,
            )
        f.evidence += cites([x for x in (at, at_all) if x is not None] or on)[:3]
        f.fix = _fix(dev)
        yield f
        return
    if not strict:
        return
    f = start(facts, "KP315", [], confidence=Confidence.LOW, severity=Severity.INFO)
    suspect(
        f,
        "strict reverse-path filtering is on; whether it drops anything was not shown",
        [CONFIRM, LOG_THEM],
    )
    f.summary = (
        f"Strict reverse-path filtering is on ({shown}): packets whose route back leaves by "
        "another interface (NodePorts on a secondary interface, Pods on a secondary ENI, replies across a tunnel) "
        "are dropped. Harmless where every path is symmetric; the "
        "counter TcpExtIPReversePathFilter says whether it drops anything."
    )
    f.evidence = cites(strict)[:4]
    f.fix = _fix()
    yield f


def _fix(dev: str | None = None) -> list[str]:
    target = f"net.ipv4.conf.{dev or '<interface>'}.rp_filter=2"
    return [
        f"Loose mode where paths are asymmetric: sysctl -w net.ipv4.conf.all.rp_filter=2 {target} (an interface's "
        "own 0 does not lower conf/all: the larger value applies).",
        "Persist it in a file that sorts after systemd's 50-default.conf (/etc/sysctl.d/99-rp-filter.conf); "
        "systemd 245+ applies `net.ipv4.conf.*.rp_filter = 2` to every new interface, so a CNI that wants 0 on "
        "its Pod interfaces (Cilium's lxc*) needs its own override there.",
    ]
