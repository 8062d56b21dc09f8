"""KP116: the kernel lacks a netfilter part kube-proxy's rules or start-up need."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.checks.sync.backend_mismatch import TABLE_INIT_FAILED
from kpdoctor.facts import Facts
from kpdoctor.facts.log import cite_line, is_other_writer
from kpdoctor.facts.nft_errors import NFT_RULE_ERROR, failing_part
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit


@dataclass(frozen=True, slots=True)
class Part:
    """A kernel part: its module, the kernel option that builds it, what kube-proxy uses it for."""

    module: str
    config: str
    used_for: str


# xtables matches (lower-case names) and targets (upper-case) kube-proxy's rules use.
MATCHES = {
    "comment": Part("xt_comment", "CONFIG_NETFILTER_XT_MATCH_COMMENT", "the comment on every kube-proxy rule"),
    "statistic": Part("xt_statistic", "CONFIG_NETFILTER_XT_MATCH_STATISTIC", "spreading a Service over endpoints"),
    "recent": Part("xt_recent", "CONFIG_NETFILTER_XT_MATCH_RECENT", "sessionAffinity: ClientIP"),
    "conntrack": Part("xt_conntrack", "CONFIG_NETFILTER_XT_MATCH_CONNTRACK", "conntrack state matches"),
    "mark": Part("xt_mark", "CONFIG_NETFILTER_XT_MARK", "the masquerade and drop marks"),
    "addrtype": Part("xt_addrtype", "CONFIG_NETFILTER_XT_MATCH_ADDRTYPE", "NodePorts on local addresses"),
    "multiport": Part("xt_multiport", "CONFIG_NETFILTER_XT_MATCH_MULTIPORT", "port lists"),
    "set": Part("xt_set", "CONFIG_NETFILTER_XT_SET", "IPVS mode's ipset matches"),
    "physdev": Part("xt_physdev", "CONFIG_NETFILTER_XT_MATCH_PHYSDEV", "bridged traffic"),
    "sctp": Part("xt_sctp", "CONFIG_NETFILTER_XT_MATCH_SCTP", "SCTP Services"),
    "nfacct": Part("xt_nfacct", "CONFIG_NETFILTER_XT_MATCH_NFACCT", "kube-proxy's packet counters"),
    "connmark": Part("xt_connmark", "CONFIG_NETFILTER_XT_CONNMARK", "connection marks"),
    "state": Part("xt_state", "CONFIG_NETFILTER_XT_MATCH_STATE", "connection state matches"),
}
TARGETS = {
    "DNAT": Part("xt_nat", "CONFIG_NETFILTER_XT_NAT", "Service translation"),
    "SNAT": Part("xt_nat", "CONFIG_NETFILTER_XT_NAT", "source translation"),
    "MASQUERADE": Part("xt_MASQUERADE", "CONFIG_NETFILTER_XT_TARGET_MASQUERADE", "masquerading"),
    "REJECT": Part("ipt_REJECT/ip6t_REJECT", "CONFIG_IP_NF_TARGET_REJECT", "rejecting Services without endpoints"),
    "CONNMARK": Part("xt_connmark", "CONFIG_NETFILTER_XT_CONNMARK", "connection marks"),
    "NOTRACK": Part("xt_CT", "CONFIG_NETFILTER_XT_TARGET_CT", "untracked traffic"),
    "CT": Part("xt_CT", "CONFIG_NETFILTER_XT_TARGET_CT", "conntrack settings"),
    "LOG": Part("xt_LOG", "CONFIG_NETFILTER_XT_TARGET_LOG", "logging"),
    "REDIRECT": Part("xt_REDIRECT", "CONFIG_NETFILTER_XT_TARGET_REDIRECT", "the userspace proxy"),
}
TABLES = {
    "nat": ("NAT", "Service translation"),
    "filter": ("FILTER", "kube-proxy's firewall chains"),
    "mangle": ("MANGLE", "kube-proxy's canary chain"),
    "raw": ("RAW", "untracked traffic"),
}
# nftables expressions kube-proxy's nftables mode writes, by the word that starts them.
NFT_EXPRESSIONS = {
    "fib": Part("nft_fib_ipv4/nft_fib_ipv6", "CONFIG_NFT_FIB_IPV4/CONFIG_NFT_FIB_IPV6", "`fib saddr type local`"),
    "numgen": Part("nft_numgen", "CONFIG_NFT_NUMGEN", "spreading a Service over endpoints"),
    "ct": Part("nft_ct", "CONFIG_NFT_CT", "conntrack matches"),
    "reject": Part("nft_reject_inet", "CONFIG_NFT_REJECT", "rejecting Services without endpoints"),
    "masquerade": Part("nft_masq", "CONFIG_NFT_MASQ", "masquerading"),
    "dnat": Part("nft_nat", "CONFIG_NFT_NAT", "Service translation"),
    "snat": Part("nft_nat", "CONFIG_NFT_NAT", "source translation"),
}
OTHER_MODULES = {
    "ip_tables": Part("ip_tables", "CONFIG_IP_NF_IPTABLES", "iptables mode (the legacy xtables core)"),
    "ip6_tables": Part("ip6_tables", "CONFIG_IP6_NF_IPTABLES", "IPv6 iptables"),
    "x_tables": Part("x_tables", "CONFIG_NETFILTER_XTABLES", "every iptables rule"),
    "nf_tables": Part("nf_tables", "CONFIG_NF_TABLES", "nftables mode and iptables-nft"),
    "nf_conntrack": Part("nf_conntrack", "CONFIG_NF_CONNTRACK", "connection tracking (its sysctls)"),
    "nf_conntrack_netlink": Part("nf_conntrack_netlink", "CONFIG_NF_CT_NETLINK", "clearing stale conntrack entries"),
    "nf_nat": Part("nf_nat", "CONFIG_NF_NAT", "every NAT rule"),
}
# Merged into nf_conntrack in Linux 4.19: kube-proxy's attempt to load them on newer kernels fails
# harmlessly. The IPVS modules and br_netfilter are other causes' (KP113, KP309).
_NOT_THIS = lazy_re.compile(r"^(nf_conntrack_ipv[46]|ip_vs.*|br_netfilter)$")
_NETFILTER_MODULE = lazy_re.compile(
    r"^(nf_|nft_|xt_|ipt_|ip6t_|iptable_|ip6table_|ip_tables|ip6_tables|x_tables|ip_set)"
)

XT_MISSING = signature(
    "xtables-extension-missing",
    "Couldn't ",
    r"Couldn't (load|find) (match|target) [`'\"]([A-Za-z0-9_]+)['`\"]",
    failure=True,
)
XT_REVISION = signature(
    "xtables-extension-revision",
    "not supported, missing kernel module",
    r"Extension ([A-Za-z0-9_]+) revision [0-9]+ not supported, missing kernel module",
)
MODPROBE_MISSING = signature(
    "modprobe-module-not-found",
    "modprobe: FATAL: Module ",
    r"modprobe: FATAL: Module ([A-Za-z0-9_-]+) not found in directory ([^ ]*)",
)
CONNTRACK_NOT_LOADED = signature(
    "conntrack-sysctl-missing",
    "/proc/sys/net/netfilter/",
    r"(open|write) /proc/sys/net/netfilter/(nf_conntrack_[a-z_]+): no such file or directory",
    failure=True,
)
CONNTRACK_NETLINK_MISSING = signature(
    "conntrack-netlink-handler",
    "Can't open handler",
    r"conntrack v[0-9.]+ \(conntrack-tools\): Can't open handler",
)


@dataclass(frozen=True, slots=True)
class Missing:
    """One missing part, how it showed, and the line that shows it."""

    name: str  # "match comment", "table nat (IPv6)", "nft expression fib", "module ip_tables"
    part: Part
    hit: Hit | None  # the log line that shows it; None: the kernel's configuration (``cite``)
    certain: bool  # the kernel itself said so (modprobe, a revision probe, a sysctl that is absent)
    cite: Cite | None = None  # the configuration's line, when that is what shows it
    options: str = ""  # the kernel options none of which was built, when the configuration shows it

    @property
    def own(self) -> bool:
        """Shown by kube-proxy's own failure (not another writer's line, nor the configuration)."""
        return self.hit is not None and not is_other_writer(self.hit)


# What kube-proxy's rules use in iptables mode whatever the cluster holds (IPVS mode writes the
# same iptables rules but statistic's), each with the kernel options any one of which builds it
# (MASQUERADE moved from IP_NF_TARGET_MASQUERADE to NETFILTER_XT_TARGET_MASQUERADE in 5.2, the
# old option selecting the new): a kernel built with none of them cannot run those rules.
_XT = frozenset({"iptables", "ipvs"})
_NFT = frozenset({"nftables"})
_ALL = _XT | _NFT
ALWAYS_USED: tuple[tuple[str, Part, tuple[str, ...], frozenset[str]], ...] = (
    ("match comment", MATCHES["comment"], ("CONFIG_NETFILTER_XT_MATCH_COMMENT",), _XT),
    ("match statistic", MATCHES["statistic"], ("CONFIG_NETFILTER_XT_MATCH_STATISTIC",), frozenset({"iptables"})),
    ("match conntrack", MATCHES["conntrack"], ("CONFIG_NETFILTER_XT_MATCH_CONNTRACK",), _XT),
    ("match mark", MATCHES["mark"], ("CONFIG_NETFILTER_XT_MARK",), _XT),
    ("match addrtype", MATCHES["addrtype"], ("CONFIG_NETFILTER_XT_MATCH_ADDRTYPE",), _XT),
    (
        "target MASQUERADE",
        TARGETS["MASQUERADE"],
        ("CONFIG_NETFILTER_XT_TARGET_MASQUERADE", "CONFIG_IP_NF_TARGET_MASQUERADE"),
        _XT,
    ),
    ("module x_tables", OTHER_MODULES["x_tables"], ("CONFIG_NETFILTER_XTABLES",), _XT),
    ("module nf_nat", OTHER_MODULES["nf_nat"], ("CONFIG_NF_NAT",), _ALL),
    (
        "module nf_conntrack",
        OTHER_MODULES["nf_conntrack"],
        ("CONFIG_NF_CONNTRACK",),
        _ALL,
    ),
    ("module nf_tables", OTHER_MODULES["nf_tables"], ("CONFIG_NF_TABLES",), _NFT),
    ("nft expression numgen", NFT_EXPRESSIONS["numgen"], ("CONFIG_NFT_NUMGEN",), _NFT),
    ("nft expression ct", NFT_EXPRESSIONS["ct"], ("CONFIG_NFT_CT",), _NFT),
    (
        "nft expression fib",
        NFT_EXPRESSIONS["fib"],
        ("CONFIG_NFT_FIB_IPV4", "CONFIG_NFT_FIB_INET"),
        _NFT,
    ),
)


def proxy_mode(facts: Facts) -> str | None:
    """The mode kube-proxy runs in, or says it runs in; None when nothing tells."""
    running = facts.running_mode
    if running.mode is not None:
        return running.mode
    return running.claimed[0] if running.claimed else None


def unbuilt_parts(facts: Facts) -> list[Missing]:
    """The parts kube-proxy's rules always use in its mode (iptables when nothing tells, its
    default) that the kernel's configuration shows built with none of their options."""
    if not facts.kernel_options:
        return []
    mode = proxy_mode(facts) or "iptables"
    out = []
    for name, part, options, modes in ALWAYS_USED:
        if mode not in modes:
            continue
        value, cite = facts.kernel_option(*options)
        if value == "n" and cite is not None:
            out.append(Missing(name, part, None, True, cite, " or ".join(options)))
    return out


