"""Property-based fuzzing of every parser, the sniffer and the transcript splitter (Hypothesis).

DESIGN.md: "a parser never raises on bad input: it returns what it could read plus diagnostics".
Each parser gets arbitrary text, text assembled from lines of real files of its format (some
mutated: numbers replaced by huge, negative, non-ASCII digits; tokens inserted), and whole real
files run through the mutation engine of ``tests/fuzzing.py``, and must return without raising,
within ``TIME_BOUND`` seconds per call.

Deterministic: ``derandomize=True`` and no example database, so every run tries the same inputs.
Time is bounded by our own generous limit instead of Hypothesis' per-example ``deadline``, which
flakes on a busy 2-core machine. ``KPDOCTOR_FUZZ_EXAMPLES`` (default 100) sets the examples per
parser; raise it for a deeper local run.

A crash already reported to its owner is listed in ``fuzzing.KNOWN_CRASHES``: the test then
xfails naming it, and passes again once the fix lands and the entry is removed.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import pytest
from fuzzing import KNOWN_CRASHES, Finding, finding_from_exception, load_corpus, mutate_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.bundle.layout import BUNDLE_PATHS
from kpdoctor.bundle.sniff import looks_binary, save_attrs, sniff
from kpdoctor.bundle.transcript import has_prompt, hint_from_command, split_transcript
from kpdoctor.facts.node import parse_time
from kpdoctor.knowledge import catalogue
from kpdoctor.parse import (
    conntrack,
    entrypoint,
    health,
    iptables,
    ipvsadm,
    k8s,
    kernel_log,
    kpconfig,
    kubectl_describe,
    kubectl_table,
    links,
    logwrap,
    netstat,
    nft,
    sockets,
    structured,
    sysctl,
    system,
)
from kpdoctor.parse.shapes import REGISTERED

TIME_BOUND = float(os.environ.get("KPDOCTOR_FUZZ_TIME_BOUND", "10"))  # seconds per call; inputs are under 1 MB
EXAMPLES = int(os.environ.get("KPDOCTOR_FUZZ_EXAMPLES", "100"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# ------------------------------------------------------------------------ the corpus by format


@cache
def texts_by_kind() -> dict[Kind | None, list[str]]:
    """Every corpus text typed the way kpdoctor types it: by bundle path, else by content (the
    commands' outputs of a pasted transcript each on their own)."""
    out: dict[Kind | None, list[str]] = {}
    for name, data in load_corpus().files:
        text = data.decode("utf-8", errors="replace")
        if "/demo/bundles/" in name:
            rel = name.split("/demo/bundles/", 1)[1].split("/", 1)[1]
            typed = BUNDLE_PATHS.get(rel)
            out.setdefault(typed[0] if typed else None, []).append(text)
            continue
        parts = split_transcript(text)
        for t in [p.text for p in parts] if parts else [text]:
            out.setdefault(sniff(t, catalogue()).kind, []).append(t)
    return out


@cache
def lines_of(kinds: tuple[Kind, ...]) -> list[str]:
    by = texts_by_kind()
    lines = sorted({ln for k in kinds for t in by.get(k, []) for ln in t.splitlines()})
    return lines or ["x"]


@cache
def files_of(kinds: tuple[Kind, ...]) -> list[bytes]:
    by = texts_by_kind()
    return [t.encode() for k in kinds for t in by.get(k, [])] or [b"x\n"]


WEIRD = [
    "", " ", "\t", "\x00", "\ufeff", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\ufffd", "\x1b[2J", "²", "٣",
    "１", "9" * 4301, "-1", "0x50", "1e999", "NaN", "[", "]", "{", "}", '"', "'", "\\", "=", ":", "::", "%", "@",
    "#", "->", "--", "-A", "*", "[0:0]", "users:((", 'pid=', "src=", "cpu=0", "kind: List", "Chain X (",
]  # fmt: skip
_DIGITS = re.compile(r"\d+")


# What a number in a real line is replaced by: what int() and float() refuse or misread.
WEIRD_NUMBERS = ["²", "٣", "１２", "9" * 4301, "-1", "0x50", "", "1e999", "NaN", "00", "4294967296", "-0", "1.5", "1_0"]


@st.composite
def mutated_line(draw: st.DrawFn, lines: list[str]) -> str:
    line = draw(st.sampled_from(lines))
    how = draw(st.integers(0, 7))
    nums = list(_DIGITS.finditer(line))
    if how <= 2 and nums:  # a number replaced by a weird one
        m = nums[draw(st.integers(0, len(nums) - 1))]
        return line[: m.start()] + draw(st.sampled_from(WEIRD_NUMBERS + WEIRD)) + line[m.end() :]
    if how <= 4:  # something inserted
        pos = draw(st.integers(0, len(line)))
        ins = draw(st.one_of(st.sampled_from(WEIRD), st.text(max_size=8)))
        return line[:pos] + ins + line[pos:]
    if how == 5:  # cut
        return line[: draw(st.integers(0, len(line)))]
    if how == 6:  # tokens dropped or repeated
        toks = line.split(" ")
        i = draw(st.integers(0, len(toks) - 1))
        return " ".join(toks[:i] + toks[i + 1 :] if draw(st.booleans()) else toks[: i + 1] + toks[i:])
    return line.upper() if draw(st.booleans()) else line.replace(" ", draw(st.sampled_from(["\t", "  ", ""])))


@st.composite
def assembled(draw: st.DrawFn, kinds: tuple[Kind, ...]) -> str:
    """Lines of real files of these formats, some mutated, some foreign, joined in any order."""
    lines = lines_of(kinds)
    out = []
    for _ in range(draw(st.integers(0, 30))):
        pick = draw(st.integers(0, 9))
        if pick < 4:
            out.append(draw(st.sampled_from(lines)))
        elif pick < 8:
            out.append(draw(mutated_line(lines)))
        elif pick == 8:
            out.append(draw(st.text(max_size=40)))
        else:
            out.append(draw(st.sampled_from(WEIRD)))
    sep = draw(st.sampled_from(["\n", "\n", "\n", "\r\n", "\r", "\n\n", "\x00"]))
    return sep.join(out) + draw(st.sampled_from(["", "\n", sep]))


@st.composite
def engine_mutated(draw: st.DrawFn, kinds: tuple[Kind, ...], limit: int = 200_000) -> str:
    """A whole real file of this format, through one or two mutations of the fuzzing engine."""
    data = draw(st.sampled_from(files_of(kinds)))
    rng = random.Random(draw(st.integers(0, 2**32)))
    corpus = load_corpus()
    for _ in range(draw(st.integers(1, 2))):
        data, _, _ = mutate_file(rng, data, corpus, limit)
    codec = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "latin-1"]))
    return data.decode(codec, errors="replace")


