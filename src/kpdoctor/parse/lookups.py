"""Name lookups that waited for the resolver to send a query again: a query or its answer lost.

A stub resolver waits a fixed time for an answer before it sends the query again: glibc 5 s
(``RES_TIMEOUT``, resolv/resolv.h), Go's resolver 5 s (its dnsconfig default), BIND's dig, host
and nslookup 5 s (``UDP_TIMEOUT``); musl splits its 5 s over its 2 attempts and sends again every
2.5 s, as BusyBox's nslookup does (timeout 5, retry 2). So a lookup that answers after 5 s (or 10,
2.5, 7.5) lost one of its packets and got the answer on the next try. glibc sends the A and AAAA
queries at once from one socket, and on a node that DNATs them to the cluster DNS the conntrack
insert race drops one of the pair: the "5 s DNS delay". The evidence, as it is pasted:

* ``time`` around a lookup (``time nslookup x``, ``time getent hosts x``, ``time curl http://x``),
  in bash's, ``time -p``'s, zsh's or GNU time's form (``parse.timing``): ``real 0m5.037s``;
* dig, host and nslookup of BIND 9.18.6 and later, which print each try that timed out
  (``;; communications error to 10.96.0.10#53: timed out``) and then the answer the next try got;
* curl's ``-w`` write-out with ``%{time_namelookup}``: the seconds name resolution took.

Run here (Debian 12, a network namespace, a responder on its loopback that drops the first query
and answers the rest): dig and nslookup 9.18.49 printed the timed-out try, then the answer, and
took 5.03 s; ``getent hosts`` and Python's getaddrinfo (glibc 2.36) 5.01 and 5.18 s; curl 7.88.1's
``time_namelookup`` 5.006; BusyBox 1.35's nslookup 2.51 s. A lookup that failed in the end (no
answer: every try lost, or a negative answer) is not one that waited: the messages catalogue
reads what such a lookup printed. Nothing here raises on bad input; line numbers are 0-based.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.shellwords import PROMPT, RUNTIME_CLIS, exec_parts, shell_split, unwrapped
from kpdoctor.parse.timing import elapsed

# The tools that resolve a name they are given, and the resend interval each waits for.
_BIND_TOOLS = frozenset({"dig", "host", "nslookup"})
_LIBC_TOOLS = frozenset({"getent", "curl", "wget", "ping", "nc", "telnet"})
GLIBC_WAIT = 5.0  # glibc, Go, BIND's tools: seconds before a query is sent again
MUSL_WAIT = 2.5  # musl and BusyBox's nslookup: 5 s over 2 attempts
MAX_LOSSES = 3  # waits of up to three lost tries are read as such (a longer stall is something else)
START_SLACK = 0.75  # what starting the process, and the answer, add to the waits (python: 0.18 s)
EXEC_SLACK = 1.5  # ... when `kubectl exec` runs it in a Pod (the API round trips)
MAX_LINES = 2000  # a timed lookup is a few lines; a long loop of them is still a paste
_IP = lazy_re.compile(r"^(?:\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*\]?)$")
_URL_HOST = lazy_re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?(?:[^@/\s]*@)?(?P<host>\[[^\]]+\]|[^:/?#\s]+)", re.I)
# what a lookup prints when it got no answer in the end (its own failure lines, the catalogue's)
_FAILED = lazy_re.compile(
    r"no servers could be reached|can't resolve|[Cc]ould not resolve|[Cc]ouldn't resolve|bad address|"
    r"unable to resolve|Temporary failure in name resolution|Name or service not known|Name does not resolve|"
    r"NXDOMAIN|SERVFAIL|REFUSED|no such host|server misbehaving|i/o timeout|not found|Can't find"
)
_TIMED_OUT_TRY = lazy_re.compile(r"^;; communications error to (?P<server>\S+): timed out\s*$")
# an answer dig, host or nslookup printed (BIND's and BusyBox's forms)
_ANSWERED = lazy_re.compile(r"^;; ->>HEADER<<- |^;; Query time: |^Name:\s|^Address(?: 1)?:\s|\shas (?:IPv6 )?address\s")
_WRITE_OUT = lazy_re.compile(r"%\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Lookup:
    """A command that resolves a name: the tool and the name."""

    tool: str
    name: str
    in_pod: bool  # run through `kubectl exec` (or a runtime's exec): its time includes the API's
    write_out: tuple[str, ...] = ()  # curl -w: the variables its output lines print, in order

    @property
    def pair(self) -> bool:
        """Does it send the A and AAAA queries at once from one socket (libc's resolver: glibc,
        musl; not BIND's tools, whose dig sends one query)? The pair is what the race splits."""
        return self.tool in _LIBC_TOOLS


@dataclass(frozen=True, slots=True)
class WaitedLookup:
    """A lookup that answered after waiting for the resolver to send again."""

    lookup: Lookup
    seconds: float | None  # how long it took (None: the tool printed the lost try itself)
    waited: float  # the waits it sat through, in seconds (5, 10, 2.5 ...)
    line: int  # 0-based line of the evidence (the timing, the timed-out try) in the text
    text: str  # that line, stripped
    how: str  # "timed" | "retry printed" | "curl -w"

    @property
    def losses(self) -> int:
        """How many tries were lost (one wait each)."""
        per = MUSL_WAIT if self.waited % GLIBC_WAIT else GLIBC_WAIT
        return max(1, round(self.waited / per))


# where a command list or a loop's body starts another command
_NEXT_COMMAND = lazy_re.compile(r"\s*(?:;|&&|\|\||\||\bdo\b|\bthen\b)\s*")


def lookup_of(cmdline: str) -> Lookup | None:
    """The lookup a command line runs (after a prompt's, `time`'s, `sudo`'s and `kubectl exec`'s
    words; in a command list or a loop, the first command that is one), when it names a host
    name rather than an address; None for anything else."""
    for words, in_pod, busybox in _programs(cmdline):
        found = _lookup_in(words, in_pod, busybox)
        if found is not None:
            return found
    return None


# Clients: what they print is their own output (a lookup's, a connection's), never a component's log.
_CLIENTS = _BIND_TOOLS | _LIBC_TOOLS | {"traceroute", "tracepath", "mtr", "drill", "kdig"}


def runs_a_client(cmdline: str) -> bool:
    """Does a command line run a client (a DNS lookup, curl, ping...), here or in a Pod? Its output
    is the client's, whatever lines of a log it holds."""
    return any(words[0].rsplit("/", 1)[-1] in _CLIENTS for words, _, _ in _programs(cmdline))


def _programs(cmdline: str) -> Iterator[tuple[list[str], bool, bool]]:
    """Each command of a command line as the program it runs: its words (wrappers, a runtime's
    `exec` and `busybox` taken off), whether it runs in a Pod, whether BusyBox runs it."""
    if len(cmdline) > 4096:
        return
    for part in _NEXT_COMMAND.split(cmdline):
        try:
            words = shell_split(part)
        except ValueError:
            words = part.split()
        cut = next((i for i, w in enumerate(words) if w in (">", "2>&1", ">>")), len(words))
        words = unwrapped(words[:cut])
        in_pod = False
        if words and words[0].rsplit("/", 1)[-1] in RUNTIME_CLIS:
            _, inner = exec_parts(words)
            if not inner:
                continue
            words, in_pod = unwrapped(inner), True
        busybox = bool(words) and words[0].rsplit("/", 1)[-1] == "busybox"
        if busybox:
            words = words[1:]
        if words:
            yield words, in_pod, busybox


def _lookup_in(words: list[str], in_pod: bool, busybox: bool) -> Lookup | None:
    tool = words[0].rsplit("/", 1)[-1]
    if tool not in _BIND_TOOLS and tool not in _LIBC_TOOLS:
        return None
    args = words[1:]
    name = _name_in(tool, args)
    if name is None or _IP.match(name):
        return None
    write_out = _write_out(args) if tool == "curl" else ()
    return Lookup("busybox nslookup" if busybox and tool == "nslookup" else tool, name, in_pod, write_out)


def _name_in(tool: str, args: list[str]) -> str | None:
    """The host name a tool's arguments name (the first word that is not an option or its value)."""
    valued = {
        "-c",
        "-W",
        "-w",
        "-t",
        "-p",
        "-q",
        "-o",
        "-m",
        "-H",
        "-d",
        "-X",
        "-A",
        "-u",
        "-e",
        "-b",
        "-x",
        "-y",
        "--connect-timeout",
        "--max-time",
        "--output",
        "--header",
        "--data",
        "--request",
        "--user-agent",
        "--write-out",
        "--resolve",
        "--cacert",
        "--cert",
        "--key",
        "-k",
    } - ({"-k"} if tool == "curl" else set())
    if tool == "getent":
        return args[1] if len(args) >= 2 and args[0] in ("hosts", "ahosts", "ahostsv4", "ahostsv6") else None
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("@"):  # dig @server
            i += 1
            continue
        if a.startswith("-") or a.startswith("+"):
            i += 2 if a in valued else 1
            continue
        if tool in ("curl", "wget"):
            m = _URL_HOST.match(a)
            return m.group("host").strip("[]") if m else None
        return a.rstrip(".") or None
    return None


def _write_out(args: list[str]) -> tuple[str, ...]:
    for i, a in enumerate(args):
        fmt = args[i + 1] if a in ("-w", "--write-out") and i + 1 < len(args) else None
        if fmt is None and a.startswith("--write-out="):
            fmt = a.split("=", 1)[1]
        if fmt is not None:
            return tuple(_WRITE_OUT.findall(fmt))
    return ()


def _wait_in(seconds: float, lookup: Lookup) -> float | None:
    """The resolver waits ``seconds`` sat through (5, 10 ... or 2.5, 5 ... for musl), or None."""
    slack = EXEC_SLACK if lookup.in_pod else START_SLACK
    for per in (GLIBC_WAIT, MUSL_WAIT):
        for n in range(1, MAX_LOSSES + 1):
            wait = per * n
            if wait - 0.05 <= seconds <= wait + slack:
                return wait
    return None


def waited_lookups(text: str, command: str | None = None) -> list[WaitedLookup]:
    """Every lookup in ``text`` that answered after a resend: ``command`` the transcript's, or the
    command lines the text holds itself (behind a prompt)."""
    return _read(text, command)[0]


def is_timed_lookup(text: str, command: str | None = None) -> bool:
    """Does ``text`` show how long a lookup took (a timing line after a lookup command, a try a
    BIND tool printed as timed out, curl -w's name lookup time)? What types it as evidence."""
    waited, timed = _read(text, command)
    return bool(waited) or timed


def _read(text: str, command: str | None) -> tuple[list[WaitedLookup], bool]:
    """The lookups that waited, and whether any lookup was timed at all."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        return [], False
    current = lookup_of(command) if command else None
    out: list[WaitedLookup] = []
    timed = False
    start = 0  # the current run's first output line
    tries: list[tuple[int, str]] = []  # timed-out tries printed since it started
    said = False  # the run's wait is read already (its printed try, curl's -w): its timing adds nothing
    for i, raw in enumerate(lines):
        line = " ".join(raw.split())  # as cited: `real\t0m5.037s` -> `real 0m5.037s`
        if not line:
            continue
        m = PROMPT.match(raw)
        if m:
            current, start, tries, said = lookup_of(m.group("cmd")), i + 1, [], False
            continue
        if current is None:
            continue
        if _TIMED_OUT_TRY.match(line):
            tries.append((i, line))
            continue
        el = elapsed(raw)
        if el is not None:  # the end of one run (a loop times each)
            timed = True
            wait = _wait_in(el[0], current)
            if wait is not None and not said and not _failed(lines[start:i]):
                out.append(WaitedLookup(current, el[0], wait, i, line, "timed"))
            start, tries, said = i + 1, [], False
            continue
        if tries and _ANSWERED.match(line) and not _failed(lines[start:i]):
            at, first = tries[0]
            per = MUSL_WAIT if current.tool == "busybox nslookup" else GLIBC_WAIT
            out.append(WaitedLookup(current, None, per * len(tries), at, first, "retry printed"))
            tries, said = [], True
        if current.write_out and "time_namelookup" in current.write_out:
            found = _curl_namelookup(line, current)
            if found is not None:
                out.append(WaitedLookup(current, found[0], found[1], i, line, "curl -w"))
                said = True
    return out, timed


def _failed(output: list[str]) -> bool:
    return any(_FAILED.search(ln) for ln in output if not _TIMED_OUT_TRY.match(ln.strip()))


def _curl_namelookup(line: str, lookup: Lookup) -> tuple[float, float] | None:
    """curl -w's time_namelookup on a line of its output (the variables in the format's order),
    when it sat through a resend."""
    values = line.split()
    if len(values) != len(lookup.write_out):
        return None
    try:
        seconds = float(values[lookup.write_out.index("time_namelookup")].replace(",", "."))
    except ValueError:
        return None
    wait = _wait_in(seconds, Lookup(lookup.tool, lookup.name, False))
    return (seconds, wait) if wait is not None else None
