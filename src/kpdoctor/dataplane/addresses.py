"""Addresses as the data plane compares them: integer ranges, parsed once and shared.

Every backend (iptables, IPVS, nftables) and the expected state read the same addresses and
ports again and again (a Service's ClusterIP in every traffic class, each endpoint in several
rules), so they are parsed here, once, from untrusted text that never raises.
"""

from __future__ import annotations

import ipaddress
import socket

from kpdoctor import memo

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# An address match: (IP version, first address, last address) as integers.
Span = tuple[int, int, int]


def parse_span(text: str) -> Span | None:
    """``10.0.0.0/8``, ``1.2.3.4`` or an IPv6 network as an integer range; None if invalid."""
    addr, _, plen = text.partition("/")
    try:
        if ":" in addr:
            n, version, width = int.from_bytes(socket.inet_pton(socket.AF_INET6, addr), "big"), 6, 128
        else:
            n, version, width = int.from_bytes(socket.inet_pton(socket.AF_INET, addr), "big"), 4, 32
        bits = int(plen) if plen else width
    except (OSError, ValueError):
        return None
    if not 0 <= bits <= width:
        return None
    host = (1 << (width - bits)) - 1
    return (version, n & ~host, (n & ~host) | host)


def port_number(text: str) -> int | None:
    """A port as iptables-save prints it (decimal, 0-65535), or None: evidence is untrusted, and
    ``int()`` would take ``-1``, ``٣`` or raise on 5,000 digits."""
    if not text or len(text) > 5 or not (text.isascii() and text.isdigit()):
        return None
    n = int(text)
    return n if n <= 65535 else None


_SPANS: dict[str, Span | None] = memo.table()


def address_span(text: str) -> Span | None:
    """:func:`parse_span`, memoised (a dump names the same networks and Pod addresses again and
    again: ``! -s 10.0.0.0/8`` in every Service chain, each endpoint in ``-s`` and its DNAT)."""
    span = _SPANS.get(text, False)
    if span is False:
        if len(_SPANS) > 100_000:
            _SPANS.clear()
        # an endpoint's "-s 10.1.2.3/32" and its "--to-destination 10.1.2.3:80" share one entry
        if text.endswith("/32") and ":" not in text:
            span = address_span(text[:-3])
        elif text.endswith("/128") and ":" in text:
            span = address_span(text[:-4])
        else:
            span = _SPANS[text] = parse_span(text)
    return span  # type: ignore[return-value]


_HOSTS: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address | None] = memo.table()


def host_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A single address without a prefix length (a Service's or an endpoint's IP), or None;
    memoised, and built from the integer (``ipaddress`` parsing is the slow part for a cluster's
    tens of thousands of addresses)."""
    got = _HOSTS.get(text, False)
    if got is False:
        if len(_HOSTS) > 200_000:
            _HOSTS.clear()
        span = address_span(text) if "/" not in text else None
        if span is None or span[1] != span[2]:
            got = None
        else:
            got = ipaddress.IPv4Address(span[1]) if span[0] == 4 else ipaddress.IPv6Address(span[1])
        _HOSTS[text] = got
    return got  # type: ignore[return-value]


_TEXTS: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, str] = memo.table()


def endpoint_text(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """``10.96.0.10:53`` / ``[fd00::a]:53``: an address and port as kube-proxy's rules name them."""
    return host_port(address_text(addr), port)


def host_port(host: str, port: int | str) -> str:
    """:func:`endpoint_text` of an address already written out (IPv6 in brackets, as Go's
    ``net.JoinHostPort`` and kube-proxy's DNAT write it)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_text(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """``str(addr)``, memoised: every traffic class of a Service names the same few clients and
    its ClusterIP, and ``ipaddress`` formats in Python."""
    got = _TEXTS.get(addr)
    if got is None:
        if len(_TEXTS) > 200_000:
            _TEXTS.clear()
        got = _TEXTS[addr] = str(addr)
    return got


def one_spelling(text: str) -> str:
    """An address's one spelling (``fd00::0a`` and ``[fd00::a]`` are ``fd00::a``), or the text as
    it is when it is no single address (a host name, a range): the key two listings agree on."""
    addr = host_address(text.strip("[]"))
    return address_text(addr) if addr is not None else text
