"""A Pod's entry script that reads its network namespace's forwarding and stops, run for real.

An `sh -ex` script such as k3s ServiceLB's klipper-lb tests each family's forwarding setting before
it writes the DNAT of the Service's address; a new network namespace starts IPv6 forwarding at 0.
Here a script of that form runs under busybox ash, dash and bash in a namespace this test
creates (its IPv4 forwarding set to 1, its IPv6 one left at the namespace's 0), and its trace,
pasted as the log `kubectl logs` printed, is what KP320 reads: the read, the test with the value
in place, the exit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .kpdoctor_run import diagnose_json
from .netns import Netns, require_lab

require_lab()

# the construct an entry script tests forwarding with (klipper-lb v0.3.1-v0.4.8's, in spirit)
ENTRY = """set -ex
trap exit TERM INT
for dest_ip in 10.43.107.199 fd00:43::10; do
    if echo ${dest_ip} | grep -Eq ":"; then
        if [ `cat /proc/sys/net/ipv6/conf/all/forwarding` != 1 ]; then
            exit 1
        fi
    else
        if [ `cat /proc/sys/net/ipv4/ip_forward` != 1 ]; then
            exit 1
        fi
    fi
done
"""
COMMAND = "kubectl -n kube-system logs svclb-traefik-5d8f6a1c-x2kq9 -c lb-tcp-443"


@pytest.mark.parametrize("shell", [["busybox", "sh"], ["dash"], ["bash"]], ids=["busybox", "dash", "bash"])
def test_the_trace_of_a_script_that_stopped_on_forwarding_names_it(shell: list[str], tmp_path: Path) -> None:
    script = tmp_path / "entry"
    script.write_text(ENTRY)
    with Netns() as ns:
        ns.check(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        assert ns.check(["cat", "/proc/sys/net/ipv6/conf/all/forwarding"]).strip() == "0"
        done = ns.run([*shell, str(script)])
    assert done.returncode == 1
    trace = done.stderr
    assert trace.rstrip().endswith("+ exit 1"), trace
    paste = tmp_path / "svclb.log"
    paste.write_text(f"[root@node1 ~]# {COMMAND}\n{trace}")
    lines = paste.read_text().splitlines()

    report = diagnose_json(paste)
    first = report["findings"][0]
    assert (first["code"], first["cause"], first["severity"]) == ("KP320", "ip-forward-disabled", "critical")
    assert first["confidence"] == "high"
    assert "svclb-traefik-5d8f6a1c-x2kq9" in first["summary"] and "IPv6" in first["summary"]
    cited = [lines[e["line"] - 1].strip() for e in first["evidence"]]
    assert cited[0].endswith("cat /proc/sys/net/ipv6/conf/all/forwarding")
    assert cited[1].split()[1:] in (["'['", "0", "'!='", "1", "]"], ["[", "0", "!=", "1", "]"], ["'['", "0", "'!='", "1", "']'"])
    assert cited[2] == "+ exit 1"
    # the IPv4 test read 1: nothing said of it
    assert not [f for f in report["findings"] if "ip_forward =" in f["summary"]]
