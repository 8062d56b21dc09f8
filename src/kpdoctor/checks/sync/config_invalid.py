"""KP131: kube-proxy refuses its own configuration or flags at start-up.

Two ways to see it: kube-proxy's own start-up message (the messages catalogue), and the
configuration itself, judged by the rules kube-proxy applies before it starts
(``pkg/proxy/apis/config/validation/validation.go`` and the v1alpha1 defaulting that runs first,
release by release from 1.14 to 1.36; the facts in ``_refusals``).
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, note_version, start, suspect
from kpdoctor.checks.logged import innermost, messages_naming, start_logged
from kpdoctor.dataplane.addresses import host_port
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.k8s import is_ip
from kpdoctor.parse.kpconfig import (
    FIELD_RELEASES,
    FIELDS,
    ConfigFile,
    fields_set,
    known_in,
    parse_duration,
    unknown_fields,
)
from kpdoctor.versions import KubeVersion

CAUSE = "kube-proxy-config-invalid"
# What kube-proxy logs as it exits on a start-up error, at level E or with no level: server.go's
# "Error running ProxyServer" (1.24+), component-base's "command failed" (cli/run.go, then
# os.Exit(1)), and a flag value pflag cannot parse (cobra prints it with the usage and exits).
EXITS = frozenset(
    {"server-error-running-proxyserver", "component-base-command-failed", "pflag-invalid-argument",
     "pflag-invalid-argument-old"}
)  # fmt: skip


def _from_configuration(facts: Facts) -> Iterator[Finding]:
    """Without kube-proxy's log: what its configuration alone shows (the refusals kube-proxy's
    start-up makes of it, the fields it does not read). The check still counts as not run: a log
    it did not see may hold another refusal, so the family of sync failures is not ruled out."""
    found = _with_ignored(_refused_in_config(facts, False), _ignored_in_config(facts))
    if found is not None:
        yield found


def _with_ignored(content: Finding | None, ignored: Finding | None) -> Finding | None:
    """One finding of what the configuration shows: a refusal (beside which the fields kube-proxy
    does not read are moot when it is certain: kube-proxy does not start), else the fields it does
    not read, said with a suspected refusal when there is one."""
    if content is None or ignored is None:
        return content or ignored
    if content.suspected:
        content.summary += " Besides, " + ignored.summary[0].lower() + ignored.summary[1:]
        content.evidence += [c for c in ignored.evidence if c not in content.evidence]
        content.fix += ignored.fix
    return content


@check(
    "KP131",
    cause=CAUSE,
    title="kube-proxy rejects its configuration or flags",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    partial=_from_configuration,
    reads_messages=True,
    explains=RESTORE_SYMPTOMS,
)
def config_invalid(facts: Facts) -> Iterator[Finding]:
    """kube-proxy stops at start-up (or falls back to a default) because its configuration is invalid.

    Symptom: kube-proxy restarts in a loop (CrashLoopBackOff) or runs in another mode than
        configured; Services do not answer on the node; its log ends with an error about the
        config file or a flag (`failed validate: ...`, `invalid config: Conntrack Max and
        Conntrack MaxPerCore are mutually exclusive`, `unknown detect-local-mode`, `cluster is
        IPv4 but healthzBindAddress is IPv6`).
    Cause: the KubeProxyConfiguration (the kube-proxy ConfigMap) or the command line holds a value
        kube-proxy cannot use: a field of the wrong type or family, settings that exclude each
        other, a mode or detect-local mode missing what it needs, an unreadable config file.
        kube-proxy then exits before it programs anything, and the node keeps whatever rules the
        previous instance left, or none.
    How it is detected: kube-proxy's own start-up messages about its configuration, read from the
        messages catalogue (every release's wording, both klog eras). A fatal line (kube-proxy
        exits, or its "Error running ProxyServer"/"command failed" wraps the refusal) is critical;
        an error line, a setting refused while it went on, a warning; an
        info line (lenient decoding ignoring an unknown field, a fallback) is information. A
        later successful sync shows that a corrected instance started. Without such a line, the
        configuration given (the kube-proxy ConfigMap, its file, or a part of one) is judged as
        kube-proxy judges it before it starts: its defaulting, then the validation of each release
        1.14-1.36 (addresses as IP:port, the mode, CIDRs, node port addresses, sync periods,
        conntrack values, the IPVS scheduler, the detect-local mode), and the feature gates it
        sets first (a gate the release does not know or keeps locked: `failed complete: ...`; the
        gates' lifecycles from the Kubernetes documentation and release branches), each refusal
        worded as kube-proxy prints it. A value every release (or the release in the evidence) refuses is
        critical; one only newer releases refuse is suspected until the release is known (an
        upgrade stops kube-proxy); a kube-proxy log that shows no refusal makes the file a suspect
        (another one may be in use). Fields no release of the file format has (a misspelling, with
        the field it is closest to), or that the release running (the newest, when not known)
        lacks, are a warning: kube-proxy goes on without them, so their settings are not in effect.
    Fix: correct the field the message names in the kube-proxy ConfigMap (`kubectl -n kube-system
        edit configmap kube-proxy`) or on its command line, then restart the kube-proxy Pods
        (`kubectl -n kube-system rollout restart daemonset kube-proxy`). `kube-proxy --config FILE
        --cleanup=false --v=2` run by hand prints the same validation errors.
    References: https://kubernetes.io/docs/reference/config-api/kube-proxy-config.v1alpha1/;
        https://kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/
    """
    logged = messages_naming(facts, CAUSE, wrappers=True)
    if not logged:
        yield from _from_configuration(facts)
        return
    content = _refused_in_config(facts, True)
    ignored = _ignored_in_config(facts)
    if ignored is not None and (content is None or content.suspected):
        yield ignored  # beside what the log proves, a warning of its own
    levels = {h.level or lm.match.message.level or "E" for lm in logged for h in lm.hits}
    if "F" in levels or any(lm.match.message.id in EXITS for lm in logged):  # kube-proxy exits
        f = start_logged(facts, "KP131", logged, confidence=Confidence.HIGH)
        f.summary = "kube-proxy exits at start-up: it refuses its configuration"
    elif "E" in levels:
        f = start_logged(facts, "KP131", logged, confidence=Confidence.MEDIUM, severity=Severity.WARNING)
        f.summary = "kube-proxy refuses part of its configuration"
    else:  # an info or warning line: it went on without the setting (lenient decoding, a fallback)
        f = start_logged(facts, "KP131", logged, confidence=Confidence.MEDIUM, severity=Severity.INFO)
        f.summary = "kube-proxy went on without part of its configuration"
    # what the message says most about (a wrapper's payload: "invalid configuration: %v" says little)
    shown = dict.fromkeys(f"`{m.template}` ({m.meaning.rstrip('.')})" for m in (innermost(lm.match) for lm in logged))
    said = "; ".join(list(shown)[:3])
    f.summary += f": {said}."
    if f.ongoing is False and f.severity > Severity.INFO:
        f.severity = Severity.INFO
        f.summary += " A later sync succeeded: a corrected instance is running."
    note_version(f, facts.kube_proxy_version, "kube-proxy")
    f.fix = [
        "Correct the setting the message names in the kube-proxy ConfigMap or command line, then restart "
        "the kube-proxy Pods (`kubectl -n kube-system rollout restart daemonset kube-proxy`).",
    ]
    if content is not None and not content.suspected:  # the file given shows the values it refuses
        f.evidence += [c for c in content.evidence if c not in f.evidence]
        f.fix = content.fix
    yield f


# -- the configuration judged as kube-proxy judges it ---------------------------------------------
# Facts from kube-proxy's validation.go and v1alpha1/defaults.go of each release 1.14-1.36 (Go
# field paths and messages as it prints them: `KubeProxyConfiguration.HealthzBindAddress: Invalid
# value: ":::10256": must be IP:port`). Defaulting runs first: an absent, empty or zero field gets
# its default and is valid; only a value the file sets can be refused.

RELEASES = range(14, 37)  # the minor releases whose rules are known
_CURRENT = "[currently iptables]"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A field kube-proxy refuses: as the file writes it, and as kube-proxy prints the refusal."""

    field: str  # the file's dotted path (healthzBindAddress, iptables.minSyncPeriod)
    message: str  # `KubeProxyConfiguration.X: Invalid value: "v": detail`
    sure: bool = True  # False: the release may refuse it (the facts do not say which way)


def _quoted(v: object) -> str:
    """A value as Go's %v/%q prints it in field errors (strings quoted)."""
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


# What people write where they hid or templated a value (`10.x.x.x`, `<redacted>`, `${NODE_IP}`,
# `{{ .Values.podCIDR }}`, `***`): not the value kube-proxy was given, so never judged
_PLACEHOLDER = lazy_re.compile(
    r"<[^<>]*>|\$\{|\$\(|\{\{|\*\*|…|\.\.\.|(?i:redact|masked|hidden|placeholder)|(?<![0-9a-fA-F])[xX]{1,4}(?![0-9a-fA-F])"
)


def _hidden(value: object) -> bool:
    """Is an address-like value (or any item of a list of them) a placeholder for the real one?"""
    items = value if isinstance(value, list) else [value]
    return any(isinstance(v, str) and _PLACEHOLDER.search(v) is not None for v in items)


def _ip(text: str) -> bool:
    """Go's net.ParseIP (netutils.ParseIPSloppy since 1.23: IPv4 octets with leading zeros too)."""
    if not text or "%" in text or not text.isascii():
        return False
    if ":" in text:
        return is_ip(text, 6)
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts)


