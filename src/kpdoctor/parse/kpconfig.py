"""kube-proxy's configuration: command-line flags, the ``--config`` file, and who wins.

kube-proxy's real precedence (seed 002; k/k#98302, #79266, #108737): when ``--config`` is given,
the file replaces the whole configuration and almost every other flag is silently ignored. The
exceptions are the logging flags (``-v`` ...), the flags that are not part of the configuration
(``--config``, ``--write-config-to``, ``--cleanup``, ``--master``...), and, since 1.13
(k/k#69340), ``--hostname-override``. kubelet does the opposite (flags win), which is why people
get this wrong.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.parse.diagnostics import Diagnostic
from kpdoctor.parse.shellwords import shell_split
from kpdoctor.parse.structured import FENCE, StructuredError, load_yaml_all
from kpdoctor.versions import KubeVersion

# flag -> dotted KubeProxyConfiguration field
FLAG_TO_FIELD: dict[str, str] = {
    "hostname-override": "hostnameOverride",
    "bind-address": "bindAddress",
    "proxy-mode": "mode",
    "cluster-cidr": "clusterCIDR",
    "iptables-sync-period": "iptables.syncPeriod",
    "iptables-min-sync-period": "iptables.minSyncPeriod",
    "iptables-masquerade-bit": "iptables.masqueradeBit",
    "masquerade-all": "iptables.masqueradeAll",
    "ipvs-sync-period": "ipvs.syncPeriod",
    "ipvs-min-sync-period": "ipvs.minSyncPeriod",
    "ipvs-scheduler": "ipvs.scheduler",
    "ipvs-strict-arp": "ipvs.strictARP",
    "nodeport-addresses": "nodePortAddresses",
    "healthz-bind-address": "healthzBindAddress",
    "metrics-bind-address": "metricsBindAddress",
    "conntrack-max-per-core": "conntrack.maxPerCore",
    "conntrack-min": "conntrack.min",
    "kubeconfig": "clientConnection.kubeconfig",
    "feature-gates": "featureGates",
    "detect-local-mode": "detectLocalMode",
    "oom-score-adj": "oomScoreAdj",
    "profiling": "enableProfiling",
}
# Flags kube-proxy honours even with --config.
ALWAYS_HONOURED = {
    "config",
    "write-config-to",
    "cleanup",
    "cleanup-ipvs",
    "init-only",
    "master",
    "version",
    "v",
    "vmodule",
    "logtostderr",
    "alsologtostderr",
    "log-dir",
    "log-file",
    "log-file-max-size",
    "stderrthreshold",
    "skip-headers",
    "skip-log-headers",
    "add-dir-header",
    "one-output",
    "log-flush-frequency",
    "logging-format",
    "help",
    "h",
}
HOSTNAME_OVERRIDE_WITH_CONFIG = KubeVersion(1, 13, 0)
# Defaults of flags whose value kube-proxy prints in its "FLAG:" lines, so a FLAG line can be
# told apart from an explicitly set flag. Values as printed by pflag.
FLAG_DEFAULTS: dict[str, set[str]] = {
    "bind-address": {"0.0.0.0"},
    "iptables-sync-period": {"30s"},
    "iptables-min-sync-period": {"0s", "1s", "10s"},
    "ipvs-sync-period": {"30s"},
    "ipvs-min-sync-period": {"0s"},
    "healthz-bind-address": {"0.0.0.0:10256"},
    "metrics-bind-address": {"127.0.0.1:10249"},
    "ipvs-scheduler": {""},
    "masquerade-all": {"false"},
    "ipvs-strict-arp": {"false"},
    "iptables-masquerade-bit": {"14"},
    "conntrack-max-per-core": {"32768"},
    "conntrack-min": {"131072"},
    "oom-score-adj": {"-999"},
    "feature-gates": {"", "map[]"},
    "nodeport-addresses": {"[]"},
    "profiling": {"false"},
}


@dataclass(frozen=True, slots=True)
class Source:
    """Where a value was read: artifact and line in the user's file."""

    artifact: str
    line: int | None
    text: str


