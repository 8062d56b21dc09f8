"""Seed 004's node checks from evidence in the formats users have: loose files, transcripts, bundles.

Counter formats are those captured on this machine's kernel (tests/data/node/, and the lab test
tests/lab/test_node_counters.py for live namespaces); the values are seed 004's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from conftest import one, write

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Report, Severity

CT_ROW = "cpu={cpu}   \tfound=0 invalid=3 insert=0 insert_failed={f} drop={d} early_drop={e} error=0 search_restart=2 clash_resolve=4 chaintoolong=0 \n"
PROC_HEADER = (
    "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop "
    "icmp_error  expect_new expect_create expect_delete search_restart\n"
)


def conntrack_s(insert_failed: int, drop: int = 0, early_drop: int = 0) -> str:
    half = insert_failed // 2
    return CT_ROW.format(cpu=0, f=half, d=drop, e=early_drop) + CT_ROW.format(cpu=1, f=insert_failed - half, d=0, e=0)


def bundle(tmp: Path, files: dict[str, str], times: dict[str, str] | None = None) -> Path:
    root = tmp / "bundle"
    arts = []
    for rel, text in files.items():
        write(root, rel, text)
        snap = rel.split("/")[2] if rel.startswith("node/counters/") else None
        entry: dict[str, object] = {"path": rel, "exit_code": 0}
        if snap and times:
            entry["collected_at"] = times[snap]
        arts.append(entry)
    (root / "manifest.json").write_text(json.dumps({"node": "node-1", "artifacts": arts}))
    return root


def run(paths: list[Path]) -> Report:
    return diagnose_paths(paths, min_severity=Severity.INFO)[0]


def codes(report: Report) -> set[str]:
    return {f.code for f in report.findings} | {g.code for f in report.findings for g in f.folded}


TIMES = {"T0": "2026-11-21T10:00:00Z", "T1": "2026-11-21T10:00:10Z"}


# -- conntrack ----------------------------------------------------------------------------------
def test_insert_failed_growing_between_snapshots_is_the_race(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/conntrack-stats.txt": conntrack_s(1200),
            "node/counters/T1/conntrack-stats.txt": conntrack_s(1450, drop=30),
            "node/uname.txt": "Linux node-1 4.15.0-1050-aws #52-Ubuntu SMP x86_64 GNU/Linux\n",
            "node/iptables-nft-save.txt": "*nat\n:POSTROUTING ACCEPT [0:0]\n"
            '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j MASQUERADE\nCOMMIT\n',
        },
        TIMES,
    )
    f = one(run([root]), "KP300")
    assert f.severity == Severity.WARNING and f.ongoing
    assert "conntrack.insert_failed grew by 250 in 10.0 s (25.00/s) (1200 -> 1450)" in f.summary
    assert f.evidence[0].artifact == "node/counters/T0/conntrack-stats.txt"
    assert any("Upgrade the kernel (4.15.0-1050-aws) to 5.6" in x for x in f.fix)
    assert any("--random-fully" in x for x in f.fix)
    assert any(c.text.endswith("-j MASQUERADE") for c in f.evidence)


def test_a_single_conntrack_snapshot_is_info_since_boot(tmp_path: Path) -> None:
    p = write(tmp_path, "ct.txt", conntrack_s(37))
    f = one(run([p]), "KP300")
    assert f.severity == Severity.INFO
    assert "total since boot" in f.summary


def test_unanswered_dns_in_the_table_corroborates_one_snapshot(tmp_path: Path) -> None:
    ct = write(tmp_path, "ct.txt", conntrack_s(37))
    table = write(
        tmp_path,
        "ct-list.txt",
        "udp      17 21 src=10.244.1.7 dst=10.96.0.10 sport=44512 dport=53 [UNREPLIED] src=10.244.2.9 dst=10.244.1.7 "
        "sport=53 dport=44512 mark=0 use=1\n"
        "tcp      6 86398 ESTABLISHED src=10.244.1.7 dst=10.96.0.1 sport=40000 dport=443 src=192.168.0.10 "
        "dst=10.244.1.7 sport=6443 dport=40000 [ASSURED] mark=0 use=1\n",
    )
    f = one(run([ct, table]), "KP300")
    assert f.severity == Severity.WARNING
    assert "1 DNS query in the conntrack table never got an answer" in f.summary
    assert f.evidence[-1].line == 1


def test_two_conntrack_outputs_in_a_transcript_pair_by_date(tmp_path: Path) -> None:
    text = (
        "$ date\nSat Nov 21 10:00:00 UTC 2026\n$ conntrack -S\n"
        + conntrack_s(10)
        + "$ date\nSat Nov 21 10:00:05 UTC 2026\n$ conntrack -S\n"
        + conntrack_s(60)
    )
    f = one(run([write(tmp_path, "session.txt", text)]), "KP300")
    assert f.severity == Severity.WARNING
    assert "grew by 50 in 5.0 s" in f.summary
    assert f.evidence[0].line == 4 and f.evidence[1].line == 9  # lines of the user's file


def test_unchanged_counters_are_quiet(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/nf_conntrack-stat.txt": PROC_HEADER + " ".join(["00000010"] * 17) + "\n",
            "node/counters/T1/nf_conntrack-stat.txt": PROC_HEADER + " ".join(["00000010"] * 17) + "\n",
        },
        TIMES,
    )
    assert not codes(run([root])) & {"KP300", "KP301"}


def test_table_full_from_dmesg_and_a_nearly_full_table(tmp_path: Path) -> None:
    dmesg = write(
        tmp_path,
        "dmesg.txt",
        "[ 8123.114160] nf_conntrack: nf_conntrack: table full, dropping packet\n"
        "[ 8123.114800] net_ratelimit: 187 callbacks suppressed\n"
        "[ 8128.201233] nf_conntrack: nf_conntrack: table full, dropping packet\n",
    )
    sysctl = write(
        tmp_path, "sysctl.txt", "net.netfilter.nf_conntrack_count = 262000\nnet.netfilter.nf_conntrack_max = 262144\n"
    )
    f = one(run([dmesg, sysctl]), "KP301")
    assert f.severity == Severity.CRITICAL
    assert "262000 of 262144 entries in use (100%)" in f.summary
    assert "2 time(s)" in f.summary
    assert f.evidence[0].line == 1 and f.evidence[1].line == 3
    assert any("nf_conntrack_max=524288" in x for x in f.fix)
    # the log line alone: it happened, when is unknown
    alone = one(run([dmesg]), "KP301")
    assert alone.severity == Severity.WARNING


def test_journalctl_table_full_and_old_kernel_spelling(tmp_path: Path) -> None:
    j = write(
        tmp_path,
        "kern.txt",
        "Nov 21 09:58:01 node-1 kernel: nf_conntrack: table full, dropping packet.\n"
        "Nov 21 09:58:02 node-1 kernel: eth0: link up\n",
    )
    assert one(run([j]), "KP301").severity == Severity.WARNING


def test_proc_sys_values_in_a_transcript(tmp_path: Path) -> None:
    text = (
        "[root@node-1 ~]# cat /proc/sys/net/netfilter/nf_conntrack_count\n131000\n"
        "[root@node-1 ~]# sysctl -n net.netfilter.nf_conntrack_max\n131072\n"
    )
    f = one(run([write(tmp_path, "t.txt", text)]), "KP301")
    assert f.severity == Severity.CRITICAL
    assert "131000 of 131072 entries in use" in f.summary
    assert [c.line for c in f.evidence] == [2, 4]


def test_a_half_full_table_is_quiet(tmp_path: Path) -> None:
    s = write(
        tmp_path, "sysctl.txt", "net.netfilter.nf_conntrack_count = 1000\nnet.netfilter.nf_conntrack_max = 262144\n"
    )
    assert "KP301" not in codes(run([s]))


# -- ports --------------------------------------------------------------------------------------
SS_9100 = """\
State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess
LISTEN 0      4096               *:9100            *:*    users:(("node_exporter",pid=1234,fd=3))
LISTEN 0      4096       127.0.0.1:10248      0.0.0.0:*    users:(("kubelet",pid=900,fd=20))
"""


def test_seed_listener_inside_a_widened_ephemeral_range(tmp_path: Path) -> None:
    s = write(
        tmp_path, "sysctl.txt", "net.ipv4.ip_local_port_range = 1024\t65535\nnet.ipv4.ip_local_reserved_ports = \n"
    )
    ss = write(tmp_path, "ss.txt", SS_9100)
    f = one(run([s, ss]), "KP302")
    assert f.severity == Severity.WARNING
    assert "tcp 9100 listened on by node_exporter (pid 1234)" in f.summary
    assert "10248" not in f.summary  # loopback-only listener on a port kubelet binds
    assert any("ip_local_reserved_ports=9100" in x for x in f.fix)


def test_reserved_or_default_range_is_quiet_for_9100(tmp_path: Path) -> None:
    ss = write(tmp_path, "ss.txt", SS_9100)
    reserved = write(
        tmp_path,
        "a.txt",
        "net.ipv4.ip_local_port_range = 1024 65535\nnet.ipv4.ip_local_reserved_ports = 9100,30000-32767\n",
    )
    assert "KP302" not in codes(run([reserved, ss]))
    default = write(
        tmp_path, "b.txt", "net.ipv4.ip_local_port_range = 32768 60999\nnet.ipv4.ip_local_reserved_ports =\n"
    )
    assert "KP302" not in codes(run([default, ss]))


def test_nodeport_in_range_with_kube_proxy_bind_error_is_critical(tmp_path: Path) -> None:
    s = write(tmp_path, "sysctl.txt", "net.ipv4.ip_local_port_range = 10000 65000\n")
    svc = write(
        tmp_path,
        "svc.json",
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {
                    "type": "NodePort",
                    "clusterIP": "10.96.0.10",
                    "selector": {"app": "web"},
                    "ports": [{"port": 80, "nodePort": 31234}],
                },
            }
        ),
    )
    log = write(
        tmp_path,
        "kube-proxy.log",
        'E1121 10:00:00.000000       1 proxier.go:1640] "can\'t open port, skipping it" '
        'err="listen tcp4 :31234: bind: address already in use" port="\\"nodePort for shop/web\\" (:31234/tcp4)"\n',
    )
    f = one(run([s, svc, log]), "KP302")
    assert f.severity == Severity.CRITICAL
    assert "NodePort 31234 of Service Service/shop/web" in f.summary
    assert any("30000-32767" in x for x in f.fix)


def test_snat_entries_using_most_ports_to_one_destination(tmp_path: Path) -> None:
    lines = [
        f"tcp      6 110 TIME_WAIT src=10.244.1.{i % 200 + 2} dst=52.1.2.3 sport={20000 + i} dport=443 "
        f"src=52.1.2.3 dst=192.168.0.2 sport=443 dport={1024 + i} [ASSURED] mark=0 use=1"
        for i in range(40000)
    ]
    lines.append("conntrack v1.4.7 (conntrack-tools): 40000 flow entries have been shown.")
    f = one(run([write(tmp_path, "ct-list.txt", "\n".join(lines) + "\n")]), "KP306")
    assert f.severity == Severity.WARNING
    assert "40000 SNATed tcp connections from 192.168.0.2 to 52.1.2.3:443 hold 62%" in f.summary


# -- sockets ------------------------------------------------------------------------------------
NETSTAT = """\
Udp:
    1000 packets received
    3 packets to unknown port received
    {rcv} packet receive errors
    900 packets sent
    {rcv} receive buffer errors
    0 send buffer errors
