"""tcpdump captures: read as tcpdump prints packets, and what a reply that skipped the Service NAT looks like.

The captures in tests/data/tcpdump are real (a bridged node staged in namespaces, see its
README); the other lines are in the forms tcpdump's printers write (print-ip.c, print-ip6.c,
print-tcp.c, print-domain.c in tcpdump 4.99), and one is a capture posted in the corpus.
"""

from __future__ import annotations

from pathlib import Path

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.checks.node.forwarding import untranslated_replies
from kpdoctor.facts import Facts
from kpdoctor.model import Cite
from kpdoctor.parse import tcpdump
from kpdoctor.parse.tcpdump import CapturedPacket, parse_tcpdump

DATA = Path(__file__).parent / "data" / "tcpdump"
POSTED = Path(__file__).parent / "realworld" / "fresh-5" / "engineerbetter-kthw-br-netfilter" / "tcpdump.txt"


def _cited(text: str) -> list[tuple[CapturedPacket, Cite]]:
    return [(p, Cite("capture", p.line, p.text)) for p in parse_tcpdump(text)]


def test_a_real_capture_is_read_packet_by_packet() -> None:
    packets = parse_tcpdump((DATA / "bridge-nf-call-iptables-0.txt").read_text())
    assert len(packets) == 16
    first = packets[0]
    assert (first.iface, first.family, first.source, first.destination) == (
        "veth0",
        4,
        "10.200.2.63:40350",
        "10.32.0.102:80",
    )
    assert (first.proto, first.flags, first.seq, first.ack, first.line) == ("tcp", "S", 1889227187, None, 4)
    synack = packets[4]
    assert (synack.source, synack.flags, synack.ack) == ("10.200.2.65:80", "S.", 1889227188)
    assert [p.flags for p in packets].count("R") == 4


def test_a_reply_from_the_backend_s_own_address_that_the_client_resets_is_untranslated() -> None:
    found = untranslated_replies(_cited((DATA / "bridge-nf-call-iptables-0.txt").read_text()))
    assert found, "the SYN-ACK from 10.200.2.65 and the client's RST"
    said, cites = found[0]
    assert "10.32.0.102:80 was answered from 10.200.2.65:80" in said
    assert [c.line for c in cites] == [4, 8, 10]  # the SYN, the untranslated SYN-ACK, the RST


def test_a_capture_with_the_translated_reply_shows_nothing_wrong() -> None:
    assert untranslated_replies(_cited((DATA / "bridge-nf-call-iptables-1.txt").read_text())) == []


def test_a_capture_on_the_backend_s_side_alone_shows_nothing_wrong() -> None:
    """Only the DNATed packets (the SYN to the backend and its SYN-ACK): nothing says where the
    client sent it first."""
    text = (DATA / "bridge-nf-call-iptables-1.txt").read_text()
    backend_side = "\n".join(ln for ln in text.splitlines() if " veth1 " in ln)
    assert parse_tcpdump(backend_side) and untranslated_replies(_cited(backend_side)) == []


def test_the_posted_capture_reads_the_same() -> None:
    found = untranslated_replies(_cited(POSTED.read_text()))
    assert found and "10.32.0.102:80 was answered from 10.200.2.65:80" in found[0][0]


