"""``ipvsadm`` output: virtual servers and their real servers, from every listing users paste.

``ipvsadm -Ln`` prints a virtual server per line (``TCP  10.96.0.10:53 rr persistent 10800``)
and its real servers under it (``  -> 10.244.0.5:53  Masq  1  0  0``); ``--stats``/``--rate``
replace the scheduler and the forward/weight columns with counters, ``--thresholds`` and
``--persistent-conn`` change the real servers' columns; ``ipvsadm -Sn`` prints the same state as
commands (``-A -t VIP:PORT -s rr [-p T]``, ``-a -t VIP:PORT -r RIP:PORT -m -w 1``). Which columns
a line has is read from the header when it is there, else from the line itself, and nothing
depends on indentation: pastes often lose it (seed 001's ``-> 10.130.29.80:6443 Masq 1 6 0``).
``ipvsadm -L --timeout`` prints one line of the connection timeouts (:func:`parse_timeouts`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor import lazy_re
from kpdoctor.parse.numbers import to_int

PROTOCOLS = ("TCP", "UDP", "SCTP")
FORWARDS = frozenset({"Masq", "Local", "Route", "Tunnel", "FullNat", "Snat"})
# ipvsadm -Sn's service options, long and short, and the protocol each names
_SAVE_SERVICE = {
    "-t": "TCP",
    "--tcp-service": "TCP",
    "-u": "UDP",
    "--udp-service": "UDP",
    "--sctp-service": "SCTP",
    "-f": "FWM",
    "--fwmark-service": "FWM",
}
_SAVE_FORWARD = {
    "-m": "Masq",
    "--masquerading": "Masq",
    "-g": "Route",
    "--gatewaying": "Route",
    "-i": "Tunnel",
    "--ipip": "Tunnel",
}
_VS_START = lazy_re.compile(r"^(TCP|UDP|SCTP|FWM)\s+(\S+)(?:\s+(.*))?$")
_RS_START = lazy_re.compile(r"^->\s*(\S+)(?:\s+(.*))?$")
_HEADER = lazy_re.compile(r"^(?:Prot LocalAddress:Port|->\s*RemoteAddress:Port|IP Virtual Server version)")
# "1234", or --stats/--rate's shortened "1234K"/"12M"/"3G"/"1T"
_COUNT = lazy_re.compile(r"^\d+[KMGT]?$")
_SCHEDULER = lazy_re.compile(r"[a-z]+")


# `ipvsadm -L --timeout` (ipvsadm.c list_timeout(): "Timeout (tcp tcpfin udp): %d %d %d", no header):
# the kernel's idle timeouts of IPVS connections, in seconds (0 where never set: the kernel's default)
TIMEOUTS = lazy_re.compile(r"^[ \t]*Timeout \(tcp tcpfin udp\): (\d{1,10}) (\d{1,10}) (\d{1,10})[ \t]*$", re.M)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """IPVS's connection timeouts as ``ipvsadm --timeout`` prints them: an established TCP
    connection's (``tcp``), one after a FIN (``tcpfin``), a UDP flow's (``udp``), in seconds."""

    tcp: int
    tcpfin: int
    udp: int
    line: int
    text: str


def parse_timeouts(text: str, first_line: int = 1) -> Timeouts | None:
    """The first ``Timeout (tcp tcpfin udp): ...`` line of an ipvsadm output, if there is one."""
    m = TIMEOUTS.search(text)
    if m is None:
        return None
    line = first_line + text.count("\n", 0, m.start())
    return Timeouts(int(m.group(1)), int(m.group(2)), int(m.group(3)), line, m.group(0).strip())


@dataclass(slots=True)
class RealServer:
    address: str
    forward: str  # Masq, Route, Tunnel, Local; "" when the listing does not show it
    weight: int | None  # None: the listing does not show weights (--stats, --rate, --thresholds)
    active: int | None
    inactive: int | None
    line: int
    text: str = ""

    @property
    def takes_new(self) -> bool:
        """Does the scheduler send it new connections (weight above 0, or a weight not shown)?"""
        return self.weight is None or self.weight > 0


@dataclass(slots=True)
class VirtualServer:
    protocol: str  # TCP | UDP | SCTP | FWM
    address: str  # "10.96.0.10:53", "[fd00::a]:53"; the mark for FWM
    scheduler: str  # "" when the listing does not show it (--stats, --rate)
    flags: str  # what follows the scheduler: "persistent 10800 mask 255.255.255.0", "ops"
    line: int
    text: str
    reals: list[RealServer] = field(default_factory=list)
    persistent: int = 0  # persistence (ClientIP affinity) timeout in seconds, 0 when not persistent
    shown: bool = True  # the listing shows the scheduler and persistence (not --stats/--rate)

    @property
    def live(self) -> list[RealServer]:
        """The real servers new connections go to."""
        return [r for r in self.reals if r.takes_new]


def _flags(words: list[str]) -> int:
    """The persistence timeout in a ``-Ln`` flags column (``persistent 10800 [mask M] [ops]``)."""
    for i, w in enumerate(words[:-1]):
        if w == "persistent":
            return to_int(words[i + 1]) or 0
    return 0


def _counts_only(words: list[str]) -> bool:
    return bool(words) and all(_COUNT.match(w) for w in words)


def _columns(header: str, current: str) -> str:
    """The real servers' column set a header line announces (or ``current``)."""
    if "InPkts" in header or "Conns" in header:
        return "stats"
    if "CPS" in header:
        return "rate"
    if "Uthreshold" in header:
        return "thresholds"
    if "PersistConn" in header:
        return "persistent-conn"
    if "Scheduler" in header or "Forward" in header:
        return "list"
    return current