def _cidr(text: str) -> int | None:
    """The family of a CIDR Go's net.ParseCIDR reads (an address, a slash, a prefix length), else None."""
    ip, sep, bits = text.partition("/")
    if not sep or not bits.isascii() or not bits.isdigit() or len(bits.lstrip("0")) > 3 or not _ip(ip):
        return None  # (a longer number is no prefix length, and int() refuses thousands of digits)
    family = 6 if ":" in ip else 4
    return family if int(bits) <= (128 if family == 6 else 32) else None


def _split_host_port(s: str) -> tuple[str, str] | None:
    """Go's net.SplitHostPort: ``host:port`` or ``[host]:port``, else None (too many colons,
    missing port, a bracket out of place)."""
    i = s.rfind(":")
    if i < 0:
        return None
    j = k = 0
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or end + 1 != i:
            return None
        host, j, k = s[1:end], 1, end + 1
    else:
        host = s[:i]
        if ":" in host:
            return None
    if "[" in s[j:] or "]" in s[k:]:
        return None
    return host, s[i + 1 :]


def _host_port(fld: str, path: str, value: str, port: int, minor: int) -> Refusal | None:
    """healthzBindAddress / metricsBindAddress: defaulted (a port appended where the value lacks
    one), then `validateHostPort`."""
    v = value
    if minor <= 15:
        if ":" not in v:
            v = f"{v}:{port}"
    elif _split_host_port(v) is None and _ip(v):
        v = host_port(v, port)
    split = _split_host_port(v)
    if split is None:
        return Refusal(fld, f"{path}: Invalid value: {_quoted(v)}: must be IP:port")
    host, p = split
    if not _ip(host):
        return Refusal(fld, f"{path}: Invalid value: {_quoted(host)}: must be a valid IP")
    digits = p[1:] if p[:1] in "+-" and p[1:] else p
    if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > 5 or not 1 <= int(p) <= 65535:
        return Refusal(fld, f"{path}: Invalid value: {_quoted(p)}: must be a valid port")
    return None