@st.composite
def repeated(draw: st.DrawFn, kinds: tuple[Kind, ...]) -> str:
    """One real (maybe mutated) line many times, or one very long line: for time bounds."""
    line = draw(st.one_of(st.sampled_from(lines_of(kinds)), mutated_line(lines_of(kinds))))
    if draw(st.booleans()):
        return (line + "\n") * draw(st.integers(1, 20_000))
    return line + draw(st.sampled_from(["x", " ", "9", "\\", '"', "a:", "-j "])) * draw(st.integers(1, 300_000))


def inputs(kinds: tuple[Kind, ...]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=300),
        assembled(kinds),
        assembled(kinds),
        engine_mutated(kinds),
        engine_mutated(kinds),
        repeated(kinds),
    )


# ------------------------------------------------------------------------------ the parsers


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[str], object]
    kinds: tuple[Kind, ...]
    allowed: tuple[type[BaseException], ...] = ()  # exceptions that are the documented contract

    def __repr__(self) -> str:
        return self.name


def _iptables_save(text: str) -> object:
    out = []
    for backend, family in (("legacy", 4), ("nft", 6), (None, 4)):
        rs = iptables.parse_save(text, "a", backend, family, 3)
        for r in rs.all_rules():
            out.append((r.args, r.target, r.comment, r.body, repr(r), hash(r)))
        out.append((rs.kube_rule_count(), rs.chains(), rs.chains("nat"), [str(d) for d in rs.diagnostics]))
    return out


def _iptables_other(text: str) -> object:
    out = []
    for rs in (iptables.parse_rules_s(text, "a"), iptables.parse_rules_s(text, "a", 6, 2, "nat"), iptables.parse_list(text, "a")):
        out.append([(r.args, r.target, r.comment) for r in rs.all_rules()])
        out.append(rs.kube_rule_count())
    return out


def _k8s(text: str) -> object:
    objs = k8s.parse_objects(text, "a", 2)
    return [(o.ref, o.line) for o in objs.items], [str(d) for d in objs.diagnostics], objs.of("Service")


