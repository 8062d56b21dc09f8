"""A lab node run by the real programs: kube-apiserver v1.20 with etcd, kubelet's iptables chains
written with the commands kubelet runs, and a real kube-proxy v1.20 programming the node's rules.

The node is a network namespace (:class:`.topology.Lab`: a client, and one namespace per Pod
answering on its own address); the control plane (:class:`.control_plane.ControlPlane`) runs in
that same namespace, so kube-proxy reaches the apiserver on the node's own loopback, as a
control-plane node's does. kube-proxy runs in iptables mode on the chosen backend: its
``iptables``, ``iptables-save`` and ``iptables-restore`` are the backend's (a ``PATH`` of links to
``xtables-legacy-multi`` or ``xtables-nft-multi``, as a kube-proxy image's alternatives are), with
``conntrack.maxPerCore: 0`` and the conntrack timeouts left alone (``nf_conntrack_max`` is read-only
outside the initial namespace). Tests create the cluster's objects through the real API and wait
until kube-proxy has synced them (:meth:`RealNode.wait_synced`).

    with real_node(binaries, backend="nft") as rn:
        ip = rn.service("web", endpoints=["10.180.0.1", "10.180.0.2"])
        rn.wait_synced()
        with rn.lab.servers(8080):
            rn.lab.connect(ip, 80, count=4)

Everything is stopped and deleted when the block ends, also when it raised.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .control_plane import Binaries, ControlPlane, _kill_with_parent, endpointslice, stop
from .topology import Lab

NODE = "lab-node"
NODE_IP, CLIENT_IP = "192.168.0.2", "192.168.0.100"
PODS = ["10.180.0.1", "10.180.0.2", "10.180.0.3"]
CLUSTER_CIDR = "10.180.0.0/16"
TARGET_PORT = 8080
MULTI = {"legacy": "/usr/sbin/xtables-legacy-multi", "nft": "/usr/sbin/xtables-nft-multi"}
TOOLS = ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore")
SYNCED = "syncProxyRules took"  # kube-proxy 1.20's line after every sync (proxier.go)


def kubelet_commands(drop_bit: int = 15, masq_bit: int = 14) -> list[list[str]]:
    """What kubelet 1.20's ``syncNetworkUtil`` runs for IPv4 (pkg/kubelet/kubelet_network_linux.go):
    each ``EnsureChain`` a ``-N``, each ``EnsureRule`` a ``-C`` and, when it fails, ``-A`` or
    ``-I``. Marks as kubelet prints them (``%#08x``)."""
    drop, masq = f"{1 << drop_bit:#08x}", f"{1 << masq_bit:#08x}"
    chains = [["-N", "KUBE-MARK-DROP", "-t", "nat"], ["-N", "KUBE-FIREWALL", "-t", "filter"],
              ["-N", "KUBE-MARK-MASQ", "-t", "nat"], ["-N", "KUBE-POSTROUTING", "-t", "nat"]]  # fmt: skip
    rules: list[tuple[str, str, str, list[str]]] = [
        ("-A", "nat", "KUBE-MARK-DROP", ["-j", "MARK", "--or-mark", drop]),
        ("-A", "filter", "KUBE-FIREWALL", ["-m", "comment", "--comment", "kubernetes firewall for dropping marked packets",
                                           "-m", "mark", "--mark", f"{drop}/{drop}", "-j", "DROP"]),
        ("-A", "filter", "KUBE-FIREWALL", ["-m", "comment", "--comment", "block incoming localnet connections",
                                           "--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8", "-m", "conntrack",
                                           "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP"]),
        ("-I", "filter", "OUTPUT", ["-j", "KUBE-FIREWALL"]),
        ("-I", "filter", "INPUT", ["-j", "KUBE-FIREWALL"]),
        ("-A", "nat", "KUBE-MARK-MASQ", ["-j", "MARK", "--or-mark", masq]),
        ("-I", "nat", "POSTROUTING", ["-m", "comment", "--comment", "kubernetes postrouting rules",
                                      "-j", "KUBE-POSTROUTING"]),
        ("-A", "nat", "KUBE-POSTROUTING", ["-m", "mark", "!", "--mark", f"{masq}/{masq}", "-j", "RETURN"]),
        ("-A", "nat", "KUBE-POSTROUTING", ["-j", "MARK", "--xor-mark", masq]),
        ("-A", "nat", "KUBE-POSTROUTING", ["-m", "comment", "--comment", "kubernetes service traffic requiring SNAT",
                                           "-j", "MASQUERADE", "--random-fully"]),
    ]  # fmt: skip
    out = [["-w", *c] for c in chains]
    for op, table, chain, args in rules:
        out.append(["-w", "-C", chain, "-t", table, *args])
        out.append(["-w", op, chain, "-t", table, *args])
    return out


@dataclass
class RealNode:
    """The running node; see the module docstring."""

    lab: Lab
    cp: ControlPlane
    binaries: Binaries
    backend: str
    dir: Path
    proxy: subprocess.Popen[bytes] | None = None
    proxy_log: Path = field(default_factory=Path)
    proxy_starts: int = 0
    _log_handle: Any = None
    # syncs logged before the first change since the last wait: a sync after it has seen the change
    _before_change: int | None = None

    # -- kubelet and kube-proxy ------------------------------------------------------------

    def iptables(self, backend: str | None = None) -> str:
        return f"iptables-{backend or self.backend}"

    def kubelet_chains(self, backend: str | None = None) -> None:
        """Run kubelet's commands on ``backend`` (its ``-C`` checks fail the first time: then the
        ``-A``/``-I`` after it runs, as kubelet's EnsureRule does)."""
        cmds = kubelet_commands()
        i = 0
        while i < len(cmds):
            argv = [self.iptables(backend), *cmds[i]]
            res = self.lab.node.run(argv, timeout=30)
            if "-C" in cmds[i]:
                if res.returncode != 0:
                    self.lab.node.check([self.iptables(backend), *cmds[i + 1]])
                i += 2
                continue
            i += 1

    def start_kube_proxy(self, *extra: str) -> None:
        """kube-proxy in the node namespace, logging to ``proxy_log``; returns once it synced."""
        assert self.proxy is None or self.proxy.poll() is not None, "kube-proxy already runs"
        bindir = self.dir / f"bin-{self.backend}"
        if not bindir.exists():
            bindir.mkdir()
            for tool in TOOLS:
                (bindir / tool).symlink_to(MULTI[self.backend])
        self.proxy_log = self.dir / "kube-proxy.log"
        self._log_handle = open(self.proxy_log, "ab")  # noqa: SIM115 - kept open while it runs
        before = self.syncs()
        argv = [
            "env", f"PATH={bindir}:/usr/sbin:/usr/bin:/sbin:/bin",
            str(self.binaries.kube_proxy),
            f"--kubeconfig={self.cp.kubeconfig_in_netns}",
            f"--hostname-override={NODE}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={CLUSTER_CIDR}",
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--v=2",
            *extra,
        ]  # fmt: skip
        self.proxy = subprocess.Popen(
            self.lab.node.exec_argv(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            preexec_fn=_kill_with_parent,
        )
        self.proxy_starts += 1
        self._until(lambda: self.syncs() > before, "kube-proxy's first sync", 60)

    def stop_kube_proxy(self) -> None:
        if self.proxy is not None:
            stop(self.proxy)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def proxy_log_text(self) -> str:
        try:
            return self.proxy_log.read_text(errors="replace")
        except OSError:
            return ""

    def syncs(self) -> int:
        """How many syncs kube-proxy has logged (all its runs)."""
        return self.proxy_log_text().count(SYNCED)

    def wait_synced(self, after: int | None = None, timeout: float = 30) -> None:
        """Until kube-proxy has logged a sync after ``after`` syncs (default: the count before the
        first change made since the last wait, else now: a sync that came before this call but
        after the change counts) and then been quiet for a second (its minSyncPeriod: a change
        arriving during a sync gets one more)."""
        start = after if after is not None else self._before_change if self._before_change is not None else self.syncs()
        self._before_change = None
        self._until(lambda: self.syncs() > start, "a kube-proxy sync", timeout)
        last = self.syncs()
        while True:
            time.sleep(1.2)
            now = self.syncs()
            if now == last:
                return
            last = now

    def _until(self, ok: Any, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not ok():
            if self.proxy is not None and self.proxy.poll() is not None:
                raise RuntimeError(f"kube-proxy exited ({self.proxy.returncode}) before {what}:\n"
                                   + "\n".join(self.proxy_log_text().splitlines()[-30:]))  # fmt: skip
            if time.monotonic() > end:
                raise RuntimeError(
                    f"no {what} after {timeout}s:\n" + "\n".join(self.proxy_log_text().splitlines()[-30:])
                )
            time.sleep(0.2)

    # -- the cluster's objects -------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        if method != "GET" and self._before_change is None and self.proxy is not None:
            self._before_change = self.syncs()
        status, out = self.cp.request(method, path, body)
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {out}")
        return out

    def service(self, name: str, endpoints: list[str], port: int = 80, namespace: str = "default", **spec: Any) -> str:
        """A Service with one port and its EndpointSlice (v1beta1, as 1.20 serves them); its ClusterIP."""
        body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"app": name},
                         "ports": [{"name": "http", "port": port, "targetPort": TARGET_PORT}], **spec}}  # fmt: skip
        svc = self.api("POST", f"/api/v1/namespaces/{namespace}/services", body)
        self.set_endpoints(name, endpoints, namespace, create=True)
        return str(svc["spec"]["clusterIP"])

    def set_endpoints(
        self, name: str, ips: list[str], namespace: str = "default", *, create: bool = False, ready: bool = True
    ) -> None:
        """The Service's one EndpointSlice (``<name>-1``) holds exactly ``ips``."""
        eps = [{"addresses": [ip], "conditions": {"ready": ready}, "nodeName": NODE} for ip in ips]
        body = endpointslice(f"{name}-1", name, eps, [{"name": "http", "port": TARGET_PORT, "protocol": "TCP"}])
        path = f"/apis/discovery.k8s.io/v1beta1/namespaces/{namespace}/endpointslices"
        if create:
            self.api("POST", path, body)
            return
        current = self.api("GET", f"{path}/{name}-1")
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.api("PUT", f"{path}/{name}-1", body)

    def node_condition(self, type_: str = "KubeProxyProblem") -> dict[str, Any] | None:
        node = self.api("GET", f"/api/v1/nodes/{NODE}")
        return next((c for c in node.get("status", {}).get("conditions") or [] if c.get("type") == type_), None)

    def events(self) -> list[dict[str, Any]]:
        out = self.api("GET", "/api/v1/events?fieldSelector=involvedObject.kind%3DNode%2Csource%3Dkpdoctor")
        return list(out.get("items") or [])

    def rules(self, backend: str | None = None) -> str:
        return self.lab.node.check([f"{self.iptables(backend)}-save"])


