"""KP108 and KP112: kube-proxy settings that hurt: syncs too frequent; flags ignored by --config."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import note_version, start, suspect
from kpdoctor.checks.sync.node_ip import lookup_name
from kpdoctor.facts import Facts
from kpdoctor.facts.log import FLAG, SYNC_MODE, VERSION_GLOG, VERSION_STRUCTURED, cite_line, mode_of
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.kpconfig import (
    FLAG_DEFAULTS,
    FLAG_TO_FIELD,
    HOSTNAME_OVERRIDE_WITH_CONFIG,
    IgnoredFlag,
    Source,
    parse_duration,
    unset_in_file,
)
from kpdoctor.parse.logscan import Hit
from kpdoctor.parse.logwrap import KLOG_HEADER
from kpdoctor.versions import KubeVersion

CONFIG_EVIDENCE = [
    Kind.KUBE_PROXY_CMDLINE,
    Kind.KUBE_PROXY_CONFIG,
    Kind.KUBE_PROXY_LOG,
    Kind.K8S_OBJECTS,
    Kind.PROCESSES,
]


def _cite(src: Source | None) -> Cite | None:
    return Cite(src.artifact, src.line, src.text) if src else None


def default_min_sync(mode: str, version: KubeVersion | None) -> float:
    """Upstream default minSyncPeriod per mode (iptables: 1s since 1.19, 0 before; IPVS: 0)."""
    if mode == "ipvs":
        return 0.0
    if mode == "iptables" and version is not None and version.line < (1, 19):
        return 0.0
    return 1.0


def _mode(facts: Facts) -> str:
    m = facts.running_mode.claimed
    return m[0] if m else "iptables"


@check(
    "KP108",
    cause="sync-too-frequent",
    title="kube-proxy rewrites all rules too often",
    severity=Severity.WARNING,
    needs=CONFIG_EVIDENCE,
)
def sync_too_frequent(facts: Facts) -> Iterator[Finding]:
    """kube-proxy's sync periods make it rewrite every rule too often, burning CPU.

    Symptom: kube-proxy's CPU spikes periodically (every few seconds) on every node, more with
        more Services; iptables/IPVS reprogramming competes with other agents for the lock.
    Cause: a short `--ipvs-sync-period`/`--iptables-sync-period` (old TKE IPVS defaults were
        `--ipvs-min-sync-period=1s --ipvs-sync-period=5s`: a full refresh every 5 s), or an
        iptables minSyncPeriod of 0 that turns every endpoint change into a full restore.
    How it is detected: the effective syncPeriod/minSyncPeriod for the proxy mode in use, from
        the flags or the config file with kube-proxy's precedence (flags are ignored when
        --config is given), compared to upstream defaults for the version found. In a config
        file a zero period (`0s`, as `--write-config-to` style dumps print every unset field) is
        "unset": kube-proxy's defaulting replaces it (30s / 1s), so it is never reported; a
        flag's `0s` is a value. Without settings that explain it, the log's own cadence: more
        full syncs starting within one minSyncPeriod than kube-proxy's runner lets run (a
        release that syncs on some events at once, k/k#111219). Releases before
        pkg/proxy/runner (iptables 1.35, nftables 1.34) let two run back to back: two alone
        are a suspected fault, at info, a third the warning. The syncs of a start-up (every
        release syncs at once when its informers sync) are left out where the log shows the
        process starting.
    Fix: IPVS: `--ipvs-min-sync-period=0s --ipvs-sync-period=30s` (the defaults: event-driven
        with a 30 s safety resync). iptables/nftables: syncPeriod 30s and minSyncPeriod 1s (the
        default since 1.19). Set them where they take effect: in the config file when kube-proxy
        runs with --config.
    References: seed 000; https://github.com/kubernetes/kubernetes/pull/92836;
        https://github.com/kubernetes/kubernetes/issues/82065; https://github.com/kubernetes/kubernetes/issues/111219
    """
    cfg = facts.kp_config
    mode = _mode(facts)
    section = "ipvs" if mode == "ipvs" else "nftables" if mode == "nftables" else "iptables"
    sync = cfg.setting(f"{section}.syncPeriod")
    min_sync = cfg.setting(f"{section}.minSyncPeriod")
    sync_s = parse_duration(str(sync.value)) if sync.value is not None else None
    min_s = parse_duration(str(min_sync.value)) if min_sync.value is not None else None
    problems: list[str] = []
    evidence: list[Cite] = []
    severity = Severity.WARNING
    if sync_s is not None and sync.origin in ("flag", "config") and 0 < sync_s < 15:
        problems.append(
            f"{section} syncPeriod is {sync.value} ({sync.origin}): a full rewrite of every rule "
            f"each {sync_s:g}s (default 30s)"
        )
        if (c := _cite(sync.source)) is not None:
            evidence.append(c)
    if (
        section != "ipvs"
        and min_s == 0
        and min_sync.origin in ("flag", "config")
        and default_min_sync(section, cfg.version) > 0
    ):
        problems.append(
            f"{section} minSyncPeriod is 0 ({min_sync.origin}): every endpoint change triggers "
            "a full restore (default 1s)"
        )
        if (c := _cite(min_sync.source)) is not None:
            evidence.append(c)
        severity = Severity.WARNING if problems[0].startswith(section + " syncPeriod") else Severity.INFO
    if not problems:
        min_s = min_s if min_s is not None else default_min_sync(section, cfg.version)
        yield from _back_to_back(facts, section, min_s, burst_syncs(section, cfg.version))
        return
    rec = (
        "Set `--ipvs-min-sync-period=0s --ipvs-sync-period=30s` (ipvs.minSyncPeriod: 0s, ipvs.syncPeriod: 30s)."
        if section == "ipvs"
        else f"Set {section}.syncPeriod: 30s and {section}.minSyncPeriod: 1s (the upstream defaults)."
    )
    where = (
        "in the config file (flags are ignored when --config is given)"
        if cfg.config_flag
        else "on kube-proxy's command line or config"
    )
    f = start(facts, "KP108", [], confidence=Confidence.HIGH, severity=severity)
    f.summary = f"Proxy mode {mode}: " + "; ".join(problems) + "."
    f.evidence = evidence
    f.fix = [rec + f" Change it {where}."]
    if cfg.version:
        f.versions_found["kube-proxy"] = str(cfg.version)
    yield f


_STAMP = lazy_re.compile(r"(?:\d{4}-)?(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d(?:\.\d+)?)")


def _seconds(hit: Hit) -> float | None:
    """When a line was logged, in seconds within a year (enough for the gap between two syncs):
    kube-proxy's own klog time first, else its wrapper's (a runtime's or journal's timestamp)."""
    k = KLOG_HEADER.match(hit.header)
    if k is not None:
        mo, d, clock = k.group("mm"), k.group("dd"), k.group("time")
        h, mi, sec = clock.split(":")
    else:
        m = _STAMP.match(hit.timestamp or "")
        if m is None:
            return None
        mo, d, h, mi, sec = m.groups()
    return (((int(mo) * 31 + int(d)) * 24 + int(h)) * 60 + int(mi)) * 60 + float(sec)


# The first release whose proxier runs its syncs through pkg/proxy/runner, which keeps
# minSyncPeriod between any two runs; before it, pkg/util/async's runner let burstSyncs (2) run
# back to back (read in the iptables and nftables proxiers of 1.19 to 1.36).
_NO_BURST_FROM = {"iptables": (1, 35), "nftables": (1, 34)}


def burst_syncs(section: str, version: KubeVersion | None) -> int:
    """How many syncs kube-proxy's runner lets start within one minSyncPeriod (an unknown
    release: the most any release allows, so that no release's normal start is taken for a
    fault)."""
    first = _NO_BURST_FROM.get(section)
    return 1 if first is not None and version is not None and version.line >= first else 2


def _after_start_up(facts: Facts, starts: list[Hit], min_sync: float) -> list[Hit]:
    """The sync starts after kube-proxy's start-up, where its log shows it starting (its version
    and flags before the first sync): every release syncs at once, outside its runner, when its
    Service and EndpointSlice informers have synced, so the first syncs of a process come in a
    flurry that says nothing (a real 1.20.2 starts three within 175 ms). The flurry ends at the
    first start a minSyncPeriod after the one before it."""
    started: dict[str, tuple[int, int]] = {}  # artifact -> where its first start-up line is
    for h in facts.log.hits(VERSION_GLOG.id, VERSION_STRUCTURED.id, FLAG.id):
        started[h.artifact] = min(started.get(h.artifact, h.order), h.order)
    out: list[Hit] = []
    seen: set[str] = set()
    flurry: dict[str, Hit] = {}  # artifact -> the last start of its start-up flurry so far
    for h in starts:
        if h.artifact not in seen:
            seen.add(h.artifact)
            if started.get(h.artifact, h.order) < h.order:
                flurry[h.artifact] = h
                continue
        last = flurry.pop(h.artifact, None)
        if last is not None and (gap := _gap(last, h)) is not None and gap < min_sync:
            flurry[h.artifact] = h
            continue
        out.append(h)
    return out


def _gap(a: Hit, b: Hit) -> float | None:
    """Seconds from ``a`` to a later ``b`` of the same log, when both times are known."""
    ta, tb = _seconds(a), _seconds(b)
    return tb - ta if ta is not None and tb is not None and a.artifact == b.artifact and tb >= ta else None


def _within(starts: list[Hit], burst: int, min_sync: float) -> list[tuple[Hit, Hit, float]]:
    """Each start with the one ``burst`` starts later, when both are less than minSyncPeriod apart."""
    pairs = ((starts[i], starts[i + burst]) for i in range(len(starts) - burst))
    return [(a, b, gap) for a, b in pairs if (gap := _gap(a, b)) is not None and gap < min_sync]


def _back_to_back(facts: Facts, section: str, min_sync: float, burst: int) -> Iterator[Finding]:
    """Full syncs that start closer together than minSyncPeriod allows: kube-proxy's log says
    it syncs more often than its settings should let it (minSyncPeriod 0, or a code path that
    syncs at once instead of queueing, k/k#111219). Releases before pkg/proxy/runner allow two
    syncs in a row (burstSyncs): only a third within one minSyncPeriod is more than they allow."""
    if min_sync <= 0:
        return
    starts = _after_start_up(facts, [h for h in facts.log.hits(*SYNC_MODE.ids) if mode_of(h) == section], min_sync)
    close = _within(starts, burst, min_sync)  # more starts in a period than the runner allows
    shown = burst  # as many as it allows: the runner's burst, or syncs outside it (k/k#111219)
    if not close and burst > 1:
        close, shown = _within(starts, 1, min_sync), 1
    if not close:
        return
    a, b, gap = min(close, key=lambda x: x[2])
    f = start(facts, "KP108", [], confidence=Confidence.MEDIUM, severity=Severity.WARNING)
    f.summary = (
        f"kube-proxy starts {shown + 1} full {section} syncs within {gap * 1000:.0f} ms, more than its "
        f"minSyncPeriod ({min_sync:g}s) allows: every event triggers a whole rewrite (a minSyncPeriod of 0, "
        "or a release that syncs on some events at once instead of queueing them)."
    )
    if shown < burst:
        f.severity = Severity.INFO
        f.summary = (
            f"kube-proxy starts two full {section} syncs {gap * 1000:.0f} ms apart, within its minSyncPeriod "
            f"({min_sync:g}s): its runner lets {burst} run back to back in this release (or one it could not "
            "tell), so two say nothing by themselves; a third within the period, or two apart again and again, "
            "would be syncs outside the runner (Node events synced at once before k/k#111219's fix)."
        )
        suspect(
            f,
            "two syncs within minSyncPeriod: as many as the runner's burst allows",
            ["more of kube-proxy's log (its sync lines over a few minutes, at --v=2)", "kube-proxy --version"],
        )
    f.evidence = [cite_line(a), cite_line(b)]
    kpv = facts.kube_proxy_version
    note_version(f, kpv, "kube-proxy")
    f.fix = [
        f"Check {section}.minSyncPeriod (1s by default) where it takes effect; if it is set, upgrade kube-proxy: "
        "Node events synced at once in releases before k/k#111219's fix."
    ]
    yield f


def _describe(v: Any, fld: str = "") -> str:
    if unset_in_file(fld, v):
        return "unset (default)"
    return repr(v) if not isinstance(v, str) else f'"{v}"'


def _words(v: Any) -> list[str]:
    """A list-like value as its items: a flag's ``a,b`` or ``[a b]`` and a file's YAML list."""
    if isinstance(v, list):
        return sorted(str(x).strip() for x in v)
    text = str(v).strip().strip("[]")
    return sorted(w for w in re.split(r"[,\s]+", text) if w)


def same_value(i: IgnoredFlag) -> bool:
    """Would kube-proxy do the same with the flag as with the file? (Then ignoring it is harmless.)

    Compared as kube-proxy reads them: durations by length (``1m0s`` = ``60s``), booleans and
    numbers by value, lists as sets, and a field the file leaves unset against the flag's default.
    """
    flag, cv = i.flag.value.strip(), i.config_value
    if not i.shown:
        return False  # the part of the file given does not show the field: it may differ
    if unset_in_file(i.field, cv):
        return flag in FLAG_DEFAULTS.get(i.flag.name, {""})
    if isinstance(cv, bool):
        return flag.lower() == str(cv).lower()
    if isinstance(cv, int | float):
        try:
            return float(flag) == float(cv)
        except ValueError:
            return False
    if isinstance(cv, list | dict):
        if isinstance(cv, dict):
            cv = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in cv.items()]
        return _words(flag) == _words(cv)
    a, b = parse_duration(flag), parse_duration(str(cv))
    if a is not None and b is not None:
        return a == b
    return flag == str(cv)


def _config_said(i: IgnoredFlag, known_file: bool) -> str:
    """What the config file says of an ignored flag's field, as the finding quotes it."""
    if not known_file:
        return "not given"
    return _describe(i.config_value, i.field) if i.shown else "not in the part of the file given"


def _hostname_override_uncertain(facts: Facts) -> Finding | None:
    """--hostname-override next to --config when kube-proxy's version is unknown: ignored before
    1.13 (k/k#69340), honoured since. A suspected cause at info (the Node lookup depends on it,
    and releases before 1.13 are rare now) that the version decides."""
    cfg = facts.kp_config
    fv = cfg.flags.get("hostname-override")
    if cfg.config_flag is None or cfg.version is not None or fv is None or not fv.explicit or not fv.value:
        return None
    in_file = cfg.file.get("hostnameOverride") if cfg.file is not None else None
    if in_file == fv.value:
        return None
    # releases before 1.13 are rare now: a suspicion the version decides, at info
    f = start(facts, "KP112", [], confidence=Confidence.LOW, severity=Severity.INFO)
    suspect(
        f,
        f"--hostname-override next to --config is ignored only before {HOSTNAME_OVERRIDE_WITH_CONFIG}",
        ["kube-proxy --version", "kubectl -n kube-system logs <kube-proxy pod> | head -20 (its version line)"],
    )
    f.summary = (
        f"kube-proxy runs with --config={cfg.config_flag.value} and --hostname-override={fv.value}: "
        f"kube-proxy before {HOSTNAME_OVERRIDE_WITH_CONFIG} ignores the flag then and looks its Node up "
        "under the OS hostname"
        + (
            f" (the config file's hostnameOverride is {_describe(in_file)})"
            if cfg.file is not None and cfg.file.shows("hostnameOverride")
            else ""
        )
        + ". Its version is not in the evidence: give `kube-proxy --version` or its log's first lines."
    )
    for src in (cfg.config_flag.source, fv.source):
        c = Cite(src.artifact, src.line, src.text)
        if c not in f.evidence:
            f.evidence.append(c)
    f.fixed_in.append("v1.13.0 (honours --hostname-override with --config)")
    f.fix = [
        "Set hostnameOverride in the KubeProxyConfiguration per node, or run kube-proxy 1.13+ where "
        "`--hostname-override=$(NODE_NAME)` (Downward API spec.nodeName) works with --config."
    ]
    return f


# Settings users commonly pass as flags, whose field a config file often leaves empty, with the
# default kube-proxy applies then: with --config the flag is dropped (k/k#107156, k/k#98302).
FLAGGED_FIELDS = {
    "mode": "iptables",
    "clusterCIDR": "none: no masquerade decision by Pod CIDR",
    "enableProfiling": "off: /debug/pprof answers 404",
    "metricsBindAddress": "127.0.0.1:10249",
}
_FLAG_OF = {fld: f"--{flag}" for flag, fld in FLAG_TO_FIELD.items()}


def _file_without_flags(facts: Facts) -> Finding | None:
    """Only the config file is in the evidence (no command line, log or rules): which of the
    settings people pass as flags it leaves unset. A note, not a finding: whether a flag was
    passed is unknown."""
    cfg = facts.kp_config
    if cfg.file is None or cfg.flags:
        return None
    if facts.has(Kind.KUBE_PROXY_LOG) or facts.rulesets:
        return None  # kube-proxy's behaviour is in the evidence: what it did says more than its file
    unset = [
        (fld, _FLAG_OF[fld], default)
        for fld, default in FLAGGED_FIELDS.items()
        if cfg.file.shows(fld)
        and (unset_in_file(fld, v := cfg.file.get(fld)) or (fld == "enableProfiling" and v is False))
    ]
    if not unset:
        return None
    f = start(facts, "KP112", [], confidence=Confidence.LOW, severity=Severity.INFO)
    f.summary = (
        "kube-proxy started with this KubeProxyConfiguration (--config) ignores the command-line flags for "
        "the same settings, even for fields the file leaves unset. Unset here, so kube-proxy's default applies "
        "whatever a flag says: "
        + "; ".join(f"{fld} ({flag}) -> {default}" for fld, flag, default in unset)
        + ". Give kube-proxy's command line (`ps -o args= -C kube-proxy` or the DaemonSet) to see which flags "
        "it also has."
    )
    for fld, _flag, _default in unset:
        src = cfg.file.cite(fld)
        c = Cite(src.artifact, src.line, src.text)
        if c not in f.evidence:
            f.evidence.append(c)
    f.fix = [
        "Set these in the KubeProxyConfiguration (the kube-proxy ConfigMap), not as flags: "
        + ", ".join(f"{flag} -> {fld}" for fld, flag, _ in unset)
        + "; restart kube-proxy."
    ]
    return f


@check(
    "KP112",
    cause="config-overrides-flags",
    title="kube-proxy ignores command-line flags because --config is set",
    severity=Severity.WARNING,
    needs=CONFIG_EVIDENCE,
    explains=("local-endpoints-not-recognised",),
)
def config_overrides_flags(facts: Facts) -> Iterator[Finding]:
    """kube-proxy was started with --config and other flags; the flags are silently ignored.

    Symptom: a flag "has no effect": `--hostname-override=ip-10-188-166-140.ec2.internal` is set
        but kube-proxy looks up `nodes "ip-10-188-166-140" not found`; `--proxy-mode=ipvs` but
        iptables rules; a changed `--cluster-cidr` does nothing.
    Cause: when --config is given, kube-proxy loads the file over its whole configuration and
        drops every other flag (unlike kubelet, where flags win). Only logging flags, flags
        that are not configuration (--config, --cleanup, --master...) and, since 1.13,
        --hostname-override survive. Nothing is logged.
    How it is detected: kube-proxy's argv (cmdline, ps, Pod/DaemonSet spec, k3s "Running
        kube-proxy" line, or the "FLAG:" lines it logs at start-up) holds --config and other
        configuration flags; each is compared with the config file's value as kube-proxy reads
        it (durations by length, a field the file leaves unset against the flag's default). Any
        flag whose value the file does not have is a warning (medium confidence when the file is
        not in the evidence); flags the file matches are info; an ignored --hostname-override is
        critical. With --hostname-override and no kube-proxy version in the evidence, a
        suspected cause at info asks for the version (ignored before 1.13, honoured since).
    Fix: move every setting into the KubeProxyConfiguration file (the kube-proxy ConfigMap)
        and delete the flags; per-node values such as hostnameOverride come from the Downward
        API (`--hostname-override=$(NODE_NAME)` on 1.13+, or a per-node config file).
    References: seed 002; https://github.com/kubernetes/kubernetes/issues/98302;
        https://github.com/kubernetes/kubernetes/pull/69340;
        https://github.com/kubernetes/kubernetes/pull/107157
    """
    cfg = facts.kp_config
    ignored = cfg.ignored_flags()
    override = cfg.flags.get("hostname-override")
    looked = lookup_name(facts)
    proven = (
        cfg.config_flag is not None
        and override is not None
        and bool(override.value)
        and looked is not None
        and looked[0] != override.value
    )
    if proven and all(i.flag.name != "hostname-override" for i in ignored):
        assert override is not None
        ignored.insert(
            0,
            IgnoredFlag(
                override,
                "hostnameOverride",
                cfg.file.get("hostnameOverride") if cfg.file else None,
                cfg.file is None or cfg.file.shows("hostnameOverride"),
            ),
        )
    uncertain = _hostname_override_uncertain(facts)
    if not ignored:
        if uncertain is not None:
            yield uncertain
        elif (note := _file_without_flags(facts)) is not None:
            yield note
        return
    # A flag whose value the file does not have is what the user is asking about ("my flag has
    # no effect"), whichever flag it is; one the file matches changes nothing either way.
    differing = [i for i in ignored if not same_value(i)]
    known_file = cfg.file is not None
    confidence = Confidence.HIGH if known_file or not cfg.flags_from_log else Confidence.MEDIUM
    if differing and (not known_file or not all(i.shown for i in differing)):
        confidence = Confidence.MEDIUM  # the file may set the same values: it (or that part) is not in the evidence
    f = start(
        facts,
        "KP112",
        [],
        confidence=confidence,
        severity=Severity.WARNING if differing else Severity.INFO,
    )
    shown = differing or ignored
    parts = [f"--{i.flag.name}={i.flag.value} (config: {_config_said(i, known_file)})" for i in shown[:6]]
    f.summary = (
        f"kube-proxy runs with --config={cfg.config_flag.value if cfg.config_flag else '?'}, "
        "so these flags have no effect: "
        + ", ".join(parts)
        + ("" if len(shown) <= 6 else f" and {len(shown) - 6} more")
        + "."
    )
    if not differing:
        f.summary += " The config file has the same values, so nothing changes while they are ignored."
    elif not known_file:
        f.summary += " Add the config file (the kube-proxy ConfigMap) to see the values in effect."
    override_flag = cfg.flags.get("hostname-override")
    if uncertain is not None and override_flag is not None:
        f.summary += (
            f" --hostname-override={override_flag.value} is ignored too if kube-proxy is older than "
            f"{HOSTNAME_OVERRIDE_WITH_CONFIG} (its version is not in the evidence: give `kube-proxy --version`)."
        )
        f.severity = max(f.severity, Severity.WARNING)
    if cfg.config_flag:
        f.evidence.append(
            Cite(cfg.config_flag.source.artifact, cfg.config_flag.source.line, cfg.config_flag.source.text)
        )
    for i in shown[:6]:
        c = Cite(i.flag.source.artifact, i.flag.source.line, i.flag.source.text)
        if c not in f.evidence:
            f.evidence.append(c)
    if cfg.file is not None:
        for i in shown[:6]:
            src = cfg.file.cite(i.field) if i.field else cfg.file.source
            c = Cite(src.artifact, src.line, src.text)
            if c not in f.evidence:
                f.evidence.append(c)
    if cfg.version:
        f.versions_found["kube-proxy"] = str(cfg.version)
    hostname = next((i for i in ignored if i.flag.name == "hostname-override"), None)
    if hostname is not None:
        f.severity = Severity.CRITICAL
        if proven and looked is not None:
            f.summary += (
                f' The log proves it: kube-proxy looked up Node "{looked[0]}", not '
                f'"{hostname.flag.value}" (kube-proxy before 1.13 ignores --hostname-override with --config).'
            )
            f.evidence.append(Cite(looked[1].artifact, looked[1].line, looked[1].text))
        else:
            f.summary += (
                " Before 1.13, --hostname-override is among them: kube-proxy uses the OS hostname to find its Node."
            )
        f.fixed_in.append("v1.13.0 (honours --hostname-override with --config)")
    f.fix = [
        "Put every setting in the KubeProxyConfiguration (the kube-proxy ConfigMap) and remove the flags: "
        + ", ".join(f"{i.flag.name} -> {i.field or '(no config field)'}" for i in shown[:6])
        + ".",
        "For per-node values use the Downward API: `--hostname-override=$(NODE_NAME)` "
        "(honoured with --config since 1.13).",
    ]
    yield f