def _kpconfig_file(text: str) -> object:
    cf = kpconfig.parse_config_file(text, "a", 2)
    if cf is None:
        return None
    fields = ("mode", "hostnameOverride", "iptables.syncPeriod", "ipvs.scheduler", "clientConnection.kubeconfig")
    cfg = kpconfig.KubeProxyConfig(file=cf)
    cfg.flags = {"config": kpconfig.FlagValue("config", "/x", kpconfig.Source("a", 1, ""))}
    return [(cf.get(f), cf.cite(f), cfg.setting(f)) for f in fields], cfg.ignored_flags(), cf.diagnostics


def _kpconfig_cmdline(text: str) -> object:
    argv = kpconfig.split_cmdline(text)
    args = kpconfig.kube_proxy_args(argv) or argv
    flags = kpconfig.parse_argv(args, kpconfig.Source("a", 1, text[:80]))
    cfg = kpconfig.KubeProxyConfig(flags=flags)
    durations = [kpconfig.parse_duration(v.value) for v in flags.values()]
    return cfg.ignored_flags(), cfg.setting("mode"), cfg.setting("iptables.syncPeriod"), durations


def _logscan(text: str) -> object:
    from kpdoctor.checks import CHECKS  # registers every signature
    from kpdoctor.knowledge import REGISTRY
    from kpdoctor.parse.logscan import Scanner

    assert CHECKS
    out = []
    for pure in (False, True):
        scanner = Scanner(REGISTRY.values(), workers=1, pure_python=pure)
        res = scanner.scan([Artifact("a", Kind.KUBE_PROXY_LOG, text=text, first_line=3)])
        out.append(sorted((h.sig, h.line, h.header_line, h.level) for lst in res.hits.values() for h in lst))
    assert out[0] == out[1], "the compiled and the pure-Python scanner disagree"
    return out


def _logwrap(text: str) -> object:
    return [(u.inner, u.timestamp, logwrap.is_continuation(u.inner)) for u in map(logwrap.unwrap, text.splitlines())]


def _conntrack(text: str) -> object:
    entries = conntrack.parse_conntrack_entries(text, 2)
    return (
        conntrack.parse_conntrack_stats(text, 2),
        conntrack.parse_nf_conntrack_stat(text, 2),
        [(e.snat, e.dnat) for e in entries],
    )


def _netstat(text: str) -> object:
    return netstat.parse_netstat_s(text, 2).values, netstat.parse_nstat(text, 2).values


def _sysctl(text: str) -> object:
    got = sysctl.parse_sysctl(text, 2)
    return [(s.name, sysctl.int_values(s.value), sysctl.port_set(s.value)) for s in got.values()], (
        sysctl.int_values(text),
        sysctl.port_set(text),
    )


def _system_small(text: str) -> object:
    return (
        system.parse_uname(text),
        system.parse_os_release(text),
        system.parse_iptables_version(text),
        system.parse_kube_proxy_version(text),
        system.parse_hostname(text),
        system.parse_modules(text).names,
        parse_time(text),
        parse_time(text.strip().splitlines()[0] if text.strip() else None),
    )


def _processes(text: str) -> object:
    procs = system.parse_processes(text, 2)
    for p in procs[:50]:  # the fast split is the shell's split
        if len(p.command) <= 4096:
            try:
                expected = shlex.split(p.command)
            except ValueError:
                expected = p.command.split()
            assert p.argv == expected, p.command
    return [(p.argv, p.program) for p in procs]


def _health(text: str) -> object:
    hz = health.parse_healthz(text)
    return (hz.age if hz else None), health.parse_metrics(text, 2).values


def _entrypoint(text: str) -> object:
    words = text.split()
    return [
        entrypoint.analyse(["/bin/sh", "-c", text], []),
        entrypoint.analyse(["bash", "-ec"], [text]),
        entrypoint.analyse(["busybox", "sh", "-c", text], []),
        entrypoint.analyse(words, []),
        entrypoint.analyse([], text.splitlines()),
    ]


def _structured(text: str) -> object:
    out: list[object] = [structured.flow_depth(text)]
    for load in (structured.load_json, structured.load_yaml_all):
        try:
            out.append(load(text))
        except structured.StructuredError as exc:  # the contract: this, and only this
            out.append((str(exc), exc.line))
    return out


def _sniff(text: str) -> object:
    return (
        sniff(text, catalogue()),
        save_attrs(text),
        looks_binary(text.encode("utf-8", "surrogatepass")),
        looks_binary(text.encode("utf-16")),
    )


def _transcript(text: str) -> object:
    parts = split_transcript(text)
    out: list[object] = [has_prompt(text)]
    for p in parts or []:
        out.append((p.command, hint_from_command(p.argv), sniff(p.text, catalogue()).kind, p.first_line))
    return out