def _modes(minor: int, gates: dict[str, Any]) -> tuple[set[str], str]:
    """The Linux proxy modes a release accepts, and how its refusal says so."""
    if minor <= 25:
        return {"", "iptables", "ipvs", "userspace"}, "must be iptables,ipvs,userspace or blank"
    if minor <= 27:
        return {"", "iptables", "ipvs"}, "must be iptables,ipvs or blank"
    if minor == 28 or (minor <= 30 and gates.get("NFTablesProxyMode") is not True):
        return {"", "iptables", "ipvs"}, "must be iptables, ipvs or blank"
    return {"", "iptables", "ipvs", "nftables"}, "must be iptables, ipvs, nftables or blank"


_SCHEDULERS = {"", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq"}
_DETECT_LOCAL = ("ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", "")


def _go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (`1m30s`, `500ms`, `-1s`)."""
    ns = round(seconds * 1e9)
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns == 0:
        return "0s"
    if ns < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if ns >= size:
                return f"{sign}{_trim(ns / size)}{unit}"
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    secs = f"{_trim(rest / 1e9)}s"
    return sign + (f"{h}h{m}m{secs}" if h else f"{m}m{secs}" if m else secs)


def _trim(x: float) -> str:
    return f"{x:.9f}".rstrip("0").rstrip(".")


@functools.cache
def _gates() -> dict[str, tuple[int | None, int | None, int | None, tuple[int, bool] | None]]:
    """Feature gates' lifecycles (``feature_gates.json``, its ``_about`` says from where): per gate
    the first release with it, the last release certainly with it, the first certainly without it,
    and the release it is locked to its default from, with that default."""
    raw = json.loads(resources.files(__package__).joinpath("feature_gates.json").read_text(encoding="utf-8"))
    out = {}
    for name, (added, last, gone, locked) in raw["gates"].items():
        out[name] = (added, last, gone, (locked[0], locked[1]) if locked else None)
    return out


# component-base's own: every release has them
_ALWAYS_GATES = frozenset({"AllAlpha", "AllBeta"})


def _feature_gates(gates: dict[str, Any], minor: int) -> list[Refusal]:
    """What kube-proxy's Complete step refuses before validation (and exits): a gate its release
    does not know (`unrecognized feature gate: X`: a gate removed, not added yet, or misspelt) and
    a gate locked to its default set otherwise. Gates the table does not have are not judged."""
    known = _gates()
    lower = {n.lower(): n for n in known}
    out = []
    for name, value in gates.items():
        if not isinstance(name, str) or name in _ALWAYS_GATES:
            continue
        said = f"failed complete: unrecognized feature gate: {name}"
        entry = known.get(name)
        if entry is None:
            if lower.get(name.lower(), name) != name:  # the names are case-sensitive: no gate is spelt so
                out.append(Refusal(f"featureGates.{name}", said))
            continue
        added, last, gone, locked = entry
        if (gone is not None and minor >= gone) or (added is not None and minor < added):
            out.append(Refusal(f"featureGates.{name}", said))
        elif last is not None and gone is not None and last < minor < gone:  # removed in it or after it
            out.append(Refusal(f"featureGates.{name}", said, sure=False))
        elif locked is not None and minor >= locked[0] and isinstance(value, bool) and value != locked[1]:
            v, d = str(value).lower(), str(locked[1]).lower()
            out.append(
                Refusal(
                    f"featureGates.{name}",
                    f"failed complete: cannot set feature gate {name} to {v}, feature is locked to {d}",
                )
            )
    return out


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _refusals(cf: ConfigFile, minor: int) -> list[Refusal]:
    """What kube-proxy 1.<minor> refuses in this configuration (Linux), each field once. A field
    the document does not show is its default (a whole file) or unknown (a part: not judged)."""
    out: list[Refusal] = []
    root = "KubeProxyConfiguration"
    get = cf.get
    gates = get("featureGates") if isinstance(get("featureGates"), dict) else {}
    mode = get("mode")
    if mode == "kernelspace":
        return []  # Windows' configuration: its own rules, not read here
    mode = mode if isinstance(mode, str) else ""
    out += _feature_gates(gates, minor)
    bind = get("bindAddress")
    if isinstance(bind, str) and bind and not _hidden(bind) and not _ip(bind):
        out.append(
            Refusal(
                "bindAddress",
                f"{root}.BindAddress: Invalid value: {_quoted(bind)}: not a valid textual "
                "representation of an IP address",
            )
        )
    for fld, name, port in (
        ("healthzBindAddress", "HealthzBindAddress", 10256),
        ("metricsBindAddress", "MetricsBindAddress", 10249),
    ):
        v = get(fld)
        if isinstance(v, str) and v and not _hidden(v) and (r := _host_port(fld, f"{root}.{name}", v, port, minor)):
            out.append(r)
    if isinstance(get("mode"), str):
        valid, said = _modes(minor, gates)
        if mode not in valid:
            out.append(
                Refusal(
                    "mode",
                    f"{root}.Mode.ProxyMode: Invalid value: {_quoted(mode)}: {said} (blank means the "
                    f"best-available proxy {_CURRENT})",
                )
            )
    linux = f"{root}.KubeProxyLinuxConfiguration." if minor >= 31 else f"{root}."
    bit = _int(get("iptables.masqueradeBit"))
    if bit is not None and not 0 <= bit <= 31:
        out.append(
            Refusal(
                "iptables.masqueradeBit",
                f"{root}.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: "
                f"{bit}: must be within the range [0, 31]",
            )
        )
    oom = _int(get("oomScoreAdj"))
    if oom is not None and not -1000 <= oom <= 1000:
        out.append(
            Refusal("oomScoreAdj", f"{linux}OOMScoreAdj: Invalid value: {oom}: must be within the range [-1000, 1000]")
        )
    conntrack = f"{linux}KubeProxyConntrackConfiguration."
    for fld, name, is_duration in (
        ("maxPerCore", "MaxPerCore", False),
        ("min", "Min", False),
        ("tcpEstablishedTimeout", "TCPEstablishedTimeout", True),
        ("tcpCloseWaitTimeout", "TCPCloseWaitTimeout", True),
        ("udpTimeout", "UDPTimeout", True),
        ("udpStreamTimeout", "UDPStreamTimeout", True),
    ):
        if fld.startswith("udp") and minor < 29:
            continue
        v = get(f"conntrack.{fld}")
        n = (parse_duration(v) if isinstance(v, str) else None) if is_duration else _int(v)
        if n is not None and n < 0:
            printed = _go_duration(n) if is_duration else str(n)
            out.append(
                Refusal(
                    f"conntrack.{fld}",
                    f"{conntrack}{name}: Invalid value: {printed}: must be greater than or equal to 0",
                )
            )
    for fld, name, last in (("configSyncPeriod", "ConfigSyncPeriod", 36), ("udpIdleTimeout", "UDPIdleTimeout", 25)):
        v = get(fld)
        d = parse_duration(v) if isinstance(v, str) else None
        if minor <= last and d is not None and d < 0:
            out.append(Refusal(fld, f"{root}.{name}: Invalid value: {_go_duration(d)}: must be greater than 0"))
    out += _sync_periods(cf, minor, mode)
    out += _cluster_cidr(cf, minor, gates)
    out += _node_port_addresses(cf, minor)
    if mode == "ipvs":
        ipvs = f"{root}.KubeProxyIPVSConfiguration"
        sched = get("ipvs.scheduler")
        if minor <= 26 and isinstance(sched, str) and sched not in _SCHEDULERS:
            out.append(
                Refusal(
                    "ipvs.scheduler",
                    f"{ipvs}.Scheduler.Scheduler: Invalid value: {_quoted(sched)}: must be in "
                    "[rr wrr lc wlc lblc lblcr sh dh sed nq ], blank means the default algorithm method (currently rr)",
                )
            )
        excluded = get("ipvs.excludeCIDRs")
        if isinstance(excluded, list) and not _hidden(excluded):
            for i, c in enumerate(excluded):
                if not isinstance(c, str) or _cidr(c) is None:
                    said = f"{ipvs}.ExcludeCidrs[{i}]: Invalid value: {_quoted(c)}: must be a valid CIDR"
                    if minor <= 19:
                        said = f"{ipvs}.ExcludeCidrs: Invalid value: {_go_list(excluded)}: must be a valid IP block"
                    out.append(Refusal("ipvs.excludeCIDRs", said))
                    break
    local = get("detectLocalMode")
    if minor >= 18 and isinstance(local, str) and local not in _DETECT_LOCAL:
        if minor >= 28:
            shown = ", ".join(json.dumps(m) for m in _DETECT_LOCAL)
            said = f"{root}.DetectLocalMode: Unsupported value: {_quoted(local)}: supported values: {shown}"
        else:  # not validated: kube-proxy exits when it builds its proxier
            said = f"cannot determine detect-local-mode: unknown detect-local-mode: {local}"
        out.append(Refusal("detectLocalMode", said))
    elif minor >= 24 and local in ("BridgeInterface", "InterfaceNamePrefix"):
        fld, name = (
            ("bridgeInterface", "InterfaceName")
            if local == "BridgeInterface"
            else ("interfaceNamePrefix", "InterfacePrefix")
        )
        where = f"{root}.DetectLocalConfiguration." if minor >= 31 else f"{root}."
        if cf.shows(f"detectLocal.{fld}") and not get(f"detectLocal.{fld}"):
            out.append(Refusal(f"detectLocal.{fld}", f'{where}{name}: Invalid value: "": must not be empty'))
    return out


def _go_list(v: list[Any]) -> str:
    """A []string as Go's %#v prints it."""
    return "[]string{" + ", ".join(json.dumps(str(x)) for x in v) + "}"


def _sync_periods(cf: ConfigFile, minor: int, mode: str) -> list[Refusal]:
    """syncPeriod > 0, minSyncPeriod >= 0 and <= syncPeriod: up to 1.30 for the iptables block in
    every mode and the ipvs (nftables) block in its mode; since 1.31 for the mode's block only."""
    root = "KubeProxyConfiguration"
    if minor >= 31:
        blocks = [("ipvs" if mode == "ipvs" else "nftables" if mode == "nftables" else "iptables", root)]
    else:
        blocks = [("iptables", f"{root}.KubeProxyIPTablesConfiguration")]
        if mode == "ipvs":
            blocks.append(("ipvs", f"{root}.KubeProxyIPVSConfiguration"))
        if mode == "nftables" and minor >= 29:
            blocks.append(("nftables", f"{root}.KubeProxyNFTablesConfiguration"))
    out = []
    for block, path in blocks:
        sync_text, min_text = cf.get(f"{block}.syncPeriod"), cf.get(f"{block}.minSyncPeriod")  # as written
        sync = parse_duration(sync_text) if isinstance(sync_text, str) else None
        low = parse_duration(min_text) if isinstance(min_text, str) else None
        # defaults: syncPeriod 30s; minSyncPeriod 1s for iptables (1.20+) and nftables, else 0
        if sync is None or sync == 0:  # defaulted to 30s (a part of a file that does not show it: unknown)
            sync = 30.0 if cf.shows(f"{block}.syncPeriod") else None
        if low is None or low == 0:  # defaulted: 1s for iptables (1.20+) and nftables, else 0
            unset = 1.0 if (block == "iptables" and minor >= 20) or block == "nftables" else 0.0
            low = unset if cf.shows(f"{block}.minSyncPeriod") else None
        if sync is not None and sync < 0:
            out.append(
                Refusal(
                    f"{block}.syncPeriod",
                    f"{path}.SyncPeriod: Invalid value: {_go_duration(sync)}: must be greater than 0",
                )
            )
        elif low is not None and low < 0:
            out.append(
                Refusal(
                    f"{block}.minSyncPeriod",
                    f"{path}.MinSyncPeriod: Invalid value: {_go_duration(low)}: must be greater than or equal to 0",
                )
            )
        elif sync is not None and low is not None and low > sync:
            out.append(
                Refusal(
                    f"{block}.syncPeriod",
                    f"{path}.SyncPeriod: Invalid value: {_go_duration(low)}: must "
                    f"be greater than or equal to {path}.MinSyncPeriod",
                )
            )
    return out


def _cluster_cidr(cf: ConfigFile, minor: int, gates: dict[str, Any]) -> list[Refusal]:
    """clusterCIDR: one CIDR, or (dual-stack) one of each family, comma-separated, never trimmed."""
    v = cf.get("clusterCIDR")
    if not isinstance(v, str) or not v or _hidden(v):
        return []
    root = "KubeProxyConfiguration"
    example = "(e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)"
    dual_example = "(e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)"
    cidrs = v.split(",")

    def refused(detail: str, shown: str = v, path: str = f"{root}.ClusterCIDR") -> list[Refusal]:
        return [Refusal("clusterCIDR", f"{path}: Invalid value: {_quoted(shown)}: {detail}")]

    if minor >= 31:
        local = cf.get("detectLocalMode")
        if isinstance(local, str) and local not in ("", "ClusterCIDR"):
            return []  # validated only where it decides what is local
        path = f"{root}.DetectLocalConfiguration.ClusterCIDRs"
        for i, c in enumerate(cidrs):
            if _cidr(c) is None:
                return refused(f"must be a valid CIDR block {example}", c, f"{path}[{i}]")
        if len(cidrs) > 2 or len({_cidr(c) for c in cidrs}) < len(cidrs):
            return [
                Refusal(
                    "clusterCIDR",
                    f"{path}: Invalid value: {_go_list(cidrs)}: must be a either a single "
                    "CIDR or dual-stack pair of CIDRs (e.g. [10.100.0.0/16, fde4:8dba:82e1::/48]",
                )
            ]
        return []
    if minor <= 15:
        return [] if _cidr(v) is not None else refused("must be a valid CIDR block (e.g. 10.100.0.0/16)")
    dual = gates.get("IPv6DualStack")
    if minor <= 17:
        if dual is True:
            bad = next((c for c in cidrs if _cidr(c) is None), None)
            return (
                [] if bad is None else refused("must be a valid CIDR block (e.g. 10.100.0.0/16 or FD02::0:0:0/96)", bad)
            )
        return (
            [] if _cidr(v) is not None else refused("must be a valid CIDR block (e.g. 10.100.0.0/16 or FD02::0:0:0/96)")
        )
    on = dual is True if minor <= 20 else (dual is not False if minor <= 22 else True)
    if on and len(cidrs) > 2:
        return refused(f"only one CIDR allowed or a valid DualStack CIDR {dual_example}")
    if on and len(cidrs) == 2:
        families = [_cidr(c) for c in cidrs]
        return (
            []
            if None not in families and families[0] != families[1]
            else refused(f"must be a valid DualStack CIDR {dual_example}")
        )
    if len(cidrs) > 1:
        return refused(f"only one CIDR allowed {example}")
    return [] if _cidr(v) is not None else refused(f"must be a valid CIDR block {example}")


def _node_port_addresses(cf: ConfigFile, minor: int) -> list[Refusal]:
    """nodePortAddresses: CIDRs (a bare address is none); `primary` alone since 1.31."""
    v = cf.get("nodePortAddresses")
    if not isinstance(v, list) or _hidden(v):
        return []
    path = "KubeProxyConfiguration.NodePortAddresses"
    for i, a in enumerate(v):
        if minor >= 31 and a == "primary":
            if len(v) > 1:
                return [
                    Refusal(
                        "nodePortAddresses",
                        f"{path}[{i}]: Invalid value: \"primary\": can't use both 'primary' and CIDRs",
                    )
                ]
            break
        if not isinstance(a, str) or _cidr(a) is None:
            if minor <= 19:
                return [Refusal("nodePortAddresses", f"{path}: Invalid value: {_go_list(v)}: must be a valid IP block")]
            return [Refusal("nodePortAddresses", f"{path}[{i}]: Invalid value: {_quoted(a)}: must be a valid CIDR")]
    return []


@dataclass(frozen=True, slots=True)
class Judged:
    """A field's refusal over the releases: the refusal as the newest refusing release prints it,
    and which releases refuse it."""

    field: str
    message: str
    minors: tuple[int, ...]
    maybe: tuple[int, ...] = ()  # releases that may refuse it: not known either way

    @property
    def every_release(self) -> bool:
        return len(self.minors) == len(RELEASES)

    @property
    def releases(self) -> str:
        if not self.minors:
            return f"perhaps {_span(self.maybe)}"
        said = _span(self.minors)
        return f"{said}; {_span(self.maybe)} not known" if self.maybe else said


def _span(minors: tuple[int, ...]) -> str:
    lo, hi = minors[0], minors[-1]
    if hi - lo + 1 != len(minors):
        return ", ".join(f"1.{m}" for m in minors)
    return f"1.{lo}" if lo == hi else f"1.{lo}-1.{hi}" if hi < RELEASES[-1] else f"1.{lo} and later"


def judged(cf: ConfigFile) -> list[Judged]:
    """Every field some release refuses (or may refuse), with those releases (the file order)."""
    by_field: dict[str, tuple[str, list[int], list[int]]] = {}
    for minor in RELEASES:
        for r in _refusals(cf, minor):
            _, minors, maybe = by_field.setdefault(r.field, (r.message, [], []))
            (minors if r.sure else maybe).append(minor)
            by_field[r.field] = (r.message, minors, maybe)  # the newest refusing release's words
    return [Judged(fld, said, tuple(minors), tuple(maybe)) for fld, (said, minors, maybe) in by_field.items()]


def _running_minor(version: KubeVersion | None) -> int | None:
    """The minor release of the kube-proxy running, as the rules know releases (the nearest one
    past either end), or None when its version is not in the evidence."""
    if version is None or version.major != 1:
        return None
    return min(max(version.minor, RELEASES[0]), RELEASES[-1])


def _refused_in_config(facts: Facts, logged: bool) -> Finding | None:
    """The configuration kube-proxy is given, judged as kube-proxy judges it at start-up."""
    cfg = facts.kp_config
    cf = cfg.file
    if cf is None or not cf.data:
        return None
    found = judged(cf)
    if not found:
        return None
    minor = _running_minor(cfg.version)
    # What the releases after the one running (any release, when it is not known) refuse: what an
    # upgrade breaks. A value only older releases refuse (a mode or keyword added later) is what the
    # file was written for: it says which releases it is for, not that they refuse it.
    possible: list[Judged] = []  # the release running may refuse it: the facts do not say
    if minor is not None:
        certain = [j for j in found if minor in j.minors]
        possible = [j for j in found if minor in j.maybe]
        other = [j for j in found if j not in certain and j not in possible and j.minors and j.minors[-1] > minor]
    else:
        certain = [j for j in found if j.every_release]
        other = [j for j in found if not j.every_release and j.minors and j.minors[-1] == RELEASES[-1]]
    shown = certain or possible or other
    if not shown:
        return None
    cites = []
    for j in shown:
        src = cf.cite(j.field)
        c = Cite(src.artifact, src.line, src.text)
        if c not in cites:
            cites.append(c)
    f = start(facts, "KP131", [], confidence=Confidence.HIGH, severity=Severity.CRITICAL)
    f.evidence = cites
    said = "; ".join(f"{j.message} ({'every release' if j.every_release else j.releases})" for j in shown[:4])
    more = f" and {len(shown) - 4} more" if len(shown) > 4 else ""
    whose = "kube-proxy" if minor is None else f"kube-proxy {cfg.version}"
    if certain:
        f.summary = (
            f"{whose} refuses this configuration at start-up and exits before it programs any rule: {said}{more}."
        )
        if other:
            f.summary += (
                " Some releases also refuse: " + "; ".join(f"{j.message} ({j.releases})" for j in other[:2]) + "."
            )
        if facts.has(Kind.KUBE_PROXY_LOG) and not logged:
            # its log is given and does not show the refusal: it runs with another file, or none
            suspect(
                f,
                "kube-proxy refuses this file, but its log given shows no refusal: it may run with another one",
                [
                    "`kubectl -n kube-system get configmap kube-proxy -o yaml` (the configuration in use)",
                    "`kubectl -n kube-system logs ds/kube-proxy | head -20` (its start-up)",
                ],
                confidence=Confidence.LOW,
            )
            f.severity = Severity.WARNING
        elif cf.partial or (minor is None and not facts.has(Kind.KUBE_PROXY_LOG)):
            f.confidence = Confidence.MEDIUM
            f.confidence_reason = "whether kube-proxy runs with this file (and which release it is) is not shown"
    elif possible:
        f.summary = (
            f"{whose} may refuse this configuration at start-up (its release is where this changed): {said}{more}."
        )
        suspect(
            f,
            "the release running is the one that removed what the configuration names, or the one after it",
            ["`kubectl -n kube-system logs ds/kube-proxy | head -20` (a refusal is its last line)"],
            confidence=Confidence.MEDIUM,
        )
        f.severity = Severity.WARNING
        if other:
            f.summary += " Later releases refuse: " + "; ".join(f"{j.message} ({j.releases})" for j in other[:2]) + "."
    else:
        f.summary = f"Newer kube-proxy releases refuse this configuration at start-up: {said}{more}."
        if minor is not None:
            f.summary = (
                f"{whose} accepts this configuration, but later releases refuse it (an upgrade stops it): {said}{more}."
            )
            f.severity, f.confidence = Severity.INFO, Confidence.LOW
        else:
            suspect(
                f,
                "the configuration holds a value only some releases refuse; kube-proxy's release is not shown",
                ["`kube-proxy --version` (or `kubectl -n kube-system get ds kube-proxy -o jsonpath='{..image}'`)"],
                confidence=Confidence.MEDIUM,
            )
            f.severity = Severity.WARNING
    note_version(f, facts.kube_proxy_version, "kube-proxy")
    advice: dict[str, list[str]] = {}  # the same advice for several fields, said once
    for j in [*shown, *other][:6]:
        advice.setdefault(_advice(j), []).append(j.field)
    f.fix = [
        "Correct the field in the kube-proxy ConfigMap (`kubectl -n kube-system edit configmap kube-proxy`): "
        + "; ".join(f"{', '.join(dict.fromkeys(fields))}: {said}" for said, fields in advice.items())
        + ". Then restart the kube-proxy Pods (`kubectl -n kube-system rollout restart daemonset kube-proxy`).",
    ]
    return f


def _advice(j: Judged) -> str:
    m = j.message
    if "must be IP:port" in m or "must be a valid IP" in m or "must be a valid port" in m:
        port = 10249 if j.field == "metricsBindAddress" else 10256
        return f"an address and a port, an IPv6 address in brackets (`0.0.0.0:{port}`, `[::]:{port}`)"
    if j.field.startswith("featureGates."):
        return "take the gate out of featureGates (this release has no such gate, or keeps it at its default)"
    if j.field == "clusterCIDR":
        return (
            "the Pod network's CIDR, or one of each family comma-separated without a space (`10.244.0.0/16,fd00::/56`)"
        )
    if "CIDR" in m or "IP block" in m:
        return "CIDRs with their prefix length (one address: `192.168.1.10/32`), or `primary` alone (1.31+)"
    if "Mode.ProxyMode" in m:
        return "one of the modes the message lists, in lower case, or empty"
    return "a value the message allows"


def _bounds(dotted: str) -> tuple[int, int | None] | None:
    """The releases that have a field, by its own bounds or its block's; None: every release."""
    return FIELD_RELEASES.get(dotted) or FIELD_RELEASES.get(dotted.split(".")[0])


def _known(dotted: str, minor: int) -> bool:
    return known_in(dotted, minor) and known_in(dotted.split(".")[0], minor)


def _sets(value: object) -> bool:
    """Does a field's value set anything a release without the field loses? `null`, `""`, zero,
    `false` and `0s` are what `--write-config-to` and kubeadm print for every field nobody set
    (the defaults), and an empty block holds nothing."""
    if value is None or value is False or value == "" or value == 0 or value == {} or value == []:
        return False
    return not (isinstance(value, str) and parse_duration(value) == 0.0)


def _closest(dotted: str) -> str | None:
    """The field a misspelt one was meant to be (`strictArp` -> `ipvs.strictARP`), if one is close."""
    head, _, leaf = dotted.rpartition(".")
    names = sorted(FIELDS[head] or ()) if head and FIELDS.get(head) else list(FIELDS)
    by_lower = {n.lower(): n for n in names}
    found = by_lower.get(leaf.lower()) or next(iter(difflib.get_close_matches(leaf, names, n=1, cutoff=0.8)), None)
    return None if found is None else f"{head}.{found}" if head else found


def _ignored_in_config(facts: Facts) -> Finding | None:
    """Fields of the configuration kube-proxy does not read: it goes on without them (silently
    before 1.18, with a line in its log since: `using lenient decoding as strict decoding failed`),
    so the setting the file means is not made."""
    cfg = facts.kp_config
    cf = cfg.file
    if cf is None or not cf.data:
        return None
    minor = _running_minor(cfg.version)
    newest = RELEASES[-1]
    never = [d for d in unknown_fields(cf.data) if _sets(cf.get(d))]
    # a field some release lacks: the release running's, or (not known) the newest's: a field removed
    dropped = [
        d
        for d in fields_set(cf.data)
        if d not in never and _sets(cf.get(d)) and _bounds(d) is not None and not _known(d, minor or newest)
    ]
    if not never and not dropped:
        return None
    f = start(facts, "KP131", [], confidence=Confidence.HIGH, severity=Severity.WARNING)
    parts = []
    for d in never:
        near = _closest(d)
        parts.append(f"`{d}` (no release has it{f'; meant `{near}`?' if near else ''})")
    for d in dropped:
        first, last = _bounds(d) or (RELEASES[0], None)
        span = f"1.{first}" if first == last else f"1.{first}-1.{last}"
        parts.append(f"`{d}` (kube-proxy {span} only)" if last is not None else f"`{d}` (1.{first} and later)")
    whose = "kube-proxy" if minor is None else f"kube-proxy {cfg.version}"
    f.summary = (
        f"{whose} does not read these fields of its configuration and goes on without them, so what they "
        f"set is not in effect: {', '.join(parts[:5])}{' and more' if len(parts) > 5 else ''}."
    )
    f.evidence = []
    for d in [*never, *dropped]:
        src = cf.cite(d)
        c = Cite(src.artifact, src.line, src.text)
        if c not in f.evidence:
            f.evidence.append(c)
    if not never and minor is None:
        suspect(
            f,
            "the newest releases do not have these fields; kube-proxy's release is not shown",
            ["`kube-proxy --version` (or the kube-proxy image's tag)"],
            confidence=Confidence.MEDIUM,
        )
    note_version(f, facts.kube_proxy_version, "kube-proxy")
    f.fix = [
        "Write each setting under its name in KubeProxyConfiguration v1alpha1 (the field names are "
        "case-sensitive: https://kubernetes.io/docs/reference/config-api/kube-proxy-config.v1alpha1/), then restart "
        "the kube-proxy Pods; kube-proxy 1.18+ logs the fields it ignored at start-up "
        "(`using lenient decoding as strict decoding failed`)."
    ]
    return f