TcpExt:
    {ovf} times the listen queue of a socket overflowed
    {ovf} SYNs to LISTEN sockets dropped
"""


def test_listen_and_buffer_overflows_growing(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/netstat-s.txt": NETSTAT.format(rcv=100, ovf=5000),
            "node/counters/T1/netstat-s.txt": NETSTAT.format(rcv=180, ovf=5600),
            "node/sysctl.txt": "net.core.somaxconn = 128\nnet.ipv4.tcp_max_syn_backlog = 512\nnet.core.rmem_max = 212992\n",
        },
        TIMES,
    )
    rep = run([root])
    q = one(rep, "KP304")
    assert q.severity == Severity.WARNING
    assert "TcpExtListenOverflows grew by 600" in q.summary
    assert any("net.core.somaxconn=32768 (now 128)" in x for x in q.fix)
    b = one(rep, "KP303")
    assert "UdpRcvbufErrors grew by 80" in b.summary
    assert any("net.core.rmem_max=26214400" in x for x in b.fix)


def test_totals_from_one_netstat_are_info(tmp_path: Path) -> None:
    # 2 of 1,002 datagrams (0.2%): small totals since boot stay info
    rep = run([write(tmp_path, "ns.txt", NETSTAT.format(rcv=2, ovf=3))])
    assert one(rep, "KP304").severity == Severity.INFO
    assert one(rep, "KP303").severity == Severity.INFO


def test_a_listener_at_its_backlog_is_a_warning_on_its_own(tmp_path: Path) -> None:
    ss = write(
        tmp_path,
        "ss.txt",
        "State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess\n"
        'LISTEN 129    128          0.0.0.0:8080      0.0.0.0:*    users:(("java",pid=4242,fd=99))\n'
        'LISTEN 0      128          0.0.0.0:22        0.0.0.0:*    users:(("sshd",pid=1,fd=3))\n',
    )
    f = one(run([ss]), "KP304")
    assert f.severity == Severity.WARNING
    assert "listener 0.0.0.0:8080 (java, pid 4242) has 129 connections waiting for a backlog of 128" in f.summary
    assert f.evidence[0].line == 2


# -- MTU ----------------------------------------------------------------------------------------
def _link(idx: int, name: str, mtu: int, kind: str | None, **extra: object) -> dict[str, object]:
    d: dict[str, object] = {
        "ifindex": idx,
        "ifname": name,
        "flags": ["BROADCAST", "UP", "LOWER_UP"],
        "mtu": mtu,
        "operstate": "UP",
    }
    if kind:
        d["linkinfo"] = {"info_kind": kind}
    d.update(extra)
    return d


def test_vxlan_tunnel_as_large_as_the_uplink(tmp_path: Path) -> None:
    links = [
        _link(1, "lo", 65536, None, flags=["LOOPBACK", "UP"], operstate="UNKNOWN"),
        _link(2, "eth0", 1500, None),
        _link(3, "flannel.1", 1500, "vxlan"),
        _link(4, "cni0", 1500, "bridge"),
        _link(5, "veth1234", 1500, "veth", master="cni0", link_netnsid=0),
    ]
    f = one(run([write(tmp_path, "links.json", json.dumps(links))]), "KP305")
    assert f.severity == Severity.WARNING
    assert "tunnel flannel.1 (vxlan) has MTU 1500, but eth0 (1500) carries at most 1450" in f.summary
    assert "Pod interface(s) have an MTU above the 1500" not in f.summary
    assert any("1450" in x for x in f.fix)


def test_consistent_overlay_mtus_are_quiet(tmp_path: Path) -> None:
    links = [
        _link(2, "eth0", 1500, None),
        _link(3, "flannel.1", 1450, "vxlan"),
        _link(5, "veth1234", 1450, "veth", master="cni0", link_netnsid=0),
    ]
    assert "KP305" not in codes(run([write(tmp_path, "links.json", json.dumps(links))]))


def test_pod_interfaces_above_the_uplink_on_a_routed_cni(tmp_path: Path) -> None:
    text = (
        "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\n"
        "    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n"
        "2: ens5: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\n"
        "    link/ether 02:aa:bb:cc:dd:ee brd ff:ff:ff:ff:ff:ff\n"
        "7: cali1a2b3c4d5e6@if3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9001 qdisc noqueue state UP mode DEFAULT "
        "group default\n"
        "    link/ether ee:ee:ee:ee:ee:ee brd ff:ff:ff:ff:ff:ff link-netnsid 0\n"
    )
    f = one(run([write(tmp_path, "iplink.txt", text)]), "KP305")
    assert "1 Pod interface(s) have an MTU above the 1500 of the uplink ens5: cali1a2b3c4d5e6 (9001)" in f.summary
    assert f.evidence[0].line == 5


# -- IPVS, forwarding ---------------------------------------------------------------------------
IPVS_CONFIG = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"


def test_conn_reuse_mode_zero_on_an_old_kernel(tmp_path: Path) -> None:
    s = write(
        tmp_path,
        "sysctl.txt",
        "net.ipv4.vs.conn_reuse_mode = 0\nnet.ipv4.vs.conntrack = 1\nnet.ipv4.vs.expire_nodest_conn = 1\n",
    )
    u = write(tmp_path, "uname.txt", "Linux node-1 5.4.0-150-generic #167-Ubuntu SMP x86_64 GNU/Linux\n")
    cfg = write(tmp_path, "config.yaml", IPVS_CONFIG)
    f = one(run([s, u, cfg]), "KP307")
    assert f.severity == Severity.WARNING
    assert "terminated Pod" in f.summary
    assert any("Upgrade the kernel (5.4.0-150-generic) to 5.9" in x for x in f.fix)


def test_conn_reuse_mode_zero_on_a_fixed_kernel_with_old_kube_proxy(tmp_path: Path) -> None:
    s = write(tmp_path, "sysctl.txt", "net.ipv4.vs.conn_reuse_mode = 0\nnet.ipv4.vs.conntrack = 1\n")
    u = write(tmp_path, "uname.txt", "5.10.0-28-amd64\n")
    v = write(tmp_path, "version.txt", "Kubernetes v1.20.15\n")
    cfg = write(tmp_path, "config.yaml", IPVS_CONFIG)
    f = one(run([s, u, v, cfg]), "KP307")
    assert any(x.startswith("sysctl -w net.ipv4.vs.conn_reuse_mode=1") for x in f.fix)
    assert any("Upgrade kube-proxy (v1.20.15) to 1.22" in x for x in f.fix)


def test_one_second_delay_on_old_kernels_and_quiet_on_new(tmp_path: Path) -> None:
    s = write(tmp_path, "sysctl.txt", "net.ipv4.vs.conn_reuse_mode = 1\nnet.ipv4.vs.conntrack = 1\n")
    cfg = write(tmp_path, "config.yaml", IPVS_CONFIG)
    old = write(tmp_path, "u1.txt", "4.19.0-26-amd64\n")
    assert "1 s delay" in one(run([s, cfg, old]), "KP307").summary
    new = write(tmp_path, "u2.txt", "6.1.0-18-amd64\n")
    assert "KP307" not in codes(run([s, cfg, new]))


# kube-router#544 as posted: the ipvsadm package of a CentOS 7 node, then a NodePort's real
# server with its inactive connections piling up under a load test
RPM_EL7 = "$ rpm -q ipvsadm\nipvsadm-1.27-7.el7.x86_64\n\n"
BUSY_RS = (
    "$ ipvsadm -ln | grep -A1 30530\nTCP  10.200.1.146:30530 rr\n"
    "  -> 172.32.9.68:80               Masq    1      0          {n}\n"
)


def test_busy_real_server_on_an_old_kernel_without_the_sysctls(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "t.txt", RPM_EL7 + BUSY_RS.format(n=757))]), "KP307")
    assert f.severity == Severity.WARNING and f.confidence.label == "low"
    assert "RHEL/CentOS 7" in f.summary and "757 inactive" in f.summary
    assert [c.line for c in f.evidence] == [6, 2]
    # quiet: few inactive connections; a 5.9+ kernel; the sysctls given (the other branches decide)
    assert "KP307" not in codes(run([write(tmp_path, "a.txt", RPM_EL7 + BUSY_RS.format(n=12))]))
    new = RPM_EL7.replace("$ rpm -q ipvsadm\nipvsadm-1.27-7.el7.x86_64", "$ uname -r\n5.14.0-362.8.1.el9_3.x86_64")
    assert "KP307" not in codes(run([write(tmp_path, "b.txt", new + BUSY_RS.format(n=757))]))
    ctl = "$ sysctl net.ipv4.vs.conntrack\nnet.ipv4.vs.conntrack = 0\n"
    assert "KP307" not in codes(run([write(tmp_path, "c.txt", RPM_EL7 + BUSY_RS.format(n=757) + ctl)]))


def test_forwarding_off(tmp_path: Path) -> None:
    s = write(tmp_path, "s.txt", "net.ipv4.ip_forward = 0\nnet.ipv6.conf.all.forwarding = 0\n")
    assert one(run([s]), "KP308").severity == Severity.WARNING  # nothing says this is a Kubernetes node
    f = one(run([s, write(tmp_path, "config.yaml", IPVS_CONFIG)]), "KP308")
    assert f.severity == Severity.CRITICAL
    assert f.summary.startswith("net.ipv4.ip_forward = 0")  # IPv6 only matters with IPv6 Services
    assert f.fix[0].startswith("sysctl -w net.ipv4.ip_forward=1")


def test_bridged_pods_without_br_netfilter(tmp_path: Path) -> None:
    links = [
        _link(2, "eth0", 1500, None),
        _link(4, "cni0", 1450, "bridge"),
        _link(5, "veth1234", 1450, "veth", master="cni0", link_netnsid=0),
    ]
    lk = write(tmp_path, "links.json", json.dumps(links))
    off = write(tmp_path, "s.txt", "net.bridge.bridge-nf-call-iptables = 0\nnet.ipv4.ip_forward = 1\n")
    f = one(run([lk, off]), "KP309")
    assert f.severity == Severity.CRITICAL
    assert "attached to bridge cni0" in f.summary
    on = write(tmp_path, "s2.txt", "net.bridge.bridge-nf-call-iptables = 1\nnet.ipv4.ip_forward = 1\n")
    assert "KP309" not in codes(run([lk, on]))


def test_route_localnet_reset_under_kube_proxy(tmp_path: Path) -> None:
    s = write(tmp_path, "s.txt", "net.ipv4.conf.all.route_localnet = 0\n")
    save = write(
        tmp_path,
        "save.txt",
        "# Generated by iptables-save v1.8.9 (nf_tables)\n*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n"
        '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" '
        "-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\nCOMMIT\n",
    )
    f = one(run([s, save]), "KP310")
    assert f.severity == Severity.WARNING
    assert f.evidence[1].line == 5
    assert "KP310" not in codes(run([s]))  # nothing says localhost NodePorts are in use


# -- termination --------------------------------------------------------------------------------
def deployment(
    name: str, command: list[str], *, prestop: list[str] | None = None, grace: int | None = None
) -> dict[str, object]:
    c: dict[str, object] = {"name": "app", "image": "example/app:1", "command": command}
    if prestop is not None:
        c["lifecycle"] = {"preStop": {"exec": {"command": prestop}}}
    spec: dict[str, object] = {"containers": [c]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def service(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"clusterIP": "10.96.1.1", "selector": {"app": name}, "ports": [{"port": 80}]},
    }


def objects(tmp: Path, *items: dict[str, object]) -> Path:
    return write(tmp, "objects.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))


def test_shell_pid1_that_backgrounds_the_app(tmp_path: Path) -> None:
    rep = run([objects(tmp_path, deployment("api", ["/bin/sh", "-c", "/opt/app1 & /opt/app2 & wait"]), service("api"))])
    f = one(rep, "KP400")
    assert f.severity == Severity.WARNING
    assert f.subject == {"service": "shop/api", "workload": "Deployment/shop/api"}
    assert "`/opt/app1` runs in the background" in f.summary
    assert "exec" in f.fix[0]


def test_sh_c_without_exec_depends_on_the_image_shell(tmp_path: Path) -> None:
    f = one(
        run([objects(tmp_path, deployment("api", ["sh", "-c", "/app/server --port 8080"]), service("api"))]), "KP400"
    )
    assert f.confidence.label == "medium"
    assert "dash" in f.summary


def test_exec_init_and_unserved_workloads_are_quiet(tmp_path: Path) -> None:
    rep = run(
        [
            objects(
                tmp_path,
                deployment("a", ["sh", "-c", "exec /app/server"], prestop=["sleep", "5"]),
                deployment("b", ["dumb-init", "--", "/start.sh"], prestop=["sleep", "5"]),
                deployment("batch", ["sh", "-c", "job & sleep 1"]),  # no Service selects it
                service("a"),
                service("b"),
            )
        ]
    )
    assert not codes(rep) & {"KP400", "KP401", "KP402"}


def test_no_prestop_is_info_naming_each_workload(tmp_path: Path) -> None:
    rep = run([objects(tmp_path, deployment("a", ["/app"]), deployment("b", ["/app"]), service("a"), service("b"))])
    f = one(rep, "KP401")
    assert f.severity == Severity.INFO
    assert "Deployment/shop/a (shop/a)" in f.summary and "Deployment/shop/b (shop/b)" in f.summary
    assert 'command: ["sleep", "5"]' in f.fix[0]


def test_prestop_longer_than_the_default_grace_period(tmp_path: Path) -> None:
    rep = run([objects(tmp_path, deployment("a", ["/app"], prestop=["sh", "-c", "sleep 30"]), service("a"))])
    f = one(rep, "KP402")
    assert "sleeps 30 s in preStop, and terminationGracePeriodSeconds is 30 (the default)" in f.summary
    assert "terminationGracePeriodSeconds: 45" in f.fix[0]
    ok = run([objects(tmp_path, deployment("a", ["/app"], prestop=["sleep", "30"], grace=60), service("a"))])
    assert "KP402" not in codes(ok)


# -- ranking ------------------------------------------------------------------------------------
def test_several_causes_rank_critical_first(tmp_path: Path, diagnose: Callable[..., Report]) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/conntrack-stats.txt": conntrack_s(10, early_drop=5),
            "node/counters/T1/conntrack-stats.txt": conntrack_s(90, early_drop=900),
            "node/counters/T0/netstat-s.txt": NETSTAT.format(rcv=1, ovf=1),
            "node/counters/T1/netstat-s.txt": NETSTAT.format(rcv=1, ovf=1),
            "node/sysctl.txt": "net.netfilter.nf_conntrack_count = 131000\nnet.netfilter.nf_conntrack_max = 131072\n",
        },
        TIMES,
    )
    rep = run([root])
    assert [f.code for f in rep.findings][:2] == ["KP301", "KP300"]
    assert rep.findings[0].severity == Severity.CRITICAL
    assert "early_drop grew by 895" in rep.findings[0].summary
    assert not codes(rep) & {"KP303", "KP304"}  # unchanged between the snapshots
