"""Read a paste that mixes kinds of output: split it into runs of lines that share a shape, and
type each run by its own content.

People put everything into one issue body: a neofetch summary above a log, a grep'd rule above
the transcript that made it, a config with the process list that ran it, log lines tailing into a
rule listing. Typing the whole text as one kind reads one of them and drops the rest. Here every
line is first given the shape of the output it belongs to (:data:`SHAPES`, one registration per
shape: the kind of output, the lines only that output prints); runs of lines of one shape, with
the lines that continue them, are typed by :func:`~kpdoctor.bundle.sniff.sniff` on their own
text, and the shape's kind stands in when a run is too short for its content to say (one
``ipvsadm`` row, one conntrack entry). Lines no shape knows go with the run they follow, or make
a run of their own after a blank line (a YAML object, a summary), typed the same way and joined
to their neighbour when their content says nothing.

Log records of any program are a stream of their own wherever they sit: they are read apart, and
the listing they interrupted is read whole again. A run that continues a log record (a restore's
payload after ``Rules:``, a tab-indented value of klog 2) stays in the record. Markdown headings
and the user's notes between the lines belong to no run.

Each part keeps its lines' numbers: its text starts at its first line, and the lines of other
parts within it are left empty. A text all of one kind is not split (None): the caller reads it
whole, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.sniff import (
    CT_STATS_LINE,
    DMESG_LINE,
    HEAD_BYTES,
    IP_LINK_LINE,
    IPVS_RS_LINE,
    IPVS_VS_LINE,
    NFT_VERSION_LINE,
    SYSCTL_LINE,
    UNAME_A_LINE,
    Typed,
    sniff,
)
from kpdoctor.knowledge import Signatures
from kpdoctor.parse.conntrack import ENTRY_START
from kpdoctor.parse.links import HAIRPIN_FILE, IFCONFIG_HEAD
from kpdoctor.parse.netstat import netstat_phrase
from kpdoctor.parse.shapes import REGISTERED
from kpdoctor.parse.sockets import ADDR_PORT, SS_ROW_RE
from kpdoctor.parse.structured import FENCE
from kpdoctor.parse.system import HEADERLESS_ROWS, LSMOD_HEADER, LSMOD_ROW

MAX_RUNS = 2000  # a text cut into more runs than this is not a paste of a few outputs: read whole


@dataclass(frozen=True, slots=True)
class LineShape:
    """Lines only one kind of output prints: ``pattern`` is matched at a line's start (after
    its indentation); ``kind`` is what a run of them is when its content alone cannot say;
    ``log``: the records of a program's log (a stream that may interrupt any listing); ``opens``:
    the lines that start a listing (a second dump pasted after the first is another listing)."""

    name: str
    kind: Kind | None
    pattern: str
    log: bool = False
    opens: str = ""  # of its lines, those only a new listing starts with (after a blank line)
    # of its lines, those only this output prints (a registered shape's own lines, not the other
    # lines it prints around them): a run without one is not typed by the shape
    key: str = ""




def _line(rx: re.Pattern[str]) -> str:
    """A line pattern the content sniffer already has (anchored at a line's start), as a shape:
    one definition of what such a line looks like."""
    return rx.pattern.removeprefix("^")


# The registry of line shapes, strongest first (a line takes the first shape that matches).
SHAPES: tuple[LineShape, ...] = (
    # log records: klog (after a CRI, syslog, kubectl --prefix or compose prefix), logrus,
    # CoreDNS and Go's log, ISO-timestamped records
    LineShape(
        "klog",
        None,
        r"(?:\S+\s+){0,6}?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.\-/]+:\d+\]",
        log=True,
    ),
    LineShape("logrus", None, r"(?:\S+\s+){0,5}?time=\"[^\"\n]{8,40}\" level=[a-z]+ ", log=True),
    LineShape(
        "go-log", None, r"(?:\d{4}/\d\d/\d\d \d\d:\d\d:\d\d )?\[(?:INFO|WARNING|WARN|ERROR|DEBUG|FATAL)\] ", log=True
    ),
    LineShape("panic", None, r"(?:panic: |goroutine \d+ \[)", log=True),
    # the kernel's ring buffer: dmesg's own times, or a syslog line of the kernel
    LineShape(
        "dmesg",
        Kind.KERNEL_LOG,
        _line(DMESG_LINE),
        log=True,
    ),
    # any other program's records: an ISO time (Python's logging, containerd, a CRI line), or
    # syslog's (journalctl) with the program's name
    LineShape("timestamped", None, r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s", log=True),
    LineShape("syslog", None, r"[A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d \S+ [\w.@/-]+(?:\[\d+\])?: ", log=True),
    # iptables-save / iptables -S: rules, chain declarations, tables, their comments
    LineShape(
        "iptables-rules",
        Kind.IPTABLES_SAVE,
        r"(?:\[\d+:\d+\]\s+)?-[AIN] (?!-)[\w-]+|-P (?:INPUT|FORWARD|OUTPUT|PREROUTING|POSTROUTING) |"
        r":[\w-]+ (?:-|ACCEPT|DROP)(?: \[\d+:\d+\])?\s*$|\*(?:nat|filter|mangle|raw|security)\s*$|COMMIT\s*$|"
        r"# (?:Generated by ip6?tables|Completed on)",
        opens=r"# Generated by|-P (?:INPUT|PREROUTING) |\*(?:nat|filter|mangle|raw|security)\s*$",
    ),
    # iptables -L: chain headers, the column header, rows
    LineShape(
        "iptables-list",
        Kind.IPTABLES_LIST,
        r"Chain \S+ \((?:policy \w+|\d+ references)|(?:num\s+)?(?:pkts\s+bytes\s+)?target\s+prot\s+opt|"
        r"(?:\d+\s+)?(?:\d+[KMGT]?\s+\d+[KMGT]?\s+)?[A-Za-z][\w-]*\s+(?:all|tcp|udp|icmp|sctp|\d+)\s+--\s+\S+\s+\S+\s+\S",
    ),
    # ipvsadm -Ln (-S): its headers, virtual servers, real servers
    LineShape(
        "ipvsadm",
        Kind.IPVSADM,
        r"IP Virtual Server version|Prot LocalAddress:Port|->\s*RemoteAddress:Port|"
        f"{_line(IPVS_VS_LINE)}|{_line(IPVS_RS_LINE)}|"
        r"-A (?:-[tuf]|--(?:tcp|udp|sctp|fwmark)-service) \S+ -s [a-z]+|-a -[tuf] \S+ -r ",
        opens=r"IP Virtual Server version",
    ),
    # ipset list / save
    LineShape(
        "ipset",
        Kind.IPSET,
        r"(?:Name|Type|Revision|Header|Size in memory|References|Number of entries|Members):(?:\s|$)|"
        r"create\s+\S+\s+(?:hash|bitmap|list):\S+|add\s+KUBE-\S+ ",
    ),
    # nft list ruleset: the lines that open tables, chains, sets, and a base chain's hook
    LineShape(
        "nft",
        Kind.NFT_RULESET_TEXT,
        r"table (?:ip|ip6|inet|arp|bridge|netdev) \S+ \{|(?:chain|set|map) \S+ \{|type (?:filter|nat|route) hook ",
    ),
    # conntrack -L / /proc/net/nf_conntrack entries, conntrack -S, /proc/net/stat/nf_conntrack
    LineShape(
        "conntrack-entry",
        Kind.CONNTRACK_ENTRIES,
        ENTRY_START + r"|conntrack v[\d.]+ \(conntrack-tools\): \d+ flow entries",
    ),
    LineShape("conntrack-stats", Kind.CONNTRACK_STATS, _line(CT_STATS_LINE)),
    LineShape(
        "nf_conntrack-stat",
        Kind.NF_CONNTRACK_STAT,
        # its rows have 17 columns in every kernel; the neighbour tables' (/proc/net/stat/arp_cache) 13
        # (and /proc/net/softnet_stat's have five zeros from the fourth: parse/softnet)
        r"entries\s+(?:searched|clashres)\s+found\s"
        r"|(?![0-9a-f]{8} [0-9a-f]{8} [0-9a-f]{8}(?: 00000000){5} )[0-9a-f]{8}(?:\s+[0-9a-f]{8}){13,}\s*$",
    ),
    # netstat -s section headers; nstat's lines
    LineShape(
        "netstat-s",
        Kind.NETSTAT,
        r"(?:Ip|Icmp|IcmpMsg|Tcp|Udp|UdpLite|TcpExt|IpExt|MPTcpExt|Ip6|Icmp6|Udp6|UdpLite6):\s*$",
    ),
    LineShape(
        "nstat",
        Kind.NSTAT,
        r"#kernel\s*$|(?:Ip|Tcp|Udp|TcpExt|IpExt|Icmp)\w+\s+\d+\s+\d+(?:\.\d+)?\s*$|"
        # /proc/net/snmp and /proc/net/netstat: a prefix, then names or their values
        r"(?:Ip|IpExt|Icmp|IcmpMsg|Tcp|TcpExt|Udp|UdpLite|MPTcpExt): (?:[A-Z]\w*|-?\d+)(?: (?:\w+|-?\d+))*\s*$",
    ),
    # ss / netstat -tn / lsof: socket tables
    LineShape(
        "sockets",
        Kind.LISTENERS,
        r"(?:Netid\s+)?(?:State\s+)?Recv-Q\s+Send-Q\s+Local Address|Proto\s+Recv-Q\s+Send-Q\s+Local Address|"
        + SS_ROW_RE
        + rf"|(?:tcp|udp)6?\s+\d+\s+\d+\s+{ADDR_PORT}\s+{ADDR_PORT}|"
        r"COMMAND\s+PID\s+(?:TID\s+)?USER\s+FD\s+TYPE|"
        r"\S+\s+\d+\s+(?:\d+\s+)?\S+\s+\w+\s+IPv[46]\s+\S+\s+\S+\s+(?:TCP|UDP)\s+\S",
    ),
    LineShape("sysctl", Kind.SYSCTL, _line(SYSCTL_LINE)),
    LineShape("ip-link", Kind.IP_LINK, _line(IP_LINK_LINE)),
    LineShape("hairpin-files", Kind.IP_LINK, _line(HAIRPIN_FILE)),
    LineShape("ifconfig", Kind.IP_LINK, _line(IFCONFIG_HEAD)),
    # the shapes their parser modules declare (parse.shapes)
    *(LineShape(s.name, s.kind, s.segment_pattern, key=s.lines.pattern) for s in REGISTERED),
    LineShape(
        "processes",
        Kind.PROCESSES,
        r"UID\s+PID\s+PPID\s+C\s+STIME|USER\s+PID\s+%CPU\s+%MEM|PID\s+USER\s+TIME\s+COMMAND|"
        + "|".join(rx for rx, _ in HEADERLESS_ROWS),
    ),
    LineShape("lsmod", Kind.MODULES, _line(LSMOD_HEADER) + "|" + _line(LSMOD_ROW)),
    LineShape("uname", Kind.UNAME, _line(UNAME_A_LINE)),
    LineShape("os-release", Kind.OS_RELEASE, r"(?:PRETTY_NAME|NAME|ID|ID_LIKE|VERSION_ID|VERSION)=\S"),
    LineShape(
        "iptables-version",
        Kind.IPTABLES_VERSION,
        r"ip6?tables(?:-legacy|-nft)?(?:-restore|-save)? v\d+\.\d+(?:\.\d+)*(?: \((?:legacy|nf_tables)\))?\s*$",
    ),
    LineShape("nft-version", Kind.NFT_VERSION, _line(NFT_VERSION_LINE)),
)

# The indentation is skipped once, never given back (possessive): no shape needs leading blanks,
# and giving them back one at a time to every shape is quadratic in a deeply indented line.
_LINE = lazy_re.compile(r"[ \t]*+(?:" + "|".join(f"(?P<s{i}>{s.pattern})" for i, s in enumerate(SHAPES)) + ")")
_BY_GROUP = {f"s{i}": s for i, s in enumerate(SHAPES)}
# What belongs to no run: a markdown heading or fence, a bold label (each also ends what came
# before: the next output is another one, even of the same kind), and the user's note in a human
# language (letters no tool prints in a comment of its own) or a C-style one.
_HEADING = lazy_re.compile(r"^[ \t]*+(?:#{2,6}[ \t]+\S|\*\*[^*\n]+\*\*:?[ \t]*$)")
_NOTE = lazy_re.compile(r"^[ \t]*+(?://[ \t]|(?:#|--)[ \t]*\S*[^\x00-\x7f])")
# Where a restore's payload starts inside a log record (kube-proxy echoes what it fed restore).
_ECHO_START = lazy_re.compile(r"^\*(?:nat|filter|mangle|raw|security)\s*$")
_NETSTAT = next(s for s in SHAPES if s.name == "netstat-s")


def shape_of(line: str) -> LineShape | None:
    """The registered shape of one line, or None (a line many outputs print, or none)."""
    m = _LINE.match(line)
    if m is not None and m.lastgroup is not None:
        return _BY_GROUP[m.lastgroup]
    if netstat_phrase(line) is not None:  # `netstat -s | grep ...`: a counter line without its section
        return _NETSTAT
    return None


@dataclass
class _Run:
    start: int  # first line (0-based)
    end: int  # last line, inclusive
    shape: LineShape | None
    headed: bool = False  # a heading (or fence) came before it: another output starts here
    echoed: bool = False  # holds a restore's payload after "Input was:": a log record's rest
    root: _Run | None = None  # the run it goes on with after log records interrupted it
    typed: Typed = field(default_factory=lambda: Typed(None, {}))

    @property
    def log(self) -> bool:
        """Records of a log: by their lines' shape, or (lines no shape knows) by their content."""
        return (self.shape is not None and self.shape.log) or self.typed.kind in _LOG_KINDS


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of a paste: its kind, its text (from its first line; other parts' lines within
    it left empty), and the line its text starts at (1-based, in the text split)."""

    typed: Typed
    text: str
    first_line: int


@dataclass(frozen=True, slots=True)
class Segmented:
    """A paste read as parts (``segments``), and how many note and heading lines belong to none."""

    segments: tuple[Segment, ...]
    asides: int


def _runs(lines: list[str]) -> tuple[list[_Run], set[int]]:
    """Runs of lines of one shape with what continues them (see the module docstring), and the
    lines that belong to none."""
    runs: list[_Run] = []
    asides: set[int] = set()
    cur: _Run | None = None
    gap = False  # a blank line since the current run's last line
    headed = False  # a heading since the current run's last line
    echo = False  # inside a restore's payload a log echoes (after "Rules:", "Input was:")
    broken: _Run | None = None  # the output the current log records interrupt (no blank between)
    for i, line in enumerate(lines):
        if not line.strip():
            gap, echo, broken = True, False, None
            continue
        heading = FENCE.match(line) is not None or (_HEADING.match(line) is not None and _apart(lines, i))
        if heading or _NOTE.match(line):
            asides.add(i)
            if heading:
                cur, headed, echo, broken = None, True, False, None
            continue
        shape = shape_of(line)
        if (
            cur is not None
            and not gap
            and _ECHO_START.match(line.strip())
            and shape is not cur.shape
            and (cur.log or lines[i - 1].rstrip().endswith(":"))
        ):
            echo = cur.echoed = True  # the input a program fed to iptables-restore, echoed in its log
        record_goes_on = line.startswith("\t") or (shape is None and broken is None)
        if cur is not None and not gap and (echo or (cur.log and record_goes_on)):
            cur.end = i  # a log record goes on: its tab-indented values, a payload it echoes
            continue
        if shape is not None and cur is not None and cur.shape is shape and not _opens(shape, line, gap):
            cur.end = i
        elif shape is None and cur is not None and not gap and not cur.log:
            cur.end = i  # a line that goes on with what came before it
        elif broken is not None and cur is not None and cur.log and not gap and shape in (None, broken.shape):
            # the output log records interrupted goes on (a log tailing into a listing)
            cur = _Run(i, i, broken.shape, root=broken.root or broken)
            runs.append(cur)
            broken = None
        else:
            if shape is not None and shape.log and cur is not None and not cur.log and not gap:
                broken = cur
            headed = headed or (cur is not None and shape is cur.shape and _opens(shape, line, gap))
            cur = _Run(i, i, shape, headed)
            runs.append(cur)
            headed = False
        gap = False
    return runs, asides


def _opens(shape: LineShape | None, line: str, gap: bool) -> bool:
    """Does ``line`` start another listing of its shape (a second dump after a blank line)?"""
    return shape is not None and gap and bool(shape.opens) and re.match(shape.opens, line.lstrip()) is not None


def _apart(lines: list[str], i: int) -> bool:
    """Does line ``i`` stand apart as a markdown heading does (a blank line or a fence on each
    side), not as a ``## comment`` above a setting of a file?"""
    before = i == 0 or not lines[i - 1].strip() or FENCE.match(lines[i - 1]) is not None
    after = i + 1 >= len(lines) or not lines[i + 1].strip() or FENCE.match(lines[i + 1]) is not None
    return before and after


def _text(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start : end + 1])


