"""The host's iptables variant as real reports show it (issue 15, part 3): from an OS release, and from
the banner each failing binary prints.

The checks that reason from these (KP101, KP106, KP114) are tested one file per cause in
tests/checks.
"""

from __future__ import annotations

import pytest

from kpdoctor.facts import iptables_variant as bm
from kpdoctor.versions import IptablesVersion


@pytest.mark.parametrize(
    ("text", "backend"),
    [
        ("CentOS Linux 7 (Core) centos 7", "legacy"),
        ("Red Hat Enterprise Linux 8.9 (Ootpa) rhel 8.9", "nft"),
        ("Ubuntu 18.04.6 LTS ubuntu 18.04", "legacy"),
        ("Debian GNU/Linux 9 (stretch) debian 9", "legacy"),
        ("Debian GNU/Linux 10 (buster) debian 10", "nft"),
        ("Amazon Linux 2", "legacy"),
        ("Amazon Linux 2023", "nft"),
        ("Fedora 23 (Twenty Three) fedora 23", "legacy"),  # kubernetes#18196's os-release: iptables 1.4
        ("Fedora Linux 40 (Server Edition) fedora 40", "nft"),
        ("Bottlerocket OS 1.26.2 (aws-k8s-1.24)", None),
    ],
)
def test_os_release_backend(text: str, backend: str | None) -> None:
    got = bm.os_variant(text)
    assert (got[0] if got else None) == backend


def test_banners_name_the_binary() -> None:
    got = IptablesVersion.banners(
        "exit status 2 (iptables-restore v1.8.4 (legacy): x\nip6tables-restore v1.6.0: y\\niptables v1.8.6 (legacy): z"
    )
    assert [(b.program, b.parts, b.effective_variant) for b in got] == [
        ("iptables-restore", (1, 8, 4), "legacy"),
        ("ip6tables-restore", (1, 6, 0), "legacy"),  # older than 1.8: legacy, printed or not
        ("iptables", (1, 8, 6), "legacy"),  # after an escaped newline in a structured err="..."
    ]
    v18 = IptablesVersion.parse("iptables v1.8.4")
    assert v18 is not None and v18.effective_variant is None  # 1.8 without a backend: could be either
