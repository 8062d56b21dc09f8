"""bench/gen_cluster.py --mode nftables against real nftables: the generated ruleset.nft is loaded
with `nft -f` into a throw-away network namespace and listed back with `nft -j list ruleset`, which
must print the generated nft-ruleset.json. Also: both modes write the same cluster.json, the chain
names are kube-proxy's, and the base objects are those of the upstream fixture."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import UPSTREAM
from lab.netns import Netns, list_netns, nft_unavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gen_cluster  # type: ignore[import-not-found]

PREFIX = "kpdgen-"  # namespaces are kpdgen-<pid>-<8 hex digits> (lab.netns.Netns), deleted after each test
FIXTURE = UPSTREAM / "nftables" / "TestOverallNFTablesRules"


needs_nft = pytest.mark.skipif(nft_unavailable(PREFIX) is not None, reason=str(nft_unavailable(PREFIX)))


def _strip(node: Any) -> Any:
    """The listing without "handle" keys (anywhere) and without the metainfo object."""
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "handle"}
    if isinstance(node, list):
        return [_strip(x) for x in node if not (isinstance(x, dict) and "metainfo" in x)]
    return node


def _handles(listing: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [
        (kind, obj.get("name", obj.get("chain", "")), obj["handle"])
        for item in listing["nftables"]
        for kind, obj in item.items()
        if "handle" in obj
    ]


@needs_nft
@pytest.mark.parametrize(("n", "e"), [(20, 3), (20, 1)])
def test_nft_lists_exactly_the_generated_json(tmp_path: Path, n: int, e: int) -> None:
    js, _ = gen_cluster.write(tmp_path, n, e, mode="nftables")
    with Netns(prefix=PREFIX) as ns:
        ns.check(["nft", "-f", str(tmp_path / "ruleset.nft")])
        real = json.loads(ns.check(["nft", "-j", "list", "ruleset"]))
    assert ns.name not in list_netns(PREFIX)
    mine = json.loads(js.read_text())
    # nft sorts set and map elements when it lists them, so the order is deterministic and compared
    # as it is (the generator reproduces nft's sort), as is the order of every other object.
    assert _strip(real) == _strip(mine)
    # Handles too: the generator numbers objects as the kernel does when ruleset.nft is loaded
    # into an empty namespace.
    assert _handles(real) == _handles(mine)
    chains = [x["chain"]["name"] for x in mine["nftables"] if "chain" in x]
    assert len([c for c in chains if c.startswith("endpoint-")]) == n * e
    assert len([c for c in chains if c.startswith("external-")]) == (n + 4) // 5
    (service_ips,) = [x["map"] for x in mine["nftables"] if x.get("map", {}).get("name") == "service-ips"]
    assert len(service_ips["elem"]) == n


@pytest.mark.parametrize(("n", "e"), [(20, 3), (20, 1)])
def test_both_modes_write_the_same_cluster_json(tmp_path: Path, n: int, e: int) -> None:
    _, ipt = gen_cluster.write(tmp_path / "iptables", n, e)
    _, nft = gen_cluster.write(tmp_path / "nftables", n, e, mode="nftables")
    assert ipt.read_bytes() == nft.read_bytes()
    assert sorted(p.name for p in (tmp_path / "nftables").iterdir()) == [
        "cluster.json",
        "nft-ruleset.json",
        "ruleset.nft",
    ]


def test_chain_names_are_kube_proxys() -> None:
    """The generator's naming reproduces the upstream fixture's names for the same identity."""
    text = (FIXTURE.with_suffix(".nft")).read_text()
    assert "add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80\n" in text
    assert gen_cluster.nft_service_chain("service", "ns1", "svc1", "p80") == "service-ULMVA6XW-ns1/svc1/tcp/p80"
    names = set(re.findall(r"add chain ip kube-proxy (\S+/\S+)", text))
    assert len(names) == 16  # 5 service, 4 external, 1 firewall, 6 endpoint chains
    for chain in names:
        prefix, _, readable = chain.split("-", 2)
        m = re.fullmatch(r"(ns\d)/(svc\d)/tcp/(p80)(?:__([\d.]+)/(\d+))?", readable)
        assert m is not None, chain
        ns, svc, port, ip, target = m.groups()
        if prefix == "endpoint":
            assert gen_cluster.nft_endpoint_chain(ns, svc, port, ip, int(target)) == chain
        else:
            assert gen_cluster.nft_service_chain(prefix, ns, svc, port) == chain


def test_base_objects_are_the_upstream_ones(tmp_path: Path) -> None:
    """Sets, maps, base and helper chains and their rules, as nft lists the upstream fixture's
    (elements aside; the drop rule names the generator's service CIDR instead of 172.30.0.0/16)."""
    js, _ = gen_cluster.write(tmp_path, 3, 2, mode="nftables")

    def base(listing: dict[str, Any]) -> list[Any]:
        out = []
        for item in _strip(listing)["nftables"]:
            (kind, obj), *_ = item.items()
            name = obj.get("chain", obj.get("name", ""))
            if kind == "table" or "/" in name:
                continue
            out.append({kind: {k: v for k, v in obj.items() if k != "elem"}})
        return sorted(out, key=lambda x: json.dumps(x, sort_keys=True))

    upstream = json.loads(FIXTURE.with_suffix(".ruleset.json").read_text())
    cidr = {"prefix": {"addr": "172.30.0.0", "len": 16}}
    ours = json.dumps(base(json.loads(js.read_text())))
    addr, length = gen_cluster.SERVICE_CIDR.split("/")
    ours = ours.replace(json.dumps({"prefix": {"addr": addr, "len": int(length)}}), json.dumps(cidr))
    assert json.loads(ours) == base(upstream)