@dataclass(frozen=True, slots=True)
class FlagValue:
    name: str
    value: str
    source: Source
    explicit: bool = True  # False for a FLAG: line whose value equals the default


def parse_argv(argv: list[str], source: Source) -> dict[str, FlagValue]:
    """Flags from a kube-proxy argv (``--a=b``, ``--a b``, ``-v=4``, booleans)."""
    flags: dict[str, FlagValue] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("-") or tok in ("-", "--"):
            continue
        name = tok.lstrip("-")
        value = "true"
        if "=" in name:
            name, value = name.split("=", 1)
        elif (
            i < len(argv)
            and not argv[i].startswith("-")
            and name
            not in (
                "masquerade-all",
                "cleanup",
                "cleanup-ipvs",
                "version",
                "init-only",
                "alsologtostderr",
                "logtostderr",
                "ipvs-strict-arp",
            )
        ):
            value = argv[i]
            i += 1
        flags[name] = FlagValue(name, value.strip("'\""), source)
    return flags


# What kpdoctor reads of a command line: what the live collector reads of /proc/PID/cmdline. A
# file given by hand gets the same bound (kube-proxy's own command lines are a few KiB).
MAX_CMDLINE_CHARS = 256 * 1024
_SEPARATORS = "\x00 \t\r\n"


@dataclass(frozen=True, slots=True)
class Cmdline:
    """A command line split into its words, and what was wrong with it (cut short)."""

    argv: list[str]
    diagnostics: list[Diagnostic] = field(default_factory=list)


def read_cmdline(text: str) -> Cmdline:
    """A command line from ``/proc/PID/cmdline`` (NUL-separated) or as one shell line.

    At most ``MAX_CMDLINE_CHARS`` are read: beyond, the text is cut before the word the limit
    falls in (a flag value cut in two would be read as if whole) and a diagnostic says so.
    """
    diagnostics: list[Diagnostic] = []
    if len(text) > MAX_CMDLINE_CHARS:
        cut = text[:MAX_CMDLINE_CHARS]
        if text[MAX_CMDLINE_CHARS] not in _SEPARATORS:
            cut = cut[: max(cut.rfind(c) for c in _SEPARATORS) + 1]
        diagnostics.append(
            Diagnostic(
                None,
                f"command line of {len(text):,} characters cut to its first {len(cut):,} "
                f"(at most {MAX_CMDLINE_CHARS // 1024} KiB are read, as of /proc/PID/cmdline): the rest is ignored",
            )
        )
        text = cut
    if "\x00" in text:
        return Cmdline([a for a in text.split("\x00") if a], diagnostics)
    line = " ".join(text.strip().splitlines())
    try:
        return Cmdline(shell_split(line), diagnostics)
    except ValueError:
        return Cmdline(line.split(), diagnostics)


def split_cmdline(text: str) -> list[str]:
    """The words of a command line (see ``read_cmdline``, which also says when it was cut)."""
    return read_cmdline(text).argv


def kube_proxy_args(argv: list[str]) -> list[str] | None:
    """The part of an argv that belongs to kube-proxy (after wrappers like go-runner, hyperkube)."""
    for i, a in enumerate(argv):
        base = a.rsplit("/", 1)[-1]
        if base == "kube-proxy":
            return argv[i + 1 :]
        if base == "hyperkube" and i + 1 < len(argv) and argv[i + 1] in ("proxy", "kube-proxy"):
            return argv[i + 2 :]
    return None


# A number starts only where no digit or dot precedes it, and takes its digits possessively: a
# run of digits with no unit fails once, not once per digit (which was quadratic: a 20,000-digit
# value took 15 s). No Go duration kube-proxy accepts is anywhere near 64 characters long.
_DURATION_PART = lazy_re.compile(r"(?<![\d.])(\d++(?:\.\d++)?+)(ns|us|µs|ms|s|m|h)")
_DURATION_CHARS = 64


