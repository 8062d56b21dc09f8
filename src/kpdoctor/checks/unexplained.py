"""KP140: what says something went wrong and nothing known reads, reported rather than dropped.

A kube-proxy error line no signature and no catalogue message knows, a node tool's or the
kernel's error, a packet-loss counter no check reads: kpdoctor cannot say what they mean, but
a report that leaves them out reads as "the node is fine" (DESIGN.md: never a false all-clear).
Each is reported as unexplained, grouped by what it says, counted, with its first and last line,
and with what to send next; a root cause found in the same run folds them under it (rank.py).
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.logged import is_error, reading
from kpdoctor.checks.node.common import MEANINGS, labelled, read_counters
from kpdoctor.facts import Facts, is_kube_proxy_workload
from kpdoctor.facts.log import chain_of, chain_read, logged_messages
from kpdoctor.knowledge import CHECKS, catalogue, check, matching_signatures, message_form
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import ethtool
from kpdoctor.parse.kubectl_table import pod_rows
from kpdoctor.parse.links import counts_link_losses, parse_ip_link
from kpdoctor.parse.logwrap import ALL_IN_ONE, KLOG_HEADER, LOGRUS, unwrap, writer_of
from kpdoctor.parse.numbers import to_int

CAUSE = "unexplained-signal"
MAX_GROUPS = 12  # findings for distinct unexplained lines; the rest are counted in the last one
MAX_CANDIDATES = 20_000  # candidate lines looked at per artifact (a log of nothing but errors)
LATEST_SHARE = 0.1  # "the latest interval": the last tenth of a log's lines
MIN_LINES_FOR_INTERVAL = 20  # a shorter paste has no "latest interval" to speak of

# A line that carries a level: klog's header (anywhere: wrappers come first), logrus' key. Two
# scans, each with a literal start the regular expression engine finds fast (one alternation of
# both is six times slower on a large log).
_LEVELLED = (lazy_re.compile(r"[EWF]\d{4} \d\d:\d\d:\d\d"), lazy_re.compile(r"level=(?:error|fatal|panic|warn)"))
# A node tool's own error line: the program's name (and version banner) before its message,
# as iptables, ipset, conntrack, modprobe, sysctl print them; nft's and ip's own forms.
_TOOL = lazy_re.compile(
    r"(?:(?P<tool>ip6?tables(?:-legacy|-nft)?(?:-restore|-save)?|ebtables|arptables|ipset|ipvsadm|conntrack|"
    r"nft|modprobe|insmod|sysctl|ethtool|tc)(?: v?\d[\w.~+-]*(?: \([^)]*\))?)?: |(?P<bare>Error: |RTNETLINK "
    r"answers: |FATAL: |ERROR: ))(?P<msg>\S.*)"
)
# Who prints the bare forms: nft's errors, ip's netlink answers, module-init-tools' modprobe.
_BARE_FORMS = {"Error": "nft", "RTNETLINK answers": "ip", "FATAL": "modprobe", "ERROR": "modprobe"}
# What in a kubelet's (or an unnamed writer's) line concerns the Service path on the node.
_PROXY_WORDS = lazy_re.compile(
    r"iptables|ip6tables|nftables|\bnft\b|\bKUBE-|conntrack|ipvs|IPVS|ipset|hairpin|masquerade|br_netfilter|"
    r"bridge-nf|ip_forward|kube-proxy|proxier|[Ee]ndpoint[Ss]lice|nodePort|NodePort|clusterIP|ClusterIP"
)
# The kernel: a networking subsystem's prefix opening the message ("nf_conntrack: ...", "IPVS:
# ...", "TCP: ...", "cni0: port 2(veth1) ..."), and words that say something failed.
_KERNEL_NET = lazy_re.compile(
    r"^(?:nf_conntrack|nf_tables|nf_nat|nf_ct_\w+|netfilter|x_tables|ip6?_tables|xt_\w+|ipt_\w+|nft_\w+|IPVS|ip_vs\w*|"
    r"TCP|UDP|neighbour|br_netfilter|bridge|cni\d*|cbr\d*|docker\d*|flannel\.\d+|vxlan\w*|veth\w*|eth\d+\w*|"
    r"ens\w+|eno\w+|enp\w+|bond\d+|NETDEV WATCHDOG|net_ratelimit)\b"
)
_KERNEL_BAD = lazy_re.compile(
    r"\b(?:[Ee]rror|[Ff]ail(?:ed|ure|s)?|[Dd]rop(?:ping|ped|s)?|overflow|timed? ?out|refus\w*|denied|invalid|"
    r"[Uu]nable|cannot|can't|not found|exceed\w*|full|no memory|out of memory)\b|\bBUG\b|\bWARNING\b|Oops"
)
# A kernel oops or warning in networking code, whatever its words (its trace names the code).
_KERNEL_OOPS = lazy_re.compile(r"^(?:BUG: |kernel BUG at |general protection fault|WARNING: CPU: \d+ PID: \d+ at net/)")
_DMESG = lazy_re.compile(r"\[\s*\d+\.\d+\] (?:kernel: )?|kernel: ")
_NORMALISE = (
    (lazy_re.compile(r'"(?:[^"\\]|\\.)*"'), '"…"'),
    (lazy_re.compile(r"\b[0-9a-f]{8,}\b|\b[0-9a-f:]*::[0-9a-f:]*\b"), "X"),
    (lazy_re.compile(r"\d+"), "N"),
    (lazy_re.compile(r"\s+"), " "),
)


@dataclass(slots=True)
class Group:
    """Lines that say the same thing (the same message with other numbers and names)."""

    writer: str  # kube-proxy, kubelet, the tool's name, kernel, or "a log"
    message: str  # the first line's message, unwrapped
    error: bool  # printed as an error (not a warning)
    artifact: str
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line, text) of each occurrence kept
    times: list[str] = field(default_factory=list)
    last_position: float = 0.0  # where the last one sits in its log (0 first line, 1 last)
    log_lines: int = 0
    read_as: list[str] = field(default_factory=list)  # signatures that read it (their checks said nothing)
    count: int | None = None  # every occurrence, when ``lines`` is a sample (a scan's kept hits)
    # systemctl status shortened its journal lines ("Hint: Some lines were ellipsized, use -l to
    # show in full."): the message may end before what names its cause
    ellipsized: bool = False
    still: bool | None = None  # ongoing as the scan's sync timeline says (a catalogue message's lines)
    from_scan: bool = False
    # a refusal the catalogue knows lies outside kube-proxy and the node (messages' ``outside:``):
    # what it means, said instead of asking for the node's rules
    outside: tuple[str, str] | None = None  # (message key, its meaning)

    def add(self, line: int, text: str, position: float = 1.0, when: str | None = None) -> None:
        """One more occurrence: counted, the first and the last kept, with their times when the
        caller has them (else they are read from the lines when the finding is written)."""
        self.count = (self.count or len(self.lines)) + 1
        if len(self.lines) > 1:
            self.lines[-1] = (line, text)
        else:
            self.lines.append((line, text))
        if when:
            self.times = [self.times[0], when] if self.times else [when]
        self.last_position = position

    def occurrences(self) -> int:
        return self.count if self.count is not None else len(self.lines)

    def ongoing(self) -> bool | None:
        """Seen again in the latest interval of its log (None: a paste too short to tell)."""
        if self.from_scan:
            return self.still if self.occurrences() > 1 else (None if self.still is None else False)
        if self.log_lines < MIN_LINES_FOR_INTERVAL:
            return None
        return len(self.lines) > 1 and self.last_position >= 1 - LATEST_SHARE


def signatures_of(text: str) -> set[str]:
    """The ids of the signatures and catalogue messages (routine ones too) that read this line."""
    return {s.id for s in matching_signatures(text, catalogue())}


def routine(sig_ids: set[str]) -> bool:
    """Does the catalogue know the line as routine (it never counts, whatever else reads it)?"""
    return any((form := message_form(sid)) is not None and form.message.kind == "benign" for sid in sig_ids)


@dataclass(frozen=True, slots=True)
class Explained:
    """What the other checks' findings (and what they fold) explain: the lines they cite, the
    checks' own signatures those lines match, and the catalogue messages they read as (the same
    message elsewhere in the log is the same failure, explained once; a wrapper is the same
    message only with the same payload)."""

    lines: frozenset[tuple[str, int | None]]
    signatures: frozenset[str]
    chains: frozenset[tuple[str, ...]]

    @classmethod
    def by(cls, found: Sequence[Finding]) -> Explained:
        cites = [c for top in found for f in top.with_folded() for c in f.evidence]
        sigs: set[str] = set()
        chains: set[tuple[str, ...]] = set()
        for text in {c.text for c in cites}:
            sigs |= {s for s in signatures_of(text) if message_form(s) is None}
            if (chain := chain_read(text)) is not None:
                chains.add(chain)
        return cls(frozenset((c.artifact, c.line) for c in cites), frozenset(sigs), frozenset(chains))


def normalised(message: str) -> str:
    out = message
    for rx, repl in _NORMALISE:
        out = rx.sub(repl, out)
    return out.strip()[:160]


def _signal(line: str) -> tuple[str, str, bool, str | None] | None:
    """(writer, message, is an error, timestamp) of a line that says something went wrong, or
    None. Levelled lines count when kube-proxy (or an all-in-one binary running it, or a writer
    the line does not name) wrote them, or kubelet about the Service path; a tool's error line
    counts whoever printed it."""
    u = unwrap(line.rstrip("\r"))
    inner = u.inner
    head = KLOG_HEADER.search(inner)
    if head is not None and head.start() <= 40:
        level = head.group("level")
        if level == "I":
            return None
        message = inner[head.end() :]
        writer = writer_of(u.source, inner[head.start() :], message)
        when = u.timestamp or f"{head.group('mm')}-{head.group('dd')} {head.group('time')}"
        return _levelled(writer, message, level in "EF", when)
    lr = LOGRUS.search(inner)
    if lr is not None:
        level = lr.group("level").lower()
        if level not in ("error", "fatal", "panic", "warn", "warning"):
            return None
        message = inner[lr.end() :]
        writer = writer_of(u.source, inner, message)
        return _levelled(writer, message, level in ("error", "fatal", "panic"), u.timestamp or lr.group("ts"))
    dmesg = _DMESG.match(inner)
    if dmesg is not None or (u.ident or "").lower() == "kernel":
        message = inner[dmesg.end() :] if dmesg is not None else inner
        return ("kernel", message, True, u.timestamp) if _kernel_signal(message) else None
    tool = _TOOL.match(inner.lstrip("$# "))
    if tool is not None:
        name = tool.group("tool") or _BARE_FORMS[tool.group("bare").split(":")[0]]
        return name, tool.group("msg"), True, u.timestamp
    return None


def _levelled(
    writer: str | None, message: str, error: bool, when: str | None
) -> tuple[str, str, bool, str | None] | None:
    if writer in (None, "kube-proxy") or (writer or "") in ALL_IN_ONE:
        if writer is None and not _PROXY_WORDS.search(message):
            return None  # an unnamed writer's line that is not about the Service path
        return writer or "a log", message, error, when
    if writer == "kubelet" and _PROXY_WORDS.search(message):
        return writer, message, error, when
    return None  # another component's (a CNI's, CoreDNS'...): not kube-proxy's or the node's


def _kernel_signal(message: str) -> bool:
    """A kernel line that says networking failed: a networking subsystem's message with a word
    of failure in it, or an oops."""
    text = message.strip()
    return bool(_KERNEL_NET.match(text) and _KERNEL_BAD.search(text)) or bool(_KERNEL_OOPS.match(text))


def _candidates(text: str) -> Iterator[tuple[int, str]]:
    """(line index, line) of the lines that may be signals: levelled warning/error lines found
    by one scan of the whole text, and in a short text (a paste) every line (a tool's error has
    no marker a scan could look for)."""
    if len(text) < 2_000_000:
        yield from enumerate(text.splitlines())
        return
    starts = heapq.merge(*(map(re.Match.start, rx.finditer(text)) for rx in _LEVELLED))
    pos = lineno = 0
    last_line = -1
    for seen, at in enumerate(starts):
        if seen >= MAX_CANDIDATES:
            return
        start = text.rfind("\n", 0, at) + 1
        if start == last_line:
            continue  # two marks on one line
        last_line = start
        end = text.find("\n", at)
        lineno += text.count("\n", pos, start)
        pos = start
        yield lineno, text[start : end if end >= 0 else len(text)]


def _line_groups(facts: Facts, explained: Explained) -> list[Group]:
    groups: dict[tuple[str, str], Group] = {}
    for a in facts.of(Kind.KUBE_PROXY_LOG):
        _read_log(a, groups)
    for a in facts.of(Kind.KERNEL_LOG):  # a tool's error pasted among the kernel's lines
        _read_log(a, groups, kernel_lines=False)
    for a, k in facts.node_state.kernel_log:
        if _kernel_signal(k.message):
            g = groups.setdefault(("kernel", normalised(k.message)), Group("kernel", k.message, True, a.name))
            g.add(k.line, k.text, when=k.timestamp)
    out = _catalogued(facts, explained)
    for g in groups.values():
        if any((g.artifact, n) in explained.lines for n, _ in g.lines):
            continue  # a finding cites it
        sigs = signatures_of(g.lines[0][1]) | signatures_of(g.message)
        if routine(sigs) or sigs & explained.signatures or any(message_form(s) is not None for s in sigs):
            continue  # routine, the same message a finding cites, or a catalogue message (read above)
        g.read_as = sorted(sigs)
        out.append(g)
    return out


def _catalogued(facts: Facts, explained: Explained) -> list[Group]:
    """The catalogue's failure messages (any level, any program: the kernel's and the tools'
    too) that no finding took up: a dedicated check read them and found nothing, and KP130 left
    them to it."""
    out = []
    for lm in logged_messages(facts.log):
        if reading(lm.match) is None:
            continue  # routine
        sigs = {h.sig for h in lm.hits}
        if chain_of(lm.match) in explained.chains or any((h.artifact, h.line) in explained.lines for h in lm.hits):
            continue
        first = lm.hits[0]
        head = KLOG_HEADER.match(first.text)
        message = lm.match.message
        g = Group(
            (first.writer or message.component) if message.outside else message.component,
            first.text[head.end() :].strip() if head is not None else first.text.strip(),
            is_error(lm),
            first.artifact,
            lines=[(h.line, h.text.strip()) for h in lm.hits],
            times=[h.timestamp for h in lm.hits if h.timestamp],
            read_as=sorted(lm.read_by or sigs),
            count=lm.count,
            still=facts.log.ongoing(lm.hits),
            from_scan=True,
            outside=(message.key, message.meaning) if message.outside else None,
        )
        out.append(g)
    return out


def _read_log(a: Artifact, groups: dict[tuple[str, str], Group], kernel_lines: bool = True) -> None:
    """The signals of one log (``kernel_lines``: its kernel lines too; a kernel log's are read
    from its own parse, which knows every format dmesg and journald print). A line whose text
    without its digits was seen before is that line's group again, read once: a busy log
    repeats a few messages thousands of times."""
    text = a.read_text()
    total = max(1, text.count("\n") + 1)
    shortened: bool | None = None  # does systemctl say it cut lines short (looked for at the first "...")
    known: dict[str, Group | None] = {}  # the line without digits -> its group (None: no signal)
    for i, line in _candidates(text):
        quick = line.translate(_NO_DIGITS)[:_QUICK_KEY]
        if quick in known:
            g = known[quick]
            if g is not None:
                g.add(a.first_line + i, line.strip(), i / total)
            continue
        sig = _signal(line)
        if sig is None or (sig[0] == "kernel" and not kernel_lines):
            known[quick] = None
            continue
        writer, message, error, _when = sig
        g = groups.setdefault(
            (writer, normalised(message)), Group(writer, message.strip(), error, a.name, log_lines=total)
        )
        g.error = g.error or error
        if "..." in message and not g.ellipsized:
            if shortened is None:
                shortened = SYSTEMCTL_ELLIPSIZED in text
            g.ellipsized = shortened
        g.add(a.first_line + i, line.strip(), i / total)
        known[quick] = g


_NO_DIGITS = str.maketrans("", "", "0123456789")
_QUICK_KEY = 240  # characters of a line (digits out) that tell its message apart


# what systemctl status prints under a unit's journal lines when it cut them at the terminal's
# width (systemd's src/systemctl: "Hint: Some lines were ellipsized, use -l to show in full.")
SYSTEMCTL_ELLIPSIZED = "Some lines were ellipsized, use -l to show in full."


def _what_to_send(writer: str) -> str:
    if writer == "kernel":
        return "Send the whole `dmesg -T` around these lines, `uname -r` and `lsmod`."
    if writer in ("kube-proxy", "a log") or writer in ALL_IN_ONE:
        return (
            "Send kube-proxy's log around these lines (`kubectl -n kube-system logs <kube-proxy pod> --timestamps`, "
            "`-p` after a restart), its version, and the node's rules (`iptables-save`, `ipvsadm -Ln` or "
            "`nft list ruleset`), or run `kpdoctor diagnose --live` on the node."
        )
    if writer == "kubelet":
        return "Send kubelet's log around these lines (`journalctl -u kubelet`) and the node's `iptables-save`."
    return (
        f"Send the whole command that printed it, its `--version`, and the node's rules (`iptables-save`, "
        f"`ipset list`, `nft list ruleset`): {writer}'s message names what it refused."
    )


def _line_finding(facts: Facts, g: Group, rest: list[Group]) -> Finding:
    ongoing = g.ongoing()
    severity = Severity.WARNING if ongoing and g.error else Severity.INFO
    f = start(facts, "KP140", [], confidence=Confidence.LOW, severity=severity)
    f.title = f"A{'n error' if g.error else ' warning'} {g.writer} printed that nothing known explains"
    shown = g.lines[:1] + g.lines[-1:] if len(g.lines) > 1 else g.lines
    f.evidence = [Cite(g.artifact, n, text) for n, text in shown]
    f.occurrences = g.occurrences()
    times = g.times or [w for _, text in g.lines[:1] + g.lines[-1:] if (sig := _signal(text)) and (w := sig[3])]
    f.first_seen, f.last_seen = (times[0], times[-1]) if times else (None, None)
    f.ongoing = ongoing
    f.summary = (
        f"{g.writer} printed `{g.message[:240]}`"
        + (f" {g.occurrences()} times" if g.occurrences() > 1 else "")
        + (
            f": {', '.join(g.read_as[:3])} read{'s' if len(g.read_as) == 1 else ''} it, and no check found "
            "a cause in it. "
            if g.read_as
            else ": no check and no message of the catalogue reads it, so kpdoctor cannot say what it means. "
        )
        + "It is reported so that it is not taken for a clean bill of health."
    )
    if rest:
        more = sum(r.occurrences() for r in rest)
        f.summary += f" {len(rest)} more such message(s) ({more} line(s)), first: `{rest[0].message[:120]}`."
        f.evidence += [Cite(r.artifact, r.lines[0][0], r.lines[0][1]) for r in rest[:3]]
    f.confidence_reason = (
        "a line no check found a cause in" if g.read_as else "a line no known message matches: its meaning is unknown"
    )
    f.fix = [_what_to_send(g.writer)]
    if g.outside is not None:
        key, meaning = g.outside
        f.summary += f" It holds the API server's refusal ({key}): {meaning} That lies outside kube-proxy and the node."
        f.fix = ["Fix what the refusal names (RBAC objects, the token, certificates), then restart the program."]
    if g.ellipsized:
        f.summary += (
            " systemctl status cut the line short (it says so: 'Some lines were ellipsized'): what follows "
            "the `...` may name the cause."
        )
        unit = g.writer if g.writer not in ("a log", "kernel") else "<unit>"
        f.fix.insert(
            0, f"Send the lines whole: `systemctl status -l --no-pager {unit}` or `journalctl -u {unit} --no-pager`."
        )
    return f


def _owned_counters() -> set[str]:
    return {c for spec in CHECKS.values() for c in spec.counters}


# One reading of an interface's loss counter: (file, interface, counter), (the listing's first
# line, the listing's place in its text), the counter's name, where it was read, value, line.
_Reading = tuple[tuple[str, str, str], tuple[int, int], str, str, int, Cite]


def _driver_readings(facts: Facts, explained: Explained) -> Iterator[_Reading]:
    """A network driver's loss counters (``ethtool -S``). Two listings are of one interface when
    the commands that printed them name it (or one text holds both)."""
    for a in facts.of(Kind.NIC_STATS):
        words = a.attrs.get("command", "").split()
        iface = words[-1] if len(words) >= 3 and words[-2] in ("-S", "--statistics") else f"@{a.first_line}"
        for c in ethtool.SHAPE.parse(a.read_text(), a.first_line):
            if ethtool.counts_losses(c.name) and (a.name, c.line) not in explained.lines:
                cite = Cite(a.name, c.line, c.text)
                yield (a.name, iface, c.name), (a.first_line, c.listing), c.name, "(`ethtool -S`)", c.value, cite


def _link_readings(facts: Facts, explained: Explained) -> Iterator[_Reading]:
    """Interfaces' loss counters (``ip -s link``, ifconfig)."""
    for a in facts.of(Kind.IP_LINK):
        for link in parse_ip_link(a.text, a.first_line):
            for counter, value, line, text in link.stats:
                if counts_link_losses(counter) and (a.name, line) not in explained.lines:
                    cite = Cite(a.name, line, text)
                    yield (a.name, link.name, counter), (a.first_line, 0), counter, f"on {link.name}", value, cite


