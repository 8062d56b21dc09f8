"""KP302 service ports inside the ephemeral range, KP306 SNAT source ports running out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import PRINTED_SERVICES, start, suspect
from kpdoctor.facts import Facts, containers_of
from kpdoctor.facts.node import Setting
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.parse.sysctl import port_set

DEFAULT_RANGE = (32768, 60999)  # the kernel's ip_local_port_range
NODEPORT_RANGE = (30000, 32767)  # kube-apiserver's --service-node-port-range default
# Ports Kubernetes components and common node agents listen on, below the kernel's default range:
# an ip_local_port_range widened below 32768 hands them to outgoing connections.
NODE_PORTS = {
    2379: "etcd",
    2380: "etcd peers",
    4240: "Cilium health",
    4789: "VXLAN (udp)",
    5473: "Calico Typha",
    6443: "kube-apiserver",
    8472: "flannel VXLAN (udp)",
    9099: "Calico Felix health",
    9100: "node-exporter",
    10250: "kubelet",
    10256: "kube-proxy healthz",
    10257: "kube-controller-manager",
    10259: "kube-scheduler",
}
CONTROL_PORTS = {2379, 2380, 6443, 10250, 10256, 10257, 10259}  # Kubernetes' own (ports-and-protocols)
OVERLAP_WARN = 0.1  # share of the NodePort range inside the ephemeral range that is a warning on its own
_NODEPORT_FLAG = lazy_re.compile(r"--service-node-port-range[= ]([0-9]{1,5})-([0-9]{1,5})\b")
# Go's listen error, whoever prints it: a daemon (`listen tcp :10254: bind: address already in
# use`), kube-proxy opening a NodePort (`can't open "nodePort for ns/svc:port" (:34104/tcp),
# skipping this nodePort: listen tcp :34104: bind: ...`, or the structured `err="listen tcp4
# :31234: bind: ..."`), inside JSON logs too. Groups: protocol, address, port.
BIND_IN_USE = signature(
    "port-bind-in-use",
    "bind: address already in use",
    r"listen (tcp|udp|sctp)[46]? ([^ ]*):([0-9]+): bind: address already in use",
)
_NODEPORT_FOR = lazy_re.compile(r'nodePort for ([^"\\]+)')
EXHAUSTED_WARN = 0.5  # share of the NAT port range one destination holds
EXHAUSTED_CRIT = 0.9
NAT_PORTS = 65535 - 1024 + 1  # MASQUERADE picks from 1024-65535 for unprivileged source ports


# ingress-nginx's TCP and UDP services (the ConfigMaps its --tcp-services-configmap and
# --udp-services-configmap name): each key a port the controller listens on, each value
# "<namespace>/<service>:<port>[:PROXY][:PROXY]"
_INGRESS_EXPOSED = lazy_re.compile(r"^[\w.-]+/[\w.-]+:[\w-]+(?::(?:PROXY)?){0,2}$")


def _ingress_ports(facts: Facts) -> list[tuple[int, str, Cite]]:
    """The ports ingress-nginx listens on for the TCP/UDP services of its ConfigMaps (a ConfigMap
    every key of which is a port and every value such a service)."""
    out: list[tuple[int, str, Cite]] = []
    for cm in facts.objects.of("ConfigMap"):
        data = cm.body.get("data")
        if not isinstance(data, dict) or not data:
            continue
        if not all(str(k).isdigit() and isinstance(v, str) and _INGRESS_EXPOSED.match(v) for k, v in data.items()):
            continue
        for k, v in data.items():
            port = int(str(k))
            if 0 < port < 65536:
                what = f"port {port} ingress-nginx listens on for {v} ({cm.ref})"
                out.append((port, what, Cite(cm.artifact, cm.line, f'{cm.ref} data "{k}": {v}')))
    return out


def _in(port: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= port <= hi for lo, hi in ranges)


def _bind_failures(facts: Facts, risky: Callable[[int], bool], owners: dict[int, str]) -> list[tuple[int, str, Hit]]:
    """(port, description, log line) of each port a program failed to bind inside the range;
    ``owners``: the Services' NodePorts, to name the Service behind a port."""
    out: list[tuple[int, str, Hit]] = []
    seen: set[int] = set()
    for h in facts.log.hits(BIND_IN_USE.id):
        port_s = h.groups[2] if len(h.groups) > 2 else None
        if not port_s or not port_s.isdigit():
            continue
        port = int(port_s)
        if port in seen or not risky(port):
            continue
        seen.add(port)
        m = _NODEPORT_FOR.search(h.text)
        if port in owners:
            what = f"NodePort {port} of Service {owners[port]}"
        elif m:
            what = f"NodePort {port} of {m.group(1).strip()}"
        else:
            what = f"{h.groups[0]} port {port}"
        out.append((port, f"{what} failed to bind (address already in use)", h))
    return out