def parse_duration(text: str | None) -> float | None:
    """Go durations as kube-proxy prints them: ``30s``, ``1m0s``, ``500ms``, ``0``, ``-1s`` (a
    sign before the whole, as Go's ParseDuration reads it)."""
    if text is None:
        return None
    s = str(text).strip().strip("'\"")
    sign = -1.0 if s.startswith("-") else 1.0
    s = s[1:] if s[:1] in ("-", "+") else s
    if s in ("0", ""):
        return 0.0 if s == "0" else None
    if len(s) > _DURATION_CHARS:
        return None
    total = 0.0
    found = False
    for num, unit in _DURATION_PART.findall(s):
        found = True
        total += float(num) * {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[unit]
    return sign * total if found else None


# KubeProxyConfiguration's fields as a config file writes them (kubeproxy.config.k8s.io/v1alpha1,
# the only version ever released; staging/src/k8s.io/kube-proxy/config/v1alpha1/types.go at every
# release 1.14-1.36): each top-level field, with the fields of its block (None: not a block).
# Fields some releases added or removed are all here: a file is recognised whatever its release.
FIELDS: dict[str, frozenset[str] | None] = {
    "apiVersion": None,
    "kind": None,
    "featureGates": None,
    "bindAddress": None,
    "healthzBindAddress": None,
    "metricsBindAddress": None,
    "bindAddressHardFail": None,  # 1.19+
    "enableProfiling": None,
    "showHiddenMetricsForVersion": None,  # 1.18+
    "clusterCIDR": None,
    "hostnameOverride": None,
    "clientConnection": frozenset({"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}),
    "iptables": frozenset({"masqueradeBit", "masqueradeAll", "syncPeriod", "minSyncPeriod", "localhostNodePorts"}),
    "ipvs": frozenset(
        {
            "syncPeriod",
            "minSyncPeriod",
            "scheduler",
            "excludeCIDRs",
            "strictARP",
            "tcpTimeout",
            "tcpFinTimeout",
            "udpTimeout",
        }
    ),
    "nftables": frozenset({"masqueradeBit", "masqueradeAll", "syncPeriod", "minSyncPeriod"}),  # 1.29+
    "winkernel": frozenset({"networkName", "sourceVip", "enableDSR", "rootHnsEndpointName", "forwardHealthCheckVip"}),
    "oomScoreAdj": None,
    "mode": None,
    "portRange": None,
    "resourceContainer": None,  # 1.14-1.15
    "udpIdleTimeout": None,  # to 1.25
    "conntrack": frozenset(
        {
            "max",
            "maxPerCore",
            "min",
            "tcpEstablishedTimeout",
            "tcpCloseWaitTimeout",
            "tcpBeLiberal",
            "udpTimeout",
            "udpStreamTimeout",
        }
    ),
    "configSyncPeriod": None,
    "nodePortAddresses": None,
    "detectLocalMode": None,  # 1.18+
    "detectLocal": frozenset({"bridgeInterface", "interfaceNamePrefix"}),  # 1.24+
    "logging": None,  # 1.28+
    "windowsRunAsService": None,  # 1.31+
}
# The fields above that not every release has: (first, last) minor release (None: still there).
FIELD_RELEASES: dict[str, tuple[int, int | None]] = {
    "bindAddressHardFail": (19, None),
    "showHiddenMetricsForVersion": (18, None),
    "nftables": (29, None),
    "resourceContainer": (14, 15),
    "udpIdleTimeout": (14, 25),
    "detectLocalMode": (18, None),
    "detectLocal": (24, None),
    "logging": (28, None),
    "windowsRunAsService": (31, None),
    "conntrack.max": (14, 14),
    "conntrack.tcpBeLiberal": (29, None),
    "conntrack.udpTimeout": (29, None),
    "conntrack.udpStreamTimeout": (29, None),
    "ipvs.strictARP": (15, None),
    "ipvs.tcpTimeout": (18, None),
    "ipvs.tcpFinTimeout": (18, None),
    "ipvs.udpTimeout": (18, None),
    "iptables.localhostNodePorts": (26, None),
    "winkernel.rootHnsEndpointName": (24, None),
    "winkernel.forwardHealthCheckVip": (24, None),
}


def fields_set(data: dict[str, Any]) -> list[str]:
    """Every field a document sets, dotted (a block's fields, not the block)."""
    out = []
    for key, value in data.items():
        if FIELDS.get(key) is not None and isinstance(value, dict):
            out += [f"{key}.{k}" for k in value]
        else:
            out.append(str(key))
    return out


def unknown_fields(data: dict[str, Any]) -> list[str]:
    """The fields of a configuration that no release of KubeProxyConfiguration has (dotted): a
    misspelling, another component's field, one of the internal configuration's names (an
    object's `metadata` is no setting, whatever kube-proxy does with it)."""
    out = []
    for dotted in fields_set(data):
        head, _, leaf = dotted.partition(".")
        block = FIELDS.get(head, frozenset())
        if head != "metadata" and (head not in FIELDS or (leaf and block is not None and leaf not in block)):
            out.append(dotted)
    return out


def known_in(dotted: str, minor: int) -> bool:
    """Does release 1.<minor> have this field (one of :data:`FIELDS`)?"""
    first, last = FIELD_RELEASES.get(dotted, (0, None))
    return first <= minor and (last is None or minor <= last)


# Fields no other component's configuration has at its top level: kube-scheduler's and kubelet's
# have healthzBindAddress, metricsBindAddress, clientConnection, featureGates, oomScoreAdj...
_KUBE_PROXY_ONLY = frozenset(
    {
        "clusterCIDR",
        "mode",
        "iptables",
        "ipvs",
        "nftables",
        "winkernel",
        "conntrack",
        "nodePortAddresses",
        "detectLocalMode",
        "detectLocal",
        "udpIdleTimeout",
        "portRange",
        "bindAddressHardFail",
        "hostnameOverride",
        "configSyncPeriod",
    }
)
_TOP_KEY = lazy_re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*:", re.M)


def partial_document(doc: object, named: bool = False) -> bool:
    """Is ``doc`` a part of a KubeProxyConfiguration (no apiVersion/kind; pasted from the ConfigMap,
    grep'd from it, a few lines quoted)? Every key is one of its fields, each block holds one of
    its own; two fields at least, one of them a field only kube-proxy's configuration has, or one
    of its blocks with what it holds (``named``: the file's name or the command that printed it
    says kube-proxy, and then any two of its fields do). A lone ``mode: x`` is anybody's."""
    if not isinstance(doc, dict) or not doc or "kind" in doc or "apiVersion" in doc:
        return False
    blocks = 0
    for key, value in doc.items():
        if not isinstance(key, str) or key not in FIELDS:
            return False
        block = FIELDS[key]
        if block is not None and value is not None:
            # one of the block's own fields at least (a misspelt one beside it is KP131's to name)
            if not isinstance(value, dict) or (value and not set(value) & block):
                return False
            blocks += bool(value) and key in _KUBE_PROXY_ONLY
    if blocks:
        return True
    return len(doc) >= 2 and (bool(_KUBE_PROXY_ONLY & doc.keys()) or named)


def _unfenced(text: str) -> str:
    """The text with its markdown fence lines blanked (they are no output; the lines keep their numbers)."""
    return FENCE.sub("", text) if "```" in text or "~~~" in text else text


def partial_in(text: str, named: bool = False) -> bool:
    """Is this YAML text a part of a KubeProxyConfiguration (see :func:`partial_document`)?"""
    if len(text) > 256 * 1024:
        return False
    text = textwrap.dedent(_unfenced(text))  # a block quoted from inside a ConfigMap keeps its indentation
    if re.search(r"^(?:apiVersion|kind)\s*:", text, re.M):
        return False
    keys = set(_TOP_KEY.findall(text))
    if not keys or not keys <= FIELDS.keys():
        return False
    try:
        docs = load_yaml_all(text)
    except StructuredError:
        return False
    return len(docs) == 1 and partial_document(docs[0], named)


@dataclass(slots=True)
class ConfigFile:
    """A KubeProxyConfiguration document (``partial``: a part of one, without its kind: a field
    it does not show is unknown, not unset)."""

    data: dict[str, Any]
    source: Source
    diagnostics: list[Diagnostic] = field(default_factory=list)
    text: str = ""
    first_line: int = 1
    partial: bool = False

    def _lookup(self, dotted: str) -> tuple[bool, Any]:
        """Whether the document has the field, and its value."""
        cur: Any = self.data
        for part in dotted.split("."):
            if not isinstance(cur, dict) or part not in cur:
                return False, None
            cur = cur[part]
        return True, cur

    def get(self, dotted: str) -> Any:
        return self._lookup(dotted)[1]

    def shows(self, dotted: str) -> bool:
        """Does the document say what ``dotted`` is? A whole one always does (a field it leaves
        out is unset); a part only for the fields it has."""
        return not self.partial or self._lookup(dotted)[0]

    def cite(self, dotted: str) -> Source:
        """Where a field is set: its own line (nested keys searched under their parents)."""
        pos = 0
        line_start = None
        for part in dotted.split("."):
            m = re.compile(rf"^\s*\"?{re.escape(part)}\"?\s*:", re.M).search(self.text, pos)
            if m is None:
                return self.source
            pos, line_start = m.end(), m.start()
        if line_start is None:
            return self.source
        ln = self.text.count("\n", 0, line_start)
        line = self.text.splitlines()[ln].strip() if self.text else ""
        # ``ln`` counts from the document's first line; ``self.source`` points at its kind: line
        return Source(self.source.artifact, self.first_line + ln, line)


def parse_config_file(text: str, artifact: str, first_line: int = 1) -> ConfigFile | None:
    text = _unfenced(text)
    try:
        docs = load_yaml_all(text)
    except StructuredError as exc:
        cf = ConfigFile({}, Source(artifact, first_line, ""), text=text, first_line=first_line)
        cf.diagnostics.append(Diagnostic(None if exc.line is None else exc.line - 1 + first_line, str(exc)))
        return cf
    doc = docs[0] if docs else None
    if not isinstance(doc, dict):
        return None
    kind_line = next((i for i, ln in enumerate(text.splitlines()) if re.match(r"\s*\"?kind\"?\s*:", ln)), 0)
    cf = ConfigFile(
        doc,
        Source(artifact, first_line, text.splitlines()[0].strip() if text else ""),
        text=text,
        first_line=first_line,
    )
    cf.source = Source(artifact, first_line + kind_line, (text.splitlines() or [""])[kind_line].strip())
    cf.partial = "kind" not in doc
    return cf


# Fields kube-proxy's defaulting fills in when a config file leaves them at their zero value:
# SetDefaults_KubeProxyConfiguration (pkg/proxy/apis/config/v1alpha1/defaults.go) tests
# ``Duration == 0``, ``== ""`` or ``== 0``, not "absent". So in a file, ``0s``, ``0`` or ``""``
# there means "unset", which is how ``--write-config-to`` style dumps (kubeadm's among them)
# print every field nobody set. Pointer fields (conntrack.maxPerCore, masqueradeBit,
# oomScoreAdj...) differ: 0 is a value there, only null is unset. A flag is parsed after the
# defaults are applied, so a flag's 0 is always a value.
ZERO_IS_UNSET = frozenset(
    {
        "bindAddress",
        "healthzBindAddress",
        "metricsBindAddress",
        "configSyncPeriod",
        "udpIdleTimeout",
        "iptables.syncPeriod",
        "iptables.minSyncPeriod",
        "ipvs.syncPeriod",
        "clientConnection.contentType",
        "clientConnection.qps",
        "clientConnection.burst",
    }
)


def unset_in_file(fld: str, value: Any) -> bool:
    """Does a config file's ``value`` for ``fld`` leave kube-proxy's default in place?"""
    if value is None or value == "":
        return True
    if fld not in ZERO_IS_UNSET or isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == 0
    return isinstance(value, str) and parse_duration(value) == 0.0


@dataclass(frozen=True, slots=True)
class Setting:
    """An effective setting and why it has that value."""

    value: Any
    origin: str  # "flag" | "config" | "default" | "unknown"
    source: Source | None = None


@dataclass(frozen=True, slots=True)
class IgnoredFlag:
    flag: FlagValue
    field: str
    config_value: Any  # what the file says (None: the file leaves it at its default)
    shown: bool = True  # False: the file is a part of one that does not show the field


@dataclass(slots=True)
class KubeProxyConfig:
    """Flags + config file, resolved with kube-proxy's precedence."""

    flags: dict[str, FlagValue] = field(default_factory=dict)
    flags_from_log: bool = False  # flags came from "FLAG:" lines (they list defaults too)
    file: ConfigFile | None = None
    version: KubeVersion | None = None

    @property
    def config_flag(self) -> FlagValue | None:
        f = self.flags.get("config")
        return f if f and f.value else None

    def _honoured_with_config(self, name: str) -> bool:
        if name in ALWAYS_HONOURED:
            return True
        if name == "hostname-override":
            if self.version is None:
                return True  # modern behaviour; the check reports the uncertainty
            return self.version.upstream >= HOSTNAME_OVERRIDE_WITH_CONFIG.upstream
        return False

    def ignored_flags(self) -> list[IgnoredFlag]:
        """Flags given together with ``--config`` that kube-proxy ignores."""
        if self.config_flag is None:
            return []
        out = []
        for name, fv in self.flags.items():
            if not fv.explicit or self._honoured_with_config(name):
                continue
            if len(name) == 1:
                continue  # a wrapper's `-c` (sh -c): kube-proxy's only shorthands are -v and -h
            fld = FLAG_TO_FIELD.get(name)
            if fld is None and self.flags_from_log:
                continue  # a FLAG: line for a flag we know nothing about
            shown = self.file is None or not fld or self.file.shows(fld)
            out.append(IgnoredFlag(fv, fld or "", self.file.get(fld) if (self.file and fld) else None, shown))
        return out

    def setting(self, fld: str) -> Setting:
        """Effective value of a config field, with its origin."""
        flag_name = next((k for k, v in FLAG_TO_FIELD.items() if v == fld), None)
        fv = self.flags.get(flag_name) if flag_name else None
        if self.config_flag is not None:
            if fv is not None and fv.explicit and flag_name and self._honoured_with_config(flag_name):
                return Setting(fv.value, "flag", fv.source)
            if self.file is not None:
                val = self.file.get(fld)
                if not unset_in_file(fld, val):
                    return Setting(val, "config", self.file.cite(fld))
                if not self.file.shows(fld):  # a part of the file: what the rest says is not known
                    return Setting(None, "unknown", self.file.source)
                return Setting(None, "default", self.file.cite(fld))
            return Setting(None, "unknown", self.config_flag.source)
        if fv is not None:
            return Setting(fv.value, "flag" if fv.explicit else "default", fv.source)
        if self.file is not None:  # config seen but no flags known: assume it is in use
            val = self.file.get(fld)
            if not unset_in_file(fld, val):
                return Setting(val, "config", self.file.cite(fld))
        return Setting(None, "default" if self.flags else "unknown")