def _interface_losses(readings: Iterable[_Reading]) -> tuple[list[tuple[str, Cite]], list[tuple[str, Cite]]]:
    """Non-zero loss counters of interfaces, each said and cited: (growing from a listing to a
    later one of the same interface, since-boot totals of the first listing)."""
    growing: list[tuple[str, Cite]] = []
    totals: list[tuple[str, Cite]] = []
    first: dict[tuple[str, str, str], tuple[int, tuple[int, int]]] = {}
    for key, when, name, where, value, cite in readings:
        base, since = first.setdefault(key, (value, when))
        if since < when and value > base:
            growing.append((f"{name} grew by {value - base:,} {where} between two listings", cite))
        elif since == when and value > 0:
            totals.append((f"{value:,} {name} {where} since it came up", cite))
    return growing, totals


def _counter_findings(facts: Facts, explained: Explained) -> Iterator[Finding]:
    """Loss counters no check reads, non-zero: growing between two snapshots (ongoing, a
    warning), or a since-boot total that is a large share of its traffic, or whose traffic
    was not given (info: when it happened is unknown); a network driver's counters of what it
    lost (``ethtool -S``) the same way."""
    names = [n for n in MEANINGS if n not in _owned_counters()]
    reading = read_counters(facts.node_state, names)
    totals = [
        t
        for t in reading.totals
        if (t.share is None or t.share >= 0.01) and (t.sample.cite.artifact, t.sample.cite.line) not in explained.lines
    ]
    nic_growing, nic_totals = _interface_losses(
        itertools.chain(_driver_readings(facts, explained), _link_readings(facts, explained))
    )
    if not reading.growing and not totals and not nic_growing and not nic_totals:
        return
    ongoing = bool(reading.growing or nic_growing)
    f = start(facts, "KP140", [], confidence=Confidence.LOW, severity=Severity.WARNING if ongoing else Severity.INFO)
    f.title = "Packet-loss counters that no check explains"
    f.evidence = list(
        dict.fromkeys(
            [c for _, ch in reading.growing for c in (ch.first.cite, ch.last.cite)]
            + [c for _, c in nic_growing]
            + [t.sample.cite for t in totals]
            + [c for _, c in nic_totals][:6]
        )
    )
    said = "; ".join(
        [ch.describe(labelled(n)) for n, ch in reading.growing]
        + [s for s, _ in nic_growing]
        + [t.describe() for t in totals]
        + [s for s, _ in nic_totals[:6]]
        + ([f"{len(nic_totals) - 6} more driver counters"] if len(nic_totals) > 6 else [])
    )
    f.summary = f"The node counts losses no check reads: {said}. kpdoctor cannot name what causes them."
    f.ongoing = True if ongoing else None
    f.confidence_reason = "counters that count losses; what causes them is not in the evidence"
    f.fix = [
        "Send two snapshots a minute apart of `nstat -az` (or `netstat -s`) and `conntrack -S`, with `sysctl -a`, "
        "`ip -s link` and `dmesg -T`, or run `kpdoctor diagnose --live` on the node."
    ]
    yield f


