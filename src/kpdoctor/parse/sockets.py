"""Listening sockets: who holds a port, and how full each accept queue is.

Why: a NodePort or hostPort that something else already holds, and accept queues at their backlog, explain
refused or dropped connections that kube-proxy's rules do not.

Formats: ``ss -ltn``, ``ss -ltnp``, ``ss -lntu`` (with a ``Netid`` column), ``ss -tn state listening`` (no
``State`` column), interface suffixes (``127.0.0.1%lo:10249``), and net-tools ``netstat -ltnp`` /
``netstat -lntup``. For a LISTEN socket ss prints the accept queue as Recv-Q and the backlog
(min(listen() backlog, somaxconn)) as Send-Q. netstat's Send-Q is not the backlog, so its rows get 0 for both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.numbers import is_int, to_int


@dataclass(frozen=True, slots=True)
class Listener:
    proto: str  # tcp | udp (sctp when ss shows it)
    address: str  # without brackets; "*" -> 0.0.0.0
    port: int
    recv_q: int  # LISTEN: current accept-queue length (0 from netstat)
    send_q: int  # LISTEN: the backlog (0 from netstat)
    process: str | None
    pid: int | None
    line: int
    text: str
    interface: str | None = None  # "lo" for 127.0.0.1%lo
    source: str = "ss"  # ss | netstat | lsof


# ss's state names (iproute2 misc/ss.c, sstate_name[]); a row a grep kept without its header starts
# with one, after the Netid column of `ss -a` / `ss -tua`
SS_STATES = (
    "UNKNOWN", "ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT", "UNCONN", "CLOSE-WAIT",
    "LAST-ACK", "LISTEN", "CLOSING",
)  # fmt: skip
ADDR_PORT = r"(?:\[[0-9a-fA-F:.]+\](?:%\w+)?|[\d.]+(?:%\w+)?|\*|[0-9a-fA-F:]+%?\w*)[:.](?:\d+|\*)"
SS_ROW_RE = (
    r"(?:(?:tcp|udp|sctp|mptcp|raw|u_str|u_dgr|u_seq)6?\s+)?(?:" + "|".join(SS_STATES) + r")\s+\d+\s+\d+\s+"
    + ADDR_PORT + r"\s+" + ADDR_PORT + r"(?:\s|$)"
)
SS_ROW = lazy_re.compile(r"^\s*" + SS_ROW_RE)
_PROTOS = {"tcp": "tcp", "tcp6": "tcp", "udp": "udp", "udp6": "udp", "sctp": "sctp", "mptcp": "tcp"}
_OTHER_NETIDS = {"raw", "u_str", "u_dgr", "u_seq", "nl", "p_raw", "p_dgr", "v_str", "v_dgr", "xdp", "tipc"}
_LISTEN_STATES = {"LISTEN", "UNCONN"}
_USERS = lazy_re.compile(r'users:\(\("((?:[^"\\]|\\.)*)",(?:pid=)?(\d+)')


def _endpoint(tok: str) -> tuple[str, int | None, str | None] | None:
    """``[::ffff:1.2.3.4]:80``, ``127.0.0.1%lo:10249``, ``*:80``, ``:::80`` -> (address, port, interface)."""
    iface = None
    if tok.startswith("["):
        end = tok.find("]")
        after = tok[end + 1 :] if end != -1 else ""
        if after.startswith("%") and ":" in after:  # [fe80::1]%eth0:22
            iface, _, port = after[1:].rpartition(":")
        elif after.startswith(":"):
            port = after[1:]
        else:
            return None
        host = tok[1:end]
    else:
        host, sep, port = tok.rpartition(":")
        if not sep:
            return None
    if "%" in host:
        host, _, iface = host.partition("%")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("*", ""):
        host = "0.0.0.0"
    if port == "*":
        return host, None, iface
    n = to_int(port) if is_int(port) else None
    if n is None or n > 65535:
        return None
    return host, n, iface


def _users(rest: str) -> tuple[str | None, int | None]:
    m = _USERS.search(rest)
    return (m.group(1), to_int(m.group(2))) if m else (None, None)


def _ss_row(toks: list[str], rest: str, line: int, text: str) -> Listener | None:
    idx = 0
    proto = "tcp"
    netid = toks[0].lower()
    if netid in _OTHER_NETIDS:
        return None
    has_netid = netid in _PROTOS
    if has_netid:
        proto, idx = _PROTOS[netid], 1
    state = None
    if idx < len(toks) and not is_int(toks[idx]):
        state = toks[idx].upper()
        idx += 1
    if len(toks) < idx + 4 or not (is_int(toks[idx]) and is_int(toks[idx + 1])):
        return None
    local, peer = _endpoint(toks[idx + 2]), _endpoint(toks[idx + 3])
    if local is None or local[1] is None or peer is None:
        return None
    if state is None:
        if peer[1] is not None:  # "state listening" rows have a wildcard peer port
            return None
    elif state not in _LISTEN_STATES:
        return None
    if state == "UNCONN":
        if not has_netid:
            proto = "udp"  # ss -lun without a Netid column
        elif proto != "udp":
            return None
    process, pid = _users(rest)
    recv_q, send_q = int(toks[idx]), int(toks[idx + 1])  # is_int above
    return Listener(proto, local[0], local[1], recv_q, send_q, process, pid, line, text, local[2])


def _netstat_row(toks: list[str], line: int, text: str) -> Listener | None:
    proto = _PROTOS.get(toks[0].lower())
    if proto is None or len(toks) < 5 or not (is_int(toks[1]) and is_int(toks[2])):
        return None
    local = _endpoint(toks[3])
    if local is None or local[1] is None:
        return None
    rest = toks[5:]
    state = rest[0] if rest and rest[0].isupper() and "/" not in rest[0] else None
    if proto == "tcp" and state != "LISTEN":
        return None
    if proto == "udp" and state not in (None, "CLOSE"):
        return None
    if state:
        rest = rest[1:]
    process = pid = None
    if rest and "/" in rest[0]:
        p, _, name = " ".join(rest).partition("/")
        if is_int(p):
            pid, process = to_int(p), name.strip() or None
    return Listener(proto, local[0], local[1], 0, 0, process, pid, line, text, local[2], source="netstat")


def _looks_netstat(toks: list[str]) -> bool:
    """A netstat row without a header: ``tcp6``/``udp6``, a LISTEN state column or a ``pid/program``."""
    if toks[0].lower() not in _PROTOS or len(toks) < 5 or not (is_int(toks[1]) and is_int(toks[2])):
        return False
    tail = toks[5:]
    return toks[0].endswith("6") or "LISTEN" in tail or bool(tail and re.match(r"^(\d+/|-$)", tail[-1]))


# lsof -i rows (header or not): COMMAND PID USER FD TYPE DEVICE SIZE/OFF NODE NAME [(STATE)]
LSOF_ROW = lazy_re.compile(
    r"^(\S+)\s+(\d+)\s+(?:\d+\s+)?\S+\s+\w+\s+IPv[46]\s+\S+\s+\S+\s+(TCP|UDP)\s+(\S+)(?:\s+\((\w+)\))?\s*$"
)


def _lsof_row(s: str, line: int) -> Listener | None:
    """A listening TCP or bound UDP socket of an `lsof -i` row (connected ones are not listeners)."""
    m = LSOF_ROW.match(s)
    if m is None or "->" in m.group(4) or (m.group(3) == "TCP" and m.group(5) != "LISTEN"):
        return None
    local = _endpoint(m.group(4))
    if local is None or local[1] is None:
        return None
    proto = m.group(3).lower()
    return Listener(proto, local[0], local[1], 0, 0, m.group(1), to_int(m.group(2)), line, s, local[2], source="lsof")


def parse_ss_listen(text: str, first_line: int = 1) -> list[Listener]:
    """Listening TCP (LISTEN) and bound UDP (UNCONN) sockets from ``ss -l...``, ``netstat -l...``
    or ``lsof -i`` (which shows no queue lengths: 0, like netstat)."""
    out: list[Listener] = []
    mode: str | None = None  # set by the last header seen
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if LSOF_ROW.match(s):
            if (got_lsof := _lsof_row(s, first_line + i)) is not None:
                out.append(got_lsof)
            continue
        if re.match(r"^Proto\s+Recv-Q\s+Send-Q", s):
            mode = "netstat"
            continue
        if "Local Address:Port" in s or re.match(r"^(Netid\s+)?(State\s+)?Recv-Q\s+Send-Q", s):
            mode = "ss"
            continue
        toks = s.split()
        if len(toks) < 4:
            continue
        line = first_line + i
        netstat = mode == "netstat" if mode else _looks_netstat(toks)
        got = _netstat_row(toks, line, s) if netstat else _ss_row(toks, s, line, s)
        if got is not None:
            out.append(got)
    return out


@dataclass(frozen=True, slots=True)
class Connection:
    """A connected socket: whose local port a connection holds (an outgoing connection's is a
    source port the kernel picked from the ephemeral range)."""

    proto: str
    local: str
    local_port: int
    remote: str
    remote_port: int
    state: str  # ESTABLISHED, TIME_WAIT...; "" for a connected UDP socket
    process: str | None
    pid: int | None
    line: int
    text: str


_CONNECTED_STATES = frozenset(
    {"ESTABLISHED", "ESTAB", "SYN_SENT", "SYN-SENT", "SYN_RECV", "SYN-RECV", "FIN_WAIT1", "FIN-WAIT-1", "FIN_WAIT2",
     "FIN-WAIT-2", "TIME_WAIT", "TIME-WAIT", "CLOSE_WAIT", "CLOSE-WAIT", "LAST_ACK", "LAST-ACK", "CLOSING"}
)  # fmt: skip


def parse_connections(text: str, first_line: int = 1) -> list[Connection]:
    """Connected sockets of ``netstat -tanp`` (``tcp 0 0 10.0.0.5:40005 10.43.0.1:443 ESTABLISHED
    30490/calico-node``) and ``ss -tanp`` rows (``ESTAB 0 0 10.0.0.5:40005 10.43.0.1:443
    users:(("calico-node",pid=30490,fd=7))``), with or without their header."""
    out: list[Connection] = []
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        toks = s.split()
        if len(toks) < 5:
            continue
        proto = "tcp"
        if toks[0].lower() in _PROTOS:  # netstat's proto, or ss's Netid
            proto = _PROTOS[toks[0].lower()]
            toks = toks[1:]
        state = ""
        if toks and toks[0].upper() in _CONNECTED_STATES:  # ss: the state first
            state, toks = toks[0].upper(), toks[1:]
        if len(toks) < 4 or not (is_int(toks[0]) and is_int(toks[1])):
            continue
        local, remote = _endpoint(toks[2]), _endpoint(toks[3])
        if local is None or remote is None or local[1] is None or remote[1] is None or not remote[1]:
            continue
        rest = toks[4:]
        if rest and rest[0].upper() in _CONNECTED_STATES:  # netstat: the state after the addresses
            state, rest = rest[0].upper(), rest[1:]
        elif rest and rest[0].upper() in ("LISTEN", "UNCONN"):
            continue
        if proto == "tcp" and not state:
            continue
        process, pid = _users(" ".join(rest))
        if process is None and rest and "/" in rest[0]:
            p, _, name = rest[0].partition("/")
            if is_int(p):
                pid, process = to_int(p), name or None
        out.append(Connection(proto, local[0], local[1], remote[0], remote[1], state, process, pid, first_line + i, s))
    return out