def _nodeport_range(facts: Facts) -> tuple[int, int, Cite | None]:
    """The NodePort range: kube-apiserver's (or k3s/rke2 server's) --service-node-port-range
    from a process list, else the default."""
    for p in facts.processes:
        m = _NODEPORT_FLAG.search(p.command)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo <= hi:
                return lo, hi, Cite(facts.process_artifact(), p.line, p.command[:300])
    return NODEPORT_RANGE[0], NODEPORT_RANGE[1], None


def _free(lo: int, hi: int, reserved: list[tuple[int, int]]) -> int:
    """How many ports of lo..hi are not reserved."""
    taken = 0
    for a, b in reserved:
        a, b = max(a, lo), min(b, hi)
        if a <= b:
            taken += b - a + 1
    return max(0, hi - lo + 1 - taken)


def _overlap(facts: Facts, lo: int, hi: int, reserved: list[tuple[int, int]]) -> tuple[str, bool, Cite | None]:
    """What a read ip_local_port_range takes from the ports a node must keep free (the NodePort
    range, Kubernetes' and node agents' listen ports): the sentence, whether it is a warning on
    its own, and where a custom NodePort range was read."""
    np_lo, np_hi, np_cite = _nodeport_range(facts)
    a, b = max(lo, np_lo), min(hi, np_hi)
    free = _free(a, b, reserved) if a <= b else 0
    share = free / (np_hi - np_lo + 1)
    # with the node's listeners given, those are checked one by one instead of this list
    guess = not facts.has(Kind.LISTENERS)
    known = sorted(p for p in NODE_PORTS if guess and lo <= p <= hi and not _in(p, reserved) and p < DEFAULT_RANGE[0])
    parts: list[str] = []
    if free:
        parts.append(
            f"{free} of the {np_hi - np_lo + 1} NodePort ports ({np_lo}-{np_hi}"
            + (", kube-apiserver's --service-node-port-range" if np_cite else ", the default range")
            + f"; {share:.0%}) lie inside it, not reserved"
        )
    if known:
        parts.append(
            f"{len(known)} port(s) Kubernetes components or node agents listen on too: "
            + ", ".join(f"{p} ({NODE_PORTS[p]})" for p in known[:6])
            + (f" and {len(known) - 6} more" if len(known) > 6 else "")
        )
    if not parts:
        return "", False, None
    warn = share >= OVERLAP_WARN or any(p in CONTROL_PORTS for p in known)
    return "; and ".join(parts), warn, np_cite