# Why a container does not run, as kubelet and kubectl say it, that is a failure (not a start or
# a stop under way): the waiting reasons kubelet sets (kubelet's container runtime manager:
# CrashLoopBackOff, ImagePullBackOff, ErrImagePull, CreateContainerConfigError,
# CreateContainerError, RunContainerError, InvalidImageName), a terminated container's (Error,
# OOMKilled, ContainerCannotRun), and kubectl's for an init container ("Init:" before them).
_FAILING = lazy_re.compile(
    r"^(?:Init:)?(?:CrashLoopBackOff|\w*BackOff|ErrImagePull|ErrImageNeverPull|InvalidImageName|"
    r"CreateContainer(?:Config)?Error|RunContainerError|PreCreateHookError|PostStartHookError|"
    r"Error|OOMKilled|ContainerCannotRun|ContainerStatusUnknown|DeadlineExceeded|Evicted|Unknown)$"
)
_SINCE = lazy_re.compile(r"\((?P<ago>[^)]*) ago\)")


@dataclass(frozen=True, slots=True)
class _ProxyPod:
    """A kube-proxy Pod that restarted or does not run now, as a table row or an object shows it."""

    name: str
    node: str | None
    state: str  # kubectl's STATUS, or the container's state (running, or why it waits or ended)
    restarts: int
    ago: str | None  # when it last restarted ("2m"), as kubectl prints it
    failing: bool  # it does not run now, for a reason that is a failure
    cite: Cite