def _typed(text: str, shape: LineShape | None, hint: Typed, signatures: Signatures) -> Typed:
    """A run's kind by its own content; else, for a log's records, the whole paste's (a log that
    names kube-proxy elsewhere: its flags, its command line), and for a listing too short to
    tell, its lines' shape."""
    typed = sniff(text[:HEAD_BYTES], signatures)
    if typed.kind is not None or shape is None:
        return typed
    if shape.log:  # whose records: kube-proxy's when the paste says so (a kernel log says so itself)
        return hint if hint.kind is Kind.KUBE_PROXY_LOG or hint.kind == shape.kind else typed
    if shape.kind is None:
        return typed
    if shape.key and not any(re.match(shape.key, ln.lstrip()) for ln in text.splitlines()):
        return typed  # only the lines such output prints around its own (a `- cpu: 100m` is no check-config)
    return Typed(shape.kind, {"fragment": "true"} if shape.kind in _PARTIAL_KINDS else {})


# Kinds whose parsers tell "a few lines of it" from a whole listing by a ``fragment`` attribute.
_PARTIAL_KINDS = (Kind.IPTABLES_SAVE, Kind.IPTABLES_LIST)
_LOG_KINDS = (Kind.KUBE_PROXY_LOG, Kind.KERNEL_LOG, Kind.RUNTIME_LOG)