@check(
    "KP302",
    cause="listen-port-in-ephemeral-range",
    title="A service port lies inside the ephemeral port range",
    severity=Severity.WARNING,
    needs=[Kind.SYSCTL, Kind.KUBE_PROXY_LOG, Kind.LISTENERS, Kind.K8S_OBJECTS, *PRINTED_SERVICES],
)
def ephemeral_listen(facts: Facts) -> Iterator[Finding]:
    """A port a service must bind (a listener, NodePort or hostPort) can be taken by an outgoing connection.

    Symptom: after a restart a daemon (node-exporter on 9100, a hostPort Pod, kube-proxy before
        1.24 holding NodePorts) fails with `bind: address already in use`, while nothing else
        listens on that port; it happens at random and goes away later.
    Cause: the port lies inside net.ipv4.ip_local_port_range and not in
        ip_local_reserved_ports, so the kernel may give it to an outgoing connection as its
        source port; while that connection lives the service cannot bind the port. (Seed 004
        says the client's connect fails; current kernels skip ports held by listeners, so the
        breakage is at bind time.)
    How it is detected: ip_local_port_range and ip_local_reserved_ports from sysctl output (the
        kernel default 32768-60999 and no reserved ports when none is given, which the finding
        says), against the ports programs failed to bind (`listen tcp ...:PORT: bind: address
        already in use` from any Go program, kube-proxy's `can't open "nodePort for ..."
        (:PORT/tcp)` among them), listeners (`ss -ltnp`), the NodePorts of the Services, the
        hostPorts of the Pods and the ports ingress-nginx's TCP/UDP services ConfigMaps expose
        (`"40005": "ns/svc:5000"`) given; such a port that a connection of `netstat -tanp` or
        `ss -tanp` holds as its source port (with no listener on it) is the collision itself.
        A bind failure (or such a held port) inside the range is critical when the range was
        read, a warning when it is the assumed default; a NodePort or hostPort in the range,
        or a listener in a range widened below the kernel default (as in seed 004's
        `1024 65535`), is a warning; other listeners in the default range are info (they are
        usually bound to an ephemeral port on purpose). A range read from sysctl output that
        covers the NodePort range (30000-32767, or kube-apiserver's --service-node-port-range
        from a process list) or the listen ports of Kubernetes components and node agents
        below 32768 (6443, 2379-2380, 10250, 10256, 9100...; the listeners themselves when `ss`
        output is given) is reported on its own, with
        nothing seen failing: a warning when 10% or more of the NodePort range or one of
        Kubernetes' own ports is exposed, info for a smaller overlap.
    Fix: put the ports in net.ipv4.ip_local_reserved_ports (e.g. `9100,30000-32767`), or
        narrow ip_local_port_range so it excludes them (the kernel default starts at 32768,
        above the default NodePort range 30000-32767).
    References: https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html;
        https://github.com/kubernetes/kubernetes/issues/85894;
        https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/;
        https://kubernetes.io/docs/reference/networking/ports-and-protocols/;
        https://github.com/kubernetes/kops/issues/6342
    """
    node = facts.node_state
    rng = node.setting("net.ipv4.ip_local_port_range")
    assumed = rng is None or len(rng.ints()) < 2
    lo, hi = DEFAULT_RANGE if rng is None or assumed else tuple(rng.ints()[:2])
    reserved_s = node.setting("net.ipv4.ip_local_reserved_ports")
    reserved = port_set(reserved_s.value) if reserved_s else []
    widened = lo < DEFAULT_RANGE[0]
    # (port, what binds it, where that is said)
    strong: list[tuple[int, str, Cite]] = []
    weak: list[tuple[int, str, Cite]] = []
    seen: set[tuple[str, int]] = set()

    def risky(port: int) -> bool:
        return lo <= port <= hi and not _in(port, reserved)

    owners = {np: svc.obj.ref for svc in facts.cluster.services for np in svc.node_ports}
    failures = _bind_failures(facts, risky, owners)
    for a, ls in node.listeners:
        if not risky(ls.port) or ls.address.startswith("127.") or ls.address == "::1" or (ls.proto, ls.port) in seen:
            continue
        if assumed and not widened:
            continue  # a listener in the kernel's own default range is bound there on purpose
        seen.add((ls.proto, ls.port))
        who = f" by {ls.process}" + (f" (pid {ls.pid})" if ls.pid else "") if ls.process else ""
        listened = (ls.port, f"{ls.proto} {ls.port} listened on{who}", Cite(a.name, ls.line, ls.text))
        (strong if widened else weak).append(listened)
    failed = {p for p, _, _ in failures}
    for svc in facts.cluster.services:
        for np in svc.node_ports:
            if risky(np) and np not in failed:
                ref, o = svc.obj.ref, svc.obj
                strong.append((np, f"NodePort {np} of Service {ref}", facts.object_cite(o, f"{ref} nodePort {np}")))
    node_name = facts.node_view.name
    for view in facts.cluster.pods():
        pod = view.obj
        if node_name and view.node_name not in (None, node_name):
            continue
        for c in containers_of(pod):
            cports = c.get("ports")
            for p in cports if isinstance(cports, list) else []:
                hp = p.get("hostPort") if isinstance(p, dict) else None
                if isinstance(hp, int) and risky(hp):
                    cite = Cite(pod.artifact, pod.line, f"{pod.ref} hostPort {hp}")
                    strong.append((hp, f"hostPort {hp} of Pod {pod.ref}", cite))
    strong += [item for item in _ingress_ports(facts) if risky(item[0]) and item[0] not in failed]
    # a port a service must bind that an outgoing connection holds right now: the collision itself
    listening = {ls.port for _, ls in node.listeners}
    declared = {p: (d, c) for p, d, c in strong}
    held: list[tuple[str, Cite]] = []
    held_declared: list[Cite] = []  # where each held port is declared
    held_ports: set[int] = set()
    for a, conn in node.connections:
        port = conn.local_port
        if port in declared and port not in listening and port not in held_ports:
            held_ports.add(port)
            held_declared.append(declared[port][1])
            who = f" of {conn.process}" if conn.process else ""
            held.append(
                (
                    f"{declared[port][0]} is the source port of an outgoing connection{who} "
                    f"({conn.local}:{port} -> {conn.remote}:{conn.remote_port}, {conn.state or conn.proto})",
                    Cite(a.name, conn.line, conn.text),
                )
            )
    strong = [item for item in strong if item[0] not in held_ports]
    overlap, overlap_warns, np_cite = _overlap(facts, lo, hi, reserved) if not assumed else ("", False, None)
    if not failures and not held and not strong and not weak:
        if overlap:
            yield _range_overlap(facts, rng, reserved_s, lo, hi, overlap, overlap_warns, np_cite)
        return
    if failures or held:
        # a port held by a connection shows the kernel gives it out, whatever range was given
        severity, confidence = (
            (Severity.WARNING, Confidence.HIGH if held else Confidence.MEDIUM)
            if assumed
            else (Severity.CRITICAL, Confidence.HIGH)
        )
    elif strong:
        severity, confidence = Severity.WARNING, Confidence.LOW if assumed else Confidence.MEDIUM
    else:
        severity, confidence = Severity.INFO, Confidence.MEDIUM
    items = [(d, Cite(h.artifact, h.line, h.text)) for _, d, h in failures] + held
    items += [(d, c) for _, d, c in strong or weak]
    where = f"ip_local_port_range {lo}-{hi}" + (
        " (the kernel default: no ip_local_port_range was given; confirm with "
        "`sysctl net.ipv4.ip_local_port_range net.ipv4.ip_local_reserved_ports`)"
        if assumed
        else " (widened below the kernel default 32768)"
        if widened
        else ""
    )
    f = start(
        facts,
        "KP302",
        [h for _, _, h in failures],
        confidence=confidence,
        severity=severity,
        summary=(
            f"{len(items)} port(s) a service binds lie inside {where} and are not reserved: "
            + "; ".join(d for d, _ in items[:6])
            + (f" (and {len(items) - 6} more)" if len(items) > 6 else "")
            + ". An outgoing connection can take one as its source port; the service then cannot bind it"
            + (" (which is what happened here)." if failures or held else ".")
            + (f" The range also takes: {overlap}." if overlap else "")
        ),
    )
    lead = ([rng.cite] if rng is not None and not assumed else []) + ([reserved_s.cite] if reserved_s else [])
    shown = [c for _, c in held[:3]] + held_declared[:3] + [c for _, _, c in (strong or weak)[:3]]
    f.evidence = lead + shown + f.evidence
    ports = sorted({p for p, _, _ in failures} | held_ports | {p for p, _, _ in strong or weak})
    keep = ",".join(str(p) for p in ports[:20])
    if any(d.startswith("NodePort") for d, _ in items):
        outside = [str(p) for p in ports if p < 30000 or p > 32767][:10]
        keep = ",".join([*outside, "30000-32767"])
    f.fix = [
        f"Reserve them: sysctl -w net.ipv4.ip_local_reserved_ports={keep} (keep existing entries; persist in "
        "/etc/sysctl.d/), or narrow net.ipv4.ip_local_port_range to exclude them (kernel default 32768 60999).",
    ]
    if assumed and not failures and not held:
        suspect(
            f,
            "ports inside the kernel's default ephemeral range; the node's own range was not given",
            ["sysctl net.ipv4.ip_local_port_range net.ipv4.ip_local_reserved_ports"],
            confidence=f.confidence,
        )
    yield f