def _proxy_pods(facts: Facts, explained: Explained, found: Sequence[Finding]) -> list[_ProxyPod]:
    """kube-proxy Pods (of this node, when its name is known) whose container restarted or does
    not run now: `kubectl get pods` rows, and Pod objects' container statuses. A row another
    finding cites is explained; an object only when a finding cites its restarts (a Pod is cited
    at its name's line for anything else said of it too: a volume it lacks)."""
    cites = (c for top in found for f in top.with_folded() for c in f.evidence)
    restarts_cited = {(c.artifact, c.line) for c in cites if "restartCount=" in c.text}
    node = facts.node.name if facts.node else None
    out: dict[str, _ProxyPod] = {}
    for a in facts.of(Kind.KUBECTL_PODS):
        for r in pod_rows(a.read_text()):
            if not r.is_kube_proxy or (node is not None and r.node is not None and r.node != node):
                continue
            cite = Cite(a.name, a.first_line + r.line, r.text)
            restarts = to_int(r.restarts.split()[0]) or 0
            down = r.status != "Running" or not r.all_ready
            if (cite.artifact, cite.line) in explained.lines or not (down or restarts):
                continue
            since = _SINCE.search(r.restarts)
            failing = bool(_FAILING.match(r.status))
            out.setdefault(r.name, _ProxyPod(r.name, r.node, r.status, restarts, since and since["ago"], failing, cite))
    described = [o for o in facts.cluster.table_only("Pod") if is_kube_proxy_workload(o)]  # kubectl describe pod
    for pod in facts.cluster.pods(facts.kube_proxy_pods + described):
        if node is not None and pod.node_name is not None and pod.node_name != node:
            continue
        for cs in pod.container_statuses:
            if "kube-proxy" not in cs.name:
                continue
            state = "Running" if cs.state == "running" else cs.state or pod.phase or "unknown"
            down = state != "Running" or cs.ready is False
            text = f"{pod.obj.ref}: {cs.name} {state}, restartCount={cs.restart_count}"
            cite = Cite(pod.obj.artifact, pod.obj.line, text)
            if (cite.artifact, cite.line) in restarts_cited or not (down or cs.restart_count):
                continue
            failing = bool(_FAILING.match(state))
            got = _ProxyPod(pod.obj.name, pod.node_name, state, cs.restart_count, None, failing, cite)
            out.setdefault(pod.obj.name, got)
    return list(out.values())