def _settle(runs: list[_Run], lines: list[str], hint: Typed, signatures: Signatures) -> list[_Run]:
    """Each run typed; runs of unshaped lines whose content says nothing joined with the like
    runs after them when together they say something (a command line, then what it printed),
    else with the run before them (after a heading: the run after them)."""
    chains: dict[int, list[_Run]] = {}
    for r in runs:
        if r.root is not None:
            chains.setdefault(id(r.root), [r.root]).append(r)
    for r in runs:
        if r.root is not None or (r.echoed and r.shape is None):
            continue  # typed with the run it goes on; the rest of the log record before it
        r.typed = _typed(_text(lines, r.start, r.end), r.shape, hint, signatures)
        chain = chains.pop(id(r), None)
        if chain is None:
            continue
        if r.typed.kind is None or r.typed.kind in _LOG_KINDS:  # a log record's rest, not a listing
            for member in chain[1:]:
                member.root = None
            continue
        r.typed = _typed(_joined(chain, lines)[0], r.shape, hint, signatures)
        for member in chain:
            member.typed = r.typed
    kept: list[_Run] = []
    i = 0
    while i < len(runs):
        r = runs[i]
        if (r.shape is not None and not r.echoed) or r.typed.kind is not None or r.root is not None:
            kept.append(r)
            i += 1
            continue
        j = i
        while j + 1 < len(runs) and runs[j + 1].shape is None and not runs[j + 1].headed:
            j += 1
            if runs[j].typed.kind is not None:
                break  # what the lines before it were: the command that printed it, say
        if j > i:
            together = sniff(_text(lines, r.start, runs[j].end)[:HEAD_BYTES], signatures)
            if together.kind is not None:
                kept.append(_Run(r.start, runs[j].end, None, r.headed, typed=together))
                i = j + 1
                continue
            while runs[j].typed.kind is not None:
                j -= 1  # not with them: the lines that say nothing, as below
        if kept and not r.headed and _goes_on(kept[-1], lines[r.start]):
            kept[-1].end = runs[j].end
        elif kept or j + 1 >= len(runs) or runs[j + 1].headed:
            kept.append(_Run(r.start, runs[j].end, None, r.headed, typed=r.typed))  # a part nothing reads
        else:
            runs[j + 1].start, runs[j + 1].headed = r.start, r.headed
        i = j + 1
    return kept


