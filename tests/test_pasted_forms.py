"""Output as users really paste it (tests/data/pasted/SOURCES.md): each is read as what it is.

Each case failed before: a tcpdump capture with ``-x``'s hex lines was "not recognised", a
``sudo dmesg -T`` typed without a prompt above the kernel's lines made them mere "log lines"
(the kernel-log check never saw them), and kubectl tables whose padding a paste turned into
tabs were not read, ``ssh HOST cat /proc/sys/...`` printed a value nothing read, and ``ethtool -S
eth0 | grep X`` (no header left) was not recognised, and a ``cat /proc/sys/...`` typed without a prompt in
the middle of a session was taken for the previous command's output (its value, and that output's
counter, lost).
"""

from __future__ import annotations

from pathlib import Path

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.parse.tcpdump import parse_tcpdump

DATA = Path(__file__).parent / "data" / "pasted"


def _read(name: str):  # type: ignore[no-untyped-def]
    return diagnose_paths([DATA / name])


def test_a_capture_with_its_hex_dump_is_read_as_a_capture() -> None:
    report, ev = _read("tcpdump-any-xxx-vxlan.txt")
    assert [i.kind for i in report.inputs] == [Kind.PACKET_CAPTURE.value]
    (art,) = ev.artifacts
    packets = parse_tcpdump(art.read_text())
    assert len(packets) >= 2  # the VXLAN packet and the Pod's SYN inside it


def test_an_unprompted_dmesg_command_types_its_output_as_the_kernels_log() -> None:
    report, _ = _read("dmesg-T-unprompted-conntrack-full.txt")
    (inp,) = report.inputs
    assert inp.kind == Kind.KERNEL_LOG.value and inp.details.get("command") == "sudo dmesg -T"
    assert report.findings[0].code == "KP301"  # the kernel's own table-full line, from the kernel's log


def test_kubectl_tables_whose_padding_became_tabs_are_read() -> None:
    report, _ = _read("kubectl-tables-with-tabs.txt")
    commands = [i.details.get("command", "") for i in report.inputs]
    assert any("get  endpointslices" in c and "-l" not in c for c in commands)
    assert any("endpointslices  -l" in c for c in commands)


def test_a_command_run_over_ssh_is_read_as_that_command() -> None:
    report, _ = _read("ssh-cat-conntrack-count-max.txt")
    kinds = [(i.kind, i.details.get("scope")) for i in report.inputs]
    assert kinds == [(Kind.SYSCTL.value, "host"), (Kind.SYSCTL.value, "host"), (Kind.CONNTRACK_STATS.value, "host")]


def test_ethtool_statistics_grepd_without_their_header_are_read_by_their_command() -> None:
    from kpdoctor.parse.ethtool import parse_ethtool_stats

    report, ev = _read("ethtool-S-grep-cast.txt")
    assert [i.kind for i in report.inputs] == [Kind.NIC_STATS.value]
    (art,) = ev.artifacts
    got = [(c.name, c.value) for c in parse_ethtool_stats(art.read_text())]
    assert got == [("rx_broadcast", 96), ("tx_broadcast", 116), ("rx_multicast", 20294528)]


def test_a_file_read_typed_without_a_prompt_mid_session_is_its_own_part() -> None:
    report, _ = _read("netstat-grep-cat-proc-sys-unprompted.txt")
    got = [(i.kind, i.first_line, i.details.get("command")) for i in report.inputs]
    assert (Kind.SYSCTL.value, 8, "cat /proc/sys/net/ipv4/tcp_max_syn_backlog") in got
    assert (Kind.SYSCTL.value, 11, "cat /proc/sys/net/core/somaxconn") in got
    assert (Kind.NETSTAT.value, 5, "watch 'netstat -s  | grep overflowed'") in got
    codes = [f.code for f in report.findings]
    assert "KP304" in codes  # the 160 listen-queue overflows, no longer swallowed