def test_every_form_tcpdump_prints() -> None:
    lines = {
        # -tttt, IPv6, -n without the second n (a port's name)
        "2024-05-01 10:00:00.000001 IP6 fd00::1.443 > fd00::2.40000: Flags [S.], seq 7, ack 9, win 1, length 0": (
            6,
            "[fd00::1]:443",
            "[fd00::2]:40000",
            "tcp",
            "S.",
        ),
        "1714557600.000001 IP 10.0.0.1.http > 10.0.0.2.40000: Flags [R.], seq 0, ack 1, win 0, length 0": (
            4,
            "10.0.0.1:80",
            "10.0.0.2:40000",
            "tcp",
            "R.",
        ),
        "10:00:00.000001 IP 10.0.0.2 > 10.0.0.1: ICMP echo request, id 7, seq 1, length 64": (
            4,
            "10.0.0.2",
            "10.0.0.1",
            "icmp",
            None,
        ),
        "10:00:00.000001 eth0  In  IP 10.244.1.7.41234 > 10.96.0.10.53: 4321+ A? kubernetes.default. (36)": (
            4,
            "10.244.1.7:41234",
            "10.96.0.10:53",
            "udp",
            None,
        ),
        "10:00:00.000001 IP 10.0.0.2.5353 > 10.0.0.1.9999: UDP, length 12": (
            4,
            "10.0.0.2:5353",
            "10.0.0.1:9999",
            "udp",
            None,
        ),
    }
    for line, (family, src, dst, proto, flags) in lines.items():
        (p,) = parse_tcpdump(line)
        assert (p.family, p.source, p.destination, p.proto, p.flags) == (family, src, dst, proto, flags), line
    # -v: the IPv4 header on its own line, the packet indented on the next; IPv6's on one line
    verbose = (
        "10:00:00.000001 IP (tos 0x0, ttl 64, id 0, offset 0, flags [DF], proto TCP (6), length 60)\n"
        "    10.0.0.1.80 > 10.0.0.2.40000: Flags [S.], cksum 0x1c46 (correct), seq 5, ack 6, win 65160, length 0\n"
        "10:00:00.000002 IP6 (flowlabel 0x1, hlim 64, next-header TCP (6) payload length: 40) "
        "fd00::1.22 > fd00::2.40000: Flags [R.], seq 0, ack 9, win 0, length 0\n"
    )
    a, b = parse_tcpdump(verbose)
    assert (a.line, a.time, a.source, a.seq, a.ack) == (2, "10:00:00.000001", "10.0.0.1:80", 5, 6)
    assert (b.line, b.family, b.source, b.flags) == (3, 6, "[fd00::1]:22", "R.")
    # host names (a capture without -n) are not addresses
    assert parse_tcpdump("10:00:00.000001 IP web-1.default.http > client.40000: Flags [S.], seq 1, ack 2") == []


def test_a_reply_from_another_subnet_is_not_a_bridge_s() -> None:
    """The same exchange between a client outside and a Pod (a NodePort whose reply was not
    masqueraded) is not what a bridge without netfilter does: not said here."""
    text = (DATA / "bridge-nf-call-iptables-0.txt").read_text().replace("10.200.2.63", "192.168.7.20")
    assert parse_tcpdump(text) and untranslated_replies(_cited(text)) == []


def test_a_dns_answer_from_the_backend_with_none_from_the_service_is_untranslated() -> None:
    capture = (
        "10:00:00.000001 IP 10.244.1.7.41234 > 10.96.0.10.53: 4321+ A? kubernetes.default.svc.cluster.local. (54)\n"
        "10:00:00.000002 IP 10.244.1.7.41234 > 10.244.1.9.53: 4321+ A? kubernetes.default.svc.cluster.local. (54)\n"
        "10:00:00.000300 IP 10.244.1.9.53 > 10.244.1.7.41234: 4321* 1/0/0 A 10.96.0.1 (108)\n"
    )
    (found,) = untranslated_replies(_cited(capture))
    assert "DNS query to 10.96.0.10:53 was answered from 10.244.1.9:53" in found[0]
    translated = capture + "10:00:00.000301 IP 10.96.0.10.53 > 10.244.1.7.41234: 4321* 1/0/0 A 10.96.0.1 (108)\n"
    assert untranslated_replies(_cited(translated)) == []


def test_a_capture_is_typed_as_one_alone_or_pasted_among_other_output(tmp_path: Path) -> None:
    capture = (DATA / "bridge-nf-call-iptables-0.txt").read_text()
    alone = tmp_path / "capture.txt"
    alone.write_text(capture)
    pasted = tmp_path / "issue.md"
    pasted.write_text(
        "The curl just hangs. On the node:\n\n```\nroot@node-1:~# tcpdump -i any -nn port 80\n"
        + capture
        + "```\n\nand\n\n```\n$ sysctl net.ipv4.ip_forward\nnet.ipv4.ip_forward = 1\n```\n"
    )
    for path in (alone, pasted):
        facts = Facts(load([path]))
        assert facts.of(Kind.PACKET_CAPTURE), [(a.name, a.kind) for a in facts.evidence.artifacts]
        assert len(facts.records(tcpdump.SHAPE)) == 16
        assert untranslated_replies(facts.records(tcpdump.SHAPE))