# Kinds parsed as one document: lines that are not theirs break them.
_STRUCTURED = (Kind.K8S_OBJECTS, Kind.KUBE_PROXY_CONFIG, Kind.NFT_RULESET, Kind.IP_ADDR, Kind.IP_LINK)
_CONTINUES_DOCUMENT = lazy_re.compile(r"^(?:[ \t]|- |[\w.\"'-]+:(?:\s|$)|[}\]]|---)")


def _goes_on(before: _Run, line: str) -> bool:
    """May a paragraph that says nothing by itself, starting with ``line``, belong to the run
    before it? Not to a document (YAML, JSON) unless it reads as its next lines."""
    return before.typed.kind not in _STRUCTURED or _CONTINUES_DOCUMENT.match(line) is not None


def segment(text: str, signatures: Signatures, hint: Typed | None = None) -> Segmented | None:
    """The parts of a paste that mixes kinds of output, or None when it is one kind. ``hint``:
    the whole text's kind (:func:`~kpdoctor.bundle.sniff.sniff`), for runs too short to say."""
    lines = text.split("\n")
    runs, asides = _runs(lines)
    lines = ["" if i in asides else ln for i, ln in enumerate(lines)]  # in no part
    if (len(runs) < 2 and not asides) or not runs or len(runs) > MAX_RUNS:
        return None
    kept = _settle(runs, lines, hint or Typed(None, {}), signatures)
    # log records by their kind, wherever they sit; the other runs of one kind joined when only
    # log records separate them; a heading starts a new part of any kind
    groups: list[list[_Run]] = []
    logs: dict[Kind | None, list[_Run]] = {}
    for r in kept:
        if r.headed:
            logs = {}
        if r.log:
            if r.typed.kind in logs:
                logs[r.typed.kind].append(r)
            else:
                logs[r.typed.kind] = [r]
                groups.append(logs[r.typed.kind])
            continue
        last = next((g for g in reversed(groups) if not g[0].log), None)  # only logs after it
        if last is not None and last[-1].typed.kind == r.typed.kind and not r.headed:
            last.append(r)
        else:
            groups.append([r])
    if len(groups) < 2 and not asides:
        return None
    return Segmented(tuple(_segment(g, lines, signatures) for g in groups), len(asides))


def _joined(group: list[_Run], lines: list[str]) -> tuple[str, int]:
    """The text of runs from the first one's first line to the last one's last, other lines left
    empty, and its first line (0-based)."""
    first, last = group[0].start, group[-1].end
    mine = {i for r in group for i in range(r.start, r.end + 1)}
    return "\n".join(lines[i] if i in mine else "" for i in range(first, last + 1)) + "\n", first


def _segment(group: list[_Run], lines: list[str], signatures: Signatures) -> Segment:
    text, first = _joined(group, lines)
    typed = group[0].typed
    if len(group) > 1 and typed.kind is not None:  # the joined text may say more (a whole dump)
        again = sniff(text[:HEAD_BYTES], signatures)
        typed = again if again.kind == typed.kind else typed
    return Segment(typed, text, first + 1)