def test_lines_systemctl_cut_short_ask_for_themselves_whole() -> None:
    """systemctl status ellipsized kube-proxy's error lines (and said so under them): nothing can
    read what the `...` took away, so the unexplained lines ask for the whole lines first."""
    report, _ = _read("systemctl-status-ellipsized-loop.txt")
    cut = [f for f in report.findings if f.code == "KP140" and "Error r...ory" in f.summary]
    assert cut and "cut the line short" in cut[0].summary
    assert cut[0].fix[0].startswith("Send the lines whole: `systemctl status -l --no-pager kube-proxy`")


def test_kube_proxys_image_tag_is_its_version(tmp_path: Path) -> None:
    """`kubectl get ds kube-proxy -o jsonpath='{..image}'`, `kubectl describe pod`'s Image: line and a
    grep of the DaemonSet's YAML all print the image kube-proxy runs; its tag is its release."""
    from kpdoctor.facts import Facts
    from kpdoctor.parse.system import parse_kube_proxy_version

    texts = {
        "jsonpath.txt": "registry.k8s.io/kube-proxy:v1.28.2",
        "describe.txt": "    Image:         k8s.gcr.io/kube-proxy:v1.19.16\n",
        "grep.txt": "        image: registry.aliyuncs.com/google_containers/kube-proxy:v1.23.6\n",
        "digest.txt": "registry.k8s.io/kube-proxy:v1.27.3@sha256:" + "ab" * 32,
        "two.txt": "docker.io/calico/node:v3.26.1 registry.k8s.io/kube-proxy:v1.26.0",
    }
    want = {"jsonpath.txt": "1.28.2", "describe.txt": "1.19.16", "grep.txt": "1.23.6", "digest.txt": "1.27.3", "two.txt": "1.26.0"}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
        report, ev = diagnose_paths([tmp_path / name])
        assert [i.kind for i in report.inputs] == [Kind.KUBE_PROXY_VERSION.value], name
        v = Facts(ev).kube_proxy_version
        assert v is not None and str(v.value).lstrip("v") == want[name], (name, v)
        assert parse_kube_proxy_version(text) == v.value
    # another program's image is not kube-proxy's release
    (tmp_path / "calico.txt").write_text("docker.io/calico/node:v3.26.1\n")
    report, _ = diagnose_paths([tmp_path / "calico.txt"])
    assert Kind.KUBE_PROXY_VERSION.value not in [i.kind for i in report.inputs]


def test_arping_from_its_three_programs_is_read_as_answers() -> None:
    """iputils' and busybox's lines are also made in a lab (tests/lab/test_arp_answers_lab.py);
    Thomas Habets' arping prints each answer as bytes from MAC (IP)."""
    from kpdoctor.parse.arping import claimants, parse_arping

    habets = (
        "ARPING 10.251.0.40\n"
        "42 bytes from f6:e7:eb:cf:34:5a (10.251.0.40): index=0 time=7.653 usec\n"
        "42 bytes from 06:54:a4:fa:b2:8e (10.251.0.40): index=1 time=9.120 usec\n"
        "\n--- 10.251.0.40 statistics ---\n"
        "1 packets transmitted, 2 packets received,   0% unanswered (1 extra)\n"
    )
    iputils = "Unicast reply from 10.251.0.40 [F6:E7:EB:CF:34:5A]  0.597ms\n"
    busybox = "Unicast reply from 10.251.0.40 [06:54:a4:fa:b2:8e] 0.628ms\n"
    got = parse_arping(habets)
    assert [(r.line, r.ip, r.mac) for r in got] == [
        (2, "10.251.0.40", "f6:e7:eb:cf:34:5a"),
        (3, "10.251.0.40", "06:54:a4:fa:b2:8e"),
    ]
    assert list(claimants(got)) == ["10.251.0.40"]
    both = parse_arping(iputils + busybox)
    assert [r.mac for r in claimants(both)["10.251.0.40"]] == ["f6:e7:eb:cf:34:5a", "06:54:a4:fa:b2:8e"]
    assert claimants(parse_arping(iputils * 3)) == {}  # one host answering, however often


