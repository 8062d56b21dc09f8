"""KP209 before a Service shows it: a load-balancer pool that holds a node's address, or the address
of a machine the user reaches with ssh (metallb#1397), and the ssh attempts that name that machine."""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

from kpdoctor.model import Confidence, Report, Severity
from kpdoctor.parse.clients import ssh_attempts

Diagnose = Callable[..., Report]

# as posted in metallb#1397
LEGACY_CONFIG = """apiVersion: v1
kind: ConfigMap
metadata:
  namespace: metallb-system
  name: config
data:
  config: |
    address-pools:
    - name: default
      protocol: layer2
      addresses:
      - 192.168.1.3-192.168.1.5
"""
SSH_RESET = "ssh root@192.168.1.3\n\nkex_exchange_identification: read: Connection reset by peer\n"
# MetalLB's documented IPAddressPool (metallb.universe.tf/configuration)
POOL = """apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: first-pool
  namespace: metallb-system
spec:
  addresses:
  - 192.168.10.0/24
  - 192.168.9.1-192.168.9.5
  - fc00:f853:0ccd:e799::/124
"""
NODE = """apiVersion: v1
kind: Node
metadata:
  name: worker-1
status:
  addresses:
  - type: InternalIP
    address: {ip}
  - type: Hostname
    address: worker-1
"""


def test_a_pool_holding_the_address_ssh_fails_on_is_critical(diagnose: Diagnose) -> None:
    f = one(diagnose({"metallb-config.yaml": LEGACY_CONFIG, "ssh.txt": SSH_RESET}), "KP209")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.MEDIUM
    assert "192.168.1.3-192.168.1.5" in f.summary and "`ssh root@192.168.1.3`" in f.summary
    assert [c.line for c in f.evidence][1:] == [1, 3]


def test_a_pool_holding_a_nodes_address_is_a_warning(diagnose: Diagnose) -> None:
    f = one(diagnose({"pool.yaml": POOL, "node.yaml": NODE.format(ip="192.168.9.4")}), "KP209")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.HIGH
    assert "192.168.9.1-192.168.9.5" in f.summary and "node worker-1" in f.summary


def test_a_pool_clear_of_the_nodes_says_nothing(diagnose: Diagnose) -> None:
    none_of(diagnose({"pool.yaml": POOL, "node.yaml": NODE.format(ip="192.168.11.4")}), "KP209")
    none_of(diagnose({"metallb-config.yaml": LEGACY_CONFIG, "ssh.txt": SSH_RESET.replace(".3", ".9")}), "KP209")


def test_ssh_commands_name_their_address_and_failure() -> None:
    (a,) = ssh_attempts(
        "[root@node1 ~]# ssh -p 2222 -i key admin@10.0.0.5\nssh: connect to host 10.0.0.5 port 2222: No route to host"
    )
    assert (a.host, a.line, a.failure_line) == ("10.0.0.5", 0, 1)
    (b,) = ssh_attempts("Connection refused\n", "sudo ssh [fd00::5]")
    assert b.host == "fd00::5" and b.failure == "Connection refused"
    assert ssh_attempts("$ ssh node-1\nConnection refused\n") == []  # a name is not resolved