def _restart_findings(facts: Facts, explained: Explained, found: Sequence[Finding]) -> Iterator[Finding]:
    """kube-proxy Pods that restart, or do not run now, when no check says why (a panic, its
    configuration refused...): while kube-proxy is down the rules it wrote stay, but nothing
    keeps them in step with the cluster. A failing state now is a warning (ongoing); restarts
    alone are info (a node's reboot restarts it too)."""
    pods = _proxy_pods(facts, explained, found)
    if not pods:
        return
    failing = [p for p in pods if p.failing]
    f = start(facts, "KP140", [], confidence=Confidence.LOW, severity=Severity.WARNING if failing else Severity.INFO)
    f.title = "kube-proxy restarts or does not run, and nothing known says why"

    def said(p: _ProxyPod) -> str:
        where = f" on {p.node}" if p.node else ""
        last = f", the last {p.ago} ago" if p.ago else ""
        restarts = f"{p.restarts} restart(s){last}" if p.restarts else "no restart"
        return f"{p.name}{where} is {p.state} ({restarts})"

    f.summary = (
        "; ".join(said(p) for p in pods[:6])
        + (f"; {len(pods) - 6} more" if len(pods) > 6 else "")
        + (
            ". While kube-proxy is down the rules it wrote stay, but no change of a Service or its endpoints "
            "reaches the node; why it exits is in the log of the run that ended, which the evidence does not hold."
            if failing
            else ". It restarted: while it was down no change of a Service or its endpoints reached the node; why it "
            "exited is in the log of the run that ended (a node's reboot restarts it too)."
        )
    )
    f.evidence = [p.cite for p in (failing + [p for p in pods if not p.failing])[:5]]
    f.ongoing = True if failing else None
    f.confidence_reason = "kube-proxy's container restarts or waits; its exit reason is not in the evidence"
    name = (failing or pods)[0].name
    f.fix = [
        f"Send the log of the run that exited: `kubectl -n kube-system logs -p {name} --timestamps` (and without "
        f"`-p`), and `kubectl -n kube-system describe pod {name}` (its last state and exit code), or run "
        "`kpdoctor diagnose --live` on the node."
    ]
    yield f


