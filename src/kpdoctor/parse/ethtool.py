"""``ethtool -S`` output: a network driver's own counters; ``ethtool -k`` output: an interface's offloads.

ethtool prints them as ``NIC statistics:`` and then one ``     NAME: VALUE`` line per counter
(ethtool.c's ``do_gnicstats``: five spaces, the driver's name for it, an unsigned value; every
release to 6.x). The names are the driver's (``rx_missed_errors``, ``rx_no_buffer_count``,
``rx_queue_0_drops``, ``tx_carrier_errors`` ...): there is no common list, so what counts losses is
told by the words drivers use for them (:func:`counts_losses`). A driver without statistics
prints ``no stats available`` instead.

``ethtool -k IFACE`` prints ``Features for IFACE:`` and then one ``name: on|off`` line per feature
(ethtool.c's ``dump_features``: a feature group at the line's start, the features it holds under it
indented by a tab; ``[fixed]`` when the driver cannot change it, ``[requested on]`` when the kernel
refused a request), as ``ethtool -K`` does after ``Actual changes:``. Nothing here raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape

HEADER = lazy_re.compile(r"^\s*NIC statistics:\s*$")
# a counter line (under its header; indented, as ethtool prints it): a driver's name (letters, digits, _ . - [ ]; never
# a YAML key's camelCase alone: "rx", "tx" or "_" in it), a colon, an unsigned number
COUNTER = lazy_re.compile(r"^[ \t]*(?=[\w.\-\[\]]*(?:rx|tx|_))([\w.\-\[\]]+):[ \t]+(\d{1,20})[ \t]*$", re.I)
# any counter line, read under its header ("multicast", "collisions" too)
_LISTED = lazy_re.compile(r"^[ \t]{2,}([\w.\-\[\]]+):[ \t]+(\d{1,20})[ \t]*$")
# the words drivers give the counters of what they lost (dropped, missed, discarded, errors,
# no buffer, fifo or ring overruns, timeouts)
_LOSS = lazy_re.compile(r"drop|miss|discard|err|no_?buf|fifo|overrun|over_|timeout|fail|crc", re.I)


def counts_losses(name: str) -> bool:
    """Does a driver's counter of this name count what it lost?"""
    return bool(_LOSS.search(name))


@dataclass(frozen=True, slots=True)
class NicCounter:
    """One counter of one ``ethtool -S`` listing."""

    line: int
    text: str
    name: str
    value: int
    listing: int  # which listing of the text it is in (0, 1, ...): two are two snapshots


def parse_ethtool_stats(text: str, first_line: int = 1) -> list[NicCounter]:
    """Every counter under a ``NIC statistics:`` header, in order; in a text without the header
    (``ethtool -S eth0 | grep drop``: typed by its command), every counter line, as one listing."""
    out: list[NicCounter] = []
    lines = text.splitlines()
    headless = not any(HEADER.match(raw) for raw in lines)
    listing, under = (0, True) if headless else (-1, False)
    for i, raw in enumerate(lines):
        if headless:
            m = _LISTED.match(raw) or COUNTER.match(raw)
            if m is not None:
                out.append(NicCounter(first_line + i, raw.strip(), m.group(1), int(m.group(2)), 0))
            continue
        if HEADER.match(raw):
            listing, under = listing + 1, True
            continue
        m = _LISTED.match(raw)
        if m is None:
            under = under and raw.strip() != "" and raw[:1] in (" ", "\t")
            continue
        if under:
            out.append(NicCounter(first_line + i, raw.strip(), m.group(1), int(m.group(2)), listing))
    return out


SHAPE = EvidenceShape(
    Kind.NIC_STATS,
    "ethtool-S",
    HEADER,
    parse_ethtool_stats,
    around=COUNTER,
    # ethtool 6.1 -S of a veth (Debian 12, in a network namespace)
    example=(
        "NIC statistics:\n"
        "     peer_ifindex: 2\n"
        "     rx_queue_0_xdp_packets: 0\n"
        "     rx_queue_0_xdp_bytes: 0\n"
        "     rx_queue_0_drops: 0\n"
        "     rx_queue_0_xdp_redirect: 0\n"
        "     rx_queue_0_xdp_drops: 0\n"
        "     rx_queue_0_xdp_tx: 0\n"
        "     rx_queue_0_xdp_tx_errors: 0\n"
        "     tx_queue_0_xdp_xmit: 0\n"
        "     tx_queue_0_xdp_xmit_errors: 0\n"
    ),
)


FEATURES_HEADER = lazy_re.compile(r"^\s*Features for (?P<iface>\S+):\s*$")
# a feature line: ethtool's names are lower-case words joined by "-" (one "_" in the tunnel ones:
# "tx-udp_tnl-segmentation"), then on/off and what ethtool says of its state
FEATURE = lazy_re.compile(
    r"^[ \t]*(?P<name>[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*): (?P<state>on|off)"
    r"(?: \[(?P<note>fixed|requested (?:on|off))\])?[ \t]*$"
)
# the lines only ethtool -k prints: its header, and the checksum and offload features' names
_FEATURE_LINE = lazy_re.compile(
    r"^(?:Features for \S+:\s*$|(?:tx|rx)-[a-z0-9_-]+: (?:on|off)\b|"
    r"(?:scatter-gather|tcp-segmentation-offload|generic-(?:segmentation|receive)-offload|large-receive-offload|"
    r"udp-fragmentation-offload): (?:on|off)\b)"
)


@dataclass(frozen=True, slots=True)
class Feature:
    """One feature of one ``ethtool -k`` listing."""

    line: int
    text: str
    iface: str | None  # from the listing's header (None: a grep'd listing without it)
    name: str
    on: bool
    fixed: bool  # the driver cannot change it


def parse_features(text: str, first_line: int = 1) -> list[Feature]:
    """Every feature line, with the interface of the header above it."""
    out: list[Feature] = []
    iface: str | None = None
    for i, raw in enumerate(text.splitlines()):
        h = FEATURES_HEADER.match(raw)
        if h is not None:
            iface = h.group("iface")
            continue
        m = FEATURE.match(raw)
        if m is not None:
            out.append(
                Feature(
                    first_line + i,
                    raw.strip(),
                    iface,
                    m.group("name"),
                    m.group("state") == "on",
                    m.group("note") == "fixed",
                )
            )
    return out


FEATURES = EvidenceShape(
    Kind.NIC_FEATURES,
    "ethtool-k",
    _FEATURE_LINE,
    parse_features,
    around=FEATURE,
    # ethtool 6.1 -k of a VXLAN device as flannel creates it (ip link add flannel.1 type vxlan id 1
    # dstport 8472 nolearning, in a network namespace), its first lines
    example=(
        "Features for flannel.1:\n"
        "rx-checksumming: on\n"
        "tx-checksumming: on\n"
        "\ttx-checksum-ipv4: off [fixed]\n"
        "\ttx-checksum-ip-generic: on\n"
        "\ttx-checksum-ipv6: off [fixed]\n"
        "\ttx-checksum-fcoe-crc: off [fixed]\n"
        "\ttx-checksum-sctp: off [fixed]\n"
        "scatter-gather: on\n"
        "\ttx-scatter-gather: on\n"
        "\ttx-scatter-gather-fraglist: on\n"
        "tcp-segmentation-offload: on\n"
        "\ttx-tcp-segmentation: on\n"
        "generic-segmentation-offload: on\n"
        "generic-receive-offload: on\n"
        "large-receive-offload: off [fixed]\n"
        "tx-udp_tnl-segmentation: off [fixed]\n"
        "tx-udp_tnl-csum-segmentation: off [fixed]\n"
    ),
)
