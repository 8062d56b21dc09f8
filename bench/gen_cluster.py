"""Write a kube-proxy-shaped iptables-save dump plus the matching Services and EndpointSlices.

N Services x E endpoints (default 5), in the modern (1.28+) layout kube-proxy writes: a
KUBE-SERVICES rule per cluster IP, a KUBE-SVC chain with one `statistic` rule per endpoint, a
KUBE-SEP chain per endpoint; every fifth Service is a NodePort (KUBE-NODEPORTS + KUBE-EXT).
Chain names use kube-proxy's own hash (sha256 -> base32, 16 characters), so the dump looks like a
real node's. Deterministic: the same N gives the same files.

    python bench/gen_cluster.py OUTDIR --services 10000 [--endpoints 5]

writes OUTDIR/iptables-save.txt (nat + filter, as `iptables-save` prints it) and
OUTDIR/cluster.json (a List of Services, EndpointSlices and the Node), plus the restore payload
OUTDIR/restore.txt (the same rules, for `iptables-legacy-restore --test`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from pathlib import Path

NODE = "bench-node"
NODE_IP = "192.168.0.2"
POD_CIDR = "10.0.0.0/8"


def _hash(s: str) -> str:
    return base64.b32encode(hashlib.sha256(s.encode()).digest()).decode()[:16]


def _svc_ip(i: int) -> str:
    return f"172.{16 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"


def _ep_ip(i: int, j: int, stride: int = 8) -> str:
    k = i * stride + j
    return f"10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}"


def generate(n: int, e: int) -> tuple[str, dict[str, object]]:
    decl_nat: list[str] = []
    rules_nat: list[str] = []
    svc_rules: list[str] = []
    np_rules: list[str] = []
    items: list[dict[str, object]] = []
    for i in range(n):
        ns, name = f"ns{i % 50}", f"svc{i}"
        spn = f"{ns}/{name}:http"
        ip = _svc_ip(i)
        nodeport = 30000 + (i // 5) % 2768 if i % 5 == 0 and i // 5 < 2768 else None
        svc_chain = f"KUBE-SVC-{_hash(spn + 'tcp')}"
        decl_nat.append(f":{svc_chain} - [0:0]")
        svc_rules.append(
            f'-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment "{spn} cluster IP" -m tcp --dport 80 '
            f"-j {svc_chain}"
        )
        rules_nat.append(
            f'-A {svc_chain} ! -s {POD_CIDR} -d {ip}/32 -p tcp -m comment --comment "{spn} cluster IP" '
            f"-m tcp --dport 80 -j KUBE-MARK-MASQ"
        )
        if nodeport is not None:
            ext = f"KUBE-EXT-{_hash(spn + 'tcp')}"
            decl_nat.append(f":{ext} - [0:0]")
            np_rules.append(f'-A KUBE-NODEPORTS -p tcp -m comment --comment "{spn}" -m tcp --dport {nodeport} -j {ext}')
            rules_nat.append(
                f'-A {ext} -m comment --comment "masquerade traffic for {spn} external destinations" -j KUBE-MARK-MASQ'
            )
            rules_nat.append(f"-A {ext} -j {svc_chain}")
        eps = sorted((_ep_ip(i, j, max(8, e)) for j in range(e)), key=lambda a: f"{a}:8080")
        for j, ep in enumerate(eps):
            sep = f"KUBE-SEP-{_hash(spn + 'tcp' + ep + ':8080')}"
            decl_nat.append(f":{sep} - [0:0]")
            stat = f" -m statistic --mode random --probability {1 / (e - j):.11f}" if j < e - 1 else ""
            rules_nat.append(f'-A {svc_chain} -m comment --comment "{spn} -> {ep}:8080"{stat} -j {sep}')
            rules_nat.append(f'-A {sep} -s {ep}/32 -m comment --comment "{spn}" -j KUBE-MARK-MASQ')
            rules_nat.append(f'-A {sep} -p tcp -m comment --comment "{spn}" -m tcp -j DNAT --to-destination {ep}:8080')
        spec: dict[str, object] = {
            "type": "NodePort" if nodeport else "ClusterIP",
            "clusterIP": ip,
            "clusterIPs": [ip],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
        }
        if nodeport:
            spec["ports"] = [{**spec["ports"][0], "nodePort": nodeport}]  # type: ignore[index]
        items.append({"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": ns, "name": name}, "spec": spec})
        items.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "namespace": ns,
                    "name": f"{name}-abcde",
                    "labels": {"kubernetes.io/service-name": name},
                },
                "addressType": "IPv4",
                "endpoints": [
                    {
                        "addresses": [ep],
                        "conditions": {"ready": True, "serving": True, "terminating": False},
                        "nodeName": f"node{j}",
                    }
                    for j, ep in enumerate(eps)
                ],
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            }
        )
    items.append(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
        }
    )
    head = [
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SERVICES - [0:0]",
    ]
    base = [
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE',
    ]
    tail = [
        '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in '
        'this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
        "COMMIT",
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":KUBE-FORWARD - [0:0]",
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
        "COMMIT",
    ]
    lines = head + decl_nat + base + np_rules + rules_nat + svc_rules + tail
    return "\n".join(lines) + "\n", {"apiVersion": "v1", "kind": "List", "items": items}


def write(out: Path, n: int, e: int) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    dump, cluster = generate(n, e)
    save = out / "iptables-save.txt"
    save.write_text(f"# Generated by iptables-save v1.8.9 on Sat Nov 21 10:00:00 2026\n{dump}# Completed\n")
    (out / "restore.txt").write_text(dump)
    cl = out / "cluster.json"
    cl.write_text(json.dumps(cluster))
    return save, cl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--endpoints", type=int, default=5)
    a = ap.parse_args()
    save, cl = write(a.out, a.services, a.endpoints)
    print(f"{save} ({save.stat().st_size / 1e6:.1f} MB), {cl} ({cl.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