def _table_part(table: str, ipv6: bool) -> Part:
    upper, used = TABLES[table]
    if ipv6:
        return Part(f"ip6table_{table}", f"CONFIG_IP6_NF_{upper}", f"IPv6 {used}")
    return Part(f"iptable_{table}", f"CONFIG_IP_NF_{upper}", used)


def _module_part(name: str) -> Part | None:
    name = name.replace("-", "_")
    if _NOT_THIS.match(name) or not _NETFILTER_MODULE.match(name):
        return None
    if name in OTHER_MODULES:
        return OTHER_MODULES[name]
    for table in TABLES:
        if name in (f"iptable_{table}", f"ip6table_{table}"):
            return _table_part(table, name.startswith("ip6"))
    for part in (*MATCHES.values(), *TARGETS.values(), *NFT_EXPRESSIONS.values()):
        if name in part.module.split("/"):
            return part
    return Part(name, "the option that builds " + name, "netfilter")


def missing_parts(facts: Facts) -> list[Missing]:
    """Every missing kernel part the evidence names, first seen first."""
    out: list[Missing] = []
    revision = {str(h.groups[0]) for h in facts.log.hits(XT_REVISION.id) if h.groups}
    for h in facts.log.hits(XT_REVISION.id):
        name = str(h.groups[0])
        if name == "MARK":
            continue  # the MARK regression has its own check (KP114)
        part = MATCHES.get(name) or TARGETS.get(name)
        if part is not None:
            out.append(Missing(f"{'match' if name.islower() else 'target'} {name}", part, h, True))
    for h in facts.log.hits(XT_MISSING.id):
        kind, name = str(h.groups[1]), str(h.groups[2])
        part = MATCHES.get(name) if kind == "match" else TARGETS.get(name)
        if part is None or name == "MARK":
            continue  # a chain (KUBE-MARK-DROP: another cause) or the MARK regression (KP114)
        out.append(Missing(f"{kind} {name}", part, h, name in revision))
    host = None
    for h in facts.log.hits(TABLE_INIT_FAILED.id):
        table = next((g for g in h.groups if g in TABLES), "nat")
        ipv6 = "ip6tables" in h.record or "ip6tables" in h.text
        if not ipv6:
            host = host or facts.host_iptables
            if host is None or host.says("legacy") is not True:
                continue  # a legacy binary on an nf_tables node: a backend mismatch (KP101)
        out.append(Missing(f"table {table}" + (" (IPv6)" if ipv6 else ""), _table_part(table, ipv6), h, False))
    for h in facts.log.hits(MODPROBE_MISSING.id):
        part = _module_part(str(h.groups[0]))
        if part is not None:
            out.append(Missing(f"module {h.groups[0]}", part, h, True))
    for h in facts.log.hits(CONNTRACK_NOT_LOADED.id):
        out.append(Missing(f"sysctl {h.groups[1]}", OTHER_MODULES["nf_conntrack"], h, True))
    for h in facts.log.hits(CONNTRACK_NETLINK_MISSING.id):
        out.append(Missing("conntrack netlink", OTHER_MODULES["nf_conntrack_netlink"], h, False))
    for h in facts.log.hits(NFT_RULE_ERROR.id):
        got = failing_part(facts, h)
        if got is not None and got[0] == "No such file or directory" and got[1] in NFT_EXPRESSIONS:
            out.append(Missing(f"nft expression {got[1]}", NFT_EXPRESSIONS[got[1]], h, False))
    # a module the kernel was asked for and does not have makes the table failure certain
    modules = {m.part.module for m in out if m.name.startswith("module ")}
    return [Missing(m.name, m.part, m.hit, m.certain or m.part.module in modules) for m in out]