@contextlib.contextmanager
def real_node(
    binaries: Binaries,
    backend: str = "legacy",
    pods: list[str] = PODS,
    kubelet_backend: str | None = None,
    start_proxy: bool = True,
) -> Iterator[RealNode]:
    """The lab node with its control plane, kubelet's chains on ``kubelet_backend`` (default: the
    same as kube-proxy's, as on a healthy node) and kube-proxy on ``backend``."""
    workdir = Path(tempfile.mkdtemp(prefix="kpd-node-"))
    with Lab(NODE_IP, CLIENT_IP, pods) as lab, ControlPlane(binaries, netns=lab.node) as cp:
        rn = RealNode(lab, cp, binaries, backend, workdir)
        try:
            # kubelet registers its Node with its addresses (a create keeps a Node's status)
            rn.api("POST", "/api/v1/nodes", {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
                "spec": {"podCIDR": "10.180.0.0/24"},
                "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": NODE}]},
            })  # fmt: skip
            rn.kubelet_chains(kubelet_backend)
            if start_proxy:
                rn.start_kube_proxy()
            yield rn
        finally:
            rn.stop_kube_proxy()
            shutil.rmtree(workdir, ignore_errors=True)


def in_node(rn: RealNode, argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``argv`` run as root in the node namespace (kpdoctor as a user on that node runs it)."""
    env_path = os.environ.get("PATH", "")
    return rn.lab.node.run(["env", f"PATH={env_path}", *argv], timeout=timeout)
