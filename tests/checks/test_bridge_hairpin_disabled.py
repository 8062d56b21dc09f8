"""KP319 bridge-hairpin-disabled: bridge ports with hairpin off, from real output made here
(tests/data/bridge: iproute2's `bridge -d link`, `ip -d link`, `ip -j -d link`, and the ports'
sysfs `hairpin_mode` files as grep and a shell loop print them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from checks.helpers import run
from conftest import none_of, one, write

from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Severity

DATA = Path(__file__).parent.parent / "data" / "bridge"
FORMS = ["bridge-d-link.txt", "hairpin-mode-grep.txt", "hairpin-mode-loop.txt", "ip-j-d-link.json"]


@pytest.mark.parametrize("name", FORMS)
def test_every_form_shows_each_port_s_flag(name: str) -> None:
    facts = Facts(load([DATA / name]))
    flags = {ln.name: (ln.master, ln.hairpin) for _, ln in facts.node_state.links if ln.hairpin is not None}
    assert flags == {"veth1a2b3c4d": ("cni0", False), "veth5e6f7a8b": ("cni0", True)}


@pytest.mark.parametrize("name", FORMS)
def test_a_port_with_hairpin_off_is_named(name: str) -> None:
    f = one(run([DATA / name]), "KP319")
    assert f.cause == "bridge-hairpin-disabled" and f.severity == Severity.WARNING
    assert f.confidence == Confidence.MEDIUM
    assert "Bridge cni0 has hairpin off on 1 of the 2 ports shown (veth1a2b3c4d)" in f.summary
    assert any("bridge link set dev veth1a2b3c4d hairpin on" in x for x in f.fix)


def test_br_netfilter_on_makes_it_certain_and_off_hands_it_to_kp309(tmp_path: Path) -> None:
    on = write(tmp_path, "on.txt", "net.bridge.bridge-nf-call-iptables = 1\n")
    f = one(run([DATA / "ip-j-d-link.json", on]), "KP319")
    assert f.confidence == Confidence.HIGH
    off = write(tmp_path, "off.txt", "net.bridge.bridge-nf-call-iptables = 0\n")
    none_of(run([DATA / "ip-j-d-link.json", off]), "KP319")


def test_a_promiscuous_bridge_or_docker_s_own_bridge_is_not_this(tmp_path: Path) -> None:
    text = (DATA / "ip-j-d-link.json").read_text()
    promisc = text.replace(
        '"ifname":"cni0","flags":["BROADCAST","MULTICAST"', '"ifname":"cni0","flags":["BROADCAST","MULTICAST","PROMISC"'
    )
    assert promisc != text
    none_of(run([write(tmp_path, "promisc.json", promisc)]), "KP319")
    docker = (DATA / "hairpin-mode-grep.txt").read_text().replace("/cni0/", "/docker0/")
    none_of(run([write(tmp_path, "docker0.txt", docker)]), "KP319")
    on = (DATA / "hairpin-mode-grep.txt").read_text().replace("hairpin_mode:0", "hairpin_mode:1")
    none_of(run([write(tmp_path, "all-on.txt", on)]), "KP319")


# flannel's cni-conf.json as kube-flannel.yml writes it (with hairpinMode since v0.10.0) and as
# older manifests and hand-written files have it (without)
FLANNEL = """{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        %s"isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    }
  ]
}
"""
# the bridge plugin's own configuration (one plugin: a .conf file), and containerd's
# 10-containerd-net.conflist (a promiscuous bridge instead of hairpin)
BRIDGE_CONF = """{
  "cniVersion": "0.4.0",
  "name": "mynet",
  "type": "bridge",
  "bridge": "cbr0",
  "isGateway": true,
  "ipMasq": true,
  "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}
}
"""
CONTAINERD = """{
  "cniVersion": "1.0.0",
  "name": "containerd-net",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "promiscMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
"""


def test_a_cni_configuration_without_hairpin_mode_is_named(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "10-flannel.conflist", FLANNEL % "")]), "KP319")
    assert f.confidence == Confidence.MEDIUM and "flannel's delegate" in f.summary and "cni0" in f.summary
    assert f.evidence[0].line == 6 and f.evidence[0].text == '"type": "flannel",'
    plain = one(run([write(tmp_path, "mynet.conf", BRIDGE_CONF)]), "KP319")
    assert "its bridge plugin" in plain.summary and "cbr0" in plain.summary
    none_of(run([write(tmp_path, "kube-flannel.conflist", FLANNEL % '"hairpinMode": true,\n        ')]), "KP319")
    none_of(run([write(tmp_path, "10-containerd-net.conflist", CONTAINERD)]), "KP319")


def test_the_ports_shown_speak_before_the_configuration(tmp_path: Path) -> None:
    """Ports all on with a configuration that lacks the setting: the Pods shown are fine (the
    configuration changed since, or another plugin set them); the ports decide."""
    on = (DATA / "hairpin-mode-grep.txt").read_text().replace("hairpin_mode:0", "hairpin_mode:1")
    none_of(run([write(tmp_path, "ports.txt", on), write(tmp_path, "10-flannel.conflist", FLANNEL % "")]), "KP319")