_ALL = tuple(k for k in Kind)
TARGETS = [
    Target("iptables.parse_save", _iptables_save, (Kind.IPTABLES_SAVE,)),
    Target("iptables.parse_rules_s+parse_list", _iptables_other, (Kind.IPTABLES_RULES_S, Kind.IPTABLES_LIST)),
    Target("k8s.parse_objects", _k8s, (Kind.K8S_OBJECTS, Kind.KUBE_PROXY_CONFIG)),
    Target("kpconfig.parse_config_file", _kpconfig_file, (Kind.KUBE_PROXY_CONFIG, Kind.K8S_OBJECTS)),
    Target("kpconfig.cmdline", _kpconfig_cmdline, (Kind.KUBE_PROXY_CMDLINE, Kind.PROCESSES)),
    Target("logscan.Scanner", _logscan, (Kind.KUBE_PROXY_LOG,)),
    Target("logwrap.unwrap", _logwrap, (Kind.KUBE_PROXY_LOG,)),
    Target("conntrack", _conntrack, (Kind.CONNTRACK_STATS, Kind.NF_CONNTRACK_STAT, Kind.CONNTRACK_ENTRIES)),
    Target("netstat+nstat", _netstat, (Kind.NETSTAT, Kind.NSTAT)),
    Target("sysctl", _sysctl, (Kind.SYSCTL,)),
    Target("sockets.parse_ss_listen", lambda t: sockets.parse_ss_listen(t, 2), (Kind.LISTENERS,)),
    Target("sockets.parse_connections", lambda t: sockets.parse_connections(t, 2), (Kind.LISTENERS,)),
    Target("system.parse_cmdline", lambda t: system.parse_cmdline(t, 1, 2), (Kind.PROCESSES, Kind.KUBE_PROXY_CMDLINE)),
    Target("links.parse_ip_link", lambda t: links.parse_ip_link(t, 2), (Kind.IP_LINK, Kind.IP_ADDR)),
    Target(
        "system.uname/os-release/versions/hostname/modules",
        _system_small,
        (Kind.UNAME, Kind.OS_RELEASE, Kind.IPTABLES_VERSION, Kind.KUBE_PROXY_VERSION, Kind.HOSTNAME, Kind.MODULES),
    ),
    Target("system.parse_processes", _processes, (Kind.PROCESSES,)),
    Target("system.parse_locks", lambda t: system.parse_locks(t, 2), (Kind.LOCKS,)),
    Target("system.parse_ip_addr", system.parse_ip_addr, (Kind.IP_ADDR, Kind.IP_LINK)),
    Target("nft.parse_tables", nft.parse_tables, (Kind.NFT_RULESET, Kind.NFT_RULESET_TEXT)),
    Target("ipvsadm.parse_ipvsadm_list", lambda t: ipvsadm.parse_ipvsadm_list(t, 2), (Kind.IPVSADM,)),
    Target("kernel_log.parse_kernel_log", lambda t: kernel_log.parse_kernel_log(t, 2), (Kind.KERNEL_LOG,)),
    Target("health", _health, (Kind.KUBE_PROXY_HEALTHZ, Kind.KUBE_PROXY_METRICS)),
    Target("entrypoint.analyse", _entrypoint, (Kind.KUBE_PROXY_CMDLINE, Kind.PROCESSES)),
    Target("structured.load_json/load_yaml_all", _structured, (Kind.K8S_OBJECTS, Kind.KUBE_PROXY_CONFIG)),
    Target(
        "kubectl_table+kubectl_describe",
        lambda t: (
            kubectl_table.table_objects(t, "f"),
            kubectl_table.shown_endpoints(t),
            kubectl_describe.described_objects(t, "f", 2),
        ),
        (Kind.KUBECTL_TABLE, Kind.KUBECTL_DESCRIBE),
    ),
    *(Target(f"shape {shape.name}", lambda t, s=shape: s.parse(t, 2), (shape.kind,)) for shape in REGISTERED),
    Target("sniff", _sniff, _ALL),
    Target("transcript", _transcript, _ALL),
]


def _exercise(target: Target, text: str, known: list[str]) -> None:
    start = time.perf_counter()
    try:
        target.run(text)
    except Exception as exc:
        f = finding_from_exception("parser", exc, target.name)
        reason = KNOWN_CRASHES.get(f.key)
        if reason is None:
            raise
        known.append(f"{f.summary()} ({reason})")
    took = time.perf_counter() - start
    if took >= TIME_BOUND:
        slow = Finding("timeout", "", f"parser:{target.name}", "", f"took {took:.1f} s on {len(text)} characters")
        if slow.known is None:
            raise AssertionError(f"{target.name} took {took:.1f} s on {len(text)} characters")
        known.append(f"{slow.summary()} ({slow.known})")


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_parser_never_raises_and_returns_in_time(target: Target) -> None:
    known: list[str] = []

    @SETTINGS
    @given(text=inputs(target.kinds))
    def run(text: str) -> None:
        _exercise(target, text, known)

    run()
    if known:
        pytest.xfail(f"known crash(es), see fuzzing.KNOWN_CRASHES: {sorted(set(known))[:3]}")


