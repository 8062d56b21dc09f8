"""KP103 from iptables-restore's usage text alone: RHEL/CentOS 7.6's backport lists the wait only as
`--wait=<seconds>` and refuses kube-proxy 1.9's "-w5" (k/k#71751); upstream's usage lists `-w`.
And KP103 from the restore's own lock error (TKE 1.12)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest
from checks.helpers import Diag
from conftest import none_of, one

from kpdoctor.model import Confidence, Report

Diagnose = Callable[..., Report]

# as posted in k/k#71751 (CentOS 7.6's iptables-1.4.21)
BACKPORT_USAGE = """Usage: iptables-restore [-b] [-c] [-v] [-V]  [-t] [-h] [-W usecs]
           [ --binary ]
           [ --counters ]
           [ --verbose ]
           [ --version]
           [ --test ]
           [ --help ]
           [ --noflush ]
           [ --wait=<seconds>
           [ --wait-interval=<usecs>
           [ --table=<TABLE> ]
           [ --modprobe=<command>]
"""


def test_the_backports_usage_text_is_the_glued_wait_refusal_at_low_confidence(diagnose: Diagnose) -> None:
    f = one(diagnose({"iptables-restore-help.txt": BACKPORT_USAGE}), "KP103")
    assert f.confidence == Confidence.LOW and "v1.10.0" in f.fixed_in
    assert [c.line for c in f.evidence] == [1]


def test_a_kube_proxy_that_passes_the_wait_apart_is_not_affected(diagnose: Diagnose) -> None:
    version = (
        "I1203 10:00:00.000000       1 server.go:444] Version: v1.12.3\n"
        "I1203 10:00:00.100000       1 server_others.go:148] Using iptables Proxier.\n"
    )
    none_of(diagnose({"kube-proxy.log": version, "iptables-restore-help.txt": BACKPORT_USAGE}), "KP103")


@pytest.mark.parametrize("binary", ["iptables-legacy-restore", "iptables-nft-restore"])
def test_upstream_usage_texts_say_nothing(diagnose: Diagnose, binary: str) -> None:
    path = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")
    if path is None:
        pytest.skip(f"{binary} is not installed (scripts/test installs iptables)")
    usage = subprocess.run([path, "-h"], capture_output=True, text=True, timeout=10, check=False)
    text = usage.stderr + usage.stdout
    assert text.startswith("Usage:")
    report = diagnose({"iptables-restore-help.txt": text})
    none_of(report, "KP103")
    assert "usage text" in report.problems[0].message  # and the user is told what to give


def test_restore_no_wait_tke_112(diagnose: Diag) -> None:
    line = (
        "E1008 21:01:55.367127  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 4 "
        "(Another app is currently holding the xtables lock. Perhaps you want to use the -w option?\n)\n"
    )
    r = diagnose({"kp.log": "I1008 21:00:00.000000 1 server.go:548] Version: v1.12.4-tke.20\n" + line * 5})
    f = r.visible()[0]
    assert f.cause == "iptables-restore-no-wait"
    assert "v1.12.4-tke.31" in f.fixed_in