@check(
    "KP116",
    cause="kernel-netfilter-feature-missing",
    title="the kernel lacks a netfilter part kube-proxy needs",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.KERNEL_CONFIG],
    partly=[Kind.KERNEL_CONFIG],  # the parts kube-proxy cannot load, not its failures
    explains=("iptables-backend-mismatch", "stale-udp-conntrack", *RESTORE_SYMPTOMS),
)
def kernel_feature_missing(facts: Facts) -> Iterator[Finding]:
    """The node's kernel was built or booted without a netfilter part kube-proxy uses.

    Symptom: every sync fails, or kube-proxy exits at start: `Couldn't load match
        `comment':No such file or directory`, `Warning: Extension statistic revision 0 not
        supported, missing kernel module?`, `Couldn't find match `conntrack'`, `ip6tables-restore:
        unable to initialize table 'nat'`, `open /proc/sys/net/netfilter/nf_conntrack_max: no
        such file or directory`, `conntrack v1.4.6 (conntrack-tools): Can't open handler`,
        nftables' `Error: Could not process rule: No such file or directory` under a `fib`
        expression, or `modprobe: FATAL: Module ip_tables not found in directory /lib/modules/...`.
    Cause: kube-proxy's rules use xtables matches and targets (comment, statistic, recent,
        conntrack, mark, addrtype...) or nftables expressions (fib, numgen, ct...), its tables
        (iptable_nat/ip6table_nat), nf_conntrack (whose sysctls it sets at start) and
        nf_conntrack_netlink (to flush stale UDP entries). Custom, board, WSL2 and minimal
        cloud kernels often lack one; some distributions do not load nf_conntrack by default.
    How it is detected: the error lines above in kube-proxy's (or another writer's) log, each
        mapped to the module and kernel option that provide the part; or the kernel's build
        configuration (`/boot/config-$(uname -r)`, `zcat /proc/config.gz`, Docker's or k3s's
        `check-config`) showing an option of a part kube-proxy's rules always use in its mode
        (comment, statistic, conntrack, mark, addrtype, MASQUERADE, nf_nat, nf_conntrack; fib,
        numgen, ct in nftables mode) neither built in nor as a module (`# CONFIG_X is not set`,
        `CONFIG_X: missing`, or left out of a whole config file). A table that cannot be
        initialised counts only for IPv6 alone or on a legacy-only node (otherwise it is a
        backend mismatch, KP101); nf_conntrack_ipv4/ipv6 failing to load on kernels >= 4.19 is
        harmless (merged into nf_conntrack), and the IPVS modules are KP113's.
    Fix: load the module (`modprobe MODULE`, persisted in /etc/modules-load.d/); when modprobe
        says it is "not found in directory /lib/modules/RELEASE", the kernel was built without
        it: use a kernel with the option (=m or =y) or rebuild. A kernel without ip_tables but
        with nf_tables runs kube-proxy in nftables mode (`--proxy-mode=nftables`, 1.31+).
    References: https://github.com/k3s-io/k3s/issues/11862; https://github.com/kubernetes/kubernetes/issues/133694;
        https://github.com/kubernetes-sigs/kind/issues/1740; https://github.com/kubernetes/kops/issues/17968
    """
    logged = missing_parts(facts)
    seen = {m.part.module for m in logged}
    configured = [m for m in unbuilt_parts(facts) if m.part.module not in seen]
    found = logged + configured
    if not found:
        return
    parts: dict[str, list[Missing]] = {}
    for m in found:
        parts.setdefault(m.part.module, []).append(m)
    certain = any(m.certain for m in found)
    own = [m for m in found if m.own]
    mode = proxy_mode(facts)
    # the configuration proves the part absent from the kernel: it breaks kube-proxy in the mode
    # it runs in, or (mode not shown) in every mode but nftables
    f = start(
        facts,
        "KP116",
        [m.hit for m in found if m.hit is not None],
        confidence=Confidence.HIGH if certain and (logged or mode is not None) else Confidence.MEDIUM,
        severity=Severity.CRITICAL if own or configured else Severity.WARNING,
    )
    names = []
    for module, ms in list(parts.items())[:4]:
        p = ms[0].part
        names.append(f"{module} ({p.config}; {p.used_for}; seen as {ms[0].name})")
        for m in ms[:1]:
            c = cite_line(m.hit) if m.hit is not None else m.cite
            if c is not None and c not in f.evidence:
                f.evidence.append(c)
    f.summary = "The kernel lacks " + "; ".join(names) + "."
    if logged:
        f.confidence_reason = (
            "the kernel itself says so (modprobe, a revision probe or an absent sysctl)"
            if certain
            else "the error alone: an iptables without the extension's library would say the same"
        )
    else:
        f.confidence_reason = "the kernel's build configuration: an option built neither in nor as a module" + (
            f" (kube-proxy runs in {mode} mode, which uses it)"
            if mode is not None
            else "; kube-proxy's mode is not shown: its default (iptables) and IPVS mode use it, nftables mode does not"
        )
    if own:
        f.summary += " kube-proxy's syncs or start-up fail on it."
    elif logged:
        whose = next((m.hit.writer for m in found if m.hit is not None and m.hit.writer), "another component")
        f.summary += f" The lines are {whose}'s: the node's kernel fails it, and kube-proxy's rules use the same parts."
    else:
        f.summary += (
            (" Its build configuration shows each" if len(parts) > 1 else " Its build configuration shows it")
            + " built neither in nor as a module: no modprobe can load "
            + ("them" if len(parts) > 1 else "it")
            + ", and kube-proxy's rules use "
            + ("them." if len(parts) > 1 else "it.")
        )
    not_built = [m for m in found if m.hit is not None and m.hit.sig == MODPROBE_MISSING.id]
    loadable = [mod for mod, ms in parts.items() if all(m.hit is not None for m in ms)]
    f.fix = []
    if loadable:
        f.fix.append(
            "Load the module on the host (a container cannot): "
            + ", ".join(f"`modprobe {mod.split('/')[0]}`" for mod in loadable)
            + ", and list it in /etc/modules-load.d/ so it is loaded at boot."
        )
    if not_built:
        f.fix.append(
            f"modprobe found no {not_built[0].part.module} for this kernel: it was built without "
            f"{not_built[0].part.config}; use a kernel that has it (=m or =y) or rebuild it."
        )
    if configured:
        f.fix.append(
            "The kernel was built without "
            + ", ".join(m.options for m in configured[:4])
            + ": boot a kernel built with them (=y or =m; most distribution kernels are) or rebuild this one."
        )
    if "ip_tables" in parts and "nf_tables" not in parts:
        f.fix.append(
            "Or run kube-proxy in nftables mode (`--proxy-mode=nftables`, 1.31 and later): it needs no ip_tables."
        )
    if "nf_conntrack" in parts:
        f.fix.append(
            "Some distributions (Rocky/RHEL 9 and 10) do not load nf_conntrack at boot: load it before kube-proxy."
        )
    yield f