def _real(address: str, words: list[str], columns: str, line: int, text: str) -> RealServer | None:
    """One ``-> address ...`` line, by the column set in force."""
    if words and words[0] in FORWARDS:  # -Ln (and --tun-info, which adds columns after these)
        nums = [to_int(w) for w in words[1:4]]
        if len(nums) < 3 or nums[0] is None:
            return None
        return RealServer(address, words[0], nums[0], nums[1], nums[2], line, text)
    nums = [to_int(w) for w in words]
    if columns == "persistent-conn" and len(nums) >= 4 and None not in nums[:4]:
        return RealServer(address, "", nums[0], nums[2], nums[3], line, text)
    if columns == "thresholds" and len(nums) >= 4 and None not in nums[:4]:
        return RealServer(address, "", None, nums[2], nums[3], line, text)
    if _counts_only(words):  # --stats, --rate, or columns a header would have named
        return RealServer(address, "", None, None, None, line, text)
    return None


def _listed(raw: str, ln: int, out: list[VirtualServer], columns: str) -> str:
    """One line of an ``-Ln`` listing; returns the column set in force after it."""
    s = raw.strip()
    if _HEADER.match(s):
        return _columns(s, columns)
    m = _VS_START.match(s)
    if m:
        proto, address, rest = m.group(1), m.group(2), (m.group(3) or "").split()
        if proto == "FWM" and rest[:1] == ["IPv6"]:
            rest = rest[1:]
        if _counts_only(rest):  # --stats / --rate: counters instead of the scheduler
            out.append(VirtualServer(proto, address, "", "", ln, s, shown=False))
        elif rest and _SCHEDULER.fullmatch(rest[0]):
            out.append(VirtualServer(proto, address, rest[0], " ".join(rest[1:]), ln, s, persistent=_flags(rest[1:])))
        return columns
    r = _RS_START.match(s)
    if r and out and r.group(1) != "RemoteAddress:Port":
        real = _real(r.group(1), (r.group(2) or "").split(), columns, ln, s)
        if real is not None:
            out[-1].reals.append(real)
    return columns


def _options(words: list[str]) -> dict[str, str]:
    """``-x value`` pairs of an ``-Sn`` line (a flag without a value maps to "")."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            opts[w] = words[i + 1]
            i += 2
        else:
            opts[w] = ""
            i += 1
    return opts


# the two shapes kube-proxy's state prints as (read without taking the options apart)
_SAVED_RS = lazy_re.compile(r"^-a -([tu]) (\S+) -r (\S+) -m -w (\d{1,10})$")
_SAVED_VS = lazy_re.compile(r"^-A -([tu]) (\S+) -s ([a-z]+)$")


def _saved(s: str, ln: int, out: list[VirtualServer], index: dict[tuple[str, str], VirtualServer]) -> None:
    """One ``ipvsadm -Sn`` line: ``-A`` adds a virtual server, ``-a`` a real server to one."""
    m = _SAVED_RS.match(s)
    if m:
        owner = index.get((_SAVE_SERVICE["-" + m.group(1)], m.group(2)))
        if owner is not None:
            owner.reals.append(RealServer(m.group(3), "Masq", int(m.group(4)), None, None, ln, s))
        return
    m = _SAVED_VS.match(s)
    if m:
        vs = VirtualServer(_SAVE_SERVICE["-" + m.group(1)], m.group(2), m.group(3), "", ln, s)
        out.append(vs)
        index.setdefault((vs.protocol, vs.address), vs)
        return
    words = s.split()
    opts = _options(words[1:])
    service = next(((p, opts[o]) for o, p in _SAVE_SERVICE.items() if opts.get(o)), None)
    if service is None:
        return
    if words[0] in ("-A", "--add-service"):
        sched = opts.get("-s") or opts.get("--scheduler") or ""
        timeout = opts.get("-p", opts.get("--persistent"))
        # -p without a value is ipvsadm's default persistence (300 s); -Sn always prints one
        persistent = (to_int(timeout) or 300) if timeout is not None else 0
        flags = f"persistent {persistent}" if persistent else ""
        vs = VirtualServer(service[0], service[1], sched, flags, ln, s, persistent=persistent)
        out.append(vs)
        index.setdefault(service, vs)
    elif words[0] in ("-a", "--add-server"):
        owner = index.get(service)
        address = opts.get("-r") or opts.get("--real-server")
        if owner is None or not address:
            return
        forward = next((f for o, f in _SAVE_FORWARD.items() if o in opts), "Route")
        weight = to_int(opts.get("-w") or opts.get("--weight") or "1")
        owner.reals.append(RealServer(address, forward, weight, None, None, ln, s))


def parse_ipvsadm_list(text: str, first_line: int = 1) -> list[VirtualServer]:
    """Virtual servers (with their real servers) in ``ipvsadm -Ln`` (any column set) or
    ``ipvsadm -Sn`` output; both may be in one paste."""
    out: list[VirtualServer] = []
    index: dict[tuple[str, str], VirtualServer] = {}
    columns = ""
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if s.startswith(("-A ", "-a ", "--add-service ", "--add-server ")):
            _saved(s, first_line + i, out, index)
        elif s:
            columns = _listed(raw, first_line + i, out, columns)
    return out
