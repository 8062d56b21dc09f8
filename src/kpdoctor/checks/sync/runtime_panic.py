"""KP115: kube-proxy panics with a known upstream bug (other than the IPVS-probe and
iptables-save parse panics, KP106 and KP107)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, note_version, start
from kpdoctor.checks.sync.panics import IPVS_PROBE_FRAME, restart_info
from kpdoctor.facts import Facts
from kpdoctor.facts.log import is_other_writer
from kpdoctor.facts.panics import Panic, panics
from kpdoctor.knowledge import VersionRow, check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.versions import KubeVersion


@dataclass(frozen=True, slots=True)
class KnownPanic:
    """One upstream panic: how its message and top kube-proxy frames look, who has it, the fix."""

    name: str
    message: re.Pattern[str]
    frames: re.Pattern[str] | None  # the top kube-proxy frame must match (None: any)
    affected: tuple[str, str]  # first and last affected upstream release
    releases: str  # the affected releases as people name them
    fixed: tuple[str, ...]  # first fixed release per line
    what: str
    fix: str
    reference: str
    mode: str | None = None  # the proxy mode it happens in, when only one


NIL = lazy_re.compile(r"nil pointer dereference")
KNOWN_PANICS: tuple[KnownPanic, ...] = (
    KnownPanic(
        "cleanup-without-exit",
        NIL,
        lazy_re.compile(r"^cmd/kube-proxy/app\.\(\*ProxyServer\)\.Run$"),
        ("v1.7.0-alpha.3", "v1.7.0-rc.1"),
        "1.7.0-alpha.3 to 1.7.0-rc.1",
        ("v1.7.0",),
        "kube-proxy run with --cleanup-iptables (or --cleanup) lost the flag and went on to run a "
        "ProxyServer without its event client, dereferencing it",
        "Use kube-proxy v1.7.0 or later for clean-up runs.",
        "https://github.com/kubernetes/kubernetes/issues/48177",
    ),
    KnownPanic(
        "ipvs-zero-sync-period",
        lazy_re.compile(r"non-positive interval for NewTicker"),
        None,
        ("v1.8.0", "v1.8.99"),
        "1.8.x with a config file written by --write-config-to (k/k#55886 is still open)",
        (),
        "in IPVS mode kube-proxy hands ipvs.syncPeriod to time.NewTicker; a config file written by "
        "--write-config-to carries `syncPeriod: 0s`, and a zero interval panics",
        "Set `ipvs.syncPeriod` (for example 30s) and `ipvs.minSyncPeriod` in the KubeProxyConfiguration.",
        "https://github.com/kubernetes/kubernetes/issues/55864",
        mode="ipvs",
    ),
    KnownPanic(
        "dual-stack-service-family",
        NIL,
        lazy_re.compile(r"\.\(\*metaProxier\)\.On(Service|Endpoints?|EndpointSlice)"),  # pkg/proxy/ipvs in 1.17
        ("v1.17.0", "v1.18.99"),
        "1.17 and 1.18",
        ("v1.19.0",),
        "with the IPv6DualStack gate on in kube-proxy but not in the apiserver, Services carry no "
        "spec.ipFamily and the dual-stack meta-proxier dereferences it in its handler",
        "Turn the IPv6DualStack feature gate on (or off) in the apiserver and kube-proxy alike, or "
        "take kube-proxy 1.19 or later, which infers the family from the ClusterIP (k/k#91357).",
        "https://github.com/kubernetes/kubernetes/issues/86773",
    ),
)


def classify(p: Panic, mode: str | None) -> KnownPanic | None:
    """The known bug a panic is, from its message and top kube-proxy frames."""
    for k in KNOWN_PANICS:
        if not k.message.search(p.message):
            continue
        if k.frames is not None and (p.top is None or not k.frames.search(p.top)):
            continue
        if k.mode is not None and mode is not None and mode != k.mode:
            continue
        return k
    return None


def _affected(k: KnownPanic, v: KubeVersion | None) -> bool | None:
    if v is None:
        return None
    lo, hi = (KubeVersion.parse(x) for x in k.affected)
    if lo is None or hi is None:
        return None
    return lo.upstream <= v.upstream <= hi.upstream


@check(
    "KP115",
    cause="kube-proxy-panic",
    title="kube-proxy crashes with a known panic",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=("kube-proxy-startup-panic", *RESTORE_SYMPTOMS),
    versions=tuple(VersionRow("kube-proxy", k.releases, ", ".join(k.fixed), k.reference) for k in KNOWN_PANICS),
)
def runtime_panic(facts: Facts) -> Iterator[Finding]:
    """kube-proxy panics in a way an upstream bug explains, and restarts or stops syncing.

    Symptom: `panic: runtime error: invalid memory address or nil pointer dereference` (or
        `panic: non-positive interval for NewTicker`, `Observed a panic: ...`) followed by a
        goroutine stack through kube-proxy's code; the Pod restarts (CrashLoopBackOff) or the
        Service handlers stop, so rules go stale.
    Cause: a kube-proxy bug. Known ones (table KNOWN_PANICS, each with its releases): the
        clean-up run that does not exit (1.7.0 pre-releases, k/k#48177); IPVS mode with a
        zero `ipvs.syncPeriod` from a generated config file (1.8, k/k#55864); the dual-stack
        meta-proxier with Services that have no IP family (1.17-1.18, k/k#86773).
    How it is detected: every panic in the log (each form: Go's crash, the crash handler's old
        and structured lines) with the first kube-proxy frames below it, matched against the
        table by message, frames and proxy mode; the kube-proxy version says whether the
        release is affected. A panic with kube-proxy frames that no row explains is reported
        at low confidence with its frames. The 1.18 IPVS module-probe crash (KP106) and the
        iptables-save parse panic (KP107) have their own checks; another program's panic
        (a network-policy controller in the same binary) is not kube-proxy's.
    Fix: the row's fix: a release that has the fix, or the configuration that avoids it.
        Keep the whole panic (every frame of the panicking goroutine) when reporting a new one.
    References: https://github.com/kubernetes/kubernetes/issues/48177;
        https://github.com/kubernetes/kubernetes/issues/55864;
        https://github.com/kubernetes/kubernetes/issues/86773
    """
    mode_seen = facts.running_mode.claimed
    mode = mode_seen[0] if mode_seen else None
    kpv = facts.kube_proxy_version
    known: list[tuple[Panic, KnownPanic]] = []
    unknown: list[Panic] = []
    for p in panics(facts):
        if is_other_writer(p.hit) and not p.frames:
            continue  # another program's crash (its line says whose)
        if "slice bounds out of range" in p.message:
            continue  # KP107
        k = classify(p, mode)
        if k is not None:
            known.append((p, k))
        elif p.top is not None and not (IPVS_PROBE_FRAME.search(p.top) and not p.after_sync):
            unknown.append(p)
    if known:
        p, k = known[0]
        same = [q for q, kk in known if kk is k]
        affected = _affected(k, kpv.value if kpv else None)
        f = start(facts, "KP115", [q.hit for q in same], confidence=Confidence.HIGH)
        f.summary = f"kube-proxy panicked ({p.message})"
        f.summary += f" in {p.top}" if p.top else ""
        f.summary += f": a known bug: {k.what} (k/k#{k.reference.rsplit('/', 1)[-1]}; releases {k.releases})."
        if affected is False and kpv is not None:
            f.confidence = Confidence.MEDIUM
            f.summary += f" kube-proxy {kpv.value} is outside the releases known to have it."
        elif affected and kpv is not None:
            f.summary += f" kube-proxy {kpv.value} is one of them."
        f.fix = [k.fix]
        f.fixed_in = list(k.fixed)
        if k.reference not in f.references:
            f.references.append(k.reference)
    elif unknown:
        p = unknown[0]
        f = start(facts, "KP115", [q.hit for q in unknown], confidence=Confidence.LOW)
        f.summary = (
            f"kube-proxy panicked ({p.message}) in {p.top}"
            + (f", called from {p.frames[1].groups[0]}" if len(p.frames) > 1 else "")
            + ": not a panic in kpdoctor's table of known bugs."
        )
        f.fix = [
            f"Look up the top kube-proxy frame ({p.top}) in kube-proxy's upstream issues for "
            f"{kpv.value if kpv else 'this version'} and move to a patch release that fixes it.",
            "Keep the whole panic (every frame of the panicking goroutine) when reporting it.",
        ]
    else:
        return
    for fr in p.frames[:2]:
        c = Cite(fr.artifact, fr.line, fr.text, fr.writer)
        if c not in f.evidence:
            f.evidence.append(c)
    if mode_seen and mode_seen[1] and mode_seen[1] not in f.evidence:
        f.evidence.append(mode_seen[1])
    note_version(f, kpv, "kube-proxy")
    for count, _desc, c in restart_info(facts):
        f.evidence.append(c)
        if count:
            f.summary += f" The container restarted {count} time(s)."
    if f.ongoing is False:
        f.severity = Severity.WARNING
        f.summary += " Syncs succeeded after it."
    yield f
