"""What kpdoctor asks for, it reads: each command a suspected cause names as deciding it (its
``decided_by``), run for real, is read as the evidence it is, alone and pasted under its prompt.

The outputs are made here by the real programs, in a network namespace the test creates and
deletes (a bridge with a veth on it, kube-ipvs0 with a Service address, kube-proxy's nftables
table, a NAT rule). Commands this machine cannot run for real (ipvsadm: no IPVS in this kernel;
kubectl: the lab's control plane tests read its tables; kube-proxy's /proxyMode and arping: the
lab's real kube-proxy and ARP segment) are tested where they can be.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab.netns import Netns, cleanup_stale, lab_available, node_interfaces

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.diagnose import diagnose_paths

pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))

NAT = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE
COMMIT
"""
NFT = """table ip kube-proxy {
    chain filter-output-pre-dnat {
        type filter hook output priority -110; policy accept;
    }
}
"""

# (what a check asks for, argv run in the namespace, a grep the command pipes through, the kind read)
ASKED = [
    ("ip -d link", ["ip", "-d", "link"], None, Kind.IP_LINK),
    ("ip -br addr (on the node that is not Ready)", ["ip", "-br", "addr"], None, Kind.IP_ADDR),
    (
        "sysctl net.ipv4.conf.all.arp_ignore net.ipv4.conf.all.arp_announce",
        ["sysctl", "net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce"],
        None,
        Kind.SYSCTL,
    ),
    ("sysctl -a | grep '\\.rp_filter'", ["sysctl", "-a"], r"\.rp_filter", Kind.SYSCTL),
    (
        "sysctl net.ipv4.ip_local_port_range net.ipv4.ip_local_reserved_ports",
        ["sysctl", "net.ipv4.ip_local_port_range", "net.ipv4.ip_local_reserved_ports"],
        None,
        Kind.SYSCTL,
    ),
    (
        "nstat -az TcpExtIPReversePathFilter",
        ["nstat", "-az", "TcpExtIPReversePathFilter"],
        None,
        Kind.NSTAT,
    ),
    ("uname -r", ["uname", "-r"], None, Kind.UNAME),
    (
        "kubectl -n kube-system exec <kube-proxy pod> -- iptables-restore --version",
        ["iptables-nft-restore", "--version"],
        None,
        Kind.IPTABLES_VERSION,
    ),
    ("conntrack -S", ["conntrack", "-S"], None, Kind.CONNTRACK_STATS),
    ("iptables-save -t nat", ["iptables-legacy-save", "-t", "nat"], None, Kind.IPTABLES_SAVE),
    (
        "iptables-save -t nat | grep -e KUBE-POSTROUTING -e MASQUERADE",
        ["iptables-legacy-save", "-t", "nat"],
        "KUBE-POSTROUTING|MASQUERADE",
        Kind.IPTABLES_SAVE,
    ),
    (
        "nft list table ip kube-proxy (whether filter-output-pre-dnat exists)",
        ["nft", "list", "table", "ip", "kube-proxy"],
        None,
        Kind.NFT_RULESET_TEXT,
    ),
]


@pytest.fixture(scope="module")
def node() -> Iterator[Netns]:
    cleanup_stale()
    with Netns() as ns:
        node_interfaces(ns, "192.168.56.11", ["10.96.0.1"])
        ns.check(["iptables-legacy-restore"], input=NAT)
        ns.check(["nft", "-f", "-"], input=NFT)
        yield ns


def _output(ns: Netns, argv: list[str], grep: str | None) -> str:
    res = ns.run(argv)
    if res.returncode != 0:
        pytest.skip(f"{' '.join(argv)} cannot run here: {res.stderr.strip()[:200]}")
    out = res.stdout
    if grep is not None:
        out = "".join(ln for ln in out.splitlines(keepends=True) if re.search(grep, ln))
    assert out.strip(), argv
    return out


@pytest.mark.parametrize("asked,argv,grep,kind", ASKED, ids=[a[0].split(" (")[0] for a in ASKED])
def test_a_command_kpdoctor_asks_for_is_read(
    node: Netns, tmp_path: Path, asked: str, argv: list[str], grep: str | None, kind: Kind
) -> None:
    out = _output(node, argv, grep)
    command = asked.split(" (")[0]
    for name, text in (("output.txt", out), ("session.txt", f"[root@node01 ~]# {command}\n{out}")):
        (tmp_path / name).write_text(text)
        report, _ = diagnose_paths([tmp_path / name])
        assert [i.kind for i in report.inputs] == [kind.value], (name, text[:500], report.inputs)
        assert not report.problems, (name, [p.message for p in report.problems])