def _range_overlap(
    facts: Facts,
    rng: Setting | None,
    reserved_s: Setting | None,
    lo: int,
    hi: int,
    overlap: str,
    warns: bool,
    np_cite: Cite | None,
) -> Finding:
    """The ephemeral range read covers ports the node must keep free, with nothing seen failing yet."""
    f = start(
        facts,
        "KP302",
        [],
        confidence=Confidence.MEDIUM,
        severity=Severity.WARNING if warns else Severity.INFO,
        summary=(
            f"ip_local_port_range {lo}-{hi} overlaps ports services must bind: {overlap}. Any outgoing "
            "connection can take one of them as its source port, and a daemon, hostPort or NodePort socket "
            "(re)starting on it then fails with `bind: address already in use`, at random; kube-apiserver's "
            "reference: the NodePort range must not overlap the nodes' ephemeral port range. Nothing in the "
            "evidence shows a bind failure yet."
        ),
    )
    f.evidence = [c for c in (rng.cite if rng else None, reserved_s.cite if reserved_s else None, np_cite) if c]
    f.fix = [
        f"Narrow the range so it starts above the NodePort range and the node's listen ports: sysctl -w "
        f'net.ipv4.ip_local_port_range="{DEFAULT_RANGE[0]} {DEFAULT_RANGE[1]}" (the kernel default; persist in '
        "/etc/sysctl.d/ and find what set it), or keep the range and reserve what must stay free: sysctl -w "
        "net.ipv4.ip_local_reserved_ports=30000-32767 (plus the daemons' ports, keeping existing entries).",
    ]
    return f