@SETTINGS
@given(head=st.one_of(st.binary(max_size=600), st.builds(bytes.__add__, st.sampled_from([b"\xff\xfe", b"\xef\xbb\xbf", b""]), st.binary(max_size=200))))
def test_looks_binary_and_sniff_take_any_bytes(head: bytes) -> None:
    looks_binary(head)
    sniff(head.decode("utf-8", errors="replace"), catalogue())
    sniff(head.decode("latin-1"), catalogue())


# What this fuzzing found in the node parsers, kept as plain regression cases: non-ASCII digits
# (str.isdigit() is true of "²", int() refuses it), numbers past int()'s 4,300 digits, JSON
# values of the wrong type, and version banners made of a long run of digits (quadratic search).
BIG = "9" * 5000
REGRESSIONS = [
    (conntrack.parse_conntrack_entries, "tcp 6 117 SYN_SENT src=1.1.1.1 dst=2.2.2.2 sport=² dport=80 src=2.2.2.2 dst=1.1.1.1 sport=80 dport=1"),
    (conntrack.parse_conntrack_entries, "tcp 6 ² SYN_SENT src=1.1.1.1 dst=2.2.2.2 sport=1 dport=80 src=2.2.2.2 dst=1.1.1.1 sport=80 dport=1"),
    (conntrack.parse_conntrack_stats, f"insert_failed {BIG}"),
    (sockets.parse_ss_listen, "LISTEN ² 4096 0.0.0.0:22 0.0.0.0:*"),
    (sockets.parse_ss_listen, "LISTEN 0 4096 0.0.0.0:² 0.0.0.0:*"),
    (sockets.parse_ss_listen, f'LISTEN 0 4096 0.0.0.0:22 0.0.0.0:* users:(("sshd",pid={BIG},fd=3))'),
    (links.parse_ip_link, "1: lo: <UP> mtu ² qdisc noqueue"),
    (links.parse_ip_link, f"{BIG}: lo: <UP> mtu 1500 qdisc noqueue"),
    (links.parse_ip_link, '[{"ifname":"x","mtu":"²"}]'),
    (system.parse_processes, "UID PID PPID C STIME TTY TIME CMD\nroot ² 1 0 10:00 ? 0:00 x"),
    (system.parse_ip_addr, '[{"addr_info": 5}]'),
    (system.parse_locks, f"1: POSIX  ADVISORY  WRITE {BIG} 00:19:1047 0 EOF"),
    (system.parse_uname, f"Linux node 5.{BIG}"),
    (system.parse_kube_proxy_version, f"Kubernetes v1.16.3-tke.{BIG}"),
    (system.parse_uname, "1" * 30000),  # was 11 s: a quadratic search for "N.N"
    (sysctl.port_set, f"{BIG}-{BIG}"),
    (sysctl.parse_sysctl, f"net.ipv4.ip_local_reserved_ports = {BIG}"),
    (netstat.parse_nstat, f"TcpExtListenOverflows {BIG} 0.0"),
    (netstat.parse_nstat, f"Udp: InDatagrams NoPorts\nUdp: {BIG} 1"),
    (sockets.parse_connections, f"tcp 0 0 10.0.0.1:{BIG} 10.0.0.2:443 ESTABLISHED 1/x"),
    (netstat.parse_netstat_s, f"TcpExt:\n    {BIG} times the listen queue of a socket overflowed\n    ListenDrops: {BIG}"),
    (ipvsadm.parse_ipvsadm_list, f"TCP  10.96.0.1:443 rr\n  -> 172.18.0.2:6443 Masq {BIG} 0 0"),
]


@pytest.mark.parametrize(("parse", "text"), REGRESSIONS, ids=[f"{p.__module__.rsplit('.', 1)[-1]}.{p.__name__}-{i}" for i, (p, _) in enumerate(REGRESSIONS)])
def test_inputs_fuzzing_found_are_read_without_error(parse: Callable[[str], object], text: str) -> None:
    start = time.perf_counter()
    parse(text)
    assert time.perf_counter() - start < 2.0
