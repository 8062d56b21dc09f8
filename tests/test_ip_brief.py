"""`ip -br addr` read as the node's interfaces and addresses, as `ip addr` and `ip -j addr` are.

KP209 asks for it ("ip -br addr on the node that is not Ready"): what kpdoctor asks for, it reads.
The listings are made here by the real `ip` in a network namespace the test creates and deletes:
an uplink with the node's address, a bridge with a Pod's veth on it, and kube-ipvs0 holding two
Service addresses as IPVS mode binds them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lab.netns import Netns, cleanup_stale, lab_available, node_interfaces

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.sniff import sniff
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Report
from kpdoctor.parse.ip_brief import parse_brief
from kpdoctor.parse.system import bound_addresses

Diag = Callable[..., Report]
pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))
NODE_IP = "192.168.56.11"


@pytest.fixture(scope="module")
def listings() -> dict[str, str]:
    cleanup_stale()
    with Netns() as ns:
        node_interfaces(ns, NODE_IP, ["10.96.0.1", "10.96.0.10"])
        return {
            "addr": ns.check(["ip", "-br", "addr"]),
            "addr4": ns.check(["ip", "-br", "-4", "addr"]),
            "link": ns.check(["ip", "-br", "link"]),
        }


def test_every_interface_and_its_addresses_are_read(listings: dict[str, str]) -> None:
    text = listings["addr"]
    assert sniff(text, ()).kind == Kind.IP_ADDR
    names, bound = bound_addresses(text)
    assert {"lo", "eth0", "cni0", "veth9c1f", "kube-ipvs0"} <= set(names)  # `eth0@eth0p` is eth0
    v4 = {(b.interface, str(b.address)) for b in bound if b.address.version == 4}
    assert {("eth0", NODE_IP), ("cni0", "10.244.1.1"), ("kube-ipvs0", "10.96.0.1"), ("kube-ipvs0", "10.96.0.10")} <= v4
    rows = {r.interface: r for r in parse_brief(text)}
    assert rows["kube-ipvs0"].state == "DOWN" and rows["eth0"].state in ("UP", "LOWERLAYERDOWN")
    # -4 prints the same rows with fewer addresses; `ip -br link` shows interfaces, never an address
    assert sniff(listings["addr4"], ()).kind == Kind.IP_ADDR
    names, bound = bound_addresses(listings["link"])
    assert "kube-ipvs0" in names and bound == []


def test_the_node_s_addresses_are_read_and_kube_ipvs0_shows_ipvs_mode(listings: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "ip-br.txt").write_text(listings["addr"])
    report, ev = diagnose_paths([tmp_path / "ip-br.txt"])
    assert [i.kind for i in report.inputs] == [Kind.IP_ADDR.value]
    assert not report.problems, report.problems  # read, not "no address could be read from it"
    facts = Facts(ev)
    assert str(facts.host_addresses[0]) == NODE_IP  # the uplink's address first, never kube-ipvs0's
    assert "10.96.0.1" not in {str(a) for a in facts.host_addresses}
    assert facts.kube_ipvs0 is not None and {str(a) for a in facts.kube_ipvs0} == {"10.96.0.1", "10.96.0.10"}
    assert facts.running_mode.mode == "ipvs"


def test_a_service_address_that_is_the_node_s_own_is_found(listings: dict[str, str], diagnose: Diag) -> None:
    svc = (
        "NAME         TYPE           CLUSTER-IP     EXTERNAL-IP     PORT(S)                      AGE\n"
        f"ingress      LoadBalancer   10.96.38.4     {NODE_IP}   80:31080/TCP,443:31443/TCP   3d\n"
    )
    r = diagnose({"svc.txt": svc, "ip-br.txt": listings["addr"]})
    (f,) = [f for f in r.findings if f.code == "KP209"]
    assert NODE_IP in f.summary and any("eth0" in c.text and NODE_IP in c.text for c in f.evidence), f
    # the Service addresses on kube-ipvs0 are not the node's
    r = diagnose({"svc.txt": svc.replace(NODE_IP, "10.96.0.10 "), "ip-br.txt": listings["addr"]})
    assert [f for f in r.findings if f.code == "KP209"] == []
