"""bench/gen_cluster.py --mode ipvs: the node a kube-proxy 1.28 IPVS proxier leaves, for the cluster
the other modes describe.

* `ipvsadm -Sn`: read here with its own small parser and checked against cluster.json (a virtual
  server per ClusterIP:port and per node address:NodePort, the endpoints as masqueraded real
  servers of weight 1, in ipvsadm's order).
* `ipset save`: restored with the real ipset tool in a throw-away network namespace and saved again,
  which must give the same bytes; and built there the way kube-proxy builds it (created with
  hashsize 1024, members added one by one), which must save to the same bytes too, hash-table
  growth included.
* `iptables-save`: restored with iptables-legacy-restore in that namespace (the sets exist there)
  and saved again; and the kube-proxy rules of the real capture tests/data/modes/ipvs-healthy.
* `ip addr`: the fixture's lo and eth0, and every ClusterIP on kube-ipvs0.
* The same N and E give the same bytes, and the same cluster.json as the other modes.
* `kpdoctor verify` on the node is clean, and not clean when a real server is taken away.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gen_cluster  # type: ignore[import-not-found,unused-ignore]

FIXTURE = DATA / "modes" / "ipvs-healthy"
ROOT = Path(__file__).resolve().parents[1]
N, E = 30, 3  # 6 NodePort Services (every fifth)

_ADD_VS = re.compile(r"-A -([tu]) (\d+\.\d+\.\d+\.\d+):(\d+) -s (\w+)")
_ADD_RS = re.compile(r"-a -([tu]) (\d+\.\d+\.\d+\.\d+):(\d+) -r (\d+\.\d+\.\d+\.\d+):(\d+) -([mgi]) -w (\d+)")


def _no_ipset() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "ipset", "iptables-legacy-restore", "iptables-legacy-save"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


needs_ipset = pytest.mark.skipif(_no_ipset() is not None, reason=str(_no_ipset()))


def _run(argv: list[str], stdin: Path | None = None, timeout: float = 120) -> str:
    """Run a fixed argv; fail the test with its stderr when it fails."""
    if stdin is not None:
        with stdin.open("rb") as fh:
            res = subprocess.run(argv, stdin=fh, capture_output=True, timeout=timeout, check=False)
    else:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{argv}: {res.stderr.decode(errors='replace')}"
    return res.stdout.decode()


def _netns_names() -> list[str]:
    return [line.split()[0] for line in _run(["ip", "netns", "list"], timeout=10).splitlines() if line.strip()]


@contextmanager
def _netns() -> Iterator[str]:
    """A throw-away network namespace (ipset and iptables are per namespace), always deleted."""
    name = f"kpd-bench-ipset-{os.getpid()}"
    _run(["ip", "netns", "add", name], timeout=10)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10, check=False)


def _in(ns: str, argv: list[str], stdin: Path | None = None) -> str:
    return _run(["ip", "netns", "exec", ns, *argv], stdin=stdin)


def _cluster(path: Path) -> tuple[str, list[dict[str, Any]]]:
    """The node's InternalIP and, per Service port, (clusterIP, port, nodePort, endpoints "ip:port"),
    read from cluster.json the way a reader of the Kubernetes API would."""
    items = json.loads(path.read_text())["items"]
    (node,) = [i for i in items if i["kind"] == "Node"]
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    slices = {
        (i["metadata"]["namespace"], i["metadata"]["labels"]["kubernetes.io/service-name"]): i
        for i in items
        if i["kind"] == "EndpointSlice"
    }
    out = []
    for svc in (i for i in items if i["kind"] == "Service"):
        sl = slices[(svc["metadata"]["namespace"], svc["metadata"]["name"])]
        for port in svc["spec"]["ports"]:
            (target,) = [p["port"] for p in sl["ports"] if p["name"] == port["name"]]
            eps = [f"{a}:{target}" for ep in sl["endpoints"] if ep["conditions"]["ready"] for a in ep["addresses"]]
            out.append(
                {
                    "ip": svc["spec"]["clusterIP"],
                    "port": port["port"],
                    "proto": port["protocol"],
                    "nodePort": port.get("nodePort"),
                    "eps": eps,
                }
            )
    return node_ip, out


def _addr_key(hostport: str) -> tuple[int, int]:
    host, _, port = hostport.rpartition(":")
    return int(ipaddress.IPv4Address(host)), int(port)


def _parse_save(text: str) -> dict[tuple[str, str], list[tuple[str, str, int]]]:
    """``ipvsadm -Sn``: virtual server (proto, addr:port) -> its real servers (addr:port, forward, weight),
    in the listed order (a dict keeps the virtual servers' order)."""
    vss: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    for line in text.splitlines():
        if m := _ADD_VS.fullmatch(line):
            assert m.group(4) == "rr", line
            key = ("TCP" if m.group(1) == "t" else "UDP", f"{m.group(2)}:{m.group(3)}")
            assert key not in vss, line
            vss[key] = []
        elif m := _ADD_RS.fullmatch(line):
            key = ("TCP" if m.group(1) == "t" else "UDP", f"{m.group(2)}:{m.group(3)}")
            assert key == list(vss)[-1], f"real server outside its virtual server: {line}"
            vss[key].append((f"{m.group(4)}:{m.group(5)}", m.group(6), int(m.group(7))))
        else:
            raise AssertionError(f"not an ipvsadm -Sn line: {line!r}")
    return vss


def test_ipvsadm_save_has_the_clusters_virtual_and_real_servers(tmp_path: Path) -> None:
    save, cl = gen_cluster.write(tmp_path, N, E, mode="ipvs")
    assert save == tmp_path / "ipvsadm-save.txt" and cl == tmp_path / "cluster.json"
    vss = _parse_save(save.read_text())
    node_ip, ports = _cluster(cl)
    want: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    for p in ports:
        reals = sorted(((ep, "m", 1) for ep in p["eps"]), key=lambda r: _addr_key(r[0]))
        want[(p["proto"], f"{p['ip']}:{p['port']}")] = reals
        if p["nodePort"]:
            want[(p["proto"], f"{node_ip}:{p['nodePort']}")] = reals
    assert vss == want  # the same servers, each with its real servers in ipvsadm's order
    assert len(vss) == N + 6 and all(len(r) == E for r in vss.values())
    # ipvsadm's order of virtual servers: protocol, then address as a number, then port
    # (ntohl(a) - ntohl(b) as an int: 192.168.0.2 - 172.16.x.y does not wrap, so the node's
    # NodePorts come last)
    keys = list(vss)
    assert keys == sorted(keys, key=lambda k: (k[0], *_addr_key(k[1])))
    assert keys[-1][1].startswith(f"{node_ip}:") and keys[0] == ("TCP", "172.16.0.0:80")
    # numeric, not textual, order of real servers: 10.0.0.8 .. 10.0.0.10 under 172.16.0.1
    assert [r[0] for r in vss[("TCP", "172.16.0.1:80")]] == ["10.0.0.8:8080", "10.0.0.9:8080", "10.0.0.10:8080"]


def _sets(text: str) -> dict[str, tuple[str, list[str]]]:
    """``ipset save``: name -> (the create line's options, members in order)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        kind, name, rest = line.split(" ", 2)
        if kind == "create":
            out[name] = (rest, [])
        else:
            assert kind == "add", line
            out[name][1].append(rest)
    return out


def test_ipset_save_holds_kube_proxys_sets(tmp_path: Path) -> None:
    gen_cluster.write(tmp_path, N, E, mode="ipvs")
    sets = _sets((tmp_path / "ipset-save.txt").read_text())
    listed = (FIXTURE / "ipset-list.txt").read_text()
    fixture = re.findall(r"^Name: (\S+)\nType: (\S+)\n", listed, re.M)
    # the IPv4 sets of the real capture, in its (creation) order, with its types
    assert [(name, opts.split()[0]) for name, (opts, _) in sets.items()] == [
        (name, ty) for name, ty in fixture if not name.startswith("KUBE-6-")
    ]
    for name, (opts, _) in sets.items():
        if opts.startswith("bitmap:"):
            assert opts == "bitmap:port range 0-65535", name
        else:
            assert re.fullmatch(
                r"hash:\S+ family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x[0-9a-f]{8}", opts
            ), name
    _, ports = _cluster(tmp_path / "cluster.json")
    members = {name: sorted(m) for name, (_, m) in sets.items() if m}
    assert members == {
        "KUBE-CLUSTER-IP": sorted(f"{p['ip']},tcp:{p['port']}" for p in ports),
        "KUBE-NODE-PORT-TCP": sorted(str(p["nodePort"]) for p in ports if p["nodePort"]),
        "KUBE-IPVS-IPS": sorted({p["ip"] for p in ports}),
    }
    # a bitmap lists its ports in order
    assert sets["KUBE-NODE-PORT-TCP"][1] == sorted(sets["KUBE-NODE-PORT-TCP"][1], key=int)


@needs_ipset
@pytest.mark.parametrize(("n", "e"), [(N, E), (5000, 1)])
def test_ipset_and_iptables_round_trip_through_the_real_tools(tmp_path: Path, n: int, e: int) -> None:
    """Restore ipset-save.txt, then iptables-save.txt (its rules match the sets), into an empty
    namespace and save both again. N = 5000: the two 5000-member hash sets have grown to 2048
    buckets, and `ipset save` says so."""
    gen_cluster.write(tmp_path, n, e, mode="ipvs")
    ipsets, rules = tmp_path / "ipset-save.txt", tmp_path / "iptables-save.txt"
    with _netns() as ns:
        _in(ns, ["ipset", "restore"], stdin=ipsets)
        saved = _in(ns, ["ipset", "save"])
        _in(ns, ["iptables-legacy-restore"], stdin=rules)
        ipt = _in(ns, ["iptables-legacy-save"])
    assert ns not in _netns_names()
    assert saved == ipsets.read_text()
    if n == 5000:
        assert "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 2048 " in saved

    def tables(text: str) -> dict[str, list[str]]:
        # iptables-legacy-save prints the tables in the kernel's order (filter first in a new
        # namespace, nat first on the fixture's node) and dates its comments
        out: dict[str, list[str]] = {}
        for line in text.splitlines():
            if line.startswith("*"):
                cur = out.setdefault(line, [])
            elif not line.startswith("#"):
                cur.append(line)
        return out

    assert tables(ipt) == tables(rules.read_text())


@needs_ipset
def test_ipset_save_is_what_kube_proxys_way_of_filling_the_sets_saves(tmp_path: Path) -> None:
    """kube-proxy creates each hash set with hashsize 1024 and adds the members one at a time (the
    seed is the kernel's random pick there; given here, as the file holds it). The kernel's table
    grows on the way (5000 members: 1024 -> 2048 buckets) and `ipset save` lists the members in
    the grown table's order: the generator reproduces both."""
    n = 5000
    gen_cluster.write(tmp_path, n, 1, mode="ipvs")
    generated = (tmp_path / "ipset-save.txt").read_text()
    svcs = json.loads((tmp_path / "cluster.json").read_text())["items"]
    ips = [i["spec"]["clusterIP"] for i in svcs if i["kind"] == "Service"]
    nodeports = [
        i["spec"]["ports"][0]["nodePort"] for i in svcs if i["kind"] == "Service" and i["spec"]["type"] == "NodePort"
    ]
    members = {
        "KUBE-CLUSTER-IP": [f"{ip},tcp:80" for ip in ips],
        "KUBE-NODE-PORT-TCP": [str(p) for p in nodeports],
        "KUBE-IPVS-IPS": ips,
    }
    script = []
    for name, (opts, _) in _sets(generated).items():
        opts = re.sub(r"hashsize \d+", "hashsize 1024", opts)
        script.append(f"create {name} {opts}")
        script += [f"add {name} {m}" for m in members.get(name, [])]
    build = tmp_path / "kube-proxy-adds.txt"
    build.write_text("\n".join(script) + "\n")
    with _netns() as ns:
        _in(ns, ["ipset", "restore"], stdin=build)
        saved = _in(ns, ["ipset", "save"])
    assert ns not in _netns_names()
    assert "hashsize 2048" in saved
    assert saved == generated


def test_iptables_save_is_the_fixtures_kube_proxy_layout(tmp_path: Path) -> None:
    """The real capture's rules less kubelet's chains, its mangle table and its hairpin rule (no
    endpoint is on the bench node, so KUBE-LOOP-BACK is empty and kube-proxy writes no rule for
    it), with the bench cluster's pod CIDR."""
    gen_cluster.write(tmp_path, N, E, mode="ipvs")
    mine = (tmp_path / "iptables-save.txt").read_text().splitlines()
    real = []
    table = ""
    for line in (FIXTURE / "iptables-save.txt").read_text().splitlines():
        table = line if line.startswith("*") else table
        if table == "*mangle" or "KUBE-FIREWALL" in line or "KUBE-KUBELET-CANARY" in line or "KUBE-LOOP-BACK" in line:
            continue
        real.append(line.replace("10.244.0.0/16", gen_cluster.POD_CIDR))
    date = re.compile(r" on \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$")
    strip = [date.sub("", x) for x in real]
    # the capture's mangle table was the last: its header line is the one left over
    assert strip[-1] == "# Generated by iptables-save v1.8.9"
    assert [date.sub("", x) for x in mine] == strip[:-1]


def test_ip_addr_binds_every_cluster_ip_to_kube_ipvs0(tmp_path: Path) -> None:
    gen_cluster.write(tmp_path, N, E, mode="ipvs")
    mine = (tmp_path / "ip-addr.txt").read_text().splitlines()
    real = (FIXTURE / "ip-addr.txt").read_text().splitlines()
    head = real.index(next(x for x in real if x.startswith("4: kube-ipvs0:"))) + 2
    assert mine[:head] == real[:head]  # lo, eth0 (192.168.0.2/24 there too) and kube-ipvs0's link lines
    _, ports = _cluster(tmp_path / "cluster.json")
    bound = [f"    inet {p['ip']}/32 scope global kube-ipvs0" for p in ports]
    assert mine[head::2] == bound
    assert set(mine[head + 1 :: 2]) == {"       valid_lft forever preferred_lft forever"} == set(real[head + 1 :: 2])
    assert all(re.fullmatch(r"    inet [\d.]+/32 scope global kube-ipvs0", x) for x in real[head::2])


def test_the_same_sizes_give_the_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    gen_cluster.write(a, N, E, mode="ipvs")
    gen_cluster.write(b, N, E, mode="ipvs")
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted([*gen_cluster.IPVS_FILES, "cluster.json"])
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    _, ipt = gen_cluster.write(tmp_path / "iptables", N, E)
    _, nft = gen_cluster.write(tmp_path / "nftables", N, E, mode="nftables")
    assert (a / "cluster.json").read_bytes() == ipt.read_bytes() == nft.read_bytes()


def _verify(folder: Path) -> subprocess.CompletedProcess[str]:
    files = [str(folder / name) for name in gen_cluster.IPVS_FILES] + [str(folder / "cluster.json")]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "kpdoctor", "verify", *files],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_kpdoctor_verifies_the_generated_ipvs_node_clean(tmp_path: Path) -> None:
    gen_cluster.write(tmp_path, N, E, mode="ipvs")
    res = _verify(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{N} Service(s) checked" in res.stdout and ": clean" in res.stdout
    assert "ipvsadm-save.txt -> ipvsadm output" in res.stdout
    # ... and not clean once a real server is gone (the check is not vacuous)
    save = tmp_path / "ipvsadm-save.txt"
    text = save.read_text()
    gone = "-a -t 172.16.0.7:80 -r 10.0.0.57:8080 -m -w 1\n"
    assert gone in text
    save.write_text(text.replace(gone, ""))
    res = _verify(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "ns7/svc7:http" in res.stdout and "mismatch" in res.stdout
