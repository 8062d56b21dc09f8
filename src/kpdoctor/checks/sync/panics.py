"""KP106-KP107: kube-proxy panics (nil pointer at IPVS start-up; iptables-save parse panic)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import apply_remedy, kube_proxy_remedy, start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import signature
from kpdoctor.versions import FixRow

NIL_POINTER = signature(
    "panic-nil-pointer",
    "nil pointer dereference",
    r"panic: runtime error: invalid memory address or nil pointer dereference",
)
IPVS_FRAME = signature("stack-frame-ipvs", "kubernetes/pkg/proxy/ipvs", r"k8s\.io/kubernetes/pkg/proxy/ipvs")
SLICE_BOUNDS = signature(
    "panic-slice-bounds",
    "slice bounds out of range",
    r"(Observed a panic: .|panic: runtime error: )slice bounds out of range",
)


def restart_info(facts: Facts) -> list[tuple[int, str, Cite]]:
    """(restart count, last termination, citation) for kube-proxy containers on this node."""
    out = []
    node = facts.node.name if facts.node else None
    for pod in facts.kube_proxy_pods:
        spec_node = (pod.body.get("spec") or {}).get("nodeName")
        if node and spec_node and spec_node != node:
            continue
        for cs in (pod.body.get("status") or {}).get("containerStatuses") or []:
            if not isinstance(cs, dict) or "kube-proxy" not in str(cs.get("name", "")):
                continue
            count = int(cs.get("restartCount") or 0)
            term: dict[str, Any] = ((cs.get("lastState") or {}).get("terminated")) or {}
            desc = ""
            if term:
                reason = term.get("reason") or "terminated"
                desc = f"last exit {term.get('exitCode')} ({reason}) at {term.get('finishedAt')}"
            out.append((count, desc, Cite(pod.artifact, pod.line, f"{pod.ref}: restartCount={count} {desc}".strip())))
    return out


STARTUP_FIXES = [
    FixRow((1, 18), "v1.18.4-tke.26", vendor="tke"),
    FixRow((1, 18), status="unaffected", vendor="tke", above=True),
    FixRow((1, 18), status="unaffected", vendor="tke", below=True),
]


@check(
    "KP106",
    cause="kube-proxy-startup-panic",
    title="kube-proxy panics at start-up (IPVS module probe)",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG],
)
def startup_panic(facts: Facts) -> Iterator[Finding]:
    """kube-proxy crashes with a nil pointer on its first start in IPVS mode, then runs.

    Symptom: `panic: runtime error: invalid memory address or nil pointer dereference` /
        `[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x1514fb8]` right after
        start-up (`Using ipvs Proxier.`), a restart, then normal operation.
    Cause: kube-proxy 1.18.0 forgot to record the kernel modules it loaded while probing for
        IPVS, left the IPVS interface uninitialised and dereferenced it; errors from the probe
        were swallowed, so the log does not say why.
    How it is detected: the nil-pointer panic with IPVS frames in its stack (or IPVS mode)
        before any successful sync, in the current or previous container's log; the Pod's
        restart count and last termination; the kube-proxy version (1.18.x).
    Fix: TKE 1.18: upgrade kube-proxy to v1.18.4-tke.26 or later (other TKE lines are not
        affected). Upstream: take a 1.18 patch release with k/k#89823 and k/k#89785; make sure
        the IPVS modules (ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh, nf_conntrack) are loaded.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/89729;
        https://github.com/kubernetes/kubernetes/pull/89823;
        https://github.com/kubernetes/kubernetes/pull/89785
    """
    panics = facts.log.hits(NIL_POINTER.id)
    if not panics:
        return
    ipvs_frames = facts.log.hits(IPVS_FRAME.id)
    mode = facts.proxy_mode
    ipvs = bool(ipvs_frames) or (mode is not None and mode[0] == "ipvs")
    early = [p for p in panics if not _sync_before(facts, p)]
    if not early:
        return  # a run-time panic is another cause (kube-proxy-panic)
    f = start(
        facts,
        "KP106",
        early,
        confidence=Confidence.HIGH if ipvs else Confidence.MEDIUM,
        summary="kube-proxy crashed with a nil pointer dereference before its first sync.",
        severity=Severity.WARNING,
    )
    if ipvs_frames:
        f.evidence.append(Cite(ipvs_frames[0].artifact, ipvs_frames[0].line, ipvs_frames[0].text))
    if mode and mode[1]:
        f.evidence.append(mode[1])
    restarts = restart_info(facts)
    for count, _desc, c in restarts:
        f.evidence.append(c)
        if count:
            f.summary += f" The container restarted {count} time(s)."
    if facts.log.last_success is not None and all(p.order < facts.log.last_success for p in early):
        f.ongoing = False
        f.summary += " It ran normally after the restart."
    elif f.ongoing:
        f.severity = Severity.CRITICAL
        f.summary += " No successful sync since: kube-proxy may be crash-looping."
    kpv = facts.kube_proxy_version
    if kpv and kpv.value.line == (1, 18) and kpv.value.vendor is None:
        f.summary += " 1.18.0-era builds have this bug (k/k#89729)."
    rem, found, where = kube_proxy_remedy(facts, STARTUP_FIXES)
    apply_remedy(f, rem, found, where)
    f.fix.append("Make sure the IPVS modules are loaded on the node: ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack.")
    yield f


def _sync_before(facts: Facts, hit: Any) -> bool:
    from kpdoctor.facts.log import SYNC_COMPLETE

    same = [h for h in facts.log.hits(SYNC_COMPLETE.id) if h.order[0] == hit.order[0] and h.order < hit.order]
    return bool(same)


SAVE_PANIC_FIXES = [
    FixRow((1, 14), "v1.14.3-tke.27", vendor="tke"),
    FixRow((1, 12), "v1.12.4-tke.31", vendor="tke"),
    FixRow((1, 14), status="unaffected", vendor="tke", above=True),
    FixRow((1, 12), status="unaffected", vendor="tke", below=True),
    FixRow((1, 15), status="unaffected", above=True, note="fixed upstream in 1.15 (k/k#78428)"),
    FixRow((1, 15), "v1.15.0"),
    FixRow((1, 15), status="no-fix", below=True, note="upstream fix k/k#78428 first shipped in 1.15"),
]


@check(
    "KP107",
    cause="iptables-save-parse-panic",
    title="kube-proxy panics parsing iptables-save output",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
)
def save_parse_panic(facts: Facts) -> Iterator[Finding]:
    """kube-proxy panics again and again while parsing iptables-save output.

    Symptom: `Observed a panic: "slice bounds out of range" (runtime error: slice bounds out of
        range)` repeating; kube-proxy restarts or stops syncing.
    Cause: kube-proxy read iptables-save's stdout and stderr into one buffer; when the nft
        backend prints "# Warning: iptables-legacy tables present..." on stderr, it lands in the
        middle of a rule, producing a line kube-proxy's parser cannot slice. Fixed upstream in
        1.15 (k/k#78428). It also means rules exist in both backends (see KP101).
    How it is detected: the panic message in the current or previous container's log; the
        Pod's restart count and last state; the legacy-tables warning in iptables-nft-save.
    Fix: TKE: 1.14 -> v1.14.3-tke.27, 1.12 -> v1.12.4-tke.31 (other lines unaffected).
        Upstream: 1.15 or later. Remove the stale legacy rules so the warning stops.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/78443;
        https://github.com/kubernetes/kubernetes/pull/78428
    """
    hits = facts.log.hits(SLICE_BOUNDS.id)
    if not hits:
        return
    f = start(
        facts,
        "KP107",
        hits,
        confidence=Confidence.HIGH,
        summary='kube-proxy panicked with "slice bounds out of range" while reading iptables-save output.',
        severity=Severity.CRITICAL,
    )
    if any(h.previous for h in hits):
        f.summary += " The previous container died with it."
    for count, _desc, c in restart_info(facts):
        f.evidence.append(c)
        if count:
            f.summary += f" The container has restarted {count} time(s)."
    warn = next((rs for rs in facts.rulesets if rs.legacy_warning_line), None)
    if warn:
        f.evidence.append(
            Cite(
                warn.artifact,
                warn.legacy_warning_line,
                "# Warning: iptables-legacy tables present, use iptables-legacy-save to see them",
            )
        )
        f.summary += " iptables-nft-save on this node prints the legacy-tables warning that triggers it."
    if (f.occurrences or 0) == 1 and f.ongoing is False:
        f.severity = Severity.WARNING
    rem, found, where = kube_proxy_remedy(facts, SAVE_PANIC_FIXES)
    apply_remedy(f, rem, found, where)
    f.fix.append("Remove the KUBE-* rules left in the legacy backend (`iptables-legacy-save`) so the warning stops.")
    yield f
