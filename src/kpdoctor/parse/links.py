"""Network interfaces: MTU, tunnel kind, bridge master, and pod-facing veths.

Why: an overlay device (vxlan, ipip, geneve, wireguard) whose MTU leaves no room for the encapsulation, or a
pod veth with a larger MTU than the tunnel, drops large packets silently.

Formats: ``ip link``, ``ip -d link`` (the kind is the first word of the details line: ``vxlan id 1 ...``,
``veth``, ``bridge forward_delay ...``), ``ip addr`` / ``ip -d addr`` (same link lines, with addresses), and
``ip -j [-d] link`` / ``ip -j addr`` JSON, compact or pretty (``-p``).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.parse.numbers import to_int
from kpdoctor.parse.structured import load_json


@dataclass(frozen=True, slots=True)
class Link:
    name: str  # without the @peer suffix
    index: int | None
    mtu: int | None
    kind: str | None  # vxlan, ipip, veth, bridge... (-d or JSON linkinfo only)
    master: str | None
    link_netnsid: int | None  # the peer lives in another netns
    up: bool  # administratively up (UP flag)
    line: int
    text: str
    state: str | None = None  # operstate: UP, DOWN, UNKNOWN...
    peer: str | None = None  # "veth0" / "if2" / "NONE" from name@peer
    link_netns: str | None = None  # peer netns by name, when ip could resolve it
    slave_kind: str | None = None  # bridge for a bridge port (-d)
    # its counters (`ip -s link`, ifconfig): ("RX dropped", value, line, the line's text)
    stats: tuple[tuple[str, int, int, str], ...] = ()
    promisc: bool = False  # the PROMISC flag (a bridge in promiscuous mode passes hairpin traffic up)
    # a bridge port's hairpin flag (`ip -d link`'s bridge_slave line, JSON's info_slave_data), with
    # the line that says it; None when not shown
    hairpin: bool | None = None
    hairpin_line: tuple[int, str] | None = None
    udp_csum: bool | None = None  # a VXLAN device's outer UDP checksums (`udpcsum` / `noudpcsum`)


_HEAD = lazy_re.compile(r"^(\d+):\s+([^:@\s]+)(?:@([^:\s]+))?:\s+<([^>]*)>(.*)$")
# `ip -s link`: a titles line (iproute2 5.x+ "RX:  bytes packets errors dropped  missed   mcast",
# older "RX: bytes  packets  errors  dropped overrun mcast", with -s -s "RX errors: length crc
# frame fifo missed"), its values on the next line (iproute2's print_link_stats)
_STATS_TITLES = lazy_re.compile(r"^(RX|TX)(?: errors)?:\s+((?:[a-z_]+\s*)+)$")
# ifconfig's counters: net-tools 2.x "RX errors 0  dropped 12  overruns 0  frame 0", 1.60 and
# busybox "RX packets:12 errors:0 dropped:0 overruns:0 frame:0"
_IFCONFIG_STATS = lazy_re.compile(r"^\s+(RX|TX) (?:packets|errors)[ :]\d")
_IFCONFIG_PAIR = lazy_re.compile(r"([a-z]+)[ :](\d+)")
# what an interface's counters count as lost (iproute2's and ifconfig's column names)
_LOSSES = frozenset(
    {"errors", "dropped", "missed", "overrun", "overruns", "crc", "frame", "fifo", "length", "carrier", "aborted"}
)

_NOT_KIND = {"link", "inet", "inet6", "valid_lft", "altname", "alias", "vf", "prop", "addrgenmode", "netns"}


def counts_link_losses(counter: str) -> bool:
    """Does a counter of :attr:`Link.stats` ("RX dropped", "TX carrier") count what was lost?"""
    return counter.split()[-1] in _LOSSES


def _word_after(rest: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){re.escape(key)}\s+(\S+)", rest)
    return m.group(1) if m else None


def _int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return to_int(v)
    return None


def _netns(cur: dict[str, Any], s: str) -> None:
    nsid = to_int(_word_after(s, "link-netnsid"))
    if nsid is not None:
        cur["link_netnsid"] = nsid
    netns = _word_after(s, "link-netns")
    if netns is not None:
        cur["link_netns"] = netns


def _summary(obj: dict[str, Any]) -> str:
    """A short, faithful excerpt of one JSON link object (the cited text)."""
    keep: dict[str, Any] = {
        k: obj[k] for k in ("ifindex", "ifname", "flags", "mtu", "master", "operstate", "link_netnsid") if k in obj
    }
    info = obj.get("linkinfo")
    if isinstance(info, dict) and "info_kind" in info:
        keep["linkinfo"] = {"info_kind": info["info_kind"]}
    return json.dumps(keep, separators=(",", ":"))


def _parse_text(text: str, first_line: int) -> list[Link]:
    out: list[Link] = []
    cur: dict[str, Any] | None = None
    details = 0  # detail lines seen after the link/ line

    titles: tuple[str, list[str]] | None = None  # the last `ip -s` titles line: direction, columns

    def flush() -> None:
        if cur is not None:
            out.append(Link(**{**cur, "stats": tuple(cur.get("stats", ()))}))

    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if cur is not None and (t := _STATS_TITLES.match(s)) is not None:
            titles = (t.group(1), t.group(2).split())
            continue
        if cur is not None and titles is not None:
            values = s.split()
            if values and all(v.isdigit() for v in values) and len(values) <= len(titles[1]):
                named = zip(titles[1], values, strict=False)
                cur.setdefault("stats", []).extend((f"{titles[0]} {c}", int(v), first_line + i, s) for c, v in named)
            titles = None
            continue
        m = _HEAD.match(s)
        if m and to_int(m.group(1)) is not None:
            flush()
            rest = m.group(5)
            flags = m.group(4).split(",")
            cur = {
                "name": m.group(2),
                "index": to_int(m.group(1)),
                "mtu": to_int(_word_after(rest, "mtu")),
                "kind": None,
                "master": _word_after(rest, "master"),
                "link_netnsid": None,
                "up": "UP" in flags,
                "line": first_line + i,
                "text": s,
                "state": _word_after(rest, "state"),
                "peer": m.group(3),
                "promisc": "PROMISC" in flags,
            }
            _netns(cur, rest)  # `ip -o link` keeps everything on one line
            details = -1
            continue
        if cur is None or not s:
            continue
        if (hp := _BRIDGE_FLAGS.match(s)) is not None:  # `bridge -d link`: the port's flags line
            cur["hairpin"], cur["hairpin_line"] = hp.group(1) == "on", (first_line + i, s)
            continue
        first = s.split()[0]
        if first.startswith("link/"):
            _netns(cur, s)
            details = 0
            continue
        if details < 0 or first in _NOT_KIND or not re.match(r"^[a-z][a-z0-9_]*$", first):
            continue
        details += 1
        if first.endswith("_slave"):
            cur["slave_kind"] = first[: -len("_slave")]
            hairpin = _word_after(s, "hairpin")
            if hairpin in ("on", "off"):
                cur["hairpin"], cur["hairpin_line"] = hairpin == "on", (first_line + i, s)
        elif details == 1 and cur["kind"] is None:
            cur["kind"] = first
            words = s.split()
            if first == "vxlan" and ("udpcsum" in words or "noudpcsum" in words):
                cur["udp_csum"] = "udpcsum" in words
    flush()
    return out


_IFNAME = lazy_re.compile(r'"ifname"\s*:\s*"([^"\\]*)"')


def _parse_json(text: str, first_line: int) -> list[Link]:
    try:
        doc = load_json(text)
    except ValueError:
        return []
    # Where each "ifname" is written, in one pass; objects take them in document order.
    where: dict[str, list[int]] = {}
    lines = text.splitlines()
    for n, ln in enumerate(lines):
        for raw in _IFNAME.findall(ln):
            where.setdefault(raw, []).append(n)
    out: list[Link] = []
    search_from = 0
    for obj in doc if isinstance(doc, list) else []:
        if not isinstance(obj, dict) or not isinstance(obj.get("ifname"), str):
            continue
        name = obj["ifname"]
        at = 0
        found = where.get(name, [])
        i = bisect.bisect_left(found, search_from)
        if i < len(found):
            at = found[i]
            search_from = at + (0 if len(lines) == 1 else 1)
        info_v, flags_v = obj.get("linkinfo"), obj.get("flags")
        info: dict[str, Any] = info_v if isinstance(info_v, dict) else {}
        flags: list[Any] = flags_v if isinstance(flags_v, list) else []
        kind, slave = info.get("info_kind"), info.get("info_slave_kind")
        slave_data, data = info.get("info_slave_data"), info.get("info_data")
        hairpin = slave_data.get("hairpin") if isinstance(slave_data, dict) else None
        csum = data.get("udp_csum") if isinstance(data, dict) and kind == "vxlan" else None
        peer = obj.get("link")
        if peer is None and obj.get("link_index") is not None:
            peer = f"if{obj['link_index']}"
        out.append(
            Link(
                name=name,
                index=_int(obj.get("ifindex")),
                mtu=_int(obj.get("mtu")),
                kind=kind if isinstance(kind, str) else None,
                master=obj["master"] if isinstance(obj.get("master"), str) else None,
                link_netnsid=_int(obj.get("link_netnsid")),
                up="UP" in flags,
                line=first_line + at,
                text=_summary(obj),
                state=obj["operstate"] if isinstance(obj.get("operstate"), str) else None,
                peer=str(peer) if peer is not None else None,
                slave_kind=slave if isinstance(slave, str) else None,
                promisc="PROMISC" in flags,
                hairpin=hairpin if isinstance(hairpin, bool) else None,
                hairpin_line=(first_line + at, f'"ifname":"{name}", "hairpin":{str(hairpin).lower()}')
                if isinstance(hairpin, bool)
                else None,
                udp_csum=csum if isinstance(csum, bool) else None,
            )
        )
    return out


# `bridge -d link show` (iproute2 bridge/link.c): a port's head line as ip prints it, then its flags
_BRIDGE_FLAGS = lazy_re.compile(r"^hairpin (on|off) guard (?:on|off)\b")
# a bridge port's hairpin flag as the kernel's sysfs file holds it (net/bridge/br_sysfs_if.c),
# printed by `grep . FILES` (`PATH:0`) or a shell loop (`PATH = 0`)
HAIRPIN_FILE = lazy_re.compile(
    r"^\s*/sys/(?:devices/virtual|class)/net/(?:(?P<bridge>[^/\s]+)/brif/(?P<port>[^/\s]+)|(?P<own>[^/\s]+)/brport)"
    r"/hairpin_mode\s*(?::|\s=)\s*(?P<value>[01])\s*$",
    re.M,
)


def parse_ip_link(text: str, first_line: int = 1) -> list[Link]:
    """Interfaces from ``ip [-d] link`` / ``ip addr`` text or ``ip -j`` JSON, ``bridge -d link``,
    or ``ifconfig`` (net-tools or busybox); bridge ports' ``hairpin_mode`` files as they are
    printed; other lines are skipped."""
    if text.lstrip().startswith("["):
        return _parse_json(text, first_line)
    if IFCONFIG_HEAD.search(text):
        return _parse_ifconfig(text, first_line)
    if HAIRPIN_FILE.search(text):
        return _hairpin_files(text, first_line)
    return _parse_text(text, first_line)


def _hairpin_files(text: str, first_line: int) -> list[Link]:
    """Each bridge port a ``hairpin_mode`` file names, with its flag (nothing else is known)."""
    out = []
    for i, raw in enumerate(text.splitlines()):
        m = HAIRPIN_FILE.match(raw)
        if m is None:
            continue
        name = m.group("port") or m.group("own")
        on = m.group("value") == "1"
        line = (first_line + i, raw.strip())
        out.append(
            Link(
                name, None, None, None, m.group("bridge"), None, False, line[0], line[1], hairpin=on, hairpin_line=line
            )
        )
    return out


# ifconfig's interface line: net-tools 2.x `eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500`,
# net-tools 1.60 and busybox `eth0      Link encap:Ethernet  HWaddr 00:0C:29:...` (MTU on a later
# line: `UP BROADCAST RUNNING MULTICAST  MTU:1500  Metric:1`). An alias is `eth0:1`.
# IFCONFIG_HEAD: an interface's first line in either form, its name captured (what types a text
# as ifconfig's, and what `ip addr`-style address readers start an interface at).
IFCONFIG_HEAD = lazy_re.compile(r"^([^\s:]+(?::\d+)?)(?:: flags=\d+<|\s+Link encap:)", re.M)
_IFCONFIG_NEW = lazy_re.compile(r"^([^\s:]+(?::\d+)?): flags=\d+<([A-Z0-9_,]*)>\s+mtu (\d+)")
_IFCONFIG_OLD = lazy_re.compile(r"^(\S+)\s+Link encap:")
_IFCONFIG_OLD_FLAGS = lazy_re.compile(r"^\s+((?:[A-Z]+ )*[A-Z]+)\s+MTU:(\d+)")


def _parse_ifconfig(text: str, first_line: int) -> list[Link]:
    out: list[Link] = []
    for i, raw in enumerate(text.splitlines()):
        if m := _IFCONFIG_NEW.match(raw):
            flags = m.group(2).split(",")
            out.append(Link(m.group(1), None, int(m.group(3)), None, None, None, "UP" in flags, first_line + i,
                            raw.strip()))  # fmt: skip
        elif m := _IFCONFIG_OLD.match(raw):
            out.append(Link(m.group(1), None, None, None, None, None, False, first_line + i, raw.strip()))
        elif out and out[-1].mtu is None and (m := _IFCONFIG_OLD_FLAGS.match(raw)):
            last = out[-1]
            out[-1] = dataclasses.replace(last, mtu=int(m.group(2)), up="UP" in m.group(1).split())
        elif out and (m := _IFCONFIG_STATS.match(raw)):
            pairs = [(f"{m.group(1)} {k}", int(v), first_line + i, raw.strip()) for k, v in _IFCONFIG_PAIR.findall(raw)]
            out[-1] = dataclasses.replace(out[-1], stats=out[-1].stats + tuple(pairs))
    return out
