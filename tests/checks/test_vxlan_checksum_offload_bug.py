"""KP316 vxlan-checksum-offload-bug: NATed VXLAN packets with a wrong outer UDP checksum.

From output made with real tools in namespaces (tests/data/vxlan, by tests/lab/
test_vxlan_checksum_lab.py), and the kernel's own drop message (net/ipv4/udp.c).
"""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import none_of, one, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Severity
from kpdoctor.parse import ethtool, tcpdump

DATA = Path(__file__).parent.parent / "data" / "vxlan"
CAPTURE, RULES, OFFLOAD = (
    DATA / "tcpdump-vv-receiver.txt",
    DATA / "iptables-save-before-fix.txt",
    DATA / "ethtool-k-flannel.1.txt",
)


def test_the_receiver_s_capture_is_read_with_its_checksum_verdicts() -> None:
    facts = Facts(load([CAPTURE, OFFLOAD]))
    assert {a.kind for a in facts.evidence.artifacts} == {Kind.PACKET_CAPTURE, Kind.NIC_FEATURES}
    outer = [(p.sport, p.dport, p.udp_checksum) for p, _ in facts.records(tcpdump.SHAPE)]
    assert outer[0] == (25731, 8472, "bad") and {c for *_, c in outer[1:]} == {"ok"}  # inner packets not read
    feats = {f.name: (f.on, f.fixed, f.iface) for f, _ in facts.records(ethtool.FEATURES)}
    assert feats["tx-checksum-ip-generic"] == (True, False, "flannel.1")
    assert feats["tx-udp_tnl-csum-segmentation"] == (False, True, "flannel.1") and feats["loopback"][1]


def test_bad_vxlan_checksums_in_a_capture_prove_it_and_the_rules_say_why(tmp_path: Path) -> None:
    f = one(run([CAPTURE, RULES, OFFLOAD]), "KP316")
    assert f.cause == "vxlan-checksum-offload-bug" and f.severity == Severity.CRITICAL
    assert f.confidence == Confidence.HIGH and not f.suspected
    assert "1 captured VXLAN packet(s) with a bad UDP checksum" in f.summary
    assert "kube-proxy masquerades its marked packets with --random-fully without clearing the mark" in f.summary
    texts = [e.text for e in f.evidence]
    assert texts[0].startswith("192.168.50.1.25731 > 192.168.50.2.8472: [bad udp cksum 0x168a -> 0x9662!]")
    assert any("MASQUERADE --random-fully" in t for t in texts) and "tx-checksum-ip-generic: on" in texts


def test_the_kernel_s_drop_message_proves_it_too(tmp_path: Path) -> None:
    line = "[ 1423.035722] UDP: bad checksum. From 172.16.9.99:27503 to 172.16.80.252:8472 ulen 75\n"
    f = one(run([write(tmp_path, "dmesg.txt", line)]), "KP316")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.MEDIUM
    other = "[ 1423.035722] UDP: bad checksum. From 172.16.9.99:27503 to 172.16.80.252:53 ulen 75\n"
    none_of(run([write(tmp_path, "dns.txt", other)]), "KP316")  # not a tunnel's port


def test_double_nat_rules_on_a_vxlan_node_are_suspected_and_offload_off_rules_it_out(tmp_path: Path) -> None:
    f = one(run([RULES, OFFLOAD]), "KP316")
    assert f.severity == Severity.WARNING and f.suspected and f.confidence == Confidence.MEDIUM
    assert any("tcpdump" in d for d in f.decided_by)
    off = write(
        tmp_path,
        "ethtool.txt",
        OFFLOAD.read_text().replace("tx-checksum-ip-generic: on", "tx-checksum-ip-generic: off"),
    )
    none_of(run([RULES, off]), "KP316")
    none_of(run([CAPTURE, RULES, off]), "KP316")


def test_flannel_s_masquerade_ahead_of_kube_proxy_s_is_the_same_double_nat(tmp_path: Path) -> None:
    """flannel v0.20.0-v0.20.1: its chain at the top of POSTROUTING masquerades with
    --random-fully before kube-proxy clears its mark (v0.20.2 returns marked packets first)."""
    rules = RULES.read_text()
    fixed = rules.replace(
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -m mark --mark '
        "0x4000/0x4000 -j MASQUERADE --random-fully",
        # kube-proxy writes `-j MARK --xor-mark 0x4000`; iptables-save prints it so (tests/lab)
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n"
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    )
    assert fixed != rules
    none_of(run([write(tmp_path, "fixed.txt", fixed), OFFLOAD]), "KP316")
    written = fixed.replace("--set-xmark 0x4000/0x0", "--xor-mark 0x4000")  # as kube-proxy wrote it (iptables -S)
    none_of(run([write(tmp_path, "written.txt", written), OFFLOAD]), "KP316")
    flannel = fixed.replace(":KUBE-MARK-MASQ", ":FLANNEL-POSTRTG - [0:0]\n:KUBE-MARK-MASQ").replace(
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG\n'
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING\n'
        '-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
    )
    f = one(run([write(tmp_path, "flannel.txt", flannel), OFFLOAD]), "KP316")
    assert "FLANNEL-POSTRTG masquerades with --random-fully before kube-proxy clears its mark" in f.summary
    returned = flannel.replace(
        "-A FLANNEL-POSTRTG -s 10.244.0.0/16",
        '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN\n'
        "-A FLANNEL-POSTRTG -s 10.244.0.0/16",
    )
    none_of(run([write(tmp_path, "returned.txt", returned), OFFLOAD]), "KP316")


def test_devices_without_outer_checksums_on_a_fixed_kernel_rule_the_suspicion_out(tmp_path: Path) -> None:
    """The kernel fix (5.7; 5.4.41 ...) covers VXLAN devices without outer UDP checksums only."""
    links = (DATA / "ip-d-link-vxlan.txt").read_text()
    only_flannel = "\n".join(links.splitlines()[:5]) + "\n"  # lo and flannel.1
    assert "noudpcsum" in only_flannel and " udpcsum" not in only_flannel
    fixed = write(tmp_path, "uname.txt", "Linux node1 5.10.0-28-amd64 #1 SMP Debian 5.10.209-2 x86_64 GNU/Linux\n")
    old = write(tmp_path, "uname-old.txt", "Linux node1 5.4.0 #1 SMP x86_64 GNU/Linux\n")
    noudp = write(tmp_path, "links.txt", only_flannel)
    none_of(run([RULES, OFFLOAD, noudp, fixed]), "KP316")
    assert one(run([RULES, OFFLOAD, noudp, old]), "KP316").suspected  # 5.4.0: before 5.4.41
    both = write(tmp_path, "both.txt", links)  # vxlan.calico keeps its outer checksums
    assert one(run([RULES, OFFLOAD, both, fixed]), "KP316").suspected