def test_a_zsh_prompt_splits_the_session_and_coredns_lines_are_coredns_s(tmp_path: Path) -> None:
    """`user@host dir % cmd` is zsh's default prompt: the session is read command by command (the
    nslookup and resolv.conf outputs were taken for ipset listings before). CoreDNS's own lines
    (`[INFO] plugin/kubernetes: ...`, client-go's `Trace[...]` steps under them) failing to reach
    10.96.0.1 are CoreDNS's, never kube-proxy's: no finding says kube-proxy cannot reach the API."""
    report, _ = _read("zsh-prompt-dns-debug-coredns-logs.txt")
    commands = [i.details.get("command", "") for i in report.inputs]
    assert any(c.startswith("kubectl logs") or "logs" in c for c in commands), commands
    assert Kind.IPSET.value not in [i.kind for i in report.inputs]
    assert "KP129" not in [f.code for f in report.findings]
    # the same log grep'd for the timeouts alone: still CoreDNS's
    text = (DATA / "zsh-prompt-dns-debug-coredns-logs.txt").read_text()
    (tmp_path / "coredns.txt").write_text("".join(ln for ln in text.splitlines(keepends=True) if "i/o timeout" in ln))
    report, _ = diagnose_paths([tmp_path / "coredns.txt"])
    assert "KP129" not in [f.code for f in report.findings], [f.code for f in report.findings]


def test_a_refusal_of_the_api_server_in_another_program_s_log_is_not_a_node_cause() -> None:
    """flannel's "error retrieving pod spec" usually holds a dial timeout to the kubernetes Service
    (kube-proxy's rules); here it holds the API server's RBAC refusal, which decides: reported as a
    signal that lies outside the node, never as missing Service rules."""
    report, _ = _read("flannel-subnetmanager-forbidden.txt")
    assert not [f for f in report.findings if f.cause in ("service-rules-missing", "rule-sync-stale")]
    (f,) = [f for f in report.findings if f.code == "KP140"]
    assert f.title.startswith("An error flannel printed") and "apiserver/forbidden" in f.summary
    assert "outside kube-proxy and the node" in f.summary


def test_a_prompt_without_its_space_and_syslog_s_unpadded_day_are_read() -> None:
    """`[root@centos8 ~]#tail ...` is a prompt; `Jul 8 10:03:53 centos8 kernel: ...` (syslog pads
    the day to two columns, a web page collapses it) is the kernel's log: KP301, not a guess."""
    report, _ = _read("prompt-without-space-syslog-table-full.txt")
    kinds = [(i.kind, i.details.get("command")) for i in report.inputs]
    assert (Kind.KERNEL_LOG.value, "tail /var/log/messages") in kinds
    assert report.findings[0].code == "KP301"


def test_an_empty_prompt_after_an_output_is_not_part_of_it() -> None:
    report, _ = _read("bare-prompts-after-grepped-counters.txt")
    assert (Kind.NETSTAT.value, "netstat -s | grep -i listen") in [
        (i.kind, i.details.get("command")) for i in report.inputs
    ]
    assert "KP304" in [f.code for f in report.findings]  # the 2608 SYNs dropped, read


def test_lsmod_rows_a_grep_kept_are_read_apart_from_the_sysctl_lines_after_them() -> None:
    """kmod's lsmod rows (`br_netfilter  22256  0`) without their header or command are modules:
    what is listed is loaded, the rest unknown; the other lines of the paste name no module."""
    from kpdoctor.facts import Facts

    report, ev = _read("ssh-oneliner-lsmod-sysctl-unprompted.txt")
    kinds = [i.kind for i in report.inputs]
    assert Kind.MODULES.value in kinds and Kind.SYSCTL.value in kinds
    facts = Facts(ev)
    assert facts.module_inactive("br_netfilter") is False and facts.modules is None  # a fragment: none is absent
    (modules,) = [a for a in ev.artifacts if a.kind == Kind.MODULES]
    from kpdoctor.parse.system import parse_modules

    assert parse_modules(modules.read_text()).names == {"br_netfilter", "bridge"}


def test_a_separator_line_ends_a_command_s_output() -> None:
    """A `=====` line drawn after `kubectl get po` output: the chains after it are not that
    command's output (nor a container's, had it been `kubectl exec`), but an output of its own."""
    report, _ = _read("separator-before-unprompted-iptables-L.txt")
    (rules,) = [i for i in report.inputs if i.kind == Kind.IPTABLES_LIST.value]
    assert rules.details.get("command") is None and rules.first_line > 10
