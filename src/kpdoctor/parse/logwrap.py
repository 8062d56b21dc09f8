"""Log line wrappers: what container runtimes, journald and kubectl put before klog's header.

A kube-proxy line reaches users in many wrappings:

* bare klog: ``E1008 21:01:55.367127  145725 proxier.go:1285] ...``
* CRI container log file: ``2019-10-23T20:56:35.955254605Z stderr F E1023 ...``
* docker json-file, already unwrapped by ``docker logs``
* journald / syslog, any locale: ``Oct 08 21:01:55 node3 kube-proxy[145725]: E1008 ...``,
  ``okt 08 21:01:55 ...``, ``10月 08 21:01:55 ...``, ``2024-10-08T21:01:55+0200 node3 k3s[1]: ...``
* ``kubectl logs --timestamps``: ``2023-11-13T16:15:07.928773015Z I1113 ...``
* ``kubectl logs --prefix``: ``[pod/kube-proxy-x7k2p/kube-proxy] I1113 ...``

``unwrap`` strips any combination and returns the wrapper's timestamp (when it has a full date),
which is better than klog's year-less one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.knowledge import kube_proxy_files

# klog header: level, MMDD, time, thread/pid, file:line]
KLOG_HEADER = lazy_re.compile(
    r"(?P<level>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?)\s+"
    r"(?P<pid>\d+) (?P<src>[^\s:\]]+(?::\d+)?)\] ?"
)
KLOG_HEADER_ANYWHERE = lazy_re.compile(r"(?:^|\s|\]|:\s)[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.\-/]+:\d+\]", re.M)

_PREFIX = lazy_re.compile(r"\[pod/[^/\]\s]+/[^\]\s]+\] |[\w.-]+ +\| ")  # kubectl --prefix; docker compose
_CRI = lazy_re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) (?:stdout|stderr) [FP] ")
_ISO_TS = lazy_re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")
# syslog/journald short format, month in any locale (1-5 non-space chars, maybe with a dot). A
# host name has no brackets: "TIME [ERROR] plugin/loop: ..." is CoreDNS's level, not a host.
_SYSLOG = lazy_re.compile(
    r"(?P<mon>[^\s\d][^\s]{0,5}|\d{1,2}月) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?P<host>[^\s\[\]]+) (?P<ident>[\w.@/\-]+)(?:\[(?P<pid>\d+)\])?: "
)
_ISO_SYSLOG = lazy_re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) (?P<host>[^\s\[\]]+) "
    r"(?P<ident>[\w.@/\-]+)(?:\[(?P<pid>\d+)\])?: "
)
# k3s/rke2 logrus lines: time="2024-10-08T21:01:55Z" level=error msg="..."
LOGRUS = lazy_re.compile(r'time="(?P<ts>[^"]+)" level=(?P<level>\w+) msg=')
# Calico's own format (felix, confd, the CNI plugin):
# 2018-09-07 08:02:59.942 [ERROR][15833] table.go 778: Failed to program iptables ...
FELIX = lazy_re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \[(?P<level>[A-Z]+)\]\[(?P<pid>\d+)\] "
    r"(?P<src>[\w./-]+\.go) (?P<line>\d+): "
)
# Weave Net's own format (weaver, kube-utils, weave-npc: common/logging.go, every 2.x release):
# INFO: 2019/03/05 10:00:00.123456 text
WEAVE = lazy_re.compile(r"(?P<level>INFO|WARN|ERRO|FATA|PANI|DEBU): (?P<ts>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) ")
# Cilium's logrus (and, from 1.18, slog) text lines (pkg/logging: every 1.x release): no timestamp
# by default to 1.15, time="..." from 1.16; the subsys= field is Cilium's own (logfields.LogSubsys):
# level=error msg="Error while inserting service in LB map" error="..." subsys=k8s-watcher
CILIUM = lazy_re.compile(r'(?:^|\s)level=\w+ msg=.*\ssubsys=[\w-]+')
# CoreDNS's own lines (plugin/pkg/log, every release: messages/coredns.yaml): "[LEVEL] " first, or after
# Go's log date (1.1.0-1.2.5: "2018/09/06 13:02:45 [INFO] ...") or RFC 3339 (1.2.6-1.6.2); kube-proxy
# never prints a bracketed level
COREDNS = lazy_re.compile(
    r"^(?:\d{4}[-/]\d\d[-/]\d\d(?:[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?)?\s+)?\s?\[(?:INFO|ERROR|WARNING|DEBUG|FATAL)\] "
)
# Log aggregators (stern, kubetail, kubectl logs -l ... piped through a prefixer): "POD CONTAINER "
# before the line. Taken off only when a log header follows, so two words of prose never are.
_AGGREGATOR = lazy_re.compile(
    r"(?P<pod>[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?) (?P<container>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?) +"
    r"(?=[IWEF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|time=\")"
)
_KLOG_START = lazy_re.compile(r"[IWEF]\d{4} \d\d:\d\d:")
_KUBECTL_PREFIX = lazy_re.compile(r"\[pod/[^/\]\s]+/(?P<container>[^\]\s]+)\] ")


@dataclass(frozen=True, slots=True)
class Unwrapped:
    inner: str  # the text after every wrapper
    timestamp: str | None  # full-date timestamp from a wrapper, ISO 8601
    ident: str | None  # syslog identifier (kube-proxy, k3s, rke2, ...)
    container: str | None = None  # container name from a kubectl --prefix or aggregator prefix

    @property
    def source(self) -> str | None:
        """What the wrappers say wrote the line: the syslog identifier, else the container."""
        return self.ident or self.container


def unwrap(line: str) -> Unwrapped:
    """Strip the wrappers in front of a log line (in any order they can nest)."""
    ts: str | None = None
    ident: str | None = None
    container: str | None = None
    rest = line
    for _ in range(4):
        if _KLOG_START.match(rest):  # a klog header: no wrapper starts so (the common last step)
            break
        m = _PREFIX.match(rest)
        if m:
            if rest.startswith("[pod/"):
                k = _KUBECTL_PREFIX.match(rest)
                container = container or (k.group("container") if k else None)
            rest = rest[m.end() :]
            continue
        m = _CRI.match(rest)
        if m:
            ts = ts or m.group("ts")
            rest = rest[m.end() :]
            continue
        m = _ISO_SYSLOG.match(rest)
        if m and not KLOG_HEADER.match(rest, m.end(1) + 1):
            ts = ts or m.group("ts")
            ident = m.group("ident")
            rest = rest[m.end() :]
            continue
        m = _ISO_TS.match(rest)
        if m:
            ts = ts or m.group("ts")
            rest = rest[m.end() :]
            continue
        m = _SYSLOG.match(rest)
        if m and not KLOG_HEADER.match(rest):
            ident = m.group("ident")
            rest = rest[m.end() :]
            continue
        m = _AGGREGATOR.match(rest)
        if m:
            container = container or m.group("container")
            rest = rest[m.end() :]
            continue
        break
    return Unwrapped(rest, ts, ident, container)


def is_continuation(inner: str) -> bool:
    """A line that continues the previous record (multi-line ``err=<`` blocks, stack frames, and
    the step lines of a client-go trace: k8s.io/utils/trace writes ``Trace[ID]: ...`` lines
    under the record that opened it, with no header of their own)."""
    return inner.startswith((" ", "\t", ">")) or inner == "" or _TRACE_STEP.match(inner) is not None


_TRACE_STEP = lazy_re.compile(r"Trace\[\d+\]: ")


# -- Who wrote a line --------------------------------------------------------------------------
# Decided from the line itself, never from a file name (kubectl logs files are named anything):
# the syslog identifier or container name a wrapper carries, the klog source file, the log
# format, then a few messages only one component prints. Unknown stays unknown (None).

# Names a syslog identifier or container is matched against (first match wins: specific first).
_NAMED = lazy_re.compile(
    r"(?P<kp>kube-?proxy)|(?P<kubelet>kubelet)|(?P<flannel>flannel)|(?P<router>kube-router)|"
    r"(?P<calico>calico|felix|canal)|(?P<weave>weave)|(?P<cilium>cilium)|(?P<antrea>antrea)|(?P<kubevip>kube-vip)|"
    r"(?P<aws>aws-node|aws-k8s-agent|amazon-k8s-cni|aws-vpc-cni)|(?P<ovn>ovnkube|kube-ovn)|"
    r"(?P<dockerd>^dockerd|^docker$)|(?P<containerd>^containerd)|(?P<crio>^crio$|^cri-o)|"
    r"(?P<kernel>^kernel$)|(?P<firewalld>^firewalld$)|(?P<ingress>ingress)|(?P<coredns>coredns)|"
    r"(?P<kubedns>kube-?dns|dnsmasq)",
    re.I,
)
_NAMES = {
    "kp": "kube-proxy",
    "kubelet": "kubelet",
    "flannel": "flannel",
    "router": "kube-router",
    "calico": "calico-node",
    "weave": "weave",
    "cilium": "cilium",
    "antrea": "antrea",
    "kubevip": "kube-vip",
    "aws": "aws-node",
    "ovn": "ovn-kubernetes",
    "dockerd": "dockerd",
    "containerd": "containerd",
    "crio": "cri-o",
    "kernel": "kernel",
    "firewalld": "firewalld",
    "ingress": "ingress-controller",
    "coredns": "coredns",
    "kubedns": "kube-dns",
}
# Binaries that run several components (kube-proxy among them): the source file tells which.
ALL_IN_ONE = frozenset(
    {"k3s", "k3s-agent", "k3s-server", "rke2", "rke2-agent", "rke2-server", "localkube", "hyperkube", "kubelite"}
)
# klog source files only one component has (basenames). Files several share (iptables.go,
# server.go, config.go, main.go, reflector.go, ipset.go ...) tell nothing and are not listed.
# kube-proxy's are also every file its messages come from (knowledge.kube_proxy_files).
_SOURCE_FILES: dict[str, str] = {
    **dict.fromkeys(
        [
            "proxier.go",
            "server_others.go",
            "graceful_termination.go",
            "endpointslicecache.go",
            "conntrack.go",
            "healthcheck.go",
            "service_health.go",
            "servicechangetracker.go",
            "endpointschangetracker.go",
            "meta_proxier.go",
            "proxy_server.go",
            "cleanup.go",
        ],
        "kube-proxy",
    ),
    **dict.fromkeys(
        [
            "kubelet.go",
            "kubelet_node_status.go",
            "kubelet_pods.go",
            "kubelet_network.go",
            "kubelet_network_linux.go",
            "kubelet_volumes.go",
            "kubelet_getters.go",
            "pod_workers.go",
            "kuberuntime_manager.go",
            "kuberuntime_container.go",
            "kuberuntime_sandbox.go",
            "kuberuntime_gc.go",
            "docker_service.go",
            "docker_sandbox.go",
            "docker_container.go",
            "reconciler.go",
            "reconciler_common.go",
            "operation_generator.go",
            "volume_manager.go",
            "eviction_manager.go",
            "container_manager_linux.go",
            "remote_runtime.go",
            "remote_image.go",
            "status_manager.go",
            "prober.go",
            "hostport_manager.go",
            "hostport_syncer.go",
            "kubenet_linux.go",
            "image_gc_manager.go",
            "cgroup_manager_linux.go",
            "qos_container_manager_linux.go",
            "nestedpendingoperations.go",
            "csi_plugin.go",
            "csi_attacher.go",
            "csi_mounter.go",
            "kubelet_node_declared_features.go",
            "runonce.go",
        ],
        "kubelet",
    ),
    # kube-router's own files (messages/kube-router.yaml's sources: every tag v1.0-v2.11), but for
    # the names others share (utils.go, metrics.go, ipset.go, iptables.go, node.go, pod.go, policy.go)
    **dict.fromkeys(
        [
            "network_policy_controller.go",
            "network_routes_controller.go",
            "network_services_controller.go",
            "kube-router.go",
            "bgp_peers.go",
            "bgp_policies.go",
            "ecmp_vip.go",
            "service_endpoints_sync.go",
            "health_controller.go",
            "metrics_controller.go",
            "network_service_graceful.go",
            "linux_networking.go",
            "hairpin_controller.go",
            "nodeport_healthcheck.go",
            "npc_iptables.go",
            "npc_nftables.go",
            "route_sync.go",
            "pod_egress.go",
        ],
        "kube-router",
    ),
    # flanneld's own files (messages/flannel.yaml's sources: every tag v0.6-v0.28), but for the
    # names kube-proxy's files share (iptables.go, nftables.go, utils.go, config.go) and the ones
    # every Go program may have (main.go, device.go, registry.go, watch.go, lease.go, retry.go)
    **dict.fromkeys(
        [
            "vxlan.go",
            "vxlan_network.go",
            "hostgw.go",
            "hostgw_network.go",
            "route_network.go",
            "ipmasq.go",
            "local_manager.go",
            "kube.go",
            "match.go",
            "iptables_restore.go",
            "subnet.go",
            "iface.go",
            "cluster_cidr.go",
        ],
        "flannel",
    ),
    # antrea-agent's own files (messages/antrea.yaml's sources: v1.0-v2.7) and its OpenFlow
    # library's (antrea.io/ofnet: ofctrl.go, ofSwitch.go), but for the names kube-proxy's files
    # share (proxier.go, iptables.go, service_health.go, endpointslicecache.go) and the ones any
    # Go program may have (agent.go, server.go, client.go, main.go, net_linux.go)
    **dict.fromkeys(
        [
            "ovs_client.go",
            "ofctrl_bridge.go",
            "ofctrl.go",
            "ofSwitch.go",
            "route_linux.go",
            "agent_linux.go",
            "node_route_controller.go",
            "pod_configuration.go",
            "pod_configuration_linux.go",
            "interface_configuration_linux.go",
        ],
        "antrea",
    ),
}
# Messages only one component prints (searched in the record's first line and the hit's line).
# In this order: a kubelet event about the kube-proxy Pod is kubelet's. A word such as
# "kube-proxy" or "iptables" says nothing about who wrote the line.
_MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    # kubelet's events and messages (pkg/kubelet/events: FailedMount, FailedCreatePodSandBox;
    # kuberuntime's "Failed to create pod sandbox": a CNI plugin's failure, reported by kubelet)
    (
        lazy_re.compile(
            r"MountVolume\.|UnmountVolume\.|FailedMount|Error syncing pod|hostPath type check failed|"
            r"FailedCreatePodSandBox|Failed to create pod sandbox"
        ),
        "kubelet",
    ),
    (lazy_re.compile(r"Failed to ensure iptables rules|[Ff]lannel"), "flannel"),
    (lazy_re.compile(r"Using (?:iptables|ipvs|nftables|userspace) [Pp]rox|[Ss]yncProxyRules"), "kube-proxy"),
    # client-go's source path as a Go module build without -trimpath names it: a program built
    # from its own module (CoreDNS, a CNI agent, a controller). kube-proxy is built in the
    # Kubernetes tree (vendored: `k8s.io/client-go/...`), k3s with -trimpath (no `pkg/mod/`).
    (lazy_re.compile(r"pkg/mod/k8s\.io/client-go@"), "a client-go program"),
)
_DMESG_HEAD = lazy_re.compile(r"\[\s*\d+\.\d+\] ")


def _named(name: str) -> str | None:
    m = _NAMED.search(name)
    return _NAMES[m.lastgroup] if m is not None and m.lastgroup else None


def _source_file(header: str) -> str | None:
    m = KLOG_HEADER.match(header)
    src = m.group("src") if m else None
    if src is None:
        f = FELIX.match(header)
        if f is not None:
            return "calico-node"  # Calico's own format
        if WEAVE.match(header) is not None:
            return "weave"  # Weave Net's own format
        if CILIUM.search(header) is not None:
            return "cilium"  # Cilium's logrus fields (subsys=)
        if COREDNS.match(header) is not None:
            return "coredns"  # CoreDNS's bracketed level
        return None
    base = src.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return _SOURCE_FILES.get(base) or ("kube-proxy" if base in kube_proxy_files() else None)


# Catalogue components kube-proxy's own lines carry the texts of: the tools it runs and the
# libraries and kernel whose errors it prints inside its own messages, and the clients' errors
# those hold. A line whose message is only another program's (kubelet, an agent) is that program's.
_INSIDE_KUBE_PROXY = frozenset(
    {"kube-proxy", "iptables", "ipset", "conntrack", "nft", "kernel", "client-go", "apiserver"}
)


def _program_of_message(line: str) -> str | None:
    """The program a line's message belongs to, when it is one of the programs kube-proxy does not
    run or print (an agent whose source files have kube-proxy's names), else None."""
    from kpdoctor.messages import matcher  # the catalogue is read only when a line is cited

    found = matcher().match(line)
    if not found or found[0].message.client:
        return None
    component = found[0].message.component
    return None if component in _INSIDE_KUBE_PROXY else component


def writer_of(source: str | None, header: str, text: str = "") -> str | None:
    """Which component wrote a log record: ``source`` is what its wrapper named (a syslog
    identifier or a container, ``Unwrapped.source``), ``header`` the record's first line and
    ``text`` the matched line, both unwrapped. None when the line does not tell.

    A component's own identifier wins; an all-in-one binary (k3s, localkube...) is resolved by
    the source file; then the source file, the format, and messages only one component prints.
    """
    named = _named(source) if source else None
    if named is not None:
        return named
    by_file = _source_file(header)
    if by_file == "kube-proxy":  # a name others' files share (antrea's proxier.go): its message may tell
        return _program_of_message(text or header) or by_file
    if by_file is not None:
        return by_file
    if _DMESG_HEAD.match(header):
        return "kernel"
    lines = (header, text) if text and text != header else (header,)
    for rx, name in _MESSAGES:
        if any(rx.search(line) for line in lines):
            return name
    if source and source.lower() in ALL_IN_ONE:
        return source.lower()
    return None
