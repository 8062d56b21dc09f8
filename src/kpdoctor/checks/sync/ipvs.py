"""KP110 and KP113: IPVS mode: the graceful-termination deadlock; missing prerequisites."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, note_version, start, suspect
from kpdoctor.checks.sync.conntrack_binary import CONNTRACK_MISSING
from kpdoctor.checks.sync.kernel_features import MODPROBE_MISSING
from kpdoctor.facts import Facts, Versioned
from kpdoctor.facts.log import SYNC_COMPLETE
from kpdoctor.knowledge import VersionRow, check, messages, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import KernelVersion, KubeVersion

GT_DELETE_RS = signature(
    "ipvs-gt-trying-delete-rs",
    "graceful_termination.go",
    r"graceful_termination\.go:[0-9]+\] Trying to delete rs: ([^ ]+)",
)
GT_DELETE_FAILED = signature(
    "ipvs-gt-delete-rs-failed",
    "graceful_termination.go",
    r"graceful_termination\.go:[0-9]+\] Try delete rs .* err: ",
)
GT_ERRORS = signature(
    "ipvs-gt-flush-error",
    "graceful_termination.go",
    r"graceful_termination\.go:[0-9]+\] Try flush graceful termination list err",
)
# The IPVS library's answer when a netlink reply it waited for held no service: for a virtual
# server the proxier itself keeps, the reply went to the other goroutine sharing the socket
# (graceful termination), the race that ends in the deadlock (k/k#71071, lbernail's analysis).
NETLINK_EMPTY_REPLY = signature(
    "ipvs-netlink-empty-reply",
    "Expected only one service obtained=0",
    r"Failed to (get IPVS service|sync endpoint for service).*Expected only one service obtained=0",
)

# (affected first, affected last, fixed) per release line; k/k#71071, lbernail 2019-03-09.
DEADLOCK_RANGES = {
    (1, 11): ("v1.11.5", "v1.11.6", "v1.11.7"),
    (1, 12): ("v1.12.2", "v1.12.4", "v1.12.5"),
    (1, 13): ("v1.13.0", "v1.13.1", "v1.13.2"),
}


AFFECTED_TEXT = ", ".join(f"{lo[1:]}-{hi[1:]}" for lo, hi, _ in DEADLOCK_RANGES.values())
FIXED = [fixed for _, _, fixed in DEADLOCK_RANGES.values()]
FIXED_TEXT = ", ".join(fixed[1:] for fixed in FIXED)


def deadlock_affected(v: KubeVersion) -> tuple[bool | None, str | None]:
    """(affected?, fixed release) for the graceful-termination deadlock."""
    rng = DEADLOCK_RANGES.get(v.line)
    if rng is None:
        return (False, None) if v.line > (1, 13) or v.line < (1, 11) else (None, None)
    lo, hi, fixed = (KubeVersion.parse(x) for x in rng)
    assert lo and hi and fixed
    if v.vendor is not None:
        return (None if lo.upstream <= v.upstream <= hi.upstream else False), str(fixed)
    return lo.upstream <= v.upstream <= hi.upstream, str(fixed)


def _service_ips_with_endpoints(facts: Facts) -> set[str]:
    """ClusterIPs of Services that have at least one ready endpoint in the evidence."""
    cl = facts.cluster
    ready = {s.service for s in cl.slices + cl.endpoints if s.service and any(e.ready for e in s.endpoints)}
    return {ip for svc in cl.services if svc.key in ready for ip in svc.cluster_ips}


@check(
    "KP110",
    cause="ipvs-sync-deadlock",
    title="kube-proxy's IPVS sync is deadlocked",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPVSADM],
    explains=RESTORE_SYMPTOMS,
    versions=tuple(
        VersionRow("kube-proxy", f"{lo} to {hi}", fixed, "https://github.com/kubernetes/kubernetes/issues/71071")
        for lo, hi, fixed in DEADLOCK_RANGES.values()
    ),
)
def ipvs_sync_deadlock(facts: Facts) -> Iterator[Finding]:
    """kube-proxy (IPVS) stops updating virtual servers: the graceful-termination deadlock.

    Symptom: after hours of uptime some Services stop working: `ipvsadm -Ln` shows virtual
        servers with no real servers (`TCP 10.108.62.55:5473 rr` and nothing under it) while
        their Pods are ready; kube-proxy's log only repeats `graceful_termination.go:160]
        Trying to delete rs: 10.96.0.1:443/TCP/10.130.29.80:6443` every minute.
    Cause: kube-proxy 1.11.5-1.11.6, 1.12.2-1.12.4 and 1.13.0-1.13.1 let the proxier and the
        graceful-termination manager use one netlink socket concurrently; they deadlock and
        the sync loop never runs again.
    How it is detected: repeating graceful-termination lines with no sync completing after
        them; a kube-proxy version in the affected ranges; virtual servers without real
        servers for Services that have ready endpoints; netlink replies that came back empty
        for a virtual server the proxier keeps (`Failed to get IPVS service, error: Expected
        only one service obtained=0`), the race itself, a warning with low confidence alone.
    Fix: upgrade kube-proxy to 1.11.7, 1.12.5, 1.13.2 or later, or run the affected version in
        iptables mode; restart kube-proxy now to resume syncing.
    References: seed 001; https://github.com/kubernetes/kubernetes/issues/71071;
        https://github.com/kubernetes/kubernetes/pull/72361
    """
    gt = facts.log.hits(GT_DELETE_RS.id, GT_DELETE_FAILED.id, GT_ERRORS.id)
    vss = facts.ipvs_virtual_servers
    ready_ips = _service_ips_with_endpoints(facts)
    empty = [(vs, a) for vs, a in vss if not vs.reals and vs.protocol != "FWM"]
    empty_with_eps = [(vs, a) for vs, a in empty if vs.address.rsplit(":", 1)[0].strip("[]") in ready_ips]
    kpv = facts.kube_proxy_version
    affected, fixed = deadlock_affected(kpv.value) if kpv else (None, None)
    syncs_after = bool(gt) and any(h.order > gt[-1].order for h in facts.log.hits(*SYNC_COMPLETE.ids))
    stalled = facts.log.count(GT_DELETE_RS.id, GT_DELETE_FAILED.id, GT_ERRORS.id) >= 3 and not syncs_after
    lost = facts.log.hits(NETLINK_EMPTY_REPLY.id)
    if not gt and not affected:
        if lost and affected is None:
            yield _race_only(facts, lost, kpv)
        return  # an empty virtual server alone is no deadlock evidence (KP208 reads it)
    if affected is False and not empty_with_eps:
        return
    if not (stalled or empty or affected):
        return
    if gt:
        f = start(facts, "KP110", gt, confidence=Confidence.MEDIUM, severity=Severity.CRITICAL)
        f.summary = f"kube-proxy's log repeats graceful-termination deletions ({f.occurrences} lines)"
        f.summary += " with no sync completing after them." if stalled else "."
        f.ongoing = True if stalled else f.ongoing
    else:
        f = start(facts, "KP110", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    if empty:
        shown = empty_with_eps or empty
        f.summary += f" {len(shown)} IPVS virtual server(s) have no real servers"
        f.summary += " although their Services have ready endpoints." if empty_with_eps else "."
        for vs, a in shown[:4]:
            f.evidence.append(Cite(a, vs.line, vs.text))
        if empty_with_eps:
            f.confidence = max(f.confidence, Confidence.MEDIUM)
            f.severity = Severity.CRITICAL
    if kpv:
        f.versions_found["kube-proxy"] = str(kpv.value)
        f.evidence.append(kpv.cite)
        if affected:
            f.confidence = Confidence.HIGH
            f.summary += f" kube-proxy {kpv.value} is in the affected range."
    if fixed:
        f.fixed_in.append(fixed)
    else:
        f.fixed_in += FIXED
    f.fix = [
        (f"Upgrade kube-proxy to {fixed} or later" if fixed else f"Upgrade kube-proxy to {FIXED_TEXT} or later")
        + ", or run the affected version in iptables mode.",
        "Restart kube-proxy now to resume syncing (the deadlock does not clear by itself).",
    ]
    yield f


IPSET_MISSING = messages("ipvs-ipset-missing", "kube-proxy/ipvs-get-ipset-version-failed")
IPVS_FALLBACK = messages("ipvs-fallback-to-iptables", "kube-proxy/server-ipvs-fallback-to-iptables")
IPVS_CANT_USE = messages(
    "ipvs-cannot-use", "kube-proxy/server-cant-use-ipvs-proxier", "kube-proxy/server-cant-use-ipvs-proxier-fatal"
)
IPVS_MODULES = messages(
    "ipvs-modules-not-loaded",
    "kube-proxy/ipvs-required-modules-not-loaded",
    "kube-proxy/util-ipvs-preflight-modules-not-loaded",
    "kube-proxy/util-ipvs-preflight-modules-not-loaded-1-12",
)
# The kernel refuses a virtual server whose scheduler module it cannot load with ENOENT
# (ip_vs_ctl.c, ip_vs_add_service: "Scheduler module ip_vs_<name> not found"); kube-proxy only
# prints the errno, for every Service, sync after sync.
IPVS_ADD_ENOENT = signature(
    "ipvs-add-service-enoent",
    "Failed to add IPVS service",
    r"Failed to add IPVS service.*: no such file or directory",
    failure=True,
)
IPVS_SCHEDULER_MISSING = signature(
    "ipvs-scheduler-module-missing", "IPVS: Scheduler module", r"IPVS: Scheduler module (ip_vs_[A-Za-z0-9_]+) not found"
)
IPVS_MODULES_BASE = ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh")
# the kernel option that builds each (net/netfilter/ipvs/Kconfig)
IPVS_OPTIONS = {m: f"CONFIG_{m.upper()}" for m in IPVS_MODULES_BASE}
# The modules kube-proxy's IPVS mode loads and requires (pkg/proxy/ipvs: ipvsModules and the
# scheduler's ip_vs_*): nf_conntrack_ipv4 until Linux 4.19 merged it into nf_conntrack, which
# kube-proxy asks for on 4.19+ only since kubernetes#70398 (1.13.0; backported to the 1.11 and
# 1.12 lines in March 2019, kubernetes#75241 and #75242): older ones give up IPVS there.
_IPVS_MODULE = lazy_re.compile(r"^(?:ip_vs(?:_[a-z]+)?|nf_conntrack(?:_ipv4)?)$")
CONNTRACK_IPV4_MERGED = (4, 19)
CONNTRACK_IPV4_FIXED_LINE = (1, 13)
CONNTRACK_IPV4_BACKPORTED = (1, 11)  # the 1.11 and 1.12 lines: fixed from a patch release on


@check(
    "KP113",
    cause="ipvs-prerequisites-missing",
    title="IPVS mode requested but its prerequisites are missing",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.MODULES, Kind.KERNEL_CONFIG],
    partly=[Kind.KERNEL_CONFIG],  # the IPVS modules it cannot load, not the binaries or the fallback
)
def ipvs_prerequisites(facts: Facts) -> Iterator[Finding]:
    """IPVS mode was asked for, but ipset/conntrack binaries or ip_vs modules are missing.

    Symptom: kube-proxy configured for IPVS programs iptables instead (`Can't use ipvs proxier,
        trying iptables proxier`, before 1.26) or exits (1.26+); `ipvsadm -Ln` is empty on that
        node; some nodes behave differently from others.
    Cause: IPVS mode needs the `ipset` binary, the ip_vs kernel modules (ip_vs, ip_vs_rr,
        ip_vs_wrr, ip_vs_sh, nf_conntrack) and, before 1.32, the `conntrack` binary for UDP
        clean-up. A node image or a hand-copied binary without them makes kube-proxy fall back.
    How it is detected: "error getting ipset version", the fallback message, "required kernel
        modules are not loaded", and "path of conntrack ... executable file not found" in the
        log, compared with the mode kube-proxy was configured for; /proc/modules when given;
        modprobe's own refusal of one of these modules (`modprobe: FATAL: Module ip_vs_sh not
        found in directory /lib/modules/...`); the kernel's build configuration (a config file or
        `check-config`) without the option that builds one (`# CONFIG_IP_VS is not set`), which
        no modprobe can get past. On Linux 4.19+ nf_conntrack_ipv4 is missing by
        design (merged into nf_conntrack): only kube-proxy before 1.13 (and the 1.11 and 1.12
        patch releases before March 2019's backport) asks for it, so that refusal is suspected
        until kube-proxy's version says, and nothing for 1.13+.
        The module-probe warnings kube-proxy prints in iptables mode are ignored.
    Fix: install ipset and conntrack (conntrack-tools) on the node or use an image that ships
        them; load the modules (`modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack`
        and persist them in /etc/modules-load.d); restart kube-proxy and check
        `curl localhost:10249/proxyMode` says ipvs.
    References: seed 003; https://github.com/kubernetes/kubernetes/issues/89729 (module list);
        https://github.com/kubernetes/kubernetes/pull/111806 (no fallback from 1.26)
    """
    cfg_mode = facts.kp_config.setting("mode")
    requested_ipvs = str(cfg_mode.value or "").lower() == "ipvs"
    running = facts.running_mode.claimed
    hits = facts.log.hits(
        *IPSET_MISSING.ids, *IPVS_FALLBACK.ids, *IPVS_CANT_USE.ids, *IPVS_MODULES.ids, IPVS_SCHEDULER_MISSING.id
    )
    enoent = facts.log.hits(IPVS_ADD_ENOENT.id)
    hits = hits + enoent
    conntrack = facts.log.hits(CONNTRACK_MISSING.id)
    fell_back = requested_ipvs and running is not None and running[0] != "ipvs" and running[1] is not None
    mods = facts.modules
    missing_mods = (
        [m for m in IPVS_MODULES_BASE if mods is not None and m not in mods] if (requested_ipvs or hits) else []
    )
    # missing from /proc/modules is not missing from the kernel when built in: ip_vs's own settings
    # (net.ipv4.vs.*) in a complete sysctl listing decide
    ipvs_proved = facts.module_inactive("ip_vs", "net.ipv4.vs.", (IPVS_OPTIONS["ip_vs"],))
    if ipvs_proved is False:
        missing_mods = [m for m in missing_mods if m != "ip_vs"]
    # the kernel's build configuration: a module built neither in nor as one cannot be loaded
    unbuilt = {m: c for m in IPVS_MODULES_BASE if (c := _unbuilt(facts, m)) is not None}
    if requested_ipvs or hits:
        missing_mods = list(dict.fromkeys([*missing_mods, *unbuilt]))
    if not hits and not fell_back and not (requested_ipvs and missing_mods):
        refused = _modprobe_refusals(facts)
        if refused is not None:
            yield refused
        return
    if not requested_ipvs and not hits and running and running[0] == "iptables":
        return
    f = (
        start(facts, "KP113", hits or conntrack, confidence=Confidence.HIGH, severity=Severity.CRITICAL)
        if (hits or conntrack)
        else start(
            facts,
            "KP113",
            [],
            confidence=Confidence.MEDIUM if fell_back or ipvs_proved else Confidence.LOW,
            severity=Severity.CRITICAL if fell_back or ipvs_proved else Severity.WARNING,
        )
    )
    if not hits and not conntrack and not fell_back and not ipvs_proved:
        f.confidence_reason = (
            "modules missing from /proc/modules only: built-in ones are not listed there (a complete "
            "`sysctl -a` without net.ipv4.vs.*, or /lib/modules/$(uname -r)/modules.builtin, decides)"
        )
    what: list[str] = []
    if facts.log.count(*IPSET_MISSING.ids):
        what.append("the ipset binary")
    if conntrack:
        what.append("the conntrack binary")
        c = Cite(conntrack[0].artifact, conntrack[0].line, conntrack[0].text)
        if c not in f.evidence:
            f.evidence.append(c)
    if enoent or facts.log.count(IPVS_SCHEDULER_MISSING.id):
        sched = str(facts.kp_config.setting("ipvs.scheduler").value or "") or "rr"
        what.append(
            f"its scheduler module (ip_vs_{sched}: the kernel answers ENOENT to every new virtual server "
            f"without it; {facts.log.count(IPVS_ADD_ENOENT.id)} 'Failed to add IPVS service' line(s))"
        )
    elif facts.log.count(*IPVS_MODULES.ids) or missing_mods:
        what.append("IPVS kernel modules" + (f" ({', '.join(missing_mods)})" if missing_mods else ""))
    f.summary = "IPVS mode is missing " + (" and ".join(what) if what else "a prerequisite") + "."
    if cfg_mode.origin in ("flag", "config") and cfg_mode.source:
        f.evidence.append(Cite(cfg_mode.source.artifact, cfg_mode.source.line, cfg_mode.source.text))
    if running and running[1] and running[1] not in f.evidence:
        f.evidence.append(running[1])
    if fell_back or facts.log.count(*IPVS_FALLBACK.ids):
        f.summary += f" kube-proxy was configured for ipvs but runs in {running[0] if running else 'iptables'} mode."
    for m in missing_mods:
        if m in unbuilt and unbuilt[m] not in f.evidence:
            f.evidence.append(unbuilt[m])
    if requested_ipvs and "ip_vs" in unbuilt and not hits:
        f.confidence, f.severity = Confidence.HIGH, Severity.CRITICAL
        f.confidence_reason = (
            "kube-proxy is configured for IPVS and the kernel's build configuration has no ip_vs: IPVS cannot run"
        )
    f.fix = ["Install ipset and conntrack (conntrack-tools) on the node, or use a kube-proxy image that ships them."]
    if unbuilt and any(m in unbuilt for m in missing_mods):
        f.fix.append(
            "The kernel was built without "
            + ", ".join(m for m in missing_mods if m in unbuilt)
            + " (its build configuration): no modprobe can load them; boot a kernel built with CONFIG_IP_VS and "
            "its schedulers (=m or =y), or run kube-proxy in iptables (or nftables) mode on this node."
        )
    elif mods is None or missing_mods:
        f.fix.append(
            "Load the modules: `modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack` "
            "and persist them in /etc/modules-load.d/."
        )
    f.fix.append("Restart kube-proxy and confirm `curl -s localhost:10249/proxyMode` prints ipvs.")
    yield f


def _unbuilt(facts: Facts, module: str) -> Cite | None:
    """The line of the kernel's build configuration that shows ``module`` not built, if one does."""
    value, cite = facts.kernel_option(IPVS_OPTIONS[module])
    return cite if value == "n" else None


def _modprobe_refusals(facts: Facts) -> Finding | None:
    """modprobe cannot find a module kube-proxy's IPVS mode requires (`modprobe: FATAL: Module
    ip_vs_sh not found in directory /lib/modules/5.10.0-...`): the kernel does not have it, and
    kube-proxy gives up IPVS (before 1.26 it falls back to iptables, from 1.26 it exits). On
    Linux 4.19+ nf_conntrack_ipv4 no longer exists (merged into nf_conntrack): only kube-proxy
    older than the fix asks for it, so that refusal is suspected until kube-proxy's version says."""
    refused = [h for h in facts.log.hits(MODPROBE_MISSING.id) if _IPVS_MODULE.match(h.groups[0] or "")]
    if not refused:
        return None
    h = refused[-1]
    module, directory = h.groups[0] or "", h.groups[1] or ""
    kernel = KernelVersion.parse(directory.rstrip("/").rsplit("/", 1)[-1])
    kpv = facts.kube_proxy_version
    if module != "nf_conntrack_ipv4" or kernel is None or kernel.base[:2] < CONNTRACK_IPV4_MERGED:
        f = start(facts, "KP113", refused, confidence=Confidence.HIGH, severity=Severity.CRITICAL)
        f.summary = (
            f"The kernel has no {module} module (modprobe: not found in {directory}): kube-proxy's IPVS mode "
            "requires it, and without it kube-proxy does not run in IPVS mode (before 1.26 it falls back to "
            "iptables, from 1.26 it exits)."
        )
        f.fix = [
            f"Use a kernel that builds {module} (CONFIG_IP_VS and its schedulers), or load it if it is shipped "
            "separately (the distribution's extra-modules package); then restart kube-proxy and confirm "
            "`curl -s localhost:10249/proxyMode` prints ipvs."
        ]
        return f
    if kpv is not None and kpv.value.line >= CONNTRACK_IPV4_FIXED_LINE:
        return None  # this kube-proxy asks for nf_conntrack there: the refusal is harmless
    old = kpv is not None and kpv.value.line < CONNTRACK_IPV4_BACKPORTED  # no fix in its line
    f = start(
        facts,
        "KP113",
        refused,
        confidence=Confidence.HIGH if old else Confidence.LOW,
        severity=Severity.CRITICAL if old else Severity.WARNING,
    )
    f.summary = (
        f"Kernel {kernel.raw} has no nf_conntrack_ipv4 module: Linux 4.19 merged it into nf_conntrack. kube-proxy "
        "before the fix (1.13.0, and the 1.11 and 1.12 patch releases of March 2019) requires nf_conntrack_ipv4 for "
        "IPVS mode, says the required kernel modules are not loaded, and falls back to iptables."
    )
    note_version(f, kpv, "kube-proxy")
    if not old:
        suspect(
            f,
            "the module is missing by design on this kernel; only an older kube-proxy needs it",
            ["kube-proxy --version", "kubectl -n kube-system logs <kube-proxy pod> | grep -i ipvs"],
        )
        f.summary += " kube-proxy's version (and its log's 'required kernel modules' line) decides."
    f.fixed_in += ["kube-proxy 1.13.0"]
    f.fix = [
        "Upgrade kube-proxy to 1.13 or later (it asks for nf_conntrack on 4.19+ kernels), or, on an older one, run "
        "a kernel before 4.19 or one that ships an nf_conntrack_ipv4 compatibility module."
    ]
    return f


def _race_only(facts: Facts, lost: list[Hit], kpv: Versioned[KubeVersion] | None) -> Finding:
    """Empty netlink replies for virtual servers kube-proxy keeps, and nothing else: the race
    that deadlocks the affected releases, seen before it stops the sync loop."""
    f = start(facts, "KP110", lost, confidence=Confidence.LOW, severity=Severity.WARNING)
    f.summary = (
        f"kube-proxy's IPVS calls got empty netlink replies for virtual servers it keeps ({f.occurrences} "
        "line(s): `Expected only one service obtained=0`): another goroutine on the same netlink socket took "
        f"the reply. In kube-proxy {AFFECTED_TEXT} this race deadlocks the sync loop."
    )
    f.confidence_reason = "the netlink race's error lines alone, without kube-proxy's version"
    note_version(f, kpv, "kube-proxy")
    f.fixed_in += FIXED
    f.fix = [
        f"Give kube-proxy's version (`kube-proxy --version`): {AFFECTED_TEXT} are affected; upgrade to {FIXED_TEXT} "
        "or later.",
        "Restart kube-proxy if its IPVS rules stopped following the Services.",
    ]
    return f
