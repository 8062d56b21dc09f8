"""KP106-KP107: kube-proxy panics (nil pointer at IPVS start-up; iptables-save parse panic)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import SYNC_SYMPTOMS, apply_remedy, kube_proxy_remedy, note_version, start, version_rows
from kpdoctor.facts import Facts
from kpdoctor.facts.panics import Panic, panics
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.versions import FixRow

# A nil-pointer panic in each form it is logged: Go's own crash (`panic: runtime error: ...`) and
# the crash handler's, old (`Observed a panic: "invalid memory address ..." (runtime error: ...)`)
# and structured (`"Observed a panic" panic="runtime error: invalid memory address ..."`).
NIL_POINTER = signature(
    "panic-nil-pointer",
    "nil pointer dereference",
    r'(panic: |Observed a panic: "?|"Observed a panic" panic=")(runtime error: )?'
    r"invalid memory address or nil pointer dereference",
)
# The frames of the 1.18 bug: kube-proxy's IPVS proxier using the IPVS interface that the module
# probe left uninitialised (k/k#89729: the first sync, in syncService/syncProxyRules), or the probe
# itself (kernel-module handler, CanUseIPVSProxier, the ipvs util). Not the dual-stack
# metaProxier, not the server's setup: those are other bugs.
IPVS_PROBE_FRAME = lazy_re.compile(
    r"^pkg/proxy/ipvs\.(\(\*Proxier\)\.|\(\*linuxKernelHandler\)\.|CanUseIPVSProxier|NewProxier|NewDualStackProxier)"
    r"|^pkg/util/ipvs\."
)
SLICE_BOUNDS = signature(
    "panic-slice-bounds",
    "slice bounds out of range",
    r"(Observed a panic: .|panic: runtime error: )slice bounds out of range",
)


def restart_info(facts: Facts) -> list[tuple[int, str, Cite]]:
    """(restart count, last termination, citation) for kube-proxy containers on this node."""
    out = []
    node = facts.node.name if facts.node else None
    for pod in facts.cluster.pods(facts.kube_proxy_pods):
        if node and pod.node_name and pod.node_name != node:
            continue
        for cs in pod.container_statuses:
            if "kube-proxy" not in cs.name:
                continue
            term = cs.last_terminated
            desc = ""
            if term:
                reason = term.get("reason") or "terminated"
                desc = f"last exit {term.get('exitCode')} ({reason}) at {term.get('finishedAt')}"
            text = f"{pod.obj.ref}: restartCount={cs.restart_count} {desc}".strip()
            out.append((cs.restart_count, desc, Cite(pod.obj.artifact, pod.obj.line, text)))
    return out


STARTUP_FIXES = [
    FixRow((1, 18), "v1.18.4-tke.26", vendor="tke"),
    FixRow((1, 18), status="unaffected", vendor="tke", above=True),
    FixRow((1, 18), status="unaffected", vendor="tke", below=True),
]


def is_ipvs_probe(p: Panic) -> bool:
    """The 1.18 IPVS-probe bug's stack: an IPVS-proxier/probe top frame, before any sync (an
    uninitialised IPVS interface fails the very first sync; one that synced worked)."""
    return p.top is not None and bool(IPVS_PROBE_FRAME.search(p.top)) and not p.after_sync


@check(
    "KP106",
    cause="kube-proxy-startup-panic",
    title="kube-proxy panics at start-up (IPVS module probe)",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG],
    versions=version_rows(STARTUP_FIXES, "https://github.com/kubernetes/kubernetes/issues/89729"),
)
def startup_panic(facts: Facts) -> Iterator[Finding]:
    """kube-proxy crashes with a nil pointer on its first start in IPVS mode, then runs.

    Symptom: `panic: runtime error: invalid memory address or nil pointer dereference` /
        `[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x1514fb8]` right after
        start-up (`Using ipvs Proxier.`), a restart, then normal operation. The crash handler's
        form says the same: `Observed a panic: "invalid memory address or nil pointer
        dereference"`.
    Cause: kube-proxy 1.18.0 forgot to record the kernel modules it loaded while probing for
        IPVS, left the IPVS interface uninitialised and dereferenced it at the first sync
        (`pkg/proxy/ipvs.(*Proxier).syncService`); errors from the probe were swallowed, so the
        log does not say why.
    How it is detected: a nil-pointer panic whose top kube-proxy stack frames are the IPVS
        proxier or its module probe, before any successful sync of that container (current or
        previous log); the Pod's restart count and last termination; the kube-proxy version.
        Another early nil-pointer panic (a dual-stack service handler, the server's set-up) is
        reported with its frames and without this bug's fix: it is another upstream bug. A
        panic after syncs succeeded is a run-time panic (cause kube-proxy-panic), not this.
    Fix: TKE 1.18: upgrade kube-proxy to v1.18.4-tke.26 or later (other TKE lines are not
        affected). Upstream: take a 1.18 patch release with k/k#89823 and k/k#89785; make sure
        the IPVS modules (ip_vs, ip_vs_rr, ip_vs_wrr, ip_vs_sh, nf_conntrack) are loaded.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/89729;
        https://github.com/kubernetes/kubernetes/pull/89823;
        https://github.com/kubernetes/kubernetes/pull/89785
    """
    found = panics(facts, NIL_POINTER.id)
    early = [p for p in found if not p.after_sync]
    if not early:
        return  # a run-time panic is another cause (kube-proxy-panic)
    probe = [p for p in early if is_ipvs_probe(p)]
    unknown = [p for p in early if p.top is None]
    other = [p for p in early if p.top is not None and not is_ipvs_probe(p)]
    mode = facts.running_mode.claimed
    ipvs_mode = mode is not None and mode[0] == "ipvs"
    kpv = facts.kube_proxy_version
    on_118 = kpv is not None and kpv.value.line == (1, 18)
    # Without frames, only IPVS mode on a 1.18 (or unknown) build makes the probe bug the likely one.
    if probe or (unknown and not other and ipvs_mode and (kpv is None or on_118)):
        chosen = probe or unknown
        f = start(
            facts,
            "KP106",
            [p.hit for p in chosen],
            confidence=Confidence.HIGH if probe else Confidence.MEDIUM,
            summary="kube-proxy crashed with a nil pointer dereference before its first sync"
            + (
                f", in the IPVS proxier ({chosen[0].top})."
                if probe
                else " in IPVS mode; the log has no stack frames to confirm the IPVS module-probe bug "
                "(add the whole panic)."
            ),
            severity=Severity.WARNING,
        )
        _cite_frames(f, chosen[0])
        attributed = True
    else:
        chosen = other or unknown
        top = chosen[0].top
        f = start(
            facts,
            "KP106",
            [p.hit for p in chosen],
            confidence=Confidence.LOW,
            summary=(
                f"kube-proxy crashed with a nil pointer dereference before its first sync, in {top}"
                + (f" (called from {chosen[0].frames[1].groups[0]})" if len(chosen[0].frames) > 1 else "")
                + ": not the 1.18 IPVS module-probe bug (k/k#89729), whose fix does not apply here."
                if top
                else "kube-proxy crashed with a nil pointer dereference before its first sync; the log has no "
                "stack frames to tell which code crashed (add the whole panic, with its goroutine stack)."
            ),
            severity=Severity.WARNING,
        )
        _cite_frames(f, chosen[0])
        f.explained_by = ["kube-proxy-panic"]  # a run-time-panic check that names the bug wins
        attributed = False
    if mode and mode[1]:
        f.evidence.append(mode[1])
    restarts = restart_info(facts)
    for count, _desc, c in restarts:
        f.evidence.append(c)
        if count:
            f.summary += f" The container restarted {count} time(s)."
    hits = [p.hit for p in chosen]
    if facts.log.last_success is not None and all(h.order < facts.log.last_success for h in hits):
        f.ongoing = False
        f.summary += " It ran normally after the restart."
    elif f.ongoing:
        f.severity = Severity.CRITICAL
        f.summary += " No successful sync since: kube-proxy may be crash-looping."
    if attributed:
        if kpv and on_118 and kpv.value.vendor is None:
            f.summary += " 1.18.0-era builds have this bug (k/k#89729)."
        rem, found_versions, where = kube_proxy_remedy(facts, STARTUP_FIXES)
        apply_remedy(f, rem, found_versions, where)
        f.fix.append(
            "Make sure the IPVS modules are loaded on the node: ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack."
        )
    else:
        note_version(f, kpv, "kube-proxy")
        frame = f" ({chosen[0].top})" if chosen[0].top else ""
        f.fix = [
            f"Look up the top kube-proxy frame{frame} in kube-proxy's upstream issues for "
            f"{kpv.value if kpv else 'this version'} and move to a patch release that fixes it.",
            "Keep the whole panic (every frame of the panicking goroutine) when reporting it.",
        ]
    yield f


def _cite_frames(f: Finding, p: Panic) -> None:
    for fr in p.frames[:2]:
        c = Cite(fr.artifact, fr.line, fr.text)
        if c not in f.evidence:
            f.evidence.append(c)


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
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_SAVE],
    explains=SYNC_SYMPTOMS,
    versions=version_rows(SAVE_PANIC_FIXES, "https://github.com/kubernetes/kubernetes/pull/78428"),
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
        Without the panic, a dump in which the warning is spliced into a rule is the corruption
        itself: a finding by kube-proxy's version (before 1.15 it panics on it; unknown: said
        so; 1.15 and later read stderr apart and are not affected).
    Fix: TKE: 1.14 -> v1.14.3-tke.27, 1.12 -> v1.12.4-tke.31 (other lines unaffected).
        Upstream: 1.15 or later. Remove the stale legacy rules so the warning stops.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/78443;
        https://github.com/kubernetes/kubernetes/pull/78428
    """
    hits = facts.log.hits(SLICE_BOUNDS.id)
    if not hits:
        yield from _spliced_dump(facts)
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


def _spliced_dump(facts: Facts) -> Iterator[Finding]:
    """No panic in the evidence, but the output that causes it: the warning inside a rule."""
    spliced = next((rs for rs in facts.rulesets if rs.legacy_warning_spliced and rs.legacy_warning_line), None)
    if spliced is None or spliced.legacy_warning_line is None or spliced.legacy_warning_spliced is None:
        return
    kpv = facts.kube_proxy_version
    if kpv is not None and kpv.value.line >= (1, 15):
        return  # it reads iptables-save's stderr apart: the splice is the user's own 2>&1
    f = start(
        facts,
        "KP107",
        [],
        confidence=Confidence.HIGH if kpv is not None else Confidence.MEDIUM,
        severity=Severity.CRITICAL if kpv is not None else Severity.WARNING,
        summary="iptables-save output with its stderr warning ('iptables-legacy tables present') spliced into a "
        "rule: kube-proxy before 1.15 reads both streams as one and panics on such a line "
        '("slice bounds out of range"), sync after sync.'
        + ("" if kpv is not None else " kube-proxy's version is not in the evidence: send `kube-proxy --version`."),
    )
    f.evidence.append(Cite(spliced.artifact, spliced.legacy_warning_line, spliced.legacy_warning_spliced))
    rem, found, where = kube_proxy_remedy(facts, SAVE_PANIC_FIXES)
    apply_remedy(f, rem, found, where)
    f.fix.append("Remove the KUBE-* rules left in the legacy backend (`iptables-legacy-save`) so the warning stops.")
    yield f
