"""KP307: IPVS connection reuse sends new connections to terminated Pods, or delays them 1 s."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import ipvs_conn
from kpdoctor.parse.ipvs_conn import endpoint_of

REUSE_FIXED_KERNEL = (5, 9)  # "ipvs: allow connection reuse for unconfirmed conntrack" (f0a5e4d7a594)
LEAVES_REUSE_MODE = (1, 22)  # kube-proxy stops forcing conn_reuse_mode=0 on kernels >= 5.9 (k/k#102122)


# Inactive connections (TIME_WAIT, FIN_WAIT) on one real server that show clients opening and
# closing connections fast enough to reuse their source ports within TIME_WAIT.
BUSY_INACTIVE = 100
# RHEL majors whose kernels are all older than 5.9 (7: 3.10, 6: 2.6.32)
OLD_RHEL_KERNELS = {"6": "2.6.32", "7": "3.10"}


def _busy_old_kernel(facts: Facts) -> Finding | None:
    """IPVS in use on a kernel before 5.9 with a real server holding many inactive connections,
    the sysctls not given: the 1 s delay (or, with conn_reuse_mode=0, the wrong backend) is
    likely; only `sysctl net.ipv4.vs` tells which."""
    busy = [(rs, vs, a) for vs, a in facts.ipvs_listed for rs in vs.reals if (rs.inactive or 0) >= BUSY_INACTIVE]
    if not busy:
        return None
    kernel = facts.kernel
    if kernel is not None:
        if kernel.value.base[:2] >= REUSE_FIXED_KERNEL:
            return None
        old, cite = f"kernel {kernel.value}", kernel.cite
    elif (rhel := facts.rhel_release) is not None and rhel[0] in OLD_RHEL_KERNELS:
        old, cite = (
            f"RHEL/CentOS {rhel[0]} (its kernel is {OLD_RHEL_KERNELS[rhel[0]]}: inferred from the packages)",
            rhel[1],
        )
    else:
        return None
    rs, vs, a = max(busy, key=lambda b: b[0].inactive or 0)
    f = start(facts, "KP307", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    suspect(
        f,
        "IPVS in use on an old kernel with port churn; the net.ipv4.vs settings were not given",
        ["sysctl net.ipv4.vs.conn_reuse_mode net.ipv4.vs.conntrack"],
    )
    f.summary = (
        f"IPVS on {old}, before the 5.9 fix, and real server {rs.address} of {vs.address} holds {rs.inactive} "
        "inactive connections: clients that open connections this fast come back from source ports still in "
        "TIME_WAIT. With net.ipv4.vs.conn_reuse_mode=1 "
        "(the kernel's default) and conntrack=1 the first SYN of each such connection is dropped (a 1 s connect "
        "delay); with 0 (what kube-proxy 1.13-1.21 sets) it goes to the old connection's backend, removed or not."
    )
    f.evidence = [Cite(a, rs.line, rs.text or rs.address), cite]
    f.fixed_in = ["kernel 5.9", "kube-proxy v1.22.0"]
    f.fix = [
        "Confirm with `sysctl net.ipv4.vs.conn_reuse_mode net.ipv4.vs.conntrack` (and connect times: 1 s and 3 s "
        "steps are retransmitted SYNs).",
        'Upgrade the kernel to 5.9 or later ("ipvs: allow connection reuse for unconfirmed conntrack") and keep '
        "conn_reuse_mode=1 (kube-proxy 1.22+ leaves it).",
    ]
    return f


# IPVS's TCP states of a connection's first packets (ip_vs_proto_tcp.c tcp_state_name_table): a
# row in one of them is a connection being opened now
OPENING = frozenset({"SYN_RECV", "SYN_SENT", "SYNACK"})
MAX_SHOWN = 3


def _opened_on_draining(facts: Facts) -> tuple[list[Cite], str] | None:
    """New TCP connections (SYN_RECV rows of the connection table) to a real server the listing
    shows at weight 0: the scheduler never picks one, so each reused a client ip:port whose old
    connection IPVS still held (conn_reuse_mode=0 reuses the entry and its real server). Proof of
    the reuse itself, whatever the settings show; (cites, what they show) or None."""
    draining = {
        (endpoint_of(vs.address).key, endpoint_of(rs.address).key)
        for vs, _ in facts.ipvs_listed
        if vs.protocol == "TCP"
        for rs in vs.reals
        if rs.weight == 0
    }
    if not draining:
        return None
    rows = [
        (c, cite)
        for c, cite in facts.records(ipvs_conn.SHAPE)
        if c.protocol == "TCP" and c.state in OPENING and (c.virtual.key, c.destination.key) in draining
    ]
    if not rows:
        return None
    c = rows[0][0]
    said = (
        f"{len(rows)} new connection(s) ({c.state}) of {c.virtual} went to {c.destination}, a real server at weight 0 "
        "that the scheduler never picks: each reused a client port whose old connection IPVS still held"
    )
    return [cite for _, cite in rows[:MAX_SHOWN]], said


def _connects_wait_for_retransmits(facts: Facts) -> Finding | None:
    """A load test whose typical connection waited for the SYN retransmit timer (1 s, 3 s), with
    nothing saying kube-proxy does not use IPVS: most first SYNs were dropped, which is what IPVS
    does to connections reusing a client port still in TIME_WAIT under a high connection rate.
    (A few slow connects are races; most of them is port reuse.)"""
    waited = [(ct, c) for ct, c in facts.connect_times if ct.most_waited is not None]
    if not waited:
        return None
    mode = facts.running_mode.mode
    if mode not in (None, "ipvs"):
        return None
    ct, cite = waited[0]
    ipvs = mode == "ipvs" or bool(facts.ipvs_listed)
    f = start(facts, "KP307", [], confidence=Confidence.MEDIUM if ipvs else Confidence.LOW, severity=Severity.WARNING)
    suspect(
        f,
        "connects bunched at the SYN retransmit timer with IPVS in use"
        if ipvs
        else "connects bunched at the SYN retransmit timer; the proxy mode was not given",
        ["sysctl net.ipv4.vs.conn_reuse_mode net.ipv4.vs.conntrack", "uname -r"]
        + ([] if ipvs else ["curl -s localhost:10249/proxyMode"]),
        confidence=f.confidence,
    )
    slow = f", the slowest {ct.slowest:.0f} ms" if ct.some_waited and ct.some_waited > (ct.most_waited or 0) else ""
    f.summary = (
        f"The typical connection took {ct.typical:.0f} ms to connect ({ct.tool}{slow}): its first SYN was dropped "
        "and sent again when the kernel's retransmit timer fired (1 s, then 3 s). When most connections wait, "
        "the path drops the first SYN of almost every new connection: IPVS does that (net.ipv4.vs.conn_reuse_mode=1 "
        "with conntrack=1, kernels before 5.9) to connections that reuse a client port still in TIME_WAIT, which "
        "a client opening many short connections does all the time."
    )
    if not ipvs:
        f.summary += " Outside IPVS, look at conntrack insert failures and listen queue overflows instead."
    f.evidence = [cite]
    f.fixed_in = ["kernel 5.9", "kube-proxy v1.22.0"]
    f.fix = [
        "Confirm with `sysctl net.ipv4.vs.conn_reuse_mode net.ipv4.vs.conntrack`, `uname -r` and kube-proxy's "
        "mode (`curl localhost:10249/proxyMode`).",
        'Upgrade the kernel to 5.9 or later ("ipvs: allow connection reuse for unconfirmed conntrack") with '
        "kube-proxy 1.22+, or let clients keep connections open (keep-alive) instead of opening one per request.",
    ]
    return f


@check(
    "KP307",
    cause="ipvs-connection-reuse",
    title="IPVS connection reuse: new connections go to terminated Pods (or wait 1 s)",
    severity=Severity.WARNING,
    needs=[Kind.SYSCTL, Kind.IPVSADM, Kind.CONNECT_TIMES, Kind.IPVS_CONNECTIONS],
)
def connection_reuse(facts: Facts) -> Iterator[Finding]:
    """In IPVS mode, a new connection that reuses a client port is sent to the old backend, or its first SYN is dropped.

    Symptom: during rolling updates, connections fail with `no route to host` (sent to a Pod
        that no longer exists), load stays pinned to old Pods and new Pods get little traffic;
        or, on old kernels, every reused client port costs a 1 s delay (the first SYN is
        dropped and retransmitted).
    Cause: with net.ipv4.vs.conn_reuse_mode=0 IPVS keeps sending a reused client ip:port to the
        real server of the old (TIME_WAIT) connection, even one with weight 0 that is being
        removed; with conn_reuse_mode=1 and net.ipv4.vs.conntrack=1, kernels before 5.9 drop
        the first SYN of such a connection instead. kube-proxy sets conn_reuse_mode=0 (1.13+)
        and, from 1.22, leaves it alone on kernels 5.9+ where the 1 s delay is fixed.
    How it is detected: the net.ipv4.vs.* sysctls, with IPVS in use (kube-proxy mode ipvs, an
        `ipvsadm` listing, or the sysctls present), the kernel version (uname) and kube-proxy's
        version. conn_reuse_mode=0 is a warning (wrong backends during rollouts); on a kernel
        before 5.9, conn_reuse_mode=1 with conntrack=1 is a warning (1 s delays).
        expire_nodest_conn=0 is mentioned (connections to removed backends linger). Without the
        sysctls: IPVS listings whose real servers hold many inactive (TIME_WAIT) connections on
        a kernel before 5.9 (uname, or RHEL/CentOS 6-7 from the packages' release tags) are a
        low-confidence warning asking for them; so is a load test (ab, hey) whose typical
        connect time sits at the SYN retransmit timer (1 s, 3 s) when kube-proxy's mode is
        IPVS or not given. The connection table (`ipvsadm -Lnc`) proves the reuse itself: a
        connection being opened (SYN_RECV) to a real server the listing shows at weight 0,
        which the scheduler never picks.
    Fix: on kernel 5.9+ set net.ipv4.vs.conn_reuse_mode=1 and run kube-proxy 1.22+ (which no
        longer resets it to 0); on older kernels upgrade the kernel (or a distribution kernel
        with f0a5e4d7a594 backported); keep expire_nodest_conn=1. Avoiding IPVS for the hot
        path (a load balancer straight to Pods, an ingress, a mesh) also avoids it.
    References: https://github.com/kubernetes/kubernetes/issues/81775;
        https://github.com/kubernetes/kubernetes/pull/102122;
        https://github.com/kubernetes/kubernetes/issues/71114;
        https://www.kernel.org/doc/html/latest/networking/ipvs-sysctl.html
    """
    node = facts.node_state
    reuse = node.setting("net.ipv4.vs.conn_reuse_mode")
    opened = _opened_on_draining(facts)
    if reuse is None and opened is not None:
        yield _reused(facts, *opened)
        return
    if reuse is None:
        # ip_vs not loaded (no IPVS, nothing to reuse: proved only by a complete listing without
        # its settings), or its settings were not shown (no listing, or a partial one without any
        # of them: one shown, such as vs.conntrack = 0, decides on its own)
        unknown = not node.shows("net.ipv4.vs.") and node.sysctl_complete is None
        risk = _busy_old_kernel(facts) if unknown else None
        if risk is None and unknown:
            risk = _connects_wait_for_retransmits(facts)
        if risk is not None:
            yield risk
        return
    mode = facts.running_mode.claimed
    if mode is not None and mode[0] != "ipvs" and not facts.has(Kind.IPVSADM):
        return  # the sysctls exist (module loaded) but kube-proxy does not use IPVS
    ct = node.setting("net.ipv4.vs.conntrack")
    nodest = node.setting("net.ipv4.vs.expire_nodest_conn")
    kernel = facts.kernel
    kpv = facts.kube_proxy_version
    fixed_kernel = kernel.value.base[:2] >= REUSE_FIXED_KERNEL if kernel else None
    problems: list[str] = []
    fix: list[str] = []
    if reuse.int() == 0:
        problems.append(
            "net.ipv4.vs.conn_reuse_mode = 0: a reused client port goes to the old connection's backend, even a "
            "terminated Pod (no route to host during rollouts, load pinned to old Pods)"
        )
        if fixed_kernel:
            fix.append("sysctl -w net.ipv4.vs.conn_reuse_mode=1 (kernel 5.9+ has no 1 s penalty for it)")
            if kpv is not None and kpv.value.upstream[:2] < LEAVES_REUSE_MODE:
                fix.append(
                    f"Upgrade kube-proxy ({kpv.value}) to 1.22 or later: older releases set "
                    "conn_reuse_mode=0 again at start."
                )
        elif fixed_kernel is False:
            fix.append(
                f"Upgrade the kernel ({kernel.value if kernel else '?'}) to 5.9 or later (or a distribution "
                'kernel with "ipvs: allow connection reuse for unconfirmed conntrack"), then set '
                "conn_reuse_mode=1 with kube-proxy 1.22+."
            )
        else:
            fix.append(
                "Give uname -r: on kernel 5.9+ set conn_reuse_mode=1 (with kube-proxy 1.22+); older kernels "
                "need an upgrade first."
            )
    elif reuse.int() == 1 and ct is not None and ct.int() == 1 and fixed_kernel is False:
        problems.append(
            "net.ipv4.vs.conn_reuse_mode = 1 with net.ipv4.vs.conntrack = 1 on kernel "
            f"{kernel.value if kernel else '?'}: "
            "the first SYN of a connection reusing a client port is dropped, adding a 1 s delay"
        )
        fix.append("Upgrade the kernel to 5.9 or later (the fix f0a5e4d7a594), keeping conn_reuse_mode=1.")
    if not problems:
        if opened is not None:  # what the connections did outweighs what the settings say now
            yield _reused(facts, *opened)
        return
    if nodest is not None and nodest.int() == 0:
        problems.append("net.ipv4.vs.expire_nodest_conn = 0: connections to removed backends are not expired")
        fix.append("sysctl -w net.ipv4.vs.expire_nodest_conn=1 (kube-proxy sets it in IPVS mode).")
    f = start(
        facts,
        "KP307",
        [],
        confidence=Confidence.HIGH if mode is not None or facts.has(Kind.IPVSADM) else Confidence.MEDIUM,
        summary="IPVS connection reuse: " + "; ".join(problems) + ".",
    )
    f.evidence = [s.cite for s in (reuse, ct, nodest) if s is not None]
    if opened is not None:
        f.summary += f" The connection table shows it: {opened[1]}."
        f.evidence += opened[0]
    if kernel is not None:
        f.evidence.append(kernel.cite)
        f.versions_found["kernel"] = str(kernel.value)
    if kpv is not None:
        f.versions_found["kube-proxy"] = str(kpv.value)
    if mode is not None and mode[1] is not None:
        f.evidence.append(mode[1])
    f.fixed_in = ["kernel 5.9", "kube-proxy v1.22.0"]
    f.fix = fix
    yield f


def _reused(facts: Facts, cites: list[Cite], said: str) -> Finding:
    f = start(facts, "KP307", [], confidence=Confidence.HIGH, summary=f"IPVS connection reuse: {said}.")
    f.summary += (
        " With net.ipv4.vs.conn_reuse_mode=0 (what kube-proxy 1.13-1.21 sets) a client port still in IPVS's table "
        "keeps its old real server, removed Pod or not."
    )
    f.evidence = cites
    f.fixed_in = ["kernel 5.9", "kube-proxy v1.22.0"]
    f.fix = [
        "Check `sysctl net.ipv4.vs.conn_reuse_mode` and `uname -r`: on kernel 5.9+ set it to 1 with kube-proxy 1.22+ "
        "(which no longer resets it); older kernels need an upgrade first.",
    ]
    return f