@check(
    "KP306",
    cause="source-port-exhaustion",
    title="SNAT is running out of source ports for a destination",
    severity=Severity.WARNING,
    needs=[Kind.CONNTRACK_ENTRIES],
)
def source_ports(facts: Facts) -> Iterator[Finding]:
    """Connections through SNAT to one destination use most of the source ports available.

    Symptom: connections from Pods (or via NodePort) to one busy destination (a database, an
        external API, a NodePort backend) fail intermittently under load; `connect: cannot
        assign requested address` in clients on the node.
    Cause: every connection SNATed to the node's address needs a distinct source port per
        destination address and port; MASQUERADE has about 64,000 (1024-65535), connections in
        TIME_WAIT keep theirs for a while, and bursts run out.
    How it is detected: the conntrack table (`conntrack -L` or /proc/net/nf_conntrack): SNATed
        entries grouped by translated source address and destination address:port; 50% of the
        NAT port range held for one destination is a warning, 90% critical. The kernel has no
        counter for this (failed NAT port allocation shows as conntrack insert_failed/drop).
    Fix: spread the load over more destination addresses or ports, reuse connections
        (keep-alive, connection pools), shorten TIME_WAIT reuse (net.ipv4.tcp_tw_reuse=1 for
        node-originated connections), use `--random-fully`, or SNAT to several addresses.
    References: https://github.com/kubernetes/kubernetes/issues/56903;
        https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html
    """
    entries = facts.node_state.conntrack_entries
    groups: Counter[tuple[str, str, str, int | None]] = Counter()
    first: dict[tuple[str, str, str, int | None], Cite] = {}
    for a, e in entries:
        if not e.snat:
            continue
        key = (e.proto, e.reply_dst, e.dst, e.dport)
        groups[key] += 1
        first.setdefault(
            key, Cite(a.name, e.line, f"{e.proto} src={e.src} dst={e.dst} dport={e.dport} SNAT to {e.reply_dst}")
        )
    worst = [(k, n) for k, n in groups.most_common(5) if n / NAT_PORTS >= EXHAUSTED_WARN]
    if not worst:
        return
    (proto, snat_ip, dst, dport), n = worst[0]
    share = n / NAT_PORTS
    f = start(
        facts,
        "KP306",
        [],
        confidence=Confidence.MEDIUM,
        severity=Severity.CRITICAL if share >= EXHAUSTED_CRIT else Severity.WARNING,
        summary=(
            f"{n} SNATed {proto} connections from {snat_ip} to {dst}:{dport} hold {share:.0%} of the "
            f"{NAT_PORTS} source ports NAT can use for that destination"
            + (f"; {len(worst) - 1} more destination(s) above {EXHAUSTED_WARN:.0%}" if len(worst) > 1 else "")
            + "."
        ),
    )
    f.evidence = [first[k] for k, _ in worst[:3]]
    f.ongoing = True
    f.fix = [
        "Reuse connections (keep-alive, pools) and spread load over more destination addresses; enable "
        "net.ipv4.tcp_tw_reuse=1 for node-originated connections; make MASQUERADE use --random-fully; "
        "or SNAT to more than one address."
    ]
    yield f
