"""Whose state a pasted listing shows (issue 40, item 2): the command line that ran it (``ip
netns exec``, ``nsenter``, ``chroot /host``, ``kubectl exec``) and the prompt it was typed at
(kube-proxy's Pod, a Deployment's Pod, an image's ``/ #`` shell) say it. Another network
namespace's rules, addresses, sockets or counters are not the node's, and are said to be set
aside; the node's own namespace entered from a debug Pod is the node's. The outputs are real
(upstream kube-proxy's rules, iptables' own version lines); the transcripts put them behind the
prompts and commands that print them so."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import UPSTREAM

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.bundle.transcript import prompt_scope
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.parse.shellwords import entered

RULES = (UPSTREAM / "iptables" / "TestOverallIPTablesRules.rules").read_text()


@pytest.mark.parametrize(
    ("command", "inner", "scope"),
    [
        ("ip netns exec cni-5f1a2b3c iptables-save", ["iptables-save"], "netns"),
        ("nsenter -t 4242 -n iptables-save -t nat", ["iptables-save", "-t", "nat"], "netns"),
        ("nsenter --target 4242 --net -- ss -ltn", ["ss", "-ltn"], "netns"),
        ("nsenter -t 1 -n -- iptables-save", ["iptables-save"], "host"),  # a debug Pod entering the node's
        ("nsenter -t1 -mnu ip -j addr", ["ip", "-j", "addr"], "host"),
        ("nsenter --net=/proc/1/ns/net sysctl -a", ["sysctl", "-a"], "host"),
        ("chroot /host iptables-save", ["iptables-save"], "host"),  # kubectl debug node/...
        ("nsenter -t 4242 -m cat /etc/os-release", ["cat", "/etc/os-release"], None),  # mounts only
        ("iptables-save", ["iptables-save"], None),
        # ssh HOST CMD: CMD on that host (its words joined and split again, as the remote shell does)
        ("ssh node-3 cat /proc/sys/net/netfilter/nf_conntrack_max", ["cat", "/proc/sys/net/netfilter/nf_conntrack_max"],
         "host"),
        ("ssh -p 2222 -i key root@node-3 conntrack -S", ["conntrack", "-S"], "host"),
        ("ssh node-3", ["ssh", "node-3"], None),  # a login: what follows is typed there, at its own prompt
    ],
)
def test_the_command_that_entered_a_namespace(command: str, inner: list[str], scope: str | None) -> None:
    assert entered(command.split()) == (inner, scope)


@pytest.mark.parametrize(
    ("prompt", "scope"),
    [
        ("root@kube-proxy-x7k2p:/# ", "kube-proxy"),
        ("root@nginx-6799fc88d8-2xkqz:/# ", "container"),
        ("/ # ", "container"),
        ("/var/lib # ", "container"),
        ("root@worker-1:~# ", None),
        ("[root@ip-10-0-1-17 ~]# ", None),
        ("ubuntu@k8s-node-2:~$ ", None),
        ("root@kube-proxy-worker:~# ", None),  # a node named so, not a Pod's generated name
    ],
)
def test_whose_shell_a_prompt_is(prompt: str, scope: str | None) -> None:
    assert prompt_scope(prompt) == scope


def test_another_namespaces_rules_are_not_the_nodes(tmp_path: Path) -> None:
    p = tmp_path / "session.txt"
    p.write_text(f"root@worker-1:~# ip netns exec cni-5f1a2b3c iptables-save\n{RULES}")
    ev = load([p])
    assert ev.of(Kind.IPTABLES_SAVE) == []
    [why] = [x.message for x in ev.problems if "another network namespace" in x.message]
    assert "ip netns exec cni-5f1a2b3c" in why and "not the node's" in why
    rep, _ = diagnose_paths([p])
    assert not [f for f in rep.findings if f.code.startswith("KP2")]  # nothing verified against a Pod's rules


def test_another_namespaces_rules_are_not_the_nodes_in_a_mixed_output_either(tmp_path: Path) -> None:
    """One command in a Pod's namespace printed rules and sockets (`sh -c '...; ...'`): read
    apart, the rules are still not the node's, the sockets still the Pod's."""
    p = tmp_path / "session.txt"
    p.write_text(
        "root@worker-1:~# nsenter -t 4242 -n sh -c 'iptables-save; ss -ltn'\n"
        f"{RULES}\n"
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
        "LISTEN 129    128    0.0.0.0:8080      0.0.0.0:*\n"
    )
    ev = load([p])
    assert ev.of(Kind.IPTABLES_SAVE) == [] and len(ev.of(Kind.LISTENERS)) == 1
    assert [x for x in ev.problems if "another network namespace" in x.message and "nsenter -t 4242 -n" in x.message]


def test_a_pods_listen_queue_is_still_read_and_says_whose_it_is(tmp_path: Path) -> None:
    """Sockets are no dataplane of the node's: a Pod's overflowing listen queue is that Pod's real
    problem, read with the scope that says where it was seen."""
    p = tmp_path / "session.txt"
    p.write_text(
        "root@worker-1:~# nsenter -t 4242 -n ss -ltn\n"
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
        "LISTEN 129    128    0.0.0.0:8080      0.0.0.0:*\n"
    )
    [ss] = load([p]).of(Kind.LISTENERS)
    assert ss.attrs["scope"] == "netns"
    rep, _ = diagnose_paths([p])
    assert [f.cause for f in rep.findings][:1] == ["listen-queue-overflow"]


def test_the_nodes_namespace_entered_from_a_debug_pod_is_the_nodes(tmp_path: Path) -> None:
    p = tmp_path / "session.txt"
    p.write_text(f"/ # nsenter -t 1 -n -- iptables-save\n{RULES}")  # the debug Pod's shell, the node's rules
    ev = load([p])
    [rules] = ev.of(Kind.IPTABLES_SAVE)
    assert rules.attrs["scope"] == "host"


def test_kube_proxys_pod_prompt_shows_its_images_iptables(tmp_path: Path) -> None:
    p = tmp_path / "session.txt"
    p.write_text(
        "root@worker-1:~# iptables --version\niptables v1.8.7 (nf_tables)\n"
        "root@kube-proxy-x7k2p:/# iptables --version\niptables v1.8.4 (legacy)\n"
    )
    versions = {a.attrs.get("scope", "host"): a.text.strip() for a in load([p]).of(Kind.IPTABLES_VERSION)}
    assert versions == {"host": "iptables v1.8.7 (nf_tables)", "kube-proxy": "iptables v1.8.4 (legacy)"}
    rep, _ = diagnose_paths([p])
    assert rep.findings and rep.findings[0].cause == "iptables-backend-mismatch"


def test_a_deployments_pod_prompt_is_not_the_node(tmp_path: Path) -> None:
    p = tmp_path / "session.txt"
    p.write_text(
        'root@nginx-6799fc88d8-2xkqz:/# cat /etc/os-release\nPRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\n'
        'NAME="Debian GNU/Linux"\nVERSION_ID="11"\nID=debian\n'
    )
    ev = load([p])
    [osr] = ev.of(Kind.OS_RELEASE)
    assert osr.attrs["scope"] == "container"


def test_a_process_listing_says_each_processs_network_namespace() -> None:
    """procps' `ps -eww -o user,pid,ppid,c,stime,tty,time,netns,args` (what the live collection
    runs), as it prints it: the listing's own ps row tells the namespace it was taken in; a
    kernel thread's "-" is no namespace."""
    from kpdoctor.parse.system import parse_processes

    listing = (
        "USER       PID  PPID  C STIME TT           TIME      NETNS COMMAND\n"
        "root         2     0  0 Nov28 ?        00:00:00          - [kthreadd]\n"
        "root      4242  4200  0 03:08 ?        00:00:01 4026532417 /usr/local/bin/kube-proxy --hostname-override=kind-worker\n"
        "root      5227  5182  0 03:08 ?        00:00:00 4026531833 ps -eww -o user,pid,ppid,c,stime,tty,time,netns,args\n"
    )
    procs = parse_processes(listing)
    assert [(p.pid, p.netns, p.program) for p in procs] == [
        (2, "", "[kthreadd]"),
        (4242, "4026532417", "kube-proxy"),
        (5227, "4026531833", "ps"),
    ]
