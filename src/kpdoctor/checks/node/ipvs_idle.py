"""KP318: IPVS forgets idle TCP connections before the clients' keepalive keeps them alive."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.checks.logged import is_error, reading
from kpdoctor.facts import Facts
from kpdoctor.facts.log import logged_messages
from kpdoctor.knowledge import VersionRow, check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.kpconfig import parse_duration

CAUSE = "ipvs-idle-timeout"
# net/netfilter/ipvs/ip_vs_proto_tcp.c tcp_timeouts[IP_VS_TCP_S_ESTABLISHED] = 15*60*HZ
KERNEL_TCP_TIMEOUT = 900
# include/net/tcp.h TCP_KEEPALIVE_TIME (two hours); per network namespace since 4.13
KERNEL_KEEPALIVE = 7200
KEEPALIVE = "net.ipv4.tcp_keepalive_time"
CONFIRM = "ipvsadm -Ln --timeout; ipvsadm -Lnc | grep <Service IP> (the expire column counts an idle entry down)"


def _reset_lines(facts: Facts) -> list[Cite]:
    """Error lines the messages catalogue says may mean this cause (clients' `connection reset
    by peer`: what an expired IPVS entry causes); they back a suspicion, never prove it."""
    out = []
    for lm in logged_messages(facts.log):
        r = reading(lm.match)
        if r is not None and CAUSE in (r.cause, *r.alternatives) and is_error(lm):
            out += [Cite(h.artifact, h.line, h.text) for h in lm.hits[:1]]
    return out


@check(
    "KP318",
    cause=CAUSE,
    title="IPVS drops idle connections sooner than clients keep them alive",
    severity=Severity.WARNING,
    needs=[Kind.IPVSADM, Kind.KUBE_PROXY_CONFIG, Kind.SYSCTL],
    versions=(
        VersionRow(
            "kube-proxy",
            "before 1.18 (no setting: only `ipvsadm --set` changes IPVS's timeouts)",
            "1.18.0 (ipvs.tcpTimeout, tcpFinTimeout, udpTimeout; --ipvs-tcp-timeout)",
            "https://github.com/kubernetes/kubernetes/pull/85517",
        ),
    ),
)
def idle_timeout(facts: Facts) -> Iterator[Finding]:
    """An idle TCP connection through an IPVS Service outlives IPVS's entry for it, and its next packet is reset.

    Symptom: in IPVS mode, long-lived connections through a Service (database pools, gRPC,
        message queues, HTTP keep-alive) fail with `connection reset by peer` or hang on their
        first request after being idle for a while (15 minutes by default); a new connection
        works at once.
    Cause: IPVS keeps its own connection table; an established TCP entry expires after IPVS's
        tcp timeout (900 s, the kernel's default) without a packet. A later packet of that
        connection that is not a SYN is not scheduled again: it goes on to the local stack, where
        nothing listens on the Service address, and the client gets a reset. Clients' TCP
        keepalive starts after net.ipv4.tcp_keepalive_time (7200 s by default), far too late to
        keep the entry.
    How it is detected: kube-proxy runs in IPVS mode (or `ipvsadm` output is given) and IPVS's
        tcp timeout (`ipvsadm -L --timeout`, or kube-proxy's `ipvs.tcpTimeout`, else the kernel's
        900 s) is shorter than the keepalive time (the sysctl, else 7200 s): when the timeouts
        are shown, or clients' reset errors are, a suspected cause (whether the failing
        connections idled that long decides it), at info without such errors.
    Fix: keep connections busier than the timeout: TCP keepalive below it in the clients
        (`net.ipv4.tcp_keepalive_time=600` in the Pods' sysctls, or the client library's own
        keepalive or idle timeout), or raise IPVS's timeout with kube-proxy's `ipvs.tcpTimeout`
        (1.18+, e.g. `2h0m0s`; applied at start) or `ipvsadm --set <tcp> <tcpfin> <udp>` on each
        node (lost on reboot).
    References: https://github.com/kubernetes/kubernetes/issues/84041;
        https://github.com/kubernetes/kubernetes/pull/85517;
        https://github.com/cloudnativelabs/kube-router/issues/521
    """
    timeouts = facts.ipvs_timeouts
    if facts.running_mode.mode != "ipvs" and timeouts is None:
        return
    cfg = facts.kp_config.setting("ipvs.tcpTimeout")
    configured = parse_duration(str(cfg.value)) if cfg.origin in ("flag", "config") and cfg.value else None
    cites: list[Cite] = []
    if timeouts is not None and timeouts[0].tcp > 0:
        tcp, how = timeouts[0].tcp, "ipvsadm says"
        cites.append(Cite(timeouts[1], timeouts[0].line, timeouts[0].text))
    elif configured is not None and configured >= 1:
        tcp, how = int(configured), "kube-proxy's ipvs.tcpTimeout"
        if cfg.source is not None:
            cites.append(Cite(cfg.source.artifact, cfg.source.line, cfg.source.text))
    else:
        tcp, how = KERNEL_TCP_TIMEOUT, "the kernel's default"
    shown = bool(cites)
    keep = facts.node_state.setting(KEEPALIVE)
    keepalive = keep.int() if keep is not None else None
    if keep is not None and keepalive is not None:
        keep_how = KEEPALIVE
        cites.append(keep.cite)
    else:
        keepalive, keep_how = KERNEL_KEEPALIVE, "the kernel's default"
    if tcp >= keepalive:
        return
    resets = _reset_lines(facts)
    if not shown and not resets:
        return  # neither the timeouts nor a reset shown: every IPVS node has these defaults
    f = start(facts, "KP318", [], confidence=Confidence.LOW, severity=Severity.WARNING if resets else Severity.INFO)
    suspect(
        f,
        "IPVS's idle timeout is shorter than the clients' keepalive"
        + ("; clients' connections were reset" if resets else "")
        + "; whether the failing connections were idle that long was not shown",
        [CONFIRM, f"sysctl {KEEPALIVE} (in the client Pod's namespace)"],
    )
    f.summary = (
        f"IPVS forgets an established TCP connection after {tcp} s without a packet ({how}), while TCP keepalive "
        f"starts after {keepalive} s ({keep_how}): a connection through a Service idle for longer is reset on its "
        "next request (its packets are no longer forwarded to the backend)."
    )
    if resets:
        f.summary += " Clients here report connections reset by peer."
    f.evidence = cites + resets[:2]
    f.fixed_in = ["kube-proxy v1.18.0 (ipvs.tcpTimeout)"]
    f.fix = [
        f"Keep connections busier than {tcp} s: TCP keepalive below it in the clients "
        "(`net.ipv4.tcp_keepalive_time=600` as a Pod sysctl, or the client library's keepalive / idle timeout).",
        "Or raise IPVS's timeout: kube-proxy's `ipvs.tcpTimeout` (1.18+, e.g. `2h0m0s`, applied at start) or "
        "`ipvsadm --set <tcp> <tcpfin> <udp>` on every node (lost on reboot).",
    ]
    yield f
