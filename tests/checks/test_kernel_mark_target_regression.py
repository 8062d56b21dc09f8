"""KP114 kernel-mark-target-regression: any writer hitting the MARK regression, named; the kernel
judged by its distribution's numbering."""

from __future__ import annotations

import pytest
from checks.helpers import Diag
from conftest import SEED3_BLOCK, one

from kpdoctor.checks.sync import kernel_mark as km
from kpdoctor.model import Confidence
from kpdoctor.versions import KernelVersion


def test_kernel_mark_regression_seed_003(diagnose: Diag) -> None:
    log = SEED3_BLOCK
    r = diagnose(
        {
            "kp.log": log,
            "uname.txt": "Linux worker2 5.15.0-127-generic #137-Ubuntu SMP Fri Nov 8 15:21:01 UTC 2024 x86_64 x86_64 x86_64 GNU/Linux\n",
        }
    )
    f = r.visible()[0]
    assert f.cause == "kernel-mark-target-regression" and f.confidence.label == "high" and f.ongoing is True
    assert "5.15.0-126" in " ".join(f.fixed_in) and "KP100" in f.explains


# tailscale#13863 (marek22k, on 6.6.58-1-lts): another agent's ip6tables call, quoted by it.
TAILSCALE_13863 = """\
# Health check:
#     - Tailscale can't reach the configured DNS servers. Internet connectivity may be affected.
#     - adding [-i tailscale0 -j MARK --set-mark 0x40000/0xff0000] in v6/filter/ts-forward: running [/usr/bin/ip6tables -t filter -A ts-forward -i tailscale0 -j MARK --set-mark 0x40000/0xff0000 --wait]: exit status 2: Warning: Extension MARK revision 0 not supported, missing kernel module?
ip6tables v1.8.10 (nf_tables): MARK: bad value for option "--set-mark", or out of range (0-4294967295).

Try `ip6tables -h' or 'ip6tables --help' for more information.
"""


def test_mark_errors_from_another_program_name_it(diagnose: Diag) -> None:
    f = one(diagnose({"status.txt": TAILSCALE_13863, "uname.txt": "6.6.58-1-lts\n"}), "KP114")
    assert f.summary.startswith("ip6tables v1.8.10 (nf_tables) (`/usr/bin/ip6tables -t filter -A ts-forward")
    assert "iptables-restore rejects kube-proxy's MARK rules" not in f.summary
    assert "another program's, not kube-proxy's sync" in f.summary
    # An Arch package release (-1-lts) is not an Ubuntu ABI: upstream 6.6.58, a broken release.
    assert f.confidence == Confidence.HIGH and "known to carry the regression" in f.summary
    assert f.fixed_in == ["6.6.59"]


def test_kube_proxys_own_restore_is_named_so(diagnose: Diag) -> None:
    # k3s-11175, its kernel release from the issue (Fedora 40's build of upstream 6.11.4).
    log = """\
Okt 26 01:54:40 ... k3s[20378]: E1026 01:54:40.885702   20378 proxier.go:1511] "Failed to execute iptables-restore" err=<
Okt 26 01:54:40 ... k3s[20378]:         exit status 2: Ignoring deprecated --wait-interval option.
Okt 26 01:54:40 ... k3s[20378]:         Warning: Extension MARK revision 0 not supported, missing kernel module?
Okt 26 01:54:40 ... k3s[20378]:         ip6tables-restore v1.8.9 (legacy): unknown option "--xor-mark"
Okt 26 01:54:40 ... k3s[20378]:         Error occurred at line: 31
Okt 26 01:54:40 ... k3s[20378]:         Try `ip6tables-restore -h' or 'ip6tables-restore --help' for more information.
Okt 26 01:54:40 ... k3s[20378]:  >
"""
    uname = "6.11.4-201.fc40.x86_64\n"
    f = one(diagnose({"k3s.log": log, "uname.txt": uname}), "KP114")
    assert f.summary.startswith("kube-proxy's ip6tables-restore v1.8.9 (legacy) rejects the MARK target")
    assert "another program" not in f.summary
    assert f.confidence == Confidence.HIGH and f.fixed_in == ["6.11.6"]


def test_kubelets_mark_call_on_bottlerocket(diagnose: Diag) -> None:
    # bottlerocket-core-kit#266: kubelet's ip6tables on Bottlerocket's 5.15.168 (bottlerocket#4295).
    journal = (
        "Nov 15 02:19:43 ip-192-168-93-220.us-west-2.compute.internal kubelet[1387]:         ip6tables v1.8.10 "
        "(legacy): MARK target: kernel too old for --or-mark\n"
        "Nov 15 02:19:43 ip-192-168-93-220.us-west-2.compute.internal kubelet[1387]:         Try `ip6tables -h' or "
        "'ip6tables --help' for more information.\n"
    )
    f = one(diagnose({"journal.txt": journal, "uname.txt": "5.15.168\n"}), "KP114")
    assert f.summary.startswith("ip6tables v1.8.10 (legacy) rejects the MARK target")
    assert f.confidence == Confidence.HIGH


def test_a_backported_kernel_is_not_called_off_the_list(diagnose: Diag) -> None:
    # tailscale#20900: RHEL 10.2's kernel, the IPv4 path.
    status = (
        "#     - adding [-i tailscale0 -j MARK --set-mark 0x40000/0xff0000] in v4/filter/ts-forward: running "
        "[/usr/sbin/iptables -t filter -A ts-forward -i tailscale0 -j MARK --set-mark 0x40000/0xff0000 --wait]: "
        "exit status 2: Warning: Extension MARK revision 0 not supported, missing kernel module?\n"
        'iptables v1.8.11 (nf_tables): MARK: bad value for option "--set-mark", or out of range (0-4294967295).\n'
    )
    f = one(diagnose({"status.txt": status, "uname.txt": "6.12.0-211.47.1.el10_2.x86_64\n"}), "KP114")
    assert "backported base" in f.summary and "not on the list" not in f.summary
    assert f.confidence == Confidence.MEDIUM and "Only the IPv6 path" not in f.summary


@pytest.mark.parametrize(
    ("release", "broken", "target"),
    [
        ("5.15.0-127-generic", True, "5.15.0-126 (or a later fixed ABI)"),
        ("5.15.0-128-generic", True, "5.15.0-126 (or a later fixed ABI)"),  # tailscale#14410
        ("5.15.0-126-generic", None, "5.15.0-126 (or a later fixed ABI)"),
        ("6.8.0-57-lowlatency", True, "6.8.0-55 (or a later fixed ABI)"),  # the main kernel's ABI
        ("6.8.0-1025-aws", True, None),
        ("6.8.0-1025-gcp", None, None),  # a gcp kernel numbers its own ABIs
        ("6.6.57-1-lts", True, "6.6.59"),
        ("6.6.56-1-lts", None, "6.6.59"),
        ("6.11.4-301.fc41.x86_64", True, "6.11.6"),
        ("6.11.6-arch1-1", None, "6.11.6"),
        ("5.15.168", True, "5.15.167 (or a later 5.15 release with the fix)"),
        ("4.18.0-513.5.1.el8_9.x86_64", None, None),
        ("6.1.0-18-amd64", None, None),
    ],
)
def test_kernel_status(release: str, broken: bool | None, target: str | None) -> None:
    k = KernelVersion.parse(release)
    assert k is not None
    assert km.kernel_status(k) == (broken, target)
