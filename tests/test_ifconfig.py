"""`ifconfig` output (net-tools 2.x, and the older form busybox and net-tools 1.60 print) read as
the node's interfaces: their MTUs for KP305 and their addresses for KP209, as `ip addr` is.

The listings are made here by the real programs in a network namespace the test creates and deletes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lab.netns import Netns, cleanup_stale, lab_available

from kpdoctor.bundle.sniff import sniff
from kpdoctor.model import Report
from kpdoctor.parse.links import parse_ip_link
from kpdoctor.parse.system import bound_addresses

Diag = Callable[..., Report]
pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))


@pytest.fixture(scope="module")
def listings() -> dict[str, str]:
    """An uplink eth0 (MTU 1450) and a Pod-facing cali0 (MTU 1500), as both ifconfigs print them."""
    cleanup_stale()
    with Netns() as ns:
        ns.check(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"])
        ns.check(["ip", "link", "add", "cali0", "type", "veth", "peer", "name", "cali0p"])
        ns.check(["ip", "link", "set", "eth0", "mtu", "1450", "up"])
        ns.check(["ip", "link", "set", "cali0", "mtu", "1500", "up"])
        ns.check(["ip", "addr", "add", "10.77.0.5/24", "dev", "eth0"])
        return {
            "net-tools": ns.check(["ifconfig", "eth0"]) + ns.check(["ifconfig", "cali0"]),
            "busybox": ns.check(["busybox", "ifconfig", "eth0"]) + ns.check(["busybox", "ifconfig", "cali0"]),
        }


@pytest.mark.parametrize("tool", ["net-tools", "busybox"])
def test_interfaces_mtus_and_addresses_are_read(listings: dict[str, str], tool: str) -> None:
    text = listings[tool]
    typed = sniff(text, ())
    assert typed.kind is not None and typed.kind.value == "ip link output"
    links = {ln.name: ln for ln in parse_ip_link(text)}
    assert (links["eth0"].mtu, links["cali0"].mtu) == (1450, 1500)
    assert links["eth0"].up and links["cali0"].up
    names, bound = bound_addresses(text)
    assert names == ["eth0", "cali0"]
    assert [(b.interface, str(b.address)) for b in bound if b.address.version == 4] == [("eth0", "10.77.0.5")]


@pytest.mark.parametrize("tool", ["net-tools", "busybox"])
def test_a_pod_interface_above_the_uplink_is_found(listings: dict[str, str], tool: str, diagnose: Diag) -> None:
    r = diagnose({"ifconfig.txt": listings[tool]})
    (f,) = [f for f in r.findings if f.code == "KP305"]
    assert "cali0 (1500)" in f.summary and "1450" in f.summary
