"""KP116: missing kernel netfilter parts, from lines people posted (k3s#11862, k3s#6093, kind#1740,
k/k#133694, kops#17968, siderolabs/pkgs#951, k3s#6169, microk8s#5525) and the lookalikes that are
other causes' (a chain a restore cannot find, the MARK regression, nf_conntrack_ipv4 on >= 4.19)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import none_of, one

from kpdoctor.model import Confidence, Report, Severity

Diagnose = Callable[..., Report]


@pytest.mark.parametrize(
    ("log", "module", "config"),
    [
        (
            'E0227 20:36:41.752351  411079 proxier.go:1564] "Failed to execute iptables-restore" err=<\n'
            "        exit status 2: Warning: Extension statistic revision 0 not supported, missing kernel module?\n"
            "        iptables-restore: line 86 failed\n"
            " >\n",
            "xt_statistic",
            "CONFIG_NETFILTER_XT_MATCH_STATISTIC",
        ),
        (
            'E0902 17:55:34.945527    3747 proxier.go:874] "Failed to ensure chain jumps" err=<\n'
            "        error checking rule: exit status 2: iptables v1.8.4 (legacy): Couldn't load match `comment'"
            ":No such file or directory\n",
            "xt_comment",
            "CONFIG_NETFILTER_XT_MATCH_COMMENT",
        ),
        (
            "E0720 14:29:10.934607       1 proxier.go:1507] Failed to execute iptables-restore: exit status 2 "
            "(iptables-restore v1.8.3 (legacy): Couldn't load match `recent':No such file or directory\n",
            "xt_recent",
            "CONFIG_NETFILTER_XT_MATCH_RECENT",
        ),
        (
            'E0214 08:27:13.607103      11 server.go:135] "Error running ProxyServer" err="open '
            '/proc/sys/net/netfilter/nf_conntrack_max: no such file or directory"\n',
            "nf_conntrack",
            "CONFIG_NF_CONNTRACK",
        ),
        (
            'Sep 22 17:24:19 node1 k3s[34223]: E0922 17:24:19.019309   34223 proxier.go:1519] "Failed to delete '
            'stale service connections" err="error deleting connection tracking state for UDP service IP: '
            "10.43.0.10, error: conntrack command returned: \\\"conntrack v1.4.6 (conntrack-tools): Can't open "
            'handler\\\\n\\", error message: exit status 1" IP="10.43.0.10"\n',
            "nf_conntrack_netlink",
            "CONFIG_NF_CT_NETLINK",
        ),
        (
            "modprobe: FATAL: Module ip_tables not found in directory /lib/modules/\n",
            "ip_tables",
            "CONFIG_IP_NF_IPTABLES",
        ),
    ],
)
def test_each_missing_part_is_named_with_its_module_and_option(
    diagnose: Diagnose, log: str, module: str, config: str
) -> None:
    f = one(diagnose({"kube-proxy.log": log}), "KP116")
    assert module in f.summary and config in f.summary
    assert any(module.split("/")[0] in fix for fix in f.fix)


def test_nft_expression_under_the_carets(diagnose: Diagnose) -> None:
    """nftables mode: nft's columns point at `fib saddr type` in the refused rule (Talos, no NFT_FIB)."""
    log = (
        "│     /dev/stdin:892:87-100: Error: Could not process rule: No such file or directory\n"
        "│     add rule ip kube-proxy external-3BXM2ZZ4-haproxy/external-kubernetes-ingress/tcp/http fib saddr "
        'type local jump mark-for-masquerade comment "masquerade local traffic" \n'
        "│                                                                                           ^^^^^^^^^^^^^^ \n"
    )
    f = one(diagnose({"kube-proxy.log": log}), "KP116")
    assert "nft_fib_ipv4" in f.summary and "CONFIG_NFT_FIB_IPV4" in f.summary


def test_ipv6_nat_table_alone(diagnose: Diagnose) -> None:
    log = (
        "E0212 11:16:50.751646       1 proxier.go:1619] Failed to execute iptables-restore: exit status 2 "
        "(ip6tables-restore v1.8.5 (legacy): ip6tables-restore: unable to initialize table 'nat'\n"
    )
    f = one(diagnose({"kube-proxy.log": log}), "KP116")
    assert "ip6table_nat" in f.summary and f.severity == Severity.CRITICAL


def test_modprobe_not_found_makes_the_table_failure_certain(diagnose: Diagnose) -> None:
    transcript = (
        "# ip6tables -w 5 -S POSTROUTING -t nat\n"
        "ip6tables v1.8.11 (legacy): can't initialize ip6tables table `nat': Table does not exist (do you need "
        "to insmod?)\n"
        "Perhaps ip6tables or your kernel needs to be upgraded.\n"
        "# modprobe ip6table_nat\n"
        "modprobe: FATAL: Module ip6table_nat not found in directory /lib/modules/6.6.95\n"
    )
    f = one(diagnose({"session.txt": transcript}), "KP116")
    assert f.confidence == Confidence.HIGH
    assert any("CONFIG_IP6_NF_NAT" in fix for fix in f.fix)


@pytest.mark.parametrize(
    "log",
    [
        # a chain, not an extension: backend mismatch or kubelet's chains
        "E0625 18:23:05.161594       1 proxier.go:1350] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.4.21: Couldn't load target `KUBE-MARK-DROP':No such file or directory\n",
        # the MARK regression has its own check (KP114)
        "Warning: Extension MARK revision 0 not supported, missing kernel module?\n",
        # merged into nf_conntrack in 4.19: kube-proxy's attempt to load it fails harmlessly
        "modprobe: FATAL: Module nf_conntrack_ipv4 not found in directory /lib/modules/5.10.0-21-amd64\n",
        # IPVS modules are KP113's
        "modprobe: FATAL: Module ip_vs_sh not found in directory /lib/modules/5.4.0\n",
    ],
)
def test_lookalikes_are_not_a_missing_kernel_part(diagnose: Diagnose, log: str) -> None:
    none_of(diagnose({"kube-proxy.log": log}), "KP116")