def _rank_key(g: Group) -> tuple[int, int, int]:
    return (int(bool(g.ongoing())), int(g.error), g.occurrences())


@check(
    "KP140",
    cause=CAUSE,
    title="An error line or a loss counter that nothing known explains",
    severity=Severity.INFO,
    needs=[
        Kind.KUBE_PROXY_LOG,
        Kind.KERNEL_LOG,
        Kind.LOOKUP_TIMING,
        Kind.NSTAT,
        Kind.NETSTAT,
        Kind.CONNTRACK_STATS,
        Kind.NF_CONNTRACK_STAT,
        Kind.NEIGH_STATS,
        Kind.SOFTNET_STAT,
        Kind.NIC_STATS,
        Kind.IP_LINK,
        Kind.KUBECTL_PODS,
        Kind.K8S_OBJECTS,
        Kind.KUBECTL_DESCRIBE,
    ],
    # (kube-proxy's restarts, not the lines that say why)
    partly=[Kind.KUBECTL_PODS, Kind.K8S_OBJECTS, Kind.KUBECTL_DESCRIBE],
    reads_findings=True,
)
def unexplained_signal(facts: Facts, found: Sequence[Finding]) -> Iterator[Finding]:
    """Something says it went wrong, and kpdoctor does not know what it means.

    Symptom: an error or warning line of kube-proxy (or of kubelet about the Service path), a
        node tool's error (iptables, ipset, conntrack, nft, modprobe, sysctl, ip), a kernel
        networking message that says something failed, a packet-loss counter that grows, or a
        kube-proxy Pod that restarts or does not run (`kubectl get pods`, `kubectl describe pod`,
        Pod objects).
    Cause: unknown: no check reads it and the messages catalogue does not know it. Reporting it
        keeps a report from reading as "the node is fine" when the evidence says otherwise.
    How it is detected: after every other check, every line of kube-proxy's and the kernel's
        logs (and pasted log lines) that carries an error or warning level, or a tool's error
        form, grouped by what it says with numbers and names taken out. A group is explained
        when a finding cites one of its lines or a line of the same message (signature or
        catalogue entry), and never counts when the catalogue knows it as routine; another
        component's lines (a CNI's, CoreDNS') are left out. Loss counters no other check reads
        count when they grow between two snapshots, or when a since-boot total is at least 1%
        of its traffic or its traffic was not given; so do a network driver's counters whose
        names say they count losses (`ethtool -S`: drop, miss, discard, errors, no buffer,
        fifo, overrun, timeout, crc) and an interface's (`ip -s link`, ifconfig: errors,
        dropped, missed, overruns, crc, frame, fifo, length, carrier, aborted), non-zero. Info
        at low confidence; a warning only while ongoing (an error seen again in the last tenth
        of its log, or a counter growing; a kube-proxy container in a failing state now:
        CrashLoopBackOff, Error, OOMKilled, an image or container creation error, kubelet's and
        kubectl's words for them). A root cause found in the same run folds them under
        it; the node agent's condition and Events leave them out.
    Fix: none to give: the finding says what to send next so that the line can be read (and,
        when it matters, added to the catalogue); lines `systemctl status` cut short (it says so
        under them: "Some lines were ellipsized, use -l to show in full.") are asked for whole
        first (`systemctl status -l --no-pager UNIT`).
    References: https://github.com/kubernetes/kubernetes/tree/master/pkg/proxy
    """
    explained = Explained.by(found)
    groups = sorted(_line_groups(facts, explained), key=_rank_key, reverse=True)
    shown, rest = groups[:MAX_GROUPS], groups[MAX_GROUPS:]
    for i, g in enumerate(shown):
        yield _line_finding(facts, g, rest if i == len(shown) - 1 else [])
    yield from _counter_findings(facts, explained)
    yield from _restart_findings(facts, explained, found)
